/*
 * transitions.c — the legal state transitions of stages and runs, and the
 * triggers that refuse every other one.
 *
 * The tables in core/engine/states.c are the single source of truth: the triggers consult
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
#include "executor/spi.h"

#include "core/engine/states.h"

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

/*
 * Shared body of the two AFTER UPDATE triggers.  AFTER, not BEFORE: a
 * BEFORE ROW UPDATE trigger makes the executor lock the row before the
 * update (GetTupleForTrigger), a Heap/LOCK WAL record and a buffer lock
 * more on every state change of every stage and run; an error raised here
 * aborts the statement all the same.
 */
static Datum
guard_state(FunctionCallInfo fcinfo, const wfe_transition *table, const char *what)
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
	bool		legal;

	if (!CALLED_AS_TRIGGER(fcinfo) || !TRIGGER_FIRED_BY_UPDATE(trigdata->tg_event) ||
		!TRIGGER_FIRED_FOR_ROW(trigdata->tg_event))
		elog(ERROR, "%s state guard must be a row-level UPDATE trigger", what);

	desc = RelationGetDescr(trigdata->tg_relation);
	attno = state_attno(desc);
	olddatum = heap_getattr(trigdata->tg_trigtuple, attno, desc, &oldnull);
	newdatum = heap_getattr(trigdata->tg_newtuple, attno, desc, &newnull);
	/* the NOT NULL constraints refuse a NULL state before this runs */
	if (oldnull || newnull)
		ereport(ERROR,
				(errcode(ERRCODE_NOT_NULL_VIOLATION),
				 errmsg("%s state must not be null", what),
				 errhint("See wfe.%s_transitions() for the states a %s may move to.", what, what)));
	from = TextDatumGetCString(olddatum);
	to = TextDatumGetCString(newdatum);
	if (table == wfe_stage_transition_table)
	{
		/* a few transitions are a wait's or a sleep's only: the row's kind says */
		int			kattno = SPI_fnumber(desc, "kind");
		bool		knull;
		Datum		kind = kattno > 0 ? heap_getattr(trigdata->tg_newtuple, kattno, desc, &knull) : (Datum) 0;

		if (kattno <= 0 || knull)
			elog(ERROR, "wfe.run_stages has no kind");
		legal = wfe_stage_transition_legal(TextDatumGetCString(kind), from, to);
	}
	else
		legal = wfe_transition_legal(table, from, to);
	if (!legal)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("illegal %s transition from %s to %s", what, from, to),
				 errhint("See wfe.%s_transitions() for the legal transitions.", what)));
	return PointerGetDatum(trigdata->tg_newtuple);	/* an AFTER trigger's is ignored */
}

PG_FUNCTION_INFO_V1(wfe_stage_row_ok);

/*
 * wfe._stage_row_ok(kind, state, attempt, fence, outcome, skip_reason):
 * wfe.run_stages' one CHECK constraint.  One call rather than six CHECKs
 * with IN lists, because the executor rebuilds every CHECK expression of a
 * table from its stored text for each statement that writes it, and
 * run_stages is written by every step.  NULLs in the NOT NULL columns pass
 * (their constraints refuse them).
 */
Datum
wfe_stage_row_ok(PG_FUNCTION_ARGS)
{
	char	   *outcome = PG_ARGISNULL(4) ? NULL : TextDatumGetCString(PG_GETARG_DATUM(4));
	char	   *skip = PG_ARGISNULL(5) ? NULL : TextDatumGetCString(PG_GETARG_DATUM(5));

	for (int k = 0; k < 4; k++)
		if (PG_ARGISNULL(k))
			PG_RETURN_BOOL(true);
	PG_RETURN_BOOL(wfe_stage_row_valid(TextDatumGetCString(PG_GETARG_DATUM(0)),
									   TextDatumGetCString(PG_GETARG_DATUM(1)),
									   PG_GETARG_INT32(2), PG_GETARG_INT64(3), outcome, skip));
}

PG_FUNCTION_INFO_V1(wfe_stage_state_guard);
PG_FUNCTION_INFO_V1(wfe_run_state_guard);
PG_FUNCTION_INFO_V1(wfe_stage_transitions);
PG_FUNCTION_INFO_V1(wfe_run_transitions);

/* Trigger on wfe.run_stages: refuse illegal stage transitions. */
Datum
wfe_stage_state_guard(PG_FUNCTION_ARGS)
{
	return guard_state(fcinfo, wfe_stage_transition_table, "stage");
}

/* Trigger on wfe.runs: refuse illegal run transitions. */
Datum
wfe_run_state_guard(PG_FUNCTION_ARGS)
{
	return guard_state(fcinfo, wfe_run_transition_table, "run");
}

/* A transition table as rows (from_state, to_state, meaning). */
static Datum
list_transitions(FunctionCallInfo fcinfo, const wfe_transition *table)
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
	return list_transitions(fcinfo, wfe_stage_transition_table);
}

/* wfe.run_transitions() */
Datum
wfe_run_transitions(PG_FUNCTION_ARGS)
{
	return list_transitions(fcinfo, wfe_run_transition_table);
}
