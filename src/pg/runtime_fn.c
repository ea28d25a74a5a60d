/*
 * runtime_fn.c — SQL faces of the run-time helpers in the core:
 * wfe._check_json_schema and wfe._validate (the JSON Schema validator),
 * wfe._bind_input (`${...}` binding) and wfe._eval_decision (a decision's
 * `when` clauses).  Internal: wfe's own
 * SECURITY DEFINER functions call them; nobody else may.
 *
 * jsonb goes to the core as text (JsonbToCString, then wfe_json_parse) and
 * comes back as canonical text through jsonb_in.  The core allocates with
 * malloc, so every json-c object is freed before anything here can raise,
 * and the one malloc'd string still held while palloc runs is freed in a
 * PG_FINALLY.  For the same reason the validator's interrupt hook only
 * answers whether a cancel is pending; it is raised here once the core has
 * returned and its objects are freed.
 * NB: PostgreSQL declares a SQL function named json_object, which clashes
 * with json-c's typedef, so this file sees json-c only through headers that
 * forward-declare struct json_object.
 */
#include "postgres.h"

#include "fmgr.h"
#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/json.h"
#include "utils/jsonb.h"

#include "core/engine/bind.h"
#include "core/lang/compile.h"
#include "core/jsonschema/jsonschema.h"
#include "pg/wfe.h"

PG_FUNCTION_INFO_V1(wfe_check_schema_sql);
PG_FUNCTION_INFO_V1(wfe_validate_sql);
PG_FUNCTION_INFO_V1(wfe_bind_input_sql);
PG_FUNCTION_INFO_V1(wfe_eval_decision_sql);

/* The hint of every refused schema. */
#define SCHEMA_HINT "Schemas are JSON Schema draft 2020-12, or draft-07 when \"$schema\" says so; " \
	"see docs/dsl.md \"Schemas\" for the keywords wfe accepts."

/* What a jsonb argument must hold. */
typedef enum json_kind
{
	JSON_ANY,
	JSON_OBJECT,
	JSON_ARRAY
} json_kind;

/* A jsonb argument as JSON text; raise if it is SQL NULL or not of its kind. */
static char *
json_arg_text(FunctionCallInfo fcinfo, int argno, const char *name, json_kind kind)
{
	Jsonb	   *jb;
	StringInfoData buf;

	if (PG_ARGISNULL(argno))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("%s must not be null", name)));
	jb = PG_GETARG_JSONB_P(argno);
	if ((kind == JSON_OBJECT && !JB_ROOT_IS_OBJECT(jb)) ||
		(kind == JSON_ARRAY && (!JB_ROOT_IS_ARRAY(jb) || JB_ROOT_IS_SCALAR(jb))))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must be a JSON %s", name,
						kind == JSON_ARRAY ? "array" : "object")));
	initStringInfo(&buf);
	(void) JsonbToCString(&buf, &jb->root, VARSIZE(jb));

	/*
	 * A trailing blank ends a bare scalar: json-c's tokener, handed exactly
	 * the bytes of "1" or "true", waits for more input and wfe_json_parse
	 * then reports it as not JSON.
	 */
	appendStringInfoChar(&buf, ' ');
	return buf.data;
}

/*
 * Parse JSON text from json_arg_text with json-c.  JSON null is a NULL
 * object, so *ok says whether parsing worked; it fails only for nesting
 * deeper than json-c's limit (the text came from jsonb, so it is JSON).
 */
static struct json_object *
parse_json(const char *text, bool *ok)
{
	struct json_object *obj;

	if (strcmp(text, "null ") == 0)
	{
		*ok = true;
		return NULL;
	}
	obj = wfe_json_parse(text);
	*ok = (obj != NULL);
	return obj;
}

/* Raise for a value nested deeper than the core reads (nothing held). */
static void
too_deep(const char *name)
{
	ereport(ERROR,
			(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
			 errmsg("%s is nested deeper than %d levels", name, WFE_JSON_MAX_DEPTH)));
}

/*
 * Append a malloc'd string to buf and free it, also if appending raises
 * (out of memory): the string is the only malloc'd thing still held.
 */
static void
append_and_free(StringInfo buf, char *malloced)
{
	PG_TRY();
	{
		appendStringInfoString(buf, malloced);
	}
	PG_FINALLY();
	{
		free(malloced);
	}
	PG_END_TRY();
}

/*
 * The validator's interrupt hook: would CHECK_FOR_INTERRUPTS raise now (a
 * cancel, statement_timeout, a termination)?  Only then does validation
 * stop with WFE_SCHEMA_INTERRUPTED, so the caller's CHECK_FOR_INTERRUPTS
 * does raise: here, and in engine.c's apply() before it writes anything a
 * stopped validation decided.
 */
static int
validation_interrupt_pending(void)
{
	return INTERRUPTS_CAN_BE_PROCESSED() && (QueryCancelPending || ProcDiePending);
}

/* Give the core its interrupt hook (from _PG_init). */
void
wfe_validation_init(void)
{
	wfe_jschema_set_interrupt_check(validation_interrupt_pending);
}

/*
 * Raise for a validation that stopped without an answer: the cancel that
 * stopped it, or 54001 for a spent step budget.  Other rc: nothing.  The
 * core's objects must be freed already.
 */
void
wfe_validation_raise_stopped(int rc, const char *detail)
{
	if (rc == WFE_SCHEMA_INTERRUPTED)
	{
		CHECK_FOR_INTERRUPTS();
		/* not reached: the hook said CHECK_FOR_INTERRUPTS would raise */
		ereport(ERROR,
				(errcode(ERRCODE_QUERY_CANCELED),
				 errmsg("canceling JSON Schema validation")));
	}
	if (rc == WFE_SCHEMA_BUDGET)
		ereport(ERROR,
				(errcode(ERRCODE_STATEMENT_TOO_COMPLEX),
				 errmsg("JSON Schema validation needs more than wfe.schema_step_budget (%d steps)",
						wfe_schema_step_budget),
				 errdetail("%s", detail),
				 errhint("Nested anyOf, oneOf and $ref multiply the work per level; simplify the schema, "
						 "or have a superuser raise wfe.schema_step_budget.")));
}

/* The result object text as jsonb. */
static Datum
cstring_to_jsonb(const char *text)
{
	return DirectFunctionCall1(jsonb_in, CStringGetDatum(text));
}

/*
 * wfe._check_json_schema(schema jsonb, label text) RETURNS void
 *
 * Registration's check: compiles the schema and raises 22023
 * `<label> at "<pointer>": <what>` when wfe cannot use it (an unknown
 * keyword, a remote reference, a pattern needing backtracking, ...).
 */
Datum
wfe_check_schema_sql(PG_FUNCTION_ARGS)
{
	char	   *schema_text = json_arg_text(fcinfo, 0, "schema", JSON_ANY);
	char	   *label = text_to_cstring(PG_GETARG_TEXT_PP(1));
	struct json_object *schema;
	struct wfe_jschema *compiled = NULL;
	wfe_jschema_error err;
	bool		schema_ok;

	/* from here to the frees nothing may raise */
	schema = parse_json(schema_text, &schema_ok);
	if (schema_ok)
		compiled = wfe_jschema_compile(schema, &err);
	wfe_jschema_free(compiled);
	wfe_json_free(schema);

	if (!schema_ok)
		too_deep(label);
	if (compiled == NULL)
	{
		if (err.pointer[0])
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("%s at \"%s\": %s", label, err.pointer, err.message),
					 errhint(SCHEMA_HINT)));
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s: %s", label, err.message),
				 errhint(SCHEMA_HINT)));
	}
	PG_RETURN_VOID();
}

/*
 * wfe._validate(schema jsonb, value jsonb) RETURNS text
 *
 * NULL when value satisfies schema, else the first violation, e.g.
 * `$.modelId: expected string, got integer (schema #/properties/modelId/type)`.
 * A schema wfe cannot use raises 22023.  A value nested too deeply for the
 * core is reported as a violation (it cannot be shown to conform), not
 * raised: callers use this on results that workers send.
 */
Datum
wfe_validate_sql(PG_FUNCTION_ARGS)
{
	char	   *schema_text;
	char	   *value_text;
	struct json_object *schema;
	struct json_object *value;
	bool		schema_ok,
				value_ok;
	char		msg[512];
	int			rc;

	schema_text = json_arg_text(fcinfo, 0, "schema", JSON_ANY);
	value_text = json_arg_text(fcinfo, 1, "value", JSON_ANY);

	/* from here to the frees nothing may raise */
	schema = parse_json(schema_text, &schema_ok);
	value = parse_json(value_text, &value_ok);
	if (!schema_ok)
		rc = WFE_SCHEMA_MALFORMED;	/* raised below, as too deep */
	else if (!value_ok)
	{
		snprintf(msg, sizeof(msg), "$: value is nested deeper than %d levels",
				 WFE_JSON_MAX_DEPTH);
		rc = WFE_SCHEMA_VIOLATION;
	}
	else
		rc = wfe_schema_validate(schema, value, msg, sizeof(msg));
	wfe_json_free(schema);
	wfe_json_free(value);

	if (!schema_ok)
		too_deep("schema");
	wfe_validation_raise_stopped(rc, msg);
	if (rc == WFE_SCHEMA_MALFORMED)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("schema is not a JSON Schema wfe accepts"),
				 errdetail("%s", msg),
				 errhint(SCHEMA_HINT)));
	if (rc == WFE_SCHEMA_VALID)
		PG_RETURN_NULL();
	PG_RETURN_TEXT_P(cstring_to_text(msg));
}

/*
 * wfe._bind_input(template jsonb, root jsonb, input_schema jsonb DEFAULT NULL)
 * RETURNS jsonb
 *
 * {"ok": true, "input": {...}} or {"ok": false, "code": "binding.missing" |
 * "binding.null" | "binding.type", "error": "..."}.  Binding problems are
 * answers, never errors: the runtime records them as the attempt's failure.
 * Bad arguments (NULL, not objects, a malformed schema) raise.
 */
Datum
wfe_bind_input_sql(PG_FUNCTION_ARGS)
{
	char	   *tmpl_text;
	char	   *root_text;
	char	   *schema_text = NULL;
	struct json_object *tmpl;
	struct json_object *root;
	struct json_object *schema = NULL;
	struct json_object *input = NULL;
	bool		tmpl_ok,
				root_ok,
				schema_ok = true;
	const char *too_deep_arg = NULL;
	wfe_bind_error err;
	char	   *canon = NULL;
	StringInfoData buf;

	tmpl_text = json_arg_text(fcinfo, 0, "template", JSON_OBJECT);
	root_text = json_arg_text(fcinfo, 1, "root", JSON_OBJECT);
	if (!PG_ARGISNULL(2))
		schema_text = json_arg_text(fcinfo, 2, "input_schema", JSON_ANY);

	/* from here to the frees nothing may raise */
	memset(&err, 0, sizeof(err));
	tmpl = parse_json(tmpl_text, &tmpl_ok);
	root = parse_json(root_text, &root_ok);
	if (schema_text)
		schema = parse_json(schema_text, &schema_ok);
	if (!tmpl_ok)
		too_deep_arg = "template";
	else if (!root_ok)
		too_deep_arg = "root";
	else if (!schema_ok)
		too_deep_arg = "input_schema";
	else
	{
		input = wfe_bind_input(tmpl, root, schema, NULL, &err);
		if (input != NULL)
		{
			canon = wfe_canonical_json(input);
			wfe_json_free(input);
		}
	}
	wfe_json_free(tmpl);
	wfe_json_free(root);
	wfe_json_free(schema);

	/* only canon (malloc'd) is still held, and append_and_free frees it */
	if (too_deep_arg)
		too_deep(too_deep_arg);
	if (canon == NULL)
		CHECK_FOR_INTERRUPTS();	/* the input schema's validation was cancelled */
	initStringInfo(&buf);
	if (canon != NULL)
	{
		appendStringInfoString(&buf, "{\"ok\": true, \"input\": ");
		append_and_free(&buf, canon);
		appendStringInfoChar(&buf, '}');
		PG_RETURN_DATUM(cstring_to_jsonb(buf.data));
	}
	if (err.code == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OUT_OF_MEMORY),
				 errmsg("out of memory while binding a stage input")));
	if (strcmp(err.code, WFE_BIND_BAD_SCHEMA) == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("input_schema is not a JSON Schema wfe accepts"),
				 errdetail("%s", err.message),
				 errhint(SCHEMA_HINT)));
	appendStringInfoString(&buf, "{\"ok\": false, \"code\": ");
	escape_json(&buf, err.code);
	appendStringInfoString(&buf, ", \"error\": ");
	escape_json(&buf, err.message);
	appendStringInfoChar(&buf, '}');
	PG_RETURN_DATUM(cstring_to_jsonb(buf.data));
}

/*
 * wfe._eval_decision(branches jsonb, root jsonb) RETURNS jsonb
 *
 * {"ok": true, "next": STAGE, "branch": i} for the first branch whose
 * `when` is true, or {"ok": false, "code": "expr.eval", "error": "...",
 * "branch": i} (null when no branch is true).  Uses the default expression
 * limits, so the answer depends on the arguments only.  A branches value
 * that is not the plan's shape raises 22023.
 */
Datum
wfe_eval_decision_sql(PG_FUNCTION_ARGS)
{
	char	   *branches_text;
	char	   *root_text;
	struct json_object *branches;
	struct json_object *root;
	bool		branches_ok,
				root_ok;
	const char *too_deep_arg = NULL;
	wfe_decision d;
	int			rc = 0;
	StringInfoData buf;

	branches_text = json_arg_text(fcinfo, 0, "branches", JSON_ARRAY);
	root_text = json_arg_text(fcinfo, 1, "root", JSON_OBJECT);

	/* from here to the frees nothing may raise */
	memset(&d, 0, sizeof(d));
	branches = parse_json(branches_text, &branches_ok);
	root = parse_json(root_text, &root_ok);
	if (!branches_ok)
		too_deep_arg = "branches";
	else if (!root_ok)
		too_deep_arg = "root";
	else
		rc = wfe_eval_decision(branches, root, NULL, &d);
	wfe_json_free(branches);
	wfe_json_free(root);

	if (too_deep_arg)
		too_deep(too_deep_arg);
	if (rc < 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s", d.message)));

	initStringInfo(&buf);
	if (d.ok)
	{
		appendStringInfoString(&buf, "{\"ok\": true, \"next\": ");
		escape_json(&buf, d.next);
		appendStringInfo(&buf, ", \"branch\": %d}", d.branch);
	}
	else
	{
		appendStringInfoString(&buf, "{\"ok\": false, \"code\": ");
		escape_json(&buf, d.code);
		appendStringInfoString(&buf, ", \"error\": ");
		escape_json(&buf, d.message);
		if (d.branch >= 0)
			appendStringInfo(&buf, ", \"branch\": %d}", d.branch);
		else
			appendStringInfoString(&buf, ", \"branch\": null}");
	}
	PG_RETURN_DATUM(cstring_to_jsonb(buf.data));
}
