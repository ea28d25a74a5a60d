/*
 * jsonschema_ref.c — references in the JSON Schema compiler
 * (jsonschema_compile.h): a $ref or $dynamicRef resolved against the index
 * into its target's node, and which keywords the root's "#/..." references
 * point into (so the strict-keyword rule lets such a keyword be).
 */
#include <string.h>

#include "jsonschema_compile.h"

/*
 * Resolve a $ref/$dynamicRef value from the subschema e into its target's
 * node; *anchor_def gets the anchor it named, if any.  NULL after cfail.
 */
js_node *
js_resolve_ref(cctx *cx, js_entry *e, const char *kw, const char *ref, js_anchor_def **anchor_def)
{
	char	   *abs = js_uri_resolve(cx, e->base, ref);
	const char *frag;
	char	   *uri = js_uri_split(cx, abs, &frag);
	js_resource *r = js_resource_find(cx, uri);
	json_object *target;
	const char *tptr;

	*anchor_def = NULL;
	if (r == NULL)
	{
		js_cfail(cx, WFE_JSE_REMOTE_REF, e->ptr, kw,
			  "remote reference \"%s\"%s%s is not supported: wfe resolves references within the schema only; "
			  "put what it names under \"$defs\" and refer to it as \"#/$defs/...\"", ref,
			  strcmp(ref, uri) == 0 ? "" : ", that is ", strcmp(ref, uri) == 0 ? "" : uri);
		return NULL;
	}
	frag = js_percent_decode(cx, frag);
	if (frag[0] == '\0' || frag[0] == '/')
	{
		js_entry   *re = js_entry_find(cx, r->json);

		target = js_pointer_get(r->json, frag);
		tptr = wfe_arena_printf(cx->a, "%s%s", re && strcmp(re->ptr, "#") != 0 ? re->ptr : "#", frag);
	}
	else
	{
		js_anchor_def *a = js_anchor_find(cx, uri, frag);

		target = a ? a->json : NULL;
		tptr = NULL;
		*anchor_def = a;
	}
	if (target == NULL || !js_is_schema(target))
	{
		js_cfail(cx, WFE_JSE_VALUE, e->ptr, kw, "\"%s\" names nothing in this schema%s", ref,
			  target ? " that is a schema" : "");
		return NULL;
	}
	{
		js_entry	near = *e;

		near.res = r;
		near.base = uri;
		return js_node_for(cx, target, tptr ? tptr : wfe_arena_printf(cx->a, "#%s", frag), &near);
	}
}

/* Collect the "#/..." $ref values of j and below, not inside other resources. */
static void
collect_local_refs(cctx *cx, json_object *j, int top)
{
	if (json_object_is_type(j, json_type_array))
	{
		for (size_t i = 0; i < json_object_array_length(j); i++)
			collect_local_refs(cx, json_object_array_get_idx(j, i), 0);
		return;
	}
	if (!json_object_is_type(j, json_type_object))
		return;
	/* below another $id, "#/..." is relative to that resource */
	if (!top && json_object_object_get_ex(j, "$id", NULL))
		return;
	{
		json_object_object_foreach(j, key, val)
		{
			if (strcmp(key, "$ref") == 0 && json_object_is_type(val, json_type_string) &&
				strncmp(json_object_get_string(val), "#/", 2) == 0)
			{
				if (cx->nlocal_refs == cx->caplocal_refs)
				{
					int			cap = cx->caplocal_refs ? cx->caplocal_refs * 2 : 8;
					const char **r = wfe_arena_alloc(cx->a, (size_t) cap * sizeof(*r));

					if (cx->nlocal_refs)
						memcpy(r, cx->local_refs, (size_t) cx->nlocal_refs * sizeof(*r));
					cx->local_refs = r;
					cx->caplocal_refs = cap;
				}
				cx->local_refs[cx->nlocal_refs++] = js_percent_decode(cx, json_object_get_string(val));
			}
			else
				collect_local_refs(cx, val, 0);
		}
	}
}

/*
 * Does a "$ref" of the root resource point at, or below, the keyword `key`
 * of the subschema e?  Then the keyword is not a misspelling that checks
 * nothing but a place that holds referenced subschemas (as "$defs" does),
 * and the strict-keyword rule lets it be.
 */
int
js_referenced(cctx *cx, js_entry *e, const char *key)
{
	const char *kp;
	size_t		n;

	if (e->res == NULL || e->res->json != cx->root_json)
		return 0;
	if (!cx->local_refs_done)
	{
		collect_local_refs(cx, cx->root_json, 1);
		cx->local_refs_done = 1;
	}
	kp = js_ptr_push(cx, e->ptr, key);
	n = strlen(kp);
	for (int i = 0; i < cx->nlocal_refs; i++)
		if (strncmp(cx->local_refs[i], kp, n) == 0 &&
			(cx->local_refs[i][n] == '\0' || cx->local_refs[i][n] == '/'))
			return 1;
	return 0;
}
