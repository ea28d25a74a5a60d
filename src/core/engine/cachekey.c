/*
 * cachekey.c — the result cache's key material (see cachekey.h).
 */
#include <string.h>

#include <json-c/json.h>

#include "cachekey.h"
#include "core/lang/compile.h"

static json_object *
str_or_null(const char *s)
{
	return s ? json_object_new_string(s) : NULL;
}

char *
wfe_cache_key_material(const char *tenant, const char *contract, const char *implementation,
					   const char *schemas_digest, const char *input_json)
{
	json_object *input = input_json ? wfe_json_parse(input_json) : NULL;
	json_object *m;
	char	   *out;

	if (input == NULL && (input_json == NULL || strcmp(input_json, "null") != 0))
		return NULL;
	m = json_object_new_object();
	json_object_object_add(m, "contract", str_or_null(contract));
	json_object_object_add(m, "implementation", str_or_null(implementation));
	json_object_object_add(m, "input", input);
	json_object_object_add(m, "schemas", str_or_null(schemas_digest));
	json_object_object_add(m, "tenant", str_or_null(tenant));
	json_object_object_add(m, "v", json_object_new_int(WFE_CACHE_KEY_VERSION));
	out = wfe_canonical_json(m);
	json_object_put(m);
	return out;
}
