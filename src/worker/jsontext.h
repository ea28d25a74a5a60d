/*
 * jsontext.h — strict parsing of a complete JSON text with json-c, and
 * serialising JSON objects the way wfe-worker sends them.
 */
#ifndef WFE_WORKER_JSONTEXT_H
#define WFE_WORKER_JSONTEXT_H

#include <stddef.h>

#include <json-c/json.h>

/*
 * Parse text[0..len) as one JSON document (text[len] must be '\0'):
 * strict grammar, valid UTF-8, nothing but whitespace after it.  Returns a
 * new reference, or NULL with *err set.  A JSON null document comes back as
 * NULL too, with *is_null set (is_null may be NULL when null is an error).
 */
extern json_object *json_parse_text(const char *text, size_t len, int *is_null,
									char *err, size_t errlen);

/* Compact JSON text of obj, as a fresh string. */
extern char *json_to_text(json_object *obj);

#endif							/* WFE_WORKER_JSONTEXT_H */
