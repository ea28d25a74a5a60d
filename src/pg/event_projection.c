/*
 * event_projection.c — the event log's projection on the outbox: the AFTER
 * INSERT trigger wfe._project_event on wfe.events (71_outbox.sql).  While
 * wfe.publish_events is on, each event row becomes an outbox row for the
 * wfe.events exchange, routed by its type, and the publisher is woken
 * (docs/delivery.md "Event projection").
 *
 * C rather than PL/pgSQL because it runs for every event row, three a
 * step: the interpreter's call and its two statements cost more than the
 * row it writes.  The trigger's WHEN clause is the gate, not this
 * function: a row it turns away queues no after-trigger event at all.
 *
 * The body is built by jsonb_build_object, as 0.2.0's PL/pgSQL body built
 * it, so consumers see the same bytes: "at" in the session's TimeZone
 * (regress event_projection compares the two over odd rows and settings).
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "access/xact.h"
#include "catalog/pg_type.h"
#include "commands/trigger.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "utils/builtins.h"

#include "amqp/topology.h"
#include "bgw/bgw.h"
#include "spi_stmt.h"
#include "wfe.h"

/* The event row's columns the message carries, in the order of q_event's first parameters. */
static const char *const event_columns[] = {
	"event_id", "run_id", "tenant", "stage", "attempt", "type", "at", "detail"
};

#define N_EVENT_COLUMNS lengthof(event_columns)

/* NB: every name qualified: the plan is kept for the session, whatever its search_path. */
static stmt q_event = STMT(
	"INSERT INTO wfe.outbox (tenant, run_id, stage, attempt, kind, exchange, routing_key,"
	"                        message_id, body)"
	" VALUES ($3, $2, $4, $5, 'event', $9, $6, $10,"
	"         pg_catalog.jsonb_build_object('event_id', $1, 'run_id', $2, 'tenant', $3,"
	"                                       'stage', $4, 'attempt', $5, 'type', $6,"
	"                                       'at', $7, 'detail', $8))",
	10, I8, I8, TX, TX, I4, TX, TIMESTAMPTZOID, JSONBOID, TX, UUIDOID);

PG_FUNCTION_INFO_V1(wfe_project_event);

/* wfe._project_event() RETURNS trigger: copy the inserted event row to the outbox. */
Datum
wfe_project_event(PG_FUNCTION_ARGS)
{
	TriggerData *trigger = (TriggerData *) fcinfo->context;
	TupleDesc	desc;
	Datum		v[N_EVENT_COLUMNS + 2];
	char		n[N_EVENT_COLUMNS + 2 + 1];

	if (!CALLED_AS_TRIGGER(fcinfo) || !TRIGGER_FIRED_AFTER(trigger->tg_event) ||
		!TRIGGER_FIRED_FOR_ROW(trigger->tg_event) || !TRIGGER_FIRED_BY_INSERT(trigger->tg_event))
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("wfe._project_event must be fired AFTER INSERT FOR EACH ROW")));

	/*
	 * By name: the row comes in the format of the partition it went to, and
	 * a partition attached from another table may place its columns
	 * differently.
	 */
	desc = RelationGetDescr(trigger->tg_relation);
	for (int c = 0; c < (int) N_EVENT_COLUMNS; c++)
	{
		int			att = SPI_fnumber(desc, event_columns[c]);
		bool		isnull;

		if (att <= 0)
			elog(ERROR, "wfe: %s has no column \"%s\"",
				 RelationGetRelationName(trigger->tg_relation), event_columns[c]);
		v[c] = heap_getattr(trigger->tg_trigtuple, att, desc, &isnull);
		n[c] = isnull ? 'n' : ' ';
	}
	if (n[0] == 'n')
		elog(ERROR, "wfe: an event without an event_id"); /* an identity column */
	v[N_EVENT_COLUMNS] = CStringGetTextDatum(wfe_topology_exchange("event"));
	v[N_EVENT_COLUMNS + 1] = wfe_event_message_id(DatumGetInt64(v[0]));
	n[N_EVENT_COLUMNS] = n[N_EVENT_COLUMNS + 1] = ' ';
	n[N_EVENT_COLUMNS + 2] = '\0';

	SPI_connect();
	stmt_run(&q_event, v, n);
	SPI_finish();
	wfe_wake_at(GetCurrentTransactionStartTimestamp());	/* wfe._wake(now()): a message to publish */
	return PointerGetDatum(NULL);
}
