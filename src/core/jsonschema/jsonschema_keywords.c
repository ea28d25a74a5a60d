/*
 * jsonschema_keywords.c — the keywords of one subschema compiled into its
 * js_node (jsonschema_compile.h): which keywords each dialect knows, their
 * values checked (numbers, counts, name sets, patterns, types) and their
 * subschemas queued.
 */
#include <stdlib.h>
#include <string.h>

#include "jsonschema_compile.h"

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
	if (!js_is_schema(v))
	{
		js_cfail(cx, WFE_JSE_VALUE, e->ptr, key, "\"%s\" must be a schema (an object or a boolean), not %s",
			  key, wfe_json_type_name(v));
		return NULL;
	}
	return js_node_for(cx, v, js_ptr_push(cx, e->ptr, key), e);
}

/* An array of subschemas (non-empty). */
static js_node **
sub_array(cctx *cx, js_entry *e, const char *key, json_object *v, int *n)
{
	js_node   **out;
	size_t		len;
	const char *kp = js_ptr_push(cx, e->ptr, key);

	if (!json_object_is_type(v, json_type_array) || (len = json_object_array_length(v)) == 0)
	{
		js_cfail(cx, WFE_JSE_VALUE, e->ptr, key, "\"%s\" must be a non-empty array of schemas", key);
		return NULL;
	}
	out = wfe_arena_alloc(cx->a, len * sizeof(js_node *));
	for (size_t i = 0; i < len; i++)
	{
		json_object *item = json_object_array_get_idx(v, i);

		if (!js_is_schema(item))
		{
			js_cfail(cx, WFE_JSE_VALUE, kp, wfe_arena_printf(cx->a, "%zu", i),
				  "\"%s\" items must be schemas (objects or booleans), not %s", key,
				  wfe_json_type_name(item));
			return NULL;
		}
		out[i] = js_node_for(cx, item, wfe_arena_printf(cx->a, "%s/%zu", kp, i), e);
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
		js_cfail(cx, WFE_JSE_VALUE, e->ptr, key, "\"%s\" must be a number, not %s", key,
			  wfe_json_type_name(v));
		return NULL;
	}
	if (wfe_jnum_from_json(&n, v) < 0)
	{
		js_cfail(cx, WFE_JSE_VALUE, e->ptr, key, "\"%s\" must be a finite number", key);
		return NULL;
	}
	if (positive && (n.neg || n.ndig == 0))
	{
		wfe_jnum_free(&n);
		js_cfail(cx, WFE_JSE_VALUE, e->ptr, key, "\"%s\" must be greater than 0", key);
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
		js_cfail(cx, WFE_JSE_VALUE, e->ptr, key, "\"%s\" must be a non-negative integer, not %s", key,
			  wfe_json_type_name(v));
		return -1;
	}
	if (n.neg || !wfe_jnum_is_integer(&n))
	{
		wfe_jnum_free(&n);
		js_cfail(cx, WFE_JSE_VALUE, e->ptr, key, "\"%s\" must be a non-negative integer, not %s", key,
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
		js_cfail(cx, WFE_JSE_VALUE, ptr, key, "\"%s\" must be an array of distinct property names, not %s",
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
			js_cfail(cx, WFE_JSE_VALUE, ptr, key, "\"%s\" must be an array of distinct property names, not %s",
				  key, json_object_to_json_string_ext(v, JSON_C_TO_STRING_PLAIN));
			return NULL;
		}
		out[i] = json_object_get_string(s);
		for (size_t k = 0; k < i; k++)
			if (strcmp(out[k], out[i]) == 0)
			{
				js_cfail(cx, WFE_JSE_VALUE, ptr, key, "\"%s\" names \"%s\" twice", key, out[i]);
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
		js_cfail(cx, WFE_JSE_PATTERN, ptr, key, "%s (pattern \"%s\")", err, pattern);
		return NULL;
	}
	if (cx->nregexes == cx->capregexes)
	{
		int			cap = cx->capregexes ? cx->capregexes * 2 : 8;
		wfe_regex **r = realloc(cx->regexes, (size_t) cap * sizeof(wfe_regex *));

		if (!r)
		{
			wfe_regex_free(re);
			js_cfail(cx, WFE_JSE_VALUE, ptr, key, "out of memory");
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
			js_cfail(cx, WFE_JSE_VALUE, e->ptr, "type",
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
			js_cfail(cx, WFE_JSE_VALUE, e->ptr, "type",
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
void
js_compile_entry(cctx *cx, js_entry *e)
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
			if (!js_in_list(key, known))
			{
				if (js_in_list(key, ANNOTATION_KW))
				{
					if ((strcmp(key, "title") == 0 || strcmp(key, "description") == 0 ||
						 strcmp(key, "format") == 0 || strcmp(key, "$comment") == 0) &&
						!json_object_is_type(val, json_type_string))
						js_cfail(cx, WFE_JSE_VALUE, e->ptr, key, "\"%s\" must be a string, not %s", key,
							  wfe_json_type_name(val));
					else if (strcmp(key, "format") == 0)
						n->format = json_object_get_string(val);
					continue;
				}
				if (js_referenced(cx, e, key))
					continue;
				js_cfail(cx, WFE_JSE_UNKNOWN_KEYWORD, e->ptr, key,
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
					js_cfail(cx, WFE_JSE_VALUE, e->ptr, key, "\"enum\" must be an array of values, not %s",
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
					js_cfail(cx, WFE_JSE_VALUE, e->ptr, key, "\"uniqueItems\" must be a boolean");
				n->unique_items = json_object_get_boolean(val);
			}
			else if (strcmp(key, "pattern") == 0)
			{
				if (!json_object_is_type(val, json_type_string))
					js_cfail(cx, WFE_JSE_VALUE, e->ptr, key, "\"pattern\" must be a string (a regular expression)");
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
				const char *kp = js_ptr_push(cx, e->ptr, key);
				int			i = 0,
							cnt;

				if (!json_object_is_type(val, json_type_object))
				{
					js_cfail(cx, WFE_JSE_VALUE, e->ptr, key, "\"%s\" must be an object of schemas, not %s", key,
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
						if (!js_is_schema(pv))
						{
							js_cfail(cx, WFE_JSE_VALUE, kp, pk, "must be a schema (an object or a boolean), not %s",
								  wfe_json_type_name(pv));
							return;
						}
						if (pattern)
						{
							n->pattern_props[i].re = regex_value(cx, kp, pk, pk);
							n->pattern_props[i].schema = js_node_for(cx, pv, js_ptr_push(cx, kp, pk), e);
						}
						else
						{
							n->props[i].name = pk;
							n->props[i].schema = js_node_for(cx, pv, js_ptr_push(cx, kp, pk), e);
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
					js_cfail(cx, WFE_JSE_VALUE, e->ptr, key,
						  "\"items\" must be a schema in draft 2020-12; an array of schemas is \"prefixItems\" "
						  "(or say \"$schema\": \"http://json-schema.org/draft-07/schema#\")");
				else
					n->items = sub(cx, e, key, val);
			}
			else if (strcmp(key, "additionalItems") == 0)
			{
				/* draft-07: used by "items" as an array (above); otherwise ignored */
				if (!js_is_schema(val))
					js_cfail(cx, WFE_JSE_VALUE, e->ptr, key, "\"additionalItems\" must be a schema");
			}
			else if (strcmp(key, "dependentRequired") == 0 || strcmp(key, "dependentSchemas") == 0 ||
					 strcmp(key, "dependencies") == 0)
			{
				const char *kp = js_ptr_push(cx, e->ptr, key);
				int			cnt,
							nr = 0,
							ns = 0;

				if (!json_object_is_type(val, json_type_object))
				{
					js_cfail(cx, WFE_JSE_VALUE, e->ptr, key, "\"%s\" must be an object, not %s", key,
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

						if ((want_names && !as_names) || (want_schema && !js_is_schema(dv)) ||
							(!want_names && !want_schema && !as_names && !js_is_schema(dv)))
						{
							js_cfail(cx, WFE_JSE_VALUE, kp, dk, "must be %s",
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
							n->dep_schemas[ns].schema = js_node_for(cx, dv, js_ptr_push(cx, kp, dk), e);
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
					js_cfail(cx, WFE_JSE_VALUE, e->ptr, key, "\"%s\" must be a string (a URI reference)", key);
					return;
				}
				t = js_resolve_ref(cx, e, key, json_object_get_string(val), &ad);
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
					js_cfail(cx, WFE_JSE_VALUE, e->ptr, key, "\"$schema\" must be a string");
				/* the root's was read before; a different one below it is refused there */
			}
			else if (strcmp(key, "$id") == 0 || strcmp(key, "$anchor") == 0 || strcmp(key, "$dynamicAnchor") == 0)
			{
				if (!json_object_is_type(val, json_type_string))
					js_cfail(cx, WFE_JSE_VALUE, e->ptr, key, "\"%s\" must be a string", key);
			}
			else if (strcmp(key, "$defs") == 0 || strcmp(key, "definitions") == 0)
			{
				if (!json_object_is_type(val, json_type_object))
					js_cfail(cx, WFE_JSE_VALUE, e->ptr, key, "\"%s\" must be an object of schemas", key);
				else
				{
					/* compiled too, so a malformed definition is refused even if unused */
					const char *kp = js_ptr_push(cx, e->ptr, key);

					json_object_object_foreach(val, dk, dv)
					{
						if (!js_is_schema(dv))
						{
							js_cfail(cx, WFE_JSE_VALUE, kp, dk, "must be a schema (an object or a boolean), not %s",
								  wfe_json_type_name(dv));
							return;
						}
						(void) js_node_for(cx, dv, js_ptr_push(cx, kp, dk), e);
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
