/*
 * compile_fn.c — the compiler core's SQL face: wfe._compile and
 * wfe._plan_mermaid (the public wfe.compile / wfe.plan_mermaid wrap them).
 *
 * The core is plain C using malloc; everything it returns is copied into
 * palloc'd memory and freed before anything here can raise an error.
 * NB: PostgreSQL declares a SQL function named json_object, which clashes
 * with json-c's typedef, so this file sees json-c only through compile.h.
 */
#include "postgres.h"

#include "common/cryptohash.h"
#include "fmgr.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"

#include "core/lang/compile.h"
#include "wfe.h"

PG_FUNCTION_INFO_V1(wfe_compile_sql);
PG_FUNCTION_INFO_V1(wfe_plan_mermaid_sql);

/* SHA-256 from PostgreSQL's own cryptohash (OpenSSL-backed or built in). */
void
wfe_sha256(const unsigned char *data, size_t len, unsigned char out[32])
{
	pg_cryptohash_ctx *ctx = pg_cryptohash_create(PG_SHA256);

	if (ctx == NULL || pg_cryptohash_init(ctx) < 0 ||
		pg_cryptohash_update(ctx, data, len) < 0 ||
		pg_cryptohash_final(ctx, out, 32) < 0)
		elog(ERROR, "could not compute SHA-256: %s", pg_cryptohash_error(ctx));
	pg_cryptohash_free(ctx);
}

/* A jsonb value as a json-c object (NULL if it does not parse). */
static struct json_object *
jsonb_to_jsonc(Jsonb *jb)
{
	char	   *text = JsonbToCString(NULL, &jb->root, VARSIZE(jb));
	struct json_object *obj = wfe_json_parse(text);

	pfree(text);
	return obj;
}

/* A malloc'd C string as jsonb, freeing the C string first. */
static Datum
malloced_json_to_jsonb(char *json)
{
	char	   *copy = pstrdup(json);

	free(json);
	return DirectFunctionCall1(jsonb_in, CStringGetDatum(copy));
}

/*
 * wfe._compile(source text, contracts jsonb) RETURNS jsonb
 *
 * Never raises for a bad definition: everything wrong with it is a
 * diagnostic in the result.  A NULL contracts list skips the contracts layer.
 */
Datum
wfe_compile_sql(PG_FUNCTION_ARGS)
{
	text	   *source;
	wfe_compile_options opts;
	wfe_compile_result *res;
	struct json_object *contracts = NULL;
	char	   *json;

	if (PG_ARGISNULL(0))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("workflow definition source must not be null")));
	source = PG_GETARG_TEXT_PP(0);

	wfe_compile_options_init(&opts);
	opts.max_definition_bytes = (size_t) wfe_max_definition_bytes;
	opts.max_stages = wfe_max_stages;
	opts.max_fanout = wfe_max_fanout;
	opts.max_map_items = wfe_max_map_items;
	opts.max_expression_bytes = (size_t) wfe_max_expression_bytes;
	opts.sha256 = wfe_sha256;
	if (!PG_ARGISNULL(1))
	{
		contracts = jsonb_to_jsonc(PG_GETARG_JSONB_P(1));
		if (!wfe_json_is_array(contracts))
		{
			wfe_json_free(contracts);
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("contracts must be a JSON array")));
		}
		opts.contracts = contracts;
	}

	res = wfe_compile(VARDATA_ANY(source), VARSIZE_ANY_EXHDR(source), &opts);
	json = wfe_compile_result_json(res);
	wfe_compile_result_free(res);
	wfe_json_free(contracts);

	PG_RETURN_DATUM(malloced_json_to_jsonb(json));
}

/* wfe._plan_mermaid(plan jsonb) RETURNS text */
Datum
wfe_plan_mermaid_sql(PG_FUNCTION_ARGS)
{
	struct json_object *plan = jsonb_to_jsonc(PG_GETARG_JSONB_P(0));
	char	   *chart = wfe_plan_mermaid(plan);
	text	   *result;

	wfe_json_free(plan);
	if (chart == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("value is not a compiled wfe plan")));
	result = cstring_to_text(chart);
	free(chart);
	PG_RETURN_TEXT_P(result);
}
