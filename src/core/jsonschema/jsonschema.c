/*
 * jsonschema.c — validation against a compiled JSON Schema (see
 * jsonschema.h; the compiler is jsonschema_compile.c and the files its
 * header lists).
 *
 * The walk follows the schema into the value.  It stops at the first
 * violation and names it by the value's JSON path (`$`, `.name` for
 * identifier-like keys, `["odd key"]` otherwise, `[N]` for elements) and by
 * the schema keyword's location (`#/properties/a/type`).  Keywords are
 * checked in a fixed order (type, enum, const, numbers, strings, then the
 * applicators, object and array keywords) so that "the first violation" is
 * deterministic.  Inside anyOf, oneOf, not, if and contains a failing branch
 * is not a violation of its own, so nothing is reported from there.
 *
 * unevaluatedProperties/unevaluatedItems need to know what the other
 * keywords evaluated: a node that has them collects, per member or item, a
 * flag set by every successful in-place evaluation below it (annotations of
 * failed branches are dropped, as the standard says).  Nodes without them
 * collect nothing.
 *
 * Every unit of work is paid for from the validation's step budget
 * (WFE_SCHEMA_STEP_BUDGET): nesting is bounded, but work is not (anyOf of
 * two $refs to the next level doubles it per level), so the budget is what
 * keeps one validation from running for hours.  The meter also calls the
 * server's interrupt hook, so a cancelled statement stops here too.
 */
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include "core/base/utf8.h"
#include "core/base/json.h"
#include "jsonformat.h"
#include "jsonschema_internal.h"

/* Regex steps one validation may spend on pattern and patternProperties. */
#define REGEX_BUDGET 10000000L

/* Is "format" asserted?  (wfe.schema_format_assertion; off: an annotation) */
static int	format_assertion;

/* Steps each validation may take (wfe.schema_step_budget). */
static long step_budget = WFE_SCHEMA_STEP_BUDGET;

/* The server's "stop now?" hook (NULL: none). */
static int	(*interrupt_pending) (void);

/* Steps between two calls of the interrupt hook. */
#define CHECK_EVERY 4096

void
wfe_jschema_set_format_assertion(int on)
{
	format_assertion = on != 0;
}

void
wfe_jschema_set_step_budget(long steps)
{
	step_budget = steps > 0 ? steps : 1;
}

void
wfe_jschema_set_interrupt_check(int (*pending) (void))
{
	interrupt_pending = pending;
}

/* A full meter for a new validation. */
static void
meter_init(js_meter *m)
{
	m->left = step_budget;
	m->next_check = step_budget - CHECK_EVERY;
	m->stop = 0;
}

/* Spend steps; see jsonschema_internal.h. */
int
js_meter_spend(js_meter *m, long steps)
{
	if (m == NULL)
		return 1;
	if (m->stop)
		return 0;
	m->left -= steps;
	if (m->left < 0)
	{
		m->stop = WFE_SCHEMA_BUDGET;
		return 0;
	}
	if (m->left <= m->next_check)
	{
		m->next_check = m->left - CHECK_EVERY;
		if (interrupt_pending && interrupt_pending())
		{
			m->stop = WFE_SCHEMA_INTERRUPTED;
			return 0;
		}
	}
	return 1;
}

/* Longest path spelt in a message; deeper paths end in "...". */
#define PATH_MAX_LEN 240

/* The JSON path of the value being checked, built as the walk descends. */
typedef struct schema_path
{
	char		buf[PATH_MAX_LEN + 1];
	size_t		len;
	int			truncated;		/* something did not fit */
} schema_path;

/* Where a push left the path, to pop back to it. */
typedef struct path_mark
{
	size_t		len;
	int			truncated;
} path_mark;

/* Remember the current end of the path. */
static path_mark
path_mark_get(const schema_path *p)
{
	path_mark	m = {p->len, p->truncated};

	return m;
}

/* Go back to a remembered end. */
static void
path_reset(schema_path *p, path_mark m)
{
	p->len = m.len;
	p->truncated = m.truncated;
	p->buf[p->len] = '\0';
}

/* Append an object member to the path (or mark it truncated). */
static void
path_push_key(schema_path *p, const char *key)
{
	if (p->truncated || wfe_json_path_push_key(p->buf, sizeof(p->buf), key) < 0)
		p->truncated = 1;
	else
		p->len = strlen(p->buf);
}

/* Append an array index to the path (or mark it truncated). */
static void
path_push_index(schema_path *p, size_t i)
{
	if (p->truncated || wfe_json_path_push_index(p->buf, sizeof(p->buf), i) < 0)
		p->truncated = 1;
	else
		p->len = strlen(p->buf);
}

/* ---- the walk ------------------------------------------------------------- */

/* What in-place evaluations covered: one flag per member or item. */
typedef struct js_ann
{
	unsigned char *flags;
	size_t		n;
} js_ann;

/* State of one validation. */
typedef struct vctx
{
	schema_path path;
	char	   *msg;
	size_t		msglen;
	int			quiet;			/* > 0: inside a branch allowed to fail */
	int			reported;
	int			aborted;		/* a bound was hit: the answer is "invalid" */
	int			depth;
	js_meter	meter;			/* steps left (WFE_SCHEMA_STEP_BUDGET) */
	long		regex_budget;
	int			nscope;
	const js_resource *scope[WFE_SCHEMA_MAX_EVAL + 1];	/* dynamic scope (last member) */
} vctx;

static int	fail(vctx *cx, const js_node *n, const char *kw, const char *fmt,...)
			__attribute__((format(printf, 4, 5)));

/* Report "<path>: <message> (schema <ptr>/<kw>)" unless quiet; returns 0. */
static int
fail(vctx *cx, const js_node *n, const char *kw, const char *fmt,...)
{
	va_list		ap;
	int			len;

	if (cx->quiet > 0 || cx->reported || cx->msg == NULL || cx->msglen == 0)
		return 0;
	cx->reported = 1;
	len = snprintf(cx->msg, cx->msglen, "%s%s: ", cx->path.buf, cx->path.truncated ? "..." : "");
	if (len >= 0 && (size_t) len < cx->msglen)
	{
		va_start(ap, fmt);
		len += vsnprintf(cx->msg + len, cx->msglen - (size_t) len, fmt, ap);
		va_end(ap);
	}
	if (len >= 0 && (size_t) len < cx->msglen)
		snprintf(cx->msg + len, cx->msglen - (size_t) len, " (schema %s%s%s)",
				 n->ptr, kw ? "/" : "", kw ? kw : "");
	wfe_utf8_sanitize(cx->msg);
	return 0;
}

/* A bound was hit: report it even inside quiet branches, and stop. */
static int
abort_walk(vctx *cx, const js_node *n, const char *what)
{
	int			quiet = cx->quiet;

	cx->aborted = 1;
	cx->quiet = 0;
	fail(cx, n, NULL, "%s", what);
	cx->quiet = quiet;
	return 0;
}

/* Will a failure here be reported?  (Messages cost: build them only then.) */
static int
reporting(const vctx *cx)
{
	return cx->quiet == 0 && !cx->reported && cx->msg != NULL && cx->msglen > 0;
}

/* The meter stopped: say why, and stop the walk. */
static int
stopped(vctx *cx, const js_node *n)
{
	char		what[160];

	if (cx->meter.stop == WFE_SCHEMA_INTERRUPTED)
		snprintf(what, sizeof(what), "validation was interrupted");
	else
		snprintf(what, sizeof(what),
				 "validation needs more than its budget of %ld steps (wfe.schema_step_budget)",
				 step_budget);
	return abort_walk(cx, n, what);
}

/* Pay for steps; on 0 the walk has stopped (stopped()). */
static int
spend(vctx *cx, const js_node *n, long steps)
{
	if (js_meter_spend(&cx->meter, steps))
		return 1;
	if (!cx->aborted)
		stopped(cx, n);
	return 0;
}

/*
 * Flags for the members or items of v (none for other values), paid for
 * (each later merge walks them too).  0 when the walk has stopped: out of
 * memory or out of steps.
 */
static int
ann_init(vctx *cx, const js_node *n, js_ann *a, json_object *v)
{
	a->n = json_object_is_type(v, json_type_object) ? (size_t) json_object_object_length(v) :
		json_object_is_type(v, json_type_array) ? json_object_array_length(v) : 0;
	a->flags = NULL;
	if (!spend(cx, n, (long) a->n))
		return 0;
	a->flags = a->n ? calloc(a->n, 1) : NULL;
	if (a->n != 0 && a->flags == NULL)
		return abort_walk(cx, n, "out of memory");
	return 1;
}

/* dst |= src. */
static void
ann_merge(js_ann *dst, const js_ann *src)
{
	if (dst == NULL || src->flags == NULL)
		return;
	for (size_t i = 0; i < dst->n && i < src->n; i++)
		dst->flags[i] |= src->flags[i];
}

static int	eval(vctx *cx, const js_node *n, json_object *v, js_ann *ann);

/* Evaluate n against v in a branch that may fail (nothing reported). */
static int
eval_quiet(vctx *cx, const js_node *n, json_object *v, js_ann *ann)
{
	int			r;

	cx->quiet++;
	r = eval(cx, n, v, ann);
	cx->quiet--;
	return r;
}

/* Evaluate a child value at a member of the current path. */
static int
eval_member(vctx *cx, const js_node *n, const char *key, json_object *v)
{
	path_mark	m = path_mark_get(&cx->path);
	int			r;

	path_push_key(&cx->path, key);
	r = eval(cx, n, v, NULL);
	path_reset(&cx->path, m);
	return r;
}

/* Evaluate a child value at an index of the current path. */
static int
eval_item(vctx *cx, const js_node *n, size_t i, json_object *v)
{
	path_mark	m = path_mark_get(&cx->path);
	int			r;

	path_push_index(&cx->path, i);
	r = eval(cx, n, v, NULL);
	path_reset(&cx->path, m);
	return r;
}

/* Does a regex match s?  1, 0, or -1 after abort_walk (budget spent). */
static int
regex_match(vctx *cx, const js_node *n, const wfe_regex *re, const char *s, size_t len)
{
	int			r = wfe_regex_search(re, s, len, &cx->regex_budget);

	if (r < 0)
		return abort_walk(cx, n, "pattern matching exceeded its step budget"), -1;
	return r;
}

/* The keywords on numbers. */
static int
eval_number(vctx *cx, const js_node *n, json_object *v)
{
	wfe_jnum	x;
	int			ok = 1;
	char		a[64],
				b[64];

	if (!n->minimum && !n->maximum && !n->xminimum && !n->xmaximum && !n->multiple_of)
		return 1;
	if (wfe_jnum_from_json(&x, v) < 0)
		return fail(cx, n, NULL, "not a finite number");
	/* long division: digits of the value times digits of the divisor */
	if (n->multiple_of &&
		!spend(cx, n, (x.ndig / 64 + 1) * (n->multiple_of->ndig / 64 + 1)))
	{
		wfe_jnum_free(&x);
		return 0;
	}
	/* the value's text only for a message that is shown: it costs a copy */
#define NUMTEXT(num) (reporting(cx) ? (js_short_json(v, a, sizeof(a), 40), \
									   wfe_jnum_format((num), b, sizeof(b)), b) : "")
	if (ok && n->minimum && wfe_jnum_cmp(&x, n->minimum) < 0)
		ok = fail(cx, n, "minimum", "%s is less than the minimum %s", a, NUMTEXT(n->minimum));
	if (ok && n->xminimum && wfe_jnum_cmp(&x, n->xminimum) <= 0)
		ok = fail(cx, n, "exclusiveMinimum", "%s is not greater than %s", a, NUMTEXT(n->xminimum));
	if (ok && n->maximum && wfe_jnum_cmp(&x, n->maximum) > 0)
		ok = fail(cx, n, "maximum", "%s is greater than the maximum %s", a, NUMTEXT(n->maximum));
	if (ok && n->xmaximum && wfe_jnum_cmp(&x, n->xmaximum) >= 0)
		ok = fail(cx, n, "exclusiveMaximum", "%s is not less than %s", a, NUMTEXT(n->xmaximum));
	if (ok && n->multiple_of && !wfe_jnum_is_multiple(&x, n->multiple_of))
		ok = fail(cx, n, "multipleOf", "%s is not a multiple of %s", a, NUMTEXT(n->multiple_of));
#undef NUMTEXT
	wfe_jnum_free(&x);
	return ok;
}

/* The keywords on strings. */
static int
eval_string(vctx *cx, const js_node *n, json_object *v)
{
	const char *s = json_object_get_string(v);
	size_t		len = (size_t) json_object_get_string_len(v);

	if (n->min_length >= 0 || n->max_length >= 0)
	{
		size_t		chars = wfe_utf8_chars(s, len);

		if (n->min_length >= 0 && chars < (size_t) n->min_length)
			return fail(cx, n, "minLength", "string of %zu characters is shorter than %ld",
						chars, n->min_length);
		if (n->max_length >= 0 && chars > (size_t) n->max_length)
			return fail(cx, n, "maxLength", "string of %zu characters is longer than %ld",
						chars, n->max_length);
	}
	if (n->format && format_assertion && wfe_json_format_check(n->format, s, len) == 0)
	{
		char		a[96] = "";

		if (reporting(cx))
			js_short_json(v, a, sizeof(a), 60);
		return fail(cx, n, "format", "%s is not a valid %s", a, n->format);
	}
	if (n->pattern)
	{
		int			r = regex_match(cx, n, n->pattern, s, len);

		if (r < 0)
			return 0;
		if (r == 0)
		{
			char		a[96] = "";

			if (reporting(cx))
				js_short_json(v, a, sizeof(a), 60);
			return fail(cx, n, "pattern", "%s does not match the pattern \"%s\"", a, n->pattern_text);
		}
	}
	return 1;
}

/* Binary search of a declared property. */
static const js_prop *
find_prop(const js_node *n, const char *key)
{
	int			lo = 0,
				hi = n->nprops - 1;

	while (lo <= hi)
	{
		int			mid = (lo + hi) / 2,
					c = strcmp(key, n->props[mid].name);

		if (c == 0)
			return &n->props[mid];
		if (c < 0)
			hi = mid - 1;
		else
			lo = mid + 1;
	}
	return NULL;
}

/* The keywords on objects. */
static int
eval_object(vctx *cx, const js_node *n, json_object *v, js_ann *ann)
{
	int			count = json_object_object_length(v);
	size_t		i;

	if (!spend(cx, n, n->nrequired + n->ndep_required + n->ndep_schemas))
		return 0;
	for (int k = 0; k < n->nrequired; k++)
		if (!json_object_object_get_ex(v, n->required[k], NULL))
			return fail(cx, n, "required", "missing required property \"%s\"", n->required[k]);
	if (n->min_props >= 0 && count < n->min_props)
		return fail(cx, n, "minProperties", "object has %d properties, fewer than %ld", count, n->min_props);
	if (n->max_props >= 0 && count > n->max_props)
		return fail(cx, n, "maxProperties", "object has %d properties, more than %ld", count, n->max_props);
	for (int k = 0; k < n->ndep_required; k++)
		if (json_object_object_get_ex(v, n->dep_required[k].name, NULL))
		{
			if (!spend(cx, n, n->dep_required[k].nnames))
				return 0;
			for (int d = 0; d < n->dep_required[k].nnames; d++)
				if (!json_object_object_get_ex(v, n->dep_required[k].names[d], NULL))
					return fail(cx, n, n->dep_required[k].kw, "property \"%s\" requires property \"%s\"",
								n->dep_required[k].name, n->dep_required[k].names[d]);
		}
	for (int k = 0; k < n->ndep_schemas; k++)
		if (json_object_object_get_ex(v, n->dep_schemas[k].name, NULL) &&
			!eval(cx, n->dep_schemas[k].schema, v, ann))
			return 0;
	if (n->property_names)
	{
		json_object_object_foreach(v, key, val)
		{
			json_object *name = json_object_new_string(key);
			int			r;

			(void) val;
			r = eval_quiet(cx, n->property_names, name, NULL);
			json_object_put(name);
			if (cx->aborted)
				return 0;
			if (!r)
				return fail(cx, n, "propertyNames", "property name \"%s\" does not satisfy propertyNames", key);
		}
	}
	if (n->nprops == 0 && n->npattern_props == 0 && n->additional_props == NULL)
		return 1;
	i = 0;
	{
		json_object_object_foreach(v, key, val)
		{
			int			matched = 0;
			const js_prop *p;

			if (!spend(cx, n, 1 + n->npattern_props))
				return 0;
			p = n->nprops ? find_prop(n, key) : NULL;
			if (p)
			{
				if (!eval_member(cx, p->schema, key, val))
					return 0;
				matched = 1;
			}
			for (int k = 0; k < n->npattern_props; k++)
			{
				int			r = regex_match(cx, n, n->pattern_props[k].re, key, strlen(key));

				if (r < 0)
					return 0;
				if (r)
				{
					if (!eval_member(cx, n->pattern_props[k].schema, key, val))
						return 0;
					matched = 1;
				}
			}
			if (!matched && n->additional_props)
			{
				if (n->additional_props->boolean == 0)
					return fail(cx, n, "additionalProperties", "property \"%s\" is not allowed", key);
				if (!eval_member(cx, n->additional_props, key, val))
					return 0;
				matched = 1;
			}
			if (matched && ann && i < ann->n)
				ann->flags[i] = 1;
			i++;
		}
	}
	return 1;
}

/* The keywords on arrays. */
static int
eval_array(vctx *cx, const js_node *n, json_object *v, js_ann *ann)
{
	size_t		len = json_object_array_length(v);

	if (n->min_items >= 0 && len < (size_t) n->min_items)
		return fail(cx, n, "minItems", "array has %zu items, fewer than %ld", len, n->min_items);
	if (n->max_items >= 0 && len > (size_t) n->max_items)
		return fail(cx, n, "maxItems", "array has %zu items, more than %ld", len, n->max_items);
	if (n->unique_items)
	{
		size_t		i,
					j;

		switch (js_unique_items(v, &cx->meter, &j, &i))
		{
			case 1:
				return fail(cx, n, "uniqueItems", "items %zu and %zu are equal", j, i);
			case -1:
				return stopped(cx, n);
			case -2:
				return abort_walk(cx, n, "out of memory");
		}
	}
	for (size_t i = 0; i < len && i < (size_t) n->nprefix_items; i++)
	{
		if (!eval_item(cx, n->prefix_items[i], i, json_object_array_get_idx(v, i)))
			return 0;
		if (ann)
			ann->flags[i] = 1;
	}
	if (n->items)
		for (size_t i = (size_t) n->nprefix_items; i < len; i++)
		{
			if (n->items->boolean == 0)
				return fail(cx, n, n->nprefix_items ? "items" : "items",
							"array has %zu items; at most %d allowed", len, n->nprefix_items);
			if (!eval_item(cx, n->items, i, json_object_array_get_idx(v, i)))
				return 0;
			if (ann)
				ann->flags[i] = 1;
		}
	if (n->contains)
	{
		long		found = 0;

		for (size_t i = 0; i < len; i++)
		{
			int			r = eval_quiet(cx, n->contains, json_object_array_get_idx(v, i), NULL);

			if (cx->aborted)
				return 0;
			if (r)
			{
				found++;
				if (ann)
					ann->flags[i] = 1;
				else if (found >= n->min_contains && n->max_contains < 0)
					break;
			}
		}
		if (found < n->min_contains)
			return n->min_contains == 1 ?
				fail(cx, n, "contains", "no item satisfies contains") :
				fail(cx, n, "minContains", "%ld items satisfy contains, fewer than %ld", found, n->min_contains);
		if (n->max_contains >= 0 && found > n->max_contains)
			return fail(cx, n, "maxContains", "%ld items satisfy contains, more than %ld", found, n->max_contains);
	}
	return 1;
}

/* unevaluatedProperties / unevaluatedItems over what `a` says is left. */
static int
eval_unevaluated(vctx *cx, const js_node *n, json_object *v, js_ann *a)
{
	size_t		i = 0;

	if (!spend(cx, n, (long) a->n))
		return 0;
	if (n->unevaluated_props && json_object_is_type(v, json_type_object))
	{
		json_object_object_foreach(v, key, val)
		{
			if (i < a->n && !a->flags[i])
			{
				if (n->unevaluated_props->boolean == 0)
					return fail(cx, n, "unevaluatedProperties", "property \"%s\" is not allowed", key);
				if (!eval_member(cx, n->unevaluated_props, key, val))
					return 0;
				a->flags[i] = 1;
			}
			i++;
		}
	}
	if (n->unevaluated_items && json_object_is_type(v, json_type_array))
		for (i = 0; i < a->n; i++)
			if (!a->flags[i])
			{
				if (n->unevaluated_items->boolean == 0)
					return fail(cx, n, "unevaluatedItems", "item %zu is not allowed", i);
				if (!eval_item(cx, n->unevaluated_items, i, json_object_array_get_idx(v, i)))
					return 0;
				a->flags[i] = 1;
			}
	return 1;
}

/* The target of a $dynamicRef: the outermost dynamic anchor of that name in scope. */
static const js_node *
dynamic_target(vctx *cx, const js_node *n)
{
	if (n->dynamic_name == NULL)
		return n->dynamic_ref;
	for (int i = 0; i < cx->nscope; i++)
		for (int k = 0; k < cx->scope[i]->ndynamic; k++)
			if (strcmp(cx->scope[i]->dynamic[k].name, n->dynamic_name) == 0)
				return cx->scope[i]->dynamic[k].node;
	return n->dynamic_ref;
}

/* Every keyword of an object schema but unevaluated*. */
static int
eval_keywords(vctx *cx, const js_node *n, json_object *v, js_ann *a)
{
	unsigned	t = js_type_bits(v);

	if (n->types && !(n->types & t))
		return fail(cx, n, "type", "expected %s, got %s", n->type_text, wfe_json_type_name(v));
	if (n->enum_values)
	{
		size_t		len = json_object_array_length(n->enum_values);
		size_t		i;

		for (i = 0; i < len; i++)
			if (js_equal(json_object_array_get_idx(n->enum_values, i), v, 0, &cx->meter))
				break;
		if (cx->meter.stop)
			return stopped(cx, n);
		if (i == len)
		{
			char		a1[96] = "",
						a2[160] = "";

			if (reporting(cx))
			{
				js_short_json(v, a1, sizeof(a1), 60);
				js_short_json(n->enum_values, a2, sizeof(a2), 120);
			}
			return fail(cx, n, "enum", "%s is not one of %s", a1, a2);
		}
	}
	if (n->has_const && !js_equal(n->const_value, v, 0, &cx->meter))
	{
		char		a1[96] = "",
					a2[96] = "";

		if (cx->meter.stop)
			return stopped(cx, n);
		if (reporting(cx))
		{
			js_short_json(v, a1, sizeof(a1), 60);
			js_short_json(n->const_value, a2, sizeof(a2), 60);
		}
		return fail(cx, n, "const", "%s is not %s", a1, a2);
	}
	if ((t & JT_NUMBER) && !eval_number(cx, n, v))
		return 0;
	if ((t & JT_STRING) && !eval_string(cx, n, v))
		return 0;
	if (n->ref && !eval(cx, n->ref, v, a))
		return 0;
	if (n->dynamic_ref &&
		(!spend(cx, n, cx->nscope) || !eval(cx, dynamic_target(cx, n), v, a)))
		return 0;
	for (int i = 0; i < n->nall_of; i++)
		if (!eval(cx, n->all_of[i], v, a))
			return 0;
	if (n->nany_of)
	{
		int			any = 0;

		for (int i = 0; i < n->nany_of; i++)
		{
			js_ann		b = {0};
			int			r;

			if (a && !ann_init(cx, n, &b, v))
				return 0;
			r = eval_quiet(cx, n->any_of[i], v, a ? &b : NULL);
			if (r)
				ann_merge(a, &b);
			free(b.flags);
			if (cx->aborted)
				return 0;
			if (r)
			{
				any = 1;
				if (!a)
					break;		/* nobody needs the other branches' annotations */
			}
		}
		if (!any)
			return fail(cx, n, "anyOf", "matches none of the %d schemas of anyOf", n->nany_of);
	}
	if (n->none_of)
	{
		int			matches = 0,
					first = -1,
					second = -1;
		js_ann		keep = {0};

		for (int i = 0; i < n->none_of; i++)
		{
			js_ann		b = {0};
			int			r;

			if (a && !ann_init(cx, n, &b, v))
			{
				free(keep.flags);
				return 0;
			}
			r = eval_quiet(cx, n->one_of[i], v, a ? &b : NULL);
			if (cx->aborted)
			{
				free(b.flags);
				free(keep.flags);
				return 0;
			}
			if (r)
			{
				matches++;
				if (first < 0)
				{
					first = i;
					keep = b;
					b.flags = NULL;
				}
				else if (second < 0)
					second = i;
			}
			free(b.flags);
		}
		if (matches == 1)
			ann_merge(a, &keep);
		free(keep.flags);
		if (matches == 0)
			return fail(cx, n, "oneOf", "matches none of the %d schemas of oneOf", n->none_of);
		if (matches > 1)
			return fail(cx, n, "oneOf", "matches %d schemas of oneOf (%d and %d), not exactly one",
						matches, first, second);
	}
	if (n->not_schema)
	{
		int			r = eval_quiet(cx, n->not_schema, v, NULL);

		if (cx->aborted)
			return 0;
		if (r)
			return fail(cx, n, "not", "matches the schema of not");
	}
	if (n->if_schema)
	{
		js_ann		b = {0};
		int			r;

		if (a && !ann_init(cx, n, &b, v))
			return 0;
		r = eval_quiet(cx, n->if_schema, v, a ? &b : NULL);
		if (r)
			ann_merge(a, &b);
		free(b.flags);
		if (cx->aborted)
			return 0;
		if (r && n->then_schema && !eval(cx, n->then_schema, v, a))
			return 0;
		if (!r && n->else_schema && !eval(cx, n->else_schema, v, a))
			return 0;
	}
	if ((t & JT_OBJECT) && !eval_object(cx, n, v, a))
		return 0;
	if ((t & JT_ARRAY) && !eval_array(cx, n, v, a))
		return 0;
	return 1;
}

/*
 * What applying a subschema to v costs before any keyword: one step, and
 * one per 64 bytes of a string or of a number's text, which type checks,
 * lengths and formats read.
 */
static long
value_cost(json_object *v)
{
	if (json_object_is_type(v, json_type_string))
		return 1 + json_object_get_string_len(v) / 64;
	if (json_object_is_type(v, json_type_double))
		return 1 + (long) strlen(json_object_get_string(v)) / 64;
	return 1;
}

/* Evaluate a node against v; a (may be NULL) collects what it covered. */
static int
eval(vctx *cx, const js_node *n, json_object *v, js_ann *ann)
{
	js_ann		local = {0};
	js_ann	   *a = ann;
	int			ok,
				pushed = 0;

	if (cx->aborted || !spend(cx, n, value_cost(v)))
		return 0;
	if (n->boolean == 1)
		return 1;
	if (n->boolean == 0)
		return fail(cx, n, NULL, "no value is allowed here (the schema is false)");
	if (cx->depth >= WFE_SCHEMA_MAX_EVAL)
	{
		char		what[128];

		snprintf(what, sizeof(what), "schema evaluation nested deeper than %d levels "
				 "(a $ref cycle that never descends into the value?)", WFE_SCHEMA_MAX_EVAL);
		return abort_walk(cx, n, what);
	}
	cx->depth++;
	if (cx->nscope == 0 || cx->scope[cx->nscope - 1] != n->res)
	{
		cx->scope[cx->nscope++] = n->res;
		pushed = 1;
	}
	if (n->needs_annotations)
	{
		if (!ann_init(cx, n, &local, v))
			a = NULL;
		else
			a = &local;
	}
	ok = !cx->aborted && eval_keywords(cx, n, v, a);
	if (ok && n->needs_annotations)
	{
		ok = eval_unevaluated(cx, n, v, &local);
		if (ok)
			ann_merge(ann, &local);
	}
	free(local.flags);
	if (pushed)
		cx->nscope--;
	cx->depth--;
	return ok && !cx->aborted;
}

int
wfe_jschema_check(const wfe_jschema *s, json_object *value, const char *root,
				  char *msg, size_t msglen)
{
	vctx	   *cx = malloc(sizeof(vctx));
	int			ok,
				rc;

	if (msg && msglen)
		msg[0] = '\0';
	if (cx == NULL)
	{
		if (msg && msglen)
			snprintf(msg, msglen, "%s: out of memory", root ? root : "$");
		return WFE_SCHEMA_VIOLATION;
	}
	/* the scope stack is written before it is read: clear only the rest */
	memset(cx, 0, offsetof(vctx, scope));
	snprintf(cx->path.buf, sizeof(cx->path.buf), "%s", root ? root : "$");
	cx->path.len = strlen(cx->path.buf);
	cx->msg = msg;
	cx->msglen = msglen;
	cx->regex_budget = REGEX_BUDGET;
	meter_init(&cx->meter);
	ok = eval(cx, s->root, value, NULL);
	rc = ok ? WFE_SCHEMA_VALID : cx->meter.stop ? cx->meter.stop : WFE_SCHEMA_VIOLATION;
	free(cx);
	return rc;
}

/* ---- compiled schemas cached on their json-c objects ---------------------- */

/* json-c's userdata destructor for a cached compiled schema. */
static void
free_cached(json_object *jso, void *userdata)
{
	(void) jso;
	wfe_jschema_free(userdata);
}

int
wfe_schema_validate_at(json_object *schema, json_object *value, const char *root,
					   char *msg, size_t msglen)
{
	wfe_jschema *s = NULL;
	int			rc;

	if (schema && json_object_is_type(schema, json_type_object))
		s = json_object_get_userdata(schema);
	if (s == NULL)
	{
		wfe_jschema_error err;

		s = wfe_jschema_compile(schema, &err);
		if (s == NULL)
		{
			if (msg && msglen)
				snprintf(msg, msglen, "%s: %s", err.pointer[0] ? err.pointer : "(root)", err.message);
			return WFE_SCHEMA_MALFORMED;
		}
		if (json_object_is_type(schema, json_type_object))
			json_object_set_userdata(schema, s, free_cached);
		else
		{
			rc = wfe_jschema_check(s, value, root, msg, msglen);
			wfe_jschema_free(s);
			return rc;
		}
	}
	return wfe_jschema_check(s, value, root, msg, msglen);
}

int
wfe_schema_validate(json_object *schema, json_object *value, char *msg, size_t msglen)
{
	return wfe_schema_validate_at(schema, value, NULL, msg, msglen);
}
