/*
 * test_jsonschema.c — unit tests of the JSON Schema validator's own
 * behaviour (src/core/jsonschema*.c, jsonnum.c): the messages of every
 * keyword family, what registration refuses and the pointer it names,
 * the evaluation bound, the step budget and the interrupt hook, uniqueItems
 * (against wfe_json_equal), the cached compile, exact numbers and the
 * parser's big integers.  Conformance to the standard is test_jsonschema_suite.c.
 *
 * A standalone TAP program, run under ASan/UBSan.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include "core/lang/compile.h"
#include "core/jsonschema/jsonnum.h"
#include "core/jsonschema/jsonschema.h"
#include "tap.h"


/* Parse JSON the test wrote (exit on a test bug). */
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

/* Validate; want the exact message (NULL: valid). */
static void
check(const char *schema, const char *value, const char *want)
{
	json_object *s = J(schema),
			   *v = J(value);
	char		msg[512];
	int			rc = wfe_schema_validate(s, v, msg, sizeof(msg));
	int			good = want ? (rc == WFE_SCHEMA_VIOLATION && strcmp(msg, want) == 0) :
		rc == WFE_SCHEMA_VALID;

	ok(good, "%s on %s: %s", schema, value, want ? want : "valid");
	if (!good)
		printf("#   rc %d, got: %s\n", rc, msg);
	json_object_put(s);
	json_object_put(v);
}

/* Compile a schema that must be refused: kind, pointer and a message word. */
static void
refused(const char *schema, wfe_jschema_errkind kind, const char *pointer, const char *needle)
{
	json_object *s = J(schema);
	wfe_jschema_error err;
	wfe_jschema *c = wfe_jschema_compile(s, &err);
	int			good = c == NULL && err.kind == kind && strcmp(err.pointer, pointer) == 0 &&
		strstr(err.message, needle) != NULL;

	ok(good, "refused %s at \"%s\": %s", schema, pointer, needle);
	if (!good)
		printf("#   kind %d, pointer \"%s\", message: %s\n", err.kind, err.pointer, err.message);
	wfe_jschema_free(c);
	json_object_put(s);
}

/* Each keyword family names the instance path and the keyword. */
static void
test_messages(void)
{
	check("{\"minimum\": 5}", "4", "$: 4 is less than the minimum 5 (schema #/minimum)");
	check("{\"exclusiveMaximum\": 0.5}", "0.5", "$: 0.5 is not less than 0.5 (schema #/exclusiveMaximum)");
	check("{\"multipleOf\": 0.01}", "1.005", "$: 1.005 is not a multiple of 0.01 (schema #/multipleOf)");
	check("{\"maximum\": 1E+30}", "1E+31",
		  "$: 1e31 is greater than the maximum 1000000000000000000000000000000 (schema #/maximum)");
	check("{\"maxLength\": 2}", "\"h\\u00e9llo\"",
		  "$: string of 5 characters is longer than 2 (schema #/maxLength)");
	check("{\"pattern\": \"^[a-z]+$\"}", "\"A\"", "$: \"A\" does not match the pattern \"^[a-z]+$\" (schema #/pattern)");
	check("{\"const\": {\"a\": 1}}", "{\"a\": 2}", "$: {\"a\":2} is not {\"a\":1} (schema #/const)");
	check("{\"properties\": {\"a\": false}}", "{\"a\": 1}",
		  "$.a: no value is allowed here (the schema is false) (schema #/properties/a)");
	check("{\"additionalProperties\": false, \"properties\": {\"a\": {}}}", "{\"a\": 1, \"b\": 2}",
		  "$: property \"b\" is not allowed (schema #/additionalProperties)");
	check("{\"patternProperties\": {\"^n_\": {\"type\": \"integer\"}}}", "{\"n_x\": \"1\"}",
		  "$.n_x: expected integer, got string (schema #/patternProperties/^n_/type)");
	check("{\"propertyNames\": {\"maxLength\": 3}}", "{\"long\": 1}",
		  "$: property name \"long\" does not satisfy propertyNames (schema #/propertyNames)");
	check("{\"minProperties\": 2}", "{\"a\": 1}", "$: object has 1 properties, fewer than 2 (schema #/minProperties)");
	check("{\"dependentRequired\": {\"a\": [\"b\"]}}", "{\"a\": 1}",
		  "$: property \"a\" requires property \"b\" (schema #/dependentRequired)");
	check("{\"$schema\": \"http://json-schema.org/draft-07/schema#\", \"dependencies\": {\"a\": [\"b\"]}}",
		  "{\"a\": 1}", "$: property \"a\" requires property \"b\" (schema #/dependencies)");
	check("{\"maxItems\": 1}", "[1, 2]", "$: array has 2 items, more than 1 (schema #/maxItems)");
	check("{\"uniqueItems\": true}", "[1, 2, 1.0]", "$: items 0 and 2 are equal (schema #/uniqueItems)");
	check("{\"prefixItems\": [{\"type\": \"string\"}], \"items\": false}", "[\"a\", 1]",
		  "$: array has 2 items; at most 1 allowed (schema #/items)");
	check("{\"contains\": {\"type\": \"string\"}}", "[1]", "$: no item satisfies contains (schema #/contains)");
	check("{\"anyOf\": [{\"type\": \"string\"}, {\"type\": \"null\"}]}", "1",
		  "$: matches none of the 2 schemas of anyOf (schema #/anyOf)");
	check("{\"oneOf\": [{\"minimum\": 0}, {\"maximum\": 10}]}", "5",
		  "$: matches 2 schemas of oneOf (0 and 1), not exactly one (schema #/oneOf)");
	check("{\"not\": {\"type\": \"null\"}}", "null", "$: matches the schema of not (schema #/not)");
	check("{\"if\": {\"required\": [\"a\"]}, \"then\": {\"required\": [\"b\"]}}", "{\"a\": 1}",
		  "$: missing required property \"b\" (schema #/then/required)");
	check("{\"$defs\": {\"pos\": {\"minimum\": 1}}, \"items\": {\"$ref\": \"#/$defs/pos\"}}", "[1, 0]",
		  "$[1]: 0 is less than the minimum 1 (schema #/$defs/pos/minimum)");
	check("{\"unevaluatedProperties\": false, \"allOf\": [{\"properties\": {\"a\": true}}]}", "{\"a\": 1, \"b\": 2}",
		  "$: property \"b\" is not allowed (schema #/unevaluatedProperties)");
	check("{\"prefixItems\": [true], \"unevaluatedItems\": false}", "[1, 2]",
		  "$: item 1 is not allowed (schema #/unevaluatedItems)");
	check("false", "1", "$: no value is allowed here (the schema is false) (schema #)");
	check("true", "{\"x\": [1]}", NULL);
}

/* What registration refuses, and the JSON pointer it names. */
static void
test_refusals(void)
{
	refused("{\"properties\": {\"a\": {\"minimun\": 0}}}", WFE_JSE_UNKNOWN_KEYWORD, "/properties/a/minimun",
			"unsupported JSON Schema keyword \"minimun\"");
	refused("{\"items\": {\"$ref\": \"other.json#/x\"}}", WFE_JSE_REMOTE_REF, "/items/$ref",
			"remote reference \"other.json#/x\"");
	refused("{\"$id\": \"https://example.com/s.json\", \"$ref\": \"https://example.com/t.json\"}",
			WFE_JSE_REMOTE_REF, "/$ref", "remote reference");
	refused("{\"$ref\": \"#/$defs/missing\"}", WFE_JSE_VALUE, "/$ref", "names nothing");
	refused("{\"$ref\": \"#nowhere\"}", WFE_JSE_VALUE, "/$ref", "names nothing");
	refused("{\"pattern\": \"(a)\\\\1\"}", WFE_JSE_PATTERN, "/pattern", "backreference");
	refused("{\"patternProperties\": {\"(?<=x)y\": {}}}", WFE_JSE_PATTERN, "/patternProperties/(?<=x)y",
			"lookbehind");
	refused("{\"$schema\": \"https://json-schema.org/draft/2019-09/schema\"}", WFE_JSE_DIALECT, "/$schema",
			"unsupported dialect");
	refused("{\"$defs\": {\"a\": {\"$schema\": \"http://json-schema.org/draft-07/schema#\"}}}", WFE_JSE_DIALECT,
			"/$defs/a/$schema", "may not change the dialect");
	refused("{\"additionalItems\": false}", WFE_JSE_UNKNOWN_KEYWORD, "/additionalItems", "prefixItems");
	refused("{\"items\": [{}]}", WFE_JSE_VALUE, "/items", "prefixItems");
	refused("{\"$id\": \"#frag\"}", WFE_JSE_VALUE, "/$id", "fragment");
	refused("{\"minLength\": 1.5}", WFE_JSE_VALUE, "/minLength", "non-negative integer");
	refused("{\"multipleOf\": -1}", WFE_JSE_VALUE, "/multipleOf", "greater than 0");
	refused("{\"allOf\": []}", WFE_JSE_VALUE, "/allOf", "non-empty array");
	refused("{\"dependentRequired\": {\"a\": \"b\"}}", WFE_JSE_VALUE, "/dependentRequired/a", "array");
	refused("{\"$defs\": {\"unused\": {\"type\": \"strin\"}}}", WFE_JSE_VALUE, "/$defs/unused/type", "\"type\"");
	refused("[]", WFE_JSE_VALUE, "", "a JSON object or a boolean");
	/* draft-07 knows neither $anchor nor prefixItems */
	refused("{\"$schema\": \"http://json-schema.org/draft-07/schema#\", \"prefixItems\": []}",
			WFE_JSE_UNKNOWN_KEYWORD, "/prefixItems", "prefixItems");
	/* draft-07 ignores the siblings of $ref, so they are not checked */
	check("{\"$schema\": \"http://json-schema.org/draft-07/schema#\", \"definitions\": {\"s\": {\"type\": \"string\"}},"
		  " \"properties\": {\"a\": {\"$ref\": \"#/definitions/s\", \"minimun\": 3, \"maxLength\": 1}}}",
		  "{\"a\": \"long\"}", NULL);
	/*
	 * An unknown keyword a "$ref" points into holds referenced subschemas
	 * (as "$defs" does): accepted.  One nothing refers to is still refused,
	 * and so is one only a reference of another resource ("$id") names.
	 */
	check("{\"x~y\": {\"type\": \"integer\"}, \"a/b\": {\"c\": {\"minimum\": 2}},"
		  " \"properties\": {\"t\": {\"$ref\": \"#/x~0y\"}, \"s\": {\"$ref\": \"#/a~1b/c\"}}}",
		  "{\"t\": 1, \"s\": 3}", NULL);
	check("{\"x~y\": {\"type\": \"integer\"}, \"properties\": {\"t\": {\"$ref\": \"#/x~0y\"}}}",
		  "{\"t\": \"1\"}", "$.t: expected integer, got string (schema #/x~0y/type)");
	check("{\"pct%\": {\"type\": \"integer\"}, \"properties\": {\"t\": {\"$ref\": \"#/pct%25\"}}}",
		  "{\"t\": 1}", NULL);
	refused("{\"held\": {\"type\": \"integer\"}, \"minimun\": 0, \"properties\": {\"t\": {\"$ref\": \"#/held\"}}}",
			WFE_JSE_UNKNOWN_KEYWORD, "/minimun", "unsupported JSON Schema keyword \"minimun\"");
	refused("{\"held\": {\"type\": \"integer\"}, \"$defs\": {\"r\": {\"$id\": \"https://example.com/r\","
			" \"held\": {}, \"$ref\": \"#/held\"}}}",
			WFE_JSE_UNKNOWN_KEYWORD, "/held", "unsupported JSON Schema keyword \"held\"");
}

/* A $ref cycle that never descends is bounded; deep values are answered. */
static void
test_bounds(void)
{
	json_object *s = J("{\"$defs\": {\"a\": {\"$ref\": \"#/$defs/b\"}, \"b\": {\"$ref\": \"#/$defs/a\"}},"
					   " \"$ref\": \"#/$defs/a\"}");
	json_object *v = J("1");
	char		msg[512];
	int			rc = wfe_schema_validate(s, v, msg, sizeof(msg));
	char	   *deep,
			   *dv;
	int			depth = WFE_JSON_MAX_DEPTH - 2;

	ok(rc == WFE_SCHEMA_VIOLATION && strstr(msg, "nested deeper than") != NULL,
	   "a $ref cycle ends as a violation: %s", msg);
	json_object_put(s);
	json_object_put(v);

	/* a recursive schema over a value nested almost as deep as the parser allows */
	s = J("{\"type\": \"array\", \"items\": {\"$ref\": \"#\"}}");
	deep = malloc((size_t) depth * 2 + 8);
	dv = deep;
	for (int i = 0; i < depth; i++)
		*dv++ = '[';
	for (int i = 0; i < depth; i++)
		*dv++ = ']';
	*dv = '\0';
	v = J(deep);
	rc = wfe_schema_validate(s, v, msg, sizeof(msg));
	ok(rc == WFE_SCHEMA_VALID, "%d nested arrays against a recursive schema: valid (%s)", depth, msg);
	json_object_put(v);
	deep[depth - 1] = '1';		/* the innermost [] becomes 1: [[...1]...] */
	memmove(deep + depth, deep + depth + 1, strlen(deep + depth + 1) + 1);
	v = J(deep);
	rc = wfe_schema_validate(s, v, msg, sizeof(msg));
	ok(rc == WFE_SCHEMA_VIOLATION && strstr(msg, "expected array, got integer") != NULL,
	   "and a violation at the bottom is named: %.60s...", msg);
	json_object_put(v);
	json_object_put(s);
	free(deep);

	/* the regex budget bounds pattern work on a long string */
	{
		size_t		n = 200000;
		char	   *text = malloc(n + 3);
		json_object *str;

		memset(text + 1, 'a', n);
		text[0] = '"';
		text[n + 1] = '"';
		text[n + 2] = '\0';
		s = J("{\"pattern\": \"^(a|a?)+(a|a?)+(a|a?)+(a|a?)+(a|a?)+b$\"}");
		str = J(text);
		rc = wfe_schema_validate(s, str, msg, sizeof(msg));
		ok(rc == WFE_SCHEMA_VIOLATION, "a costly pattern over 200000 characters ends: %s", msg);
		json_object_put(s);
		json_object_put(str);
		free(text);
	}
}

/* A JSON array text of n items, item i spelt by fmt with i (caller frees). */
static char *
array_text(size_t n, const char *fmt)
{
	char	   *text = malloc(n * 32 + 4);
	char	   *p = text;

	*p++ = '[';
	for (size_t i = 0; i < n; i++)
	{
		if (i > 0)
			p += sprintf(p, ", ");
		p += sprintf(p, fmt, (long) i);
	}
	*p++ = ']';
	*p = '\0';
	return text;
}

/* Validate schema text against value text: rc, and the message in msg. */
static int
run(const char *schema, const char *value, char *msg, size_t msglen)
{
	json_object *s = J(schema),
			   *v = J(value);
	int			rc = wfe_schema_validate(s, v, msg, msglen);

	json_object_put(s);
	json_object_put(v);
	return rc;
}

/*
 * uniqueItems sorts equality keys: its answer must be wfe_json_equal's for
 * every pair, and it must name the pair a pairwise scan names.
 */
static void
test_unique(void)
{
	static const char *const values[] = {
		"null", "true", "false", "0", "-0", "0.0", "-0.0", "1", "1.0", "1e0", "10", "1e1",
		"100", "1e2", "1E+2", "0.1", "0.10", "1e-1", "-1", "-1.0", "2.5", "25e-1",
		"9223372036854775807", "9223372036854775808", "18446744073709551616",
		"18446744073709551617", "1E+400", "1e400", "\"\"", "\"1\"", "\"a\"", "\"a \"",
		"\"\\u00e9\"", "\"\\u00c3\\u00a9\"", "[]", "[1]", "[1.0]", "[1, 2]", "[2, 1]", "[[1]]",
		"{}", "{\"a\": 1}", "{\"a\": 1.0}", "{\"b\": 1}", "{\"a\": 1, \"b\": 2}",
		"{\"b\": 2, \"a\": 1}", "{\"a\": {\"x\": [1, {\"y\": null}]}}",
		"{\"a\": {\"x\": [1.0, {\"y\": null}]}}", "{\"a\": [1]}", "{\"a\": \"1\"}",
		"{\"\": 1}", "{\"s1:\": 1}", "[\"s1:\", 1]"
	};
	size_t		nv = sizeof(values) / sizeof(values[0]);
	int			agree = 1;
	char		msg[512];
	int			rc;

	for (size_t a = 0; a < nv; a++)
		for (size_t b = 0; b < nv; b++)
		{
			json_object *x = J(values[a]),
					   *y = J(values[b]);
			json_object *arr = json_object_new_array();
			json_object *s = J("{\"uniqueItems\": true}");
			int			eq = wfe_json_equal(x, y);

			json_object_array_add(arr, x);
			json_object_array_add(arr, y);
			rc = wfe_schema_validate(s, arr, msg, sizeof(msg));
			if ((rc == WFE_SCHEMA_VALID) != !eq ||
				(eq && (rc != WFE_SCHEMA_VIOLATION ||
						strcmp(msg, "$: items 0 and 1 are equal (schema #/uniqueItems)") != 0)))
			{
				agree = 0;
				printf("#   %s vs %s: equal %d, uniqueItems rc %d: %s\n",
					   values[a], values[b], eq, rc, msg);
			}
			json_object_put(arr);
			json_object_put(s);
		}
	ok(agree, "uniqueItems agrees with wfe_json_equal on all %zu pairs of %zu values", nv * nv, nv);
	{
		json_object *one = J("1"),
				   *one0 = J("1.0"),
				   *big1 = J("18446744073709551617"),
				   *big0 = J("18446744073709551616");

		ok(wfe_json_equal(one, one0) && !wfe_json_equal(big1, big0),
		   "(1 equals 1.0; 2^64+1 does not equal 2^64)");
		json_object_put(one);
		json_object_put(one0);
		json_object_put(big1);
		json_object_put(big0);
	}

	check("{\"uniqueItems\": true}", "[1, 1.0]", "$: items 0 and 1 are equal (schema #/uniqueItems)");
	check("{\"uniqueItems\": true}", "[{\"a\": 1, \"b\": [2]}, {\"b\": [2.0], \"a\": 1}]",
		  "$: items 0 and 1 are equal (schema #/uniqueItems)");
	check("{\"uniqueItems\": true}", "[{\"a\": 1}, {\"a\": 1, \"b\": 1}, [\"a\", 1], \"a1\"]", NULL);
	/* the pair a pairwise scan finds first: the first item equal to an earlier one */
	check("{\"uniqueItems\": true}", "[3, 1, 2, 1, 3, 2]", "$: items 1 and 3 are equal (schema #/uniqueItems)");
	check("{\"uniqueItems\": true}", "[5, 7, 7, 5, 5]", "$: items 1 and 2 are equal (schema #/uniqueItems)");
	check("{\"uniqueItems\": false}", "[1, 1]", NULL);
	check("{\"items\": {\"uniqueItems\": true}}", "[[1, 2], [true, 1, \"x\", 1]]",
		  "$[1]: items 1 and 3 are equal (schema #/items/uniqueItems)");

	/* 40,000 items: pairwise that was 800 million comparisons */
	{
		char	   *text = array_text(40000, "{\"id\": %ld, \"tag\": \"t\"}");

		rc = run("{\"uniqueItems\": true}", text, msg, sizeof(msg));
		ok(rc == WFE_SCHEMA_VALID, "40000 distinct objects are unique (%s)", msg);
		strcpy(text + strlen(text) - 1, ", {\"tag\": \"t\", \"id\": 39998.0}]");
		rc = run("{\"uniqueItems\": true}", text, msg, sizeof(msg));
		ok(rc == WFE_SCHEMA_VIOLATION && strstr(msg, "items 39998 and 40000 are equal") != NULL,
		   "one more equal to item 39998 is found: %s", msg);
		free(text);
	}
}

static int	hook_calls;
static int	hook_stop_after;

/* An interrupt hook that says "stop" on its hook_stop_after-th call. */
static int
test_hook(void)
{
	return ++hook_calls >= hook_stop_after;
}

/* The step budget bounds all work, and the interrupt hook can stop it. */
static void
test_budget(void)
{
	char		msg[512];
	int			rc;
	char	   *text = array_text(1000, "%ld");
	char	   *bomb,
			   *p;
	int			levels = 28;

	/* one step for the array, one per item: 1001 */
	wfe_jschema_set_step_budget(1001);
	rc = run("{\"items\": {\"type\": \"integer\"}}", text, msg, sizeof(msg));
	ok(rc == WFE_SCHEMA_VALID, "1000 items in a budget of 1001 steps: valid (%s)", msg);
	wfe_jschema_set_step_budget(1000);
	rc = run("{\"items\": {\"type\": \"integer\"}}", text, msg, sizeof(msg));
	ok(rc == WFE_SCHEMA_BUDGET &&
	   strcmp(msg, "$[999]: validation needs more than its budget of 1000 steps "
			  "(wfe.schema_step_budget) (schema #/items)") == 0,
	   "in 1000 steps: WFE_SCHEMA_BUDGET, where it stopped: %s", msg);
	rc = run("{\"uniqueItems\": true}", text, msg, sizeof(msg));
	ok(rc == WFE_SCHEMA_BUDGET, "uniqueItems' keys and sort are paid for too: %s", msg);
	{
		/* enum compares node by node: 0..998 then 999 against 0..998 then -1 */
		char	   *other = array_text(1000, "%ld");
		char	   *schema = malloc(strlen(other) + 32);

		strcpy(strrchr(other, ' ') + 1, "-1]");
		sprintf(schema, "{\"enum\": [%s]}", other);
		rc = run(schema, text, msg, sizeof(msg));
		ok(rc == WFE_SCHEMA_BUDGET, "comparing for enum is paid for too: %s", msg);
		wfe_jschema_set_step_budget(WFE_SCHEMA_STEP_BUDGET);
		rc = run(schema, text, msg, sizeof(msg));
		ok(rc == WFE_SCHEMA_VIOLATION && strstr(msg, "is not one of") != NULL,
		   "and in the default budget it is an answer: %.60s", msg);
		free(schema);
		free(other);
	}
	free(text);

	/*
	 * 28 levels of anyOf over two $refs to the next level, ending in a type
	 * that fails: 2^28 paths.  The default budget ends it, even inside the
	 * quiet branches of anyOf, and says so.
	 */
	bomb = malloc(200 * (size_t) levels + 100);
	p = bomb + sprintf(bomb, "{\"$defs\": {");
	for (int i = 0; i < levels; i++)
		p += sprintf(p, "\"d%d\": {\"anyOf\": [{\"$ref\": \"#/$defs/d%d\"}, {\"$ref\": \"#/$defs/d%d\"}]}, ",
					 i, i + 1, i + 1);
	sprintf(p, "\"d%d\": {\"type\": \"string\"}}, \"$ref\": \"#/$defs/d0\"}", levels);
	rc = run(bomb, "1", msg, sizeof(msg));
	ok(rc == WFE_SCHEMA_BUDGET && strstr(msg, "budget of 10000000 steps") != NULL,
	   "28 nested anyOf of two $refs: refused by the budget: %s", msg);

	/* the hook is asked every few thousand steps; "stop" is WFE_SCHEMA_INTERRUPTED */
	hook_calls = 0;
	hook_stop_after = 3;
	wfe_jschema_set_interrupt_check(test_hook);
	rc = run(bomb, "1", msg, sizeof(msg));
	ok(rc == WFE_SCHEMA_INTERRUPTED && hook_calls == 3 &&
	   strstr(msg, "validation was interrupted") != NULL,
	   "the interrupt hook stops it on its third call: %s", msg);
	hook_calls = 0;
	hook_stop_after = 1000000;
	rc = run("{\"items\": {\"type\": \"integer\"}}", "[1, 2, 3]", msg, sizeof(msg));
	ok(rc == WFE_SCHEMA_VALID && hook_calls == 0, "a small validation never asks (%d calls)", hook_calls);
	wfe_jschema_set_interrupt_check(NULL);
	free(bomb);
}

/* The compiled form is cached on the schema object and reused. */
static void
test_cache(void)
{
	json_object *s = J("{\"type\": \"integer\"}");
	json_object *a = J("1"),
			   *b = J("\"x\"");
	char		msg[256];

	ok(wfe_schema_validate(s, a, msg, sizeof(msg)) == WFE_SCHEMA_VALID, "first use compiles");
	ok(json_object_get_userdata(s) != NULL, "the compiled form is kept on the schema");
	ok(wfe_schema_validate(s, b, msg, sizeof(msg)) == WFE_SCHEMA_VIOLATION, "second use reuses it");
	ok(wfe_schema_validate_at(s, b, "input", msg, sizeof(msg)) == WFE_SCHEMA_VIOLATION &&
	   strncmp(msg, "input: ", 7) == 0, "the root of the path is the caller's: %s", msg);
	json_object_put(s);			/* frees the compiled form too (ASan checks) */
	json_object_put(a);
	json_object_put(b);
}

/* Exact numbers: parse, compare, multiple, format; the parser keeps big integers. */
static void
test_numbers(void)
{
	wfe_jnum	x,
				y;
	char		buf[64];
	json_object *big = J("[18446744073709551617, -9223372036854775809, 18446744073709551615, 1.0]");
	json_object *n0 = json_object_array_get_idx(big, 0);

	ok(json_object_is_type(n0, json_type_double) &&
	   strcmp(json_object_to_json_string_ext(n0, JSON_C_TO_STRING_PLAIN), "18446744073709551617e0") == 0,
	   "an integer beyond uint64 keeps its digits through the parser");
	ok(wfe_json_is_integral(n0) && strcmp(wfe_json_type_name(n0), "integer") == 0, "and is an integer");
	ok(json_object_is_type(json_object_array_get_idx(big, 2), json_type_int),
	   "UINT64_MAX stays a json-c integer");
	ok(strcmp(wfe_json_type_name(json_object_array_get_idx(big, 3)), "integer") == 0, "1.0 is an integer");
	ok(!wfe_json_equal(n0, json_object_array_get_idx(big, 2)), "2^64+1 differs from 2^64-1");
	json_object_put(big);
	{
		json_object *str = J("[\"18446744073709551617 in a string\"]");

		ok(json_object_is_type(json_object_array_get_idx(str, 0), json_type_string) &&
		   strcmp(json_object_get_string(json_object_array_get_idx(str, 0)), "18446744073709551617 in a string") == 0,
		   "digits inside strings are left alone");
		json_object_put(str);
	}

	wfe_jnum_parse(&x, "0.10", 4);
	wfe_jnum_parse(&y, "1e-1", 4);
	ok(wfe_jnum_cmp(&x, &y) == 0, "0.10 == 1e-1");
	wfe_jnum_format(&x, buf, sizeof(buf));
	ok(strcmp(buf, "0.1") == 0, "0.10 prints as 0.1 (%s)", buf);
	wfe_jnum_free(&x);
	wfe_jnum_free(&y);
	wfe_jnum_parse(&x, "-123.4500e2", 11);
	wfe_jnum_format(&x, buf, sizeof(buf));
	ok(strcmp(buf, "-12345") == 0 && wfe_jnum_is_integer(&x), "-123.4500e2 is the integer -12345 (%s)", buf);
	wfe_jnum_free(&x);
	wfe_jnum_parse(&x, "1e400", 5);
	wfe_jnum_format(&x, buf, sizeof(buf));
	ok(strcmp(buf, "1e+400") == 0, "1e400 prints as 1e+400 (%s)", buf);
	wfe_jnum_parse(&y, "3", 1);
	ok(!wfe_jnum_is_multiple(&x, &y), "1e400 is not a multiple of 3");
	wfe_jnum_free(&y);
	wfe_jnum_parse(&y, "2", 1);
	ok(wfe_jnum_is_multiple(&x, &y), "1e400 is a multiple of 2");
	wfe_jnum_free(&x);
	wfe_jnum_free(&y);
	wfe_jnum_parse(&x, "123456789012345678901234567890123456789012345678901234567890", 60);
	wfe_jnum_parse(&y, "1234567890123456789012345678901", 31);
	ok(!wfe_jnum_is_multiple(&x, &y), "a 60-digit number by a 31-digit one (long division)");
	wfe_jnum_free(&y);
	wfe_jnum_parse(&y, "10", 2);
	ok(wfe_jnum_is_multiple(&x, &y), "a 60-digit number ending in 0 is a multiple of 10");
	wfe_jnum_free(&x);
	wfe_jnum_free(&y);
	ok(wfe_jnum_parse(&x, "1.", 2) < 0 && wfe_jnum_parse(&y, "e5", 2) < 0, "malformed number text is refused");
}

/* "format": an annotation by default, asserted when turned on. */
static void
test_formats(void)
{
	static const struct
	{
		const char *format;
		const char *good;
		const char *bad;
	}			cases[] = {
		{"date-time", "\"2026-12-01T12:00:00.5+01:00\"", "\"2026-12-01 12:00:00Z\""},
		{"date-time", "\"2024-02-29T00:00:00Z\"", "\"2023-02-29T00:00:00Z\""},
		{"date", "\"2026-12-31\"", "\"2026-13-01\""},
		{"time", "\"23:59:60Z\"", "\"24:00:00Z\""},
		{"duration", "\"P1Y2M3DT4H5M6S\"", "\"PT\""},
		{"duration", "\"P4W\"", "\"P1S\""},
		{"email", "\"ann.b+x@example.org\"", "\"ann..b@example.org\""},
		{"hostname", "\"a-b.example.org\"", "\"-a.example.org\""},
		{"ipv4", "\"192.168.0.1\"", "\"192.168.0.01\""},
		{"ipv4", "\"255.255.255.255\"", "\"256.1.1.1\""},
		{"ipv6", "\"::ffff:192.168.0.1\"", "\"1:::2\""},
		{"uuid", "\"123e4567-e89b-12d3-a456-426614174000\"", "\"123e4567e89b12d3a456426614174000\""},
		{"uri", "\"https://example.org/a?b=c#d\"", "\"//example.org/a\""},
		{"uri-reference", "\"../a%20b\"", "\"a b\""},
		{"json-pointer", "\"/a~1b/0\"", "\"/a~2\""},
		{"regex", "\"^[a-z]+$\"", "\"(a)\\\\1\""},
	};
	char		schema[128],
				want[256];

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
	{
		snprintf(schema, sizeof(schema), "{\"format\": \"%s\"}", cases[i].format);
		check(schema, cases[i].bad, NULL);	/* off: an annotation */
	}
	wfe_jschema_set_format_assertion(1);
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
	{
		snprintf(schema, sizeof(schema), "{\"format\": \"%s\"}", cases[i].format);
		check(schema, cases[i].good, NULL);
		snprintf(want, sizeof(want), "$: %s is not a valid %s (schema #/format)", cases[i].bad, cases[i].format);
		check(schema, cases[i].bad, want);
	}
	check("{\"format\": \"email\"}", "7", NULL);	/* only strings */
	check("{\"format\": \"iri\"}", "\"not checked\"", NULL);	/* unknown formats stay annotations */
	wfe_jschema_set_format_assertion(0);
}

int
main(void)
{
	test_formats();
	test_messages();
	test_refusals();
	test_bounds();
	test_unique();
	test_budget();
	test_cache();
	test_numbers();
	return tap_done();
}
