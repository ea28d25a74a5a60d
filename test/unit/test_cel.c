/*
 * test_cel.c — table-driven CEL conformance cases (test/unit/cel_cases.txt),
 * written from cel-spec's language definition for every operator, macro,
 * function and error rule wfe supports (dsl.md "Expressions").
 *
 * Each case line of the data file is one of
 *
 *	EXPR ==> VALUE        evaluates to VALUE, printed as CEL-like text
 *	                      (1, 1u, 1.5, 3.0, "s", [1, 2], {"a": 1}, int,
 *	                      timestamp("..."), duration("...")); the checker
 *	                      accepts it, and where it knows the type statically
 *	                      that type is the run-time type
 *	EXPR =!> TEXT         parses and checks, but evaluation fails (expr.eval)
 *	                      with a message containing TEXT
 *	EXPR =?> CODE TEXT    refused at compile time (parse or type check) with
 *	                      diagnostic CODE and a message containing TEXT
 *
 * plus `@root JSON` (the evaluation input for the cases that follow), `@steps
 * N` (the step budget for the cases that follow; 0 = default), blank lines
 * and `#` comments.  Expressions are checked in the stages form.
 *
 * A standalone TAP program, run under ASan/UBSan by `make check-unit`;
 * prints "cel conformance: N passed, N failed".
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/expr/expr_internal.h"
#include "tap.h"


/* Open the case file: $WFE_CEL_CASES, beside this source, or beside the binary. */
static FILE *
open_cases(const char *argv0)
{
	char		path[4096];
	const char *env = getenv("WFE_CEL_CASES");
	const char *slash;
	FILE	   *f;

	if (env != NULL)
		return fopen(env, "r");
	slash = strrchr(__FILE__, '/');
	snprintf(path, sizeof(path), "%.*scel_cases.txt",
			 slash ? (int) (slash - __FILE__ + 1) : 0, __FILE__);
	if ((f = fopen(path, "r")) != NULL)
		return f;
	slash = strrchr(argv0, '/');
	snprintf(path, sizeof(path), "%.*s../../../test/unit/cel_cases.txt",
			 slash ? (int) (slash - argv0 + 1) : 0, argv0);
	return fopen(path, "r");
}

/* Trim white space at both ends, in place. */
static char *
trim(char *s)
{
	char	   *e;

	while (*s == ' ' || *s == '\t')
		s++;
	e = s + strlen(s);
	while (e > s && (e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\n' || e[-1] == '\r'))
		*--e = '\0';
	return s;
}

/* One `==>` case. */
static void
value_case(int line, const char *src, const char *expected, json_object *root,
		   const wfe_expr_limits *lim)
{
	wfe_expr_error err;
	wfe_expr   *e;
	char		got[4096];
	const char *type_name = NULL;
	cel_type	st;
	int			rc = -1;
	int			checked = -1;

	memset(&err, 0, sizeof(err));
	got[0] = '\0';
	e = wfe_expr_parse(src, strlen(src), lim, &err);
	if (e != NULL)
		checked = wfe_expr_check_types(e, WFE_FORM_STAGES, NULL, NULL, &err, &st);
	if (checked == 0)
		rc = wfe_expr_eval_format(e, root, lim, got, sizeof(got), &type_name, &err);
	ok(rc == 0 && strcmp(got, expected) == 0, "line %d: %s ==> %s", line, src, expected);
	if (e == NULL || checked != 0 || rc != 0)
		printf("# %s error %s: %s\n", e == NULL ? "parse" : checked != 0 ? "check" : "eval",
			   err.code ? err.code : "(none)", err.message);
	else if (strcmp(got, expected) != 0)
		printf("# got %s\n", got);
	else
		ok(st.kind == CEL_DYN || strcmp(cel_kind_name(st.kind), type_name) == 0,
		   "line %d: static type %s of %s is its run-time type %s", line,
		   cel_kind_name(st.kind), src, type_name);
	wfe_expr_free(e);
}

/* One `=!>` case. */
static void
eval_error_case(int line, const char *src, const char *part, json_object *root,
				const wfe_expr_limits *lim)
{
	wfe_expr_error err;
	wfe_expr   *e;
	char		got[4096];
	cel_type	st;
	int			checked = -1;
	int			rc = 0;

	memset(&err, 0, sizeof(err));
	got[0] = '\0';
	e = wfe_expr_parse(src, strlen(src), lim, &err);
	if (e != NULL)
		checked = wfe_expr_check_types(e, WFE_FORM_STAGES, NULL, NULL, &err, &st);
	if (checked == 0)
		rc = wfe_expr_eval_format(e, root, lim, got, sizeof(got), NULL, &err);
	ok(checked == 0 && rc == -1 && err.code != NULL && strcmp(err.code, "expr.eval") == 0 &&
	   strstr(err.message, part) != NULL,
	   "line %d: %s =!> %s", line, src, part);
	if (checked != 0 || rc != -1 || strstr(err.message, part) == NULL)
		printf("# %s rc %d: %s %s (value %s)\n", checked != 0 ? "check" : "eval", rc,
			   err.code ? err.code : "(none)", err.message, got);
	wfe_expr_free(e);
}

/* One `=?>` case: "CODE TEXT". */
static void
compile_error_case(int line, const char *src, char *spec, const wfe_expr_limits *lim)
{
	wfe_expr_error err;
	wfe_expr   *e;
	char	   *code = spec;
	char	   *part = strchr(spec, ' ');
	cel_type	st;
	int			failed;

	if (part != NULL)
		*part++ = '\0';
	else
		part = "";
	part = trim(part);
	memset(&err, 0, sizeof(err));
	e = wfe_expr_parse(src, strlen(src), lim, &err);
	failed = e == NULL ||
		wfe_expr_check_types(e, WFE_FORM_STAGES, NULL, NULL, &err, &st) != 0;
	ok(failed && err.code != NULL && strcmp(err.code, code) == 0 &&
	   strstr(err.message, part) != NULL,
	   "line %d: %s =?> %s %s", line, src, code, part);
	if (!failed || err.code == NULL || strcmp(err.code, code) != 0 ||
		strstr(err.message, part) == NULL)
		printf("# %s: %s %s\n", failed ? "refused" : "accepted",
			   err.code ? err.code : "(none)", err.message);
	wfe_expr_free(e);
}

int
main(int argc, char **argv)
{
	FILE	   *f = open_cases(argc > 0 ? argv[0] : "");
	char		buf[8192];
	int			line = 0;
	json_object *root = NULL;
	wfe_expr_limits lim = {0, 0, 0};

	if (f == NULL)
	{
		printf("not ok 1 - cannot open test/unit/cel_cases.txt (set WFE_CEL_CASES)\n1..1\n");
		return 1;
	}
	while (fgets(buf, sizeof(buf), f) != NULL)
	{
		char	   *s = trim(buf);
		char	   *sep;

		line++;
		if (*s == '\0' || *s == '#')
			continue;
		if (strncmp(s, "@root ", 6) == 0)
		{
			json_object_put(root);
			root = json_tokener_parse(s + 6);
			if (root == NULL)
			{
				printf("Bail out! line %d: bad @root JSON\n", line);
				return 2;
			}
			continue;
		}
		if (strncmp(s, "@steps ", 7) == 0)
		{
			lim.max_steps = atoi(s + 7);
			continue;
		}
		if ((sep = strstr(s, " ==> ")) != NULL)
		{
			*sep = '\0';
			value_case(line, trim(s), trim(sep + 5), root, &lim);
		}
		else if ((sep = strstr(s, " =!> ")) != NULL)
		{
			*sep = '\0';
			eval_error_case(line, trim(s), trim(sep + 5), root, &lim);
		}
		else if ((sep = strstr(s, " =?> ")) != NULL)
		{
			*sep = '\0';
			compile_error_case(line, trim(s), trim(sep + 5), &lim);
		}
		else
		{
			printf("Bail out! line %d: no ==>, =!> or =?> in: %s\n", line, s);
			json_object_put(root);
			fclose(f);
			return 2;
		}
	}
	fclose(f);
	json_object_put(root);
	printf("# cel conformance: %d passed, %d failed\n", tests_run - tests_failed,
		   tests_failed);
	return tap_done();
}
