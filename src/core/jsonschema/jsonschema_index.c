/*
 * jsonschema_index.c — the compiler's index pass (jsonschema_compile.h):
 * every subschema of the document once, in a table from its json_object to
 * its entry (where it is, its base URI from $id, its resource), and the
 * document's resources, $anchors and $dynamicAnchors, which references are
 * resolved against.
 */
#include <stdint.h>
#include <string.h>

#include "jsonschema_compile.h"

/* Hash of a pointer. */
static size_t
ptr_hash(const void *p)
{
	uintptr_t	v = (uintptr_t) p;

	v ^= v >> 17;
	v *= (uintptr_t) 0x9E3779B97F4A7C15ull;
	return (size_t) (v ^ (v >> 29));
}

/* The entry of a subschema, or NULL. */
js_entry *
js_entry_find(cctx *cx, json_object *j)
{
	size_t		i;

	if (cx->cap == 0)
		return NULL;
	for (i = ptr_hash(j) & (cx->cap - 1); cx->table[i]; i = (i + 1) & (cx->cap - 1))
		if (cx->table[i]->json == j)
			return cx->table[i];
	return NULL;
}

/* Add an entry (the table grows at half full). */
js_entry *
js_entry_add(cctx *cx, json_object *j, const char *ptr, const char *base,
		  js_resource *res, int dialect)
{
	js_entry   *e;
	size_t		i;

	if ((cx->count + 1) * 2 > cx->cap)
	{
		size_t		ncap = cx->cap ? cx->cap * 2 : 64;
		js_entry  **nt = wfe_arena_alloc(cx->a, ncap * sizeof(js_entry *));

		for (i = 0; i < cx->cap; i++)
			if (cx->table[i])
			{
				size_t		k = ptr_hash(cx->table[i]->json) & (ncap - 1);

				while (nt[k])
					k = (k + 1) & (ncap - 1);
				nt[k] = cx->table[i];
			}
		cx->table = nt;
		cx->cap = ncap;
	}
	e = wfe_arena_alloc(cx->a, sizeof(js_entry));
	e->json = j;
	e->ptr = ptr;
	e->base = base;
	e->res = res;
	e->dialect = dialect;
	for (i = ptr_hash(j) & (cx->cap - 1); cx->table[i]; i = (i + 1) & (cx->cap - 1))
		;
	cx->table[i] = e;
	cx->count++;
	return e;
}

/* A resource by URI, or NULL. */
js_resource *
js_resource_find(cctx *cx, const char *uri)
{
	for (js_resource *r = cx->doc->resources; r; r = r->next)
		if (strcmp(r->uri, uri) == 0)
			return r;
	return NULL;
}

/* Register a resource. */
js_resource *
js_resource_add(cctx *cx, const char *uri, json_object *json)
{
	js_resource *r = js_resource_find(cx, uri);

	if (r)
		return r;				/* duplicate $id: the first wins */
	r = wfe_arena_alloc(cx->a, sizeof(js_resource));
	r->uri = uri;
	r->json = json;
	r->next = cx->doc->resources;
	cx->doc->resources = r;
	return r;
}

/* Register an anchor. */
static void
js_anchor_add(cctx *cx, const char *uri, const char *name, json_object *json, int dynamic)
{
	js_anchor_def *a = wfe_arena_alloc(cx->a, sizeof(js_anchor_def));

	a->uri = uri;
	a->name = name;
	a->json = json;
	a->dynamic = dynamic;
	a->next = cx->anchors;
	cx->anchors = a;
}

/* An anchor by resource and name, or NULL. */
js_anchor_def *
js_anchor_find(cctx *cx, const char *uri, const char *name)
{
	for (js_anchor_def *a = cx->anchors; a; a = a->next)
		if (strcmp(a->uri, uri) == 0 && strcmp(a->name, name) == 0)
			return a;
	return NULL;
}

/* Keywords whose value is one subschema, an array of them, a map of them. */
static const char *const SINGLE_KW[] = {
	"additionalProperties", "propertyNames", "contains", "not", "if", "then", "else",
	"unevaluatedItems", "unevaluatedProperties", "additionalItems", "items", NULL
};
static const char *const ARRAY_KW[] = {"allOf", "anyOf", "oneOf", "prefixItems", "items", NULL};
static const char *const MAP_KW[] = {
	"properties", "patternProperties", "$defs", "definitions", "dependentSchemas",
	"dependencies", NULL
};

/* Is s in the NULL-terminated list? */
int
js_in_list(const char *s, const char *const *list)
{
	for (; *list; list++)
		if (strcmp(s, *list) == 0)
			return 1;
	return 0;
}

/* Is j a schema (an object or a boolean)? */
int
js_is_schema(json_object *j)
{
	return j && (json_object_is_type(j, json_type_object) || json_object_is_type(j, json_type_boolean));
}

/* Index one subschema and everything below it. */
void
js_index_schema(cctx *cx, json_object *s, const char *ptr, const char *base,
			 js_resource *res, int dialect)
{
	json_object *v;
	const char *frag;

	if (cx->failed || js_entry_find(cx, s))
		return;
	if (!json_object_is_type(s, json_type_object))
	{
		js_entry_add(cx, s, ptr, base, res, dialect);
		return;
	}
	/* $id: a new base (draft-07 ignores it beside $ref) */
	if (json_object_object_get_ex(s, "$id", &v) && json_object_is_type(v, json_type_string) &&
		!(dialect == JS_DRAFT7 && json_object_object_get_ex(s, "$ref", NULL)))
	{
		const char *id = json_object_get_string(v);
		char	   *abs = js_uri_resolve(cx, base, id);
		char	   *uri = js_uri_split(cx, abs, &frag);

		if (*frag && dialect == JS_DRAFT2020)
		{
			js_cfail(cx, WFE_JSE_VALUE, ptr, "$id",
				  "\"$id\" must not have a fragment in draft 2020-12 (use \"$anchor\"): \"%s\"", id);
			return;
		}
		if (id[0] != '#')
		{
			base = uri;
			res = js_resource_add(cx, uri, s);
		}
		if (*frag)
			js_anchor_add(cx, uri, wfe_arena_strdup(cx->a, frag), s, 0);
	}
	if (dialect == JS_DRAFT2020)
	{
		if (json_object_object_get_ex(s, "$anchor", &v) && json_object_is_type(v, json_type_string))
			js_anchor_add(cx, base, json_object_get_string(v), s, 0);
		if (json_object_object_get_ex(s, "$dynamicAnchor", &v) && json_object_is_type(v, json_type_string))
		{
			js_anchor_add(cx, base, json_object_get_string(v), s, 1);
			res->ndynamic++;
		}
	}
	js_entry_add(cx, s, ptr, base, res, dialect);

	{
		json_object_object_foreach(s, key, val)
		{
			if (cx->failed)
				return;
			if (js_in_list(key, SINGLE_KW) && js_is_schema(val))
				js_index_schema(cx, val, js_ptr_push(cx, ptr, key), base, res, dialect);
			else if (js_in_list(key, ARRAY_KW) && json_object_is_type(val, json_type_array))
			{
				size_t		n = json_object_array_length(val);
				const char *kp = js_ptr_push(cx, ptr, key);

				for (size_t i = 0; i < n; i++)
				{
					json_object *item = json_object_array_get_idx(val, i);

					if (js_is_schema(item))
						js_index_schema(cx, item, wfe_arena_printf(cx->a, "%s/%zu", kp, i), base, res, dialect);
				}
			}
			else if (js_in_list(key, MAP_KW) && json_object_is_type(val, json_type_object))
			{
				const char *kp = js_ptr_push(cx, ptr, key);

				json_object_object_foreach(val, k2, v2)
				{
					if (js_is_schema(v2))
						js_index_schema(cx, v2, js_ptr_push(cx, kp, k2), base, res, dialect);
				}
			}
		}
	}
}
