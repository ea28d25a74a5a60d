/*
 * bench_jsonschema.c — the JSON Schema validator's speed (docs/benchmarks.md
 * "Schemas"): validating a typical 20-property result against its
 * compiled schema, and registering (parsing and compiling) a 200-line
 * schema.  Plain C over the core, no server: bench/jsonschema/run.sh builds
 * and runs it.  Prints one line per figure, the median of 7 rounds.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <json-c/json.h>

#include "core/lang/compile.h"
#include "core/jsonschema/jsonschema.h"

/* A result schema with 20 properties of every common kind. */
static const char *RESULT_SCHEMA =
"{\"type\": \"object\", \"additionalProperties\": false,"
" \"required\": [\"id\", \"status\", \"createdAt\", \"owner\", \"amount\"],"
" \"properties\": {"
"  \"id\": {\"type\": \"string\", \"pattern\": \"^[a-z]{3}-[0-9]{6}$\"},"
"  \"status\": {\"enum\": [\"queued\", \"running\", \"done\", \"failed\"]},"
"  \"createdAt\": {\"type\": \"string\", \"format\": \"date-time\", \"maxLength\": 40},"
"  \"owner\": {\"type\": \"object\", \"required\": [\"name\"], \"properties\": {"
"      \"name\": {\"type\": \"string\", \"minLength\": 1}, \"email\": {\"type\": \"string\"}}},"
"  \"amount\": {\"type\": \"number\", \"minimum\": 0, \"multipleOf\": 0.01},"
"  \"currency\": {\"type\": \"string\", \"pattern\": \"^[A-Z]{3}$\"},"
"  \"count\": {\"type\": \"integer\", \"minimum\": 0, \"maximum\": 1000000},"
"  \"ratio\": {\"type\": \"number\", \"exclusiveMaximum\": 1},"
"  \"tags\": {\"type\": \"array\", \"items\": {\"type\": \"string\"}, \"maxItems\": 20, \"uniqueItems\": true},"
"  \"flags\": {\"type\": \"array\", \"items\": {\"type\": \"boolean\"}},"
"  \"scores\": {\"type\": \"array\", \"items\": {\"type\": \"number\"}},"
"  \"region\": {\"type\": [\"string\", \"null\"]},"
"  \"retries\": {\"type\": \"integer\"},"
"  \"durationMs\": {\"type\": \"integer\", \"minimum\": 0},"
"  \"url\": {\"type\": \"string\", \"maxLength\": 2048},"
"  \"checksum\": {\"type\": \"string\", \"pattern\": \"^[0-9a-f]{64}$\"},"
"  \"cached\": {\"type\": \"boolean\"},"
"  \"version\": {\"type\": \"string\", \"pattern\": \"^[0-9]+\\\\.[0-9]+\\\\.[0-9]+$\"},"
"  \"meta\": {\"type\": \"object\", \"additionalProperties\": {\"type\": \"string\"}},"
"  \"note\": {\"type\": [\"string\", \"null\"], \"maxLength\": 500}"
" }}";

static const char *RESULT =
"{\"id\": \"abc-123456\", \"status\": \"done\", \"createdAt\": \"2026-12-01T12:00:00Z\","
" \"owner\": {\"name\": \"Ann\", \"email\": \"ann@example.org\"}, \"amount\": 1234.56,"
" \"currency\": \"EUR\", \"count\": 42, \"ratio\": 0.25, \"tags\": [\"a\", \"b\", \"c\"],"
" \"flags\": [true, false], \"scores\": [0.5, 0.75, 1], \"region\": null, \"retries\": 0,"
" \"durationMs\": 1532, \"url\": \"https://example.org/models/abc-123456\","
" \"checksum\": \"9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08\","
" \"cached\": false, \"version\": \"2.3.0\", \"meta\": {\"k1\": \"v1\", \"k2\": \"v2\"},"
" \"note\": \"all good\"}";

/* Seconds of a monotonic clock. */
static double
now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* qsort order of doubles. */
static int
dcmp(const void *a, const void *b)
{
	double		x = *(const double *) a,
				y = *(const double *) b;

	return x < y ? -1 : x > y;
}

/* A 200-line schema: 40 definitions of 5 lines each, pretty-printed. */
static char *
big_schema(int *lines)
{
	size_t		cap = 64 * 1024,
				n = 0;
	char	   *s = malloc(cap);

	*lines = 0;
#define OUT(...) do { n += (size_t) snprintf(s + n, cap - n, __VA_ARGS__); (*lines)++; } while (0)
	OUT("{\n");
	OUT("  \"$schema\": \"https://json-schema.org/draft/2020-12/schema\",\n");
	OUT("  \"type\": \"object\",\n");
	OUT("  \"properties\": {\n");
	for (int i = 0; i < 40; i++)
		OUT("    \"field%02d\": {\"$ref\": \"#/$defs/t%02d\"}%s\n", i, i, i < 39 ? "," : "");
	OUT("  },\n");
	OUT("  \"$defs\": {\n");
	for (int i = 0; i < 38; i++)
	{
		OUT("    \"t%02d\": {\n", i);
		OUT("      \"type\": \"object\", \"required\": [\"v\"], \"additionalProperties\": false,\n");
		OUT("      \"properties\": {\"v\": {\"type\": \"string\", \"pattern\": \"^[a-z]+%d$\", \"maxLength\": 64}}\n", i);
		OUT("    },\n");
	}
	OUT("    \"t38\": {\"type\": \"integer\", \"minimum\": 0},\n");
	OUT("    \"t39\": {\"anyOf\": [{\"type\": \"string\"}, {\"type\": \"null\"}]}\n");
	OUT("  }\n");
	OUT("}\n");
#undef OUT
	return s;
}

int
main(void)
{
	json_object *schema = wfe_json_parse(RESULT_SCHEMA);
	json_object *value = wfe_json_parse(RESULT);
	wfe_jschema_error err;
	wfe_jschema *compiled = wfe_jschema_compile(schema, &err);
	double		rounds[7];
	char		msg[512];
	int			iters = 20000,
				lines;
	char	   *big = big_schema(&lines);

	if (!compiled || !value)
	{
		fprintf(stderr, "bench bug: %s %s\n", err.pointer, err.message);
		return 1;
	}
	if (wfe_jschema_check(compiled, value, NULL, msg, sizeof(msg)) != WFE_SCHEMA_VALID)
	{
		fprintf(stderr, "bench bug: the result does not validate: %s\n", msg);
		return 1;
	}
	/* 1. validation of the parsed result against the compiled schema */
	for (int r = 0; r < 7; r++)
	{
		double		t0 = now();

		for (int i = 0; i < iters; i++)
			(void) wfe_jschema_check(compiled, value, NULL, msg, sizeof(msg));
		rounds[r] = (now() - t0) / iters;
	}
	qsort(rounds, 7, sizeof(double), dcmp);
	printf("validate a 20-property result (compiled schema):     %8.2f us\n", rounds[3] * 1e6);

	/* 2. the same with the result's text parsed first (what a callback does) */
	for (int r = 0; r < 7; r++)
	{
		double		t0 = now();

		for (int i = 0; i < iters; i++)
		{
			json_object *v = wfe_json_parse(RESULT);

			(void) wfe_jschema_check(compiled, v, NULL, msg, sizeof(msg));
			json_object_put(v);
		}
		rounds[r] = (now() - t0) / iters;
	}
	qsort(rounds, 7, sizeof(double), dcmp);
	printf("parse + validate the same result:                     %8.2f us\n", rounds[3] * 1e6);

	/* 3. registration of a 200-line schema: parse and compile */
	for (int r = 0; r < 7; r++)
	{
		double		t0 = now();
		int			n = 200;

		for (int i = 0; i < n; i++)
		{
			json_object *s = wfe_json_parse(big);
			wfe_jschema *c = wfe_jschema_compile(s, &err);

			if (!c)
			{
				fprintf(stderr, "bench bug: %s %s\n", err.pointer, err.message);
				return 1;
			}
			wfe_jschema_free(c);
			json_object_put(s);
		}
		rounds[r] = (now() - t0) / n;
	}
	qsort(rounds, 7, sizeof(double), dcmp);
	printf("register a %d-line schema (parse + compile):         %8.3f ms\n", lines, rounds[3] * 1e3);

	free(big);
	wfe_jschema_free(compiled);
	json_object_put(schema);
	json_object_put(value);
	return 0;
}
