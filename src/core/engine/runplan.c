/*
 * runplan.c — a stored plan resolved into the run plan (runplan.h).
 *
 * The plan was checked by the compiler when it was stored, so a name that
 * resolves nowhere here is a route to nothing, as the old engine treated it;
 * only a text that is not a plan at all is refused.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include "core/lang/compile.h"
#include "core/expr/expr.h"
#include "runplan.h"
#include "states.h"

/* A malloc'd copy of a string (NULL stays NULL). */
static char *
dup_str(const char *s)
{
	return s ? strdup(s) : NULL;
}

/* A string member of a plan object, or NULL. */
static const char *
str_member(json_object *o, const char *key)
{
	json_object *v;

	if (o && json_object_object_get_ex(o, key, &v) && json_object_is_type(v, json_type_string))
		return json_object_get_string(v);
	return NULL;
}

/* An array member of a plan object, or NULL. */
static json_object *
arr_member(json_object *o, const char *key)
{
	json_object *v;

	if (o && json_object_object_get_ex(o, key, &v) && json_object_is_type(v, json_type_array))
		return v;
	return NULL;
}

/* A number member, or dflt. */
static double
num_member(json_object *o, const char *key, double dflt)
{
	json_object *v;

	if (o && json_object_object_get_ex(o, key, &v) &&
		(json_object_is_type(v, json_type_int) || json_object_is_type(v, json_type_double)))
		return json_object_get_double(v);
	return dflt;
}

/* A boolean member, or dflt. */
static int
bool_member(json_object *o, const char *key, int dflt)
{
	json_object *v;

	if (o && json_object_object_get_ex(o, key, &v) && json_object_is_type(v, json_type_boolean))
		return json_object_get_boolean(v);
	return dflt;
}

/* Route target of a name: a stage, a terminal intent, or nothing. */
static int
target_of(const wfe_run_plan *rp, const char *name)
{
	int			i;

	if (name == NULL)
		return WFE_TO_NONE;
	if (strcmp(name, "completed") == 0)
		return WFE_TO_COMPLETED;
	if (strcmp(name, "failed") == 0)
		return WFE_TO_FAILED;
	i = wfe_run_plan_find(rp, name);
	return i >= 0 ? i : WFE_TO_NONE;
}

int
wfe_run_plan_find(const wfe_run_plan *rp, const char *name)
{
	for (int i = 0; i < rp->nstages; i++)
		if (strcmp(rp->stages[i].name, name) == 0)
			return i;
	return -1;
}

/* Stage indexes of a list of names (unknown names dropped). */
static int *
index_list(const wfe_run_plan *rp, json_object *names, int *n)
{
	size_t		len = names ? json_object_array_length(names) : 0;
	int		   *out = calloc(len ? len : 1, sizeof(int));

	*n = 0;
	for (size_t i = 0; i < len; i++)
	{
		json_object *v = json_object_array_get_idx(names, i);
		int			t = json_object_is_type(v, json_type_string)
			? wfe_run_plan_find(rp, json_object_get_string(v)) : -1;

		if (t >= 0)
			out[(*n)++] = t;
	}
	return out;
}

static void
read_retry(json_object *o, wfe_retry *r)
{
	const char *jitter = str_member(o, "jitter");

	r->max_attempts = (int) num_member(o, "max_attempts", 1);
	r->initial_ms = num_member(o, "initial_ms", 0);
	r->multiplier = num_member(o, "multiplier", 1);
	r->max_ms = num_member(o, "max_ms", 0);
	r->jitter = !jitter ? WFE_JITTER_NONE :
		strcmp(jitter, "full") == 0 ? WFE_JITTER_FULL :
		strcmp(jitter, "equal") == 0 ? WFE_JITTER_EQUAL : WFE_JITTER_NONE;
}

/* Collects what a template's `${...}` references read. */
typedef struct ref_scan
{
	const wfe_run_plan *rp;
	wfe_expr_form form;
	unsigned	roots;
	int			all_stages;
	int			n;
	int			cap;
	int		   *stages;
} ref_scan;

static void
scan_add_stage(ref_scan *sc, const char *name)
{
	int			t = wfe_run_plan_find(sc->rp, name);

	if (t < 0)
		return;					/* binding will say it is missing */
	for (int i = 0; i < sc->n; i++)
		if (sc->stages[i] == t)
			return;
	if (sc->n == sc->cap)
	{
		sc->cap = sc->cap ? sc->cap * 2 : 4;
		sc->stages = realloc(sc->stages, sc->cap * sizeof(int));
	}
	sc->stages[sc->n++] = t;
}

/* wfe_stage_ref_cb for decision expressions. */
static void
scan_expr_ref(void *arg, const char *stage, int offset)
{
	(void) offset;
	scan_add_stage((ref_scan *) arg, stage);
}

/* Scan one template string for `${PATH}` (`$${` is a literal). */
static void
scan_string(ref_scan *sc, const char *s, size_t len)
{
	for (size_t i = 0; i + 1 < len; i++)
	{
		size_t		j;
		wfe_path	p;
		wfe_expr_error err;

		if (s[i] == '$' && s[i + 1] == '$' && i + 2 < len && s[i + 2] == '{')
		{
			i += 2;
			continue;
		}
		if (s[i] != '$' || s[i + 1] != '{')
			continue;
		j = wfe_interp_close(s, len, i + 2);
		memset(&p, 0, sizeof(p));
		if (j < len && wfe_path_parse(s + i + 2, j - i - 2, sc->form, &p, &err) == 0)
		{
			if (strcmp(p.root, "context") == 0)
				sc->roots |= WFE_REF_CONTEXT;
			else if (strcmp(p.root, "outputs") == 0)
				sc->roots |= WFE_REF_OUTPUTS;
			else if (strcmp(p.root, "run") == 0)
				sc->roots |= WFE_REF_RUN;
			else if (strncmp(p.root, "item", 4) == 0)
				sc->roots |= WFE_REF_ITEM;
			else if (strcmp(p.root, "stages") == 0)
			{
				sc->roots |= WFE_REF_STAGES;
				if (p.nsegments > 0 && !p.segments[0].is_index)
					scan_add_stage(sc, p.segments[0].key);
				else
					sc->all_stages = 1;
			}
			wfe_path_free(&p);
		}
		else
		{
			/* binding will report it; read everything it could mean */
			sc->roots |= WFE_REF_CONTEXT | WFE_REF_STAGES | WFE_REF_OUTPUTS | WFE_REF_RUN | WFE_REF_ITEM;
			sc->all_stages = 1;
		}
		i = j;
	}
}

/* Walk a template; returns whether any string value interpolates. */
static int
scan_template(ref_scan *sc, json_object *t, int depth)
{
	int			found = 0;

	if (t == NULL || depth > 128)
		return 0;
	switch (json_object_get_type(t))
	{
		case json_type_string:
			{
				const char *s = json_object_get_string(t);

				if (strstr(s, "${") == NULL)
					return 0;
				scan_string(sc, s, (size_t) json_object_get_string_len(t));
				return 1;
			}
		case json_type_array:
			for (size_t i = 0; i < json_object_array_length(t); i++)
				found |= scan_template(sc, json_object_array_get_idx(t, i), depth + 1);
			return found;
		case json_type_object:
			{
				json_object_object_foreach(t, k, v)
				{
					(void) k;
					found |= scan_template(sc, v, depth + 1);
				}
				return found;
			}
		default:
			return 0;
	}
}

/* The bit of each state name in a join's acceptable_terminal_states. */
static unsigned
state_mask(json_object *names)
{
	unsigned	mask = 0;

	for (size_t i = 0; names && i < json_object_array_length(names); i++)
	{
		json_object *v = json_object_array_get_idx(names, i);
		int			s = json_object_is_type(v, json_type_string)
			? wfe_state_from_name(json_object_get_string(v)) : -1;

		if (s >= 0)
			mask |= 1u << s;
	}
	return mask;
}

/* Append t to a stage's successor list (a growing array). */
static void
add_edge(int **succ, int *nsucc, int *cap, int from, int t)
{
	if (t < 0)
		return;
	if (nsucc[from] == cap[from])
	{
		cap[from] = cap[from] ? cap[from] * 2 : 4;
		succ[from] = realloc(succ[from], sizeof(int) * cap[from]);
	}
	succ[from][nsucc[from]++] = t;
}

/*
 * Fill the reachability matrix over the plan's edges (wfe.plan_edges:
 * routes, decision branches, fork -> branch head, branch head -> join):
 * a breadth-first walk from every stage.
 */
static void
build_reach(wfe_run_plan *rp)
{
	int			n = rp->nstages;
	size_t		cells = (size_t) n * (size_t) n;
	int		  **succ = calloc(n + 1, sizeof(int *));
	int		   *nsucc = calloc(n + 1, sizeof(int));
	int		   *cap = calloc(n + 1, sizeof(int));
	int		   *queue = malloc(sizeof(int) * (n + 1));

	for (int a = 0; a < n; a++)
	{
		const wfe_rp_stage *s = &rp->stages[a];

		add_edge(succ, nsucc, cap, a, s->on_success);
		add_edge(succ, nsucc, cap, a, s->on_failure);
		add_edge(succ, nsucc, cap, a, s->on_evaluation_error);
		add_edge(succ, nsucc, cap, a, s->on_timeout);
		for (int k = 0; k < s->nbranches; k++)
			add_edge(succ, nsucc, cap, a, s->next[k]);
		for (int k = 0; k < s->ntargets; k++)
		{
			if (s->kind == WFE_K_FORK)
				add_edge(succ, nsucc, cap, a, s->targets[k]);
			else if (s->kind == WFE_K_JOIN)
				add_edge(succ, nsucc, cap, s->targets[k], a);
		}
	}
	rp->reach = calloc(cells ? cells : 1, 1);
	for (int a = 0; a < n; a++)
	{
		uint8_t    *row = rp->reach + (size_t) a * n;
		int			head = 0,
					tail = 0;

		row[a] = 1;
		queue[tail++] = a;
		while (head < tail)
		{
			int			from = queue[head++];

			for (int k = 0; k < nsucc[from]; k++)
				if (!row[succ[from][k]])
				{
					row[succ[from][k]] = 1;
					queue[tail++] = succ[from][k];
				}
		}
	}
	for (int a = 0; a < n; a++)
		free(succ[a]);
	free(succ);
	free(nsucc);
	free(cap);
	free(queue);
}

/* Resolve one plan stage object into rp->stages[i] (names are all known). */
static void
read_stage(wfe_run_plan *rp, int i, json_object *o)
{
	wfe_rp_stage *s = &rp->stages[i];
	json_object *list;
	json_object *outer = o;

	s->max_concurrency = -1;
	if (s->kind == WFE_K_MAP)
	{
		/* a map's own keys; its item's executor keys are read below as a worker's */
		json_object *items = json_object_new_object();

		json_object_object_add(items, "items", json_object_get(json_object_object_get(o, "items")));
		json_object_object_add(o, "wfe_items_template", items);	/* the plan object owns it */
		s->items = items;
		s->max_concurrency = (int64_t) num_member(o, "max_concurrency", -1);
		s->tolerated_failures = (int64_t) num_member(o, "tolerated_failures", 0);
		if (json_object_is_type(json_object_object_get(o, "item"), json_type_object))
			o = json_object_object_get(o, "item");
		s->item_worker = str_member(o, "worker") != NULL;
		s->item_workflow = str_member(o, "workflow") != NULL;
		s->item_queue = str_member(o, "queue");
	}
	s->on_success = target_of(rp, str_member(outer, "on_success"));
	s->on_failure = target_of(rp, str_member(outer, "on_failure"));
	s->on_evaluation_error = target_of(rp, str_member(o, "on_evaluation_error"));
	s->on_success_name = str_member(outer, "on_success");
	s->on_failure_name = str_member(outer, "on_failure");
	s->on_evaluation_error_name = str_member(o, "on_evaluation_error");
	s->fork = -1;
	s->awaits = bool_member(outer, "awaits", 1);
	s->critical = bool_member(outer, "critical", 0);
	s->allow_skipped = str_member(outer, "dependency_policy") &&
		strcmp(str_member(outer, "dependency_policy"), "allow_skipped") == 0;
	read_retry(json_object_object_get(o, "retry"), &s->retry);
	list = json_object_object_get(o, "cache");
	s->cache_ttl_ms = json_object_is_type(list, json_type_object)
		? (int64_t) num_member(list, "ttl_ms", -1) : -1;
	s->contract = str_member(o, "worker") ? str_member(o, "worker") :
		str_member(o, "action") ? str_member(o, "action") :
		str_member(o, "signal") ? str_member(o, "signal") : str_member(o, "workflow");
	s->on_timeout = s->on_failure;
	s->timeout_ms = -1;
	s->sleep_ms = -1;
	if (s->kind == WFE_K_WAIT)
	{
		if (str_member(o, "on_timeout"))
			s->on_timeout = target_of(rp, str_member(o, "on_timeout"));
		s->timeout_ms = (int64_t) num_member(o, "timeout_ms", -1);
		s->retry.max_attempts = 1;
	}
	if (s->kind == WFE_K_SLEEP)
	{
		/* a sleep that cannot bind its time and has no failure route fails the run */
		if (s->on_failure == WFE_TO_NONE)
			s->on_failure = s->on_timeout = WFE_TO_FAILED;
		s->sleep_ms = (int64_t) num_member(o, "duration_ms", -1);
		s->retry.max_attempts = 1;
	}

	if (s->kind == WFE_K_DECISION && (list = arr_member(o, "branches")) != NULL)
	{
		s->branches = list;
		s->nbranches = (int) json_object_array_length(list);
		s->when = calloc(s->nbranches + 1, sizeof(wfe_expr *));
		s->next = calloc(s->nbranches + 1, sizeof(int));
		s->next_name = calloc(s->nbranches + 1, sizeof(char *));
		for (int k = 0; k < s->nbranches; k++)
		{
			json_object *b = json_object_array_get_idx(list, k);
			const char *when = str_member(b, "when");
			wfe_expr_error err;

			s->next[k] = target_of(rp, str_member(b, "next"));
			s->next_name[k] = str_member(b, "next");
			if (when)
				s->when[k] = wfe_expr_parse(when, strlen(when), NULL, &err);
		}
	}
	if (s->kind == WFE_K_FORK)
		s->targets = index_list(rp, arr_member(o, "branches"), &s->ntargets);
	if (s->kind == WFE_K_JOIN)
	{
		s->targets = index_list(rp, arr_member(o, "required"), &s->ntargets);
		s->acceptable = state_mask(arr_member(o, "acceptable_terminal_states"));
	}
	o = outer;
	if (rp->tasks_form && s->kind != WFE_K_FINALISER)
	{
		s->deps = index_list(rp, arr_member(o, "depends_on"), &s->ndeps);
		if ((list = arr_member(o, "contexts")) != NULL)
		{
			s->ncontexts = (int) json_object_array_length(list);
			s->contexts = calloc(s->ncontexts + 1, sizeof(char *));
			for (int k = 0; k < s->ncontexts; k++)
				s->contexts[k] = dup_str(json_object_get_string(json_object_array_get_idx(list, k)));
		}
		else
			s->ncontexts = -1;
		if ((list = arr_member(o, "produces")) != NULL)
		{
			s->nproduces = (int) json_object_array_length(list);
			s->produces = calloc(s->nproduces + 1, sizeof(wfe_produce));
			for (int k = 0; k < s->nproduces; k++)
			{
				json_object *p = json_object_array_get_idx(list, k);

				s->produces[k].key = dup_str(str_member(p, "key"));
				s->produces[k].type = dup_str(str_member(p, "type"));
			}
		}
		if ((list = arr_member(o, "requires_outputs")) != NULL)
		{
			s->nrequires = (int) json_object_array_length(list);
			s->requires = calloc(s->nrequires + 1, sizeof(wfe_require));
			for (int k = 0; k < s->nrequires; k++)
			{
				json_object *r = json_object_array_get_idx(list, k);
				const char *producer = str_member(r, "producer_task_id");

				s->requires[k].producer_name = dup_str(producer);
				s->requires[k].producer = producer ? wfe_run_plan_find(rp, producer) : -1;
				s->requires[k].key = dup_str(str_member(r, "key"));
			}
		}
	}
	else
		s->ncontexts = -1;

	/* what binding and decisions read */
	{
		ref_scan	sc;
		int			items_refs;

		memset(&sc, 0, sizeof(sc));
		sc.rp = rp;
		sc.form = rp->tasks_form ? WFE_FORM_TASKS : WFE_FORM_STAGES;
		items_refs = s->kind == WFE_K_MAP && scan_template(&sc, s->items, 0);
		if (s->kind == WFE_K_ACTION || s->kind == WFE_K_WORKER || s->kind == WFE_K_WORKFLOW ||
			s->kind == WFE_K_MAP)
		{
			/* a map's executor keys are its item's (core/lang/plan.c) */
			json_object *exec = s->kind == WFE_K_MAP && json_object_object_get(o, "item") ?
				json_object_object_get(o, "item") : o;
			json_object *input = json_object_object_get(exec, "input");

			s->input = input;
			s->input_text = input ? wfe_canonical_json(input) : strdup("{}");
			/* a map's items read the roots its item inputs may read too */
			if (!scan_template(&sc, input, 0) && !items_refs)
				sc.roots = 0;
			/* a keyed rate limit's key binds over the same root as the input */
			if (json_object_get_type(json_object_object_get(exec, "rate_limit")) == json_type_object)
			{
				json_object *key = json_object_object_get(json_object_object_get(exec, "rate_limit"), "key");

				if (json_object_get_type(key) == json_type_string)
				{
					s->rate_key = key;
					if (!scan_template(&sc, key, 0))
						sc.roots = 0;
				}
			}
			/* so does a keyed concurrency's key (dsl.md "Flow-control keys"; a map's: its item's) */
			if (json_object_get_type(json_object_object_get(exec, "concurrency")) == json_type_object)
			{
				json_object *c = json_object_object_get(exec, "concurrency");
				json_object *key = json_object_object_get(c, "key");
				json_object *max = json_object_object_get(c, "max");

				if (json_object_get_type(key) == json_type_string &&
					json_object_get_type(max) == json_type_int && json_object_get_int64(max) >= 1)
				{
					s->concurrency_key = key;
					s->concurrency_max = (int) json_object_get_int64(max);
					if (!scan_template(&sc, key, 0))
						sc.roots = 0;
				}
			}
		}
		else if (s->kind == WFE_K_SLEEP && str_member(o, "until"))
		{
			/* `until` binds like an input {"until": ...}; the plan object owns it */
			json_object *input = json_object_new_object();

			json_object_object_add(input, "until", json_object_new_string(str_member(o, "until")));
			json_object_object_add(o, "wfe_until_input", input);
			s->input = input;
			s->input_text = wfe_canonical_json(input);
			if (!scan_template(&sc, input, 0))
				sc.roots = 0;
		}
		for (int k = 0; k < s->nbranches; k++)
		{
			wfe_expr_error err;

			if (s->when[k] == NULL ||
				wfe_expr_check(s->when[k], sc.form, scan_expr_ref, &sc, &err) != 0)
				sc.all_stages = 1;
		}
		s->input_refs = sc.roots;
		s->nstage_refs = sc.all_stages ? -1 : sc.n;
		s->stage_refs = sc.stages;
	}
}

wfe_run_plan *
wfe_run_plan_build(int64_t definition_id, const char *plan_json, char *err, int errlen)
{
	json_object *plan = wfe_json_parse(plan_json);
	json_object *stages,
			   *finalisers;
	const char *form;
	wfe_run_plan *rp;
	int			nst,
				nfin;

	if (plan == NULL || (stages = arr_member(plan, "stages")) == NULL)
	{
		snprintf(err, errlen, "definition %lld: the stored plan has no stages list",
				 (long long) definition_id);
		wfe_json_free(plan);
		return NULL;
	}
	finalisers = arr_member(plan, "finalisers");
	nst = (int) json_object_array_length(stages);
	nfin = finalisers ? (int) json_object_array_length(finalisers) : 0;

	rp = calloc(1, sizeof(*rp));
	rp->definition_id = definition_id;
	rp->plan = plan;
	form = str_member(plan, "form");
	rp->tasks_form = form && strcmp(form, "tasks") == 0;
	rp->nstages = nst + nfin;
	rp->nfinalisers = nfin;
	rp->first_finaliser = nst;
	if (json_object_object_get_ex(plan, "output", &rp->output) &&
		!json_object_is_type(rp->output, json_type_object))
		rp->output = NULL;
	if (json_object_object_get_ex(plan, "context_schema", &rp->context_schema) &&
		!json_object_is_type(rp->context_schema, json_type_object) &&
		!json_object_is_type(rp->context_schema, json_type_boolean))
		rp->context_schema = NULL;
	rp->stages = calloc(rp->nstages ? rp->nstages : 1, sizeof(wfe_rp_stage));

	/* names first, so that every reference resolves */
	for (int i = 0; i < rp->nstages; i++)
	{
		json_object *o = i < nst ? json_object_array_get_idx(stages, i)
			: json_object_array_get_idx(finalisers, i - nst);
		const char *type = str_member(o, "type");
		const char *name = str_member(o, "name");
		wfe_rp_stage *s = &rp->stages[i];

		s->name = strdup(name ? name : "");
		s->ordinal = i + 1;
		s->kind = i >= nst ? WFE_K_FINALISER :
			!type ? WFE_K_ACTION :
			strcmp(type, "worker") == 0 ? WFE_K_WORKER :
			strcmp(type, "decision") == 0 ? WFE_K_DECISION :
			strcmp(type, "fork") == 0 ? WFE_K_FORK :
			strcmp(type, "join") == 0 ? WFE_K_JOIN :
			strcmp(type, "wait") == 0 ? WFE_K_WAIT :
			strcmp(type, "sleep") == 0 ? WFE_K_SLEEP :
			strcmp(type, "workflow") == 0 ? WFE_K_WORKFLOW :
			strcmp(type, "map") == 0 ? WFE_K_MAP : WFE_K_ACTION;
	}
	for (int i = 0; i < rp->nstages; i++)
		read_stage(rp, i, i < nst ? json_object_array_get_idx(stages, i)
				   : json_object_array_get_idx(finalisers, i - nst));
	rp->entry = rp->tasks_form ? -1 : wfe_run_plan_find(rp, str_member(plan, "entry") ?
													   str_member(plan, "entry") : "");

	/* each join's fork: the first whose branches include every required one */
	for (int j = 0; j < nst; j++)
	{
		wfe_rp_stage *js = &rp->stages[j];

		if (js->kind != WFE_K_JOIN)
			continue;
		for (int f = 0; f < nst && js->fork < 0; f++)
		{
			const wfe_rp_stage *fs = &rp->stages[f];
			int			all = fs->kind == WFE_K_FORK;

			for (int k = 0; all && k < js->ntargets; k++)
			{
				int			hit = 0;

				for (int m = 0; m < fs->ntargets; m++)
					hit |= fs->targets[m] == js->targets[k];
				all = hit;
			}
			if (all)
				js->fork = f;
		}
	}

	/* tasks form: each task's dependents, in ordinal order */
	if (rp->tasks_form)
		for (int i = 0; i < nst; i++)
			for (int k = 0; k < rp->stages[i].ndeps; k++)
			{
				wfe_rp_stage *d = &rp->stages[rp->stages[i].deps[k]];

				d->dependents = realloc(d->dependents, sizeof(int) * (d->ndependents + 1));
				d->dependents[d->ndependents++] = i;
			}

	build_reach(rp);
	return rp;
}

void
wfe_run_plan_free(wfe_run_plan *rp)
{
	if (rp == NULL)
		return;
	for (int i = 0; i < rp->nstages; i++)
	{
		wfe_rp_stage *s = &rp->stages[i];

		free(s->name);
		for (int k = 0; k < s->nbranches; k++)
			wfe_expr_free(s->when[k]);
		free(s->when);
		free(s->next);
		free(s->next_name);
		free(s->input_text);
		free(s->targets);
		free(s->stage_refs);
		free(s->deps);
		free(s->dependents);
		for (int k = 0; k < s->ncontexts; k++)
			free(s->contexts[k]);
		free(s->contexts);
		for (int k = 0; k < s->nproduces; k++)
		{
			free(s->produces[k].key);
			free(s->produces[k].type);
		}
		free(s->produces);
		for (int k = 0; k < s->nrequires; k++)
		{
			free(s->requires[k].producer_name);
			free(s->requires[k].key);
		}
		free(s->requires);
	}
	free(rp->stages);
	free(rp->reach);
	wfe_json_free(rp->plan);
	free(rp);
}
