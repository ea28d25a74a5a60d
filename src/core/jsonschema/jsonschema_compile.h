/*
 * jsonschema_compile.h — the compiler's context, shared by its files (not
 * by the validator: that reads only the compiled form, jsonschema_internal.h).
 *
 *   jsonschema_compile.c   the driver: the two passes, the worklist, errors
 *   jsonschema_index.c     the index pass: subschemas, resources, anchors
 *   jsonschema_uri.c       URI resolution (RFC 3986) and JSON pointers (RFC 6901)
 *   jsonschema_ref.c       $ref and $dynamicRef resolved against the index
 *   jsonschema_keywords.c  the keywords of one subschema into its js_node
 */
#ifndef WFE_JSONSCHEMA_COMPILE_H
#define WFE_JSONSCHEMA_COMPILE_H

#include "jsonschema_internal.h"

/* One indexed subschema: where it is, its base URI, its resource, its node. */
typedef struct js_entry
{
	json_object *json;
	const char *ptr;			/* "#/properties/a" */
	const char *base;
	js_resource *res;
	js_node    *node;
	int			dialect;
} js_entry;

/* An anchor: (resource URI, name) -> subschema. */
typedef struct js_anchor_def
{
	const char *uri;
	const char *name;
	json_object *json;
	int			dynamic;
	struct js_anchor_def *next;
} js_anchor_def;

typedef struct js_work
{
	js_entry   *e;
	struct js_work *next;
} js_work;

typedef struct cctx
{
	wfe_jschema *doc;
	wfe_arena  *a;
	wfe_jschema_error *err;
	int			failed;
	/* json_object* -> entry, open addressing */
	js_entry  **table;
	size_t		cap,
				count;
	js_anchor_def *anchors;
	js_work    *work;
	json_object *root_json;
	/* the root resource's "#/..." references, percent-decoded (see js_referenced) */
	const char **local_refs;
	int			nlocal_refs,
				caplocal_refs;
	int			local_refs_done;
	wfe_regex **regexes;		/* owned by the doc; freed with it */
	int			nregexes,
				capregexes;
} cctx;

/* Record the first compile error; ptr is "#/..." (the '#' is dropped). */
extern void js_cfail(cctx *cx, wfe_jschema_errkind kind, const char *ptr, const char *key,
					 const char *fmt,...) __attribute__((format(printf, 5, 6)));

/* The node of a subschema, queued for compiling when new (jsonschema_compile.c). */
extern js_node *js_node_for(cctx *cx, json_object *j, const char *ptr_if_new, js_entry *near);

/* The index (jsonschema_index.c). */
extern js_entry *js_entry_find(cctx *cx, json_object *j);
extern js_entry *js_entry_add(cctx *cx, json_object *j, const char *ptr, const char *base,
							  js_resource *res, int dialect);
extern js_resource *js_resource_find(cctx *cx, const char *uri);
extern js_resource *js_resource_add(cctx *cx, const char *uri, json_object *json);
extern js_anchor_def *js_anchor_find(cctx *cx, const char *uri, const char *name);
extern int	js_in_list(const char *s, const char *const *list);
extern int	js_is_schema(json_object *j);
extern void js_index_schema(cctx *cx, json_object *s, const char *ptr, const char *base,
							js_resource *res, int dialect);

/* URIs and JSON pointers, in the arena (jsonschema_uri.c). */
extern char *js_uri_resolve(cctx *cx, const char *base, const char *ref);
extern char *js_uri_split(cctx *cx, const char *uri, const char **frag);
extern const char *js_ptr_push(cctx *cx, const char *ptr, const char *key);
extern char *js_percent_decode(cctx *cx, const char *s);
extern json_object *js_pointer_get(json_object *j, const char *p);

/* References (jsonschema_ref.c). */
extern js_node *js_resolve_ref(cctx *cx, js_entry *e, const char *kw, const char *ref,
							   js_anchor_def **anchor_def);
extern int	js_referenced(cctx *cx, js_entry *e, const char *key);

/* Fill one node from its JSON (jsonschema_keywords.c). */
extern void js_compile_entry(cctx *cx, js_entry *e);

#endif							/* WFE_JSONSCHEMA_COMPILE_H */
