/*
 * test_runtime_core.c — unit tests of the run-time helpers of the core: the
 * JSON-Schema subset validator (jsonschema.c), input binding and decision
 * evaluation (bind.c), the result cache's key material (cachekey.c).
 *
 * A standalone TAP program: "ok N - ..." / "not ok N - ...", then "1..N";
 * exit status 1 if anything failed.  Built with ASan/UBSan by the Makefile,
 * so every path here frees what it allocates (leaks fail the run).
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <json-c/json.h>

#include "core/engine/bind.h"
#include "core/engine/cachekey.h"
#include "core/lang/compile.h"
#include "core/expr/expr.h"
#include "core/base/utf8.h"
#include "core/jsonschema/jsonschema.h"
#include "tap.h"


/* The evaluation root most binding and decision tests run over. */
static const char *ROOT_JSON =
"{"
"  \"context\": {"
"    \"modelId\": \"m-1\", \"count\": 3, \"ratio\": 0.25, \"two\": 2.0,"
"    \"flag\": true, \"off\": false, \"nothing\": null,"
"    \"obj\": {\"a\": 1}, \"list\": [1, \"x\", null],"
"    \"amount\": 15000, \"zero\": 0, \"a}b\": \"brace\", \"name\": \"h\\u00e9llo\""
"  },"
"  \"stages\": {"
"    \"cache-lookup\": {\"result\": {\"hit\": true, \"uri\": \"s3://m\"}}"
"  },"
"  \"outputs\": {\"restore_session\": {\"user_session\": \"abc\"}},"
"  \"run\": {\"id\": 42, \"tenant\": \"acme\", \"workflow\": \"model-ingest\","
"          \"version\": \"2.3.0\"}"
"}";

static json_object *root;

/* TAP diagnostic line. */
static void
diag(const char *fmt,...)
{
	va_list		ap;

	printf("# ");
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
}

/*
 * Parse JSON text the test wrote (exit if it is not JSON: a test bug).  A
 * blank is appended, as runtime_fn.c does: json-c needs it to end a bare
 * scalar such as 1 or true.
 */
static json_object *
J(const char *text)
{
	char	   *padded = malloc(strlen(text) + 2);
	json_object *o;

	sprintf(padded, "%s ", text);
	o = wfe_json_parse(padded);
	free(padded);
	if (o == NULL && strcmp(text, "null") != 0)
	{
		fprintf(stderr, "test bug: not JSON: %s\n", text);
		exit(2);
	}
	return o;
}

/* Canonical text of a value, in a static buffer (tests compare strings). */
static const char *
canon(json_object *o)
{
	static char buf[4096];
	char	   *t = wfe_canonical_json(o);

	snprintf(buf, sizeof(buf), "%s", t ? t : "(null)");
	free(t);
	return buf;
}

/*
 * Validate value against schema; expect rc and (for non-valid) exactly
 * `want` as the message (NULL: only check the rc).
 */
static void
check_schema(const char *schema_text, const char *value_text, int want_rc,
			 const char *want, const char *what)
{
	json_object *schema = J(schema_text);
	json_object *value = J(value_text);
	char		msg[512];
	int			rc = wfe_schema_validate(schema, value, msg, sizeof(msg));
	int			good = rc == want_rc &&
		(rc == WFE_SCHEMA_VALID ? msg[0] == '\0' : (want == NULL || strcmp(msg, want) == 0));

	ok(good, "schema: %s", what);
	if (!good)
		diag("rc %d (want %d), message: %s (want: %s)", rc, want_rc, msg, want ? want : "-");
	wfe_json_free(schema);
	wfe_json_free(value);
}

/* Bind a template that must succeed; compare the canonical result. */
static void
check_bind(const char *tmpl_text, const char *schema_text, const char *want,
		   const char *what)
{
	json_object *tmpl = J(tmpl_text);
	json_object *schema = schema_text ? J(schema_text) : NULL;
	wfe_bind_error err;
	json_object *in = wfe_bind_input(tmpl, root, schema, NULL, &err);
	const char *got = in ? canon(in) : "(failed)";
	int			good = in != NULL && strcmp(got, want) == 0;

	ok(good, "bind: %s", what);
	if (!good)
		diag("got %s (want %s) %s %s", got, want, err.code ? err.code : "", err.message);
	wfe_json_free(in);
	wfe_json_free(tmpl);
	wfe_json_free(schema);
}

/* Bind a template that must fail with `code` and exactly `message`. */
static void
check_bind_fail(const char *tmpl_text, const char *schema_text, const char *code,
				const char *message, const char *what)
{
	json_object *tmpl = J(tmpl_text);
	json_object *schema = schema_text ? J(schema_text) : NULL;
	wfe_bind_error err;
	json_object *in = wfe_bind_input(tmpl, root, schema, NULL, &err);
	int			good = in == NULL && err.code != NULL && strcmp(err.code, code) == 0 &&
		(message == NULL || strcmp(err.message, message) == 0);

	ok(good, "bind fails: %s", what);
	if (!good)
		diag("got %s / %s: %s (want %s: %s)", in ? canon(in) : "NULL",
			 err.code ? err.code : "-", err.message, code, message ? message : "-");
	wfe_json_free(in);
	wfe_json_free(tmpl);
	wfe_json_free(schema);
}

/* Evaluate a decision over a root; expect a taken branch and target. */
static void
check_decide(const char *branches_text, const char *root_text, int want_branch,
			 const char *want_next, const char *what)
{
	json_object *branches = J(branches_text);
	json_object *r = root_text ? J(root_text) : root;
	wfe_decision d;
	int			rc = wfe_eval_decision(branches, r, NULL, &d);
	int			good = rc == 0 && d.ok && d.branch == want_branch &&
		strcmp(d.next, want_next) == 0;

	ok(good, "decision: %s", what);
	if (!good)
		diag("rc %d ok %d branch %d next %s code %s: %s", rc, d.ok, d.branch, d.next,
			 d.code ? d.code : "-", d.message);
	wfe_json_free(branches);
	if (root_text)
		wfe_json_free(r);
}

/* Evaluate a decision that must fail at `want_branch` with a message part. */
static void
check_decide_fail(const char *branches_text, const char *root_text, int want_branch,
				  const char *want_in_message, const char *what)
{
	json_object *branches = J(branches_text);
	json_object *r = root_text ? J(root_text) : root;
	wfe_decision d;
	int			rc = wfe_eval_decision(branches, r, NULL, &d);
	int			good = rc == 0 && !d.ok && d.branch == want_branch &&
		d.code != NULL && strcmp(d.code, "expr.eval") == 0 &&
		strstr(d.message, want_in_message) != NULL;

	ok(good, "decision fails: %s", what);
	if (!good)
		diag("rc %d ok %d branch %d code %s: %s", rc, d.ok, d.branch,
			 d.code ? d.code : "-", d.message);
	else
		diag("  message: %s", d.message);
	wfe_json_free(branches);
	if (root_text)
		wfe_json_free(r);
}

/* Every keyword of the subset, passing and failing, and its messages. */
static void
test_schema_types(void)
{
	static const struct
	{
		const char *type;
		const char *pass;
		const char *fail;
		const char *fail_name;
	}			cases[] = {
		{"object", "{\"a\": 1}", "[1]", "array"},
		{"array", "[1, 2]", "{}", "object"},
		{"string", "\"s\"", "1", "integer"},
		{"number", "1.5", "\"1.5\"", "string"},
		{"integer", "7", "7.5", "number"},
		{"boolean", "false", "0", "integer"},
		{"null", "null", "false", "boolean"},
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
	{
		char		schema[64],
					want[128];

		snprintf(schema, sizeof(schema), "{\"type\": \"%s\"}", cases[i].type);
		snprintf(want, sizeof(want), "$: expected %s, got %s (schema #/type)", cases[i].type, cases[i].fail_name);
		check_schema(schema, cases[i].pass, WFE_SCHEMA_VALID, NULL, cases[i].type);
		check_schema(schema, cases[i].fail, WFE_SCHEMA_VIOLATION, want, want);
	}
	check_schema("{\"type\": \"number\"}", "12", WFE_SCHEMA_VALID, NULL,
				 "number accepts an integer");
	check_schema("{\"type\": \"integer\"}", "1.0", WFE_SCHEMA_VALID, NULL,
				 "integer accepts 1.0 (an integral value; 0.1.0 refused it)");
	check_schema("{\"type\": \"integer\"}", "1.5", WFE_SCHEMA_VIOLATION,
				 "$: expected integer, got number (schema #/type)", "integer refuses 1.5");
	check_schema("{\"type\": \"integer\"}", "18446744073709551617", WFE_SCHEMA_VALID, NULL,
				 "integer accepts an integer beyond 64 bits");
	check_schema("{\"type\": \"integer\"}", "-9223372036854775808", WFE_SCHEMA_VALID, NULL,
				 "integer accepts INT64_MIN");
	check_schema("{\"type\": \"integer\"}", "18446744073709551615", WFE_SCHEMA_VALID, NULL,
				 "integer accepts a uint64");
	check_schema("{\"type\": [\"string\", \"null\"]}", "null", WFE_SCHEMA_VALID, NULL,
				 "type array accepts any listed type");
	check_schema("{\"type\": [\"string\", \"null\"]}", "3", WFE_SCHEMA_VIOLATION,
				 "$: expected string or null, got integer (schema #/type)", "type array names all types");
	check_schema("{\"type\": [\"string\", \"number\", \"null\"]}", "{}", WFE_SCHEMA_VIOLATION,
				 "$: expected string, number or null, got object (schema #/type)", "three types in the message");
	check_schema("{}", "{\"anything\": [1, {}]}", WFE_SCHEMA_VALID, NULL,
				 "the empty schema accepts anything");
	check_schema("{\"description\": \"d\", \"title\": \"t\"}", "1", WFE_SCHEMA_VALID, NULL,
				 "description and title are ignored");
}

/* properties, required, items, enum and nested paths. */
static void
test_schema_structure(void)
{
	const char *model =
		"{\"type\": \"object\", \"required\": [\"modelId\"],"
		" \"properties\": {\"modelId\": {\"type\": \"string\", \"description\": \"id\"},"
		"                  \"opts\": {\"type\": \"object\", \"required\": [\"mode\"],"
		"                             \"properties\": {\"mode\": {\"enum\": [\"fast\", \"safe\"]}}},"
		"                  \"tags\": {\"type\": \"array\", \"items\": {\"type\": \"string\"}},"
		"                  \"cache-key\": {\"type\": \"integer\"}}}";

	check_schema(model, "{\"modelId\": \"m\", \"opts\": {\"mode\": \"safe\"}, \"tags\": [\"a\"], \"extra\": 1}",
				 WFE_SCHEMA_VALID, NULL, "a conforming object (extra members allowed)");
	check_schema(model, "{\"modelId\": 7}", WFE_SCHEMA_VIOLATION,
				 "$.modelId: expected string, got integer (schema #/properties/modelId/type)", "property type, with its path");
	check_schema(model, "{\"other\": 1}", WFE_SCHEMA_VIOLATION,
				 "$: missing required property \"modelId\" (schema #/required)", "required property missing");
	check_schema(model, "{\"modelId\": \"m\", \"opts\": {}}", WFE_SCHEMA_VIOLATION,
				 "$.opts: missing required property \"mode\" (schema #/properties/opts/required)", "nested required");
	check_schema(model, "{\"modelId\": \"m\", \"opts\": {\"mode\": \"slow\"}}", WFE_SCHEMA_VIOLATION,
				 "$.opts.mode: \"slow\" is not one of [\"fast\",\"safe\"] (schema #/properties/opts/properties/mode/enum)", "nested enum");
	check_schema(model, "{\"modelId\": \"m\", \"tags\": [\"a\", \"b\", 3]}", WFE_SCHEMA_VIOLATION,
				 "$.tags[2]: expected string, got integer (schema #/properties/tags/items/type)", "items, with the index");
	check_schema(model, "{\"modelId\": \"m\", \"cache-key\": \"k\"}", WFE_SCHEMA_VIOLATION,
				 "$[\"cache-key\"]: expected integer, got string (schema #/properties/cache-key/type)", "a non-identifier key is quoted");
	check_schema(model, "[1]", WFE_SCHEMA_VIOLATION, "$: expected object, got array (schema #/type)",
				 "type is checked before required");
	check_schema("{\"required\": [\"a\"], \"properties\": {\"a\": {\"type\": \"string\"}}}", "\"text\"",
				 WFE_SCHEMA_VALID, NULL, "required and properties ignore non-objects");
	check_schema("{\"items\": {\"type\": \"string\"}}", "{\"0\": 1}", WFE_SCHEMA_VALID, NULL,
				 "items ignores non-arrays");
	check_schema("{\"type\": \"array\", \"items\": {\"type\": \"array\", \"items\": {\"type\": \"integer\"}}}",
				 "[[1], [2, 3.5]]", WFE_SCHEMA_VIOLATION, "$[1][1]: expected integer, got number (schema #/items/items/type)",
				 "nested items");
	check_schema("{\"type\": \"array\", \"items\": {\"required\": [\"id\"]}}", "[{\"id\": 1}, {}]",
				 WFE_SCHEMA_VIOLATION, "$[1]: missing required property \"id\" (schema #/items/required)",
				 "required inside items");
}

/* enum uses deep equality. */
static void
test_schema_enum(void)
{
	const char *e = "{\"enum\": [1, \"one\", null, [1, {\"a\": true}], {\"x\": 1, \"y\": [2]}]}";

	check_schema(e, "1", WFE_SCHEMA_VALID, NULL, "enum: integer");
	check_schema(e, "1.0", WFE_SCHEMA_VALID, NULL, "enum: 1.0 equals 1");
	check_schema(e, "\"one\"", WFE_SCHEMA_VALID, NULL, "enum: string");
	check_schema(e, "null", WFE_SCHEMA_VALID, NULL, "enum: null");
	check_schema(e, "[1, {\"a\": true}]", WFE_SCHEMA_VALID, NULL, "enum: array, deeply");
	check_schema(e, "{\"y\": [2], \"x\": 1}", WFE_SCHEMA_VALID, NULL,
				 "enum: object, whatever the key order");
	check_schema(e, "{\"x\": 1}", WFE_SCHEMA_VIOLATION, NULL, "enum: object with fewer keys");
	check_schema(e, "{\"x\": 1, \"y\": [2], \"z\": 0}", WFE_SCHEMA_VIOLATION, NULL,
				 "enum: object with more keys");
	check_schema(e, "[{\"a\": true}, 1]", WFE_SCHEMA_VIOLATION, NULL, "enum: array order matters");
	check_schema(e, "true", WFE_SCHEMA_VIOLATION,
				 "$: true is not one of [1,\"one\",null,[1,{\"a\":true}],{\"x\":1,\"y\":[2]}] (schema #/enum)",
				 "enum: failure lists the values");
	check_schema(e, "\"One\"", WFE_SCHEMA_VIOLATION, NULL, "enum: strings compare exactly");
	check_schema("{\"enum\": [2.5]}", "2.5", WFE_SCHEMA_VALID, NULL, "enum: doubles");
	check_schema("{\"enum\": [18446744073709551615]}", "9223372036854775807",
				 WFE_SCHEMA_VIOLATION, NULL, "enum: uint64 and int64 are told apart");
	check_schema("{\"type\": \"string\", \"enum\": [\"a\"]}", "1", WFE_SCHEMA_VIOLATION,
				 "$: expected string, got integer (schema #/type)", "type is checked before enum");
	check_schema("{\"enum\": [18446744073709551616]}", "18446744073709551617",
				 WFE_SCHEMA_VIOLATION, NULL, "enum: integers beyond 64 bits are told apart");
	check_schema("{\"enum\": [18446744073709551616]}", "18446744073709551616.0",
				 WFE_SCHEMA_VALID, NULL, "enum: a big integer equals itself written with a fraction");
	check_schema("{\"enum\": [1E+400]}", "1E+401", WFE_SCHEMA_VIOLATION, NULL,
				 "enum: 1E+400 and 1E+401 differ (no overflow to infinity)");
}

/* A schema outside the subset is malformed, not a violation. */
static void
test_schema_malformed(void)
{
	char	   *deep;
	char	   *value;
	size_t		cap = 70 * 40 + 64;
	json_object *s,
			   *v;
	char		msg[512];
	int			rc;

	check_schema("{\"type\": \"float\"}", "1", WFE_SCHEMA_MALFORMED,
				 "/type: \"type\" must be one of object, array, string, number, integer, boolean, null, "
				 "or an array of distinct ones, not \"float\"", "unknown type name");
	check_schema("{\"type\": []}", "1", WFE_SCHEMA_MALFORMED, NULL, "empty type array");
	check_schema("{\"type\": 3}", "1", WFE_SCHEMA_MALFORMED, NULL, "type not a string");
	check_schema("{\"properties\": []}", "{}", WFE_SCHEMA_MALFORMED, NULL, "properties not an object");
	check_schema("{\"properties\": {\"a\": 1}}", "{\"a\": 1}", WFE_SCHEMA_MALFORMED,
				 "/properties/a: must be a schema (an object or a boolean), not integer",
				 "a property schema that is not an object");
	check_schema("{\"required\": [1]}", "{}", WFE_SCHEMA_MALFORMED, NULL, "required not names");
	check_schema("{\"required\": \"a\"}", "{}", WFE_SCHEMA_MALFORMED, NULL, "required not an array");
	check_schema("{\"enum\": []}", "1", WFE_SCHEMA_VIOLATION, "$: 1 is not one of [] (schema #/enum)",
				 "an empty enum is satisfied by nothing");
	check_schema("{\"enum\": []}", "null", WFE_SCHEMA_VIOLATION, NULL, "not even null");
	check_schema("{\"enum\": {}}", "1", WFE_SCHEMA_MALFORMED, NULL, "enum not an array");
	check_schema("{\"items\": [{}]}", "[]", WFE_SCHEMA_MALFORMED, NULL, "tuple items");
	check_schema("[]", "1", WFE_SCHEMA_MALFORMED, NULL, "a schema that is an array");

	/* 70 levels of {"items": ...} over 70 levels of [...] */
	deep = malloc(cap);
	value = malloc(cap);
	strcpy(deep, "");
	strcpy(value, "");
	for (int i = 0; i < 70; i++)
	{
		strcat(deep, "{\"items\": ");
		strcat(value, "[");
	}
	strcat(deep, "{}");
	strcat(value, "1");
	for (int i = 0; i < 70; i++)
	{
		strcat(deep, "}");
		strcat(value, "]");
	}
	s = J(deep);
	v = J(value);
	/* 0.1.0 refused this as too deep: every value the parser reads gets an answer */
	rc = wfe_schema_validate(s, v, msg, sizeof(msg));
	ok(rc == WFE_SCHEMA_VALID, "schema: 70 levels of items over 70 levels of arrays validate");
	diag("  message: %s", msg);
	wfe_json_free(v);
	value[70] = '"';			/* the innermost 1 becomes the string "" */
	memmove(value + 72, value + 71, strlen(value + 71) + 1);
	value[71] = '"';
	v = J(value);
	rc = wfe_schema_validate(s, v, msg, sizeof(msg));
	ok(rc == WFE_SCHEMA_VALID, "schema: the innermost item is unconstrained ({})");
	rc = wfe_schema_validate(s, v, NULL, 0);
	ok(rc == WFE_SCHEMA_VALID, "schema: a NULL message buffer is fine");
	wfe_json_free(s);
	wfe_json_free(v);
	free(deep);
	free(value);
}

/* Long paths are cut with "...", and messages stay valid UTF-8. */
static void
test_schema_messages(void)
{
	char		key[100];
	char		schema[2048],
				value[2048];
	json_object *s,
			   *v;
	char		msg[512],
				small[20];
	int			rc;

	memset(key, 'k', 60);
	key[60] = '\0';
	snprintf(schema, sizeof(schema),
			 "{\"properties\": {\"%s\": {\"properties\": {\"%s\": {\"properties\": {\"%s\": "
			 "{\"properties\": {\"%s\": {\"type\": \"string\"}}}}}}}}}}", key, key, key, key);
	snprintf(value, sizeof(value), "{\"%s\": {\"%s\": {\"%s\": {\"%s\": 1}}}}", key, key, key, key);
	s = J(schema);
	v = J(value);
	rc = wfe_schema_validate(s, v, msg, sizeof(msg));
	ok(rc == WFE_SCHEMA_VIOLATION && strstr(msg, "...: expected string, got integer") != NULL,
	   "schema: an over-long path is cut with ...");
	diag("  message: %s", msg);
	rc = wfe_schema_validate(s, v, small, sizeof(small));
	ok(rc == WFE_SCHEMA_VIOLATION && strlen(small) == sizeof(small) - 1,
	   "schema: a short message buffer is filled and terminated");
	wfe_json_free(s);
	wfe_json_free(v);

	/* a multibyte enum value cut in the middle of a character */
	s = J("{\"enum\": [\"x\"]}");
	v = J("\"\\u00e9\\u00e9\\u00e9\\u00e9\\u00e9\\u00e9\\u00e9\\u00e9\\u00e9\\u00e9"
		  "\\u00e9\\u00e9\\u00e9\\u00e9\\u00e9\\u00e9\\u00e9\\u00e9\\u00e9\\u00e9"
		  "\\u00e9\\u00e9\\u00e9\\u00e9\\u00e9\\u00e9\\u00e9\\u00e9\\u00e9\\u00e9\"");
	rc = wfe_schema_validate(s, v, msg, sizeof(msg));
	{
		char		copy[512];

		strcpy(copy, msg);
		wfe_utf8_sanitize(copy);
		ok(rc == WFE_SCHEMA_VIOLATION && strcmp(copy, msg) == 0 && strstr(msg, "...") != NULL,
		   "schema: a cut value stays valid UTF-8");
		diag("  message: %s", msg);
	}
	wfe_json_free(s);
	wfe_json_free(v);

	{
		char		bad[] = "a\xc3(b\xe2\x82z\xf0\x9f\x98\x80\xff";

		wfe_utf8_sanitize(bad);
		ok(strcmp(bad, "a?(b??z\xf0\x9f\x98\x80?") == 0, "utf8: invalid bytes become ?");
	}
}

/* wfe_json_equal edge cases. */
static void
test_equal(void)
{
	json_object *a = J("{\"a\": [1, 2.0, \"x\", null, true]}");
	json_object *b = J("{\"a\": [1.0, 2, \"x\", null, true]}");
	json_object *c = J("{\"a\": [1, 2, \"x\", null, false]}");

	ok(wfe_json_equal(a, b), "equal: numbers by value, deeply");
	ok(!wfe_json_equal(a, c), "equal: booleans differ");
	ok(wfe_json_equal(NULL, NULL), "equal: null equals null");
	ok(!wfe_json_equal(NULL, a), "equal: null is not an object");
	wfe_json_free(a);
	wfe_json_free(b);
	wfe_json_free(c);
	a = J("\"a\\u0000b\"");
	b = J("\"a\\u0000c\"");
	ok(!wfe_json_equal(a, b), "equal: strings compare past an embedded NUL");
	wfe_json_free(a);
	wfe_json_free(b);
}

/* Whole-value references keep their JSON type. */
static void
test_bind_whole(void)
{
	check_bind("{\"m\": \"${context.modelId}\"}", NULL, "{\"m\":\"m-1\"}", "whole string");
	check_bind("{\"n\": \"${context.count}\"}", NULL, "{\"n\":3}", "whole integer stays an integer");
	check_bind("{\"r\": \"${context.ratio}\"}", NULL, "{\"r\":0.25}", "whole double");
	check_bind("{\"f\": \"${context.flag}\", \"g\": \"${context.off}\"}", NULL,
			   "{\"f\":true,\"g\":false}", "whole booleans");
	check_bind("{\"o\": \"${context.obj}\", \"l\": \"${context.list}\"}", NULL,
			   "{\"l\":[1,\"x\",null],\"o\":{\"a\":1}}", "whole object and array");
	check_bind("{\"hit\": \"${stages[\\\"cache-lookup\\\"].result.hit}\"}", NULL,
			   "{\"hit\":true}", "stages[\"name\"].result (stages form)");
	check_bind("{\"s\": \"${outputs.restore_session.user_session}\"}", NULL,
			   "{\"s\":\"abc\"}", "outputs.TASK.KEY (tasks form)");
	check_bind("{\"m\": \"${payload.modelId}\"}", NULL, "{\"m\":\"m-1\"}",
			   "payload is an alias of context");
	check_bind("{\"id\": \"${run.id}\", \"t\": \"${run.tenant}\", \"w\": \"${run.workflow}\","
			   " \"v\": \"${run.version}\"}", NULL,
			   "{\"id\":42,\"t\":\"acme\",\"v\":\"2.3.0\",\"w\":\"model-ingest\"}", "run fields");
	check_bind("{\"x\": \"${context.list[1]}\"}", NULL, "{\"x\":\"x\"}", "array index");
	check_bind("{\"b\": \"${context[\\\"a}b\\\"]}\"}", NULL, "{\"b\":\"brace\"}",
			   "a quoted key may contain a closing brace");
}

/* References inside longer strings become text. */
static void
test_bind_text(void)
{
	check_bind("{\"u\": \"models/${context.modelId}/v${context.count}\"}", NULL,
			   "{\"u\":\"models/m-1/v3\"}", "string and integer as text");
	check_bind("{\"u\": \"r=${context.ratio} two=${context.two} f=${context.flag},${context.off}\"}", NULL,
			   "{\"u\":\"r=0.25 two=2 f=true,false\"}", "numbers in shortest form, booleans");
	check_bind("{\"u\": \"${context.modelId}${context.count}\"}", NULL, "{\"u\":\"m-13\"}",
			   "two adjacent references are text, not a whole value");
	check_bind("{\"u\": \" ${context.count}\"}", NULL, "{\"u\":\" 3\"}",
			   "a reference with a leading space is text");
	check_bind("{\"u\": \"${run.tenant}/${stages[\\\"cache-lookup\\\"].result.uri}\"}", NULL,
			   "{\"u\":\"acme/s3://m\"}", "run and stage references in text");
	check_bind("{\"u\": \"hi ${context.name}\"}", NULL, "{\"u\":\"hi h\xc3\xa9llo\"}",
			   "UTF-8 text is copied as is");
	check_bind("{\"u\": \"$${context.modelId}\"}", NULL, "{\"u\":\"${context.modelId}\"}",
			   "$${ is a literal ${ (whole string)");
	check_bind("{\"u\": \"cost $${x} for ${context.modelId}\"}", NULL,
			   "{\"u\":\"cost ${x} for m-1\"}", "$${ next to a real reference");
	check_bind("{\"u\": \"$$${context.count}\"}", NULL, "{\"u\":\"$${context.count}\"}",
			   "$$${ is $ then a literal ${");
	check_bind("{\"u\": \"price: $5, {braces} and $ alone $\"}", NULL,
			   "{\"u\":\"price: $5, {braces} and $ alone $\"}", "lone $ and braces are literal");
	check_bind("{\"u\": \"\"}", NULL, "{\"u\":\"\"}", "empty string");
}

/* Nested templates, literals and keys. */
static void
test_bind_nested(void)
{
	check_bind("{\"a\": {\"b\": [\"${context.count}\", {\"c\": \"id-${context.modelId}\"}, 7, null, true, 1.5]},"
			   " \"d\": []}", NULL,
			   "{\"a\":{\"b\":[3,{\"c\":\"id-m-1\"},7,null,true,1.5]},\"d\":[]}",
			   "nested objects and arrays; literals kept");
	check_bind("{\"${context.modelId}\": \"k\"}", NULL, "{\"${context.modelId}\":\"k\"}",
			   "keys are not interpolated");
	check_bind("{}", NULL, "{}", "empty template");
	check_bind("{\"l\": [\"${context.list}\", \"${context.obj}\"]}", NULL,
			   "{\"l\":[[1,\"x\",null],{\"a\":1}]}", "whole values inside arrays");
}

/* missing, null and type, with the input key path in the message. */
static void
test_bind_failures(void)
{
	check_bind_fail("{\"modelId\": \"${context.nope}\"}", NULL, WFE_BIND_MISSING,
					"input.modelId: ${context.nope} is missing", "whole value missing");
	check_bind_fail("{\"modelId\": \"${context.nothing}\"}", NULL, WFE_BIND_NULL,
					"input.modelId: ${context.nothing} is null", "whole value null");
	check_bind_fail("{\"u\": \"x/${context.nope}\"}", NULL, WFE_BIND_MISSING,
					"input.u: ${context.nope} is missing", "in-string missing");
	check_bind_fail("{\"u\": \"x/${context.nothing}\"}", NULL, WFE_BIND_NULL,
					"input.u: ${context.nothing} is null", "in-string null");
	check_bind_fail("{\"u\": \"x/${context.obj}\"}", NULL, WFE_BIND_TYPE,
					"input.u: ${context.obj} is an object; only a string, number or boolean can be part of a longer string",
					"in-string object");
	check_bind_fail("{\"u\": \"x/${context.list}\"}", NULL, WFE_BIND_TYPE, NULL, "in-string array");
	check_bind_fail("{\"u\": \"${context.list[2]}\"}", NULL, WFE_BIND_NULL, NULL, "null array element");
	check_bind_fail("{\"u\": \"${context.list[9]}\"}", NULL, WFE_BIND_MISSING, NULL,
					"index out of range is missing");
	check_bind_fail("{\"u\": \"${context.nothing.x}\"}", NULL, WFE_BIND_MISSING, NULL,
					"a field below null is missing");
	check_bind_fail("{\"u\": \"${stages.other.result.x}\"}", NULL, WFE_BIND_MISSING,
					"input.u: ${stages.other.result.x} is missing", "a stage without a result is missing");
	check_bind_fail("{\"u\": \"${outputs.restore_session.nope}\"}", NULL, WFE_BIND_MISSING, NULL,
					"an output not produced is missing");
	check_bind_fail("{\"a\": {\"b\": [1, {\"c\": \"${context.nope}\"}]}}", NULL, WFE_BIND_MISSING,
					"input.a.b[1].c: ${context.nope} is missing", "nested path in the message");
	check_bind_fail("{\"my key\": \"${context.nothing}\"}", NULL, WFE_BIND_NULL,
					"input[\"my key\"]: ${context.nothing} is null", "odd key quoted in the path");
	check_bind_fail("{\"u\": \"${nope.x}\"}", NULL, WFE_BIND_MISSING, NULL,
					"an unknown root cannot be resolved");
	check_bind_fail("{\"u\": \"${context.a + 1}\"}", NULL, WFE_BIND_MISSING, NULL,
					"an expression is not a reference");
	check_bind_fail("{\"u\": \"abc ${context.modelId\"}", NULL, WFE_BIND_MISSING,
					"input.u: unterminated interpolation: '${' without a closing '}'",
					"unterminated interpolation");
	check_bind_fail("{\"ok\": \"${context.count}\", \"bad\": \"${context.nope}\", \"nul\": \"${context.nothing}\"}",
					NULL, WFE_BIND_MISSING, "input.bad: ${context.nope} is missing",
					"the first failing member, in template order");

	{
		/* a long reference is quoted cut, and the cut keeps UTF-8 whole */
		char		tmpl[512] = "{\"u\": \"${context[\\\"";
		json_object *t;
		wfe_bind_error err;
		json_object *in;
		char		copy[sizeof(err.message)];

		for (int i = 0; i < 71; i++)
			strcat(tmpl, "\xc3\xa9");
		strcat(tmpl, "\\\"]}\"}");
		t = J(tmpl);
		in = wfe_bind_input(t, root, NULL, NULL, &err);
		strcpy(copy, err.message);
		wfe_utf8_sanitize(copy);
		ok(in == NULL && strcmp(err.code, WFE_BIND_MISSING) == 0 &&
		   strstr(err.message, "...} is missing") != NULL && strcmp(copy, err.message) == 0 &&
		   strchr(err.message, '?') == NULL,
		   "bind fails: a long reference is cut in the message, as valid UTF-8");
		diag("  message: %s", err.message);
		wfe_json_free(in);
		wfe_json_free(t);
	}
}

/* The bound input against a contract's input schema. */
static void
test_bind_schema(void)
{
	const char *schema =
		"{\"type\": \"object\", \"required\": [\"modelId\"],"
		" \"properties\": {\"modelId\": {\"type\": \"string\"}, \"n\": {\"type\": \"integer\"}}}";

	check_bind("{\"modelId\": \"${context.modelId}\", \"n\": \"${context.count}\"}", schema,
			   "{\"modelId\":\"m-1\",\"n\":3}", "conforming input");
	check_bind_fail("{\"modelId\": \"${context.count}\"}", schema, WFE_BIND_TYPE,
					"input.modelId: expected string, got integer (contract input schema #/properties/modelId/type)",
					"bound value of the wrong type");
	check_bind_fail("{\"n\": \"${context.count}\"}", schema, WFE_BIND_TYPE,
					"input: missing required property \"modelId\" (contract input schema #/required)",
					"required input absent");
	check_bind_fail("{\"modelId\": \"m\", \"n\": \"${context.ratio}\"}", schema, WFE_BIND_TYPE,
					"input.n: expected integer, got number (contract input schema #/properties/n/type)",
					"a double for an integer");
	check_bind_fail("{\"modelId\": \"${context.nope}\"}", schema, WFE_BIND_MISSING, NULL,
					"binding problems come before the schema");
	check_bind_fail("{\"modelId\": \"m\"}", "{\"type\": \"text\"}", WFE_BIND_BAD_SCHEMA,
					"contract input schema at /type: \"type\" must be one of object, array, string, number, "
					"integer, boolean, null, or an array of distinct ones, not \"text\"",
					"a malformed schema is schema.invalid");
	check_bind("{\"x\": 1}", "{}", "{\"x\":1}", "the empty schema accepts any input");
}

/* Decisions, with both seed expressions verbatim. */
static void
test_decisions(void)
{
	const char *seed000 =
		"[{\"when\": \"stages[\\\"cache-lookup\\\"].result.hit == true\", \"next\": \"publish\"},"
		" {\"when\": \"true\", \"next\": \"convert\"}]";
	const char *seed004 =
		"[{\"when\": \"has(payload.amount) && payload.amount > 10000\", \"next\": \"review\"},"
		" {\"when\": \"true\", \"next\": \"auto\"}]";

	check_decide(seed000, NULL, 0, "publish", "seed 000: cache hit");
	check_decide(seed000, "{\"context\": {}, \"stages\": {\"cache-lookup\": {\"result\": {\"hit\": false}}}}",
				 1, "convert", "seed 000: cache miss falls back");
	check_decide(seed004, NULL, 0, "review", "seed 004: amount over 10000");
	check_decide(seed004, "{\"context\": {\"amount\": 10000}}", 1, "auto", "seed 004: amount at 10000");
	check_decide(seed004, "{\"context\": {}}", 1, "auto", "seed 004: has() guards a missing amount");
	check_decide("[{\"when\": \"false\", \"next\": \"a\"}, {\"when\": \"size(context.list) == 3\", \"next\": \"b\"},"
				 " {\"when\": \"true\", \"next\": \"c\"}]", NULL, 1, "b", "first true branch wins");
	check_decide("[{\"when\": \"true\", \"next\": \"failed\"}]", NULL, 0, "failed", "a terminal as target");

	check_decide_fail("[{\"when\": \"context.amount / context.zero > 1\", \"next\": \"a\"},"
					  " {\"when\": \"true\", \"next\": \"b\"}]", NULL, 0, "division by zero",
					  "division by zero is expr.eval");
	check_decide_fail("[{\"when\": \"false\", \"next\": \"a\"}, {\"when\": \"payload.missing > 1\", \"next\": \"b\"},"
					  " {\"when\": \"true\", \"next\": \"c\"}]", NULL, 1, "missing",
					  "a missing field without has() is expr.eval, at its branch");
	check_decide_fail("[{\"when\": \"context.amount\", \"next\": \"a\"}, {\"when\": \"true\", \"next\": \"b\"}]",
					  NULL, 0, "bool", "a non-boolean result is expr.eval");
	check_decide_fail("[{\"when\": \"context.modelId > 1\", \"next\": \"a\"}, {\"when\": \"true\", \"next\": \"b\"}]",
					  NULL, 0, "cannot be applied", "a type mismatch is expr.eval");
	check_decide_fail("[{\"when\": \"1 +\", \"next\": \"a\"}]", NULL, 0, "expr.syntax",
					  "a when that does not parse is expr.eval");
	check_decide_fail("[{\"when\": \"false\", \"next\": \"a\"}]", NULL, -1, "no branch",
					  "no true branch");
	check_decide_fail("[]", NULL, -1, "no branch", "no branches at all");

	{
		static const char *const bad[] = {
			"{\"when\": \"true\", \"next\": \"a\"}",
			"[{\"when\": \"true\"}]",
			"[{\"when\": true, \"next\": \"a\"}]",
			"[\"true\"]",
			"[{\"when\": \"true\", \"next\": \"a\"}, {\"next\": \"b\"}]",
		};

		for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		{
			json_object *b = J(bad[i]);
			wfe_decision d;
			int			rc = wfe_eval_decision(b, root, NULL, &d);

			ok(rc == -1 && d.message[0] != '\0', "decision: malformed branches refused: %s", bad[i]);
			wfe_json_free(b);
		}
	}

	{
		/* a step budget of 3 cannot evaluate a longer expression */
		wfe_expr_limits lim = {0, 0, 3};
		json_object *b = J("[{\"when\": \"1 + 1 + 1 + 1 + 1 == 5\", \"next\": \"a\"}]");
		wfe_decision d;
		int			rc = wfe_eval_decision(b, root, &lim, &d);

		ok(rc == 0 && !d.ok && d.branch == 0 && strcmp(d.code, "expr.eval") == 0,
		   "decision: the step budget applies");
		diag("  message: %s", d.message);
		wfe_json_free(b);
	}
}

/* Many calls in a row: ASan's leak check at exit finds what was not freed. */
static void
test_repeat(void)
{
	json_object *tmpl = J("{\"a\": \"${context.obj}\", \"b\": \"x${context.count}\", \"c\": [\"${context.list}\"]}");
	json_object *bad = J("{\"a\": \"${context.count}\", \"b\": \"x${context.obj}\"}");
	json_object *schema = J("{\"properties\": {\"a\": {\"type\": \"string\"}}}");
	json_object *branches = J("[{\"when\": \"context.amount / context.zero > 1\", \"next\": \"a\"},"
							  " {\"when\": \"true\", \"next\": \"b\"}]");
	int			good = 1;

	for (int i = 0; i < 2000; i++)
	{
		wfe_bind_error err;
		wfe_decision d;
		json_object *in = wfe_bind_input(tmpl, root, NULL, NULL, &err);

		good &= in != NULL;
		wfe_json_free(in);
		good &= wfe_bind_input(bad, root, NULL, NULL, &err) == NULL;
		good &= wfe_bind_input(tmpl, root, schema, NULL, &err) == NULL;
		good &= wfe_eval_decision(branches, root, NULL, &d) == 0 && !d.ok;
	}
	ok(good, "repeat: 2000 bindings and decisions, successes and failures alike");
	wfe_json_free(tmpl);
	wfe_json_free(bad);
	wfe_json_free(schema);
	wfe_json_free(branches);
}

/* The cache key material: canonical, and every part of the key in it. */
static void
test_cache_key(void)
{
	char	   *a = wfe_cache_key_material("acme", "embed@1", "queue:embed", "sha256:s", "{\"b\": 1, \"a\": [1.0, \"x\"]}");
	char	   *b = wfe_cache_key_material("acme", "embed@1", "queue:embed", "sha256:s", "{\"a\":[1,\"x\"],\"b\":1}");
	char	   *t = wfe_cache_key_material("other", "embed@1", "queue:embed", "sha256:s", "{\"a\":[1,\"x\"],\"b\":1}");
	char	   *c = wfe_cache_key_material("acme", "embed@2", "queue:embed", "sha256:s", "{\"a\":[1,\"x\"],\"b\":1}");
	char	   *i = wfe_cache_key_material("acme", "embed@1", "handler:public.f(jsonb)", "sha256:s", "{\"a\":[1,\"x\"],\"b\":1}");
	char	   *d = wfe_cache_key_material("acme", "embed@1", "queue:embed", "sha256:z", "{\"a\":[1,\"x\"],\"b\":1}");
	char	   *n = wfe_cache_key_material("acme", "embed@1", "queue:embed", "sha256:s", "null");

	ok(a && strcmp(a, "{\"contract\":\"embed@1\",\"implementation\":\"queue:embed\",\"input\":{\"a\":[1,\"x\"],\"b\":1},"
					"\"schemas\":\"sha256:s\",\"tenant\":\"acme\",\"v\":1}") == 0,
	   "cache key: the material is canonical JSON of the documented members (got %s)", a ? a : "NULL");
	ok(a && b && strcmp(a, b) == 0, "cache key: key order, white space and 1.0 vs 1 do not change it");
	ok(a && t && c && i && d && strcmp(a, t) != 0 && strcmp(a, c) != 0 && strcmp(a, i) != 0 && strcmp(a, d) != 0,
	   "cache key: the tenant, the contract, the implementation and the schemas each change it");
	ok(n && strstr(n, "\"input\":null") != NULL, "cache key: a null input is a value like any other");
	ok(wfe_cache_key_material("acme", "embed@1", "queue:embed", "sha256:s", "{not json") == NULL,
	   "cache key: an input that is not JSON has no key");
	free(a);
	free(b);
	free(t);
	free(c);
	free(i);
	free(d);
	free(n);
}

int
main(void)
{
	root = J(ROOT_JSON);

	test_schema_types();
	test_schema_structure();
	test_schema_enum();
	test_schema_malformed();
	test_schema_messages();
	test_equal();
	test_bind_whole();
	test_bind_text();
	test_bind_nested();
	test_bind_failures();
	test_bind_schema();
	test_decisions();
	test_repeat();
	test_cache_key();

	wfe_json_free(root);
	return tap_done();
}
