/*
 * metrics.c — wfe._metrics_count(), the trigger that counts the counters
 * of wfe.metrics (83_metrics.sql) as things happen.
 *
 * Each counted thing adds a row of +1 to wfe.metric_counters, which the
 * view sums; every 256th row folds the rows committed so far into one per
 * series.  The trigger fires on every attempt that ends, so it is on the
 * path of every step: in C, with its statements prepared once per session,
 * it costs an insert where the PL/pgSQL it replaces also paid for a
 * SECURITY DEFINER call (search_path set and reset) and an interpreter
 * (docs/benchmarks.md, "Throughput after the 0.3.0 merges").  It writes as
 * the function's owner, as the SECURITY DEFINER function did, and names
 * everything with its schema, since it runs under the caller's search_path.
 * The attempts it counts are also the circuit breakers' (circuit.c): one
 * trigger per attempt end, not two.
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "catalog/pg_proc.h"
#include "commands/trigger.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/json.h"
#include "utils/rel.h"
#include "utils/syscache.h"

#include "spi_stmt.h"
#include "wfe.h"

/* a counter row with the labels given as JSON text */
static stmt q_count = STMT(
	"INSERT INTO wfe.metric_counters (tenant, metric, labels, value)"
	" VALUES ($1, $2, $3::pg_catalog.jsonb, 1) RETURNING id", 3, TX, TX, TX);
/* an attempt ended: its run's workflow is a label */
static stmt q_count_attempt = STMT(
	"INSERT INTO wfe.metric_counters (tenant, metric, labels, value)"
	" VALUES ($1, $2, pg_catalog.jsonb_build_object("
	"           'workflow', (SELECT r.workflow FROM wfe.runs AS r WHERE r.run_id OPERATOR(pg_catalog.=) $3),"
	"           'stage', $4, 'outcome', $5), 1) RETURNING id", 5, TX, TX, I8, TX, TX);
/*
 * fold: every row the statement's snapshot sees, summed per series.  One
 * fold at a time (a wfe lock, taken without waiting: a busy fold means the
 * next 256th insert folds), so no row is ever locked by another folder and
 * a row costs its delete alone; rows inserted since the snapshot stay.
 */
static stmt q_fold = STMT(
	"WITH gone AS ("
	"  DELETE FROM wfe.metric_counters AS c RETURNING c.tenant, c.metric, c.labels, c.value"
	")"
	" INSERT INTO wfe.metric_counters (tenant, metric, labels, value)"
	" SELECT g.tenant, g.metric, g.labels, pg_catalog.sum(g.value) FROM gone AS g GROUP BY 1, 2, 3", 0);

#define FOLD_EVERY 256

/* Column name of the trigger's row as text (NULL when SQL NULL). */
static char *
col_text(TriggerData *td, HeapTuple tuple, const char *name)
{
	int			k = SPI_fnumber(td->tg_relation->rd_att, name);

	if (k <= 0)
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("wfe._metrics_count: table \"%s\" has no column \"%s\"",
						RelationGetRelationName(td->tg_relation), name)));
	return SPI_getvalue(tuple, td->tg_relation->rd_att, k);
}

/* Append "key": value (a JSON string, or null) to a JSON object under construction. */
static void
add_label(StringInfo buf, const char *key, const char *value)
{
	if (buf->len > 1)
		appendStringInfoString(buf, ", ");
	escape_json(buf, key);
	appendStringInfoString(buf, ": ");
	if (value == NULL)
		appendStringInfoString(buf, "null");
	else
		escape_json(buf, value);
}

PG_FUNCTION_INFO_V1(wfe_metrics_count);

/*
 * AFTER row trigger: adds 1 to the counter TG_ARGV[0] of wfe.metrics for
 * the row's tenant, with the labels the row gives (83_metrics.sql says
 * which trigger counts what); folds the counter rows every 256th.
 */
Datum
wfe_metrics_count(PG_FUNCTION_ARGS)
{
	TriggerData *td = (TriggerData *) fcinfo->context;
	const char *metric;
	HeapTuple	tuple;
	HeapTuple	proc;
	Oid			owner;
	Oid			save_user;
	int			save_sec;
	char	   *tenant;
	int64		id;

	if (!CALLED_AS_TRIGGER(fcinfo) || !TRIGGER_FIRED_AFTER(td->tg_event) ||
		!TRIGGER_FIRED_FOR_ROW(td->tg_event) || td->tg_trigger->tgnargs != 1)
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("wfe._metrics_count must be an AFTER row trigger with a counter name")));
	metric = td->tg_trigger->tgargs[0];
	tuple = TRIGGER_FIRED_BY_UPDATE(td->tg_event) ? td->tg_newtuple : td->tg_trigtuple;

	/* as the function's owner, as a SECURITY DEFINER function would run */
	proc = SearchSysCache1(PROCOID, ObjectIdGetDatum(fcinfo->flinfo->fn_oid));
	if (!HeapTupleIsValid(proc))
		elog(ERROR, "cache lookup failed for function %u", fcinfo->flinfo->fn_oid);
	owner = ((Form_pg_proc) GETSTRUCT(proc))->proowner;
	ReleaseSysCache(proc);
	GetUserIdAndSecContext(&save_user, &save_sec);
	SetUserIdAndSecContext(owner, save_sec | SECURITY_LOCAL_USERID_CHANGE);

	SPI_connect();
	tenant = col_text(td, tuple, "tenant");
	if (strcmp(metric, "wfe_stage_attempts_total") == 0)
	{
		char	   *state = col_text(td, tuple, "state");
		Datum		v[5] = {
			CStringGetTextDatum(tenant), CStringGetTextDatum(metric),
			Int64GetDatum(pg_strtoint64(col_text(td, tuple, "run_id"))),
			CStringGetTextDatum(col_text(td, tuple, "stage")),
			/* an attempt that failed and will be retried counts as failed */
			CStringGetTextDatum(strcmp(state, "retry_scheduled") == 0 ? "failed" : state)
		};

		stmt_run(&q_count_attempt, v, NULL);
		id = pg_strtoint64(stmt_col(1));	/* before the circuit's statements */
		/*
		 * The queue's circuit breaker (circuit.c) counts the same ends,
		 * but only of attempts that ran (dispatched or running before); a
		 * cancelled one says nothing about the queue's health, but may be
		 * the half-open probe, which is then given back.  A queue without
		 * a circuit costs a look at a cached list.
		 */
		{
			char	   *queue = col_text(td, tuple, "queue");
			char	   *was = col_text(td, td->tg_trigtuple, "state");

			if (queue != NULL && (strcmp(was, "dispatched") == 0 || strcmp(was, "running") == 0))
				wfe_circuit_attempt_ended(queue, DatumGetInt64(v[2]), col_text(td, tuple, "stage"), state);
		}
	}
	else
	{
		StringInfoData labels;
		Datum		v[3];

		initStringInfo(&labels);
		appendStringInfoChar(&labels, '{');
		if (strcmp(metric, "wfe_runs_finished_total") == 0)
		{
			add_label(&labels, "workflow", col_text(td, tuple, "workflow"));
			add_label(&labels, "state", col_text(td, tuple, "state"));
		}
		else if (strcmp(metric, "wfe_idempotent_submits_total") == 0)
			/* a keyed run created, or a submit answered with the run its key named */
			add_label(&labels, "result",
					  strcmp(RelationGetRelationName(td->tg_relation), "runs") == 0 ? "created" : "deduplicated");
		else if (strcmp(metric, "wfe_cache_hits_total") != 0 && strcmp(metric, "wfe_cache_misses_total") != 0)
			ereport(ERROR,
					(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
					 errmsg("wfe._metrics_count: unknown counter \"%s\"", metric)));
		appendStringInfoChar(&labels, '}');
		v[0] = CStringGetTextDatum(tenant);
		v[1] = CStringGetTextDatum(metric);
		v[2] = CStringGetTextDatum(labels.data);
		stmt_run(&q_count, v, NULL);
		id = pg_strtoint64(stmt_col(1));
	}
	if (id % FOLD_EVERY == 0 && wfe_lock("metrics", "fold", true))
		stmt_run(&q_fold, NULL, NULL);
	SPI_finish();

	SetUserIdAndSecContext(save_user, save_sec);
	return PointerGetDatum(NULL);
}
