/*
 * cel_spec_run.c -- the runner of test/tools/cel-spec-conformance.py: reads
 * one CEL expression per line (as a JSON string), parses, checks and
 * evaluates it in the stages form over empty roots, and prints one JSON
 * object per line: {"stage": "parse"|"check"|"eval"|"ok", "value", "type",
 * "code", "msg"}.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <json-c/json.h>
#include "core/expr/expr_internal.h"

int main(void)
{
	char *line = NULL; size_t cap = 0; ssize_t n;
	wfe_expr_limits lim = {0, 0, 0};
	json_object *root = json_tokener_parse("{\"context\": {}, \"stages\": {}, \"outputs\": {}, \"run\": {}}");
	while ((n = getline(&line, &cap, stdin)) > 0)
	{
		json_object *j = json_tokener_parse(line), *out = json_object_new_object();
		const char *src = json_object_get_string(j);
		wfe_expr_error err; wfe_expr *e; cel_type st; char got[8192] = ""; const char *tn = NULL;
		int rc = -9;
		memset(&err, 0, sizeof(err));
		e = wfe_expr_parse(src, strlen(src), &lim, &err);
		if (e && wfe_expr_check_types(e, WFE_FORM_STAGES, NULL, NULL, &err, &st) == 0)
			rc = wfe_expr_eval_format(e, root, &lim, got, sizeof(got), &tn, &err);
		json_object_object_add(out, "stage", json_object_new_string(e == NULL ? "parse" : rc == -9 ? "check" : rc == 0 ? "ok" : "eval"));
		json_object_object_add(out, "value", json_object_new_string(got));
		json_object_object_add(out, "type", json_object_new_string(tn ? tn : ""));
		json_object_object_add(out, "code", json_object_new_string(err.code ? err.code : ""));
		json_object_object_add(out, "msg", json_object_new_string(err.message));
		printf("%s\n", json_object_to_json_string_ext(out, JSON_C_TO_STRING_PLAIN));
		fflush(stdout);
		wfe_expr_free(e); json_object_put(j); json_object_put(out);
	}
	return 0;
}
