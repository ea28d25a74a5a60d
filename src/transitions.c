/*
 * transitions.c — the legal state transitions of stages and runs, and the
 * triggers that refuse every other one.
 *
 * The tables below are the single source of truth: the triggers consult
 * them on every state change, wfe.stage_transitions() and
 * wfe.run_transitions() list them for psql and the docs.  Written in C
 * because the stage trigger sits on the hottest path of the engine.
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "commands/trigger.h"
#include "fmgr.h"
#include "funcapi.h"
#include "utils/builtins.h"
#include "utils/rel.h"

typedef struct transition
{
	const char *from;
	const char *to;
	const char *why;
} transition;

/* Stage states (runtime.md "States"); same-state updates are always legal. */
static const transition stage_transitions[] = {
	{"waiting", "queued", "released: its predecessors are done"},
	{"waiting", "completed", "a decision, fork or join resolved at release"},
	{"waiting", "failed", "input binding failed, or a join was not satisfied"},
	{"waiting", "skipped", "branch not taken, dependency failed, context gated, missing input, run aborted"},
	{"waiting", "cancelled", "the run was cancelled before the stage was released"},
	{"queued", "dispatched", "published to the broker"},
	{"queued", "running", "claimed by a poll worker, or accepted"},
	{"queued", "completed", "a worker reported before claiming (broker delivery)"},
	{"queued", "failed", "a worker reported failure before claiming"},
	{"queued", "retry_scheduled", "a worker reported a retryable failure before claiming"},
	{"queued", "timed_out", "queue deadline passed"},
	{"queued", "cancelled", "run intent set or run cancelled"},
	{"dispatched", "running", "accepted by the worker"},
	{"dispatched", "queued", "publisher gave the message back"},
	{"dispatched", "completed", "a worker reported before accepting"},
	{"dispatched", "failed", "a worker reported failure before accepting"},
	{"dispatched", "retry_scheduled", "retryable failure before accepting"},
	{"dispatched", "timed_out", "queue deadline passed"},
	{"dispatched", "cancelled", "run intent set or run cancelled"},
	{"running", "completed", "the worker completed the attempt"},
	{"running", "failed", "the attempt failed with no retry left"},
	{"running", "retry_scheduled", "the attempt failed and a retry is due later"},
	{"running", "timed_out", "execution or heartbeat deadline passed"},
	{"running", "cancelled", "run intent set or run cancelled: the attempt is fenced"},
	{"retry_scheduled", "queued", "the retry timer fired: new attempt, new fence"},
	{"retry_scheduled", "cancelled", "run intent set or run cancelled"},
	{"timed_out", "retry_scheduled", "the timed-out attempt is retried later"},
	{"timed_out", "queued", "operator re-drive"},
	{"failed", "queued", "operator re-drive"},
	{"cancelled", "queued", "operator re-drive"},
	{NULL, NULL, NULL}
};

/* Run states: a run ends only through its intent (and finalisers). */
static const transition run_transitions[] = {
	{"running", "finalising", "a terminal intent was set; finalisers run"},
	{"running", "completed", "completed intent, no finalisers"},
	{"running", "failed", "failed intent, no finalisers"},
	{"running", "cancelled", "cancelled, no finalisers"},
	{"finalising", "completed", "completed intent and every finaliser succeeded"},
	{"finalising", "failed", "failed intent, or a finaliser failed"},
	{"finalising", "cancelled", "cancelled, finalisers done"},
	{NULL, NULL, NULL}
};

/* Is from -> to in the table (or a same-state update)? */
static bool
transition_legal(const transition *table, const char *from, const char *to)
{
	if (strcmp(from, to) == 0)
		return true;
	for (; table->from; table++)
		if (strcmp(table->from, from) == 0 && strcmp(table->to, to) == 0)
			return true;
	return false;
}

/* Attribute number of the "state" column. */
static int
state_attno(TupleDesc desc)
{
	for (int i = 0; i < desc->natts; i++)
	{
		Form_pg_attribute att = TupleDescAttr(desc, i);

		if (!att->attisdropped && strcmp(NameStr(att->attname), "state") == 0)
			return i + 1;
	}
	elog(ERROR, "table has no state column");
	return 0;					/* keep compiler quiet */
}

/* Shared body of the two BEFORE UPDATE triggers. */
static Datum
guard_state(FunctionCallInfo fcinfo, const transition *table, const char *what)
{
	TriggerData *trigdata = (TriggerData *) fcinfo->context;
	TupleDesc	desc;
	int			attno;
	bool		oldnull,
				newnull;
	Datum		olddatum,
				newdatum;
	char	   *from,
			   *to;

	if (!CALLED_AS_TRIGGER(fcinfo) || !TRIGGER_FIRED_BY_UPDATE(trigdata->tg_event) ||
		!TRIGGER_FIRED_FOR_ROW(trigdata->tg_event))
		elog(ERROR, "%s state guard must be a row-level UPDATE trigger", what);

	desc = RelationGetDescr(trigdata->tg_relation);
	attno = state_attno(desc);
	olddatum = heap_getattr(trigdata->tg_trigtuple, attno, desc, &oldnull);
	newdatum = heap_getattr(trigdata->tg_newtuple, attno, desc, &newnull);
	if (oldnull || newnull)
		elog(ERROR, "%s state must not be null", what);
	from = TextDatumGetCString(olddatum);
	to = TextDatumGetCString(newdatum);
	if (!transition_legal(table, from, to))
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("illegal %s transition from %s to %s", what, from, to),
				 errhint("See wfe.%s_transitions() for the legal transitions.", what)));
	return PointerGetDatum(trigdata->tg_newtuple);
}

PG_FUNCTION_INFO_V1(wfe_stage_state_guard);
PG_FUNCTION_INFO_V1(wfe_run_state_guard);
PG_FUNCTION_INFO_V1(wfe_stage_transitions);
PG_FUNCTION_INFO_V1(wfe_run_transitions);

/* Trigger on wfe.run_stages: refuse illegal stage transitions. */
Datum
wfe_stage_state_guard(PG_FUNCTION_ARGS)
{
	return guard_state(fcinfo, stage_transitions, "stage");
}

/* Trigger on wfe.runs: refuse illegal run transitions. */
Datum
wfe_run_state_guard(PG_FUNCTION_ARGS)
{
	return guard_state(fcinfo, run_transitions, "run");
}

/* A transition table as rows (from_state, to_state, meaning). */
static Datum
list_transitions(FunctionCallInfo fcinfo, const transition *table)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;

	InitMaterializedSRF(fcinfo, 0);
	for (; table->from; table++)
	{
		Datum		values[3];
		bool		nulls[3] = {false, false, false};

		values[0] = CStringGetTextDatum(table->from);
		values[1] = CStringGetTextDatum(table->to);
		values[2] = CStringGetTextDatum(table->why);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	return (Datum) 0;
}

/* wfe.stage_transitions() */
Datum
wfe_stage_transitions(PG_FUNCTION_ARGS)
{
	return list_transitions(fcinfo, stage_transitions);
}

/* wfe.run_transitions() */
Datum
wfe_run_transitions(PG_FUNCTION_ARGS)
{
	return list_transitions(fcinfo, run_transitions);
}
