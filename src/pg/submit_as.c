/*
 * submit_as.c — wfe.submit made on someone's behalf: a schedule's tick as
 * the schedule's owner (69_schedules.sql), a run command from RabbitMQ as
 * its ingress's role (85_ingress.sql).  The role acts as a handler's
 * registrant does (handler.c), so its tenant membership, limits and
 * identity apply; a command's submit also says how it came, in its
 * run.submitted event (wfe._submit_via), which no session can set.
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"
#include "utils/memutils.h"
#include "utils/syscache.h"

#include "wfe.h"

PG_FUNCTION_INFO_V1(wfe_schedule_submit);
PG_FUNCTION_INFO_V1(wfe_ingress_submit_as);
PG_FUNCTION_INFO_V1(wfe_submit_via);

/* How the submit in progress came ({"via": "amqp", ...}), or NULL. */
static Jsonb *submit_via = NULL;

/*
 * The body of both SQL functions below: (owner, tenant, workflow, context,
 * key, options) are their first six arguments; via is recorded in the
 * run.submitted event.  Both NULL when owner (no longer) acts for tenant,
 * or no longer exists.
 */
static Datum
submit_as(FunctionCallInfo fcinfo, Jsonb *via)
{
	Oid			owner = PG_GETARG_OID(0);
	Datum		tenant = PG_GETARG_DATUM(1);
	TupleDesc	tupdesc;
	Datum		values[2] = {0, 0};
	bool		nulls[2] = {true, true};
	Oid			previous;
	Jsonb	   *previous_via;

	if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "wfe: a submit as a role must return a row");
	tupdesc = BlessTupleDesc(tupdesc);
	if (!SearchSysCacheExists1(AUTHOID, ObjectIdGetDatum(owner)))
		PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(tupdesc, values, nulls)));

	SPI_connect();
	previous = wfe_set_acting_role(owner);
	previous_via = submit_via;
	submit_via = via;
	PG_TRY();
	{
		if (!PG_ARGISNULL(1) && wfe_acts_for_tenant(TextDatumGetCString(tenant)))
		{
			Oid			argtypes[4] = {TEXTOID, JSONBOID, TEXTOID, JSONBOID};
			Datum		args[4] = {PG_GETARG_DATUM(2), PG_GETARG_DATUM(3), PG_GETARG_DATUM(4), PG_GETARG_DATUM(5)};
			bool		isnull;

			if (SPI_execute_with_args("SELECT s.run_id, s.accepted FROM wfe.submit($1, $2, $3, $4) AS s",
									  4, argtypes, args, NULL, false, 1) != SPI_OK_SELECT ||
				SPI_processed != 1)
				elog(ERROR, "wfe: a submit as a role did not return one row");
			values[0] = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);
			values[1] = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2, &isnull);
			nulls[0] = nulls[1] = false;
		}
	}
	PG_FINALLY();
	{
		wfe_set_acting_role(previous);
		submit_via = previous_via;
	}
	PG_END_TRY();
	SPI_finish();
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(tupdesc, values, nulls)));
}

/*
 * wfe._schedule_submit(owner, tenant, workflow, context, key, options)
 * RETURNS TABLE (run_id bigint, accepted boolean): wfe.submit as owner.
 */
Datum
wfe_schedule_submit(PG_FUNCTION_ARGS)
{
	return submit_as(fcinfo, NULL);
}

/*
 * wfe._ingress_submit_as(role, tenant, workflow, context, key, options, via)
 * RETURNS TABLE (run_id bigint, accepted boolean): a run command's submit
 * as its ingress's role, via recorded in run.submitted.
 */
Datum
wfe_ingress_submit_as(PG_FUNCTION_ARGS)
{
	return submit_as(fcinfo, PG_GETARG_JSONB_P(6));
}

/* wfe._submit_via() RETURNS jsonb: how the submit in progress came ('{}': a SQL call). */
Datum
wfe_submit_via(PG_FUNCTION_ARGS)
{
	if (submit_via == NULL)
		PG_RETURN_DATUM(DirectFunctionCall1(jsonb_in, CStringGetDatum("{}")));
	PG_RETURN_JSONB_P(submit_via);
}
