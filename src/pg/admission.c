/*
 * admission.c — queue and tenant task limits, the server side
 * (operations.md "Flow control", "Backpressure"; the decisions:
 * src/core/flow/admission.c).
 *
 * A task is in flight when it is dispatched or running, or queued with a
 * dispatch message of its current fence still to publish; stages of
 * in-database actions (handler) are not tasks.  A task over a limit
 * (max_in_flight of its queue, max_tasks_in_flight of its tenant) stays
 * queued: a poll queue's claim takes no more than the room (claim.c), a
 * broker task is held (no dispatch message), and when a task ends the
 * held ones that now fit are dispatched (wfe_admission_room_freed).
 *
 * Each limit has a wfe lock (locks.c: the limit's name and the queue or
 * tenant), taken before the count, which is a statement of its own after
 * it, so two admissions cannot both take the last slot.  Lock order, after
 * the run locks and the wfe.queues row: tenant locks in name order (C
 * collation), then queue locks in name order.  A transaction that decides
 * several times (a step that ends one task and releases the next, a tick
 * round, a batch of callbacks) could be asked for a lock out of that order:
 * then it only tries it, so no two admissions ever wait for each other in
 * a circle (the rule: wfe_admission_lock_mode).  A broker task a failed try
 * kept held is not forgotten: the tenant or queue goes into
 * wfe.admission_recheck, and the background worker's next round (or
 * wfe.tick) releases what fits, in a transaction that holds nothing yet.
 *
 * The greatest tenant and queue a transaction waited for are C state here,
 * a stack of the locks waited for with the subtransaction that took each:
 * a subtransaction's abort releases its locks, so it pops its entries; its
 * commit hands them to its parent; the transaction's end empties it.
 */
#include "postgres.h"

#include "access/tupdesc.h"
#include "access/xact.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "nodes/value.h"
#include "utils/builtins.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"
#include "utils/tuplestore.h"

#include "core/flow/admission.h"
#include "core/flow/concurrency.h"
#include "core/flow/fairness.h"
#include "admission.h"
#include "dispatch.h"
#include "spi_stmt.h"
#include "bgw/bgw.h"
#include "wfe.h"

/* The limits' lock spaces (locks.c), as the 0.2.0 SQL functions named them. */
#define TENANT_SPACE "wfe.max_tasks_in_flight"
#define QUEUE_SPACE "wfe.max_in_flight"

/* Rows of held candidates fetched, and decided, at a time. */
#define RELEASE_BATCH 64

/*
 * The counts, statements of their own after the locks (READ COMMITTED: they
 * see the last holder's commit).  A task in flight is handed out
 * (dispatched or running: wfe._stage_handed_out, written out so that the
 * index serves any caller), or queued with a dispatch message still to
 * publish.  Neither count reads the queued tasks a limit holds, nor a
 * tenant's runs: their cost follows the tasks in flight and the outbox's
 * messages not yet published (the relay's lag), never the held backlog.
 */

/*
 * The queued tasks with a dispatch message of their attempt and fence still
 * to publish, found from the outbox side -- its rows not yet published
 * (outbox_pending, outbox_claimed; OWN: which ones), each probing its stage
 * row (ROW: which stages) -- not from the queued side, which is mostly the
 * held backlog.  (LATERAL ... LIMIT 1: a probe by primary key per message,
 * never a merge join walking run_stages_pkey up to the messages' runs.)
 */
#define SQL_DISPATCHING(OWN, ROW) \
	"(SELECT count(*)" \
	"   FROM (SELECT DISTINCT o.run_id, o.stage, o.attempt, o.fence FROM wfe.outbox AS o" \
	"          WHERE (o.state = 'pending' OR o.state = 'claimed') AND o.kind = 'dispatch'" OWN ") AS o," \
	"        LATERAL (SELECT 1 FROM wfe.run_stages AS st" \
	"                  WHERE st.run_id = o.run_id AND st.stage = o.stage AND st.attempt = o.attempt" \
	"                    AND st.fence = o.fence AND st.state = 'queued'" ROW " LIMIT 1) AS st)"

/* a queue's: its tasks handed out (run_stages_live), and those dispatching */
static stmt q_queue_in_flight = STMT(
	"SELECT ((SELECT count(*) FROM wfe.run_stages AS st"
	"          WHERE st.queue = $1 AND st.state IN ('dispatched', 'running'))"
	"      + " SQL_DISPATCHING("", " AND st.queue = $1") ")::int",
	1, TX);
/*
 * SQL: the queues with live tasks (qs), by a skip scan of run_stages_live
 * (one probe per queue, from '', which every name sorts after): what a
 * tenant's lookups walk instead of its runs.
 */
#define SQL_LIVE_QUEUES \
	"WITH RECURSIVE qs(queue) AS (" \
	"  SELECT ''::text" \
	"  UNION ALL" \
	"  SELECT n.queue FROM qs, LATERAL (" \
	"    SELECT st.queue FROM wfe.run_stages AS st" \
	"     WHERE st.queue > qs.queue AND st.state IN ('queued', 'dispatched', 'running')" \
	"     ORDER BY st.queue LIMIT 1) AS n)"

/* a tenant's: its tasks handed out in each queue with live tasks, one probe per queue, and those dispatching */
static stmt q_tenant_in_flight = STMT(
	SQL_LIVE_QUEUES
	" SELECT ((SELECT count(*) FROM qs JOIN wfe.run_stages AS st ON st.queue = qs.queue"
	"          WHERE st.state IN ('dispatched', 'running') AND st.tenant = $1 AND st.handler IS NULL)"
	"      + " SQL_DISPATCHING(" AND o.tenant = $1", "") ")::int",
	1, TX);
static stmt q_recheck_later = STMT(
	"INSERT INTO wfe.admission_recheck (queue, tenant) VALUES ($1, $2)", 2, TX, TX);
static stmt q_rechecks = STMT(
	"WITH d AS (DELETE FROM wfe.admission_recheck RETURNING queue, tenant)"
	" SELECT x.queue, x.tenant FROM (SELECT DISTINCT d.queue, d.tenant FROM d) AS x"
	" ORDER BY x.tenant COLLATE \"C\", x.queue COLLATE \"C\"", 0);
/* a released broker task's limits ($1 its queue, $2 its tenant; $3, $4 its row's key); NULL: none */
static stmt q_limits = STMT(
	"SELECT (SELECT q.max_in_flight FROM wfe.queues AS q WHERE q.queue = $1 AND q.max_in_flight IS NOT NULL),"
	"       (SELECT t.max_tasks_in_flight FROM wfe.tenant_limits AS t"
	"         WHERE t.tenant = $2 AND t.max_tasks_in_flight IS NOT NULL),"
	/* a map element's own key (its item's concurrency) too: its map counts it released either way */
	"       st.concurrency_key, st.concurrency_max"
	"  FROM wfe.run_stages AS st WHERE st.run_id = $3 AND st.stage = $4", 4, TX, TX, I8, TX);
/* an end whose own statement did not say (a completion's does: engine.c) asks with this one */
static stmt q_limited = STMT("SELECT " WFE_SQL_LIMITED("$1", "$2"), 2, TX, TX);
/*
 * A release's queue ($1) and tenant ($2): bounded broker queue, open broker
 * queue, limited poll queue, limited tenant, fair queue.
 */
static stmt q_scope = STMT(
	"SELECT coalesce(bool_or(q.delivery = 'broker' AND NOT q.paused AND q.max_in_flight IS NOT NULL), false),"
	"       coalesce(bool_or(q.delivery = 'broker' AND NOT q.paused), false),"
	"       coalesce(bool_or(q.delivery = 'poll' AND NOT q.paused AND q.max_in_flight IS NOT NULL), false),"
	"       EXISTS (SELECT 1 FROM wfe.tenant_limits AS l"
	"                WHERE l.tenant = $2 AND l.max_tasks_in_flight IS NOT NULL),"
	"       coalesce(bool_or(q.fairness = 'tenant'), false)"
	"  FROM wfe.queues AS q WHERE q.queue = $1", 2, TX, TX);

/*
 * Whether tenant TENANT has a task queued in queue QUEUE (SQL; HELD: what
 * such a task must also be): the first entry from TENANT on of the queue's
 * queued tasks by tenant, one probe of run_stages_live (queue, state,
 * tenant), or of run_stages_fair with HELD a fair queue's.  (Not EXISTS: a
 * tenant with many tasks queued would make a Seq Scan that stops at its
 * first look cheaper to the planner, and that reads the backlog when they
 * are not where it starts.)
 */
#define SQL_QUEUED_FOR(QUEUE, TENANT, HELD) \
	"(SELECT st.tenant FROM wfe.run_stages AS st" \
	"  WHERE st.queue = " QUEUE " AND st.state = 'queued' AND st.tenant >= " TENANT HELD \
	"  ORDER BY st.tenant LIMIT 1) = " TENANT

/*
 * The tenants whose locks a release takes: $2 when limited ($3), those
 * with tasks held in $1 ($4): HELD is what such a task is.  On a fair
 * queue, a held task a room can release is one the fair walk reads
 * (run_stages_fair).  One probe per limited tenant, whatever the backlog
 * (SQL_QUEUED_FOR's tenant is a range already, as WFE_SQL_FAIR_TENANT
 * writes it elsewhere: a statistic of one tenant cannot make it a filter).
 */
#define RELEASE_TENANTS(HELD) \
	"SELECT l.tenant, l.max_tasks_in_flight FROM wfe.tenant_limits AS l" \
	" WHERE l.max_tasks_in_flight IS NOT NULL" \
	"   AND (($3 AND l.tenant = $2)" \
	"        OR ($4 AND " SQL_QUEUED_FOR("$1", "l.tenant", HELD) "))" \
	" ORDER BY l.tenant COLLATE \"C\""
static stmt q_release_tenants = STMT(RELEASE_TENANTS(""), 4, TX, TX, BO, BO);
static stmt q_release_tenants_fair = STMT(RELEASE_TENANTS(" AND st.held_until IS NULL AND st.fair"),
										  4, TX, TX, BO, BO);
/*
 * A tenant's pollers: the poll queues (a queue without a wfe.queues row is
 * an unlimited poll queue) where it has tasks queued, one probe per queue
 * with live tasks, whatever its backlog.
 */
static stmt q_tenant_pollers = STMT(
	SQL_LIVE_QUEUES
	" SELECT qs.queue FROM qs LEFT JOIN wfe.queues AS q ON q.queue = qs.queue"
	"  WHERE coalesce(q.delivery, 'poll') = 'poll' AND NOT coalesce(q.paused, false)"
	"    AND " SQL_QUEUED_FOR("qs.queue", "$1", ""), 1, TX);
/*
 * The queues whose locks a release takes: $1 when bounded ($2), the limited
 * ones where $3 has held tasks ($4) -- one probe per limited queue,
 * whatever the tenant's backlog.
 */
static stmt q_release_queues = STMT(
	"SELECT q.queue, q.max_in_flight FROM wfe.queues AS q"
	" WHERE q.delivery = 'broker' AND NOT q.paused AND q.max_in_flight IS NOT NULL"
	"   AND (($2 AND q.queue = $1)"
	"        OR ($4 AND " SQL_QUEUED_FOR("q.queue", "$3", "") "))"
	" ORDER BY q.queue COLLATE \"C\"", 4, TX, BO, TX, BO);
/*
 * A queue's broker tasks held back, in dispatch order, with whether their
 * queue and tenant are limited: the circuit's release
 * (wfe_admission_release_queue), and a release of the queue's side alone.
 * One walk of run_stages_ready from the queue's first, fetched as the room
 * allows: a cursor, planned for its first rows (spi_stmt.c), in the index's
 * own order (ties: as a claim takes them), so that no sort reads the
 * queue's whole held backlog first.
 */
static stmt q_queue_held = STMT(
	"SELECT st.run_id, st.stage, st.queue, st.tenant, q.max_in_flight IS NOT NULL,"
	"       EXISTS (SELECT 1 FROM wfe.tenant_limits AS l"
	"                WHERE l.tenant = st.tenant AND l.max_tasks_in_flight IS NOT NULL)"
	"  FROM wfe.run_stages AS st"
	"  JOIN wfe.queues AS q ON q.queue = st.queue AND q.delivery = 'broker' AND NOT q.paused"
	" WHERE st.queue = $1 AND st.state = 'queued' AND st.held_until IS NULL" WFE_SQL_HELD("st")
	" ORDER BY st.priority DESC, st.ready_at", 1, TX);
/*
 * The candidates of a release of both sides: held in $1 (its ready index,
 * $2), or held of $3 (its unfinished runs, $4), in dispatch order.  (The
 * tenant's half reads its unfinished runs: known, not yet mended.)
 */
static stmt q_candidates = STMT(
	"SELECT h.run_id, h.stage, h.queue, h.tenant, q.max_in_flight IS NOT NULL, l.tenant IS NOT NULL"
	"  FROM (SELECT st.run_id, st.stage, st.queue, st.tenant, st.priority, st.ready_at, st.attempt, st.fence"
	"          FROM wfe.run_stages AS st"
	"         WHERE $2 AND st.queue = $1 AND st.state = 'queued' AND st.handler IS NULL AND st.held_until IS NULL"
	"        UNION"
	"        SELECT st.run_id, st.stage, st.queue, st.tenant, st.priority, st.ready_at, st.attempt, st.fence"
	"          FROM wfe.runs AS r JOIN wfe.run_stages AS st ON st.run_id = r.run_id"
	"         WHERE $4 AND r.tenant = $3 AND r.finished_at IS NULL"
	"           AND st.state = 'queued' AND st.handler IS NULL AND st.held_until IS NULL) AS h"
	"  JOIN wfe.queues AS q ON q.queue = h.queue AND q.delivery = 'broker' AND NOT q.paused"
	"  LEFT JOIN wfe.tenant_limits AS l ON l.tenant = h.tenant AND l.max_tasks_in_flight IS NOT NULL"
	" WHERE NOT EXISTS (SELECT 1 FROM wfe.outbox AS o"
	"                    WHERE o.run_id = h.run_id AND o.stage = h.stage AND o.attempt = h.attempt"
	"                      AND o.fence = h.fence AND o.kind = 'dispatch' AND o.state <> 'published')"
	" ORDER BY h.priority DESC, h.ready_at, h.run_id, h.stage", 4, TX, BO, TX, BO);
/*
 * A fair queue's release (release_fair): one tenant's held tasks at one
 * priority ($1 queue, $2 tenant, $3 priority), oldest first, at most $4 (the
 * room: more cannot go), walked in run_stages_fair from the tenant's
 * first, whatever the others hold (the tenant's condition: WFE_SQL_FAIR_TENANT).
 * (The limit also keeps the generic plan on that walk, not a sort of the
 * tenant's whole backlog.)
 */
static stmt q_tenant_held = STMT(
	"SELECT p.run_id, p.stage FROM wfe.run_stages AS p"
	" WHERE p.queue = $1 AND p.state = 'queued' AND p.held_until IS NULL AND p.fair"
	WFE_SQL_FAIR_TENANT("p.tenant", "$2") " AND p.priority = $3" WFE_SQL_HELD("p")
	" ORDER BY p.tenant, p.priority DESC, p.ready_at LIMIT $4", 4, TX, TX, I4, I4);

/* ---- the locks this transaction waited for ---- */

/* One lock waited for, and the subtransaction that holds it. */
typedef struct held_lock
{
	wfe_limit_kind kind;
	char	   *name;
	SubTransactionId subid;
	struct held_lock *prev;
} held_lock;

static held_lock *held_top = NULL;	/* in TopTransactionContext; NULL between transactions */
static bool callbacks_registered = false;

/* The transaction ended: its locks are released. */
static void
admission_xact_callback(XactEvent event, void *arg)
{
	switch (event)
	{
		case XACT_EVENT_COMMIT:
		case XACT_EVENT_PARALLEL_COMMIT:
		case XACT_EVENT_ABORT:
		case XACT_EVENT_PARALLEL_ABORT:
		case XACT_EVENT_PREPARE:
			held_top = NULL;
			break;
		default:
			break;
	}
}

/* A subtransaction ended: its locks go with it (abort) or pass to its parent (commit). */
static void
admission_subxact_callback(SubXactEvent event, SubTransactionId mySubid, SubTransactionId parentSubid, void *arg)
{
	if (event == SUBXACT_EVENT_ABORT_SUB)
	{
		while (held_top != NULL && held_top->subid == mySubid)
			held_top = held_top->prev;
	}
	else if (event == SUBXACT_EVENT_COMMIT_SUB)
	{
		for (held_lock *h = held_top; h != NULL && h->subid == mySubid; h = h->prev)
			h->subid = parentSubid;
	}
}

/* The greatest name of this kind waited for (the latest: waits go in order), or NULL. */
static const char *
held_greatest(wfe_limit_kind kind)
{
	for (held_lock *h = held_top; h != NULL; h = h->prev)
		if (h->kind == kind)
			return h->name;
	return NULL;
}

/* Remember a lock waited for, until its (sub)transaction ends. */
static void
held_push(wfe_limit_kind kind, const char *name)
{
	held_lock  *h = MemoryContextAlloc(TopTransactionContext, sizeof(held_lock));

	if (!callbacks_registered)
	{
		RegisterXactCallback(admission_xact_callback, NULL);
		RegisterSubXactCallback(admission_subxact_callback, NULL);
		callbacks_registered = true;
	}
	h->kind = kind;
	h->name = MemoryContextStrdup(TopTransactionContext, name);
	h->subid = GetCurrentSubTransactionId();
	h->prev = held_top;
	held_top = h;
}

/*
 * Take a limit's lock: wait when that keeps the lock order, else only try;
 * a missed try records the tenant or queue for the worker's next round
 * (woken at commit).  Returns whether the lock is held.
 */
static bool
limit_lock(wfe_limit_kind kind, const char *name)
{
	Datum		v[2];
	char		nulls[2] = {' ', ' '};

	if (wfe_admission_lock_mode(kind, name, held_greatest(WFE_LIMIT_TENANT),
								held_greatest(WFE_LIMIT_QUEUE)) == WFE_LOCK_WAIT)
	{
		wfe_lock(kind == WFE_LIMIT_TENANT ? TENANT_SPACE : QUEUE_SPACE, name, false);
		held_push(kind, name);
		return true;
	}
	if (wfe_lock(kind == WFE_LIMIT_TENANT ? TENANT_SPACE : QUEUE_SPACE, name, true))
		return true;
	v[0] = stmt_text_or_null(kind == WFE_LIMIT_QUEUE ? name : NULL, &nulls[0]);
	v[1] = stmt_text_or_null(kind == WFE_LIMIT_TENANT ? name : NULL, &nulls[1]);
	stmt_run(&q_recheck_later, v, nulls);
	wfe_wake_at(GetCurrentTimestamp());
	return false;
}

/* Take a tenant's max_tasks_in_flight lock (admission.h). */
bool
wfe_admission_lock_tenant(const char *tenant)
{
	return limit_lock(WFE_LIMIT_TENANT, tenant);
}

/* A count statement's one integer, for name. */
static int
count_of(stmt *q, const char *name)
{
	Datum		v[1] = {CStringGetTextDatum(name)};

	stmt_run(q, v, NULL);
	return pg_strtoint32(stmt_col(1));
}

/* A tenant's tasks in flight (admission.h). */
int
wfe_admission_tenant_in_flight(const char *tenant)
{
	return count_of(&q_tenant_in_flight, tenant);
}

/* What the gates said of a broker task about to be dispatched. */
typedef enum admit_verdict
{
	ADMIT_GO,					/* dispatch it */
	ADMIT_HELD,					/* held by its key, its tenant, a busy lock or its rate limit */
	ADMIT_QUEUE_FULL,			/* held: its queue is at max_in_flight */
	ADMIT_CIRCUIT				/* held: its queue's circuit is open, or half open with the probe out */
} admit_verdict;

/*
 * The last gates of a broker task the limits let go: its queue's circuit
 * (open: none; half open: one probe), then its rate limit's token (none:
 * held until it is due, ratelimit.c).  The circuit first, so that a task
 * it holds takes no token; a probe whose task gets no token is given back.
 * Neither writes anything for a task the circuit holds: it stays queued,
 * not held_until, and the half opening or closing releases it
 * (wfe_admission_release_queue).
 */
static admit_verdict
flow_admit(int64 run_id, const char *stage, const char *queue)
{
	bool		token;

	if (wfe_circuit_claim_room(queue, 1) == 0)
		return ADMIT_CIRCUIT;
	token = wfe_rate_dispatch(run_id, stage);
	wfe_circuit_claim_done(token ? 1 : 0, run_id, stage);
	return token ? ADMIT_GO : ADMIT_HELD;
}

/* The one place a broker task is dispatched: its message written to the outbox. */
static void
dispatch(int64 run_id, const char *stage)
{
	wfe_dispatch_write(run_id, stage);	/* the envelope: dispatch.c */
}

/*
 * A broker task was released: may it be dispatched now?  The gates, in
 * order, each passed before the next is asked, so that a task one holds
 * takes nothing of the next: its key's slot (keyed concurrency,
 * concurrency.c), then one more task of its queue and tenant (the limits'
 * locks, tenant first, then the counts; room is only counted, never
 * taken, so a later gate's hold leaves it), then its queue's circuit and
 * its rate limit's token (flow_admit).
 */
static admit_verdict
admit(int64 run_id, const char *stage, const char *queue, const char *tenant)
{
	Datum		v[4] = {CStringGetTextDatum(queue), CStringGetTextDatum(tenant), Int64GetDatum(run_id),
	CStringGetTextDatum(stage)};
	char	   *queue_max,
			   *tenant_max,
			   *key;
	int			key_max;

	stmt_run(&q_limits, v, NULL);
	if (SPI_processed != 1)
		return ADMIT_HELD;
	queue_max = stmt_col(1);
	tenant_max = stmt_col(2);
	key = stmt_col(3);
	key_max = key != NULL ? pg_strtoint32(stmt_col(4)) : 0;
	if (key != NULL && !wfe_concurrency_dispatch(run_id, stage, queue, tenant, key, key_max))
		return ADMIT_HELD;
	if (tenant_max != NULL && !limit_lock(WFE_LIMIT_TENANT, tenant))
		return ADMIT_HELD;		/* busy out of order: held, rechecked by the next worker round */
	if (queue_max != NULL && !limit_lock(WFE_LIMIT_QUEUE, queue))
		return ADMIT_HELD;
	if (queue_max != NULL &&
		wfe_slots_room(pg_strtoint32(queue_max), count_of(&q_queue_in_flight, queue)) <= 0)
		return ADMIT_QUEUE_FULL;
	if (tenant_max != NULL &&
		wfe_slots_room(pg_strtoint32(tenant_max), count_of(&q_tenant_in_flight, tenant)) <= 0)
		return ADMIT_HELD;
	return flow_admit(run_id, stage, queue);
}

/* A broker task was released (admission.h). */
void
wfe_admission_dispatch(int64 run_id, const char *stage, const char *queue, const char *tenant)
{
	if (admit(run_id, stage, queue, tenant) == ADMIT_GO)
		dispatch(run_id, stage);
}

/*
 * A broker queue's circuit half opened or closed (admission.h): its tasks
 * the circuit held (queued, not held_until, no dispatch message) are
 * dispatched through every gate, in dispatch order, until one finds the
 * circuit or the queue full again -- half open, the first is the probe.
 * Not release_held: the circuit held tasks of limited tenants too, whose
 * room no end of a task will announce.
 */
void
wfe_admission_release_queue(const char *queue)
{
	Datum		v[1] = {CStringGetTextDatum(queue)};
	Portal		cursor = stmt_cursor(&q_queue_held, v, NULL);
	int64	   *run_id = palloc(sizeof(int64) * RELEASE_BATCH);
	char	  **stage = palloc(sizeof(char *) * RELEASE_BATCH);
	char	  **tenant = palloc(sizeof(char *) * RELEASE_BATCH);
	bool		more = true;

	while (more)
	{
		int			n;

		SPI_cursor_fetch(cursor, true, RELEASE_BATCH);
		n = (int) SPI_processed;
		if (n == 0)
			break;
		for (int k = 0; k < n; k++)
		{
			run_id[k] = pg_strtoint64(SPI_getvalue(SPI_tuptable->vals[k], SPI_tuptable->tupdesc, 1));
			stage[k] = SPI_getvalue(SPI_tuptable->vals[k], SPI_tuptable->tupdesc, 2);
			tenant[k] = SPI_getvalue(SPI_tuptable->vals[k], SPI_tuptable->tupdesc, 4);
		}
		for (int k = 0; k < n && more; k++)
		{
			admit_verdict verdict = admit(run_id[k], stage[k], queue, tenant[k]);

			if (verdict == ADMIT_GO)
				dispatch(run_id[k], stage[k]);
			more = verdict != ADMIT_CIRCUIT && verdict != ADMIT_QUEUE_FULL;
		}
	}
	SPI_cursor_close(cursor);
}

/*
 * A broker queue's circuit closed inside an attempt's end (admission.h):
 * its held tasks are released by the worker's next round (a transaction
 * that holds nothing yet), not inside the counting trigger.
 */
void
wfe_admission_recheck_queue(const char *queue)
{
	Datum		v[2] = {CStringGetTextDatum(queue), (Datum) 0};
	char		nulls[2] = {' ', 'n'};

	stmt_run(&q_recheck_later, v, nulls);
	wfe_wake_at(GetCurrentTimestamp());
}

/* The limits a release holds the locks of: their names and rooms (slot 0: a limit not held, room 0). */
typedef struct release_rooms
{
	int			n;
	char	  **name;
	wfe_limit_kind *kind;
	int		   *room;
} release_rooms;

/* The slot of a limit in r, or 0 (not held: room 0). */
static int
rooms_slot(const release_rooms *r, wfe_limit_kind kind, const char *name)
{
	for (int j = 1; j < r->n; j++)
		if (r->kind[j] == kind && strcmp(r->name[j], name) == 0)
			return j;
	return 0;
}

/* Lock the limits the rows of the last statement name (name, max), in their order; keep those taken. */
static void
rooms_lock(release_rooms *r, wfe_limit_kind kind)
{
	int			listed = (int) SPI_processed;
	char	  **names = palloc(sizeof(char *) * Max(listed, 1));
	int		   *limits = palloc(sizeof(int) * Max(listed, 1));
	int			first = r->n;

	for (int k = 0; k < listed; k++)
	{
		names[k] = SPI_getvalue(SPI_tuptable->vals[k], SPI_tuptable->tupdesc, 1);
		limits[k] = pg_strtoint32(SPI_getvalue(SPI_tuptable->vals[k], SPI_tuptable->tupdesc, 2));
	}
	r->name = repalloc(r->name, sizeof(char *) * (r->n + Max(listed, 1)));
	r->kind = repalloc(r->kind, sizeof(wfe_limit_kind) * (r->n + Max(listed, 1)));
	r->room = repalloc(r->room, sizeof(int) * (r->n + Max(listed, 1)));
	for (int k = 0; k < listed; k++)
		if (limit_lock(kind, names[k]))
		{
			r->name[r->n] = names[k];
			r->kind[r->n] = kind;
			r->room[r->n] = limits[k];
			r->n++;
		}
	/* the rooms, counted after all the locks of this kind (statements of their own) */
	for (int j = first; j < r->n; j++)
		r->room[j] = wfe_slots_room(r->room[j], count_of(kind == WFE_LIMIT_TENANT ? &q_tenant_in_flight
														 : &q_queue_in_flight, r->name[j]));
}

/* Add the first column of the last statement's rows to wake (no duplicates). */
static List *
wake_add_rows(List *wake)
{
	for (uint64 k = 0; k < SPI_processed; k++)
	{
		char	   *q = SPI_getvalue(SPI_tuptable->vals[k], SPI_tuptable->tupdesc, 1);

		if (q != NULL && !list_member(wake, makeString(q)))
			wake = lappend(wake, makeString(q));
	}
	return wake;
}

/* Dispatch, in order, the candidates of the open cursor the core lets go. */
static void
release_candidates(Portal cursor, const wfe_release_scope *scope, release_rooms *r)
{
	int64	   *run_id = palloc(sizeof(int64) * RELEASE_BATCH);
	char	  **stage = palloc(sizeof(char *) * RELEASE_BATCH);
	char	  **queues = palloc(sizeof(char *) * RELEASE_BATCH);
	int		   *qslot = palloc(sizeof(int) * RELEASE_BATCH);
	int		   *tslot = palloc(sizeof(int) * RELEASE_BATCH);
	bool	   *go = palloc(sizeof(bool) * RELEASE_BATCH);

	while (!wfe_release_exhausted(scope, r->room))
	{
		int			n;

		SPI_cursor_fetch(cursor, true, RELEASE_BATCH);
		n = (int) SPI_processed;
		if (n == 0)
			break;
		for (int k = 0; k < n; k++)
		{
			HeapTuple	row = SPI_tuptable->vals[k];
			TupleDesc	desc = SPI_tuptable->tupdesc;
			char	   *queue = SPI_getvalue(row, desc, 3);
			char	   *tenant = SPI_getvalue(row, desc, 4);

			run_id[k] = pg_strtoint64(SPI_getvalue(row, desc, 1));
			stage[k] = SPI_getvalue(row, desc, 2);
			queues[k] = queue;
			qslot[k] = SPI_getvalue(row, desc, 5)[0] == 't' ? rooms_slot(r, WFE_LIMIT_QUEUE, queue) : -1;
			tslot[k] = SPI_getvalue(row, desc, 6)[0] == 't' ? rooms_slot(r, WFE_LIMIT_TENANT, tenant) : -1;
		}
		/*
		 * One at a time, so that the room of a task its circuit or rate limit
		 * then holds goes to the next candidate, in this batch too.
		 */
		for (int k = 0; k < n; k++)
		{
			if (wfe_release_pick(scope, 1, &qslot[k], &tslot[k], r->room, &go[k]) == 0)
				continue;
			if (flow_admit(run_id[k], stage[k], queues[k]) == ADMIT_GO)
				dispatch(run_id[k], stage[k]);
			else
			{
				if (qslot[k] > 0)
					r->room[qslot[k]]++;
				if (tslot[k] > 0)
					r->room[tslot[k]]++;
			}
		}
	}
}

/*
 * Dispatch the next held task of tenant at priority in queue that its
 * circuit and rate limit let go, walking the tenant's cursor *walk (opened
 * at the first call, over its next room tasks): a task its rate limit
 * holds passes its room to the tenant's next.  Returns ADMIT_GO (one
 * dispatched), ADMIT_CIRCUIT (the circuit holds the queue), or ADMIT_HELD
 * (the tenant has no more this release).
 */
static admit_verdict
release_tenant_next(const char *queue, const char *tenant, int priority, int room, Portal *walk)
{
	if (*walk == NULL)
	{
		Datum		v[4] = {CStringGetTextDatum(queue), CStringGetTextDatum(tenant), Int32GetDatum(priority),
		Int32GetDatum(room)};

		*walk = stmt_cursor(&q_tenant_held, v, NULL);
	}
	for (;;)
	{
		int64		run_id;
		char	   *stage;
		admit_verdict verdict;

		SPI_cursor_fetch(*walk, true, 1);
		if (SPI_processed == 0)
			return ADMIT_HELD;
		run_id = pg_strtoint64(SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1));
		stage = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2);
		verdict = flow_admit(run_id, stage, queue);
		if (verdict == ADMIT_GO)
			dispatch(run_id, stage);
		if (verdict != ADMIT_HELD)
			return verdict;
	}
}

/*
 * The queue side of a release on a fair queue (fairness = 'tenant', a
 * bounded broker queue whose lock r holds): the queue's room goes to the
 * tenants with held tasks by weight, one task at a time, as a claim's
 * would (the stride: src/core/flow/fairness.c), each tenant within its own
 * room in r.  A tenant's tasks are walked in run_stages_fair from its
 * first held one, never the queue's whole backlog.  A round that leaves
 * room (a tenant ran out at the priority served) is followed by another
 * at the next priority, a few at most; the circuit holding the queue ends
 * it.  Returns false when the queue has no task marked fair held at all (a
 * task released while the queue was being made fair: the caller's release
 * in order takes it).
 */
static bool
release_fair(const char *queue, const wfe_release_scope *scope, release_rooms *r)
{
	int		   *room = &r->room[scope->queue_slot];
	bool		circuit = false;
	bool		any = true;

	for (int round = 0; round < 4 && *room > 0 && !circuit; round++)
	{
		wfe_fair_field f;
		int			top;
		int			k;
		int			sent = 0;
		int		   *tslot;
		int		   *got;
		Portal	   *walk;

		wfe_fair_held(queue, &f);
		if (round == 0 && f.n == 0)
			any = false;
		tslot = palloc(sizeof(int) * Max(f.n, 1));
		got = palloc0(sizeof(int) * Max(f.n, 1));
		walk = palloc0(sizeof(Portal) * Max(f.n, 1));
		/* a limited tenant's room is what r counted under its lock (not taken: 0) */
		for (int j = 0; j < f.n; j++)
		{
			tslot[j] = f.limit[j] < 0 ? -1 : rooms_slot(r, WFE_LIMIT_TENANT, f.tenant[j]);
			f.t[j].cap = tslot[j] < 0 ? -1 : Max(r->room[tslot[j]], 0);
		}
		top = wfe_fair_top(f.t, f.n, f.vt);
		while (*room > 0 && (k = wfe_fair_next(f.t, f.n, top, &f.vt)) >= 0)
		{
			admit_verdict verdict = release_tenant_next(queue, f.tenant[k], top, *room, &walk[k]);

			if (verdict == ADMIT_GO)
			{
				got[k]++;
				sent++;
				(*room)--;
				if (tslot[k] >= 0)
					r->room[tslot[k]]--;
				continue;
			}
			/* the tenant ran out (its room goes to the others), or the circuit holds them all */
			wfe_fair_give_back(f.t, k, got[k]);
			if (verdict == ADMIT_CIRCUIT)
			{
				circuit = true;
				break;
			}
		}
		for (int j = 0; j < f.n; j++)
			if (walk[j] != NULL)
				SPI_cursor_close(walk[j]);
		wfe_fair_keep(queue, &f);
		if (sent == 0)
			break;
	}
	return any;
}

/*
 * Room appeared: a task of queue and tenant ended, or (queue NULL) the
 * tenant's limit was raised or lifted, or (tenant NULL) the queue's.
 * Dispatches the held broker tasks that now fit both limits -- those of
 * the queue when it is a limited broker queue, and those of the tenant in
 * any broker queue when the tenant is limited -- highest priority first,
 * then oldest; returns the poll queues whose claimers should be woken (the
 * queue when it is a limited poll queue, and the poll queues where a
 * limited tenant has queued tasks).
 */
static List *
release_held(const char *queue, const char *tenant)
{
	Datum		v[4];
	char		nulls[4] = {' ', ' ', ' ', ' '};
	bool		bounded,
				open,
				limited,
				fair;
	bool		queue_side,
				tenant_side;
	List	   *wake = NIL;
	release_rooms r = {1, palloc(sizeof(char *)), palloc(sizeof(wfe_limit_kind)), palloc0(sizeof(int))};
	wfe_release_scope scope;
	Portal		cursor;

	v[0] = stmt_text_or_null(queue, &nulls[0]);
	v[1] = stmt_text_or_null(tenant, &nulls[1]);
	stmt_run(&q_scope, v, nulls);
	bounded = stmt_bool(1);
	open = stmt_bool(2);
	if (stmt_bool(3))
		wake = lappend(wake, makeString(pstrdup(queue)));
	limited = stmt_bool(4);
	fair = stmt_bool(5);
	queue_side = wfe_release_queue_side(bounded, open, tenant != NULL, true);
	tenant_side = wfe_release_tenant_side(limited, queue != NULL, tenant != NULL, true, 1);
	if (!queue_side && !tenant_side)
		return wake;

	/* the tenant locks first, in name order: the tenant, and the limited ones with tasks held in the queue */
	v[2] = BoolGetDatum(limited);
	v[3] = BoolGetDatum(queue_side);
	stmt_run(fair ? &q_release_tenants_fair : &q_release_tenants, v, nulls);
	rooms_lock(&r, WFE_LIMIT_TENANT);
	scope.tenant_slot = limited ? rooms_slot(&r, WFE_LIMIT_TENANT, tenant) : -1;
	tenant_side = wfe_release_tenant_side(limited, queue != NULL, tenant != NULL, scope.tenant_slot > 0,
										  scope.tenant_slot > 0 ? r.room[scope.tenant_slot] : 0);
	if (tenant_side)
	{
		Datum		t[1] = {CStringGetTextDatum(tenant)};

		stmt_run(&q_tenant_pollers, t, NULL);
		wake = wake_add_rows(wake);
	}
	if (!queue_side && !tenant_side)
		return wake;

	/* then the queue locks, in name order: the queue, and the limited ones where the tenant has held tasks */
	{
		Datum		q[4] = {v[0], BoolGetDatum(bounded), v[1], BoolGetDatum(tenant_side)};
		char		qn[4] = {nulls[0], ' ', nulls[1], ' '};

		stmt_run(&q_release_queues, q, qn);
	}
	rooms_lock(&r, WFE_LIMIT_QUEUE);
	scope.queue_slot = bounded ? rooms_slot(&r, WFE_LIMIT_QUEUE, queue) : -1;
	queue_side = wfe_release_queue_side(bounded, open, tenant != NULL, scope.queue_slot > 0);
	scope.queue_side = queue_side;
	scope.tenant_side = tenant_side;

	/* a fair queue's room is shared between its tenants by weight; then the tenant's side, in order */
	if (queue_side && scope.queue_slot > 0 && wfe_queue_is_fair(queue) && release_fair(queue, &scope, &r))
	{
		queue_side = scope.queue_side = false;
		if (!tenant_side)
			return wake;
	}
	if (!tenant_side)
		cursor = stmt_cursor(&q_queue_held, v, nulls);
	else
	{
		Datum		c[4] = {v[0], BoolGetDatum(queue_side), v[1], BoolGetDatum(tenant_side)};
		char		cn[4] = {nulls[0], ' ', nulls[1], ' '};

		cursor = stmt_cursor(&q_candidates, c, cn);
	}
	release_candidates(cursor, &scope, &r);
	SPI_cursor_close(cursor);
	return wake;
}

/* A task of queue and tenant ended or left (admission.h). */
void
wfe_admission_room_freed(const char *queue, const char *tenant, const bool *limited)
{
	ListCell   *lc;

	if (limited == NULL)
	{
		Datum		v[2] = {CStringGetTextDatum(queue), CStringGetTextDatum(tenant)};

		stmt_run(&q_limited, v, NULL);
		if (!stmt_bool(1))
			return;
	}
	else if (!*limited)
		return;
	foreach(lc, release_held(queue, tenant))
		wfe_ready_released(strVal(lfirst(lc)));
}

PG_FUNCTION_INFO_V1(wfe_lock_tenant_sql);

/* wfe._lock_tenant(tenant) RETURNS boolean: wfe_admission_lock_tenant for SQL (and the isolation specs). */
Datum
wfe_lock_tenant_sql(PG_FUNCTION_ARGS)
{
	bool		taken;

	SPI_connect();
	taken = wfe_admission_lock_tenant(text_to_cstring(PG_GETARG_TEXT_PP(0)));
	SPI_finish();
	PG_RETURN_BOOL(taken);
}

PG_FUNCTION_INFO_V1(wfe_release_held_sql);

/*
 * wfe._release_held(queue, tenant) RETURNS SETOF text: release_held for
 * wfe.configure_queue and wfe.configure_tenant; the poll queues to wake.
 */
Datum
wfe_release_held_sql(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	List	   *wake;
	ListCell   *lc;
	MemoryContext old;

	/*
	 * A set of text, materialized.  (InitMaterializedSRF wants a row type, or
	 * an expected descriptor, which a call in a select list does not have:
	 * wfe.configure_queue's PERFORM.)
	 */
	if (rsinfo == NULL || !IsA(rsinfo, ReturnSetInfo) || (rsinfo->allowedModes & SFRM_Materialize) == 0)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("set-valued function called in context that cannot accept a set")));
	old = MemoryContextSwitchTo(rsinfo->econtext->ecxt_per_query_memory);
	rsinfo->setDesc = CreateTemplateTupleDesc(1);
	TupleDescInitEntry(rsinfo->setDesc, (AttrNumber) 1, "queue", TEXTOID, -1, 0);
	rsinfo->setResult = tuplestore_begin_heap(true, false, work_mem);
	rsinfo->returnMode = SFRM_Materialize;
	MemoryContextSwitchTo(old);
	SPI_connect();
	wake = release_held(PG_ARGISNULL(0) ? NULL : text_to_cstring(PG_GETARG_TEXT_PP(0)),
						PG_ARGISNULL(1) ? NULL : text_to_cstring(PG_GETARG_TEXT_PP(1)));
	foreach(lc, wake)
	{
		Datum		d[1] = {CStringGetTextDatum(strVal(lfirst(lc)))};
		bool		n[1] = {false};

		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, d, n);
	}
	SPI_finish();
	return (Datum) 0;
}

PG_FUNCTION_INFO_V1(wfe_recheck_admission);

/*
 * wfe._recheck_admission() RETURNS int: the worker round's first item --
 * release what missed tries kept back, for each queue and tenant in
 * wfe.admission_recheck (emptied), in lock order; returns how many.
 */
Datum
wfe_recheck_admission(PG_FUNCTION_ARGS)
{
	int			n;
	char	  **queue,
			  **tenant;

	SPI_connect();
	stmt_run(&q_rechecks, NULL, NULL);
	n = (int) SPI_processed;
	queue = palloc(sizeof(char *) * Max(n, 1));
	tenant = palloc(sizeof(char *) * Max(n, 1));
	for (int k = 0; k < n; k++)
	{
		queue[k] = SPI_getvalue(SPI_tuptable->vals[k], SPI_tuptable->tupdesc, 1);
		tenant[k] = SPI_getvalue(SPI_tuptable->vals[k], SPI_tuptable->tupdesc, 2);
	}
	for (int k = 0; k < n; k++)
	{
		ListCell   *lc;

		foreach(lc, release_held(queue[k], tenant[k]))
			wfe_ready_released(strVal(lfirst(lc)));
		/* a queue alone: its circuit may have closed (wfe_admission_recheck_queue) */
		if (tenant[k] == NULL && queue[k] != NULL)
			wfe_admission_release_queue(queue[k]);
	}
	SPI_finish();
	PG_RETURN_INT32(n);
}
