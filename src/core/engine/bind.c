/*
 * bind.c — input binding and decision evaluation at run time (see bind.h).
 *
 * The compiler has already checked every `${...}` of a stored plan (syntax,
 * roots, lineage) and every `when`; what can go wrong here is the data: a
 * path that does not exist in this run, a JSON null, a value of the wrong
 * kind, an evaluation error.  Binding never looks for a leftover "${" in its
 * output to detect failure: each reference is resolved and judged on its own.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include "bind.h"
#include "core/base/utf8.h"
#include "core/lang/compile.h"
#include "core/expr/expr.h"
#include "core/jsonschema/jsonschema.h"

/* Longest input key path spelt in a message; deeper ones end in "...". */
#define BIND_PATH_MAX 200

/* Longest reference quoted in a message. */
#define BIND_REF_MAX 120

/* A growable byte buffer for interpolated text. */
typedef struct sbuf
{
	char	   *data;
	size_t		len;
	size_t		cap;
} sbuf;

/* State of one binding. */
typedef struct bctx
{
	json_object *root;
	wfe_bind_error *err;
	char		path[BIND_PATH_MAX + 1];	/* "input", "input.a[0]", ... */
	int			truncated;		/* the path did not fit */
} bctx;

/* Append n bytes; 0 ok, -1 out of memory. */
static int
sbuf_put(sbuf *b, const char *s, size_t n)
{
	if (b->len + n + 1 > b->cap)
	{
		size_t		cap = b->cap ? b->cap : 64;
		char	   *data;

		while (cap < b->len + n + 1)
			cap *= 2;
		data = realloc(b->data, cap);
		if (data == NULL)
			return -1;
		b->data = data;
		b->cap = cap;
	}
	memcpy(b->data + b->len, s, n);
	b->len += n;
	b->data[b->len] = '\0';
	return 0;
}

static int	fail(bctx *cx, const char *code, const char *fmt,...)
			__attribute__((format(printf, 3, 4)));
static void decision_fail(wfe_decision *d, int branch, const char *fmt,...)
			__attribute__((format(printf, 3, 4)));

/* Fill the error with a code and "<input path>: <message>"; returns -1. */
static int
fail(bctx *cx, const char *code, const char *fmt,...)
{
	va_list		ap;
	int			n;

	cx->err->code = code;
	n = snprintf(cx->err->message, sizeof(cx->err->message), "%s%s: ",
				 cx->path, cx->truncated ? "..." : "");
	if (n >= 0 && (size_t) n < sizeof(cx->err->message))
	{
		va_start(ap, fmt);
		vsnprintf(cx->err->message + n, sizeof(cx->err->message) - (size_t) n, fmt, ap);
		va_end(ap);
	}
	wfe_utf8_sanitize(cx->err->message);
	return -1;
}


/* How much of a reference to quote: at most BIND_REF_MAX bytes, whole characters. */
static int
quote_len(const char *body, size_t len)
{
	size_t		n = len;

	if (n > BIND_REF_MAX)
	{
		n = BIND_REF_MAX;
		/* do not cut a UTF-8 sequence: back up over continuation bytes */
		n = wfe_utf8_cut(body, n);
	}
	return (int) n;
}

/*
 * Resolve one reference body.  Returns 0 with *out borrowed (never NULL), or
 * -1 with the error filled: binding.missing (no such path, or not a valid
 * reference at all), binding.null.
 */
static int
resolve_ref(bctx *cx, const char *body, size_t len, json_object **out)
{
	wfe_path	p;
	wfe_expr_error perr;
	wfe_path_status st;
	int			qlen = quote_len(body, len);
	const char *more = len > BIND_REF_MAX ? "..." : "";

	memset(&perr, 0, sizeof(perr));
	/*
	 * The reference does not say which form its plan is in: the stages form
	 * knows "stages", the tasks form "outputs".  Either is fine here; the
	 * compiler already held each reference to its own form.
	 */
	if (wfe_path_parse(body, len, WFE_FORM_STAGES, &p, &perr) != 0)
	{
		if (perr.code == NULL || strcmp(perr.code, "expr.unknown_root") != 0 ||
			wfe_path_parse(body, len, WFE_FORM_TASKS, &p, &perr) != 0)
			/* only a plan the compiler never saw gets here */
			return fail(cx, WFE_BIND_MISSING, "${%.*s%s} is not a valid reference: %s",
						qlen, body, more, perr.message);
	}
	st = wfe_path_resolve(&p, cx->root, out);
	wfe_path_free(&p);
	if (st == WFE_PATH_MISSING)
		return fail(cx, WFE_BIND_MISSING, "${%.*s%s} is missing", qlen, body, more);
	if (st == WFE_PATH_NULL || *out == NULL)
		return fail(cx, WFE_BIND_NULL, "${%.*s%s} is null", qlen, body, more);
	return 0;
}

/* A string exactly "${...}": the referenced value, typed. */
static int
bind_whole(bctx *cx, const char *body, size_t len, json_object **out)
{
	json_object *v;

	if (resolve_ref(cx, body, len, &v) < 0)
		return -1;
	/* a copy: the caller owns the input apart from the root */
	if (json_object_deep_copy(v, out, NULL) != 0)
		return fail(cx, WFE_BIND_TYPE, "out of memory");
	return 0;
}

/* Append the text of a scalar reference inside a longer string. */
static int
append_ref_text(bctx *cx, sbuf *b, const char *body, size_t len)
{
	json_object *v;
	char	   *text;
	int			rc;

	if (resolve_ref(cx, body, len, &v) < 0)
		return -1;
	switch (json_object_get_type(v))
	{
		case json_type_string:
			rc = sbuf_put(b, json_object_get_string(v),
						  (size_t) json_object_get_string_len(v));
			break;
		case json_type_array:
		case json_type_object:
			return fail(cx, WFE_BIND_TYPE,
						"${%.*s%s} is %s; only a string, number or boolean can be part of a longer string",
						quote_len(body, len), body,
						len > BIND_REF_MAX ? "..." : "",
						json_object_is_type(v, json_type_array) ? "an array" : "an object");
		default:
			/* numbers in shortest form, true/false: the canonical spelling */
			text = wfe_canonical_json(v);
			if (text == NULL)
				return fail(cx, WFE_BIND_TYPE, "out of memory");
			rc = sbuf_put(b, text, strlen(text));
			free(text);
			break;
	}
	if (rc < 0)
		return fail(cx, WFE_BIND_TYPE, "out of memory");
	return 0;
}

/* Bind one string of the template. */
static int
bind_string(bctx *cx, json_object *t, json_object **out)
{
	const char *s = json_object_get_string(t);
	size_t		len = (size_t) json_object_get_string_len(t);
	sbuf		b = {NULL, 0, 0};
	size_t		run = 0;		/* start of literal text not yet copied */

	/* exactly one reference: the value keeps its JSON type */
	if (len >= 3 && s[0] == '$' && s[1] == '{' && wfe_interp_close(s, len, 2) == len - 1)
		return bind_whole(cx, s + 2, len - 3, out);

	for (size_t i = 0; i + 1 < len; i++)
	{
		size_t		j;

		if (s[i] != '$')
			continue;
		if (s[i + 1] == '$' && i + 2 < len && s[i + 2] == '{')
		{
			/* "$${" is a literal "${": copy up to the first '$', skip it */
			if (sbuf_put(&b, s + run, i - run) < 0)
				goto oom;
			run = i + 1;
			i += 2;
			continue;
		}
		if (s[i + 1] != '{')
			continue;
		j = wfe_interp_close(s, len, i + 2);
		if (j >= len)
		{
			free(b.data);
			return fail(cx, WFE_BIND_MISSING,
						"unterminated interpolation: '${' without a closing '}'");
		}
		if (sbuf_put(&b, s + run, i - run) < 0)
			goto oom;
		if (append_ref_text(cx, &b, s + i + 2, j - i - 2) < 0)
		{
			free(b.data);
			return -1;
		}
		run = j + 1;
		i = j;
	}
	if (sbuf_put(&b, s + run, len - run) < 0)
		goto oom;
	*out = json_object_new_string_len(b.data, (int) b.len);
	free(b.data);
	if (*out == NULL)
		return fail(cx, WFE_BIND_TYPE, "out of memory");
	return 0;

oom:
	free(b.data);
	return fail(cx, WFE_BIND_TYPE, "out of memory");
}

static int	bind_node(bctx *cx, json_object *t, json_object **out, int depth);

/* Bind a member or element under a longer input path, then restore it. */
static int
bind_child(bctx *cx, json_object *t, json_object **out, int depth,
		   const char *key, size_t index)
{
	size_t		len = strlen(cx->path);
	int			truncated = cx->truncated;
	int			rc;

	if (!cx->truncated &&
		(key ? wfe_json_path_push_key(cx->path, sizeof(cx->path), key)
		 : wfe_json_path_push_index(cx->path, sizeof(cx->path), index)) < 0)
		cx->truncated = 1;
	rc = bind_node(cx, t, out, depth + 1);
	cx->path[len] = '\0';
	cx->truncated = truncated;
	return rc;
}

/* Bind any template value; *out is a new reference on success. */
static int
bind_node(bctx *cx, json_object *t, json_object **out, int depth)
{
	*out = NULL;
	if (depth > WFE_BIND_MAX_DEPTH)
		return fail(cx, WFE_BIND_TYPE, "input template nested deeper than %d levels",
					WFE_BIND_MAX_DEPTH);
	switch (json_object_get_type(t))
	{
		case json_type_string:
			return bind_string(cx, t, out);
		case json_type_array:
			{
				size_t		n = json_object_array_length(t);
				json_object *arr = json_object_new_array_ext((int) (n ? n : 1));

				if (arr == NULL)
					return fail(cx, WFE_BIND_TYPE, "out of memory");
				for (size_t i = 0; i < n; i++)
				{
					json_object *v;

					if (bind_child(cx, json_object_array_get_idx(t, i), &v, depth, NULL, i) < 0)
					{
						json_object_put(arr);
						return -1;
					}
					/* JSON null elements are kept: json-c stores them as NULL */
					if (json_object_array_add(arr, v) != 0)
					{
						json_object_put(v);
						json_object_put(arr);
						return fail(cx, WFE_BIND_TYPE, "out of memory");
					}
				}
				*out = arr;
				return 0;
			}
		case json_type_object:
			{
				json_object *obj = json_object_new_object();

				if (obj == NULL)
					return fail(cx, WFE_BIND_TYPE, "out of memory");
				{
					/* the macro declares its cursor: give it a block of its own */
					json_object_object_foreach(t, key, val)
					{
						json_object *v;

						if (bind_child(cx, val, &v, depth, key, 0) < 0)
						{
							json_object_put(obj);
							return -1;
						}
						if (json_object_object_add(obj, key, v) != 0)
						{
							json_object_put(v);
							json_object_put(obj);
							return fail(cx, WFE_BIND_TYPE, "out of memory");
						}
					}
				}
				*out = obj;
				return 0;
			}
		default:
			/* null, booleans and numbers are literal template values */
			if (t != NULL && json_object_deep_copy(t, out, NULL) != 0)
				return fail(cx, WFE_BIND_TYPE, "out of memory");
			return 0;
	}
}

/* Bind a stage's input template; see bind.h. */
json_object *
wfe_bind_input(json_object *tmpl, json_object *root, json_object *input_schema,
			   const char *whose,
			   wfe_bind_error *err)
{
	bctx		cx;
	json_object *input;
	char		msg[sizeof(err->message) - 32];
	int			rc;

	memset(err, 0, sizeof(*err));
	memset(&cx, 0, sizeof(cx));
	cx.root = root;
	cx.err = err;
	strcpy(cx.path, "input");

	if (bind_node(&cx, tmpl, &input, 0) < 0)
		return NULL;
	if (input_schema == NULL)
		return input;

	rc = wfe_schema_validate_at(input_schema, input, "input", msg, sizeof(msg));
	if (rc == WFE_SCHEMA_VALID)
		return input;
	json_object_put(input);
	/* a schema violation of the bound input is a type problem of the binding */
	err->code = rc == WFE_SCHEMA_MALFORMED ? WFE_BIND_BAD_SCHEMA : WFE_BIND_TYPE;
	{
		/* "... (schema #/x/type)" names the keyword: say whose schema it is */
		char	   *kw = strstr(msg, " (schema #");

		if (whose == NULL)
			whose = "contract input schema";
		if (rc == WFE_SCHEMA_MALFORMED)
			snprintf(err->message, sizeof(err->message), "%s at %s", whose, msg);
		else if (kw)
			snprintf(err->message, sizeof(err->message), "%.*s (%s %s",
					 (int) (kw - msg), msg, whose, kw + strlen(" (schema "));
		else
			snprintf(err->message, sizeof(err->message), "%s (%s)", msg, whose);
	}
	wfe_utf8_sanitize(err->message);
	return NULL;
}

/* Set a decision's failure: code expr.eval at `branch`. */
static void
decision_fail(wfe_decision *d, int branch, const char *fmt,...)
{
	va_list		ap;

	d->ok = 0;
	d->branch = branch;
	d->code = "expr.eval";
	va_start(ap, fmt);
	vsnprintf(d->message, sizeof(d->message), fmt, ap);
	va_end(ap);
	wfe_utf8_sanitize(d->message);
}

/* A string member, or NULL. */
static const char *
string_member(json_object *o, const char *key)
{
	json_object *v;

	if (json_object_is_type(o, json_type_object) &&
		json_object_object_get_ex(o, key, &v) && json_object_is_type(v, json_type_string))
		return json_object_get_string(v);
	return NULL;
}

/* Evaluate a decision's branches in order; see bind.h. */
int
wfe_eval_decision(json_object *branches, json_object *root,
				  const struct wfe_expr_limits *limits, wfe_decision *d)
{
	size_t		n;

	memset(d, 0, sizeof(*d));
	d->branch = -1;

	/* the shape first, so a malformed list is refused whatever the data */
	if (!json_object_is_type(branches, json_type_array))
	{
		snprintf(d->message, sizeof(d->message),
				 "decision branches must be a JSON array, not %s",
				 wfe_json_type_name(branches));
		return -1;
	}
	n = json_object_array_length(branches);
	for (size_t i = 0; i < n; i++)
	{
		json_object *b = json_object_array_get_idx(branches, i);
		const char *next = string_member(b, "next");

		if (string_member(b, "when") == NULL || next == NULL)
		{
			snprintf(d->message, sizeof(d->message),
					 "decision branch %zu must be an object with string members \"when\" and \"next\"", i);
			return -1;
		}
		if (strlen(next) >= sizeof(d->next))
		{
			snprintf(d->message, sizeof(d->message),
					 "decision branch %zu: \"next\" is longer than %zu bytes", i,
					 sizeof(d->next) - 1);
			return -1;
		}
	}

	for (size_t i = 0; i < n; i++)
	{
		json_object *b = json_object_array_get_idx(branches, i);
		json_object *when = json_object_object_get(b, "when");
		wfe_expr_error err;
		wfe_expr   *e;
		int			rc;

		memset(&err, 0, sizeof(err));
		e = wfe_expr_parse(json_object_get_string(when),
						   (size_t) json_object_get_string_len(when), limits, &err);
		if (e == NULL)
		{
			/* compiled plans parse; a stored plan never reaches here */
			decision_fail(d, (int) i, "%s: %s", err.code ? err.code : "expr.syntax",
						  err.message);
			return 0;
		}
		rc = wfe_expr_eval_bool(e, root, limits, &err);
		wfe_expr_free(e);
		if (rc < 0)
		{
			decision_fail(d, (int) i, "%s", err.message);
			return 0;
		}
		if (rc == 1)
		{
			d->ok = 1;
			d->branch = (int) i;
			strcpy(d->next, string_member(b, "next"));
			return 0;
		}
	}
	decision_fail(d, -1, "no branch of the decision is true");
	return 0;
}
