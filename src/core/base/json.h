/*
 * json.h — the JSON helpers every core shares: parse, free, canonical text,
 * and how wfe spells a SHA-256 digest.  Plain C over json-c.
 */
#ifndef WFE_JSON_H
#define WFE_JSON_H

/*
 * json-c's type, by its struct tag: the extension cannot include json-c's
 * headers next to PostgreSQL's, which declare a SQL function json_object.
 */
struct json_object;

/* How deep JSON may nest anywhere in wfe (parsing, binding, validation). */
#define WFE_JSON_MAX_DEPTH		128

/* Parse JSON text (nesting up to 128 deep); NULL if it is not JSON. */
extern struct json_object *wfe_json_parse(const char *text);

/* Is it a JSON array? */
extern int	wfe_json_is_array(struct json_object *obj);

/* Drop a reference (NULL is fine). */
extern void wfe_json_free(struct json_object *obj);

/* Canonical JSON: sorted keys, no white space, shortest numbers (malloc'd). */
extern char *wfe_canonical_json(struct json_object *obj);

/* A SHA-256 as wfe spells digests: "sha256:" and 64 lowercase hex digits, into out[72]. */
extern void wfe_digest_text(const unsigned char hash[32], char out[72]);

#endif							/* WFE_JSON_H */
