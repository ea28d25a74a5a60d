/*
 * test_expr.c — unit tests of the CEL-subset expression language and the
 * `${...}` reference paths (src/core/expr*.c).
 *
 * A standalone TAP program: prints "ok N - ..." / "not ok N - ..." and
 * "1..N", exits 1 if anything failed.  Meant to run under ASan/UBSan and
 * valgrind, so every path frees what it allocates.
 */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/expr/expr.h"
#include "tap.h"


/* Root document most evaluation tests run over. */
static const char *ROOT_JSON =
"{"
"  \"context\": {"
"    \"amount\": 15000, \"small\": 5, \"price\": 2.5, \"intf\": 1.0,"
"    \"name\": \"h\\u00e9llo\", \"empty\": \"\", \"key\": \"a\","
"    \"items\": [1, 2, 3], \"tags\": [\"a\", \"b\"],"
"    \"obj\": {\"a\": 1, \"b\": null, \"in\": true},"
"    \"flag\": true, \"off\": false, \"nothing\": null,"
"    \"max\": 9223372036854775807, \"min\": -9223372036854775808,"
"    \"huge\": 18446744073709551615,"
"    \"nested\": {\"list\": [{\"k\": \"v\"}]}"
"  },"
"  \"stages\": {"
"    \"cache-lookup\": {\"result\": {\"hit\": true}},"
"    \"miss\": {\"result\": {\"hit\": false}}"
"  },"
"  \"outputs\": {\"t1\": {\"v\": 1}},"
"  \"run\": {\"id\": \"r-1\", \"tenant\": \"acme\"}"
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

/* Parse JSON text for a test fixture (aborts on bad fixtures). */
static json_object *
parse_json(const char *text)
{
	enum json_tokener_error jerr;
	json_object *o = json_tokener_parse_verbose(text, &jerr);

	if (o == NULL && strcmp(text, "null") != 0)
	{
		fprintf(stderr, "bad JSON fixture: %s\n", text);
		exit(2);
	}
	return o;
}

/* Evaluate src over doc; expect a value equal (type-strict) to expected_json. */
static void
expect_value_in(json_object *doc, const char *src, const char *expected_json)
{
	wfe_expr_error err;
	wfe_expr   *e;
	json_object *result = NULL;
	json_object *expected = parse_json(expected_json);
	int			rc = -1;

	memset(&err, 0, sizeof(err));
	e = wfe_expr_parse(src, strlen(src), NULL, &err);
	if (e != NULL)
		rc = wfe_expr_eval(e, doc, NULL, &result, &err);
	ok(e != NULL && rc == 0 && json_object_equal(result, expected),
	   "%s => %s", src, expected_json);
	if (e == NULL || rc != 0)
		diag("error %s: %s", err.code ? err.code : "(none)", err.message);
	else if (!json_object_equal(result, expected))
		diag("got %s", json_object_to_json_string(result));
	json_object_put(result);
	json_object_put(expected);
	wfe_expr_free(e);
}

/* expect_value_in over the standard root document. */
static void
expect_value(const char *src, const char *expected_json)
{
	expect_value_in(root, src, expected_json);
}

/* True if the error has the code and its message contains `part`. */
static int
error_matches(const wfe_expr_error *err, const char *code, const char *part)
{
	return err->code != NULL && strcmp(err->code, code) == 0 &&
		(part == NULL || strstr(err->message, part) != NULL);
}

/* Expect wfe_expr_parse to fail with code and a message containing part. */
static void
expect_parse_error_n(const char *src, size_t len, const wfe_expr_limits *lim,
					 const char *code, const char *part, const char *label)
{
	wfe_expr_error err;
	wfe_expr   *e;

	memset(&err, 0, sizeof(err));
	e = wfe_expr_parse(src, len, lim, &err);
	ok(e == NULL && error_matches(&err, code, part),
	   "parse %s fails with %s%s%s", label, code, part ? ": " : "", part ? part : "");
	if (e != NULL)
		diag("parsed unexpectedly");
	else if (!error_matches(&err, code, part))
		diag("got %s: %s", err.code ? err.code : "(none)", err.message);
	wfe_expr_free(e);
}

static void
expect_parse_error(const char *src, const char *code, const char *part)
{
	expect_parse_error_n(src, strlen(src), NULL, code, part, src);
}

/* Expect parse to succeed and check (in form) to fail with code/part. */
static void
expect_check_error(const char *src, wfe_expr_form form, const char *code,
				   const char *part)
{
	wfe_expr_error err;
	wfe_expr   *e;
	int			rc = 0;

	memset(&err, 0, sizeof(err));
	e = wfe_expr_parse(src, strlen(src), NULL, &err);
	if (e != NULL)
		rc = wfe_expr_check(e, form, NULL, NULL, &err);
	ok(e != NULL && rc == -1 && error_matches(&err, code, part),
	   "check %s (%s form) fails with %s%s%s", src,
	   form == WFE_FORM_STAGES ? "stages" : "tasks", code,
	   part ? ": " : "", part ? part : "");
	if (e == NULL || rc != -1 || !error_matches(&err, code, part))
		diag("parse %s, check rc %d, error %s: %s", e ? "ok" : "failed", rc,
			 err.code ? err.code : "(none)", err.message);
	wfe_expr_free(e);
}

/* Expect parse and check (in form) to succeed. */
static void
expect_check_ok(const char *src, wfe_expr_form form)
{
	wfe_expr_error err;
	wfe_expr   *e;
	int			rc = -1;

	memset(&err, 0, sizeof(err));
	e = wfe_expr_parse(src, strlen(src), NULL, &err);
	if (e != NULL)
		rc = wfe_expr_check(e, form, NULL, NULL, &err);
	ok(rc == 0, "check %s (%s form) is clean", src,
	   form == WFE_FORM_STAGES ? "stages" : "tasks");
	if (rc != 0)
		diag("%s: %s", err.code ? err.code : "(none)", err.message);
	wfe_expr_free(e);
}

/* Expect parse to succeed and eval over doc to fail with code/part. */
static void
expect_eval_error_in(json_object *doc, const char *src,
					 const wfe_expr_limits *lim, const char *part)
{
	wfe_expr_error err;
	wfe_expr   *e;
	json_object *result = NULL;
	int			rc = 0;

	memset(&err, 0, sizeof(err));
	e = wfe_expr_parse(src, strlen(src), lim, &err);
	if (e != NULL)
		rc = wfe_expr_eval(e, doc, lim, &result, &err);
	ok(e != NULL && rc == -1 && result == NULL &&
	   error_matches(&err, "expr.eval", part),
	   "eval %.70s fails with expr.eval: %s", src, part);
	if (e == NULL || rc != -1 || !error_matches(&err, "expr.eval", part))
		diag("parse %s, eval rc %d, error %s: %s", e ? "ok" : "failed", rc,
			 err.code ? err.code : "(none)", err.message);
	json_object_put(result);
	wfe_expr_free(e);
}

static void
expect_eval_error(const char *src, const char *part)
{
	expect_eval_error_in(root, src, NULL, part);
}

/* Parse and eval_bool over doc; returns 1/0/-1 (or -2 if parse failed). */
static int
eval_bool_in(json_object *doc, const char *src)
{
	wfe_expr_error err;
	wfe_expr   *e;
	int			rc;

	memset(&err, 0, sizeof(err));
	e = wfe_expr_parse(src, strlen(src), NULL, &err);
	if (e == NULL)
		return -2;
	rc = wfe_expr_eval_bool(e, doc, NULL, &err);
	wfe_expr_free(e);
	return rc;
}

/* A string of `n` copies of `unit` between prefix and suffix (malloc'd). */
static char *
repeat(const char *prefix, const char *unit, int n, const char *middle,
	   const char *unit2, const char *suffix)
{
	size_t		len = strlen(prefix) + strlen(middle) + strlen(suffix) +
		(size_t) n * (strlen(unit) + strlen(unit2)) + 1;
	char	   *s = malloc(len);
	char	   *p = s;
	int			i;

	/* append with a moving pointer: strcat would be quadratic */
	p = stpcpy(p, prefix);
	for (i = 0; i < n; i++)
		p = stpcpy(p, unit);
	p = stpcpy(p, middle);
	for (i = 0; i < n; i++)
		p = stpcpy(p, unit2);
	stpcpy(p, suffix);
	return s;
}

/* ------------------------------------------------------------------------ */

static void
test_literals(void)
{
	expect_value("null", "null");
	expect_value("true", "true");
	expect_value("false", "false");
	expect_value("42", "42");
	expect_value("-7", "-7");
	expect_value("3.5", "3.5");
	expect_value("1e3", "1000.0");
	expect_value("2.5e-1", "0.25");
	expect_value("0x1F", "31");
	expect_value("'single'", "\"single\"");
	expect_value("\"double\"", "\"double\"");
	expect_value("\"it's\"", "\"it's\"");
	expect_value("'say \"hi\"'", "\"say \\\"hi\\\"\"");
	expect_value("\"a\\tb\\n\\\\\"", "\"a\\tb\\n\\\\\"");
	expect_value("'\\'\\\"\\`\\?'", "\"'\\\"`?\"");
	expect_value("\"\\u00e9\" == \"\xc3\xa9\"", "true");
	expect_value("'\\x41\\101'", "\"AA\"");
	expect_value("\"\\U0001F600\"", "\"\xf0\x9f\x98\x80\"");
	expect_value("\"h\xc3\xa9llo\"", "\"h\\u00e9llo\"");
	expect_value("9223372036854775807", "9223372036854775807");
	expect_value("-9223372036854775808", "-9223372036854775808");
	expect_value("1 // a comment\n + 1", "2");
}

static void
test_arithmetic(void)
{
	expect_value("1 + 2 * 3", "7");
	expect_value("(1 + 2) * 3", "9");
	expect_value("2 + 3 * 4 - 1", "13");
	expect_value("10 - 4 - 3", "3");
	expect_value("100 / 10 / 5", "2");
	expect_value("7 / 2", "3");
	expect_value("-7 / 2", "-3");
	expect_value("7 % 3", "1");
	expect_value("-7 % 3", "-1");
	expect_value("2 * 3 % 4", "2");
	expect_value("7.0 / 2.0", "3.5");
	expect_value("1.0 + 0.5", "1.5");
	expect_value("0.5 * 4.0", "2.0");
	expect_value("double(3) - 0.5", "2.5");
	/* CEL has no mixed-kind arithmetic: convert explicitly */
	expect_eval_error("payload.amount + 0.5", "cannot be applied to int and double");
	expect_value("-2 * 3", "-6");
	expect_value("--5", "5");
	expect_value("-payload.price", "-2.5");
	expect_value("payload.amount * 2", "30000");
	expect_value("payload.amount / payload.small", "3000");
	expect_value("payload.huge + 1.0", "1.8446744073709552e19");
	expect_value("\"a\" + \"b\"", "\"ab\"");
	expect_value("payload.name + \"!\"", "\"h\\u00e9llo!\"");
	expect_value("payload.items + payload.tags", "[1, 2, 3, \"a\", \"b\"]");
	expect_value("size(payload.items + payload.items)", "6");
}

static void
test_comparisons(void)
{
	expect_value("1 < 2", "true");
	expect_value("2 <= 2", "true");
	expect_value("3 > 2.5", "true");
	expect_value("2 >= 3", "false");
	expect_value("2.5 < 3", "true");
	expect_value("\"abc\" < \"abd\"", "true");
	expect_value("\"b\" > \"abc\"", "true");
	expect_value("\"ab\" <= \"ab\"", "true");
	expect_value("\"\xc3\xa9\" > \"z\"", "true");
	/* exact int/double comparison: (double) INT64_MAX rounds to 2^63 */
	/* CEL converts the int to double against a double (cel-spec conformance) */
	expect_value("payload.max < 9223372036854775808.0", "false");
	expect_value("payload.max == 9223372036854775808.0", "true");
	expect_value("1 == 1.0", "true");
	expect_value("payload.intf == 1", "true");
	expect_value("1 != 1.5", "true");
	expect_value("payload.obj == payload.obj", "true");
	expect_value("payload.items != payload.tags", "true");
	expect_value("payload.items + payload.items != payload.items", "true");
}

static void
test_equality(void)
{
	json_object *doc = parse_json(
		"{\"context\": {\"a\": {\"x\": [1, 2.0, {\"y\": null}], \"z\": \"s\"},"
		" \"b\": {\"z\": \"s\", \"x\": [1.0, 2, {\"y\": null}]},"
		" \"c\": {\"z\": \"s\", \"x\": [1, 2, {\"y\": false}]},"
		" \"d\": {\"z\": \"s\"}}}");

	expect_value_in(doc, "context.a == context.b", "true");
	expect_value_in(doc, "context.a == context.c", "false");
	expect_value_in(doc, "context.a != context.d", "true");
	expect_value_in(doc, "context.a.x[2] == context.b.x[2]", "true");
	expect_value("\"a\" == 1", "false");
	expect_value("null == null", "true");
	expect_value("payload.nothing == null", "true");
	expect_value("payload.obj.b == null", "true");
	expect_value("payload.flag == true", "true");
	expect_value("payload.off != false", "false");
	expect_value("payload.items == payload.items", "true");
	expect_value("payload.name == \"h\xc3\xa9llo\"", "true");
	json_object_put(doc);
}

static void
test_logic(void)
{
	expect_value("true && false", "false");
	expect_value("true || false", "true");
	expect_value("!true", "false");
	expect_value("!!true", "true");
	expect_value("!false && false", "false");
	expect_value("true || false && false", "true");
	expect_value("false && 1 / 0 == 1", "false");
	expect_value("true || 1 / 0 == 1", "true");
	expect_value("true ? 1 : 2", "1");
	expect_value("false ? 1 : true ? 2 : 3", "2");
	expect_value("false ? 1 : 2 + 3", "5");
	expect_value("1 < 2 && 2 < 3 || false", "true");
	expect_value("1 < 2 == true", "true");
	expect_value("1 + 2 == 3 && \"a\" in payload.tags", "true");
	expect_value("payload.flag ? payload.name : payload.items", "\"h\\u00e9llo\"");
}

static void
test_access(void)
{
	expect_value("payload.obj[\"a\"]", "1");
	expect_value("payload.items[0]", "1");
	expect_value("payload.items[2]", "3");
	expect_value("payload.items[1.0]", "2");
	expect_value("payload.nested.list[0].k", "\"v\"");
	expect_value("payload[\"name\"]", "\"h\\u00e9llo\"");
	expect_value("payload.obj[payload.key]", "1");
	expect_value("context.amount", "15000");
	expect_value("run.id", "\"r-1\"");
	expect_value("outputs.t1.v", "1");
	expect_value("payload.obj.in", "true");
	expect_value("payload.nothing", "null");
	expect_value("stages.miss.result.hit", "false");
	expect_value("size(payload.obj)", "3");
	expect_value("size(payload.items)", "3");
	expect_value("size(payload.name)", "5");
	expect_value("size(\"h\xc3\xa9llo\")", "5");
	expect_value("size(\"\")", "0");
	expect_value("2 in payload.items", "true");
	expect_value("2.0 in payload.items", "true");
	expect_value("5 in payload.items", "false");
	expect_value("\"a\" in payload.obj", "true");
	expect_value("\"zz\" in payload.obj", "false");
	expect_value("has(payload.amount)", "true");
	expect_value("has(payload.zzz)", "false");
	expect_value("has(payload.obj.b)", "true");
	expect_value("has(payload[\"name\"])", "true");
	expect_value("has(payload.obj[\"zz\"])", "false");
	expect_value("has(payload.items[0])", "true");
	expect_value("has(payload.items[5])", "false");
	expect_value("has(stages.miss)", "true");
	expect_value("has(stages[\"nope\"])", "false");
}

/* The two expressions the examples ship, verbatim. */
static void
test_seed_expressions(void)
{
	const char *cache = "stages[\"cache-lookup\"].result.hit == true";
	const char *amount = "has(payload.amount) && payload.amount > 10000";
	json_object *miss = parse_json("{\"context\": {}, \"stages\": {\"cache-lookup\": {\"result\": {\"hit\": false}}}}");
	json_object *small = parse_json("{\"context\": {\"amount\": 500}}");
	json_object *none = parse_json("{\"context\": {\"currency\": \"EUR\"}}");
	json_object *dbl = parse_json("{\"context\": {\"amount\": 10000.5}}");

	expect_check_ok(cache, WFE_FORM_STAGES);
	expect_check_ok(amount, WFE_FORM_STAGES);
	expect_check_ok(amount, WFE_FORM_TASKS);
	ok(eval_bool_in(root, cache) == 1, "cache seed is true when hit");
	ok(eval_bool_in(miss, cache) == 0, "cache seed is false on a miss");
	ok(eval_bool_in(root, amount) == 1, "amount seed is true for 15000");
	ok(eval_bool_in(small, amount) == 0, "amount seed is false for 500");
	ok(eval_bool_in(none, amount) == 0, "amount seed is false when amount is missing (has() is false)");
	ok(eval_bool_in(dbl, amount) == 1, "amount seed is true for 10000.5 (double)");
	json_object_put(miss);
	json_object_put(small);
	json_object_put(none);
	json_object_put(dbl);
}

static void
test_eval_errors(void)
{
	json_object *no_run = parse_json("{\"context\": {}}");
	json_object *not_object = parse_json("[1]");

	expect_eval_error("payload.zzz", "no such field 'zzz' in payload.zzz");
	expect_eval_error("payload.obj.zzz == 1", "no such field 'zzz' in payload.obj.zzz");
	expect_eval_error("payload.obj[\"zz\"]", "no such key \"zz\"");
	expect_eval_error("payload.items[9]", "index out of range (list length 3)");
	expect_eval_error("payload.items[-1]", "index out of range");
	expect_eval_error("payload.items[\"a\"]", "list index must be an integer");
	expect_eval_error("payload.items[0.5]", "list index must be an integer");
	expect_eval_error("payload.obj[1]", "no such key 1");
	expect_eval_error("payload.obj[null]", "map key must be a string, int, uint or bool");
	expect_eval_error("payload.name.x", "cannot select field 'x' from string");
	expect_eval_error("payload.nothing.x", "cannot select field 'x' from null");
	expect_eval_error("payload.name[0]", "cannot index string");
	expect_eval_error("has(payload.nothing.x)", "cannot select field 'x' from null");
	expect_eval_error("has(payload.zzz.x)", "no such field 'zzz'");
	expect_eval_error("payload.max + 1", "integer overflow in '+'");
	expect_eval_error("payload.min - 1", "integer overflow in '-'");
	expect_eval_error("payload.max * 2", "integer overflow in '*'");
	expect_eval_error("payload.min * -1", "integer overflow in '*'");
	expect_eval_error("-payload.min", "integer overflow in '-'");
	expect_eval_error("payload.min / -1", "integer overflow in '/'");
	expect_eval_error("payload.min % -1", "integer overflow in '%'");
	expect_eval_error("1 / 0", "division by zero at offset 2");
	expect_eval_error("5 % 0", "modulo by zero");
	expect_eval_error("1.5 / 0", "cannot be applied to double and int");
	expect_value("payload.price / 0.0", "\"Infinity\"");
	expect_eval_error("payload.price % 2", "cannot be applied to double and int");
	expect_eval_error("payload.price % 2.0", "needs integers");
	expect_value("payload.huge * 1e300", "\"Infinity\"");
	expect_eval_error("payload.name < 1", "operator '<' at offset 13 cannot be applied to string and int");
	expect_value("payload.off < true", "true");
	expect_eval_error("payload.flag < 1", "cannot be applied to bool and int");
	expect_eval_error("payload.name - 1", "cannot be applied to string and int");
	expect_eval_error("payload.name + 1", "cannot be applied to string and int");
	expect_eval_error("payload.items + payload.obj", "cannot be applied to list and map");
	expect_eval_error("!payload.amount", "operand of '!' at offset 0 must be bool, not int");
	expect_eval_error("payload.amount && true", "left operand of '&&'");
	expect_eval_error("true && payload.amount", "right operand of '&&'");
	expect_eval_error("false || payload.name", "right operand of '||'");
	expect_eval_error("payload.amount ? 1 : 2", "condition of '?:'");
	expect_eval_error("size(payload.amount)", "size() at offset 0 needs a string, list or map, not int");
	expect_eval_error("1 in payload.amount", "right operand of 'in'");
	expect_value("1 in payload.obj", "false");
	expect_eval_error("-payload.name", "operand of unary '-'");
	expect_eval_error_in(no_run, "run.id", NULL, "root 'run' at offset 0 is not present");
	expect_eval_error_in(not_object, "payload.x", NULL, "not present");
	expect_eval_error_in(NULL, "payload.x", NULL, "not present");

	{
		wfe_expr_error err;
		wfe_expr   *e = wfe_expr_parse("1 + 1", 5, NULL, &err);

		ok(wfe_expr_eval_bool(e, root, NULL, &err) == -1 &&
		   error_matches(&err, "expr.eval", "must evaluate to bool, not int"),
		   "eval_bool of a non-bool result is expr.eval");
		wfe_expr_free(e);
	}
	json_object_put(no_run);
	json_object_put(not_object);
}

static void
test_step_budget(void)
{
	wfe_expr_limits lim = {0, 0, 7};
	json_object *big = json_object_new_object();
	json_object *arr = json_object_new_array();
	json_object *ctx = json_object_new_object();
	wfe_expr_error err;
	wfe_expr   *e;
	json_object *out = NULL;
	int			i;

	/* "1 + 1 + 1 + 1" is 7 nodes: 7 steps pass, 6 do not */
	e = wfe_expr_parse("1 + 1 + 1 + 1", 13, NULL, &err);
	ok(wfe_expr_eval(e, root, &lim, &out, &err) == 0 &&
	   json_object_get_int64(out) == 4, "7 nodes evaluate within 7 steps");
	json_object_put(out);
	out = NULL;
	lim.max_steps = 6;
	ok(wfe_expr_eval(e, root, &lim, &out, &err) == -1 && out == NULL &&
	   error_matches(&err, "expr.eval", "step budget of 6 exhausted"),
	   "7 nodes exhaust a budget of 6 steps");
	wfe_expr_free(e);

	/* large data: equality, `in` and concatenation are charged per element */
	for (i = 0; i < 20000; i++)
		json_object_array_add(arr, json_object_new_int(i));
	json_object_object_add(ctx, "big", arr);
	json_object_object_add(big, "context", ctx);
	expect_eval_error_in(big, "payload.big == payload.big", NULL, "step budget of 10000 exhausted");
	expect_eval_error_in(big, "-1 in payload.big", NULL, "step budget");
	expect_eval_error_in(big, "size(payload.big + payload.big) > 0", NULL, "step budget");
	expect_value_in(big, "5 in payload.big", "true");
	expect_value_in(big, "size(payload.big)", "20000");
	json_object_put(big);
}

static void
test_parse_errors(void)
{
	expect_parse_error("1 +", "expr.syntax", "unexpected end of expression at offset 3");
	expect_parse_error("(1 + 2", "expr.syntax", "expected ')'");
	expect_parse_error("1 + 2)", "expr.syntax", "unexpected ')' at offset 5");
	expect_parse_error("foo(1)", "expr.syntax", "unknown function 'foo' at offset 0");
	expect_parse_error("payload.sizes()", "expr.syntax", "unknown function 'sizes'");
	expect_parse_error("has(payload)", "expr.syntax", "has() argument at offset 4 must be a field selection");
	expect_parse_error("has(1 + 2)", "expr.syntax", "must be a field selection");
	expect_parse_error("size(1, 2)", "expr.syntax", "takes 1 argument, not 2");
	expect_parse_error("size()", "expr.syntax", "takes 1 argument, not 0");
	expect_parse_error("\"abc", "expr.syntax", "unterminated string literal at offset 0");
	expect_parse_error("'abc\ndef'", "expr.syntax", "unterminated string literal");
	expect_parse_error("'a\\qb'", "expr.syntax", "invalid escape sequence");
	expect_parse_error("\"\\u12\"", "expr.syntax", "invalid hex escape");
	expect_parse_error("\"\\uD800\"", "expr.syntax", "not a valid Unicode code point");
	expect_parse_error("\"\\U00110000\"", "expr.syntax", "not a valid Unicode code point");
	expect_parse_error("\"\\0\"", "expr.syntax", "invalid octal escape");
	expect_parse_error("\"\\000\"", "expr.syntax", "NUL character");
	expect_parse_error("\"\\x00\"", "expr.syntax", "NUL character");
	expect_parse_error("\"\xff\"", "expr.syntax", "invalid UTF-8 at offset 1");
	expect_parse_error("\"\xc0\xaf\"", "expr.syntax", "invalid UTF-8");	/* overlong */
	expect_parse_error("\"\xed\xa0\x80\"", "expr.syntax", "invalid UTF-8");	/* surrogate */
	expect_parse_error("\xc3\xa9 == 1", "expr.syntax", "unexpected character at offset 0");
	expect_parse_error_n("1 +\0 2", 6, NULL, "expr.syntax", "NUL byte at offset 3", "'1 +\\0 2'");
	expect_parse_error_n("'a\0b'", 5, NULL, "expr.syntax", "NUL byte in string literal", "'a\\0b' (string)");
	expect_parse_error("99999999999999999999", "expr.syntax", "integer literal out of range");
	expect_parse_error("9223372036854775808", "expr.syntax", "integer literal out of range");
	expect_parse_error("-9223372036854775809", "expr.syntax", "integer literal out of range");
	expect_parse_error("0x10000000000000000", "expr.syntax", "integer literal out of range");
	expect_parse_error("1e999", "expr.syntax", "double literal out of range");
	expect_parse_error("0x", "expr.syntax", "invalid hex literal");
	expect_parse_error("007", "expr.syntax", "leading zeros");
	expect_parse_error("1ux", "expr.syntax", "invalid number literal");
	expect_parse_error("1e+", "expr.syntax", "invalid exponent");
	expect_parse_error("a = 1", "expr.syntax", "'=' is not an operator");
	expect_parse_error("a & b", "expr.syntax", "'&' is not an operator");
	expect_parse_error("a | b", "expr.syntax", "'|' is not an operator");
	expect_parse_error("a.", "expr.syntax", "expected a field name after '.'");
	expect_parse_error("a.1", "expr.syntax", "unexpected number .1");
	expect_parse_error("", "expr.syntax", "empty expression");
	expect_parse_error("   // nothing", "expr.syntax", "empty expression");
	expect_parse_error("1 ? 2", "expr.syntax", "expected ':'");
	expect_parse_error("[1, 2", "expr.syntax", "expected ',' or ']'");
	expect_parse_error("a b", "expr.syntax", "unexpected identifier 'b' at offset 2");
	expect_parse_error("a.b[1", "expr.syntax", "expected ']'");
	expect_parse_error("1 + @", "expr.syntax", "unexpected character at offset 4");
	expect_parse_error("#", "expr.syntax", "unexpected character");
	expect_parse_error_n(NULL, 3, NULL, "expr.syntax", NULL, "NULL source");
}

static void
test_limits(void)
{
	wfe_expr_limits lim;
	wfe_expr_error err;
	wfe_expr   *e;
	char	   *s;
	clock_t		t0;

	/* source length */
	s = repeat("", " ", 5000, "1", "", "");
	expect_parse_error_n(s, strlen(s), NULL, "expr.too_large", "the limit is 4096", "5001 bytes");
	free(s);
	lim.max_bytes = 10;
	lim.max_nodes = 0;
	lim.max_steps = 0;
	expect_parse_error_n("1 + 2 + 3 + 4", 13, &lim, "expr.too_large", "13 bytes", "13 bytes with max_bytes 10");

	/* node budget */
	s = repeat("1", "+1", 200, "", "", "");
	expect_parse_error_n(s, strlen(s), NULL, "expr.too_large", "more than 256 nodes", "1+1+... (401 nodes)");
	free(s);
	lim.max_bytes = 0;
	lim.max_nodes = 3;
	e = wfe_expr_parse("1 + 2", 5, &lim, &err);
	ok(e != NULL, "3 nodes fit max_nodes 3");
	wfe_expr_free(e);
	expect_parse_error_n("1 + 2 + 3", 9, &lim, "expr.too_large", "more than 3 nodes", "5 nodes with max_nodes 3");

	/* nesting within the bound works */
	s = repeat("", "(", 60, "1", ")", "");
	expect_value(s, "1");
	free(s);
	s = repeat("", "!", 60, "true", "", "");
	expect_value(s, "true");
	free(s);

	/* depth bombs, with byte and node limits raised so nesting is what trips */
	lim.max_bytes = 1000000;
	lim.max_nodes = 1000000;
	lim.max_steps = 0;
	t0 = clock();
	s = repeat("", "(", 10000, "1", ")", "");
	expect_parse_error_n(s, strlen(s), &lim, "expr.too_large", "nested too deeply", "10000 nested parentheses");
	expect_parse_error_n(s, strlen(s), NULL, "expr.too_large", NULL, "10000 nested parentheses, default limits");
	free(s);
	s = repeat("", "(", 10000, "", "", "");
	expect_parse_error_n(s, strlen(s), &lim, "expr.too_large", "nested too deeply", "10000 unclosed parentheses");
	free(s);
	s = repeat("", "!", 10000, "true", "", "");
	expect_parse_error_n(s, strlen(s), &lim, "expr.too_large", "nested too deeply", "10000 '!'");
	free(s);
	s = repeat("", "-", 10000, "1", "", "");
	expect_parse_error_n(s, strlen(s), &lim, "expr.too_large", "nested too deeply", "10000 '-'");
	free(s);
	s = repeat("", "a[", 10000, "0", "]", "");
	expect_parse_error_n(s, strlen(s), &lim, "expr.too_large", "nested too deeply", "a[a[a[... 10000 deep");
	free(s);
	s = repeat("", "true ? 1 : ", 10000, "2", "", "");
	expect_parse_error_n(s, strlen(s), &lim, "expr.too_large", "nested too deeply", "10000 chained ?:");
	free(s);
	s = repeat("", "size(", 10000, "'x'", ")", "");
	expect_parse_error_n(s, strlen(s), &lim, "expr.too_large", "nested too deeply", "size(size(... 10000 deep");
	free(s);
	/* a long flat chain builds a tall tree without recursion: height bound */
	s = repeat("1", "+1", 2000, "", "", "");
	expect_parse_error_n(s, strlen(s), &lim, "expr.too_large", "tree height", "1+1+... 2000 terms with max_nodes raised");
	free(s);
	s = repeat("payload", ".a", 2000, "", "", "");
	expect_parse_error_n(s, strlen(s), &lim, "expr.too_large", "tree height", "payload.a.a... 2000 deep");
	free(s);
	ok((double) (clock() - t0) / CLOCKS_PER_SEC < 2.0, "depth bombs are rejected quickly");
}

static void
test_check(void)
{
	/* roots per form */
	expect_check_error("foo.bar == 1", WFE_FORM_STAGES, "expr.unknown_root",
					   "unknown root 'foo' at offset 0; expected context, payload, stages or run");
	expect_check_error("foo.bar == 1", WFE_FORM_TASKS, "expr.unknown_root",
					   "expected context, payload, outputs or run");
	expect_check_error("outputs.t1.v == 1", WFE_FORM_STAGES, "expr.unknown_root",
					   "root 'outputs' is not available in the stages form");
	expect_check_error("stages[\"x\"].result == 1", WFE_FORM_TASKS, "expr.unknown_root",
					   "root 'stages' is not available in the tasks form");
	expect_check_error("has(stages.x)", WFE_FORM_TASKS, "expr.unknown_root", "'stages'");
	expect_check_error("true && size + 1 > 0", WFE_FORM_STAGES, "expr.unknown_root",
					   "unknown root 'size' at offset 8");
	expect_check_ok("context.a == payload.b && run.id == \"x\"", WFE_FORM_STAGES);
	expect_check_ok("context.a == payload.b && run.id == \"x\"", WFE_FORM_TASKS);
	expect_check_ok("outputs.t1.v == 1", WFE_FORM_TASKS);
	expect_check_ok("stages.a.result.ok", WFE_FORM_STAGES);

	/* type errors provable from literals */
	expect_check_error("\"a\" - 1 > 0", WFE_FORM_STAGES, "expr.type",
					   "operator '-' at offset 4 cannot be applied to string and int");
	expect_check_error("!3", WFE_FORM_STAGES, "expr.type", "operand of '!' at offset 0 must be bool, not int");
	expect_check_error("-\"x\" == 1", WFE_FORM_STAGES, "expr.type", "operand of unary '-'");
	expect_check_error("size(true) > 0", WFE_FORM_STAGES, "expr.type", "size() at offset 0 has no overload for argument bool");
	expect_check_error("1 && x", WFE_FORM_STAGES, "expr.type", "left operand of '&&'");
	expect_check_error("payload.a || \"s\"", WFE_FORM_STAGES, "expr.type", "right operand of '||'");
	expect_check_error("\"a\" < 1", WFE_FORM_STAGES, "expr.type", "operator '<'");
	expect_check_error("null < 1", WFE_FORM_STAGES, "expr.type", "null_type and int");
	expect_check_error("1.y == 2", WFE_FORM_STAGES, "expr.type", "cannot select field 'y' from a int");
	expect_check_error("\"abc\".y", WFE_FORM_STAGES, "expr.type", "cannot select field 'y' from a string");
	expect_check_error("\"abc\"[0] == \"a\"", WFE_FORM_STAGES, "expr.type", "cannot index a string");
	expect_check_error("has(null.x)", WFE_FORM_STAGES, "expr.type", "from a null");
	expect_check_error("payload.x[null]", WFE_FORM_STAGES, "expr.type", "must be a string or an integer, not null_type");
	expect_check_error("1 in 2", WFE_FORM_STAGES, "expr.type", "right operand of 'in'");
	expect_check_error("\"a\" + 1 == \"a1\"", WFE_FORM_STAGES, "expr.type", "operator '+'");
	expect_check_error("1 + true == 2", WFE_FORM_STAGES, "expr.type", "int and bool");
	expect_check_error("1.5 % 2 == 1", WFE_FORM_STAGES, "expr.type", "needs integers");
	expect_check_error("size(payload.s) + \"a\" == \"b\"", WFE_FORM_STAGES, "expr.type", "int and string");
	expect_check_error("1 ? true : false", WFE_FORM_STAGES, "expr.type", "condition of '?:'");
	/* a when clause that can never be bool */
	expect_check_error("5", WFE_FORM_STAGES, "expr.type", "must be bool, but it is always int");
	expect_check_error("\"yes\"", WFE_FORM_STAGES, "expr.type", "always string");
	expect_check_error("null", WFE_FORM_STAGES, "expr.type", "always null");
	expect_check_error("1 + 2", WFE_FORM_STAGES, "expr.type", "always int");
	expect_check_error("payload.a ? 1 : 2", WFE_FORM_STAGES, "expr.type", "always int");
	/* stages must be named literally, so lineage can be checked */
	expect_check_error("size(stages) > 0", WFE_FORM_STAGES, "expr.type", "must be followed by a stage name");
	expect_check_error("stages[payload.s].result.ok", WFE_FORM_STAGES, "expr.type", "must be a string literal");
	/* fine: dynamic, or correctly typed */
	expect_check_ok("payload.x == 1", WFE_FORM_STAGES);
	expect_check_ok("payload.a + 1 > 2", WFE_FORM_STAGES);
	expect_check_ok("size(payload.s) > 0", WFE_FORM_STAGES);
	expect_check_ok("payload.a ? true : payload.b", WFE_FORM_STAGES);
	expect_check_ok("\"a\" + payload.s == \"ab\"", WFE_FORM_STAGES);
	expect_check_ok("1 == \"a\"", WFE_FORM_STAGES);
	expect_check_ok("payload.d % 2 == 0", WFE_FORM_STAGES);
	expect_check_error("payload", WFE_FORM_STAGES, "expr.type", "always map");
	expect_check_ok("true", WFE_FORM_STAGES);
	expect_check_ok("1 / 0 == 1", WFE_FORM_STAGES);
}

typedef struct stage_refs
{
	int			count;
	char		names[8][32];
	int			offsets[8];
} stage_refs;

/* Callback collecting stage references. */
static void
collect_stage_ref(void *arg, const char *stage, int offset)
{
	stage_refs *refs = arg;

	if (refs->count < 8)
	{
		snprintf(refs->names[refs->count], sizeof(refs->names[0]), "%s", stage);
		refs->offsets[refs->count] = offset;
	}
	refs->count++;
}

static void
test_stage_refs(void)
{
	const char *src = "stages[\"cache-lookup\"].result.hit == true && "
		"has(stages.prep.result) || stages['x'].result == 1";
	wfe_expr_error err;
	wfe_expr   *e = wfe_expr_parse(src, strlen(src), NULL, &err);
	stage_refs	refs;
	int			rc;

	memset(&refs, 0, sizeof(refs));
	rc = e ? wfe_expr_check(e, WFE_FORM_STAGES, collect_stage_ref, &refs, &err) : -2;
	ok(rc == 0 && refs.count == 3, "three stage references reported");
	ok(refs.count >= 1 && strcmp(refs.names[0], "cache-lookup") == 0 &&
	   refs.offsets[0] == (int) (strstr(src, "\"cache-lookup\"") - src),
	   "stages[\"cache-lookup\"] reported with the offset of its name");
	ok(refs.count >= 2 && strcmp(refs.names[1], "prep") == 0 &&
	   refs.offsets[1] == (int) (strstr(src, "prep") - src),
	   "stages.prep (inside has) reported with the offset of its name");
	ok(refs.count >= 3 && strcmp(refs.names[2], "x") == 0 &&
	   refs.offsets[2] == (int) (strstr(src, "'x'") - src),
	   "stages['x'] reported");
	wfe_expr_free(e);

	/* a NULL callback is fine */
	e = wfe_expr_parse(src, strlen(src), NULL, &err);
	ok(e != NULL && wfe_expr_check(e, WFE_FORM_STAGES, NULL, NULL, &err) == 0,
	   "check without a callback");
	wfe_expr_free(e);
}

/* Parse a path and compare to "root|seg|seg" with #N for indexes. */
static void
expect_path(const char *src, wfe_expr_form form, const char *expected)
{
	wfe_path	p;
	wfe_expr_error err;
	char		got[256] = "";
	int			rc = wfe_path_parse(src, strlen(src), form, &p, &err);
	int			i;

	if (rc == 0)
	{
		snprintf(got, sizeof(got), "%s", p.root);
		for (i = 0; i < p.nsegments; i++)
		{
			size_t		n = strlen(got);

			if (p.segments[i].is_index)
				snprintf(got + n, sizeof(got) - n, "|#%ld", p.segments[i].index);
			else
				snprintf(got + n, sizeof(got) - n, "|%s", p.segments[i].key);
		}
	}
	ok(rc == 0 && strcmp(got, expected) == 0, "path %s parses as %s", src, expected);
	if (rc != 0)
		diag("%s: %s", err.code, err.message);
	else if (strcmp(got, expected) != 0)
		diag("got %s", got);
	wfe_path_free(&p);
	wfe_path_free(&p);			/* twice is harmless */
}

static void
expect_path_error(const char *src, wfe_expr_form form, const char *code,
				  const char *part)
{
	wfe_path	p;
	wfe_expr_error err;
	int			rc;

	memset(&err, 0, sizeof(err));
	rc = wfe_path_parse(src, strlen(src), form, &p, &err);
	ok(rc == -1 && error_matches(&err, code, part) && p.root == NULL &&
	   p.segments == NULL, "path %s fails with %s%s%s", src, code,
	   part ? ": " : "", part ? part : "");
	if (rc != -1 || !error_matches(&err, code, part))
		diag("rc %d, %s: %s", rc, err.code ? err.code : "(none)", err.message);
	wfe_path_free(&p);
}

/* Resolve a path over root and compare the status (and value text). */
static void
expect_resolve(const char *src, wfe_expr_form form, wfe_path_status status,
			   const char *value_json)
{
	wfe_path	p;
	wfe_expr_error err;
	json_object *out = NULL;
	json_object *expected = value_json ? parse_json(value_json) : NULL;
	wfe_path_status got = WFE_PATH_MISSING;
	int			rc = wfe_path_parse(src, strlen(src), form, &p, &err);
	static const char *names[] = {"found", "null", "missing"};

	if (rc == 0)
		got = wfe_path_resolve(&p, root, &out);
	ok(rc == 0 && got == status &&
	   (status != WFE_PATH_FOUND || json_object_equal(out, expected)) &&
	   (status == WFE_PATH_FOUND || out == NULL),
	   "resolve %s is %s%s%s", src, names[status],
	   value_json ? " " : "", value_json ? value_json : "");
	json_object_put(expected);
	wfe_path_free(&p);
}

static void
test_paths(void)
{
	expect_path("context.modelId", WFE_FORM_STAGES, "context|modelId");
	expect_path("payload.amount", WFE_FORM_STAGES, "context|amount");
	expect_path("stages[\"cache-lookup\"].result.hit", WFE_FORM_STAGES, "stages|cache-lookup|result|hit");
	expect_path("outputs.restore_session.user_session", WFE_FORM_TASKS, "outputs|restore_session|user_session");
	expect_path("run.id", WFE_FORM_TASKS, "run|id");
	expect_path("context.items[0]", WFE_FORM_STAGES, "context|items|#0");
	expect_path(" context . a [ 'b c' ] [12] ", WFE_FORM_STAGES, "context|a|b c|#12");
	expect_path("context", WFE_FORM_STAGES, "context");
	expect_path("context.in.null", WFE_FORM_STAGES, "context|in|null");

	expect_path_error("context.a + 1", WFE_FORM_STAGES, "expr.syntax", "interpolation must be a reference path");
	expect_path_error("size(context.a)", WFE_FORM_STAGES, "expr.syntax", "interpolation must be a reference path");
	expect_path_error("context[payload.x]", WFE_FORM_STAGES, "expr.syntax", "interpolation must be a reference path");
	expect_path_error("context.items[-1]", WFE_FORM_STAGES, "expr.syntax", "unexpected '-' at offset 14");
	expect_path_error("context.", WFE_FORM_STAGES, "expr.syntax", "unexpected end of expression");
	expect_path_error("context[\"a\"", WFE_FORM_STAGES, "expr.syntax", "reference path");
	expect_path_error("\"abc\"", WFE_FORM_STAGES, "expr.syntax", "reference path");
	expect_path_error("!context.a", WFE_FORM_STAGES, "expr.syntax", "reference path");
	expect_path_error("context.a ? 1 : 2", WFE_FORM_STAGES, "expr.syntax", "reference path");
	expect_path_error("", WFE_FORM_STAGES, "expr.syntax", "empty interpolation");
	expect_path_error("context[\"a\\qb\"]", WFE_FORM_STAGES, "expr.syntax", "invalid escape");
	expect_path_error("context[99999999999999999999]", WFE_FORM_STAGES, "expr.syntax", "out of range");
	expect_path_error("context.\xff", WFE_FORM_STAGES, "expr.syntax", "invalid UTF-8");
	expect_path_error("foo.bar", WFE_FORM_STAGES, "expr.unknown_root", "unknown root 'foo'");
	expect_path_error("outputs.t.k", WFE_FORM_STAGES, "expr.unknown_root", "unavailable root 'outputs'");
	expect_path_error("stages.x.result", WFE_FORM_TASKS, "expr.unknown_root", "unavailable root 'stages'");

	expect_resolve("context.amount", WFE_FORM_STAGES, WFE_PATH_FOUND, "15000");
	expect_resolve("payload.amount", WFE_FORM_STAGES, WFE_PATH_FOUND, "15000");
	expect_resolve("payload.nested.list[0][\"k\"]", WFE_FORM_STAGES, WFE_PATH_FOUND, "\"v\"");
	expect_resolve("stages[\"cache-lookup\"].result.hit", WFE_FORM_STAGES, WFE_PATH_FOUND, "true");
	expect_resolve("run.id", WFE_FORM_STAGES, WFE_PATH_FOUND, "\"r-1\"");
	expect_resolve("outputs.t1", WFE_FORM_TASKS, WFE_PATH_FOUND, "{\"v\": 1}");
	expect_resolve("context.nothing", WFE_FORM_STAGES, WFE_PATH_NULL, NULL);
	expect_resolve("context.obj.b", WFE_FORM_STAGES, WFE_PATH_NULL, NULL);
	expect_resolve("context.zzz", WFE_FORM_STAGES, WFE_PATH_MISSING, NULL);
	expect_resolve("context.items[9]", WFE_FORM_STAGES, WFE_PATH_MISSING, NULL);
	expect_resolve("context.items.a", WFE_FORM_STAGES, WFE_PATH_MISSING, NULL);
	expect_resolve("context.obj[0]", WFE_FORM_STAGES, WFE_PATH_MISSING, NULL);
	expect_resolve("context.name.x", WFE_FORM_STAGES, WFE_PATH_MISSING, NULL);
	expect_resolve("context.nothing.x", WFE_FORM_STAGES, WFE_PATH_MISSING, NULL);
	expect_resolve("stages.nope.result", WFE_FORM_STAGES, WFE_PATH_MISSING, NULL);

	{
		wfe_path	p;
		wfe_expr_error err;
		json_object *out = (json_object *) &err;	/* must be overwritten */

		wfe_path_parse("context.a", 9, WFE_FORM_STAGES, &p, &err);
		ok(wfe_path_resolve(&p, NULL, &out) == WFE_PATH_MISSING && out == NULL,
		   "resolve against a NULL root is missing");
		wfe_path_free(&p);
	}
}

/* xorshift PRNG so the robustness run is reproducible. */
static uint32_t
next_random(uint32_t *state)
{
	uint32_t	x = *state;

	/* shifts done in 64 bits so -fsanitize=integer sees no lost bits */
	x ^= (uint32_t) ((uint64_t) x << 13);
	x ^= x >> 17;
	x ^= (uint32_t) ((uint64_t) x << 5);
	return *state = x;
}

/* Parse, check, evaluate and path-parse arbitrary bytes; nothing may crash. */
static void
exercise(const char *buf, size_t len)
{
	wfe_expr_error err;
	wfe_expr   *e;
	wfe_path	p;
	stage_refs	refs;
	json_object *out = NULL;

	e = wfe_expr_parse(buf, len, NULL, &err);
	if (e != NULL)
	{
		memset(&refs, 0, sizeof(refs));
		wfe_expr_check(e, WFE_FORM_STAGES, collect_stage_ref, &refs, &err);
		wfe_expr_check(e, WFE_FORM_TASKS, collect_stage_ref, &refs, &err);
		if (wfe_expr_eval(e, root, NULL, &out, &err) == 0)
			json_object_put(out);
		wfe_expr_eval_bool(e, root, NULL, &err);
		wfe_expr_free(e);
	}
	if (wfe_path_parse(buf, len, WFE_FORM_STAGES, &p, &err) == 0)
	{
		wfe_path_resolve(&p, root, &out);
		wfe_path_free(&p);
	}
}

static void
test_robustness(void)
{
	static const char *seeds[] = {
		"stages[\"cache-lookup\"].result.hit == true",
		"has(payload.amount) && payload.amount > 10000",
		"payload.items[1] + 2 * -payload.small % 3 >= size(payload.name) ? 'a\\u00e9' : \"b\"",
		"!(payload.flag || payload.off) && 2.5e3 in payload.items",
		"payload.obj[payload.key] != null && has(payload.nested.list[0].k)",
		"payload.max - payload.min / 0x7f == -9223372036854775808",
	};
	static const char *pieces[] = {
		"payload", "context", "stages", "run", "outputs", "foo", "has(", "size(",
		".", "[", "]", "(", ")", ",", "!", "-", "*", "/", "%", "+", "<", "<=",
		">", ">=", "==", "!=", "&&", "||", "?", ":", " in ", "1", "0", "2.5",
		"'s'", "\"\\u00e9\"", "null", "true", "false", "amount", "items", "obj",
		"name", "9223372036854775807", "\xff", "\0", "\"", "\\", "1e308",
	};
	uint32_t	state = 2463534242u;
	char		buf[512];
	int			iter;
	int			nseeds = (int) (sizeof(seeds) / sizeof(seeds[0]));
	int			npieces = (int) (sizeof(pieces) / sizeof(pieces[0]));

	/* byte mutations of valid expressions */
	for (iter = 0; iter < 20000; iter++)
	{
		const char *seed = seeds[next_random(&state) % (uint32_t) nseeds];
		size_t		len = strlen(seed);
		int			edits = 1 + (int) (next_random(&state) % 4);
		int			k;

		memcpy(buf, seed, len);
		for (k = 0; k < edits; k++)
		{
			size_t		at = next_random(&state) % (len + 1);

			switch (next_random(&state) % 3)
			{
				case 0:			/* overwrite */
					if (at < len)
						buf[at] = (char) next_random(&state);
					break;
				case 1:			/* delete */
					if (at < len)
					{
						memmove(buf + at, buf + at + 1, len - at - 1);
						len--;
					}
					break;
				default:		/* insert */
					if (len + 1 < sizeof(buf))
					{
						memmove(buf + at + 1, buf + at, len - at);
						buf[at] = (char) next_random(&state);
						len++;
					}
					break;
			}
		}
		exercise(buf, len);
	}

	/* token soup */
	for (iter = 0; iter < 20000; iter++)
	{
		int			n = 1 + (int) (next_random(&state) % 24);
		size_t		len = 0;
		int			k;

		for (k = 0; k < n; k++)
		{
			int			which = (int) (next_random(&state) % (uint32_t) npieces);
			const char *piece = pieces[which];
			size_t		plen = (piece[0] == '\0') ? 1 : strlen(piece);

			if (len + plen >= sizeof(buf))
				break;
			memcpy(buf + len, piece, plen);
			len += plen;
		}
		exercise(buf, len);
	}
	ok(1, "40000 mutated and random inputs parsed, checked and evaluated without crashing");
}

int
main(void)
{
	root = parse_json(ROOT_JSON);

	test_literals();
	test_arithmetic();
	test_comparisons();
	test_equality();
	test_logic();
	test_access();
	test_seed_expressions();
	test_eval_errors();
	test_step_budget();
	test_parse_errors();
	test_limits();
	test_check();
	test_stage_refs();
	test_paths();
	test_robustness();

	json_object_put(root);
	return tap_done();
}
