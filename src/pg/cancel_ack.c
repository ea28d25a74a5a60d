/*
 * cancel_ack.c — wfe.ack_cancel: a pushed worker acknowledges a cooperative
 * cancellation request (runtime.md "Cancellation").  The gate is the
 * core's (src/core/engine/cancel_ack.c); this file reads the stage, asks
 * who may call back (grants.c) and writes the event through the engine's
 * event writer.
 */
#include "postgres.h"

#include "executor/spi.h"
#include "fmgr.h"
#include "utils/builtins.h"

#include "core/engine/cancel_ack.h"
#include "spi_stmt.h"
#include "wfe.h"

/*
 * The stage as it is, and whether a request to stop its attempt (a
 * stage.cancelled or stage.failed_by_operator event of that attempt) names
 * the fence acknowledged: those events' fence column is the fence the
 * request superseded.  No lock: the answer is a record, not a transition,
 * and the events it reads are never changed.
 */
static stmt q_stage = STMT(
	"SELECT st.queue, st.tenant, st.handler IS NOT NULL, st.attempt,"
	"       EXISTS (SELECT 1 FROM wfe.events AS e"
	"                WHERE e.run_id = st.run_id AND e.stage = st.stage AND e.attempt = st.attempt"
	"                  AND e.type IN ('stage.cancelled', 'stage.failed_by_operator') AND e.fence = $3)"
	"  FROM wfe.run_stages AS st WHERE st.run_id = $1 AND st.stage = $2", 3, I8, TX, I8);

/* Decide and record one acknowledgement; its answer. */
static wfe_cancel_ack
ack_cancel(int64 run_id, const char *stage, int attempt, int64 fence)
{
	Datum		v[3] = {Int64GetDatum(run_id), CStringGetTextDatum(stage), Int64GetDatum(fence)};
	wfe_cancel_ack_in in;
	wfe_cancel_ack verdict;
	char	   *tenant = NULL;

	memset(&in, 0, sizeof(in));
	in.attempt = attempt;
	stmt_run(&q_stage, v, NULL);
	if (SPI_processed == 1)
	{
		tenant = stmt_col(2);
		in.row_attempt = pg_strtoint32(stmt_col(4));
		in.stop_named_fence = stmt_bool(5);
		/* who may call back: the callbacks' rule (a stranger's answer is unknown; 42501 for some) */
		in.exists = wfe_may_call_back(stmt_col(1), tenant, stmt_bool(3), run_id, stage, "report for");
	}
	verdict = wfe_cancel_ack_gate(&in);
	if (verdict == WFE_CANCEL_ACK_STALE)
		wfe_engine_event(run_id, tenant, stage, attempt, "callback.stale",
						 "{\"callback\": \"ack_cancel\"}", fence);
	else if (verdict == WFE_CANCEL_ACK_ACCEPTED)
		wfe_engine_event(run_id, tenant, stage, in.row_attempt, "stage.cancel_acknowledged", NULL, fence);
	return verdict;
}

PG_FUNCTION_INFO_V1(wfe_ack_cancel);

/* wfe.ack_cancel(run_id, stage, attempt, fence) RETURNS text: accepted, stale or unknown. */
Datum
wfe_ack_cancel(PG_FUNCTION_ARGS)
{
	char	   *stage;
	wfe_cancel_ack verdict;

	for (int k = 0; k < 4; k++)
		if (PG_ARGISNULL(k))
			ereport(ERROR,
					(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
					 errmsg("run_id, stage, attempt and fence must not be null")));
	stage = wfe_admitted_name(PG_GETARG_TEXT_PP(1), "stage");
	SPI_connect();
	verdict = ack_cancel(PG_GETARG_INT64(0), stage, PG_GETARG_INT32(2), PG_GETARG_INT64(3));
	SPI_finish();
	PG_RETURN_TEXT_P(cstring_to_text(wfe_cancel_ack_word(verdict)));
}
