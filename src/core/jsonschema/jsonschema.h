/*
 * jsonschema.h — the one JSON Schema validator: contract input and output
 * schemas, and a definition's context_schema.
 *
 * Dialects: draft 2020-12 by default, draft-07 when the root's "$schema"
 * names it.  The core, applicator and validation vocabularies of each;
 * same-document $ref, $defs/definitions, $anchor, $dynamicRef/$dynamicAnchor
 * and $id; boolean schemas; annotation keywords accepted and ignored
 * (format too, unless wfe_jschema_set_format_assertion turned it on).  Any other keyword, a remote reference, and a
 * pattern needing backtracking are refused when the schema is compiled,
 * with the JSON pointer of the offending keyword.  Numbers compare exactly
 * (jsonnum.h).  docs/dsl.md "Schemas" is the user's reference.
 *
 * A schema is compiled once (wfe_jschema_compile) into a tree the
 * validation walks; wfe_schema_validate caches the compiled form on the
 * schema's json-c object, so callers holding a parsed schema pay once.
 *
 * Plain C99 over json-c, but this header only forward-declares json-c's
 * type, so PostgreSQL-facing files can include it (PostgreSQL declares a SQL
 * function named json_object, which clashes with json-c's typedef).
 */
#ifndef WFE_JSONSCHEMA_H
#define WFE_JSONSCHEMA_H

#include <stddef.h>

#include "core/base/json.h"

struct json_object;

/* Results of validation. */
#define WFE_SCHEMA_VALID		0
#define WFE_SCHEMA_VIOLATION	(-1)	/* the value does not satisfy the schema */
#define WFE_SCHEMA_MALFORMED	(-2)	/* the schema itself cannot be used */
#define WFE_SCHEMA_BUDGET		(-3)	/* the step budget ran out: no answer */
#define WFE_SCHEMA_INTERRUPTED	(-4)	/* the interrupt hook said stop: no answer */

/*
 * WFE_JSON_MAX_DEPTH (base/json.h) is the one nesting bound of JSON
 * documents: parsing (wfe_json_parse) refuses deeper ones, so every value
 * the validator sees is within it and gets an answer.  Validation nests at
 * most WFE_SCHEMA_MAX_EVAL subschema evaluations (a $ref cycle that never
 * descends into the value ends there, as a violation).
 */
#define WFE_SCHEMA_MAX_EVAL		(8 * WFE_JSON_MAX_DEPTH)

/*
 * The work one validation may do, in steps: a subschema applied to a value,
 * a member or item a keyword visits, a value compared (enum, const,
 * uniqueItems, whose sort counts n*log2(n)), 64 bytes of a string scanned.
 * Nesting does not bound work (each level of `anyOf: [{$ref}, {$ref}]`
 * doubles it), so the budget does: a validation that would take more
 * stops with WFE_SCHEMA_BUDGET.  Pattern matching has a step budget of its
 * own (regex.h).
 */
#define WFE_SCHEMA_STEP_BUDGET	10000000L

/*
 * Process-wide: the budget of each validation from now on (the server
 * layer sets it from the GUC wfe.schema_step_budget), and a hook that
 * validation calls every few thousand steps; a nonzero answer stops it with
 * WFE_SCHEMA_INTERRUPTED.  The hook must not longjmp: the validator holds
 * malloc'd memory.  The server answers "a cancel is pending" and raises it
 * once the core has returned and everything is freed.  NULL: no hook.
 */
extern void wfe_jschema_set_step_budget(long steps);
extern void wfe_jschema_set_interrupt_check(int (*pending) (void));

/* Why a schema was refused. */
typedef enum wfe_jschema_errkind
{
	WFE_JSE_NONE = 0,
	WFE_JSE_UNKNOWN_KEYWORD,	/* not a keyword of the dialect */
	WFE_JSE_VALUE,				/* a keyword's value is not what it must be */
	WFE_JSE_REMOTE_REF,			/* a reference outside this document */
	WFE_JSE_PATTERN,			/* a regex that does not compile (or needs backtracking) */
	WFE_JSE_DIALECT				/* "$schema" names a dialect wfe does not run */
} wfe_jschema_errkind;

/* A compile error: the JSON pointer of the keyword and what is wrong. */
typedef struct wfe_jschema_error
{
	wfe_jschema_errkind kind;
	char		pointer[256];	/* RFC 6901, "" for the root */
	char		message[320];
} wfe_jschema_error;

typedef struct wfe_jschema wfe_jschema;

/*
 * Compile a schema (a JSON object or boolean).  Returns the compiled form,
 * or NULL with *err filled.  The compiled form refers to `schema`, which
 * must outlive it.
 */
extern wfe_jschema *wfe_jschema_compile(struct json_object *schema,
										wfe_jschema_error *err);
extern void wfe_jschema_free(wfe_jschema *s);

/* The same, with another dialect ("draft-07") for schemas without "$schema". */
extern wfe_jschema *wfe_jschema_compile_dialect(struct json_object *schema,
												const char *default_dialect,
												wfe_jschema_error *err);

/* "draft2020-12" or "draft-07": the dialect a compiled schema runs. */
extern const char *wfe_jschema_dialect(const wfe_jschema *s);

/*
 * Validate `value` (NULL is JSON null).  Returns WFE_SCHEMA_VALID, or
 * WFE_SCHEMA_VIOLATION with `msg` naming the instance path, what is wrong
 * and the schema keyword, e.g.
 * `$.modelId: expected string, got integer (schema #/properties/modelId/type)`.
 * The path is spelt from `root` ("$" when NULL).  msg may be NULL.
 * WFE_SCHEMA_BUDGET or WFE_SCHEMA_INTERRUPTED: validation stopped before it
 * had an answer; msg says where.  Callers that only ask "valid or not" may
 * treat both as "not shown to be valid".
 */
extern int	wfe_jschema_check(const wfe_jschema *s, struct json_object *value,
							  const char *root, char *msg, size_t msglen);

/*
 * Compile (cached on the schema object) and validate in one call: as
 * wfe_jschema_check, or WFE_SCHEMA_MALFORMED with msg "<pointer>: <what>".
 */
extern int	wfe_schema_validate(struct json_object *schema,
								struct json_object *value,
								char *msg, size_t msglen);
extern int	wfe_schema_validate_at(struct json_object *schema,
								   struct json_object *value,
								   const char *root,
								   char *msg, size_t msglen);

/*
 * Whether "format" is asserted (date-time, email, ipv4, ... see
 * jsonformat.h) or only an annotation (the default).  Process-wide: the
 * server layer sets it from the GUC wfe.schema_format_assertion.
 */
extern void wfe_jschema_set_format_assertion(int on);

/*
 * Deep equality of two JSON values (NULL is JSON null): objects by key set
 * and member values, arrays element by element, numbers by exact value
 * (1 equals 1.0; 18446744073709551617 does not equal 18446744073709551616).
 */
extern int	wfe_json_equal(struct json_object *a, struct json_object *b);

/*
 * The JSON-Schema type name of a value: "null", "boolean", "integer" (any
 * number with an integral value, 1.0 included), "number", "string",
 * "array" or "object".
 */
extern const char *wfe_json_type_name(struct json_object *value);

/*
 * JSON paths in messages: append `.key` (identifier-like keys) or
 * `["key"]`, or `[N]`, to the NUL-terminated path in buf (capacity cap).
 * Returns 0, or -1 when it does not fit (buf is then unchanged).
 */
extern int	wfe_json_path_push_key(char *buf, size_t cap, const char *key);
extern int	wfe_json_path_push_index(char *buf, size_t cap, size_t index);

#endif							/* WFE_JSONSCHEMA_H */
