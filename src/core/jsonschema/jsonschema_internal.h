/*
 * jsonschema_internal.h — the compiled form of a JSON Schema, shared by the
 * compiler (jsonschema_compile.c and its parts, jsonschema_compile.h) and the
 * validator (jsonschema.c).
 */
#ifndef WFE_JSONSCHEMA_INTERNAL_H
#define WFE_JSONSCHEMA_INTERNAL_H

#include <json-c/json.h>

#include "core/base/arena.h"
#include "jsonnum.h"
#include "jsonschema.h"
#include "regex.h"

/* Type bits of the "type" keyword (integer is its own bit: a subset of number). */
#define JT_NULL		0x01
#define JT_BOOLEAN	0x02
#define JT_OBJECT	0x04
#define JT_ARRAY	0x08
#define JT_NUMBER	0x10
#define JT_STRING	0x20
#define JT_INTEGER	0x40

#define JS_DRAFT7		7
#define JS_DRAFT2020	2020

typedef struct js_node js_node;
typedef struct js_resource js_resource;

typedef struct js_prop
{
	const char *name;			/* the instance member it applies to */
	js_node    *schema;
} js_prop;

typedef struct js_pattern_prop
{
	wfe_regex  *re;
	js_node    *schema;
} js_pattern_prop;

/* dependentRequired (names) or dependentSchemas (schema) of one member. */
typedef struct js_dep
{
	const char *kw;				/* the keyword it came from, for messages */
	const char *name;
	const char **names;
	int			nnames;
	js_node    *schema;
} js_dep;

typedef struct js_anchor
{
	const char *name;
	js_node    *node;
} js_anchor;

/* A schema resource (the root, or a subschema with its own $id). */
struct js_resource
{
	const char *uri;			/* absolute, without fragment */
	json_object *json;
	js_anchor  *dynamic;		/* its $dynamicAnchors */
	int			ndynamic;
	js_resource *next;
};

struct js_node
{
	const char *ptr;			/* "#/properties/a": where it is, for messages */
	js_resource *res;
	signed char boolean;		/* -1: an object schema; 0 false; 1 true */
	unsigned	types;			/* JT_* bits; 0 = no "type" */
	const char *type_text;		/* "string or null", for messages */

	wfe_jnum   *minimum,
			   *maximum,
			   *xminimum,
			   *xmaximum,
			   *multiple_of;
	long		min_length,
				max_length,
				min_items,
				max_items,
				min_props,
				max_props,
				min_contains,
				max_contains;	/* -1: absent */
	int			unique_items;
	wfe_regex  *pattern;
	const char *pattern_text;
	const char *format;			/* asserted only with wfe.schema_format_assertion */

	json_object *const_value;
	int			has_const;
	json_object *enum_values;	/* an array, or NULL */

	const char **required;
	int			nrequired;

	js_prop    *props;			/* sorted by name */
	int			nprops;
	js_pattern_prop *pattern_props;
	int			npattern_props;
	js_node    *additional_props;
	js_node    *property_names;
	js_dep     *dep_required;
	int			ndep_required;
	js_dep     *dep_schemas;
	int			ndep_schemas;
	js_node    *unevaluated_props;

	js_node   **prefix_items;
	int			nprefix_items;
	js_node    *items;			/* the items after the prefix */
	js_node    *contains;
	js_node    *unevaluated_items;

	js_node   **all_of,
			  **any_of,
			  **one_of;
	int			nall_of,
				nany_of,
				none_of;
	js_node    *not_schema,
			   *if_schema,
			   *then_schema,
			   *else_schema;

	js_node    *ref;			/* $ref's target */
	js_node    *dynamic_ref;	/* $dynamicRef's initial target */
	const char *dynamic_name;	/* non-NULL: resolve in the dynamic scope */

	int			needs_annotations;	/* has unevaluated*: track what is evaluated */
};

/* The steps one validation has left (WFE_SCHEMA_STEP_BUDGET), and why it stopped. */
typedef struct js_meter
{
	long		left;			/* steps still allowed */
	long		next_check;		/* ask the interrupt hook when left falls to this */
	int			stop;			/* 0, WFE_SCHEMA_BUDGET or WFE_SCHEMA_INTERRUPTED */
} js_meter;

/* Spend steps: 1 to go on, 0 when the budget ran out or the hook said stop. */
extern int	js_meter_spend(js_meter *m, long steps);

/* Nesting that equality compares; deeper values equal nothing (jsonvalue.c, jsonuniq.c). */
#define JS_EQUAL_MAX_DEPTH 256

/* The JT_* bits of a value's type (jsonvalue.c). */
extern unsigned js_type_bits(json_object *v);

/* wfe_json_equal paid for from m (NULL: free), from nesting depth on (jsonvalue.c). */
extern int	js_equal(json_object *a, json_object *b, int depth, js_meter *m);

/* A value's canonical text cut to max bytes (with "..."), into buf (jsonvalue.c). */
extern void js_short_json(json_object *v, char *buf, size_t buflen, size_t max);

/*
 * uniqueItems in O(n log n) (jsonuniq.c): 0 when the items of arr are
 * pairwise unequal (wfe_json_equal), 1 with the first equal pair in *j < *i
 * (smallest i, then smallest j, as a pairwise scan finds it), -1 when the
 * meter stopped, -2 out of memory.
 */
extern int	js_unique_items(json_object *arr, js_meter *m, size_t *j, size_t *i);

struct wfe_jschema
{
	wfe_arena	arena;
	js_node    *root;
	int			dialect;
	js_resource *resources;
	int			uses_dynamic;
};

#endif							/* WFE_JSONSCHEMA_INTERNAL_H */
