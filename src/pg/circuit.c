/*
 * circuit.c — circuit breakers at the claim and where attempts end
 * (operations.md "Flow control"; the decisions: src/core/flow/circuit.c).
 *
 * A queue's circuit is a row of wfe.circuits.  The claim (claim.c) asks
 * wfe_circuit_claim_room how many of its room may go: the row is locked
 * until the claim commits (claims of a queue with a circuit take turns), so
 * exactly one claim gets the half-open probe; wfe_circuit_claim_done writes
 * the state back with the probe's task (run and stage: one attempt of a
 * stage is out at a time), giving the probe back when nothing was claimed
 * with it.
 * Work an open circuit holds back is not touched: it stays queued, the
 * claim returns nothing without reading it, and dashboard_stuck shows why.
 * When a circuit opens, the background worker's timer is set for its half
 * opening; wfe._half_open_circuits (the worker's round) half opens it and
 * wakes the queue's pollers.  Nothing polls.
 *
 * An attempt's end is counted by wfe_circuit_attempt_ended, which the C
 * trigger counting attempts for wfe.metrics calls (metrics.c): it tells
 * the core whether the attempt is the probe's task, since only the probe's
 * own end decides a half-open circuit (an attempt released before the
 * circuit opened may end meanwhile).  Whether a
 * queue has a circuit at all is a list in backend memory (flow_cache.c):
 * a queue without one pays no statement at its claims or its attempts' ends.
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"

#include "core/flow/circuit.h"
#include "admission.h"
#include "spi_stmt.h"
#include "bgw/bgw.h"
#include "wfe.h"

#define TS TIMESTAMPTZOID
#define MS_US 1000

#define CIRCUIT_COLS \
	"c.failure_ratio, c.min_calls, c.window_ms, c.open_ms, c.state, c.since, c.probe_out," \
	" c.win_start, c.calls, c.failures, c.prev_calls, c.prev_failures, c.probe_run_id, c.probe_stage"

static stmt q_circuit = STMT(
	"SELECT " CIRCUIT_COLS " FROM wfe.circuits AS c WHERE c.queue = $1 FOR NO KEY UPDATE", 1, TX);
static stmt q_circuit_set = STMT(
	"UPDATE wfe.circuits AS c SET state = $2, since = $3, probe_out = $4, win_start = $5,"
	"       calls = $6, failures = $7, prev_calls = $8, prev_failures = $9,"
	"       probe_run_id = $10, probe_stage = $11"
	" WHERE c.queue = $1", 11, TX, TX, TS, BO, TS, I4, I4, I4, I4, I8, TX);
static stmt q_circuit_event = STMT(
	"SELECT wfe._circuit_event($1, $2)", 2, TX, TX);
static stmt q_due_open = STMT(
	"SELECT c.queue FROM wfe.circuits AS c"
	" WHERE c.state = 'open' AND c.since + c.open_ms * interval '1 millisecond' <= now()"
	" ORDER BY c.queue FOR NO KEY UPDATE SKIP LOCKED", 0);
static stmt q_next_open = STMT(
	"SELECT min(c.since + c.open_ms * interval '1 millisecond') FROM wfe.circuits AS c"
	" WHERE c.state = 'open'", 0);

/* The half-open probe's task while it is out (no run: none is out). */
typedef struct probe_task
{
	int64		run_id;
	char	   *stage;
} probe_task;

/* The circuit the current claim locked: its queue, configuration, state and probe. */
static struct
{
	bool		active;
	char	   *queue;
	wfe_circuit_conf conf;
	wfe_circuit c;
	probe_task	probe;
	int			granted;
} claim_circuit;

/* Read the locked circuit row of queue into conf, c and probe; false when the queue has none. */
static bool
circuit_load(const char *queue, wfe_circuit_conf *conf, wfe_circuit *c, probe_task *probe)
{
	Datum		v[1] = {CStringGetTextDatum(queue)};
	HeapTuple	t;
	TupleDesc	d;
	bool		isnull;
	char	   *state;

	stmt_run(&q_circuit, v, NULL);
	if (SPI_processed == 0)
		return false;
	t = SPI_tuptable->vals[0];
	d = SPI_tuptable->tupdesc;
	conf->failure_ratio = DatumGetFloat8(SPI_getbinval(t, d, 1, &isnull));
	conf->min_calls = DatumGetInt32(SPI_getbinval(t, d, 2, &isnull));
	conf->window_us = (int64) DatumGetInt32(SPI_getbinval(t, d, 3, &isnull)) * MS_US;
	conf->open_us = (int64) DatumGetInt32(SPI_getbinval(t, d, 4, &isnull)) * MS_US;
	state = SPI_getvalue(t, d, 5);
	c->state = strcmp(state, "open") == 0 ? WFE_CIRCUIT_OPEN
		: strcmp(state, "half_open") == 0 ? WFE_CIRCUIT_HALF_OPEN : WFE_CIRCUIT_CLOSED;
	c->since_us = DatumGetTimestampTz(SPI_getbinval(t, d, 6, &isnull));
	c->probe_out = DatumGetBool(SPI_getbinval(t, d, 7, &isnull));
	c->win_start_us = DatumGetTimestampTz(SPI_getbinval(t, d, 8, &isnull));
	c->calls = DatumGetInt32(SPI_getbinval(t, d, 9, &isnull));
	c->failures = DatumGetInt32(SPI_getbinval(t, d, 10, &isnull));
	c->prev_calls = DatumGetInt32(SPI_getbinval(t, d, 11, &isnull));
	c->prev_failures = DatumGetInt32(SPI_getbinval(t, d, 12, &isnull));
	probe->run_id = DatumGetInt64(SPI_getbinval(t, d, 13, &isnull));
	if (isnull)
		probe->run_id = 0;
	probe->stage = SPI_getvalue(t, d, 14);
	return true;
}

/*
 * Write c back to queue's row with the probe's task (kept only while the
 * probe is out), log the change's event, and set the timer for a half
 * opening.
 */
static void
circuit_store(const char *queue, const wfe_circuit_conf *conf, const wfe_circuit *c,
			  const probe_task *probe, wfe_circuit_change change)
{
	bool		out = c->probe_out && probe != NULL && probe->stage != NULL;
	Datum		v[11] = {CStringGetTextDatum(queue),
		CStringGetTextDatum(wfe_circuit_state_name(c->state)),
		TimestampTzGetDatum(c->since_us), BoolGetDatum(c->probe_out),
		TimestampTzGetDatum(c->win_start_us), Int32GetDatum(c->calls),
		Int32GetDatum(c->failures), Int32GetDatum(c->prev_calls),
		Int32GetDatum(c->prev_failures),
		out ? Int64GetDatum(probe->run_id) : (Datum) 0,
	out ? CStringGetTextDatum(probe->stage) : (Datum) 0};

	stmt_run(&q_circuit_set, v, out ? "           " : "         nn");
	if (change == WFE_CIRCUIT_OPENED || change == WFE_CIRCUIT_HALF_OPENED || change == WFE_CIRCUIT_CLOSED_AGAIN)
	{
		const char *type = change == WFE_CIRCUIT_OPENED ? "circuit.opened"
			: change == WFE_CIRCUIT_HALF_OPENED ? "circuit.half_open" : "circuit.closed";
		Datum		e[2] = {CStringGetTextDatum(queue), CStringGetTextDatum(type)};

		stmt_run(&q_circuit_event, e, NULL);
	}
	if (change == WFE_CIRCUIT_OPENED)
		wfe_wake_at(wfe_circuit_half_open_at(c, conf));
}

/*
 * How many of room attempts a claim from queue may take: room without a
 * circuit.  The circuit's row stays locked until the claim commits; the
 * caller must call wfe_circuit_claim_done with what it claimed (inside the
 * same SPI connection).
 */
int
wfe_circuit_claim_room(const char *queue, int room)
{
	wfe_circuit_change change;
	int			allowed;

	claim_circuit.active = false;
	if (room <= 0 || !wfe_queue_has_circuit(queue) ||
		!circuit_load(queue, &claim_circuit.conf, &claim_circuit.c, &claim_circuit.probe))
		return room;
	allowed = wfe_circuit_admit(&claim_circuit.c, &claim_circuit.conf, GetCurrentTimestamp(),
								room, &change);
	if (change != WFE_CIRCUIT_SAME)
		circuit_store(queue, &claim_circuit.conf, &claim_circuit.c, &claim_circuit.probe, change);
	claim_circuit.active = allowed > 0 && claim_circuit.c.state == WFE_CIRCUIT_HALF_OPEN;
	claim_circuit.queue = pstrdup(queue);
	claim_circuit.granted = allowed;
	return allowed;
}

/*
 * The claim took claimed attempts, the last of them run_id's stage: when
 * the circuit is half open that one is the probe, whose end alone decides
 * (kept in the row); a probe the claim did not use is given back.
 */
void
wfe_circuit_claim_done(int claimed, int64 run_id, const char *stage)
{
	if (!claim_circuit.active)
		return;
	claim_circuit.active = false;
	if (claimed == 0)
		claim_circuit.c.probe_out = false;
	claim_circuit.probe.run_id = run_id;
	claim_circuit.probe.stage = claimed > 0 ? pstrdup(stage) : NULL;
	circuit_store(claim_circuit.queue, &claim_circuit.conf, &claim_circuit.c, &claim_circuit.probe,
				  WFE_CIRCUIT_SAME);
}

/*
 * The attempt of run_id's stage on queue ended as state says (completed,
 * failed, retry_scheduled, timed_out or cancelled): its circuit, if it has
 * one, counts it and may open, close or open again -- half open, only when
 * it is the probe's task.  Called by the attempts' counting trigger
 * (metrics.c) inside its SPI connection.
 */
void
wfe_circuit_attempt_ended(const char *queue, int64 run_id, const char *stage, const char *state)
{
	wfe_circuit_conf conf;
	wfe_circuit c;
	probe_task	probe;
	wfe_circuit_outcome outcome;
	wfe_circuit_change change;

	if (!wfe_queue_has_circuit(queue) || !circuit_load(queue, &conf, &c, &probe))
		return;
	outcome = strcmp(state, "completed") == 0 ? WFE_CIRCUIT_SUCCEEDED
		: strcmp(state, "cancelled") == 0 ? WFE_CIRCUIT_CANCELLED : WFE_CIRCUIT_FAILED;
	change = wfe_circuit_record(&c, &conf, GetCurrentTimestamp(), outcome,
								probe.stage != NULL && probe.run_id == run_id &&
								strcmp(probe.stage, stage) == 0);
	/* a cancelled attempt that was not the probe changed nothing: no write */
	if (outcome == WFE_CIRCUIT_CANCELLED && change == WFE_CIRCUIT_SAME)
		return;
	circuit_store(queue, &conf, &c, &probe, change);
	/*
	 * closed again, or the probe given back: what the circuit held back may
	 * go now (a broker queue's: the worker's next round)
	 */
	if (change == WFE_CIRCUIT_CLOSED_AGAIN || change == WFE_CIRCUIT_PROBE_BACK)
	{
		wfe_ready_released(queue);
		wfe_admission_recheck_queue(queue);
	}
}

PG_FUNCTION_INFO_V1(wfe_half_open_circuits);

/*
 * wfe._half_open_circuits() RETURNS int: the background worker's round
 * half opens the open circuits whose open_ms has passed, wakes their
 * queues' pollers (one of them takes the probe), and sets its timer for
 * the next; returns how many.
 */
Datum
wfe_half_open_circuits(PG_FUNCTION_ARGS)
{
	int			n;
	char	  **queues;

	SPI_connect();
	stmt_run(&q_due_open, NULL, NULL);
	n = (int) SPI_processed;
	queues = palloc(sizeof(char *) * Max(n, 1));
	for (int k = 0; k < n; k++)
		queues[k] = SPI_getvalue(SPI_tuptable->vals[k], SPI_tuptable->tupdesc, 1);
	for (int k = 0; k < n; k++)
	{
		wfe_circuit_conf conf;
		wfe_circuit c;
		probe_task	probe;

		if (!circuit_load(queues[k], &conf, &c, &probe))
			continue;
		circuit_store(queues[k], &conf, &c, &probe, wfe_circuit_tick(&c, &conf, GetCurrentTimestamp()));
		wfe_ready_released(queues[k]);
		/* a broker queue's held tasks: the first is the probe (admission.c) */
		wfe_admission_release_queue(queues[k]);
	}
	stmt_run(&q_next_open, NULL, NULL);
	{
		bool		isnull;
		Datum		next = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);

		if (!isnull)
			wfe_wake_at(DatumGetTimestampTz(next));
	}
	SPI_finish();
	PG_RETURN_INT32(n);
}
