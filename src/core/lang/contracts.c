/*
 * contracts.c — the contracts layer: every action, worker and finaliser
 * names a registered contract of the right kind (a wait: a signal), a worker's queue is its
 * contract's queue, and what a stage's input statically binds can satisfy the
 * contract's input schema.  Runs only when a registry is given (always in
 * the database; with --contracts FILE in the CLI).
 */
#include <ctype.h>
#include <string.h>

#include "model.h"

/* The registry entry of `ref`, or NULL. */
static json_object *
find_contract(const wfe_model *m, const char *ref)
{
	json_object *list = m->opts->contracts;
	size_t		n = json_object_array_length(list);

	for (size_t i = 0; i < n; i++)
	{
		json_object *c = json_object_array_get_idx(list, i);
		json_object *r;

		if (json_object_object_get_ex(c, "ref", &r) &&
			json_object_is_type(r, json_type_string) &&
			strcmp(json_object_get_string(r), ref) == 0)
			return c;
	}
	return NULL;
}

/* A string member of a JSON object, or NULL. */
static const char *
string_member(json_object *o, const char *key)
{
	json_object *v;

	if (o && json_object_object_get_ex(o, key, &v) && json_object_is_type(v, json_type_string))
		return json_object_get_string(v);
	return NULL;
}

/* The JSON-Schema type name a YAML value statically has, or NULL if unknown. */
static const char *
static_type(const wfe_model *m, const wfe_ynode *n)
{
	if (n->kind == WFE_Y_MAP)
		return "object";
	if (n->kind == WFE_Y_SEQ)
		return "array";
	switch (n->type)
	{
		case WFE_YS_NULL:
			return "null";
		case WFE_YS_BOOL:
			return "boolean";
		case WFE_YS_INT:
			return "integer";
		case WFE_YS_FLOAT:
			return "number";
		case WFE_YS_STRING:
			break;
	}
	/* exactly one ${context.a.b}: the type the context schema gives it */
	if (n->len > 3 && strncmp(n->text, "${", 2) == 0 && n->text[n->len - 1] == '}' &&
		strstr(n->text + 2, "${") == NULL)
	{
		const char *body = n->text + 2;
		size_t		blen = n->len - 3;
		const wfe_ynode *schema = m->context_schema;
		const char *seg;

		if (blen > 8 && strncmp(body, "context.", 8) == 0)
			seg = body + 8;
		else if (blen > 8 && strncmp(body, "payload.", 8) == 0)
			seg = body + 8;
		else
			return NULL;
		/* follow simple dotted names through properties */
		while (schema && *seg && seg < body + blen)
		{
			const char *dot = memchr(seg, '.', body + blen - seg);
			size_t		slen = dot ? (size_t) (dot - seg) : (size_t) (body + blen - seg);
			const wfe_ynode *props = wfe_ymap_get(schema, "properties");
			const wfe_ynode *next = NULL;

			for (int i = 0; props && props->kind == WFE_Y_MAP && i < props->n; i++)
				if (strlen(props->keys[i]->text) == slen &&
					strncmp(props->keys[i]->text, seg, slen) == 0)
					next = props->items[i];
			schema = next;
			seg = dot ? dot + 1 : body + blen;
		}
		if (schema && schema->kind == WFE_Y_MAP)
		{
			const wfe_ynode *t = wfe_ymap_get(schema, "type");

			if (t && t->kind == WFE_Y_SCALAR && t->type == WFE_YS_STRING)
				return t->text;
		}
		return NULL;
	}
	return "string";
}

/* Can a value of static type `have` satisfy schema type `want`? */
static int
type_fits(const char *have, const char *want)
{
	if (strcmp(have, want) == 0)
		return 1;
	return strcmp(want, "number") == 0 && strcmp(have, "integer") == 0;
}

/* Input mapping against the contract's input schema (top-level properties). */
static void
check_input(wfe_model *m, const wfe_stage *s, json_object *contract)
{
	json_object *schema,
			   *props = NULL,
			   *required = NULL;

	if (!json_object_object_get_ex(contract, "input_schema", &schema))
		return;
	/* the boolean schema false: no input can ever bind */
	if (json_object_is_type(schema, json_type_boolean) && !json_object_get_boolean(schema))
	{
		wfe_diag(m->diags, "contract.input_type", s->input ? s->input_path : s->ref.path,
				 s->input ? s->input->line : s->ref.line,
				 s->input ? s->input->column : s->ref.column,
				 "stage '%s' can never run: the input_schema of %s is false, which no input satisfies",
				 s->name, s->ref.name);
		return;
	}
	if (!json_object_is_type(schema, json_type_object))
		return;
	json_object_object_get_ex(schema, "properties", &props);
	json_object_object_get_ex(schema, "required", &required);

	if (required && json_object_is_type(required, json_type_array))
	{
		size_t		n = json_object_array_length(required);

		for (size_t i = 0; i < n; i++)
		{
			const char *key = json_object_get_string(json_object_array_get_idx(required, i));

			if (key && wfe_ymap_get(s->input, key) == NULL)
				wfe_diag(m->diags, "contract.input_type", s->input_path,
						 s->input ? s->input->line : s->line,
						 s->input ? s->input->column : s->column,
						 "stage '%s' input lacks '%s', which %s requires",
						 s->name, key, s->ref.name);
		}
	}
	if (s->input == NULL || props == NULL || !json_object_is_type(props, json_type_object))
		return;
	for (int i = 0; i < s->input->n; i++)
	{
		const char *key = s->input->keys[i]->text;
		json_object *prop;
		const char *want,
				   *have;

		if (!json_object_object_get_ex(props, key, &prop) ||
			(want = string_member(prop, "type")) == NULL ||
			(have = static_type(m, s->input->items[i])) == NULL)
			continue;
		if (!type_fits(have, want))
			wfe_diag(m->diags, "contract.input_type",
					 wfe_arena_printf(m->arena, "%s/%s", s->input_path, key),
					 s->input->items[i]->line, s->input->items[i]->column,
					 "stage '%s' input '%s' is %s, but %s wants %s",
					 s->name, key, have, s->ref.name, want);
	}
}

/* One action/worker stage against the registry. */
static void
check_stage(wfe_model *m, const wfe_stage *s)
{
	json_object *c;
	const char *kind,
			   *queue;
	int			worker = s->type == WFE_ST_WORKER || (s->type == WFE_ST_MAP && !s->item_action);
	const char *want = worker ? "worker" : "action";

	if (s->ref.name == NULL)
		return;
	c = find_contract(m, s->ref.name);
	if (c == NULL)
	{
		wfe_diag(m->diags, "contract.unknown", s->ref.path, s->ref.line, s->ref.column,
				 "no %s '%s' is registered", want, s->ref.name);
		return;
	}
	kind = string_member(c, "kind");
	if (kind == NULL || strcmp(kind, want) != 0)
	{
		wfe_diag(m->diags, "contract.disallowed", s->ref.path, s->ref.line, s->ref.column,
				 "'%s' is registered as %s %s, not as %s %s",
				 s->ref.name, kind && kind[0] == 'a' ? "an" : "a", kind ? kind : "?",
				 want[0] == 'a' ? "an" : "a", want);
		return;
	}
	queue = string_member(c, "queue");
	if (worker && s->queue.name &&
		(queue == NULL || strcmp(queue, s->queue.name) != 0))
		wfe_diag(m->diags, "contract.queue_mismatch", s->queue.path, s->queue.line, s->queue.column,
				 "stage '%s' sends to queue '%s', but %s consumes queue '%s'",
				 s->name, s->queue.name, s->ref.name, queue ? queue : "(none)");
	check_input(m, s, c);
}

/*
 * A decision reads a wait's result: the signal's payload.  Each
 * stages["W"].result.F (or stages.W.result.F) in a `when`, W a wait, must
 * name a field the payload can have: one of the schema's properties when
 * it allows no others (additionalProperties: false).
 */
static void
check_payload_reads(wfe_model *m, const wfe_stage *d, const wfe_branch *b)
{
	const char *p = b->when;

	while (p && (p = strstr(p, "stages")) != NULL)
	{
		const char *q = p + 6;
		const char *name;
		size_t		nlen;
		int			w;
		json_object *c,
				   *schema,
				   *props,
				   *extra;
		char		field[128];
		size_t		flen = 0;

		p = q;
		if (*q == '.')
		{
			name = ++q;
			while (*q && (isalnum((unsigned char) *q) || *q == '_'))
				q++;
			nlen = (size_t) (q - name);
		}
		else if (q[0] == '[' && (q[1] == '"' || q[1] == '\''))
		{
			char		quote = q[1];

			name = q + 2;
			q = strchr(name, quote);
			if (q == NULL || q[1] != ']')
				continue;
			nlen = (size_t) (q - name);
			q += 2;
		}
		else
			continue;
		if (strncmp(q, ".result.", 8) != 0)
			continue;
		q += 8;
		while (q[flen] && (isalnum((unsigned char) q[flen]) || q[flen] == '_') && flen < sizeof(field) - 1)
			flen++;
		memcpy(field, q, flen);
		field[flen] = '\0';
		w = -1;
		for (int i = 0; i < m->nstages; i++)
			if (m->stages[i].name && strlen(m->stages[i].name) == nlen &&
				strncmp(m->stages[i].name, name, nlen) == 0)
				w = i;
		if (flen == 0 || w < 0 || m->stages[w].type != WFE_ST_WAIT || m->stages[w].ref.name == NULL ||
			(c = find_contract(m, m->stages[w].ref.name)) == NULL ||
			!json_object_object_get_ex(c, "output_schema", &schema) ||
			!json_object_object_get_ex(schema, "properties", &props) ||
			!json_object_is_type(props, json_type_object) ||
			!json_object_object_get_ex(schema, "additionalProperties", &extra) ||
			!json_object_is_type(extra, json_type_boolean) || json_object_get_boolean(extra) ||
			json_object_object_get_ex(props, field, NULL))
			continue;
		wfe_diag(m->diags, "contract.result_type", b->when_path, b->when_line, b->when_column,
				 "decision '%s' reads %s.%s of wait '%s', but the payload of %s has no field '%s'",
				 d->name, "result", field, m->stages[w].name, m->stages[w].ref.name, field);
	}
}

/*
 * A workflow stage's child against the registry's workflows: NAME needs an
 * active version, NAME@VERSION an approved one (entries {"ref", "kind":
 * "workflow", "input_schema": its context_schema}); the bound input is
 * checked against the child's context_schema as an input against a
 * contract's input_schema.
 */
static void
check_child(wfe_model *m, const wfe_stage *s)
{
	json_object *list = m->opts->contracts;
	json_object *c = NULL;
	size_t		n = json_object_array_length(list);

	if (s->ref.name == NULL)
		return;
	/* a workflow entry of that ref (a contract may share the text NAME@VERSION) */
	for (size_t k = 0; k < n && c == NULL; k++)
	{
		json_object *e = json_object_array_get_idx(list, k);
		const char *ref = string_member(e, "ref");
		const char *kind = string_member(e, "kind");

		if (ref && kind && strcmp(ref, s->ref.name) == 0 && strcmp(kind, "workflow") == 0)
			c = e;
	}
	if (c == NULL)
	{
		wfe_diag(m->diags, "contract.unknown", s->ref.path, s->ref.line, s->ref.column,
				 strchr(s->ref.name, '@') ? "no approved workflow '%s'"
				 : "no active version of workflow '%s'", s->ref.name);
		return;
	}
	check_input(m, s, c);
}

/* A wait's signal against the registry: registered, and a signal. */
static void
check_wait(wfe_model *m, const wfe_stage *s)
{
	json_object *c;
	const char *kind;

	if (s->ref.name == NULL)
		return;
	c = find_contract(m, s->ref.name);
	kind = string_member(c, "kind");
	if (c == NULL)
		wfe_diag(m->diags, "contract.unknown", s->ref.path, s->ref.line, s->ref.column,
				 "no signal '%s' is registered", s->ref.name);
	else if (kind == NULL || strcmp(kind, "signal") != 0)
		wfe_diag(m->diags, "contract.disallowed", s->ref.path, s->ref.line, s->ref.column,
				 "'%s' is registered as %s %s, not as a signal",
				 s->ref.name, kind && kind[0] == 'a' ? "an" : "a", kind ? kind : "?");
}

void
wfe_contracts_check(wfe_model *m)
{
	if (m->opts->contracts == NULL ||
		!json_object_is_type(m->opts->contracts, json_type_array))
		return;
	for (int i = 0; i < m->nstages; i++)
		if (m->stages[i].type == WFE_ST_ACTION || m->stages[i].type == WFE_ST_WORKER ||
			(m->stages[i].type == WFE_ST_MAP && !m->stages[i].item_workflow))
			check_stage(m, &m->stages[i]);
		else if (m->stages[i].type == WFE_ST_WAIT)
			check_wait(m, &m->stages[i]);
		else if (m->stages[i].type == WFE_ST_WORKFLOW || m->stages[i].type == WFE_ST_MAP)
			check_child(m, &m->stages[i]);
		else if (m->stages[i].type == WFE_ST_DECISION)
			for (int k = 0; k < m->stages[i].nbranches; k++)
				check_payload_reads(m, &m->stages[i], &m->stages[i].branches[k]);
	for (int i = 0; i < m->nfinalisers; i++)
	{
		const wfe_name_ref *f = &m->finalisers[i];
		json_object *c;
		const char *kind;

		if (f->name == NULL)
			continue;
		c = find_contract(m, f->name);
		kind = string_member(c, "kind");
		if (c == NULL)
			wfe_diag(m->diags, "contract.unknown", f->path, f->line, f->column,
					 "no action '%s' is registered for this finaliser", f->name);
		else if (kind == NULL || strcmp(kind, "action") != 0)
			wfe_diag(m->diags, "contract.disallowed", f->path, f->line, f->column,
					 "finaliser '%s' is a %s; finalisers must be actions",
					 f->name, kind ? kind : "?");
	}
}
