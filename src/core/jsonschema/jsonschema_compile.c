/*
 * jsonschema_compile.c — a JSON Schema document compiled into js_node trees
 * (see jsonschema.h for the dialect, jsonschema_internal.h for the form).
 *
 * Two passes.  The index pass walks every subschema once, working out each
 * one's base URI from $id, and records the document's resources, $anchors
 * and $dynamicAnchors.  The compile pass turns each reachable subschema
 * into one js_node; references are resolved against the index, so a $ref
 * cycle is just a cycle of pointers.  The compile pass uses a worklist, not
 * recursion: a long chain of references cannot exhaust the stack.
 *
 * This file is the driver; the passes' parts are the files that
 * jsonschema_compile.h lists.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/base/utf8.h"
#include "jsonschema_compile.h"

/* Base URI of a document without $id: relative references resolve below it. */
#define DEFAULT_BASE "wfe:/schema.json"

/* Record the first compile error; ptr is "#/..." (the '#' is dropped). */
void
js_cfail(cctx *cx, wfe_jschema_errkind kind, const char *ptr, const char *key,
	  const char *fmt,...)
{
	va_list		ap;
	char		esc[200];
	size_t		i,
				n = 0;

	if (cx->failed)
		return;
	cx->failed = 1;
	cx->err->kind = kind;
	/* pointer: the node's, then the keyword (RFC 6901 escaped) */
	for (i = 0; key && key[i] && n + 3 < sizeof(esc); i++)
	{
		if (key[i] == '~' || key[i] == '/')
		{
			esc[n++] = '~';
			esc[n++] = key[i] == '~' ? '0' : '1';
		}
		else
			esc[n++] = key[i];
	}
	esc[n] = '\0';
	snprintf(cx->err->pointer, sizeof(cx->err->pointer), "%s%s%s",
			 ptr[0] == '#' ? ptr + 1 : ptr, key ? "/" : "", key ? esc : "");
	va_start(ap, fmt);
	vsnprintf(cx->err->message, sizeof(cx->err->message), fmt, ap);
	va_end(ap);
	wfe_utf8_sanitize(cx->err->pointer);
	wfe_utf8_sanitize(cx->err->message);
}

/* The node of a subschema, queued for compiling when new. */
js_node *
js_node_for(cctx *cx, json_object *j, const char *ptr_if_new, js_entry *near)
{
	js_entry   *e = js_entry_find(cx, j);
	js_work    *w;

	if (e == NULL)
		e = js_entry_add(cx, j, ptr_if_new, near->base, near->res, near->dialect);
	if (e->node)
		return e->node;
	e->node = wfe_arena_alloc(cx->a, sizeof(js_node));
	e->node->ptr = e->ptr;
	e->node->res = e->res;
	w = wfe_arena_alloc(cx->a, sizeof(js_work));
	w->e = e;
	w->next = cx->work;
	cx->work = w;
	return e->node;
}

/* The dialect a "$schema" value names, or 0. */
static int
dialect_of(const char *uri)
{
	static const char *const d2020[] = {
		"https://json-schema.org/draft/2020-12/schema", "https://json-schema.org/draft/2020-12/schema#",
		"http://json-schema.org/draft/2020-12/schema", "http://json-schema.org/draft/2020-12/schema#", NULL
	};
	static const char *const d7[] = {
		"http://json-schema.org/draft-07/schema#", "http://json-schema.org/draft-07/schema",
		"https://json-schema.org/draft-07/schema#", "https://json-schema.org/draft-07/schema", NULL
	};

	if (js_in_list(uri, d2020))
		return JS_DRAFT2020;
	if (js_in_list(uri, d7))
		return JS_DRAFT7;
	return 0;
}

/* Refuse a "$schema" below the root that names another dialect. */
static void
check_nested_dialects(cctx *cx)
{
	for (size_t i = 0; i < cx->cap && !cx->failed; i++)
	{
		js_entry   *e = cx->table[i];
		json_object *v;

		if (e && e->json != cx->root_json &&
			json_object_is_type(e->json, json_type_object) &&
			json_object_object_get_ex(e->json, "$schema", &v) &&
			json_object_is_type(v, json_type_string) &&
			dialect_of(json_object_get_string(v)) != cx->doc->dialect)
			js_cfail(cx, WFE_JSE_DIALECT, e->ptr, "$schema",
				  "a subschema may not change the dialect (\"%s\"); wfe runs one dialect per schema",
				  json_object_get_string(v));
	}
}

/* Free a compiled schema's regexes (the rest is the arena). */
static void
free_regexes(wfe_regex **r, int n)
{
	for (int i = 0; i < n; i++)
		wfe_regex_free(r[i]);
	free(r);
}

/* Where the compiled doc keeps its regexes (after its root, in the arena). */
typedef struct js_owned
{
	wfe_regex **regexes;
	int			nregexes;
} js_owned;

wfe_jschema *
wfe_jschema_compile(json_object *schema, wfe_jschema_error *err)
{
	return wfe_jschema_compile_dialect(schema, "draft2020-12", err);
}

wfe_jschema *
wfe_jschema_compile_dialect(json_object *schema, const char *default_dialect,
							wfe_jschema_error *err)
{
	cctx		cx;
	wfe_jschema *doc = calloc(1, sizeof(wfe_jschema) + sizeof(js_owned));
	json_object *v;
	js_resource *root_res;
	js_entry   *root;
	js_owned   *owned;

	memset(err, 0, sizeof(*err));
	if (!doc)
	{
		err->kind = WFE_JSE_VALUE;
		snprintf(err->message, sizeof(err->message), "out of memory");
		return NULL;
	}
	memset(&cx, 0, sizeof(cx));
	wfe_arena_init(&doc->arena);
	cx.doc = doc;
	cx.a = &doc->arena;
	cx.err = err;
	doc->dialect = strcmp(default_dialect, "draft-07") == 0 ? JS_DRAFT7 : JS_DRAFT2020;

	if (!js_is_schema(schema))
	{
		js_cfail(&cx, WFE_JSE_VALUE, "#", NULL, "a schema must be a JSON object or a boolean, not %s",
			  wfe_json_type_name(schema));
		goto fail;
	}
	if (json_object_is_type(schema, json_type_object) &&
		json_object_object_get_ex(schema, "$schema", &v) && json_object_is_type(v, json_type_string))
	{
		doc->dialect = dialect_of(json_object_get_string(v));
		if (doc->dialect == 0)
		{
			js_cfail(&cx, WFE_JSE_DIALECT, "#", "$schema",
				  "unsupported dialect \"%s\": wfe runs JSON Schema draft 2020-12 "
				  "(https://json-schema.org/draft/2020-12/schema) and draft-07 "
				  "(http://json-schema.org/draft-07/schema#)", json_object_get_string(v));
			goto fail;
		}
	}
	cx.root_json = schema;
	root_res = js_resource_add(&cx, DEFAULT_BASE, schema);
	js_index_schema(&cx, schema, "#", DEFAULT_BASE, root_res, doc->dialect);
	/* a root $id renames the root resource; keep the default name findable too */
	if (cx.failed)
		goto fail;
	check_nested_dialects(&cx);
	root = js_entry_find(&cx, schema);
	doc->root = js_node_for(&cx, schema, "#", root);
	/* every $dynamicAnchor gets a node, for the dynamic scope */
	for (js_resource *r = doc->resources; r; r = r->next)
		if (r->ndynamic > 0)
		{
			js_entry   *re = js_entry_find(&cx, r->json);

			r->dynamic = wfe_arena_alloc(cx.a, (size_t) r->ndynamic * sizeof(js_anchor));
			r->ndynamic = 0;
			for (js_anchor_def *a = cx.anchors; a; a = a->next)
				if (a->dynamic && strcmp(a->uri, r->uri) == 0)
				{
					js_entry   *ae = js_entry_find(&cx, a->json);

					r->dynamic[r->ndynamic].name = a->name;
					r->dynamic[r->ndynamic].node = js_node_for(&cx, a->json, ae ? ae->ptr : "#", ae ? ae : re);
					r->ndynamic++;
				}
		}
	while (cx.work && !cx.failed)
	{
		js_work    *w = cx.work;

		cx.work = w->next;
		js_compile_entry(&cx, w->e);
	}
	if (cx.failed)
		goto fail;
	owned = (js_owned *) (doc + 1);
	owned->regexes = cx.regexes;
	owned->nregexes = cx.nregexes;
	return doc;

fail:
	free_regexes(cx.regexes, cx.nregexes);
	wfe_arena_free(&doc->arena);
	free(doc);
	return NULL;
}

void
wfe_jschema_free(wfe_jschema *s)
{
	js_owned   *owned;

	if (!s)
		return;
	owned = (js_owned *) (s + 1);
	free_regexes(owned->regexes, owned->nregexes);
	wfe_arena_free(&s->arena);
	free(s);
}

const char *
wfe_jschema_dialect(const wfe_jschema *s)
{
	return s->dialect == JS_DRAFT7 ? "draft-07" : "draft2020-12";
}
