/*
 * fuzz_schema.c — libFuzzer harness over the JSON Schema validator
 * (src/core/jsonschema*.c, jsonnum.c) and the regex engine (regex*.c).
 *
 * An input is "SCHEMA\0VALUE": both are parsed with wfe_json_parse (so the
 * parser's big-integer widening is fuzzed too); a schema that parses is
 * compiled, and a value that parses is validated twice, through the cached
 * and the uncached path.  The process aborts (libFuzzer keeps the input)
 * when the two answers differ, when a message is empty or not valid UTF-8,
 * or when a refusal names no reason.  A value that is an array of up to
 * 256 items is also checked against {"uniqueItems": true}, whose sorted
 * keys must find what comparing every pair with wfe_json_equal finds.
 * Validation runs in a step budget of a million (the server's default is
 * ten), so that a schema multiplying its work ends well inside libFuzzer's
 * timeout.  The input's first line is also compiled as a regex and
 * searched over the rest with a step budget, which must be respected.
 * ASan, LSan and UBSan do the rest.
 *
 * Build and run: make fuzz (make test runs it briefly).
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include "core/lang/compile.h"
#include "core/base/utf8.h"
#include "core/jsonschema/jsonschema.h"
#include "core/jsonschema/regex.h"

/* Abort with a reason (libFuzzer saves the input). */
static void
broken(const char *what, const char *detail)
{
	fprintf(stderr, "fuzz_schema: %s: %s\n", what, detail ? detail : "");
	abort();
}

/* A message must say something and be valid UTF-8. */
static void
check_message(const char *msg)
{
	char		copy[1024];

	if (msg[0] == '\0')
		broken("empty message", NULL);
	snprintf(copy, sizeof(copy), "%s", msg);
	wfe_utf8_sanitize(copy);
	if (strcmp(copy, msg) != 0)
		broken("message is not valid UTF-8", msg);
}

/* The regex engine over the input's first line and the rest. */
static void
fuzz_regex(const uint8_t *data, size_t size)
{
	const uint8_t *nl = memchr(data, '\n', size);
	size_t		plen = nl ? (size_t) (nl - data) : size;
	char		err[256];
	wfe_regex  *re = wfe_regex_compile((const char *) data, plen, err, sizeof(err));
	long		budget = 200000;
	int			a,
				b;

	if (re == NULL)
	{
		if (err[0] == '\0')
			broken("regex refused without a reason", NULL);
		return;
	}
	a = wfe_regex_search(re, (const char *) data + plen, size - plen, &budget);
	if (budget < 0 || budget > 200000)
		broken("regex budget out of range", NULL);
	if (a == 1 || a == 0)
	{
		long		again = 200000;

		b = wfe_regex_search(re, (const char *) data + plen, size - plen, &again);
		if (a != b)
			broken("regex search is not deterministic", NULL);
	}
	wfe_regex_free(re);
}

/* uniqueItems (sorted keys) against a scan of every pair. */
static void
fuzz_unique(json_object *value)
{
	static json_object *schema;
	size_t		n,
				first_i = 0,
				first_j = 0;
	int			found = 0,
				rc;
	char		msg[512],
				want[512];

	if (!json_object_is_type(value, json_type_array) ||
		(n = json_object_array_length(value)) > 256)
		return;
	if (schema == NULL)
		schema = wfe_json_parse("{\"uniqueItems\": true} ");
	for (size_t i = 1; i < n && !found; i++)
		for (size_t j = 0; j < i && !found; j++)
			if (wfe_json_equal(json_object_array_get_idx(value, j), json_object_array_get_idx(value, i)))
			{
				found = 1;
				first_i = i;
				first_j = j;
			}
	rc = wfe_schema_validate(schema, value, msg, sizeof(msg));
	if (rc == WFE_SCHEMA_BUDGET)
		return;
	snprintf(want, sizeof(want), "$: items %zu and %zu are equal (schema #/uniqueItems)", first_j, first_i);
	if (found ? (rc != WFE_SCHEMA_VIOLATION || strcmp(msg, want) != 0) : rc != WFE_SCHEMA_VALID)
		broken("uniqueItems disagrees with wfe_json_equal", found ? want : msg);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const uint8_t *sep = memchr(data, '\0', size);
	char	   *schema_text,
			   *value_text;
	size_t		slen = sep ? (size_t) (sep - data) : size;
	json_object *schema,
			   *value;

	wfe_jschema_set_step_budget(1000000);
	fuzz_regex(data, size);
	if (sep == NULL)
		return 0;
	/* NUL-terminated copies with the blank that ends a bare scalar */
	schema_text = malloc(slen + 2);
	memcpy(schema_text, data, slen);
	schema_text[slen] = ' ';
	schema_text[slen + 1] = '\0';
	value_text = malloc(size - slen + 1);
	memcpy(value_text, sep + 1, size - slen - 1);
	value_text[size - slen - 1] = ' ';
	value_text[size - slen] = '\0';
	schema = wfe_json_parse(schema_text);
	value = wfe_json_parse(value_text);
	fuzz_unique(value);
	if (schema != NULL)
	{
		wfe_jschema_error err;
		wfe_jschema *c = wfe_jschema_compile(schema, &err);

		if (c == NULL && err.message[0] == '\0')
			broken("schema refused without a reason", NULL);
		if (c != NULL)
		{
			char		m1[512],
						m2[512];
			int			r1 = wfe_jschema_check(c, value, NULL, m1, sizeof(m1));
			int			r2 = wfe_schema_validate(schema, value, m2, sizeof(m2));

			if (r1 != r2 || (r1 != WFE_SCHEMA_VALID && strcmp(m1, m2) != 0))
				broken("cached and uncached validation differ", m1);
			if (r1 != WFE_SCHEMA_VALID)
				check_message(m1);
			wfe_jschema_free(c);
		}
	}
	json_object_put(schema);
	json_object_put(value);
	free(schema_text);
	free(value_text);
	return 0;
}
