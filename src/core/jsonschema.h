/*
 * jsonschema.h — the JSON-Schema subset wfe checks values against: contract
 * input and output schemas and a definition's context_schema.
 *
 * Keywords: type (a name or an array of names: object, array, string,
 * number, integer, boolean, null), properties, required, items, enum; the
 * annotations description and title are ignored.  The registry refuses any
 * other keyword (wfe._check_json_schema), so the validator ignores unknown
 * ones rather than second-guessing it.
 *
 * Plain C99 over json-c, but this header only forward-declares json-c's
 * type, so PostgreSQL-facing files can include it (PostgreSQL declares a SQL
 * function named json_object, which clashes with json-c's typedef).
 */
#ifndef WFE_JSONSCHEMA_H
#define WFE_JSONSCHEMA_H

#include <stddef.h>

struct json_object;

/* Results of wfe_schema_validate. */
#define WFE_SCHEMA_VALID		0
#define WFE_SCHEMA_VIOLATION	(-1)	/* the value does not satisfy the schema */
#define WFE_SCHEMA_MALFORMED	(-2)	/* the schema itself is not in the subset */

/* Nesting bound: schemas are followed at most this deep into a value. */
#define WFE_SCHEMA_MAX_DEPTH	64

/*
 * Validate `value` (NULL is JSON null) against `schema`.  Returns
 * WFE_SCHEMA_VALID, or WFE_SCHEMA_VIOLATION with `msg` naming the JSON path
 * of the first violation, e.g. `$.modelId: expected string, got integer` or
 * `$: missing required property "modelId"`, or WFE_SCHEMA_MALFORMED with
 * `msg` saying what is wrong with the schema.  `msg` may be NULL.
 */
extern int	wfe_schema_validate(struct json_object *schema,
								struct json_object *value,
								char *msg, size_t msglen);

/*
 * The same, with the path of the value spelt from `root` instead of "$"
 * (binding reports `input.modelId: ...`).
 */
extern int	wfe_schema_validate_at(struct json_object *schema,
								   struct json_object *value,
								   const char *root,
								   char *msg, size_t msglen);

/*
 * Deep equality of two JSON values (NULL is JSON null): objects by key set
 * and member values, arrays element by element, numbers by value (1 equals
 * 1.0, as in JSON Schema's enum and jsonb).
 */
extern int	wfe_json_equal(struct json_object *a, struct json_object *b);

/*
 * The JSON-Schema type name of a value: "null", "boolean", "integer",
 * "number", "string", "array" or "object".
 */
extern const char *wfe_json_type_name(struct json_object *value);

/*
 * JSON paths in messages: append `.key` (identifier-like keys) or
 * `["key"]`, or `[N]`, to the NUL-terminated path in buf (capacity cap).
 * Returns 0, or -1 when it does not fit (buf is then unchanged).
 */
extern int	wfe_json_path_push_key(char *buf, size_t cap, const char *key);
extern int	wfe_json_path_push_index(char *buf, size_t cap, size_t index);

/*
 * Replace every byte that is not part of well-formed UTF-8 with '?', in
 * place.  Messages quote JSON text and are cut at fixed sizes; a cut can
 * split a character, and PostgreSQL must not be handed invalid UTF-8.
 */
extern void wfe_utf8_sanitize(char *s);

#endif							/* WFE_JSONSCHEMA_H */
