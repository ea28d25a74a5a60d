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
 */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/base/utf8.h"
#include "jsonschema_internal.h"

/* Base URI of a document without $id: relative references resolve below it. */
#define DEFAULT_BASE "wfe:/schema.json"

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
	/* the root resource's "#/..." references, percent-decoded (see referenced) */
	const char **local_refs;
	int			nlocal_refs,
				caplocal_refs;
	int			local_refs_done;
	wfe_regex **regexes;		/* owned by the doc; freed with it */
	int			nregexes,
				capregexes;
} cctx;

/* Record the first compile error; ptr is "#/..." (the '#' is dropped). */
static void
cfail(cctx *cx, wfe_jschema_errkind kind, const char *ptr, const char *key,
	  const char *fmt,...)
	__attribute__((format(printf, 5, 6)));

static void
cfail(cctx *cx, wfe_jschema_errkind kind, const char *ptr, const char *key,
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

/* ---- the json_object -> entry table ------------------------------------ */

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
static js_entry *
entry_find(cctx *cx, json_object *j)
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
static js_entry *
entry_add(cctx *cx, json_object *j, const char *ptr, const char *base,
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

/* ---- URIs -------------------------------------------------------------- */

/* Length of the scheme of u ("http" in "http://x"), or 0. */
static size_t
scheme_len(const char *u)
{
	size_t		i = 0;

	if (!((u[0] >= 'a' && u[0] <= 'z') || (u[0] >= 'A' && u[0] <= 'Z')))
		return 0;
	while (u[i] && u[i] != ':' && u[i] != '/' && u[i] != '?' && u[i] != '#')
		i++;
	return u[i] == ':' ? i : 0;
}

/* Remove "." and ".." segments from a path (RFC 3986 5.2.4), into the arena. */
static char *
remove_dots(cctx *cx, const char *path, size_t len)
{
	char	   *in = wfe_arena_strndup(cx->a, path, len);
	char	   *out = wfe_arena_alloc(cx->a, len + 1);
	size_t		o = 0,
				i = 0;

	while (i < len)
	{
		const char *p = in + i;
		size_t		left = len - i;

		if (left >= 3 && strncmp(p, "../", 3) == 0)
			i += 3;
		else if (left >= 2 && strncmp(p, "./", 2) == 0)
			i += 2;
		else if (left >= 3 && strncmp(p, "/./", 3) == 0)
			i += 2;				/* leaves "/..." */
		else if (left == 2 && strncmp(p, "/.", 2) == 0)
		{
			in[i + 1] = '/';
			i += 1;
		}
		else if ((left >= 4 && strncmp(p, "/../", 4) == 0) || (left == 3 && strncmp(p, "/..", 3) == 0))
		{
			if (left == 3)
				in[i + 2] = '/';
			i += left == 3 ? 2 : 3;
			/* drop the output's last segment */
			while (o > 0 && out[o - 1] != '/')
				o--;
			if (o > 0)
				o--;
		}
		else if ((left == 1 && p[0] == '.') || (left == 2 && strncmp(p, "..", 2) == 0))
			i = len;
		else
		{
			do
				out[o++] = in[i++];
			while (i < len && in[i] != '/');
		}
	}
	out[o] = '\0';
	return out;
}

/*
 * Resolve reference ref against base (absolute, no fragment) into an
 * absolute URI with ref's fragment, in the arena.
 */
static char *
uri_resolve(cctx *cx, const char *base, const char *ref)
{
	size_t		bs = scheme_len(base),
				rs = scheme_len(ref);
	const char *bauth_end,
			   *hash;

	if (rs > 0)
	{
		const char *rest = ref + rs + 1;
		size_t		auth = 0;

		if (rest[0] == '/' && rest[1] == '/')
			for (auth = 2; rest[auth] && rest[auth] != '/' && rest[auth] != '#'; auth++)
				;
		hash = strchr(rest + auth, '#');
		return wfe_arena_printf(cx->a, "%.*s%s%s", (int) (rs + 1 + auth), ref,
								remove_dots(cx, rest + auth, hash ? (size_t) (hash - rest - auth) : strlen(rest + auth)),
								hash ? hash : "");
	}
	/* the base's scheme and authority */
	bauth_end = base + bs + 1;
	if (bauth_end[0] == '/' && bauth_end[1] == '/')
		for (bauth_end += 2; *bauth_end && *bauth_end != '/'; bauth_end++)
			;
	if (ref[0] == '\0' || ref[0] == '#')
		return wfe_arena_printf(cx->a, "%s%s", base, ref);
	if (ref[0] == '/' && ref[1] == '/')
		return wfe_arena_printf(cx->a, "%.*s%s", (int) (bs + 1), base, ref);
	hash = strchr(ref, '#');
	if (ref[0] == '/')
		return wfe_arena_printf(cx->a, "%.*s%s%s", (int) (bauth_end - base), base,
								remove_dots(cx, ref, hash ? (size_t) (hash - ref) : strlen(ref)),
								hash ? hash : "");
	else
	{
		/* merge: the base path up to its last '/', then ref */
		const char *slash = strrchr(bauth_end, '/');
		char	   *merged;

		if (slash)
			merged = wfe_arena_printf(cx->a, "%.*s%.*s", (int) (slash + 1 - bauth_end), bauth_end,
									  (int) (hash ? (size_t) (hash - ref) : strlen(ref)), ref);
		else
			merged = wfe_arena_printf(cx->a, "%s%.*s", *bauth_end || bauth_end[-1] == '/' ? "/" : "",
									  (int) (hash ? (size_t) (hash - ref) : strlen(ref)), ref);
		return wfe_arena_printf(cx->a, "%.*s%s%s", (int) (bauth_end - base), base,
								remove_dots(cx, merged, strlen(merged)), hash ? hash : "");
	}
}

/* Split an absolute URI at '#': the part before is returned, *frag after ("" if none). */
static char *
uri_split(cctx *cx, const char *uri, const char **frag)
{
	const char *h = strchr(uri, '#');

	*frag = h ? h + 1 : "";
	return h ? wfe_arena_strndup(cx->a, uri, (size_t) (h - uri)) : (char *) uri;
}

/* ---- the index pass ---------------------------------------------------- */

/* A resource by URI, or NULL. */
static js_resource *
resource_find(cctx *cx, const char *uri)
{
	for (js_resource *r = cx->doc->resources; r; r = r->next)
		if (strcmp(r->uri, uri) == 0)
			return r;
	return NULL;
}

/* Register a resource. */
static js_resource *
resource_add(cctx *cx, const char *uri, json_object *json)
{
	js_resource *r = resource_find(cx, uri);

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
anchor_add(cctx *cx, const char *uri, const char *name, json_object *json, int dynamic)
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
static js_anchor_def *
anchor_find(cctx *cx, const char *uri, const char *name)
{
	for (js_anchor_def *a = cx->anchors; a; a = a->next)
		if (strcmp(a->uri, uri) == 0 && strcmp(a->name, name) == 0)
			return a;
	return NULL;
}

/* "#/a/b" + key -> "#/a/b/key" with RFC 6901 escaping. */
static const char *
ptr_push(cctx *cx, const char *ptr, const char *key)
{
	size_t		n = 0;
	char	   *esc;

	for (const char *k = key; *k; k++)
		n += (*k == '~' || *k == '/') ? 2 : 1;
	esc = wfe_arena_alloc(cx->a, n + 1);
	n = 0;
	for (const char *k = key; *k; k++)
	{
		if (*k == '~' || *k == '/')
		{
			esc[n++] = '~';
			esc[n++] = *k == '~' ? '0' : '1';
		}
		else
			esc[n++] = *k;
	}
	return wfe_arena_printf(cx->a, "%s/%s", ptr, esc);
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
static int
in_list(const char *s, const char *const *list)
{
	for (; *list; list++)
		if (strcmp(s, *list) == 0)
			return 1;
	return 0;
}

/* Is j a schema (an object or a boolean)? */
static int
is_schema(json_object *j)
{
	return j && (json_object_is_type(j, json_type_object) || json_object_is_type(j, json_type_boolean));
}

/* Index one subschema and everything below it. */
static void
index_schema(cctx *cx, json_object *s, const char *ptr, const char *base,
			 js_resource *res, int dialect)
{
	json_object *v;
	const char *frag;

	if (cx->failed || entry_find(cx, s))
		return;
	if (!json_object_is_type(s, json_type_object))
	{
		entry_add(cx, s, ptr, base, res, dialect);
		return;
	}
	/* $id: a new base (draft-07 ignores it beside $ref) */
	if (json_object_object_get_ex(s, "$id", &v) && json_object_is_type(v, json_type_string) &&
		!(dialect == JS_DRAFT7 && json_object_object_get_ex(s, "$ref", NULL)))
	{
		const char *id = json_object_get_string(v);
		char	   *abs = uri_resolve(cx, base, id);
		char	   *uri = uri_split(cx, abs, &frag);

		if (*frag && dialect == JS_DRAFT2020)
		{
			cfail(cx, WFE_JSE_VALUE, ptr, "$id",
				  "\"$id\" must not have a fragment in draft 2020-12 (use \"$anchor\"): \"%s\"", id);
			return;
		}
		if (id[0] != '#')
		{
			base = uri;
			res = resource_add(cx, uri, s);
		}
		if (*frag)
			anchor_add(cx, uri, wfe_arena_strdup(cx->a, frag), s, 0);
	}
	if (dialect == JS_DRAFT2020)
	{
		if (json_object_object_get_ex(s, "$anchor", &v) && json_object_is_type(v, json_type_string))
			anchor_add(cx, base, json_object_get_string(v), s, 0);
		if (json_object_object_get_ex(s, "$dynamicAnchor", &v) && json_object_is_type(v, json_type_string))
		{
			anchor_add(cx, base, json_object_get_string(v), s, 1);
			res->ndynamic++;
		}
	}
	entry_add(cx, s, ptr, base, res, dialect);

	{
		json_object_object_foreach(s, key, val)
		{
			if (cx->failed)
				return;
			if (in_list(key, SINGLE_KW) && is_schema(val))
				index_schema(cx, val, ptr_push(cx, ptr, key), base, res, dialect);
			else if (in_list(key, ARRAY_KW) && json_object_is_type(val, json_type_array))
			{
				size_t		n = json_object_array_length(val);
				const char *kp = ptr_push(cx, ptr, key);

				for (size_t i = 0; i < n; i++)
				{
					json_object *item = json_object_array_get_idx(val, i);

					if (is_schema(item))
						index_schema(cx, item, wfe_arena_printf(cx->a, "%s/%zu", kp, i), base, res, dialect);
				}
			}
			else if (in_list(key, MAP_KW) && json_object_is_type(val, json_type_object))
			{
				const char *kp = ptr_push(cx, ptr, key);

				json_object_object_foreach(val, k2, v2)
				{
					if (is_schema(v2))
						index_schema(cx, v2, ptr_push(cx, kp, k2), base, res, dialect);
				}
			}
		}
	}
}

/* ---- the compile pass --------------------------------------------------- */

/* The node of a subschema, queued for compiling when new. */
static js_node *
node_for(cctx *cx, json_object *j, const char *ptr_if_new, js_entry *near)
{
	js_entry   *e = entry_find(cx, j);
	js_work    *w;

	if (e == NULL)
		e = entry_add(cx, j, ptr_if_new, near->base, near->res, near->dialect);
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

/* Decode %XX in a URI fragment, in the arena. */
static char *
percent_decode(cctx *cx, const char *s)
{
	size_t		n = strlen(s),
				o = 0;
	char	   *out = wfe_arena_alloc(cx->a, n + 1);

	for (size_t i = 0; i < n; i++)
	{
		int			h1,
					h2;

		if (s[i] == '%' && i + 2 < n + 1 &&
			(h1 = (s[i + 1] >= '0' && s[i + 1] <= '9') ? s[i + 1] - '0' :
			 ((s[i + 1] | 0x20) >= 'a' && (s[i + 1] | 0x20) <= 'f') ? (s[i + 1] | 0x20) - 'a' + 10 : -1) >= 0 &&
			(h2 = (s[i + 2] >= '0' && s[i + 2] <= '9') ? s[i + 2] - '0' :
			 ((s[i + 2] | 0x20) >= 'a' && (s[i + 2] | 0x20) <= 'f') ? (s[i + 2] | 0x20) - 'a' + 10 : -1) >= 0)
		{
			out[o++] = (char) (h1 * 16 + h2);
			i += 2;
		}
		else
			out[o++] = s[i];
	}
	out[o] = '\0';
	return out;
}

/* Follow a JSON pointer ("/a/b", unescaped tokens) from j; NULL if absent. */
static json_object *
pointer_get(json_object *j, const char *p)
{
	char		tok[512];

	while (*p == '/')
	{
		size_t		n = 0;

		p++;
		while (*p && *p != '/' && n + 1 < sizeof(tok))
		{
			if (p[0] == '~' && p[1] == '1')
				tok[n++] = '/', p += 2;
			else if (p[0] == '~' && p[1] == '0')
				tok[n++] = '~', p += 2;
			else
				tok[n++] = *p++;
		}
		tok[n] = '\0';
		if (json_object_is_type(j, json_type_object))
		{
			if (!json_object_object_get_ex(j, tok, &j))
				return NULL;
		}
		else if (json_object_is_type(j, json_type_array))
		{
			char	   *end;
			long		i = strtol(tok, &end, 10);

			if (n == 0 || *end || i < 0 || (size_t) i >= json_object_array_length(j))
				return NULL;
			j = json_object_array_get_idx(j, (size_t) i);
		}
		else
			return NULL;
	}
	return *p ? NULL : j;
}

/*
 * Resolve a $ref/$dynamicRef value from the subschema e into its target's
 * node; *anchor_def gets the anchor it named, if any.  NULL after cfail.
 */
static js_node *
resolve_ref(cctx *cx, js_entry *e, const char *kw, const char *ref, js_anchor_def **anchor_def)
{
	char	   *abs = uri_resolve(cx, e->base, ref);
	const char *frag;
	char	   *uri = uri_split(cx, abs, &frag);
	js_resource *r = resource_find(cx, uri);
	json_object *target;
	const char *tptr;

	*anchor_def = NULL;
	if (r == NULL)
	{
		cfail(cx, WFE_JSE_REMOTE_REF, e->ptr, kw,
			  "remote reference \"%s\"%s%s is not supported: wfe resolves references within the schema only; "
			  "put what it names under \"$defs\" and refer to it as \"#/$defs/...\"", ref,
			  strcmp(ref, uri) == 0 ? "" : ", that is ", strcmp(ref, uri) == 0 ? "" : uri);
		return NULL;
	}
	frag = percent_decode(cx, frag);
	if (frag[0] == '\0' || frag[0] == '/')
	{
		js_entry   *re = entry_find(cx, r->json);

		target = pointer_get(r->json, frag);
		tptr = wfe_arena_printf(cx->a, "%s%s", re && strcmp(re->ptr, "#") != 0 ? re->ptr : "#", frag);
	}
	else
	{
		js_anchor_def *a = anchor_find(cx, uri, frag);

		target = a ? a->json : NULL;
		tptr = NULL;
		*anchor_def = a;
	}
	if (target == NULL || !is_schema(target))
	{
		cfail(cx, WFE_JSE_VALUE, e->ptr, kw, "\"%s\" names nothing in this schema%s", ref,
			  target ? " that is a schema" : "");
		return NULL;
	}
	{
		js_entry	near = *e;

		near.res = r;
		near.base = uri;
		return node_for(cx, target, tptr ? tptr : wfe_arena_printf(cx->a, "#%s", frag), &near);
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
				cx->local_refs[cx->nlocal_refs++] = percent_decode(cx, json_object_get_string(val));
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
static int
referenced(cctx *cx, js_entry *e, const char *key)
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
	kp = ptr_push(cx, e->ptr, key);
	n = strlen(kp);
	for (int i = 0; i < cx->nlocal_refs; i++)
		if (strncmp(cx->local_refs[i], kp, n) == 0 &&
			(cx->local_refs[i][n] == '\0' || cx->local_refs[i][n] == '/'))
			return 1;
	return 0;
}

/* Keywords accepted and ignored. */
static const char *const ANNOTATION_KW[] = {
	"title", "description", "default", "examples", "$comment", "deprecated", "readOnly",
	"writeOnly", "contentEncoding", "contentMediaType", "contentSchema", "format", NULL
};

/* Keywords of each dialect (besides the annotations). */
static const char *const KW_2020[] = {
	"$schema", "$id", "$anchor", "$dynamicAnchor", "$ref", "$dynamicRef", "$defs",
	"definitions", "$vocabulary",
	"allOf", "anyOf", "oneOf", "not", "if", "then", "else", "dependentSchemas",
	"prefixItems", "items", "contains", "properties", "patternProperties",
	"additionalProperties", "propertyNames", "unevaluatedItems", "unevaluatedProperties",
	"type", "enum", "const", "multipleOf", "maximum", "exclusiveMaximum", "minimum",
	"exclusiveMinimum", "maxLength", "minLength", "pattern", "maxItems", "minItems",
	"uniqueItems", "maxContains", "minContains", "maxProperties", "minProperties",
	"required", "dependentRequired", "dependencies", NULL
};
static const char *const KW_DRAFT7[] = {
	"$schema", "$id", "$ref", "$defs", "definitions",
	"allOf", "anyOf", "oneOf", "not", "if", "then", "else", "items", "additionalItems",
	"contains", "properties", "patternProperties", "additionalProperties", "dependencies",
	"propertyNames",
	"type", "enum", "const", "multipleOf", "maximum", "exclusiveMaximum", "minimum",
	"exclusiveMinimum", "maxLength", "minLength", "pattern", "maxItems", "minItems",
	"uniqueItems", "maxProperties", "minProperties", "required", NULL
};

/* A subschema value of keyword key (NULL after cfail). */
static js_node *
sub(cctx *cx, js_entry *e, const char *key, json_object *v)
{
	if (!is_schema(v))
	{
		cfail(cx, WFE_JSE_VALUE, e->ptr, key, "\"%s\" must be a schema (an object or a boolean), not %s",
			  key, wfe_json_type_name(v));
		return NULL;
	}
	return node_for(cx, v, ptr_push(cx, e->ptr, key), e);
}

/* An array of subschemas (non-empty). */
static js_node **
sub_array(cctx *cx, js_entry *e, const char *key, json_object *v, int *n)
{
	js_node   **out;
	size_t		len;
	const char *kp = ptr_push(cx, e->ptr, key);

	if (!json_object_is_type(v, json_type_array) || (len = json_object_array_length(v)) == 0)
	{
		cfail(cx, WFE_JSE_VALUE, e->ptr, key, "\"%s\" must be a non-empty array of schemas", key);
		return NULL;
	}
	out = wfe_arena_alloc(cx->a, len * sizeof(js_node *));
	for (size_t i = 0; i < len; i++)
	{
		json_object *item = json_object_array_get_idx(v, i);

		if (!is_schema(item))
		{
			cfail(cx, WFE_JSE_VALUE, kp, wfe_arena_printf(cx->a, "%zu", i),
				  "\"%s\" items must be schemas (objects or booleans), not %s", key,
				  wfe_json_type_name(item));
			return NULL;
		}
		out[i] = node_for(cx, item, wfe_arena_printf(cx->a, "%s/%zu", kp, i), e);
	}
	*n = (int) len;
	return out;
}

/* A number keyword's value, into the arena. */
static wfe_jnum *
num_value(cctx *cx, js_entry *e, const char *key, json_object *v, int positive)
{
	wfe_jnum	n;
	wfe_jnum   *out;

	if (!json_object_is_type(v, json_type_int) && !json_object_is_type(v, json_type_double))
	{
		cfail(cx, WFE_JSE_VALUE, e->ptr, key, "\"%s\" must be a number, not %s", key,
			  wfe_json_type_name(v));
		return NULL;
	}
	if (wfe_jnum_from_json(&n, v) < 0)
	{
		cfail(cx, WFE_JSE_VALUE, e->ptr, key, "\"%s\" must be a finite number", key);
		return NULL;
	}
	if (positive && (n.neg || n.ndig == 0))
	{
		wfe_jnum_free(&n);
		cfail(cx, WFE_JSE_VALUE, e->ptr, key, "\"%s\" must be greater than 0", key);
		return NULL;
	}
	out = wfe_arena_alloc(cx->a, sizeof(wfe_jnum));
	*out = n;
	out->dig = (n.dig == n.inl) ? out->inl : wfe_arena_strndup(cx->a, n.dig, (size_t) n.ndig);
	wfe_jnum_free(&n);
	return out;
}

/* A non-negative integer keyword's value (1.0 counts), or -1 after cfail. */
static long
count_value(cctx *cx, js_entry *e, const char *key, json_object *v)
{
	wfe_jnum	n;
	long		r = 0;

	if ((!json_object_is_type(v, json_type_int) && !json_object_is_type(v, json_type_double)) ||
		wfe_jnum_from_json(&n, v) < 0)
	{
		cfail(cx, WFE_JSE_VALUE, e->ptr, key, "\"%s\" must be a non-negative integer, not %s", key,
			  wfe_json_type_name(v));
		return -1;
	}
	if (n.neg || !wfe_jnum_is_integer(&n))
	{
		wfe_jnum_free(&n);
		cfail(cx, WFE_JSE_VALUE, e->ptr, key, "\"%s\" must be a non-negative integer, not %s", key,
			  json_object_to_json_string_ext(v, JSON_C_TO_STRING_PLAIN));
		return -1;
	}
	/* digits then zeros; saturate far beyond any length */
	for (int i = 0; i < n.ndig + n.exp && r < 1000000000000L; i++)
		r = r * 10 + (i < n.ndig ? n.dig[i] - '0' : 0);
	wfe_jnum_free(&n);
	return r;
}

/* An array of distinct strings (required, dependentRequired values). */
static const char **
string_set(cctx *cx, js_entry *e, const char *ptr, const char *key, json_object *v, int *n)
{
	size_t		len;
	const char **out;

	if (!json_object_is_type(v, json_type_array))
	{
		cfail(cx, WFE_JSE_VALUE, ptr, key, "\"%s\" must be an array of distinct property names, not %s",
			  key, wfe_json_type_name(v));
		return NULL;
	}
	len = json_object_array_length(v);
	out = wfe_arena_alloc(cx->a, (len + 1) * sizeof(char *));
	for (size_t i = 0; i < len; i++)
	{
		json_object *s = json_object_array_get_idx(v, i);

		if (!json_object_is_type(s, json_type_string))
		{
			cfail(cx, WFE_JSE_VALUE, ptr, key, "\"%s\" must be an array of distinct property names, not %s",
				  key, json_object_to_json_string_ext(v, JSON_C_TO_STRING_PLAIN));
			return NULL;
		}
		out[i] = json_object_get_string(s);
		for (size_t k = 0; k < i; k++)
			if (strcmp(out[k], out[i]) == 0)
			{
				cfail(cx, WFE_JSE_VALUE, ptr, key, "\"%s\" names \"%s\" twice", key, out[i]);
				return NULL;
			}
	}
	(void) e;
	*n = (int) len;
	return out;
}

/* Compile a regex keyword value (the doc owns it). */
static wfe_regex *
regex_value(cctx *cx, const char *ptr, const char *key, const char *pattern)
{
	char		err[256];
	wfe_regex  *re = wfe_regex_compile(pattern, strlen(pattern), err, sizeof(err));

	if (re == NULL)
	{
		cfail(cx, WFE_JSE_PATTERN, ptr, key, "%s (pattern \"%s\")", err, pattern);
		return NULL;
	}
	if (cx->nregexes == cx->capregexes)
	{
		int			cap = cx->capregexes ? cx->capregexes * 2 : 8;
		wfe_regex **r = realloc(cx->regexes, (size_t) cap * sizeof(wfe_regex *));

		if (!r)
		{
			wfe_regex_free(re);
			cfail(cx, WFE_JSE_VALUE, ptr, key, "out of memory");
			return NULL;
		}
		cx->regexes = r;
		cx->capregexes = cap;
	}
	cx->regexes[cx->nregexes++] = re;
	return re;
}

/* qsort order of properties. */
static int
prop_cmp(const void *a, const void *b)
{
	return strcmp(((const js_prop *) a)->name, ((const js_prop *) b)->name);
}

/* The "type" keyword. */
static void
compile_type(cctx *cx, js_entry *e, js_node *n, json_object *v)
{
	static const char *const names[] = {"null", "boolean", "object", "array", "number", "string", "integer"};
	json_object *single[1] = {v};
	size_t		len = 1;
	char		text[128] = "";

	if (json_object_is_type(v, json_type_array))
	{
		len = json_object_array_length(v);
		if (len == 0)
		{
			cfail(cx, WFE_JSE_VALUE, e->ptr, "type",
				  "\"type\" must be one of object, array, string, number, integer, boolean, null, or an array of distinct ones, not []");
			return;
		}
	}
	for (size_t i = 0; i < len; i++)
	{
		json_object *t = json_object_is_type(v, json_type_array) ? json_object_array_get_idx(v, i) : single[0];
		const char *s = json_object_is_type(t, json_type_string) ? json_object_get_string(t) : NULL;
		int			bit = -1;

		for (int k = 0; s && k < 7; k++)
			if (strcmp(s, names[k]) == 0)
				bit = k;
		if (bit < 0 || (n->types & (1u << bit)))
		{
			cfail(cx, WFE_JSE_VALUE, e->ptr, "type",
				  "\"type\" must be one of object, array, string, number, integer, boolean, null, or an array of distinct ones, not %s",
				  json_object_to_json_string_ext(v, JSON_C_TO_STRING_PLAIN));
			return;
		}
		n->types |= 1u << bit;
		/* "a, b or c" */
		if (i > 0)
			strncat(text, i + 1 == len ? " or " : ", ", sizeof(text) - strlen(text) - 1);
		strncat(text, s, sizeof(text) - strlen(text) - 1);
	}
	n->type_text = wfe_arena_strdup(cx->a, text);
}

/* Fill one node from its JSON. */
static void
compile_entry(cctx *cx, js_entry *e)
{
	js_node    *n = e->node;
	json_object *s = e->json;
	json_object *v;
	const char *const *known = e->dialect == JS_DRAFT7 ? KW_DRAFT7 : KW_2020;
	int			draft7_ref;

	n->min_length = n->max_length = n->min_items = n->max_items = -1;
	n->min_props = n->max_props = n->min_contains = n->max_contains = -1;
	if (json_object_is_type(s, json_type_boolean))
	{
		n->boolean = (signed char) json_object_get_boolean(s);
		return;
	}
	n->boolean = -1;

	/* draft-07: "$ref" replaces every other keyword of its object */
	draft7_ref = e->dialect == JS_DRAFT7 && json_object_object_get_ex(s, "$ref", NULL);

	{
		json_object_object_foreach(s, key, val)
		{
			if (cx->failed)
				return;
			if (draft7_ref && strcmp(key, "$ref") != 0)
				continue;
			if (!in_list(key, known))
			{
				if (in_list(key, ANNOTATION_KW))
				{
					if ((strcmp(key, "title") == 0 || strcmp(key, "description") == 0 ||
						 strcmp(key, "format") == 0 || strcmp(key, "$comment") == 0) &&
						!json_object_is_type(val, json_type_string))
						cfail(cx, WFE_JSE_VALUE, e->ptr, key, "\"%s\" must be a string, not %s", key,
							  wfe_json_type_name(val));
					else if (strcmp(key, "format") == 0)
						n->format = json_object_get_string(val);
					continue;
				}
				if (referenced(cx, e, key))
					continue;
				cfail(cx, WFE_JSE_UNKNOWN_KEYWORD, e->ptr, key,
					  "unsupported JSON Schema keyword \"%s\"%s", key,
					  e->dialect == JS_DRAFT2020 && (strcmp(key, "additionalItems") == 0) ?
					  " (draft 2020-12 spells it \"items\" after \"prefixItems\"; or say \"$schema\": draft-07)" : "");
				return;
			}
			if (strcmp(key, "type") == 0)
				compile_type(cx, e, n, val);
			else if (strcmp(key, "enum") == 0)
			{
				/* [] is valid (2020-12 says SHOULD be non-empty): nothing satisfies it */
				if (!json_object_is_type(val, json_type_array))
					cfail(cx, WFE_JSE_VALUE, e->ptr, key, "\"enum\" must be an array of values, not %s",
						  json_object_to_json_string_ext(val, JSON_C_TO_STRING_PLAIN));
				n->enum_values = val;
			}
			else if (strcmp(key, "const") == 0)
			{
				n->const_value = val;
				n->has_const = 1;
			}
			else if (strcmp(key, "minimum") == 0)
				n->minimum = num_value(cx, e, key, val, 0);
			else if (strcmp(key, "maximum") == 0)
				n->maximum = num_value(cx, e, key, val, 0);
			else if (strcmp(key, "exclusiveMinimum") == 0)
				n->xminimum = num_value(cx, e, key, val, 0);
			else if (strcmp(key, "exclusiveMaximum") == 0)
				n->xmaximum = num_value(cx, e, key, val, 0);
			else if (strcmp(key, "multipleOf") == 0)
				n->multiple_of = num_value(cx, e, key, val, 1);
			else if (strcmp(key, "minLength") == 0)
				n->min_length = count_value(cx, e, key, val);
			else if (strcmp(key, "maxLength") == 0)
				n->max_length = count_value(cx, e, key, val);
			else if (strcmp(key, "minItems") == 0)
				n->min_items = count_value(cx, e, key, val);
			else if (strcmp(key, "maxItems") == 0)
				n->max_items = count_value(cx, e, key, val);
			else if (strcmp(key, "minProperties") == 0)
				n->min_props = count_value(cx, e, key, val);
			else if (strcmp(key, "maxProperties") == 0)
				n->max_props = count_value(cx, e, key, val);
			else if (strcmp(key, "minContains") == 0)
				n->min_contains = count_value(cx, e, key, val);
			else if (strcmp(key, "maxContains") == 0)
				n->max_contains = count_value(cx, e, key, val);
			else if (strcmp(key, "uniqueItems") == 0)
			{
				if (!json_object_is_type(val, json_type_boolean))
					cfail(cx, WFE_JSE_VALUE, e->ptr, key, "\"uniqueItems\" must be a boolean");
				n->unique_items = json_object_get_boolean(val);
			}
			else if (strcmp(key, "pattern") == 0)
			{
				if (!json_object_is_type(val, json_type_string))
					cfail(cx, WFE_JSE_VALUE, e->ptr, key, "\"pattern\" must be a string (a regular expression)");
				else
				{
					n->pattern_text = json_object_get_string(val);
					n->pattern = regex_value(cx, e->ptr, key, n->pattern_text);
				}
			}
			else if (strcmp(key, "required") == 0)
				n->required = string_set(cx, e, e->ptr, key, val, &n->nrequired);
			else if (strcmp(key, "properties") == 0 || strcmp(key, "patternProperties") == 0)
			{
				int			pattern = key[0] == 'p' && key[1] == 'a';
				const char *kp = ptr_push(cx, e->ptr, key);
				int			i = 0,
							cnt;

				if (!json_object_is_type(val, json_type_object))
				{
					cfail(cx, WFE_JSE_VALUE, e->ptr, key, "\"%s\" must be an object of schemas, not %s", key,
						  wfe_json_type_name(val));
					return;
				}
				cnt = json_object_object_length(val);
				if (pattern)
					n->pattern_props = wfe_arena_alloc(cx->a, (size_t) (cnt + 1) * sizeof(js_pattern_prop));
				else
					n->props = wfe_arena_alloc(cx->a, (size_t) (cnt + 1) * sizeof(js_prop));
				{
					json_object_object_foreach(val, pk, pv)
					{
						if (!is_schema(pv))
						{
							cfail(cx, WFE_JSE_VALUE, kp, pk, "must be a schema (an object or a boolean), not %s",
								  wfe_json_type_name(pv));
							return;
						}
						if (pattern)
						{
							n->pattern_props[i].re = regex_value(cx, kp, pk, pk);
							n->pattern_props[i].schema = node_for(cx, pv, ptr_push(cx, kp, pk), e);
						}
						else
						{
							n->props[i].name = pk;
							n->props[i].schema = node_for(cx, pv, ptr_push(cx, kp, pk), e);
						}
						i++;
					}
				}
				if (pattern)
					n->npattern_props = i;
				else
				{
					n->nprops = i;
					qsort(n->props, (size_t) i, sizeof(js_prop), prop_cmp);
				}
			}
			else if (strcmp(key, "additionalProperties") == 0)
				n->additional_props = sub(cx, e, key, val);
			else if (strcmp(key, "propertyNames") == 0)
				n->property_names = sub(cx, e, key, val);
			else if (strcmp(key, "unevaluatedProperties") == 0)
				n->unevaluated_props = sub(cx, e, key, val);
			else if (strcmp(key, "unevaluatedItems") == 0)
				n->unevaluated_items = sub(cx, e, key, val);
			else if (strcmp(key, "contains") == 0)
				n->contains = sub(cx, e, key, val);
			else if (strcmp(key, "not") == 0)
				n->not_schema = sub(cx, e, key, val);
			else if (strcmp(key, "if") == 0)
				n->if_schema = sub(cx, e, key, val);
			else if (strcmp(key, "then") == 0)
				n->then_schema = sub(cx, e, key, val);
			else if (strcmp(key, "else") == 0)
				n->else_schema = sub(cx, e, key, val);
			else if (strcmp(key, "allOf") == 0)
				n->all_of = sub_array(cx, e, key, val, &n->nall_of);
			else if (strcmp(key, "anyOf") == 0)
				n->any_of = sub_array(cx, e, key, val, &n->nany_of);
			else if (strcmp(key, "oneOf") == 0)
				n->one_of = sub_array(cx, e, key, val, &n->none_of);
			else if (strcmp(key, "prefixItems") == 0)
				n->prefix_items = sub_array(cx, e, key, val, &n->nprefix_items);
			else if (strcmp(key, "items") == 0)
			{
				if (json_object_is_type(val, json_type_array) && e->dialect == JS_DRAFT7)
				{
					n->prefix_items = sub_array(cx, e, key, val, &n->nprefix_items);
					/* the rest: additionalItems, when given */
					if (json_object_object_get_ex(s, "additionalItems", &v))
						n->items = sub(cx, e, "additionalItems", v);
				}
				else if (json_object_is_type(val, json_type_array))
					cfail(cx, WFE_JSE_VALUE, e->ptr, key,
						  "\"items\" must be a schema in draft 2020-12; an array of schemas is \"prefixItems\" "
						  "(or say \"$schema\": \"http://json-schema.org/draft-07/schema#\")");
				else
					n->items = sub(cx, e, key, val);
			}
			else if (strcmp(key, "additionalItems") == 0)
			{
				/* draft-07: used by "items" as an array (above); otherwise ignored */
				if (!is_schema(val))
					cfail(cx, WFE_JSE_VALUE, e->ptr, key, "\"additionalItems\" must be a schema");
			}
			else if (strcmp(key, "dependentRequired") == 0 || strcmp(key, "dependentSchemas") == 0 ||
					 strcmp(key, "dependencies") == 0)
			{
				const char *kp = ptr_push(cx, e->ptr, key);
				int			cnt,
							nr = 0,
							ns = 0;

				if (!json_object_is_type(val, json_type_object))
				{
					cfail(cx, WFE_JSE_VALUE, e->ptr, key, "\"%s\" must be an object, not %s", key,
						  wfe_json_type_name(val));
					return;
				}
				cnt = json_object_object_length(val);
				{
					/* keep earlier ones (dependencies beside dependentRequired) */
					js_dep	   *oldr = n->dep_required,
							   *olds = n->dep_schemas;

					n->dep_required = wfe_arena_alloc(cx->a, (size_t) (cnt + n->ndep_required + 1) * sizeof(js_dep));
					n->dep_schemas = wfe_arena_alloc(cx->a, (size_t) (cnt + n->ndep_schemas + 1) * sizeof(js_dep));
					if (oldr)
						memcpy(n->dep_required, oldr, (size_t) n->ndep_required * sizeof(js_dep));
					if (olds)
						memcpy(n->dep_schemas, olds, (size_t) n->ndep_schemas * sizeof(js_dep));
					nr = n->ndep_required;
					ns = n->ndep_schemas;
				}
				{
					json_object_object_foreach(val, dk, dv)
					{
						int			as_names = json_object_is_type(dv, json_type_array);
						/* dependentRequired: names; dependentSchemas: schemas; dependencies: either */
						int			want_names = strcmp(key, "dependentRequired") == 0,
									want_schema = strcmp(key, "dependentSchemas") == 0;

						if ((want_names && !as_names) || (want_schema && !is_schema(dv)) ||
							(!want_names && !want_schema && !as_names && !is_schema(dv)))
						{
							cfail(cx, WFE_JSE_VALUE, kp, dk, "must be %s",
								  want_names ? "an array of property names" :
								  want_schema ? "a schema" : "an array of property names or a schema");
							return;
						}
						if (as_names)
						{
							n->dep_required[nr].kw = key;
					n->dep_required[nr].name = dk;
							n->dep_required[nr].names = string_set(cx, e, kp, dk, dv, &n->dep_required[nr].nnames);
							nr++;
						}
						else
						{
							n->dep_schemas[ns].kw = key;
					n->dep_schemas[ns].name = dk;
							n->dep_schemas[ns].schema = node_for(cx, dv, ptr_push(cx, kp, dk), e);
							ns++;
						}
					}
				}
				n->ndep_required = nr;
				n->ndep_schemas = ns;
			}
			else if (strcmp(key, "$ref") == 0 || strcmp(key, "$dynamicRef") == 0)
			{
				js_anchor_def *ad;
				js_node    *t;

				if (!json_object_is_type(val, json_type_string))
				{
					cfail(cx, WFE_JSE_VALUE, e->ptr, key, "\"%s\" must be a string (a URI reference)", key);
					return;
				}
				t = resolve_ref(cx, e, key, json_object_get_string(val), &ad);
				if (key[1] == 'r')
					n->ref = t;
				else
				{
					n->dynamic_ref = t;
					if (ad && ad->dynamic)
					{
						n->dynamic_name = ad->name;
						cx->doc->uses_dynamic = 1;
					}
				}
			}
			else if (strcmp(key, "$schema") == 0)
			{
				if (!json_object_is_type(val, json_type_string))
					cfail(cx, WFE_JSE_VALUE, e->ptr, key, "\"$schema\" must be a string");
				/* the root's was read before; a different one below it is refused there */
			}
			else if (strcmp(key, "$id") == 0 || strcmp(key, "$anchor") == 0 || strcmp(key, "$dynamicAnchor") == 0)
			{
				if (!json_object_is_type(val, json_type_string))
					cfail(cx, WFE_JSE_VALUE, e->ptr, key, "\"%s\" must be a string", key);
			}
			else if (strcmp(key, "$defs") == 0 || strcmp(key, "definitions") == 0)
			{
				if (!json_object_is_type(val, json_type_object))
					cfail(cx, WFE_JSE_VALUE, e->ptr, key, "\"%s\" must be an object of schemas", key);
				else
				{
					/* compiled too, so a malformed definition is refused even if unused */
					const char *kp = ptr_push(cx, e->ptr, key);

					json_object_object_foreach(val, dk, dv)
					{
						if (!is_schema(dv))
						{
							cfail(cx, WFE_JSE_VALUE, kp, dk, "must be a schema (an object or a boolean), not %s",
								  wfe_json_type_name(dv));
							return;
						}
						(void) node_for(cx, dv, ptr_push(cx, kp, dk), e);
					}
				}
			}
			/* $vocabulary: accepted (meta-schemas); nothing to check */
		}
	}
	if (n->min_contains < 0 && n->contains)
		n->min_contains = 1;
	n->needs_annotations = n->unevaluated_props != NULL || n->unevaluated_items != NULL;
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

	if (in_list(uri, d2020))
		return JS_DRAFT2020;
	if (in_list(uri, d7))
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
			cfail(cx, WFE_JSE_DIALECT, e->ptr, "$schema",
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

	if (!is_schema(schema))
	{
		cfail(&cx, WFE_JSE_VALUE, "#", NULL, "a schema must be a JSON object or a boolean, not %s",
			  wfe_json_type_name(schema));
		goto fail;
	}
	if (json_object_is_type(schema, json_type_object) &&
		json_object_object_get_ex(schema, "$schema", &v) && json_object_is_type(v, json_type_string))
	{
		doc->dialect = dialect_of(json_object_get_string(v));
		if (doc->dialect == 0)
		{
			cfail(&cx, WFE_JSE_DIALECT, "#", "$schema",
				  "unsupported dialect \"%s\": wfe runs JSON Schema draft 2020-12 "
				  "(https://json-schema.org/draft/2020-12/schema) and draft-07 "
				  "(http://json-schema.org/draft-07/schema#)", json_object_get_string(v));
			goto fail;
		}
	}
	cx.root_json = schema;
	root_res = resource_add(&cx, DEFAULT_BASE, schema);
	index_schema(&cx, schema, "#", DEFAULT_BASE, root_res, doc->dialect);
	/* a root $id renames the root resource; keep the default name findable too */
	if (cx.failed)
		goto fail;
	check_nested_dialects(&cx);
	root = entry_find(&cx, schema);
	doc->root = node_for(&cx, schema, "#", root);
	/* every $dynamicAnchor gets a node, for the dynamic scope */
	for (js_resource *r = doc->resources; r; r = r->next)
		if (r->ndynamic > 0)
		{
			js_entry   *re = entry_find(&cx, r->json);

			r->dynamic = wfe_arena_alloc(cx.a, (size_t) r->ndynamic * sizeof(js_anchor));
			r->ndynamic = 0;
			for (js_anchor_def *a = cx.anchors; a; a = a->next)
				if (a->dynamic && strcmp(a->uri, r->uri) == 0)
				{
					js_entry   *ae = entry_find(&cx, a->json);

					r->dynamic[r->ndynamic].name = a->name;
					r->dynamic[r->ndynamic].node = node_for(&cx, a->json, ae ? ae->ptr : "#", ae ? ae : re);
					r->ndynamic++;
				}
		}
	while (cx.work && !cx.failed)
	{
		js_work    *w = cx.work;

		cx.work = w->next;
		compile_entry(&cx, w->e);
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
