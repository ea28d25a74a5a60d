/*
 * fuzz_expr.c — libFuzzer harness over the CEL expression core
 * (src/core/expr*.c): parse, type-check in both forms, evaluate.
 *
 * The input is the expression source.  Beyond "no crash, no leak, no
 * undefined behaviour", it checks the promises of expr.h: a parse failure
 * carries a known code; a check failure too; evaluation is deterministic;
 * every evaluation stays within its step budget; and when the checker
 * knows an expression's type statically and evaluation succeeds, the value
 * has that type (the checker never lies).
 *
 * Build and run: make fuzz (make test runs it briefly).
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/expr/expr_internal.h"

int			LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The data expressions run over: every JSON kind, nesting, the roots. */
static const char *ROOT_JSON =
"{\"context\": {\"a\": 1, \"b\": 2.5, \"s\": \"h\\u00e9llo\", \"t\": true, \"n\": null,"
" \"l\": [1, 2, [3, {\"x\": \"y\"}]], \"m\": {\"k\": \"v\", \"in\": [1]},"
" \"when\": \"2024-02-29T12:30:45.5Z\", \"big\": 18446744073709551615,"
" \"max\": 9223372036854775807, \"min\": -9223372036854775808},"
" \"stages\": {\"s1\": {\"result\": {\"hit\": true, \"n\": 3}}},"
" \"outputs\": {\"t1\": {\"k\": [1, 2]}}, \"run\": {\"id\": \"r\", \"tenant\": \"x\"}}";

static json_object *root;

/* Abort (so libFuzzer keeps the input) when a promise of expr.h breaks. */
static void
require(int cond, const char *what, const uint8_t *data, size_t size)
{
	if (!cond)
	{
		fprintf(stderr, "fuzz_expr: broken invariant: %s\ninput: %.*s\n", what,
				(int) size, (const char *) data);
		abort();
	}
}

/* True if code is one of the expression diagnostic codes. */
static int
known_code(const char *code)
{
	return code != NULL &&
		(strcmp(code, "expr.syntax") == 0 || strcmp(code, "expr.too_large") == 0 ||
		 strcmp(code, "expr.unknown_root") == 0 || strcmp(code, "expr.type") == 0);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	wfe_expr_limits lim = {0, 0, 2000};
	wfe_expr_error err;
	wfe_expr   *e;
	cel_type	st;
	char		first[2048];
	char		second[2048];
	const char *type1 = NULL;
	const char *type2 = NULL;
	int			rc1;
	int			rc2;
	int			checked;
	json_object *out = NULL;

	if (root == NULL)
		root = json_tokener_parse(ROOT_JSON);
	memset(&err, 0, sizeof(err));
	e = wfe_expr_parse((const char *) data, size, &lim, &err);
	if (e == NULL)
	{
		require(known_code(err.code), "a parse failure has an expression code", data, size);
		return 0;
	}
	/* the tasks form, then the stages form (whose roots the data has) */
	memset(&err, 0, sizeof(err));
	if (wfe_expr_check_types(e, WFE_FORM_TASKS, NULL, NULL, &err, &st) != 0)
		require(known_code(err.code), "a tasks-form check failure has a code", data, size);
	memset(&err, 0, sizeof(err));
	checked = wfe_expr_check_types(e, WFE_FORM_STAGES, NULL, NULL, &err, &st);
	if (checked != 0)
		require(known_code(err.code), "a check failure has an expression code", data, size);

	/* evaluate checked or not: the server evaluates stored plans unchecked */
	memset(&err, 0, sizeof(err));
	rc1 = wfe_expr_eval_format(e, root, &lim, first, sizeof(first), &type1, &err);
	if (rc1 != 0)
		require(err.code != NULL && strcmp(err.code, "expr.eval") == 0,
				"an evaluation failure is expr.eval", data, size);
	memset(&err, 0, sizeof(err));
	rc2 = wfe_expr_eval_format(e, root, &lim, second, sizeof(second), &type2, &err);
	require(rc1 == rc2, "evaluating twice gives the same outcome", data, size);
	if (rc1 == 0)
	{
		require(strcmp(first, second) == 0, "evaluating twice gives the same value", data, size);
		if (checked == 0 && st.kind != CEL_DYN)
			require(strcmp(cel_kind_name(st.kind), type1) == 0,
					"the value has the type the checker proved", data, size);
	}
	/* the JSON and bool entry points the callers use */
	if (wfe_expr_eval(e, root, &lim, &out, &err) == 0)
		json_object_put(out);
	(void) wfe_expr_eval_bool(e, root, &lim, &err);
	wfe_expr_free(e);
	return 0;
}
