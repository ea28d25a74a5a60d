/*
 * yamltree.c — libyaml events to a bounded tree with source positions.
 *
 * We read events rather than libyaml's document API because the document
 * API expands aliases and builds the whole tree before we could look at it;
 * an alias bomb or a 10,000-deep nesting must be refused while reading.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#include "yamltree.h"

/* Upper bound on nodes, so a 1 MiB flow sequence cannot take gigabytes. */
#define WFE_YAML_MAX_NODES 100000

#define TAG_PREFIX "tag:yaml.org,2002:"

/* A container being filled while its events arrive. */
typedef struct yframe
{
	wfe_ynode  *node;
	int			cap;
	wfe_ynode  *pending_key;	/* mapping: key waiting for its value */
} yframe;

typedef struct yloader
{
	wfe_arena  *arena;
	wfe_diags  *diags;
	yframe		stack[WFE_YAML_MAX_DEPTH + 1];
	int			depth;
	int			nodes;
	wfe_ynode  *root;
	int			failed;
} yloader;

/* Where the loader is now, as a JSON-pointer-like path ("/stages/3/input"). */
static const char *
current_path(yloader *l)
{
	char		buf[1024] = "";

	for (int i = 0; i < l->depth; i++)
	{
		const yframe *f = &l->stack[i];
		size_t		used = strlen(buf);

		if (f->node->kind == WFE_Y_MAP && f->pending_key && f->pending_key->text)
			snprintf(buf + used, sizeof(buf) - used, "/%s", f->pending_key->text);
		else if (f->node->kind == WFE_Y_SEQ)
			snprintf(buf + used, sizeof(buf) - used, "/%d", f->node->n);
	}
	return wfe_arena_strdup(l->arena, buf);
}

/* Report at a libyaml mark (0-based) as a 1-based position. */
static void
ydiag_at(yloader *l, const char *code, yaml_mark_t mark, const char *msg,
		 const char *detail)
{
	wfe_diag(l->diags, code, current_path(l), (int) mark.line + 1, (int) mark.column + 1,
			 "%s%s%s", msg, detail ? ": " : "", detail ? detail : "");
}

/* Case-sensitive match against a NULL-terminated list of spellings. */
static int
matches_any(const char *s, const char *const *words)
{
	for (; *words; words++)
		if (strcmp(s, *words) == 0)
			return 1;
	return 0;
}

/* Does s (whole) look like a YAML 1.2 core-schema integer?  Sets *v. */
static int
parse_core_int(const char *s, long long *v, int *overflow)
{
	const char *p = s;
	char	   *end;
	int			base = 10;

	*overflow = 0;
	if (strncmp(p, "0o", 2) == 0)
	{
		base = 8;
		p += 2;
	}
	else if (strncmp(p, "0x", 2) == 0)
	{
		base = 16;
		p += 2;
	}
	else if (*p == '-' || *p == '+')
		p++;
	if (*p == '\0')
		return 0;
	for (const char *q = p; *q; q++)
	{
		int			ok = base == 16 ? ((*q >= '0' && *q <= '9') ||
									   (*q >= 'a' && *q <= 'f') ||
									   (*q >= 'A' && *q <= 'F'))
			: base == 8 ? (*q >= '0' && *q <= '7')
			: (*q >= '0' && *q <= '9');

		if (!ok)
			return 0;
	}
	errno = 0;
	*v = strtoll(base == 10 ? s : p, &end, base);
	if (errno == ERANGE)
		*overflow = 1;
	return 1;
}

/* Does s look like a core-schema float?  Sets *v. */
static int
parse_core_float(const char *s, double *v)
{
	static const char *const inf[] = {".inf", ".Inf", ".INF", "+.inf", "+.Inf", "+.INF", NULL};
	static const char *const ninf[] = {"-.inf", "-.Inf", "-.INF", NULL};
	static const char *const nan_[] = {".nan", ".NaN", ".NAN", NULL};
	const char *p = s;
	int			digits = 0;
	char	   *end;

	if (matches_any(s, inf))
	{
		*v = INFINITY;
		return 1;
	}
	if (matches_any(s, ninf))
	{
		*v = -INFINITY;
		return 1;
	}
	if (matches_any(s, nan_))
	{
		*v = NAN;
		return 1;
	}
	/* [-+]? ( \. [0-9]+ | [0-9]+ ( \. [0-9]* )? ) ( [eE] [-+]? [0-9]+ )? */
	if (*p == '-' || *p == '+')
		p++;
	while (*p >= '0' && *p <= '9')
		p++, digits++;
	if (*p == '.')
	{
		p++;
		while (*p >= '0' && *p <= '9')
			p++, digits++;
	}
	if (digits == 0)
		return 0;
	if (*p == 'e' || *p == 'E')
	{
		int			edigits = 0;

		p++;
		if (*p == '-' || *p == '+')
			p++;
		while (*p >= '0' && *p <= '9')
			p++, edigits++;
		if (edigits == 0)
			return 0;
	}
	if (*p != '\0')
		return 0;
	*v = strtod(s, &end);
	return 1;
}

/* Resolve a plain (untagged, unquoted) scalar under the core schema. */
static void
resolve_plain(wfe_ynode *n)
{
	static const char *const nulls[] = {"", "~", "null", "Null", "NULL", NULL};
	static const char *const trues[] = {"true", "True", "TRUE", NULL};
	static const char *const falses[] = {"false", "False", "FALSE", NULL};
	int			overflow;

	if (matches_any(n->text, nulls))
		n->type = WFE_YS_NULL;
	else if (matches_any(n->text, trues))
		n->type = WFE_YS_BOOL, n->bval = 1;
	else if (matches_any(n->text, falses))
		n->type = WFE_YS_BOOL, n->bval = 0;
	else if (parse_core_int(n->text, &n->ival, &overflow))
	{
		n->type = overflow ? WFE_YS_FLOAT : WFE_YS_INT;
		if (overflow)
			n->dval = strtod(n->text, NULL);
	}
	else if (parse_core_float(n->text, &n->dval))
		n->type = WFE_YS_FLOAT;
	else
		n->type = WFE_YS_STRING;
}

/*
 * Resolve a scalar with an explicit core tag; returns 0 if the text does not
 * fit the tag (reported by the caller as schema.type).
 */
static int
resolve_tagged(wfe_ynode *n, const char *tag)
{
	const char *t = tag + strlen(TAG_PREFIX);
	wfe_ynode	probe = *n;
	int			overflow;

	if (strcmp(t, "str") == 0)
	{
		n->type = WFE_YS_STRING;
		return 1;
	}
	resolve_plain(&probe);
	if (strcmp(t, "null") == 0 && probe.type == WFE_YS_NULL)
		n->type = WFE_YS_NULL;
	else if (strcmp(t, "bool") == 0 && probe.type == WFE_YS_BOOL)
		n->type = WFE_YS_BOOL, n->bval = probe.bval;
	else if (strcmp(t, "int") == 0 && parse_core_int(n->text, &n->ival, &overflow) && !overflow)
		n->type = WFE_YS_INT;
	else if (strcmp(t, "float") == 0 && (probe.type == WFE_YS_FLOAT || probe.type == WFE_YS_INT))
		n->type = WFE_YS_FLOAT, n->dval = probe.type == WFE_YS_INT ? (double) probe.ival : probe.dval;
	else
		return 0;
	return 1;
}

/* Is `tag` acceptable on a node of this kind? (NULL and "!" always are.) */
static int
tag_allowed(const char *tag, wfe_ynode_kind kind)
{
	if (tag == NULL || strcmp(tag, "!") == 0)
		return 1;
	if (strncmp(tag, TAG_PREFIX, strlen(TAG_PREFIX)) != 0)
		return 0;
	tag += strlen(TAG_PREFIX);
	if (kind == WFE_Y_MAP)
		return strcmp(tag, "map") == 0;
	if (kind == WFE_Y_SEQ)
		return strcmp(tag, "seq") == 0;
	return strcmp(tag, "str") == 0 || strcmp(tag, "int") == 0 ||
		strcmp(tag, "float") == 0 || strcmp(tag, "bool") == 0 ||
		strcmp(tag, "null") == 0;
}

/* A new node at an event's start mark, counting against the node bound. */
static wfe_ynode *
new_node(yloader *l, wfe_ynode_kind kind, yaml_mark_t mark)
{
	wfe_ynode  *n;

	if (++l->nodes > WFE_YAML_MAX_NODES)
	{
		ydiag_at(l, "yaml.too_large", mark, "document has too many nodes", NULL);
		l->failed = 1;
		return NULL;
	}
	n = wfe_arena_alloc(l->arena, sizeof(wfe_ynode));
	n->kind = kind;
	n->line = (int) mark.line + 1;
	n->column = (int) mark.column + 1;
	return n;
}

/* Append child to a container frame (as key or value for mappings). */
static void
frame_add(yloader *l, yframe *f, wfe_ynode *child)
{
	wfe_ynode  *c = f->node;

	if (c->kind == WFE_Y_MAP && f->pending_key == NULL)
	{
		if (child->kind != WFE_Y_SCALAR)
			wfe_diag(l->diags, "schema.type", current_path(l), child->line, child->column,
					 "mapping keys must be scalars");
		f->pending_key = child;
		return;
	}
	if (c->n == f->cap)
	{
		int			ncap = f->cap ? f->cap * 2 : 8;
		wfe_ynode **items = wfe_arena_alloc(l->arena, sizeof(wfe_ynode *) * ncap);

		if (c->n)
			memcpy(items, c->items, sizeof(wfe_ynode *) * c->n);
		c->items = items;
		if (c->kind == WFE_Y_MAP)
		{
			wfe_ynode **keys = wfe_arena_alloc(l->arena, sizeof(wfe_ynode *) * ncap);

			if (c->n)
				memcpy(keys, c->keys, sizeof(wfe_ynode *) * c->n);
			c->keys = keys;
		}
		f->cap = ncap;
	}
	if (c->kind == WFE_Y_MAP)
	{
		c->keys[c->n] = f->pending_key;
		f->pending_key = NULL;
	}
	c->items[c->n++] = child;
}

/* Attach a finished node to its parent, or make it the root. */
static void
attach(yloader *l, wfe_ynode *n)
{
	if (l->depth == 0)
		l->root = n;
	else
		frame_add(l, &l->stack[l->depth - 1], n);
}

static const wfe_ynode *sort_keys_base;

/* qsort comparator: key text, then position (so the later duplicate is second). */
static int
cmp_key_index(const void *a, const void *b)
{
	int			ia = *(const int *) a,
				ib = *(const int *) b;
	int			c = strcmp(sort_keys_base->keys[ia]->text ? sort_keys_base->keys[ia]->text : "",
						   sort_keys_base->keys[ib]->text ? sort_keys_base->keys[ib]->text : "");

	return c != 0 ? c : ia - ib;
}

/* Report every key that repeats an earlier key of the same mapping. */
static void
check_duplicate_keys(yloader *l, const wfe_ynode *map)
{
	int		   *order;

	if (map->n < 2)
		return;
	order = malloc(sizeof(int) * map->n);
	if (order == NULL)
		abort();
	for (int i = 0; i < map->n; i++)
		order[i] = i;
	/* NB: single-threaded compiler, so a file-level base pointer is safe. */
	sort_keys_base = map;
	qsort(order, map->n, sizeof(int), cmp_key_index);
	for (int i = 1; i < map->n; i++)
	{
		const wfe_ynode *prev = map->keys[order[i - 1]];
		const wfe_ynode *key = map->keys[order[i]];

		if (prev->text && key->text && strcmp(prev->text, key->text) == 0)
			wfe_diag(l->diags, "yaml.duplicate_key",
					 wfe_arena_printf(l->arena, "%s/%s", current_path(l), key->text),
					 key->line, key->column,
					 "duplicate key '%s' (first at line %d, column %d)",
					 key->text, prev->line, prev->column);
	}
	free(order);
}

/* Refuse anchors: the language has no aliases, so an anchor is a mistake. */
static void
check_anchor(yloader *l, const yaml_char_t *anchor, yaml_mark_t mark)
{
	if (anchor != NULL)
		ydiag_at(l, "yaml.alias_forbidden", mark,
				 "anchors and aliases are not allowed in definitions", (const char *) anchor);
}

/* Handle a scalar event. */
static void
on_scalar(yloader *l, yaml_event_t *ev)
{
	wfe_ynode  *n;
	const char *tag = (const char *) ev->data.scalar.tag;

	check_anchor(l, ev->data.scalar.anchor, ev->start_mark);
	n = new_node(l, WFE_Y_SCALAR, ev->start_mark);
	if (n == NULL)
		return;
	if (ev->data.scalar.length > WFE_YAML_MAX_SCALAR)
	{
		wfe_diag(l->diags, "yaml.scalar_too_large", current_path(l), n->line, n->column,
				 "scalar of %zu bytes is over the limit of %d bytes",
				 ev->data.scalar.length, WFE_YAML_MAX_SCALAR);
		n->text = wfe_arena_strdup(l->arena, "");
		n->type = WFE_YS_NULL;
		attach(l, n);
		return;
	}
	n->text = wfe_arena_strndup(l->arena, (const char *) ev->data.scalar.value,
								ev->data.scalar.length);
	n->len = ev->data.scalar.length;
	if (strlen(n->text) != n->len)
		wfe_diag(l->diags, "yaml.syntax", current_path(l), n->line, n->column,
				 "scalar contains a NUL character");

	if (!tag_allowed(tag, WFE_Y_SCALAR))
	{
		wfe_diag(l->diags, "schema.type", current_path(l), n->line, n->column,
				 "tag '%s' is not supported (only !!str, !!int, !!float, !!bool, !!null)", tag);
		n->type = WFE_YS_STRING;
	}
	else if (tag != NULL && strcmp(tag, "!") != 0)
	{
		if (!resolve_tagged(n, tag))
		{
			wfe_diag(l->diags, "schema.type", current_path(l), n->line, n->column,
					 "'%s' is not a valid %s", n->text, tag + strlen(TAG_PREFIX));
			n->type = WFE_YS_STRING;
		}
	}
	else if (ev->data.scalar.style == YAML_PLAIN_SCALAR_STYLE && tag == NULL)
		resolve_plain(n);
	else
		n->type = WFE_YS_STRING;
	if (n->type == WFE_YS_FLOAT && !isfinite(n->dval))
	{
		/* JSON has no spelling for them, and no setting needs them. */
		wfe_diag(l->diags, "schema.value", current_path(l), n->line, n->column,
				 "'%s' is not a finite number; .inf and .nan are not allowed", n->text);
		n->type = WFE_YS_STRING;
	}
	attach(l, n);
}

/* Handle the start of a mapping or sequence. */
static void
on_container_start(yloader *l, yaml_event_t *ev, wfe_ynode_kind kind)
{
	const yaml_char_t *anchor = kind == WFE_Y_MAP ? ev->data.mapping_start.anchor
		: ev->data.sequence_start.anchor;
	const char *tag = (const char *) (kind == WFE_Y_MAP ? ev->data.mapping_start.tag
									  : ev->data.sequence_start.tag);
	wfe_ynode  *n;

	check_anchor(l, anchor, ev->start_mark);
	if (l->depth >= WFE_YAML_MAX_DEPTH)
	{
		ydiag_at(l, "yaml.depth", ev->start_mark,
				 "nesting is deeper than the limit of 64 levels", NULL);
		l->failed = 1;
		return;
	}
	n = new_node(l, kind, ev->start_mark);
	if (n == NULL)
		return;
	if (!tag_allowed(tag, kind))
		wfe_diag(l->diags, "schema.type", current_path(l), n->line, n->column,
				 "tag '%s' is not supported here", tag);
	l->stack[l->depth].node = n;
	l->stack[l->depth].cap = 0;
	l->stack[l->depth].pending_key = NULL;
	l->depth++;
}

/* Handle the end of a mapping or sequence. */
static void
on_container_end(yloader *l)
{
	wfe_ynode  *n = l->stack[--l->depth].node;

	if (n->kind == WFE_Y_MAP)
		check_duplicate_keys(l, n);
	attach(l, n);
}

/*
 * Did the YAML layer itself report anything since `from`?  Only those errors
 * leave the tree unusable; a bad tag or a non-finite number (schema.*) does
 * not, and the later layers may still find other mistakes.
 */
static int
yaml_errors_since(wfe_diags *diags, size_t from)
{
	size_t		n = json_object_array_length(diags->list);

	if (diags->dropped > 0)
		return 1;
	for (size_t i = from; i < n; i++)
	{
		json_object *code = json_object_object_get(json_object_array_get_idx(diags->list, i), "code");

		if (strncmp(json_object_get_string(code), "yaml.", 5) == 0)
			return 1;
	}
	return 0;
}

wfe_ynode *
wfe_yaml_load(wfe_arena *arena, wfe_diags *diags, const char *source,
			  size_t len, size_t max_bytes)
{
	yaml_parser_t parser;
	yaml_event_t ev;
	yloader		l;
	int			documents = 0;
	size_t		list_before = json_object_array_length(diags->list);
	int			done = 0;

	if (len > max_bytes)
	{
		wfe_diag(diags, "yaml.too_large", "", 1, 1,
				 "definition is %zu bytes, over the limit of %zu bytes (wfe.max_definition_bytes)",
				 len, max_bytes);
		return NULL;
	}
	memset(&l, 0, sizeof(l));
	l.arena = arena;
	l.diags = diags;

	if (!yaml_parser_initialize(&parser))
		abort();
	yaml_parser_set_input_string(&parser, (const unsigned char *) source, len);

	while (!done && !l.failed)
	{
		if (!yaml_parser_parse(&parser, &ev))
		{
			char		ctx[256] = "";

			if (parser.context)
				snprintf(ctx, sizeof(ctx), " %s", parser.context);
			wfe_diag(diags, "yaml.syntax", current_path(&l), (int) parser.problem_mark.line + 1,
					 (int) parser.problem_mark.column + 1, "%s%s",
					 parser.problem ? parser.problem : "invalid YAML", ctx);
			l.failed = 1;
			break;
		}
		switch (ev.type)
		{
			case YAML_DOCUMENT_START_EVENT:
				if (++documents > 1)
				{
					ydiag_at(&l, "yaml.multiple_documents", ev.start_mark,
							 "a definition is exactly one YAML document", NULL);
					l.failed = 1;
				}
				break;
			case YAML_SCALAR_EVENT:
				on_scalar(&l, &ev);
				break;
			case YAML_ALIAS_EVENT:
				ydiag_at(&l, "yaml.alias_forbidden", ev.start_mark,
						 "aliases are not allowed in definitions",
						 (const char *) ev.data.alias.anchor);
				{
					wfe_ynode  *n = new_node(&l, WFE_Y_SCALAR, ev.start_mark);

					if (n)
					{
						n->text = wfe_arena_strdup(arena, "");
						n->type = WFE_YS_NULL;
						attach(&l, n);
					}
				}
				break;
			case YAML_MAPPING_START_EVENT:
				on_container_start(&l, &ev, WFE_Y_MAP);
				break;
			case YAML_SEQUENCE_START_EVENT:
				on_container_start(&l, &ev, WFE_Y_SEQ);
				break;
			case YAML_MAPPING_END_EVENT:
			case YAML_SEQUENCE_END_EVENT:
				on_container_end(&l);
				break;
			case YAML_STREAM_END_EVENT:
				done = 1;
				break;
			default:
				break;
		}
		yaml_event_delete(&ev);
	}
	yaml_parser_delete(&parser);

	if (l.failed || yaml_errors_since(diags, list_before))
		return NULL;
	return l.root;
}

wfe_ynode *
wfe_ymap_get(const wfe_ynode *map, const char *key)
{
	if (map == NULL || map->kind != WFE_Y_MAP)
		return NULL;
	for (int i = 0; i < map->n; i++)
		if (map->keys[i]->text && strcmp(map->keys[i]->text, key) == 0)
			return map->items[i];
	return NULL;
}

json_object *
wfe_ynode_to_json(const wfe_ynode *node)
{
	json_object *o;

	switch (node->kind)
	{
		case WFE_Y_MAP:
			o = json_object_new_object();
			for (int i = 0; i < node->n; i++)
				json_object_object_add(o, node->keys[i]->text ? node->keys[i]->text : "",
									   wfe_ynode_to_json(node->items[i]));
			return o;
		case WFE_Y_SEQ:
			o = json_object_new_array();
			for (int i = 0; i < node->n; i++)
				json_object_array_add(o, wfe_ynode_to_json(node->items[i]));
			return o;
		case WFE_Y_SCALAR:
			break;
	}
	switch (node->type)
	{
		case WFE_YS_NULL:
			return NULL;
		case WFE_YS_BOOL:
			return json_object_new_boolean(node->bval);
		case WFE_YS_INT:
			return json_object_new_int64(node->ival);
		case WFE_YS_FLOAT:
			return json_object_new_double(node->dval);
		case WFE_YS_STRING:
			break;
	}
	return json_object_new_string_len(node->text, (int) node->len);
}

const char *
wfe_ynode_describe(const wfe_ynode *node)
{
	if (node == NULL)
		return "nothing";
	if (node->kind == WFE_Y_MAP)
		return "a mapping";
	if (node->kind == WFE_Y_SEQ)
		return "a sequence";
	switch (node->type)
	{
		case WFE_YS_NULL:
			return "null";
		case WFE_YS_BOOL:
			return "a boolean";
		case WFE_YS_INT:
			return "an integer";
		case WFE_YS_FLOAT:
			return "a number";
		case WFE_YS_STRING:
			break;
	}
	return "a string";
}
