/*
 * engine.c — the server layer of the run engine.
 *
 * Every transition of a run comes through here: a worker's callback (its
 * report about an attempt), a
 * run's start, a timer, an expired deadline, an in-database action's
 * result, a cancel.  This file takes the locks (the run row, then the one
 * stage row a claimer could be taking), hands the step core (core/engine/step.c)
 * the run plan (cached per backend: plans never change, but the extension
 * may be dropped and created again -- see "Staleness") and the rows it
 * asks for, and writes the effects the core returns with prepared
 * statements.  It decides nothing about routing itself.
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "access/xact.h"
#include "catalog/namespace.h"
#include "commands/async.h"
#include "common/pg_prng.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/hsearch.h"
#include "utils/inval.h"
#include "utils/jsonb.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "core/lang/compile.h"
#include "core/engine/runplan.h"
#include "core/engine/step.h"
#include "admission.h"
#include "child.h"
#include "deadline.h"
#include "dispatch.h"
#include "map.h"
#include "core/flow/concurrency.h"
#include "spi_stmt.h"
#include "bgw/bgw.h"
#include "wfe.h"

/*
 * What a step reads of its run, with its lock.  The context comes along as
 * jsonb, read into text only if the step binds an input (io_context): a
 * statement less on every step that releases a stage.
 */
#define RUN_COLS "SELECT r.tenant, r.workflow, r.version, r.execution_context, r.intent, r.state," \
	" r.finished_at IS NOT NULL, r.definition_id, r.context FROM wfe.runs AS r WHERE r.run_id = $1"
static stmt q_lock_run = STMT(RUN_COLS " FOR NO KEY UPDATE", 1, I8);
/*
 * a run this transaction just inserted (wfe.submit): no other transaction
 * can see it before commit, so there is nothing to lock -- and locking our
 * own new row would only cost a WAL record
 */
static stmt q_read_new_run = STMT(RUN_COLS, 1, I8);
static stmt q_lock_run_skip = STMT(RUN_COLS " FOR NO KEY UPDATE SKIP LOCKED", 1, I8);
static stmt q_plan = STMT(
	"SELECT d.plan::text FROM wfe.definitions AS d WHERE d.definition_id = $1", 1, I8);
/* its schemas, and what runs it (the result cache keys on both: cache.c) */
static stmt q_contract = STMT(
	"SELECT c.input_schema::text, c.output_schema::text,"
	"       CASE WHEN c.handler IS NOT NULL"
	"            THEN 'handler:' || coalesce(pg_catalog.format('%I.%I(%s)', n.nspname, p.proname,"
	"                                           pg_catalog.pg_get_function_identity_arguments(p.oid)),"
	"                                        c.handler::oid::text)"
	"            ELSE 'queue:' || c.queue END"
	"  FROM wfe.contracts AS c"
	"  LEFT JOIN pg_catalog.pg_proc AS p ON p.oid = c.handler"
	"  LEFT JOIN pg_catalog.pg_namespace AS n ON n.oid = p.pronamespace"
	" WHERE c.ref = $1", 1, TX);
#define ROW_COLS "st.state, st.attempt, st.fence, st.outcome, st.branch, st.awaits," \
	" st.handler IS NOT NULL, st.queue, (st.result -> 'arrivals')::text, st.cache_key"
static stmt q_row = STMT(
	"SELECT " ROW_COLS " FROM wfe.run_stages AS st WHERE st.run_id = $1 AND st.stage = $2", 2, I8, TX);
static stmt q_row_lock = STMT(
	"SELECT " ROW_COLS " FROM wfe.run_stages AS st WHERE st.run_id = $1 AND st.stage = $2 FOR UPDATE", 2, I8, TX);
/*
 * a stage's row and the rows of the stages its success leads to (io_load):
 * one probe of the primary key per name (st.stage = ANY ($2) would be a
 * filter over all the run's rows in the generic plan: a map's elements)
 */
static stmt q_rows = STMT(
	"SELECT r.* FROM unnest($2::text[]) AS a(stage)"
	" CROSS JOIN LATERAL (SELECT " ROW_COLS ", st.stage FROM wfe.run_stages AS st"
	"                      WHERE st.run_id = $1 AND st.stage = a.stage LIMIT 1) AS r",
	2, I8, TEXTARRAYOID);
static stmt q_result = STMT(
	"SELECT st.result::text FROM wfe.run_stages AS st WHERE st.run_id = $1 AND st.stage = $2", 2, I8, TX);
static stmt q_same = STMT(
	"SELECT (CASE WHEN $3 THEN st.result ELSE st.error END) = $4::jsonb"
	" FROM wfe.run_stages AS st WHERE st.run_id = $1 AND st.stage = $2", 4, I8, TX, BO, TX);
static stmt q_output = STMT(
	"SELECT o.value::text FROM wfe.outputs AS o WHERE o.run_id = $1 AND o.task = $2 AND o.key = $3",
3, I8, TX, TX);
/* a step's events, in order, in one statement */
static stmt q_events = STMT(
	"INSERT INTO wfe.events (run_id, tenant, stage, attempt, type, detail, fence)"
	" SELECT $1, $2, e.stage, e.attempt, e.type, e.detail::jsonb, e.fence"
	"   FROM unnest($3::text[], $4::int[], $5::text[], $6::text[], $7::int8[])"
	"        WITH ORDINALITY AS e(stage, attempt, type, detail, fence, n)"
	"  ORDER BY e.n", 7, I8, TX, TEXTARRAYOID, INT4ARRAYOID, TEXTARRAYOID, TEXTARRAYOID, INT8ARRAYOID);
static stmt q_enqueue = STMT(
	"UPDATE wfe.run_stages AS st"
	"   SET state = 'queued', attempt = CASE WHEN $3 THEN st.attempt + 1 ELSE st.attempt END,"
	"       fence = $5, input = coalesce($4::jsonb, st.input), outcome = NULL, error = NULL,"
	"       cache_key = coalesce($6, st.cache_key), cache = CASE WHEN $6 IS NOT NULL THEN 'miss' ELSE st.cache END,"
	"       ready_at = now(), claimed_by = NULL, started_at = NULL, heartbeat_at = NULL, lease_ms = NULL,"
	"       deadline_at = CASE WHEN st.queue_ms IS NOT NULL"
	"                          THEN now() + make_interval(secs => st.queue_ms / 1000.0) END,"
	/* a rate limit that is not configured holds the attempt until it is (78_rate_limits.sql) */
	"       held_until = CASE WHEN st.rate_limit IS NOT NULL AND NOT EXISTS"
	"                              (SELECT 1 FROM wfe.rate_limits AS l WHERE l.name = st.rate_limit)"
	"                         THEN 'infinity'::timestamptz END,"
	"       rate_key = coalesce($7, st.rate_key),"
	/* keyed concurrency's key; a long one as its digest (src/core/flow/concurrency.h) */
	"       concurrency_key = coalesce(" WFE_SQL_CONCURRENCY_KEY("$8") ", st.concurrency_key),"
	"       concurrency_max = coalesce($9, st.concurrency_max),"
	/* run_stages_fair has the tasks of fair queues only (fairness.c) */
	"       fair = EXISTS (SELECT 1 FROM wfe.queues AS q WHERE q.queue = st.queue AND q.fairness = 'tenant')"
	" WHERE st.run_id = $1 AND st.stage = $2"
	/* and what after_enqueue() needs of its queue: no statement of its own */
	" RETURNING st.deadline_at, st.handler IS NOT NULL, st.queue,"
	"           (SELECT q.delivery = 'broker' FROM wfe.queues AS q WHERE q.queue = st.queue),"
	"           (SELECT q.paused FROM wfe.queues AS q WHERE q.queue = st.queue)",
	9, I8, TX, BO, TX, I8, TX, TX, TX, I4);
/* the result cache (cache.c): completed from an entry; waiting on an attempt in flight */
static stmt q_cache_hit = STMT(
	"UPDATE wfe.run_stages AS st"
	"   SET state = 'completed', outcome = 'completed', result = $3::jsonb, input = $4::jsonb, fence = $5,"
	"       error = NULL, cache_key = $6, cache = CASE WHEN $7 THEN 'coalesced' ELSE 'hit' END,"
	"       ready_at = coalesce(st.ready_at, now()), started_at = now(), finished_at = now()"
	" WHERE st.run_id = $1 AND st.stage = $2", 7, I8, TX, TX, TX, I8, TX, BO);
static stmt q_cache_wait = STMT(
	"UPDATE wfe.run_stages AS st SET cache_key = $3, input = $4::jsonb, cache = 'waiting', ready_at = now()"
	" WHERE st.run_id = $1 AND st.stage = $2", 4, I8, TX, TX, TX);
static stmt q_stage_input = STMT(
	"SELECT st.input::text FROM wfe.run_stages AS st WHERE st.run_id = $1 AND st.stage = $2", 2, I8, TX);
static stmt q_resolve = STMT(
	"UPDATE wfe.run_stages AS st"
	"   SET state = $3, attempt = 1, fence = $8, outcome = $3, result = $4::jsonb, error = $5::jsonb,"
	"       branch = CASE WHEN $6 THEN $7 ELSE st.branch END,"
	"       started_at = coalesce(st.started_at, now()), finished_at = now()"
	" WHERE st.run_id = $1 AND st.stage = $2", 8, I8, TX, TX, TX, TX, BO, TX, I8);
static stmt q_bind_failed = STMT(
	"UPDATE wfe.run_stages AS st"
	"   SET state = 'failed', attempt = $5, fence = $4, outcome = 'failed',"
	"       error = $3::jsonb, finished_at = now()"
	" WHERE st.run_id = $1 AND st.stage = $2", 5, I8, TX, TX, I8, I4);
/* and whether the room it frees is limited (room_freed): no statement of its own */
static stmt q_complete = STMT(
	"UPDATE wfe.run_stages AS st"
	"   SET state = 'completed', outcome = 'completed', result = $3::jsonb, error = NULL,"
	"       finished_at = now(), deadline_at = NULL"
	" WHERE st.run_id = $1 AND st.stage = $2"
	" RETURNING " WFE_SQL_LIMITED("st.queue", "st.tenant"), 3, I8, TX, TX);
static stmt q_retry = STMT(
	"WITH s AS (UPDATE wfe.run_stages AS st"
	"              SET state = 'retry_scheduled', outcome = 'failed', error = $3::jsonb, deadline_at = NULL"
	"            WHERE st.run_id = $1 AND st.stage = $2 RETURNING st.tenant, st.attempt, st.fence)"
	" INSERT INTO wfe.timers (tenant, run_id, stage, attempt, fence, kind, due_at)"
	" SELECT s.tenant, $1, $2, s.attempt, s.fence, 'retry', now() + make_interval(secs => $4 / 1e6) FROM s", 4, I8, TX, TX, I8);
static stmt q_fail = STMT(
	"UPDATE wfe.run_stages AS st"
	"   SET state = $3, outcome = 'failed', error = $4::jsonb, finished_at = now(), deadline_at = NULL"
	" WHERE st.run_id = $1 AND st.stage = $2", 4, I8, TX, TX, TX);
static stmt q_dead_letter = STMT(
	"INSERT INTO wfe.dead_letters (tenant, run_id, stage, attempt, reason, error)"
	" VALUES ($3, $1, $2, $4, 'retries exhausted', $5::jsonb)", 5, I8, TX, TX, I4, TX);
static stmt q_time_out = STMT(
	"UPDATE wfe.run_stages AS st SET state = 'timed_out', fence = $3, deadline_at = NULL"
	" WHERE st.run_id = $1 AND st.stage = $2", 3, I8, TX, I8);
static stmt q_skip = STMT(
	"UPDATE wfe.run_stages AS st SET state = 'skipped', skip_reason = $3, finished_at = now()"
	" WHERE st.run_id = $1 AND st.stage = $2", 3, I8, TX, TX);
static stmt q_cancel = STMT(
	"UPDATE wfe.run_stages AS st"
	"   SET state = 'cancelled', fence = $4, finished_at = now(), error = $3::jsonb"
	" WHERE st.run_id = $1 AND st.stage = $2 RETURNING st.queue", 4, I8, TX, TX, I8);
static stmt q_cancel_message = STMT(
	"INSERT INTO wfe.outbox (tenant, run_id, stage, attempt, fence, kind, exchange, routing_key,"
	"                        message_id, body)"
	" SELECT $3, $1, $2, $4, $5, 'cancel', wfe._exchange('cancel'), wfe._routing_key('cancel', q.queue),"
	"        wfe._message_id($1, $2, $4, $5, 'cancel'),"
	"        jsonb_build_object('run_id', $1, 'stage', $2, 'attempt', $4, 'fence', $8, 'reason', $6)"
	"   FROM wfe.queues AS q WHERE q.queue = $7 AND q.delivery = 'broker'", 8, I8, TX, TX, I4, I8, TX, TX, I8);
static stmt q_branch = STMT(
	"UPDATE wfe.run_stages AS st SET branch = $3 WHERE st.run_id = $1 AND st.stage = $2", 3, I8, TX, TX);
static stmt q_arrivals = STMT(
	"UPDATE wfe.run_stages AS st SET result = $3::jsonb WHERE st.run_id = $1 AND st.stage = $2", 3, I8, TX, TX);
static stmt q_outputs_write = STMT(
	"INSERT INTO wfe.outputs (run_id, task, key, tenant, value)"
	" SELECT $1, $2, k, $3, $4::jsonb -> k FROM jsonb_array_elements_text($5::jsonb) AS x(k)"
	" ON CONFLICT DO NOTHING", 5, I8, TX, TX, TX, TX);
/*
 * An accepted broker attempt runs under the worker's lease like a claimed
 * one ($4, NULL: none): a worker that dies stops heartbeating, and the
 * attempt times out one lease later rather than at its execution deadline.
 */
static stmt q_accept = STMT(
	"UPDATE wfe.run_stages AS st"
	"   SET state = 'running', claimed_by = $3, started_at = now(), heartbeat_at = now(), lease_ms = $4,"
	"       deadline_at = now() + " WFE_SQL_WINDOW("$4")
	" WHERE st.run_id = $1 AND st.stage = $2 RETURNING st.deadline_at", 4, I8, TX, TX, I4);
/*
 * A heartbeat renews what the claim granted: the heartbeat window and the
 * claim's lease_ms, each from now, never past the execution deadline and
 * never earlier than the deadline already set.
 */
static stmt q_heartbeat = STMT(
	"UPDATE wfe.run_stages AS st"
	"   SET heartbeat_at = now(),"
	"       deadline_at = CASE WHEN st.heartbeat_ms IS NULL AND st.lease_ms IS NULL THEN st.deadline_at"
	"                          ELSE greatest(st.deadline_at,"
	"                                 least(" WFE_SQL_EXEC_END ", now() + " WFE_SQL_WINDOW("st.lease_ms") ")) END"
	" WHERE st.run_id = $1 AND st.stage = $2", 2, I8, TX);
static stmt q_intent = STMT(
	"UPDATE wfe.runs AS x SET intent = $2, reason = $3, output = $4::jsonb WHERE x.run_id = $1",
	4, I8, TX, TX, TX);
/* a wait or a sleep released: running with no worker, and its timer (wait_timeout, sleep) */
static stmt q_park = STMT(
	"UPDATE wfe.run_stages AS st"
	"   SET state = 'running', attempt = $3, fence = $4, input = coalesce($5::jsonb, st.input),"
	"       outcome = NULL, error = NULL, result = NULL, claimed_by = NULL, heartbeat_at = NULL, lease_ms = NULL,"
	"       deadline_at = NULL, finished_at = NULL, ready_at = now(), started_at = now()"
	" WHERE st.run_id = $1 AND st.stage = $2", 5, I8, TX, I4, I8, TX);
static stmt q_park_timer = STMT(
	"INSERT INTO wfe.timers (tenant, run_id, stage, attempt, fence, kind, due_at)"
	" VALUES ($3, $1, $2, $4, $5, $6, now() + make_interval(secs => $7 / 1e6))", 7, I8, TX, TX, I4, I8, TX, I8);
static stmt q_signal_taken = STMT(
	"UPDATE wfe.signals AS g SET stage = $2, taken_at = now() WHERE g.signal_id = $3", 3, I8, TX, I8);
/* the oldest signal buffered for this run under a name, past the ones this step took */
static stmt q_buffered = STMT(
	"SELECT g.signal_id, g.payload::text FROM wfe.signals AS g"
	" WHERE g.run_id = $1 AND g.signal = $2 AND g.taken_at IS NULL AND g.signal_id > $3"
	" ORDER BY g.signal_id LIMIT 1", 3, I8, TX, I8);
static stmt q_signal_keep = STMT(
	"INSERT INTO wfe.signals (tenant, run_id, signal, payload, idempotency_key, sent_by, stage, taken_at)"
	" VALUES ($2, $1, $3, $4::jsonb, $5, $6, $7, CASE WHEN $7 IS NOT NULL THEN now() END)", 7, I8, TX, TX, TX, TX, TX, TX);
static stmt q_sleep_due = STMT(
	"SELECT to_jsonb(t.due_at)::text FROM wfe.timers AS t"
	" WHERE t.run_id = $1 AND t.stage = $2 AND t.kind = 'sleep' AND t.attempt = $3 AND t.fence = $4"
	" ORDER BY t.timer_id DESC LIMIT 1", 4, I8, TX, I4, I8);
/* the run's pending timers can only do nothing now (but a task the run
 * does not wait for goes on after a completed intent) */
static stmt q_retire_timers = STMT(
	"UPDATE wfe.timers AS t SET fired_at = now()"
	" WHERE t.run_id = $1 AND t.fired_at IS NULL"
	"   AND NOT ($2 AND t.stage IN (SELECT st.stage FROM wfe.run_stages AS st"
	"                                WHERE st.run_id = $1 AND NOT st.awaits))", 2, I8, BO);
static stmt q_finalising = STMT(
	"UPDATE wfe.runs AS x SET state = 'finalising' WHERE x.run_id = $1 AND x.state = 'running'", 1, I8);
static stmt q_finish = STMT(
	"UPDATE wfe.runs AS x SET state = $2, finished_at = now(), reason = coalesce($3, x.reason)"
	" WHERE x.run_id = $1", 3, I8, TX, TX);
static stmt q_started = STMT(
	"SELECT EXISTS (SELECT 1 FROM wfe.events AS e WHERE e.run_id = $1 AND e.type = 'run.started')", 1, I8);
static stmt q_deadline = STMT(
	"SELECT to_jsonb(r.deadline_at)::text FROM wfe.runs AS r WHERE r.run_id = $1", 1, I8);
static stmt q_expiring = STMT(
	"SELECT st.state, st.deadline_at::text, to_jsonb(st.deadline_at)::text,"
	"       CASE WHEN st.state IN ('queued', 'dispatched') THEN 'queue'"
	"            WHEN st.heartbeat_ms IS NOT NULL"
	"                 AND st.heartbeat_at + make_interval(secs => st.heartbeat_ms / 1000.0) <= now()"
	"                 AND " WFE_SQL_EXEC_END " > now() THEN 'heartbeat'"
	"            ELSE 'execution' END"
	"  FROM wfe.run_stages AS st WHERE st.run_id = $1 AND st.stage = $2"
	"   AND st.state IN ('queued', 'dispatched', 'running') AND st.deadline_at <= now()"
	/*
	 * a stage row another transaction holds is passed over: that one moves
	 * the attempt, and a claim holds it before the run (claim.c), so
	 * waiting here, run held, could close a circle (docs/architecture.md
	 * "Lock order"); a deadline still due is the next round's
	 */
	"   FOR UPDATE SKIP LOCKED", 2, I8, TX);

/*
 * Who may call back about a stage is decided before any lock is taken
 * (callback()), from what never changes on its row: its tenant, queue and
 * handler, set when the run was submitted.  So the row is read without a
 * lock, and a caller who may not call back neither waits on another
 * tenant's run (an existence oracle) nor holds it while others wait.  The
 * queue's delivery mode comes with it: accept_task is for broker queues.
 */
#define GATE_COLS "st.tenant, st.queue, st.handler IS NOT NULL, coalesce(q.delivery, 'poll') = 'broker'" \
	"  FROM wfe.run_stages AS st LEFT JOIN wfe.queues AS q ON q.queue = st.queue"
static stmt q_gate = STMT("SELECT " GATE_COLS " WHERE st.run_id = $1 AND st.stage = $2", 2, I8, TX);
/*
 * ...and for a batch of reports (complete_tasks), in one statement: what it
 * reads never changes, so reading it for all before the first lock is the
 * same as reading it before each.  The LIMIT keeps each report an index
 * probe in the generic plan (a join would be hashed).
 */
static stmt q_gates = STMT(
	"SELECT b.n::int, g.* FROM unnest($1::int8[], $2::text[]) WITH ORDINALITY AS b(run_id, stage, n)"
	"  CROSS JOIN LATERAL (SELECT " GATE_COLS
	"                       WHERE st.run_id = b.run_id AND st.stage = b.stage LIMIT 1) AS g",
	2, INT8ARRAYOID, TEXTARRAYOID);

/* What the gate read of a stage's row (q_gate, q_gates). */
typedef struct gate_row
{
	bool		found;			/* false: no such run or stage */
	char	   *tenant;
	char	   *queue;
	bool		handler;
	bool		broker;
} gate_row;

/* a batch of reports, checked, in run_id then stage order (invalid ones first) */
static stmt q_reports = STMT(
	"SELECT x.n::int, x.ok,"
	"       CASE WHEN x.ok THEN (x.rep ->> 'run_id')::bigint END, CASE WHEN x.ok THEN x.rep ->> 'stage' END,"
	"       CASE WHEN x.ok THEN (x.rep ->> 'attempt')::int END, CASE WHEN x.ok THEN (x.rep ->> 'fence')::bigint END,"
	"       CASE WHEN x.ok THEN coalesce(x.rep -> 'result', '{}')::text END, left(x.rep::text, 200)"
	"  FROM (SELECT e.n, e.rep,"
	"               coalesce(jsonb_typeof(e.rep) = 'object'"
	"                        AND jsonb_typeof(e.rep -> 'run_id') = 'number'"
	"                        AND jsonb_typeof(e.rep -> 'stage') = 'string'"
	"                        AND jsonb_typeof(e.rep -> 'attempt') = 'number'"
	"                        AND jsonb_typeof(e.rep -> 'fence') = 'number', false) AS ok"
	"          FROM jsonb_array_elements($1) WITH ORDINALITY AS e(rep, n)) AS x"
	" ORDER BY x.ok, 3, 4, x.n", 1, JSONBOID);

/* ---------------------------------------------------------------------
 * Caches: run plans by definition, contracts by ref (both immutable,
 * within one life of the extension)
 * --------------------------------------------------------------------- */

typedef struct plan_entry
{
	int64		definition_id;
	wfe_run_plan *rp;
} plan_entry;

typedef struct contract_entry
{
	char		ref[256];
	struct json_object *input_schema;	/* NULL: none */
	struct json_object *output_schema;
	char	   *implementation;	/* queue:Q or handler:schema.fn(args); NULL: not registered */
	char	   *schemas;		/* the digest of its {input, output} schemas */
} contract_entry;

static HTAB *plan_cache;
static HTAB *contract_cache;

/*
 * Staleness.  The caches hold what wfe.definitions and wfe.contracts said,
 * and both are immutable -- until DROP EXTENSION wfe; CREATE EXTENSION wfe
 * starts them (and their ids) again, and a backend that lived through it
 * (the background worker, a pooled connection) would apply another
 * extension's plans to runs of the new one.  Dropping a table sends a
 * relcache invalidation for it to every backend at commit; one for either
 * table (or for every relation, after a sinval overflow) marks the caches
 * stale, and the next step empties them before it looks anything up
 * (caches_check).  An invalidation callback may not read catalogs, nor
 * free what a step in progress points to: hence the flag, and the tables'
 * OIDs remembered when the caches were (re)started.
 */
static Oid	cached_relids[2];	/* wfe.definitions, wfe.contracts */
static bool caches_stale = true;

/* Relcache callback: mark the caches stale when one of their tables changes. */
static void
caches_invalidate(Datum arg, Oid relid)
{
	if (!OidIsValid(relid) || relid == cached_relids[0] || relid == cached_relids[1])
		caches_stale = true;
}

/* At the start of a step: empty stale caches, and note the tables they now follow. */
static void
caches_check(void)
{
	static bool registered = false;
	HASH_SEQ_STATUS seq;
	Oid			nsp;

	if (!registered)
	{
		CacheRegisterRelcacheCallback(caches_invalidate, (Datum) 0);
		registered = true;
	}
	if (!caches_stale)
		return;
	caches_stale = false;
	if (plan_cache != NULL)
	{
		plan_entry *e;

		hash_seq_init(&seq, plan_cache);
		while ((e = hash_seq_search(&seq)) != NULL)
			wfe_run_plan_free(e->rp);
		hash_destroy(plan_cache);
		plan_cache = NULL;
	}
	if (contract_cache != NULL)
	{
		contract_entry *e;

		hash_seq_init(&seq, contract_cache);
		while ((e = hash_seq_search(&seq)) != NULL)
		{
			if (e->input_schema)
				wfe_json_free(e->input_schema);
			if (e->output_schema)
				wfe_json_free(e->output_schema);
			if (e->implementation)
				pfree(e->implementation);
			if (e->schemas)
				pfree(e->schemas);
		}
		hash_destroy(contract_cache);
		contract_cache = NULL;
	}
	/* looked up after the reset: an invalidation they bring marks us stale again */
	nsp = get_namespace_oid("wfe", true);
	cached_relids[0] = OidIsValid(nsp) ? get_relname_relid("definitions", nsp) : InvalidOid;
	cached_relids[1] = OidIsValid(nsp) ? get_relname_relid("contracts", nsp) : InvalidOid;
}

/* The run plan of a definition, built on first use. */
static const wfe_run_plan *
run_plan(int64 definition_id)
{
	plan_entry *e;
	bool		found;

	caches_check();
	if (plan_cache == NULL)
	{
		HASHCTL		ctl = {.keysize = sizeof(int64),.entrysize = sizeof(plan_entry)};

		plan_cache = hash_create("wfe run plans", 64, &ctl, HASH_ELEM | HASH_BLOBS);
	}
	e = hash_search(plan_cache, &definition_id, HASH_FIND, NULL);
	if (e == NULL)
	{
		Datum		v[1] = {Int64GetDatum(definition_id)};
		char		err[256];
		wfe_run_plan *rp;

		stmt_run(&q_plan, v, NULL);
		if (SPI_processed != 1)
			elog(ERROR, "wfe: definition %lld does not exist", (long long) definition_id);
		rp = wfe_run_plan_build(definition_id, stmt_col(1), err, sizeof(err));
		/* e.g. a plan stored by a wfe whose plans this one does not read */
		if (rp == NULL)
			ereport(ERROR,
					(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
					 errmsg("the stored plan of definition %lld cannot be run", (long long) definition_id),
					 errdetail("%s", err),
					 errhint("Create the workflow again under a new version with wfe.create_definition, "
							 "and submit runs to that one.")));
		e = hash_search(plan_cache, &definition_id, HASH_ENTER, &found);
		e->rp = rp;
	}
	return e->rp;
}

/* A parsed schema, or NULL for an empty one ({}: anything goes). */
static struct json_object *
parse_schema(const char *text)
{
	if (text == NULL || strcmp(text, "{}") == 0)
		return NULL;
	return wfe_json_parse(text);
}

/* The cached contract of a ref (NULL ref: none). */
static contract_entry *
contract(const char *ref)
{
	contract_entry *e;
	bool		found;
	char		key[256];

	if (ref == NULL)
		return NULL;
	if (contract_cache == NULL)
	{
		HASHCTL		ctl = {.keysize = sizeof(key),.entrysize = sizeof(contract_entry)};

		contract_cache = hash_create("wfe contracts", 64, &ctl, HASH_ELEM | HASH_STRINGS);
	}
	strlcpy(key, ref, sizeof(key));
	e = hash_search(contract_cache, key, HASH_FIND, NULL);
	if (e == NULL)
	{
		Datum		v[1] = {CStringGetTextDatum(ref)};
		struct json_object *in = NULL,
				   *out = NULL;
		char	   *impl = NULL,
				   *schemas = NULL;

		stmt_run(&q_contract, v, NULL);
		if (SPI_processed == 1)
		{
			in = parse_schema(stmt_col(1));
			out = parse_schema(stmt_col(2));
			impl = stmt_col(3) ? MemoryContextStrdup(TopMemoryContext, stmt_col(3)) : NULL;	/* NULL: a signal */
			schemas = MemoryContextStrdup(TopMemoryContext, wfe_cache_schemas_digest(stmt_col(1), stmt_col(2)));
		}
		e = hash_search(contract_cache, key, HASH_ENTER, &found);
		e->input_schema = in;
		e->output_schema = out;
		e->implementation = impl;
		e->schemas = schemas;
	}
	return e;
}

/* ---------------------------------------------------------------------
 * One step: the run under its lock, the core's I/O hooks (io_*)
 * --------------------------------------------------------------------- */

/* at most this many rows read with the one asked for (io_load) */
#define READ_AHEAD 4

typedef struct srv
{
	int64		run_id;
	wfe_run		run;
	const wfe_run_plan *rp;
	Datum		context_jsonb;	/* the run's context as its lock read it (SPI memory, as the run's columns) */
	bool		context_null;
	char	   *context;		/* ...as text, once the core asks */
	wfe_step_io io;
	int			lock_stage;		/* load this stage's row FOR UPDATE, or -1 */
	int			nahead;			/* rows read ahead (io_load), not yet asked for */
	int			ahead_stage[READ_AHEAD];
	wfe_row		ahead[READ_AHEAD];
	int			lease_ms;		/* accept_task's lease (0: none) */
	List	   *after;			/* child runs to start or cancel once the step is over (child.c) */
} srv;

/* The one step in progress; kept static so an error's leftovers are released next time. */
static wfe_step current_step;

/* Column c (1-based) of result row k as text, or NULL. */
static char *
row_col(uint64 k, int c)
{
	return SPI_getvalue(SPI_tuptable->vals[k], SPI_tuptable->tupdesc, c);
}

/* Fill *row from the first ten columns of result row k (see ROW_COLS). */
static void
fill_row(srv *s, wfe_row *row, uint64 k)
{
	char	   *outcome,
			   *branch,
			   *b;

	row->exists = 1;
	row->state = (wfe_state) wfe_state_from_name(row_col(k, 1));
	row->attempt = pg_strtoint32(row_col(k, 2));
	row->fence = pg_strtoint64(row_col(k, 3));
	outcome = row_col(k, 4);
	row->outcome = outcome == NULL ? 0 : strcmp(outcome, "completed") == 0 ? WFE_COMPLETED : WFE_FAILED;
	branch = row_col(k, 5);
	row->branch = branch ? wfe_run_plan_find(s->rp, branch) : -1;
	b = row_col(k, 6);
	row->awaits = b != NULL && b[0] == 't';
	b = row_col(k, 7);
	row->has_handler = b != NULL && b[0] == 't';
	row->queue = row_col(k, 8);
	row->arrivals = row_col(k, 9);
	row->cache_key = row_col(k, 10);
}

/* Add stage j to the stages read with another (io_load), once. */
static void
add_ahead(srv *s, int *stages, int *n, int j)
{
	if (j < 0 || *n >= READ_AHEAD + 1 || j == s->lock_stage)
		return;
	for (int k = 0; k < *n; k++)
		if (stages[k] == j)
			return;
	stages[(*n)++] = j;
}

/*
 * Load stage i's row.  A completion goes on to load the rows of the stages
 * its success leads to (to release them): those are read in the same
 * statement and kept until the core asks, which saves a statement on every
 * step that releases one.  Both reads are made under the run's lock, which
 * every writer of a row that is not queued holds; a queued row's claimer
 * may move it at any time, before a read as well as after.  The row to
 * lock (lock_stage) is read on its own, FOR UPDATE; rows read ahead
 * before that wait are dropped, so what the core asks for after it is
 * read afresh.
 */
static void
io_load(void *arg, int i, wfe_row *row)
{
	srv		   *s = arg;
	const wfe_rp_stage *st = &s->rp->stages[i];
	Datum		v[2] = {Int64GetDatum(s->run_id), CStringGetTextDatum(st->name)};
	int			stages[READ_AHEAD + 1];
	Datum		names[READ_AHEAD + 1];
	int			n = 0;

	if (i == s->lock_stage)
	{
		s->nahead = 0;
		stmt_run(&q_row_lock, v, NULL);
		if (SPI_processed != 1)
			row->exists = 0;
		else
			fill_row(s, row, 0);
		return;
	}
	for (int k = 0; k < s->nahead; k++)
		if (s->ahead_stage[k] == i)
		{
			*row = s->ahead[k];
			s->nahead--;
			s->ahead_stage[k] = s->ahead_stage[s->nahead];
			s->ahead[k] = s->ahead[s->nahead];
			return;
		}
	add_ahead(s, stages, &n, i);
	add_ahead(s, stages, &n, st->on_success);
	for (int k = 0; k < st->ndependents; k++)
		add_ahead(s, stages, &n, st->dependents[k]);
	for (int k = 0; k < n; k++)
		names[k] = CStringGetTextDatum(s->rp->stages[stages[k]].name);
	v[1] = PointerGetDatum(construct_array(names, n, TEXTOID, -1, false, TYPALIGN_INT));
	stmt_run(&q_rows, v, NULL);
	row->exists = 0;
	s->nahead = 0;
	for (uint64 r = 0; r < SPI_processed; r++)
	{
		int			j = wfe_run_plan_find(s->rp, row_col(r, 11));

		if (j == i)
			fill_row(s, row, r);
		else if (j >= 0 && s->nahead < READ_AHEAD)
		{
			memset(&s->ahead[s->nahead], 0, sizeof(wfe_row));
			s->ahead[s->nahead].branch = -1;
			fill_row(s, &s->ahead[s->nahead], r);
			s->ahead_stage[s->nahead++] = j;
		}
	}
}

static const char *
io_result(void *arg, int i)
{
	srv		   *s = arg;
	Datum		v[2] = {Int64GetDatum(s->run_id), CStringGetTextDatum(s->rp->stages[i].name)};

	stmt_run(&q_result, v, NULL);
	return SPI_processed == 1 ? stmt_col(1) : NULL;
}

static const char *
io_context(void *arg)
{
	srv		   *s = arg;

	if (s->context == NULL)
	{
		Jsonb	   *jb;

		if (s->context_null)
			return s->context = pstrdup("{}");
		/* as jsonb's output function writes it */
		jb = DatumGetJsonbP(s->context_jsonb);
		s->context = JsonbToCString(NULL, &jb->root, VARSIZE(jb));
	}
	return s->context;
}

static const char *
io_output(void *arg, const char *task, const char *key)
{
	srv		   *s = arg;
	Datum		v[3] = {Int64GetDatum(s->run_id), CStringGetTextDatum(task), CStringGetTextDatum(key)};

	stmt_run(&q_output, v, NULL);
	return SPI_processed == 1 ? stmt_col(1) : NULL;
}

static struct json_object *
io_input_schema(void *arg, int i)
{
	srv		   *s = arg;
	contract_entry *c;

	if (s->rp->stages[i].kind == WFE_K_WORKFLOW || s->rp->stages[i].item_workflow)
	{
		/* a child's context is bound against its definition's context_schema */
		int64		definition_id;
		char	   *version;

		if (!wfe_child_resolve(s->rp->stages[i].contract, &definition_id, &version))
			return NULL;
		return run_plan(definition_id)->context_schema;
	}
	c = contract(s->rp->stages[i].contract);
	return c ? c->input_schema : NULL;
}

/* A workflow stage's child: the version it would run, its depth and the limit. */
static void
io_child(void *arg, int i, wfe_child *c)
{
	srv		   *s = arg;
	int64		definition_id;
	char	   *version;

	c->version = wfe_child_resolve(s->rp->stages[i].contract, &definition_id, &version) ? version : NULL;
	c->depth = wfe_child_depth(s->run_id);
	c->max_depth = wfe_max_workflow_depth;
}

static struct json_object *
io_output_schema(void *arg, int i)
{
	srv		   *s = arg;
	contract_entry *c = contract(s->rp->stages[i].contract);

	return c ? c->output_schema : NULL;
}

static void
io_cache_entry(void *arg, int i, const char *input, wfe_cache_entry *e)
{
	srv		   *s = arg;
	contract_entry *c = contract(s->rp->stages[i].contract);

	wfe_cache_lookup(s->run.tenant, s->rp->stages[i].contract, c ? c->implementation : NULL,
					 c ? c->schemas : NULL, input, e);
}

static const char *
io_cache_leader(void *arg, const char *key)
{
	srv		   *s = arg;

	return wfe_cache_leader(s->run.tenant, key, s->run_id);
}

static const char *
io_buffered_signal(void *arg, const char *signal, int64_t after, int64_t *id)
{
	srv		   *s = arg;
	Datum		v[3] = {Int64GetDatum(s->run_id), CStringGetTextDatum(signal), Int64GetDatum(after)};

	stmt_run(&q_buffered, v, NULL);
	if (SPI_processed != 1)
		return NULL;
	*id = pg_strtoint64(stmt_col(1));
	return stmt_col(2);
}

/* Now, as microseconds since the Unix epoch (the step core's clock). */
static int64_t
io_now_us(void *arg)
{
	return (int64_t) GetCurrentTransactionStartTimestamp() +
		(int64_t) (POSTGRES_EPOCH_JDATE - UNIX_EPOCH_JDATE) * USECS_PER_DAY;
}

/* stage i's bound input; the element's, while the step is about one of map i's (map.c) */
static const char *
io_stage_input(void *arg, int i)
{
	srv		   *s = arg;
	/* the step's current element's, when it is about one */
	const char *name = i == current_step.elem_map && current_step.elem >= 0
		? wfe_map_element_name(s->rp->stages[i].name, current_step.elem) : s->rp->stages[i].name;
	Datum		v[2] = {Int64GetDatum(s->run_id), CStringGetTextDatum(name)};

	stmt_run(&q_stage_input, v, NULL);
	return SPI_processed == 1 ? stmt_col(1) : NULL;
}

/* Map elements (map.c): element elem of map stage i, NAME[elem] */
static void
io_load_element(void *arg, int i, int64_t elem, wfe_row *row)
{
	srv		   *s = arg;
	Datum		v[2] = {Int64GetDatum(s->run_id),
	CStringGetTextDatum(wfe_map_element_name(s->rp->stages[i].name, elem))};

	stmt_run(i == s->lock_stage ? &q_row_lock : &q_row, v, NULL);
	if (SPI_processed != 1)
	{
		row->exists = 0;
		return;
	}
	fill_row(s, row, 0);
}

static void
io_map_counts(void *arg, int i, wfe_map_counts *c)
{
	srv		   *s = arg;

	wfe_map_read_counts(s->run_id, s->rp->stages[i].name, c);
}

static const char *
io_map_results(void *arg, int i, int64_t elem, const char *elem_result)
{
	srv		   *s = arg;

	return wfe_map_results(s->run_id, s->rp->stages[i].ordinal, elem, elem_result);
}

static int64_t
io_map_cancelled(void *arg, int i, int64_t *out, int64_t max)
{
	srv		   *s = arg;

	return wfe_map_cancelled(s->run_id, s->rp->stages[i].ordinal, out, max);
}

/* io->map_held: the lowest held element of map stage i (map.c). */
static int64_t
io_map_held(void *arg, int i, int64_t below)
{
	srv		   *s = arg;

	return wfe_map_held(s->run_id, s->rp->stages[i].ordinal, below);
}

static int64_t
io_max_map_items(void *arg)
{
	return wfe_max_map_items;
}

/*
 * The plan index of a stage name; for a map element's name (NAME[i]) the
 * map's, with the step set on that element.  -1: none.
 */
static int
stage_index(srv *s, const char *name)
{
	int64_t		elem;
	int			i = wfe_map_element_of(s->rp, name, &elem);

	if (i >= 0)
	{
		wfe_step_element(&current_step, i, elem);
		return i;
	}
	return wfe_run_plan_find(s->rp, name);
}

static double
io_random(void *arg)
{
	return pg_prng_double(&pg_global_prng_state);
}

/* A fence's low half: from the strong source, since a fence is a capability. */
static uint32_t
io_fence_bits(void *arg)
{
	uint32		bits;

	if (!pg_strong_random(&bits, sizeof(bits)))
		ereport(ERROR,
				(errcode(ERRCODE_INTERNAL_ERROR),
				 errmsg("could not generate a random fence")));
	return bits;
}

/*
 * Lock the run and set up a step over it.  Returns false when there is no
 * such run (or, with skip_locked, when another transaction holds it).
 *
 * NB: the stage rows are read by statements of their own, after the lock:
 * a row joined to the locked run row in the locking statement would be the
 * version that statement's snapshot saw before it waited for the lock
 * (EvalPlanQual re-reads only the locked row), not what the lock's
 * previous holder committed (test/isolation/specs/complete-twice.spec).
 */
typedef enum run_lock
{
	LOCK_WAIT,					/* FOR NO KEY UPDATE */
	LOCK_SKIP,					/* ... SKIP LOCKED: another transaction decides */
	LOCK_NEW					/* the run was inserted by this transaction */
} run_lock;

static bool
begin(srv *s, int64 run_id, run_lock how)
{
	Datum		v[1] = {Int64GetDatum(run_id)};
	char	   *intent;

	memset(s, 0, sizeof(*s));
	s->run_id = run_id;
	s->lock_stage = -1;
	/* lock order everywhere: the run row first, then its stage rows */
	stmt_run(how == LOCK_SKIP ? &q_lock_run_skip : how == LOCK_NEW ? &q_read_new_run : &q_lock_run, v, NULL);
	if (SPI_processed != 1)
		return false;
	s->run.run_id = run_id;
	s->run.tenant = stmt_col(1);
	s->run.workflow = stmt_col(2);
	s->run.version = stmt_col(3);
	s->run.execution_context = stmt_col(4);
	intent = stmt_col(5);
	s->run.intent = intent ? wfe_run_state_from_name(intent) : -1;
	s->run.state = (wfe_run_state) wfe_run_state_from_name(stmt_col(6));
	s->run.finished = stmt_bool(7);
	s->context_jsonb = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 9, &s->context_null);
	s->rp = run_plan(pg_strtoint64(stmt_col(8)));
	s->io = (wfe_step_io) {
		.arg = s,.load = io_load,.result = io_result,.context = io_context,
		.output = io_output,
		.input_schema = io_input_schema,.random = io_random,.fence_bits = io_fence_bits,
		.output_schema = io_output_schema,.cache_entry = io_cache_entry,.cache_leader = io_cache_leader,
		.buffered_signal = io_buffered_signal,.now_us = io_now_us,.stage_input = io_stage_input,
		.child = io_child,
		.load_element = io_load_element,.map_counts = io_map_counts,.map_results = io_map_results,
		.map_cancelled = io_map_cancelled,.map_held = io_map_held,
		.max_map_items = io_max_map_items
	};
	wfe_step_begin(&current_step, s->rp, &s->run, &s->io);
	return true;
}

/* The step's events, written together at the end of apply(). */
typedef struct event_batch
{
	int			n;
	int			cap;
	Datum	   *stage;
	bool	   *stage_null;
	Datum	   *attempt;
	bool	   *attempt_null;
	Datum	   *type;
	Datum	   *detail;
	bool	   *detail_null;
	Datum	   *fence;
	bool	   *fence_null;
} event_batch;

/* Add an event to the batch; fence_null: it is about no fence (wfe.events.fence NULL). */
static void
add_event(event_batch *b, const char *stage, int attempt, const char *type, const char *detail,
		  int64 fence, bool fence_null)
{
	if (b->n == b->cap)
	{
		b->cap = b->cap ? b->cap * 2 : 8;
#define GROW(f, t) b->f = b->f ? repalloc(b->f, sizeof(t) * b->cap) : palloc(sizeof(t) * b->cap)
		GROW(stage, Datum);
		GROW(stage_null, bool);
		GROW(attempt, Datum);
		GROW(attempt_null, bool);
		GROW(type, Datum);
		GROW(detail, Datum);
		GROW(detail_null, bool);
		GROW(fence, Datum);
		GROW(fence_null, bool);
#undef GROW
	}
	b->stage_null[b->n] = stage == NULL;
	b->stage[b->n] = stage ? CStringGetTextDatum(stage) : (Datum) 0;
	b->attempt_null[b->n] = attempt <= 0;
	b->attempt[b->n] = Int32GetDatum(attempt);
	b->type[b->n] = CStringGetTextDatum(type);
	b->detail_null[b->n] = detail == NULL;
	b->detail[b->n] = detail ? CStringGetTextDatum(detail) : (Datum) 0;
	b->fence_null[b->n] = fence_null;
	b->fence[b->n] = Int64GetDatum(fence);
	b->n++;
}

static Datum
array_of(Datum *elems, bool *nulls, int n, Oid type)
{
	int			dims[1] = {n};
	int			lbs[1] = {1};

	if (type == INT4OID)
		return PointerGetDatum(construct_md_array(elems, nulls, 1, dims, lbs, INT4OID, 4, true, TYPALIGN_INT));
	if (type == INT8OID)
		return PointerGetDatum(construct_md_array(elems, nulls, 1, dims, lbs, INT8OID, 8, FLOAT8PASSBYVAL,
												  TYPALIGN_DOUBLE));
	return PointerGetDatum(construct_md_array(elems, nulls, 1, dims, lbs, TEXTOID, -1, false, TYPALIGN_INT));
}

/* Write the batch's events in one statement. */
static void
write_events(srv *s, event_batch *b)
{
	Datum		v[7];

	if (b->n == 0)
		return;
	v[0] = Int64GetDatum(s->run_id);
	v[1] = CStringGetTextDatum(s->run.tenant ? s->run.tenant : "");
	v[2] = array_of(b->stage, b->stage_null, b->n, TEXTOID);
	v[3] = array_of(b->attempt, b->attempt_null, b->n, INT4OID);
	v[4] = array_of(b->type, NULL, b->n, TEXTOID);
	v[5] = array_of(b->detail, b->detail_null, b->n, TEXTOID);
	v[6] = array_of(b->fence, b->fence_null, b->n, INT8OID);
	stmt_run(&q_events, v, NULL);
}

/* Write one event row. */
static void
write_event(srv *s, const char *stage, int attempt, const char *type, const char *detail, int64 fence)
{
	event_batch b;

	memset(&b, 0, sizeof(b));
	add_event(&b, stage, attempt, type, detail, fence, false);
	write_events(s, &b);
}

/*
 * Append one event about a run outside a step (wfe.ack_cancel's record,
 * cancel_ack.c), through the same writer as the step's events.
 */
void
wfe_engine_event(int64 run_id, const char *tenant, const char *stage, int attempt, const char *type,
				 const char *detail, int64 fence)
{
	srv			s;

	memset(&s, 0, sizeof(s));
	s.run_id = run_id;
	s.run.tenant = tenant;
	write_event(&s, stage, attempt, type, detail, fence);
}

/*
 * After a release (q_enqueue's row in SPI_tuptable): wake the worker for a
 * deadline or an action, dispatch, or notify pollers.
 */
static void
after_enqueue(srv *s, const char *stage)
{
	bool		isnull;
	Datum		deadline = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);
	bool		handler = stmt_bool(2);
	char	   *queue = stmt_col(3);

	if (!isnull)
		wfe_wake_at(DatumGetTimestampTz(deadline));	/* the queue deadline is a timer too */
	if (handler)
		wfe_wake_at(GetCurrentTimestamp());	/* an in-database action to run */
	else if (queue != NULL)
	{
		/* a queue without a row in wfe.queues is a poll queue, not paused */
		bool		broker = stmt_bool(4);
		bool		paused = stmt_bool(5);

		/* a paused queue keeps its tasks queued: dispatched or announced on resume */
		if (paused)
			return;
		if (broker)				/* its queue's max_in_flight and its tenant's max_tasks_in_flight may hold it */
			wfe_admission_dispatch(s->run_id, stage, queue, s->run.tenant ? s->run.tenant : "");
		else
			wfe_ready_released(queue);	/* poll workers that wait hear of it at commit */
	}
}

/* operator recovery (wfe._operate): a failed run reopened, a stage waiting again, an attempt fenced */
static stmt q_reopen = STMT(
	"UPDATE wfe.runs AS x SET state = 'running', intent = NULL, reason = NULL, finished_at = NULL, output = NULL"
	" WHERE x.run_id = $1", 1, I8);
static stmt q_reset = STMT(
	"UPDATE wfe.run_stages AS st"
	"   SET state = 'waiting', outcome = NULL, result = $3::jsonb, error = NULL, skip_reason = NULL,"
	"       cache_key = NULL, cache = NULL,"
	"       claimed_by = NULL, started_at = NULL, heartbeat_at = NULL, deadline_at = NULL, finished_at = NULL"
	" WHERE st.run_id = $1 AND st.stage = $2", 3, I8, TX, TX);
static stmt q_fence = STMT(
	"UPDATE wfe.run_stages AS st SET fence = $3"
	" WHERE st.run_id = $1 AND st.stage = $2 RETURNING st.queue", 3, I8, TX, I8);

/*
 * A task ended or left (completed, failed, retried later, timed out,
 * cancelled), its row written: room for the next queued one, if its queue
 * (max_in_flight) or its tenant (max_tasks_in_flight) is limited.  Broker:
 * the held tasks that now fit are dispatched; poll: the claimers waiting on
 * the queues concerned hear of it at commit (admission.c says which).
 */
static void
room_freed(srv *s, const wfe_op *op, const bool *limited)
{
	const char *queue;

	if (op->stage < 0 ||
		!(op->kind == WFE_OP_COMPLETE || op->kind == WFE_OP_FAIL || op->kind == WFE_OP_RETRY ||
		  op->kind == WFE_OP_TIME_OUT || op->kind == WFE_OP_CANCEL || op->kind == WFE_OP_MAP_CANCEL))
		return;
	/* an element's row may no longer be the step's: its queue is its map's item's (so are a map cancel's) */
	queue = op->elem >= 0 || op->kind == WFE_OP_MAP_CANCEL ? s->rp->stages[op->stage].item_queue :
		wfe_step_row(&current_step, op->stage)->queue;
	if (queue == NULL || (op->elem < 0 && wfe_step_row(&current_step, op->stage)->has_handler))
		return;
	wfe_admission_room_freed(queue, s->run.tenant ? s->run.tenant : "", limited);
}

/* Is op about an attempt a child run carries (a workflow stage, an element of a map of child runs)? */
static bool
op_runs_child(const srv *s, const wfe_op *op)
{
	const wfe_rp_stage *st = &s->rp->stages[op->stage];

	return st->kind == WFE_K_WORKFLOW || (op->elem >= 0 && st->item_workflow);
}

/*
 * An element its map's end cancelled (map.c): its stage.cancelled event, as
 * the core writes a stage's (step.c, the intent's cancels), in the step's
 * batch; its fence column names the attempt asked to stop (ack_cancel).
 */
static void
element_cancelled(void *arg, const char *stage, int attempt, int64 fence, const char *was)
{
	bool		asked = strcmp(was, "dispatched") == 0 || strcmp(was, "running") == 0;

	add_event((event_batch *) arg, stage, attempt, "stage.cancelled",
			  psprintf("{\"was\": \"%s\", \"cancel_requested\": %s}", was, asked ? "true" : "false"),
			  fence, false);
}

/* Write the effects the core decided, in order. */
static void
apply(srv *s, const char *reported)
{
	wfe_step   *st = &current_step;
	char		runid[32];
	event_batch events;

	/*
	 * A validation the core ran for this step (an input schema, a result's
	 * output schema) may have stopped on a pending cancel, with a verdict
	 * that means nothing: raise the cancel before writing any of it.  (The
	 * interrupt hook in runtime_fn.c says stop only when this raises.)
	 */
	CHECK_FOR_INTERRUPTS();
	memset(&events, 0, sizeof(events));
	for (int k = 0; k < st->nops; k++)
	{
		const wfe_op *op = &st->ops[k];
		const char *stage = op->stage < 0 ? NULL : op->elem >= 0 ?
			wfe_map_element_name(s->rp->stages[op->stage].name, op->elem) : s->rp->stages[op->stage].name;
		Datum		v[9];
		char		n[10] = "         ";
		bool		limited;
		const bool *known = NULL;	/* whether the room freed is limited, when the op's statement said */

		v[0] = Int64GetDatum(s->run_id);
		v[1] = stage ? CStringGetTextDatum(stage) : (Datum) 0;
		switch (op->kind)
		{
			case WFE_OP_EVENT:
				add_event(&events, stage, op->attempt, op->text, op->json, op->fence, !op->flag);
				break;
			case WFE_OP_ENQUEUE:
				v[2] = BoolGetDatum(op->flag);
				v[3] = stmt_text_or_null(op->json, &n[3]);
				v[4] = Int64GetDatum(op->fence);
				v[5] = stmt_text_or_null(op->text, &n[5]);
				v[6] = stmt_text_or_null(op->json2, &n[6]);
				v[7] = stmt_text_or_null(op->concurrency_key, &n[7]);
				v[8] = Int32GetDatum(op->concurrency_max);
				n[8] = op->concurrency_key != NULL ? ' ' : 'n';
				stmt_run(&q_enqueue, v, n);
				after_enqueue(s, stage);
				break;
			case WFE_OP_RESOLVE:
				v[2] = CStringGetTextDatum(wfe_state_name(op->state));
				v[3] = stmt_text_or_null(op->json, &n[3]);
				v[4] = stmt_text_or_null(op->json2, &n[4]);
				v[5] = BoolGetDatum(op->branch != WFE_KEEP_BRANCH);
				v[6] = stmt_text_or_null(op->branch >= 0 ? s->rp->stages[op->branch].name : NULL, &n[6]);
				v[7] = Int64GetDatum(op->fence);
				stmt_run(&q_resolve, v, n);
				break;
			case WFE_OP_BIND_FAILED:
				v[2] = CStringGetTextDatum(op->json);
				v[3] = Int64GetDatum(op->fence);
				v[4] = Int32GetDatum(op->attempt);
				stmt_run(&q_bind_failed, v, n);
				break;
			case WFE_OP_COMPLETE:
				v[2] = CStringGetTextDatum(op->json ? op->json : reported ? reported : "{}");
				stmt_run(&q_complete, v, n);
				/* an element's room is its map's item queue's: room_freed asks */
				if (SPI_processed == 1 && op->elem < 0)
				{
					limited = stmt_bool(1);
					known = &limited;
				}
				break;
			case WFE_OP_RETRY:
				v[2] = CStringGetTextDatum(op->json ? op->json : "{}");
				v[3] = Int64GetDatum(op->delay_us);
				stmt_run(&q_retry, v, n);
				wfe_wake_at(GetCurrentTimestamp() + op->delay_us);
				break;
			case WFE_OP_FAIL:
				v[2] = CStringGetTextDatum(wfe_state_name(op->state));
				v[3] = CStringGetTextDatum(op->json ? op->json : "{}");
				stmt_run(&q_fail, v, n);
				if (op->flag)
				{
					v[2] = CStringGetTextDatum(s->run.tenant);
					v[3] = Int32GetDatum(op->attempt);
					v[4] = CStringGetTextDatum(op->json ? op->json : "{}");
					stmt_run(&q_dead_letter, v, n);
				}
				break;
			case WFE_OP_TIME_OUT:
				v[2] = Int64GetDatum(op->fence);
				stmt_run(&q_time_out, v, n);
				if (op_runs_child(s, op))
					s->after = wfe_child_defer_cancel(s->after, s->run_id, stage, "parent attempt timed out");
				break;
			case WFE_OP_SKIP:
				v[2] = CStringGetTextDatum(op->text);
				stmt_run(&q_skip, v, n);
				break;
			case WFE_OP_CANCEL:
				{
					char	   *queue;

					v[2] = CStringGetTextDatum(op->json);
					v[3] = Int64GetDatum(op->fence);
					stmt_run(&q_cancel, v, n);
					queue = SPI_processed == 1 ? stmt_col(1) : NULL;
					if (op_runs_child(s, op))
						s->after = wfe_child_defer_cancel(s->after, s->run_id, stage, op->text);
					if (op->flag && queue != NULL)
					{
						v[2] = CStringGetTextDatum(s->run.tenant);
						v[3] = Int32GetDatum(op->attempt);
						v[4] = Int64GetDatum(op->fence);
						v[5] = stmt_text_or_null(op->text, &n[5]);
						v[6] = CStringGetTextDatum(queue);
						v[7] = Int64GetDatum(op->prev_fence);
						stmt_run(&q_cancel_message, v, n);
						if (SPI_processed > 0)
							wfe_wake_at(GetCurrentTimestamp());	/* a request to publish */
					}
				}
				break;
			case WFE_OP_BRANCH:
				v[2] = stmt_text_or_null(op->branch >= 0 ? s->rp->stages[op->branch].name : NULL, &n[2]);
				stmt_run(&q_branch, v, n);
				break;
			case WFE_OP_ARRIVALS:
				v[2] = CStringGetTextDatum(op->json);
				stmt_run(&q_arrivals, v, n);
				break;
			case WFE_OP_OUTPUTS:
				v[2] = CStringGetTextDatum(s->run.tenant);
				v[3] = CStringGetTextDatum(op->json2 ? op->json2 : reported ? reported : "{}");
				v[4] = CStringGetTextDatum(op->json);
				stmt_run(&q_outputs_write, v, n);
				break;
			case WFE_OP_ACCEPT:
				{
					bool		isnull;
					Datum		due;

					v[2] = CStringGetTextDatum(op->text ? op->text : "");
					v[3] = Int32GetDatum(s->lease_ms);
					n[3] = s->lease_ms > 0 ? ' ' : 'n';
					stmt_run(&q_accept, v, n);
					due = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);
					if (!isnull)
						wfe_wake_at(DatumGetTimestampTz(due));
				}
				break;
			case WFE_OP_HEARTBEAT:
				stmt_run(&q_heartbeat, v, n);
				break;
			case WFE_OP_INTENT:
				v[1] = CStringGetTextDatum(wfe_run_state_name(op->state));
				v[2] = stmt_text_or_null(op->text, &n[2]);
				v[3] = stmt_text_or_null(op->json, &n[3]);
				stmt_run(&q_intent, v, n);
				v[1] = BoolGetDatum(op->state == WFE_RUN_COMPLETED);
				stmt_run(&q_retire_timers, v, n);
				break;
			case WFE_OP_FINALISING:
				stmt_run(&q_finalising, v, n);
				break;
			case WFE_OP_FINISH:
				v[1] = CStringGetTextDatum(wfe_run_state_name(op->state));
				v[2] = stmt_text_or_null(op->text, &n[2]);
				stmt_run(&q_finish, v, n);
				snprintf(runid, sizeof(runid), INT64_FORMAT, s->run_id);
				Async_Notify("wfe_run_done", runid);
				wfe_child_finished(s->run_id);
				break;
			case WFE_OP_REOPEN:
				stmt_run(&q_reopen, v, n);
				break;
			case WFE_OP_CACHE_HIT:
				v[2] = CStringGetTextDatum(op->json);
				v[3] = CStringGetTextDatum(op->json2);
				v[4] = Int64GetDatum(op->fence);
				v[5] = CStringGetTextDatum(op->text);
				v[6] = BoolGetDatum(op->flag);
				stmt_run(&q_cache_hit, v, n);
				break;
			case WFE_OP_CACHE_WAIT:
				v[2] = CStringGetTextDatum(op->text);
				v[3] = CStringGetTextDatum(op->json);
				stmt_run(&q_cache_wait, v, n);
				break;
			case WFE_OP_CACHE_STORE:
				wfe_cache_store(s->run.tenant, op->text, s->rp->stages[op->stage].contract,
								s->rp->stages[op->stage].cache_ttl_ms, s->run_id, stage,
								wfe_step_row(&current_step, op->stage)->attempt,
								reported ? reported : "{}");
				break;
			case WFE_OP_CACHE_WAKE:
				wfe_cache_wake(op->text, s->run_id, stage);
				break;
			case WFE_OP_RESET:
				v[2] = stmt_text_or_null(op->json, &n[2]);
				stmt_run(&q_reset, v, n);
				break;
			case WFE_OP_PARK:
				v[2] = Int32GetDatum(op->attempt);
				v[3] = Int64GetDatum(op->fence);
				v[4] = stmt_text_or_null(op->json, &n[4]);
				stmt_run(&q_park, v, n);
				if (op->delay_us >= 0 && op->text != NULL)
				{
					v[2] = CStringGetTextDatum(s->run.tenant);
					v[3] = Int32GetDatum(op->attempt);
					v[4] = Int64GetDatum(op->fence);
					v[5] = CStringGetTextDatum(op->text);
					v[6] = Int64GetDatum(op->delay_us);
					n[4] = ' ';
					stmt_run(&q_park_timer, v, n);
					wfe_wake_at(GetCurrentTimestamp() + op->delay_us);
				}
				break;
			case WFE_OP_MAP_START:
			case WFE_OP_MAP_COUNTS:
				wfe_map_apply(s->run_id, s->run.tenant, &s->rp->stages[op->stage], op);
				break;
			case WFE_OP_MAP_CANCEL:
				/* each element cancelled, as a stage's cancel records it; its pushed worker asked to stop */
				if (wfe_map_cancel(s->run_id, &s->rp->stages[op->stage], op->json, element_cancelled, &events) > 0)
					wfe_wake_at(GetCurrentTimestamp());	/* a request to publish */
				/* the elements cancelled with their map: their live children too */
				if (s->rp->stages[op->stage].item_workflow)
					s->after = wfe_child_defer_cancel_map(s->after, s->run_id, stage,
														  "map ended: its element was cancelled");
				break;
			case WFE_OP_SIGNAL_TAKEN:
				v[2] = Int64GetDatum(op->delay_us);
				stmt_run(&q_signal_taken, v, n);
				break;
			case WFE_OP_CHILD:
				s->after = wfe_child_defer_start(s->after, s->run_id, stage, op->attempt, op->text,
												 op->json2, op->json);
				break;
			case WFE_OP_FENCE:
				{
					char	   *queue;

					v[2] = Int64GetDatum(op->fence);
					stmt_run(&q_fence, v, n);
					queue = SPI_processed == 1 ? stmt_col(1) : NULL;
					if (op_runs_child(s, op))
						s->after = wfe_child_defer_cancel(s->after, s->run_id, stage, op->text);
					if (op->flag && queue != NULL)
					{
						/* ask a pushed worker to stop, as a cancellation does */
						v[2] = CStringGetTextDatum(s->run.tenant);
						v[3] = Int32GetDatum(op->attempt);
						v[4] = Int64GetDatum(op->fence);
						v[5] = stmt_text_or_null(op->text, &n[5]);
						v[6] = CStringGetTextDatum(queue);
						v[7] = Int64GetDatum(op->prev_fence);
						stmt_run(&q_cancel_message, v, n);
						if (SPI_processed > 0)
							wfe_wake_at(GetCurrentTimestamp());
					}
				}
				break;
		}
		room_freed(s, op, known);
		/* an attempt of a stage (or map element) with keyed concurrency left its slot (concurrency.c) */
		if (op->stage >= 0 && s->rp->stages[op->stage].concurrency_key != NULL &&
			(op->elem >= 0 || s->rp->stages[op->stage].kind != WFE_K_MAP) &&
			(op->kind == WFE_OP_COMPLETE || op->kind == WFE_OP_FAIL || op->kind == WFE_OP_RETRY ||
			 op->kind == WFE_OP_TIME_OUT || op->kind == WFE_OP_CANCEL || op->kind == WFE_OP_SKIP ||
			 op->kind == WFE_OP_RESET || op->kind == WFE_OP_FENCE))
			wfe_concurrency_freed(s->run_id, stage);
	}
	write_events(s, &events);
	wfe_step_end(&current_step);
	/* after the step: a child's own step may now run (and nest) */
	wfe_child_run(s->after);
	s->after = NIL;
}

/* ---------------------------------------------------------------------
 * Callbacks
 * --------------------------------------------------------------------- */

/*
 * Record a callback about a run or stage that does not exist, or one the
 * caller may not make: under no tenant (''), so that no tenant's reader
 * sees what a stranger sent, and answer unknown.
 */
static const char *
unknown(int64 run_id, const char *stage, int attempt, int64 fence, wfe_callback cb)
{
	static const char *const names[] = {"accept_task", "heartbeat", "complete_task", "fail_task"};
	srv			s;
	char	   *detail = psprintf("{\"callback\": \"%s\", \"current_attempt\": null}", names[cb]);

	memset(&s, 0, sizeof(s));
	s.run_id = run_id;
	s.run.tenant = "";
	write_event(&s, stage, attempt, "callback.unknown", detail, fence);
	return "unknown";
}

/* Fill *g from result row k's columns first.. first+3 (GATE_COLS). */
static void
gate_fill(gate_row *g, uint64 k, int first)
{
	char	   *handler = row_col(k, first + 2);
	char	   *broker = row_col(k, first + 3);

	g->found = true;
	g->tenant = row_col(k, first);
	g->queue = row_col(k, first + 1);
	g->handler = handler != NULL && handler[0] == 't';
	g->broker = broker != NULL && broker[0] == 't';
}

/*
 * One callback about (run, stage, attempt, fence): the gate (read here, or
 * given: gate), then the transition.  value is the reported result or
 * error (JSON text).
 */
static const char *
callback(int64 run_id, const char *stage, int attempt, int64 fence, wfe_callback cb,
		 const char *value, bool retryable, const char *worker_id, int lease_ms, const gate_row *gate)
{
	srv			s;
	int			i;
	wfe_row    *row;
	const char *outcome;
	int			same = 0;
	bool		poll;
	gate_row	g;

	/*
	 * The gate's first half, before any lock (q_gate; gate: q_gates read it
	 * already).  Stage rows are created with their run, so no row means no
	 * such run or stage; and a report nobody can attribute to a tenant is
	 * recorded under none (tenant ''), where no tenant's reader sees it.
	 */
	if (gate == NULL)
	{
		Datum		v[2] = {Int64GetDatum(run_id), CStringGetTextDatum(stage)};

		stmt_run(&q_gate, v, NULL);
		g.found = SPI_processed == 1;
		if (g.found)
			gate_fill(&g, 0, 1);
		gate = &g;
	}
	if (!gate->found ||
		!wfe_may_call_back(gate->queue, gate->tenant, gate->handler, run_id, stage,
						   cb == WFE_CB_ACCEPT ? "accept tasks of" : "report for"))
		return unknown(run_id, stage, attempt, fence, cb);
	poll = gate->queue != NULL && !gate->broker;

	if (!begin(&s, run_id, LOCK_WAIT))
		return unknown(run_id, stage, attempt, fence, cb);
	s.lease_ms = lease_ms;
	i = stage_index(&s, stage);
	/*
	 * a wait or a sleep has no worker: only a signal or its timer ends it;
	 * nor has a map: its elements (NAME[i]) are reported about, not it
	 */
	if (i < 0 || s.rp->stages[i].kind == WFE_K_WAIT || s.rp->stages[i].kind == WFE_K_SLEEP ||
		(s.rp->stages[i].kind == WFE_K_MAP && current_step.elem < 0))
	{
		wfe_step_end(&current_step);
		return unknown(run_id, stage, attempt, fence, cb);
	}
	row = wfe_step_row(&current_step, i);
	if (row->exists && (row->state == WFE_QUEUED || row->state == WFE_DISPATCHED))
	{
		/* a claimer or the publisher may be taking it: wait for them, look again */
		s.lock_stage = i;
		row->loaded = 0;
		row = wfe_step_row(&current_step, i);
	}
	if (!row->exists)
	{
		wfe_step_end(&current_step);
		return unknown(run_id, stage, attempt, fence, cb);
	}
	if ((cb == WFE_CB_COMPLETE || cb == WFE_CB_FAIL) && row->outcome ==
		(cb == WFE_CB_COMPLETE ? WFE_COMPLETED : WFE_FAILED))
	{
		Datum		v[4] = {Int64GetDatum(run_id), CStringGetTextDatum(stage),
		BoolGetDatum(cb == WFE_CB_COMPLETE), CStringGetTextDatum(value)};

		stmt_run(&q_same, v, NULL);
		same = SPI_processed == 1 && stmt_bool(1);
	}
	outcome = wfe_step_gate(&current_step, i, cb, attempt, fence, same);
	/*
	 * accept_task starts what a broker dispatched.  A poll queue's tasks are
	 * taken by claim_task alone, which keeps the queue's max_in_flight and its
	 * tenants' limits; accept_task would start them past both.
	 */
	if (outcome == NULL && cb == WFE_CB_ACCEPT && poll)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("queue \"%s\" is in poll delivery mode: accept_task cannot start its tasks", row->queue),
				 errhint("A poll queue's tasks are taken with wfe.claim_task; wfe.accept_task starts "
						 "the dispatched tasks of broker queues.")));
	if (outcome == NULL)
	{
		outcome = "accepted";
		switch (cb)
		{
			case WFE_CB_ACCEPT:
				wfe_step_accepted(&current_step, i, worker_id);
				break;
			case WFE_CB_HEARTBEAT:
				wfe_step_heartbeat(&current_step, i);
				break;
			case WFE_CB_COMPLETE:
				{
					contract_entry *c = contract(s.rp->stages[i].contract);
					const char *problem = wfe_step_result_problem(&current_step, i, value,
																  c ? c->output_schema : NULL);

					if (problem != NULL)
					{
						wfe_step_invalid_result(&current_step, i, problem);
						outcome = "invalid_result";
						/*
						 * The reporter's own result: it may read why (its role
						 * cannot read the events).  The run is in the context,
						 * which psql shows only for errors.
						 */
						ereport(NOTICE,
								(errmsg("stage \"%s\" attempt %d: invalid_result", stage, attempt),
								 errdetail("%s", problem),
								 errcontext("wfe run " INT64_FORMAT, run_id)));
					}
					else
						wfe_step_completed(&current_step, i, value);
				}
				break;
			case WFE_CB_FAIL:
				wfe_step_failed(&current_step, i, value, retryable);
				break;
		}
	}
	apply(&s, value);
	return outcome;
}

/* A callback's (run_id, stage, attempt, fence): none NULL, the stage a name within the limits. */
static void
require_identity(FunctionCallInfo fcinfo)
{
	for (int k = 0; k < 4; k++)
		if (PG_ARGISNULL(k))
			ereport(ERROR,
					(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
					 errmsg("run_id, stage, attempt and fence must not be null")));
	(void) wfe_admitted_name(PG_GETARG_TEXT_PP(1), "stage");
}

/*
 * A jsonb argument as text, or dflt for SQL NULL.  A value from a caller
 * (what names it) is measured against the admission limits first.
 */
static char *
jsonb_arg(FunctionCallInfo fcinfo, int k, const char *dflt, const char *what)
{
	Jsonb	   *jb;

	if (PG_ARGISNULL(k))
		return pstrdup(dflt);
	jb = PG_GETARG_JSONB_P(k);
	if (what != NULL)
		wfe_admit_jsonb(jb, what, 0);
	return JsonbToCString(NULL, &jb->root, VARSIZE(jb));
}

/* Connect to SPI, run one callback, disconnect; the outcome word as text. */
static Datum
callback_sql(FunctionCallInfo fcinfo, wfe_callback cb, const char *value, bool retryable,
			 const char *worker_id, int lease_ms)
{
	const char *outcome;
	text	   *result;

	SPI_connect();
	outcome = callback(PG_GETARG_INT64(0), text_to_cstring(PG_GETARG_TEXT_PP(1)),
					   PG_GETARG_INT32(2), PG_GETARG_INT64(3), cb, value, retryable, worker_id, lease_ms, NULL);
	result = cstring_to_text(outcome);	/* before SPI_finish frees the SPI memory */
	result = (text *) SPI_datumTransfer(PointerGetDatum(result), false, -1);
	SPI_finish();
	PG_RETURN_TEXT_P(result);
}

PG_FUNCTION_INFO_V1(wfe_accept_task);
PG_FUNCTION_INFO_V1(wfe_heartbeat);
PG_FUNCTION_INFO_V1(wfe_complete_task);
PG_FUNCTION_INFO_V1(wfe_fail_task);

/*
 * wfe.accept_task(run_id, stage, attempt, fence, worker_id, lease_ms).
 * 0.2.0 declared it without lease_ms: the upgrade script runs with that
 * declaration until it replaces it, hence PG_NARGS.
 */
Datum
wfe_accept_task(PG_FUNCTION_ARGS)
{
	int			lease_ms = 0;

	require_identity(fcinfo);
	if (PG_NARGS() > 5 && !PG_ARGISNULL(5))
	{
		lease_ms = PG_GETARG_INT32(5);
		if (lease_ms < 1)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("lease_ms must be positive, not %d", lease_ms),
					 errhint("Pass NULL for no lease: the attempt then lives until its execution deadline.")));
	}
	return callback_sql(fcinfo, WFE_CB_ACCEPT, NULL, true,
						PG_ARGISNULL(4) ? NULL : wfe_admitted_name(PG_GETARG_TEXT_PP(4), "worker_id"),
						lease_ms);
}

/* wfe.heartbeat(run_id, stage, attempt, fence) */
Datum
wfe_heartbeat(PG_FUNCTION_ARGS)
{
	require_identity(fcinfo);
	return callback_sql(fcinfo, WFE_CB_HEARTBEAT, NULL, true, NULL, 0);
}

/* wfe.complete_task(run_id, stage, attempt, fence, result) */
Datum
wfe_complete_task(PG_FUNCTION_ARGS)
{
	require_identity(fcinfo);
	return callback_sql(fcinfo, WFE_CB_COMPLETE, jsonb_arg(fcinfo, 4, "{}", "the result"), true, NULL, 0);
}

/* wfe.fail_task(run_id, stage, attempt, fence, error, retryable) */
Datum
wfe_fail_task(PG_FUNCTION_ARGS)
{
	require_identity(fcinfo);
	return callback_sql(fcinfo, WFE_CB_FAIL, jsonb_arg(fcinfo, 4, "{}", "the error"),
						PG_ARGISNULL(5) ? true : PG_GETARG_BOOL(5), NULL, 0);
}

/* ---------------------------------------------------------------------
 * The run's own transitions: start, timers, deadlines, actions, cancel
 * --------------------------------------------------------------------- */

PG_FUNCTION_INFO_V1(wfe_start_run);
PG_FUNCTION_INFO_V1(wfe_timer_fired);
PG_FUNCTION_INFO_V1(wfe_expire);
PG_FUNCTION_INFO_V1(wfe_action_done);
PG_FUNCTION_INFO_V1(wfe_cancel);
PG_FUNCTION_INFO_V1(wfe_engine_error);

/* wfe._start_run(run_id): release the first stages of a run this transaction submitted. */
Datum
wfe_start_run(PG_FUNCTION_ARGS)
{
	srv			s;

	SPI_connect();
	if (begin(&s, PG_GETARG_INT64(0), LOCK_NEW))
	{
		wfe_step_start(&current_step);
		apply(&s, NULL);
	}
	SPI_finish();
	PG_RETURN_VOID();
}

/*
 * wfe._timer_fired(run_id, kind, stage, attempt, fence): a due timer (its
 * row locked and marked fired by the caller).
 */
Datum
wfe_timer_fired(PG_FUNCTION_ARGS)
{
	srv			s;
	char	   *kind = text_to_cstring(PG_GETARG_TEXT_PP(1));

	SPI_connect();
	if (begin(&s, PG_GETARG_INT64(0), LOCK_WAIT))
	{
		if (strcmp(kind, "retry") == 0 && !PG_ARGISNULL(2))
		{
			int			i = stage_index(&s, text_to_cstring(PG_GETARG_TEXT_PP(2)));

			if (i >= 0)
			{
				s.lock_stage = i;
				wfe_step_retry_due(&current_step, i, PG_ARGISNULL(3) ? -1 : PG_GETARG_INT32(3),
								   PG_ARGISNULL(4) ? -1 : PG_GETARG_INT64(4));
			}
		}
		else if (strcmp(kind, "not_before") == 0)
		{
			Datum		v[1] = {Int64GetDatum(s.run_id)};

			stmt_run(&q_started, v, NULL);
			if (s.run.intent < 0 && !stmt_bool(1))
				wfe_step_start(&current_step);
		}
		else if (strcmp(kind, "cache_ready") == 0 && !PG_ARGISNULL(2))
		{
			char	   *stage = text_to_cstring(PG_GETARG_TEXT_PP(2));
			int			i = wfe_run_plan_find(s.rp, stage);
			Datum		v[2] = {Int64GetDatum(s.run_id), CStringGetTextDatum(stage)};

			if (i >= 0)
			{
				stmt_run(&q_stage_input, v, NULL);
				wfe_step_cache_ready(&current_step, i, SPI_processed == 1 ? stmt_col(1) : NULL);
			}
		}
		else if ((strcmp(kind, "wait_timeout") == 0 || strcmp(kind, "sleep") == 0) &&
				 !PG_ARGISNULL(2) && !PG_ARGISNULL(3) && !PG_ARGISNULL(4))
		{
			char	   *stage = text_to_cstring(PG_GETARG_TEXT_PP(2));
			int			i = wfe_run_plan_find(s.rp, stage);

			if (i >= 0 && kind[0] == 'w')
				wfe_step_wait_timeout(&current_step, i, PG_GETARG_INT32(3), PG_GETARG_INT64(4));
			else if (i >= 0)
			{
				Datum		v[4] = {Int64GetDatum(s.run_id), CStringGetTextDatum(stage),
				PG_GETARG_DATUM(3), PG_GETARG_DATUM(4)};

				stmt_run(&q_sleep_due, v, NULL);
				wfe_step_sleep_due(&current_step, i, PG_GETARG_INT32(3), PG_GETARG_INT64(4),
								   SPI_processed == 1 ? stmt_col(1) : "null");
			}
		}
		else if (strcmp(kind, "child_ended") == 0 &&
				 !PG_ARGISNULL(2) && !PG_ARGISNULL(3) && !PG_ARGISNULL(4))
		{
			char	   *stage = text_to_cstring(PG_GETARG_TEXT_PP(2));
			int			i = stage_index(&s, stage);	/* a map element's child names NAME[k] */
			int64		child;
			char	   *state,
					   *output;

			if (i >= 0 && wfe_child_outcome(s.run_id, stage, PG_GETARG_INT32(3), &child, &state, &output))
				wfe_step_child_ended(&current_step, i, PG_GETARG_INT32(3), PG_GETARG_INT64(4),
									 child, state, output);
		}
		else if (strcmp(kind, "run_deadline") == 0)
		{
			Datum		v[1] = {Int64GetDatum(s.run_id)};

			stmt_run(&q_deadline, v, NULL);
			wfe_step_run_deadline(&current_step, stmt_col(1));
		}
		apply(&s, NULL);
	}
	SPI_finish();
	PG_RETURN_VOID();
}

/*
 * wfe._expire(run_id, stage) RETURNS boolean: time out the attempt whose
 * deadline passed, if it still is the one that expired.  A run or a
 * stage row another transaction holds is left to it (SKIP LOCKED).
 */
Datum
wfe_expire(PG_FUNCTION_ARGS)
{
	srv			s;
	bool		done = false;

	SPI_connect();
	if (begin(&s, PG_GETARG_INT64(0), LOCK_SKIP))
	{
		char	   *stage = text_to_cstring(PG_GETARG_TEXT_PP(1));
		int			i = stage_index(&s, stage);
		Datum		v[2] = {Int64GetDatum(s.run_id), CStringGetTextDatum(stage)};

		stmt_run(&q_expiring, v, NULL);
		if (i >= 0 && SPI_processed == 1)
		{
			char	   *deadline_text = stmt_col(2);
			char	   *deadline_json = stmt_col(3);
			char	   *clock = stmt_col(4);

			wfe_step_expired(&current_step, i, clock, deadline_text, deadline_json);
			done = true;
		}
		apply(&s, NULL);
	}
	SPI_finish();
	PG_RETURN_BOOL(done);
}

/*
 * wfe._action_done(run_id, stage, result, error): an in-database action's
 * attempt ended (the caller holds the run's lock): its result is checked
 * like a worker's, an error is retried per policy.
 */
Datum
wfe_action_done(PG_FUNCTION_ARGS)
{
	srv			s;

	SPI_connect();
	if (begin(&s, PG_GETARG_INT64(0), LOCK_WAIT))
	{
		int			i = stage_index(&s, text_to_cstring(PG_GETARG_TEXT_PP(1)));
		char	   *result = PG_ARGISNULL(2) ? NULL : jsonb_arg(fcinfo, 2, "{}", NULL);

		if (i >= 0 && !PG_ARGISNULL(3))
			wfe_step_failed(&current_step, i, jsonb_arg(fcinfo, 3, "{}", NULL), true);
		else if (i >= 0)
		{
			contract_entry *c = contract(s.rp->stages[i].contract);
			const char *problem = wfe_step_result_problem(&current_step, i, result,
														  c ? c->output_schema : NULL);

			if (problem != NULL)
			{
				char	   *error = psprintf("{\"code\": \"result.schema\", \"message\": %s}",
											 wfe_step_json_str(&current_step, problem));

				wfe_step_failed(&current_step, i, error, true);
			}
			else
				wfe_step_completed(&current_step, i, result);
		}
		apply(&s, result);
	}
	SPI_finish();
	PG_RETURN_VOID();
}

/* wfe._engine_error(run_id, stage, error): an item of a round raised; fail the run. */
Datum
wfe_engine_error(PG_FUNCTION_ARGS)
{
	srv			s;

	SPI_connect();
	if (begin(&s, PG_GETARG_INT64(0), LOCK_WAIT))
	{
		int			i = PG_ARGISNULL(1) ? -1 : wfe_run_plan_find(s.rp, text_to_cstring(PG_GETARG_TEXT_PP(1)));

		wfe_step_engine_error(&current_step, i, jsonb_arg(fcinfo, 2, "{}", NULL));
		apply(&s, NULL);
	}
	SPI_finish();
	PG_RETURN_VOID();
}

/* wfe._cancel(run_id, reason): set the cancelled intent (the caller checked it may). */
Datum
wfe_cancel(PG_FUNCTION_ARGS)
{
	srv			s;

	SPI_connect();
	if (begin(&s, PG_GETARG_INT64(0), LOCK_WAIT))
	{
		wfe_step_cancel(&current_step, text_to_cstring(PG_GETARG_TEXT_PP(1)));
		apply(&s, NULL);
	}
	SPI_finish();
	PG_RETURN_VOID();
}

PG_FUNCTION_INFO_V1(wfe_signal);

/*
 * wfe._signal(run_id, signal, payload, idempotency_key, by): a signal
 * wfe.signal checked (grant, tenant, plan, payload, duplicates) under the
 * run's lock.  The step core answers: accepted (a released wait took it
 * and the run moved on), buffered or late; an accepted or buffered signal
 * is kept in wfe.signals.
 */
Datum
wfe_signal(PG_FUNCTION_ARGS)
{
	srv			s;
	const char *outcome = "unknown";
	text	   *result;

	SPI_connect();
	if (begin(&s, PG_GETARG_INT64(0), LOCK_WAIT))
	{
		char	   *signal = text_to_cstring(PG_GETARG_TEXT_PP(1));
		char	   *payload = jsonb_arg(fcinfo, 2, "{}", NULL);
		char	   *key = PG_ARGISNULL(3) ? NULL : text_to_cstring(PG_GETARG_TEXT_PP(3));
		char	   *by = NameStr(*PG_GETARG_NAME(4));
		int			taken = -1;
		char		n[8] = "       ";
		Datum		v[7];

		outcome = wfe_step_signal(&current_step, signal, payload, key, by, &taken);
		outcome = pstrdup(outcome);
		apply(&s, payload);
		if (strcmp(outcome, "late") != 0)
		{
			v[0] = Int64GetDatum(s.run_id);
			v[1] = CStringGetTextDatum(s.run.tenant);
			v[2] = CStringGetTextDatum(signal);
			v[3] = CStringGetTextDatum(payload);
			v[4] = stmt_text_or_null(key, &n[4]);
			v[5] = CStringGetTextDatum(by);
			v[6] = stmt_text_or_null(taken >= 0 ? s.rp->stages[taken].name : NULL, &n[6]);
			stmt_run(&q_signal_keep, v, n);
		}
	}
	result = cstring_to_text(outcome);
	result = (text *) SPI_datumTransfer(PointerGetDatum(result), false, -1);
	SPI_finish();
	PG_RETURN_TEXT_P(result);
}

/* ---------------------------------------------------------------------
 * Batch reports
 * --------------------------------------------------------------------- */

PG_FUNCTION_INFO_V1(wfe_complete_tasks);

/*
 * wfe.complete_tasks(reports jsonb) RETURNS TABLE (run_id, stage, outcome)
 *
 * Each report through the same gate and transition as wfe.complete_task,
 * in run_id then stage order (so two batches that share runs take their
 * locks in the same order and cannot deadlock), all in the caller's
 * transaction.
 */
Datum
wfe_complete_tasks(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	Jsonb	   *reports;
	Datum		v[1];
	uint64		n;
	int64	   *run_ids;
	char	  **stages;
	int		   *attempts;
	int64	   *fences;
	char	  **results;
	gate_row   *gates;

	if (PG_ARGISNULL(0))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("reports must not be null")));
	reports = PG_GETARG_JSONB_P(0);
	if (!JB_ROOT_IS_ARRAY(reports) || JB_ROOT_IS_SCALAR(reports))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("reports must be a JSON array, not %s",
						JB_ROOT_IS_OBJECT(reports) ? "object" : "a scalar")));
	if (JB_ROOT_COUNT(reports) > 1000)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("at most 1000 reports per call, not %u", JB_ROOT_COUNT(reports))));
	/* each result may be as deep as a single report's, inside [{"result": ...}] */
	wfe_admit_jsonb(reports, "reports", 2);

	InitMaterializedSRF(fcinfo, 0);
	SPI_connect();
	v[0] = PointerGetDatum(reports);
	stmt_run(&q_reports, v, NULL);
	n = SPI_processed;
	if (n > 0 && !stmt_bool(2))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("report %s must be an object with numbers run_id, attempt and fence and a string stage",
						stmt_col(1)),
				 errdetail("Report %s is %s.", stmt_col(1), stmt_col(8))));
	/* the reports below run statements of their own: copy the batch first */
	run_ids = palloc(sizeof(int64) * (n + 1));
	stages = palloc(sizeof(char *) * (n + 1));
	attempts = palloc(sizeof(int) * (n + 1));
	fences = palloc(sizeof(int64) * (n + 1));
	results = palloc(sizeof(char *) * (n + 1));
	for (uint64 k = 0; k < n; k++)
	{
		HeapTuple	t = SPI_tuptable->vals[k];
		TupleDesc	d = SPI_tuptable->tupdesc;

		run_ids[k] = pg_strtoint64(SPI_getvalue(t, d, 3));
		stages[k] = SPI_getvalue(t, d, 4);
		wfe_admit_name(stages[k], strlen(stages[k]), "stage");
		attempts[k] = pg_strtoint32(SPI_getvalue(t, d, 5));
		fences[k] = pg_strtoint64(SPI_getvalue(t, d, 6));
		results[k] = SPI_getvalue(t, d, 7);
	}
	/* the gates of all reports before the first lock (q_gates); a report with none is unknown */
	gates = palloc0(sizeof(gate_row) * (n + 1));
	if (n > 0)
	{
		Datum		ids[1000];
		Datum		names[1000];
		Datum		g[2];

		for (uint64 k = 0; k < n; k++)
		{
			ids[k] = Int64GetDatum(run_ids[k]);
			names[k] = CStringGetTextDatum(stages[k]);
		}
		g[0] = PointerGetDatum(construct_array(ids, (int) n, INT8OID, 8, FLOAT8PASSBYVAL, TYPALIGN_DOUBLE));
		g[1] = PointerGetDatum(construct_array(names, (int) n, TEXTOID, -1, false, TYPALIGN_INT));
		stmt_run(&q_gates, g, NULL);
		for (uint64 r = 0; r < SPI_processed; r++)
			gate_fill(&gates[pg_strtoint32(row_col(r, 1)) - 1], r, 2);
	}
	/*
	 * Each report in a memory context of its own, freed after it: a nested
	 * SPI connection, because SPI returns to its procedure context after
	 * every statement, so a context we switched to would not stay current.
	 * Up to 1000 reports would otherwise keep every step's allocations
	 * until the call ends.
	 */
	for (uint64 k = 0; k < n; k++)
	{
		const char *outcome;
		Datum		values[3];
		bool		nulls[3] = {false, false, false};

		SPI_connect();
		outcome = callback(run_ids[k], stages[k], attempts[k], fences[k],
						   WFE_CB_COMPLETE, results[k], true, NULL, 0, &gates[k]);
		values[0] = Int64GetDatum(run_ids[k]);
		values[1] = CStringGetTextDatum(stages[k]);
		values[2] = CStringGetTextDatum(outcome);
		/* the tuplestore copies the row: then this report's memory can go */
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
		SPI_finish();
	}
	SPI_finish();
	return (Datum) 0;
}

/* ---------------------------------------------------------------------
 * Operator recovery
 * --------------------------------------------------------------------- */

/*
 * One more run of tenant in flight (an ended run reopened): the admission a
 * submit passes, wfe_admit_run (53400 over max_runs_in_flight; again names
 * what to do again, for its hint).  Taken under the run's lock: the lock
 * order is the run, then its tenant's run limit.
 */
static void
admit_run(const char *tenant, const char *again)
{
	wfe_admit_run(tenant, again);
}

/*
 * The plan index of the stage an operator names: a stage, or a map's
 * element NAME[k] (the step is then set on it).  42704 for a name that is
 * neither (an element past the map's end, a malformed index, no such map);
 * 42809 for a map's own name where one of its elements is meant (redrive,
 * fail, redispatch: the map has no attempt of its own to act on).
 */
static int
operated_stage(srv *s, const char *stage, const char *what)
{
	int64_t		elem;
	int			i = wfe_map_element_of(s->rp, stage, &elem);

	if (i >= 0)
	{
		wfe_step_element(&current_step, i, elem);
		if (!wfe_step_row(&current_step, i)->exists)
			ereport(ERROR,
					(errcode(ERRCODE_UNDEFINED_OBJECT),
					 errmsg("run " INT64_FORMAT " has no stage \"%s\"", s->run_id, stage),
					 errhint("Map \"%s\" has no element " INT64_FORMAT " in this run (wfe.report lists its elements).",
							 s->rp->stages[i].name, elem)));
		return i;
	}
	i = wfe_run_plan_find(s->rp, stage);
	if (i < 0)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("run " INT64_FORMAT " has no stage \"%s\"", s->run_id, stage),
				 strchr(stage, '[') ?
				 errhint("A map's element is named NAME[i]: the map's stage name and a 0-based index without leading zeros.") : 0));
	if (s->rp->stages[i].kind == WFE_K_MAP && strcmp(what, "skip") != 0)
		ereport(ERROR,
				(errcode(ERRCODE_WRONG_OBJECT_TYPE),
				 errmsg("cannot %s stage \"%s\" of run " INT64_FORMAT ": it is a map, whose elements are the units of work",
						what, stage, s->run_id),
				 errhint("Name one of its elements, %s[i].", stage)));
	return i;
}

PG_FUNCTION_INFO_V1(wfe_operate);

/*
 * wfe._operate(run_id, stage, operation, value, by, why): an operator's
 * redrive, skip, fail or redispatch of one stage, through the step core
 * under the run's lock.  value: skip's result (JSON text, checked like a
 * report), fail's reason.  Raises 42704 (no such run or stage), 55000 (the
 * core's answer why not now), 22023 (a skip result the contract refuses),
 * 53400 (reopening the run would pass its tenant's max_runs_in_flight).
 *
 * NB: the tenant is not checked here.  The operator's functions check it
 * (and their arguments' sizes) before anything else, through
 * wfe._operator_target, so that another tenant's run is not even locked;
 * configure_queue's re-dispatches act on a queue, for every tenant in it.
 */
Datum
wfe_operate(PG_FUNCTION_ARGS)
{
	static const char *const names[] = {"redrive", "skip", "fail", "redispatch"};
	srv			s;
	int64		run_id;
	char	   *stage,
			   *what,
			   *value,
			   *by,
			   *why;
	int			op = -1,
				i;
	const char *problem;

	for (int k = 0; k < 5; k++)
		if (PG_ARGISNULL(k) && k != 3)
			ereport(ERROR,
					(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
					 errmsg("run_id, stage, operation and by must not be null")));
	run_id = PG_GETARG_INT64(0);
	stage = text_to_cstring(PG_GETARG_TEXT_PP(1));
	what = text_to_cstring(PG_GETARG_TEXT_PP(2));
	value = PG_ARGISNULL(3) ? NULL : text_to_cstring(PG_GETARG_TEXT_PP(3));
	by = text_to_cstring(PG_GETARG_TEXT_PP(4));
	why = PG_ARGISNULL(5) ? NULL : text_to_cstring(PG_GETARG_TEXT_PP(5));
	for (int k = 0; k < 4; k++)
		if (strcmp(what, names[k]) == 0)
			op = k;
	if (op < 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("unknown operation \"%s\"", what),
				 errhint("The operations are redrive, skip, fail and redispatch.")));

	SPI_connect();
	if (!begin(&s, run_id, LOCK_WAIT))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("run " INT64_FORMAT " does not exist", run_id)));
	i = operated_stage(&s, stage, names[op]);
	/* a claimer or the publisher may be moving a queued or dispatched row */
	s.lock_stage = i;
	problem = wfe_step_operate_problem(&current_step, i, (wfe_operation) op, value);
	if (problem != NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("cannot %s stage \"%s\" of run " INT64_FORMAT ": %s", names[op], stage, run_id,
						problem)));
	if (op == WFE_OPERATE_SKIP && s.rp->stages[i].kind != WFE_K_DECISION)
	{
		contract_entry *c = contract(s.rp->stages[i].contract);

		if (value == NULL)
			value = pstrdup("{}");
		problem = wfe_step_result_problem(&current_step, i, value, c ? c->output_schema : NULL);
		if (problem != NULL)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("the result given for stage \"%s\" of run " INT64_FORMAT " is not valid: %s",
							stage, run_id, problem)));
	}
	if (wfe_step_operate_reopens(&current_step, (wfe_operation) op))
		admit_run(s.run.tenant, op == WFE_OPERATE_REDRIVE ? "Redrive" : "Skip the stage");
	wfe_step_operate(&current_step, i, (wfe_operation) op, value, by, why);
	apply(&s, op == WFE_OPERATE_SKIP ? value : NULL);
	SPI_finish();
	PG_RETURN_VOID();
}
