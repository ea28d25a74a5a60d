/*
 * claim.c — wfe.claim_task: poll workers take ready tasks.
 *
 * A claim decides nothing about how a run moves (queued -> running is the
 * only transition, and it needs no run lock), so it does not go through the
 * step core: one statement walks the ready index, updates what it took and
 * records the claims; ready.c hears whether the claimer may now wait.
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "funcapi.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"
#include "catalog/pg_type.h"
#include "storage/itemptr.h"

#include "admission.h"
#include "deadline.h"
#include "spi_stmt.h"
#include "bgw/bgw.h"
#include "wfe.h"

/*
 * The claim: the ready index is walked under SKIP LOCKED and the rows taken
 * are updated by tuple id, so the plan never joins against (or scans) the
 * stage table, whatever its size and max_tasks (test/tap/006_claim_plan.pl).
 */
#define CLAIM_UPDATE \
	"WITH claimed AS (" \
	"  UPDATE wfe.run_stages AS st" \
	"     SET state = 'running', claimed_by = $2, started_at = now(), heartbeat_at = now(), lease_ms = $4," \
	"         deadline_at = now() + " WFE_SQL_WINDOW("$4") \
	"   WHERE st.ctid = ANY ("
#define CLAIM_PICK "SELECT p.ctid" CLAIM_FROM
#define CLAIM_FROM \
	" FROM wfe.run_stages AS p" \
	" WHERE p.queue = $1 AND p.state = 'queued' AND p.held_until IS NULL" \
	"   AND NOT EXISTS (SELECT 1 FROM wfe.queues AS q" \
	"                    WHERE q.queue = $1 AND (q.paused OR q.delivery = 'broker'))"
#define CLAIM_PICK_END \
	" ORDER BY p.priority DESC, p.ready_at LIMIT $3" \
	"   FOR UPDATE SKIP LOCKED"
#define CLAIM_REST \
	")" \
	"  RETURNING st.*" \
	"), logged AS (" \
	"  INSERT INTO wfe.events (run_id, tenant, stage, attempt, type, detail)" \
	"  SELECT c.run_id, c.tenant, c.stage, c.attempt, 'stage.claimed'," \
	"         jsonb_build_object('worker_id', $2::text) FROM claimed AS c" \
	")" \
	" SELECT c.run_id, c.stage, c.attempt, c.fence, c.queue, c.worker, c.input, NULL::jsonb," \
	"        c.deadline_at, c.heartbeat_ms," \
	/* lookups per claimed row: a join would be hashed in the generic plan */ \
	"        (SELECT r.definition_digest FROM wfe.runs AS r WHERE r.run_id = c.run_id)," \
	"        NULL::uuid, c.tenant," \
	"        (SELECT wfe._attempt_traceparent(r.trace_id, r.span_id, r.trace_flags, c.stage, c.attempt)" \
	"           FROM wfe.runs AS r WHERE r.run_id = c.run_id)" \
	"   FROM claimed AS c" \
	"  ORDER BY c.priority DESC, c.ready_at"
/*
 * The claim when some tenant has a task limit (max_tasks_in_flight): only
 * tasks of tenants without one, or of the limited tenants in $5, whose
 * locks this claimer holds and who have room for $3 more.  (A tenant
 * limited since the tenants were listed is passed over, not overrun.)
 */
#define TENANT_PICK \
	"   AND (p.tenant = ANY ($5)" \
	"        OR NOT EXISTS (SELECT 1 FROM wfe.tenant_limits AS l" \
	"                        WHERE l.tenant = p.tenant AND l.max_tasks_in_flight IS NOT NULL))"

static stmt q_claim = STMT(CLAIM_UPDATE "ARRAY(" CLAIM_PICK CLAIM_PICK_END ")" CLAIM_REST, 4, TX, TX, I4, I4);
static stmt q_claim_limited = STMT(CLAIM_UPDATE "ARRAY(" CLAIM_PICK TENANT_PICK CLAIM_PICK_END ")" CLAIM_REST,
								   5, TX, TX, I4, I4, TEXTARRAYOID);

/*
 * A fair queue's claim (fairness.c): one tenant's tasks at one priority
 * ($5, $6), in the order of run_stages_fair, whose leading columns the
 * conditions fix, so the walk starts at the tenant's next task whatever
 * other tenants have queued (the tenant's is a range: WFE_SQL_FAIR_TENANT).
 */
#define FAIR_PICK \
	"   AND p.fair" WFE_SQL_FAIR_TENANT("p.tenant", "$5") " AND p.priority = $6" \
	" ORDER BY p.tenant, p.priority DESC, p.ready_at LIMIT $3" \
	"   FOR UPDATE SKIP LOCKED"
static stmt q_claim_fair = STMT(CLAIM_UPDATE "ARRAY(" CLAIM_PICK FAIR_PICK ")" CLAIM_REST, 6, TX, TX, I4, I4, TX, I4);

/*
 * When rate limits exist, a claim first picks (and locks) its candidates,
 * ratelimit.c says which of them have a token, and the claim takes those
 * ($5) and only those.
 */
#define RATE_PICK "SELECT p.ctid, p.rate_limit, p.rate_key, p.tenant, p.concurrency_key, p.concurrency_max" \
	CLAIM_FROM
static stmt q_pick = STMT(RATE_PICK CLAIM_PICK_END, 3, TX, TX, I4);
static stmt q_pick_limited = STMT(RATE_PICK TENANT_PICK CLAIM_PICK_END, 5, TX, TX, I4, I4, TEXTARRAYOID);
static stmt q_pick_fair = STMT(RATE_PICK FAIR_PICK, 6, TX, TX, I4, I4, TX, I4);
static stmt q_claim_taken = STMT(CLAIM_UPDATE "$5" CLAIM_REST, 5, TX, TX, I4, I4, TIDARRAYOID);
static stmt q_queue_broker = STMT(
	"SELECT EXISTS (SELECT 1 FROM wfe.queues AS q WHERE q.queue = $1 AND q.delivery = 'broker')", 1, TX);
static stmt q_queue_known = STMT(
	"SELECT EXISTS (SELECT 1 FROM wfe.contracts AS c WHERE c.queue = $1)"
	"    OR EXISTS (SELECT 1 FROM wfe.queues AS q WHERE q.queue = $1)", 1, TX);

/*
 * A queue's in-flight limit (max_in_flight): its row is locked first, so
 * claimers of a limited queue take turns, and the count is a statement of
 * its own, after the lock, so it sees what the previous claimer committed
 * (a count in the locking statement would use the snapshot from before the
 * wait).  Unlimited queues lock nothing.  The same statement says whether
 * any tenant has a task limit: when none has, that is all the claim pays.
 */
static stmt q_queue_limit = STMT(
	"SELECT (SELECT q.max_in_flight FROM wfe.queues AS q WHERE q.queue = $1 AND q.max_in_flight IS NOT NULL"
	"           FOR NO KEY UPDATE),"
	"       EXISTS (SELECT 1 FROM wfe.tenant_limits AS l WHERE l.max_tasks_in_flight IS NOT NULL),"
	"       EXISTS (SELECT 1 FROM wfe.rate_limits)"
	/*
	 * keyed concurrency among the queue's ready tasks (79_concurrency.sql:
	 * one index probe).  A scalar subquery in the index's order, not an
	 * EXISTS: with many keyed tasks queued, an EXISTS costs a Seq Scan as
	 * finding one at once, and reads the backlog when they lie far in.
	 */
	"    OR coalesce((SELECT true FROM wfe.run_stages AS k WHERE k.queue = $1 AND k.state = 'queued'"
	"                    AND k.concurrency_key IS NOT NULL AND k.held_until IS NULL"
	"                  ORDER BY k.queue, k.state, k.tenant, k.concurrency_key LIMIT 1), false)", 1, TX);
static stmt q_queue_busy = STMT(
	"SELECT count(*)::int FROM wfe.run_stages AS st"
	" WHERE st.queue = $1 AND st.state IN ('dispatched', 'running')", 1, TX);

/*
 * A tenant's task limit (max_tasks_in_flight), the same way: the limited
 * tenants among the next $2 tasks of the queue (a peek without locks, as
 * long as the room, whatever the backlog), in lock order (74_admission.sql),
 * each locked (admission.c, in lock order) and then counted in a statement of its own.
 * A limited tenant further down is passed over by this claim, not overrun.
 */
static stmt q_tenants_limited = STMT(
	"SELECT l.tenant, l.max_tasks_in_flight"
	"  FROM (SELECT DISTINCT n.tenant FROM (SELECT p.tenant FROM wfe.run_stages AS p"
	"                                        WHERE p.queue = $1 AND p.state = 'queued' AND p.held_until IS NULL"
	"                                        ORDER BY p.priority DESC, p.ready_at LIMIT $2) AS n) AS t"
	"  JOIN wfe.tenant_limits AS l ON l.tenant = t.tenant AND l.max_tasks_in_flight IS NOT NULL"
	" ORDER BY l.tenant COLLATE \"C\"", 2, TX, I4);

/*
 * How many more tasks a tenant with task limit limit may be given: its
 * lock taken (0 when it is busy out of lock order: its tasks wait for the
 * next claim), then its tasks in flight counted.  The caller asks in lock
 * order (tenants by name, COLLATE "C").
 */
int
wfe_tenant_room(const char *tenant, int limit)
{
	if (!wfe_admission_lock_tenant(tenant))
		return 0;
	return Max(limit - wfe_admission_tenant_in_flight(tenant), 0);
}

/* The limited tenants a claim may take tasks of, and how many each. */
typedef struct tenant_room
{
	int			n;
	char	  **name;
	int		   *room;
} tenant_room;

/* Lock and count the limited tenants among the next tasks of this queue; keep those with room. */
static void
tenant_rooms(Datum queue, int room, tenant_room *t)
{
	Datum		v[2] = {queue, Int32GetDatum(room)};
	int			listed;
	char	  **names;
	int		   *limits;

	stmt_run(&q_tenants_limited, v, NULL);
	listed = (int) SPI_processed;
	names = palloc(sizeof(char *) * Max(listed, 1));
	limits = palloc(sizeof(int) * Max(listed, 1));
	for (int k = 0; k < listed; k++)
	{
		names[k] = SPI_getvalue(SPI_tuptable->vals[k], SPI_tuptable->tupdesc, 1);
		limits[k] = pg_strtoint32(SPI_getvalue(SPI_tuptable->vals[k], SPI_tuptable->tupdesc, 2));
	}
	t->n = 0;
	t->name = palloc(sizeof(char *) * Max(listed, 1));
	t->room = palloc(sizeof(int) * Max(listed, 1));
	for (int k = 0; k < listed; k++)
	{
		int			room = wfe_tenant_room(names[k], limits[k]);

		if (room <= 0)
			continue;
		t->name[t->n] = names[k];
		t->room[t->n] = room;
		t->n++;
	}
}

/* The tenants in t as a text[] argument. */
static Datum
tenant_array(const tenant_room *t)
{
	Datum	   *d = palloc(sizeof(Datum) * Max(t->n, 1));

	for (int k = 0; k < t->n; k++)
		d[k] = CStringGetTextDatum(t->name[k]);
	return PointerGetDatum(construct_array(d, t->n, TEXTOID, -1, false, TYPALIGN_INT));
}

/*
 * A claim round when rate limits exist: pick and lock the candidates with
 * pick (q_pick, q_pick_limited or q_pick_fair, whose arguments w and m
 * are), keep those with a token (ratelimit.c holds the others), claim
 * them.  Returns how many were picked; SPI_tuptable holds the claimed rows.
 */
static uint64
claim_rated(stmt *pick, Datum *w, const char *m)
{
	uint64		picked;
	ItemPointer *tids;
	char	  **limit,
			  **key,
			  **tenant,
			  **ckey;
	int		   *cmax;
	bool	   *take,
			   *fits;
	Datum	   *taken;
	int			ntaken = 0;
	Datum		c[5];
	char		cn[6] = "     ";

	const char *queue = TextDatumGetCString(w[0]);

	stmt_run(pick, w, m);
	picked = SPI_processed;
	tids = palloc(sizeof(ItemPointer) * Max(picked, 1));
	limit = palloc(sizeof(char *) * Max(picked, 1));
	key = palloc(sizeof(char *) * Max(picked, 1));
	tenant = palloc(sizeof(char *) * Max(picked, 1));
	take = palloc(sizeof(bool) * Max(picked, 1));
	ckey = palloc(sizeof(char *) * Max(picked, 1));
	cmax = palloc(sizeof(int) * Max(picked, 1));
	fits = palloc(sizeof(bool) * Max(picked, 1));
	taken = palloc(sizeof(Datum) * Max(picked, 1));
	for (uint64 k = 0; k < picked; k++)
	{
		HeapTuple	t = SPI_tuptable->vals[k];
		bool		isnull;

		tids[k] = palloc(sizeof(ItemPointerData));
		ItemPointerCopy((ItemPointer) DatumGetPointer(SPI_getbinval(t, SPI_tuptable->tupdesc, 1, &isnull)), tids[k]);
		limit[k] = SPI_getvalue(t, SPI_tuptable->tupdesc, 2);
		key[k] = SPI_getvalue(t, SPI_tuptable->tupdesc, 3);
		tenant[k] = SPI_getvalue(t, SPI_tuptable->tupdesc, 4);
		ckey[k] = SPI_getvalue(t, SPI_tuptable->tupdesc, 5);
		cmax[k] = ckey[k] ? pg_strtoint32(SPI_getvalue(t, SPI_tuptable->tupdesc, 6)) : 0;
	}
	/* keyed concurrency first: what it holds or leaves ready takes no token */
	wfe_concurrency_admit(queue, (int) picked, tids, tenant, ckey, cmax, fits);
	for (uint64 k = 0; k < picked; k++)
		if (!fits[k])
			limit[k] = NULL;
	wfe_rate_admit((int) picked, tids, limit, key, tenant, take);
	for (uint64 k = 0; k < picked; k++)
		take[k] = take[k] && fits[k];
	for (uint64 k = 0; k < picked; k++)
		if (take[k])
			taken[ntaken++] = PointerGetDatum(tids[k]);
	memcpy(c, w, sizeof(Datum) * 4);
	memcpy(cn, m, 4);
	c[4] = PointerGetDatum(construct_array(taken, ntaken, TIDOID, sizeof(ItemPointerData), false, TYPALIGN_SHORT));
	stmt_run(&q_claim_taken, c, cn);
	return picked;
}

/* The last task a claim took: a half-open circuit's probe is it (circuit.c). */
static struct
{
	int64		run_id;
	char	   *stage;
} claim_last;

/*
 * Put the rows a claim statement returned (SPI_tuptable) into the result,
 * noting the earliest execution deadline in *due, what each limited
 * tenant of t took and the last task (claim_last); returns how many.
 */
static uint64
claim_emit(ReturnSetInfo *rsinfo, TimestampTz *due, tenant_room *tr)
{
	uint64		got = SPI_processed;

	for (uint64 k = 0; k < got; k++)
	{
		Datum		values[14];
		bool		nulls[14];

		heap_deform_tuple(SPI_tuptable->vals[k], SPI_tuptable->tupdesc, values, nulls);
		values[11] = wfe_message_id(DatumGetInt64(values[0]), TextDatumGetCString(values[1]),
									DatumGetInt32(values[2]), DatumGetInt64(values[3]), "dispatch");
		nulls[11] = false;
		/* the worker must be awake when the execution deadline passes */
		if (!nulls[8] && (*due == 0 || DatumGetTimestampTz(values[8]) < *due))
			*due = DatumGetTimestampTz(values[8]);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
		claim_last.run_id = DatumGetInt64(values[0]);
		claim_last.stage = TextDatumGetCString(values[1]);
		if (!nulls[12])
		{
			char	   *tenant = TextDatumGetCString(values[12]);

			for (int j = 0; j < tr->n; j++)
				if (strcmp(tr->name[j], tenant) == 0)
					tr->room[j]--;
		}
	}
	return got;
}

/*
 * A fair queue's claim (fairness.c): room shared between the tenants with
 * ready work (and room under their task limits) by weight, one claim
 * statement per tenant given any.  A round that leaves room (a tenant ran
 * out at that priority, another claimer holds its next tasks, or the
 * tenants' limits left some unshared) is followed by another, a few at
 * most.  Returns how many were claimed;
 * *none_fair says the queue had no task marked fair ready at all (a task
 * released while the queue was being made fair: the caller's plain claim
 * takes it).
 */
static uint64
claim_fair(ReturnSetInfo *rsinfo, const char *queue, Datum *v, const char *n, int room, bool rated,
		   TimestampTz *due, bool *none_fair)
{
	uint64		claimed = 0;
	tenant_room none = {0, NULL, NULL};

	*none_fair = false;
	for (int round = 0; round < 4 && room > 0; round++)
	{
		wfe_fair_share *shares;
		bool		ready;
		int			ns = wfe_fair_shares(queue, room, &shares, &ready);
		uint64		before = claimed;

		if (round == 0 && !ready)
			*none_fair = true;
		if (ns == 0)
			break;
		for (int k = 0; k < ns; k++)
		{
			Datum		w[6] = {v[0], v[1], Int32GetDatum(shares[k].n), v[3],
			CStringGetTextDatum(shares[k].tenant), Int32GetDatum(shares[k].priority)};
			char		m[7] = "      ";
			int			got;

			if (shares[k].n == 0)
				continue;
			m[3] = n[3];
			/* with rate limits, the tenant's candidates without a token are held */
			if (rated)
				(void) claim_rated(&q_pick_fair, w, m);
			else
				stmt_run(&q_claim_fair, w, m);
			got = (int) claim_emit(rsinfo, due, &none);
			wfe_fair_took(queue, &shares[k], got);
			claimed += got;
			room -= got;
		}
		/*
		 * nothing at all (a paused queue, every next task locked, every
		 * tenant full): done.  Room left after a round that took something
		 * (a tenant ran short, or its limit left room unshared) goes to
		 * another round, which serves the tenants that still have room.
		 */
		if (claimed == before)
			break;
	}
	return claimed;
}

PG_FUNCTION_INFO_V1(wfe_claim_task);

/*
 * wfe.claim_task(queue, worker_id, max_tasks, lease_ms) RETURNS SETOF wfe.task
 *
 * Up to max_tasks ready tasks of a poll queue, highest priority then
 * oldest, marked running with an execution deadline; never waits for
 * another claimer (SKIP LOCKED).
 */
Datum
wfe_claim_task(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	char	   *queue;
	int			max_tasks;
	wfe_claim_ticket ticket;
	Datum		v[4];
	char		n[5] = "    ";
	TimestampTz due = 0;
	uint64		claimed;

	if (PG_ARGISNULL(0) || PG_ARGISNULL(1))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("queue and worker_id must not be null")));
	max_tasks = PG_ARGISNULL(2) ? 0 : PG_GETARG_INT32(2);
	if (PG_ARGISNULL(2) || max_tasks < 1 || max_tasks > 1000)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 PG_ARGISNULL(2) ? errmsg("max_tasks must be between 1 and 1000, not <NULL>")
				 : errmsg("max_tasks must be between 1 and 1000, not %d", max_tasks)));
	if (!PG_ARGISNULL(3) && PG_GETARG_INT32(3) < 1)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("lease_ms must be positive, not %d", PG_GETARG_INT32(3))));
	queue = wfe_admitted_name(PG_GETARG_TEXT_PP(0), "queue");
	(void) wfe_admitted_name(PG_GETARG_TEXT_PP(1), "worker_id");
	/* first: a role that may not claim learns nothing, not even whether the queue exists */
	wfe_require_queue(queue, "claim from");

	InitMaterializedSRF(fcinfo, 0);
	SPI_connect();
	/* before the claim's snapshot: a release from now on wakes us if we wait */
	wfe_ready_claim_begin(queue, &ticket);
	v[0] = PG_GETARG_DATUM(0);
	v[1] = PG_GETARG_DATUM(1);
	v[2] = Int32GetDatum(max_tasks);
	v[3] = PG_ARGISNULL(3) ? (Datum) 0 : PG_GETARG_DATUM(3);
	n[3] = PG_ARGISNULL(3) ? 'n' : ' ';
	{
		/* over the queue's limit, tasks stay queued; a finishing one wakes us */
		int			room = max_tasks;
		bool		tenants_limited;
		bool		rated;
		int			rounds = 0;
		tenant_room tr = {0, NULL, NULL};

		stmt_run(&q_queue_limit, v, NULL);
		tenants_limited = stmt_bool(2);
		rated = stmt_bool(3);
		if (stmt_col(1) != NULL)
		{
			int			limit = pg_strtoint32(stmt_col(1));

			stmt_run(&q_queue_busy, v, NULL);
			room = Min(max_tasks, limit - pg_strtoint32(stmt_col(1)));
		}
		/* an open circuit lets none go, a half-open one its probe (circuit.c) */
		room = wfe_circuit_claim_room(queue, room);
		claimed = 0;
		/* a fair queue shares the room between its tenants with room (fairness.c) */
		if (room > 0 && wfe_queue_is_fair(queue))
		{
			bool		none_fair;

			claimed = claim_fair(rsinfo, queue, v, n, room, rated, &due, &none_fair);
			if (!none_fair)
				room = 0;
		}
		if (tenants_limited && room > 0)
			tenant_rooms(v[0], room, &tr);
		/*
		 * Without tenant limits, one claim.  With them, rounds of at most the
		 * smallest room of a limited tenant still allowed, so no round can
		 * overrun one; a tenant out of room leaves the next round's list.
		 */
		while (room > 0)
		{
			int			take = room;
			uint64		got;
			uint64		picked;

			for (int k = 0; k < tr.n; k++)
				take = Min(take, tr.room[k]);

			v[2] = Int32GetDatum(take);
			{
				Datum		w[5] = {v[0], v[1], v[2], v[3], tenants_limited ? tenant_array(&tr) : (Datum) 0};
				char		m[6] = "     ";

				m[3] = n[3];
				m[4] = tenants_limited ? ' ' : 'n';
				if (rated)
					picked = claim_rated(tenants_limited ? &q_pick_limited : &q_pick, w, m);
				else
				{
					stmt_run(tenants_limited ? &q_claim_limited : &q_claim, w, m);
					picked = SPI_processed;
				}
			}
			got = claim_emit(rsinfo, &due, &tr);
			claimed += got;
			room -= (int) got;
			/*
			 * a rated round that held some goes on: the ready index has the
			 * rest -- for a few rounds, so that one claim never walks a
			 * whole backlog of one full key (held as it goes)
			 */
			if (picked < (uint64) take || (!tenants_limited && !rated) || ++rounds > 8)
				break;
			for (int j = 0; j < tr.n;)
				if (tr.room[j] <= 0)
				{
					tr.name[j] = tr.name[tr.n - 1];
					tr.room[j] = tr.room[tr.n - 1];
					tr.n--;
				}
				else
					j++;
		}
	}
	wfe_circuit_claim_done((int) claimed, claim_last.run_id, claim_last.stage);
	if (due != 0)
		wfe_wake_at(due);
	wfe_ready_claim_end(queue, &ticket, claimed < (uint64) max_tasks);

	if (claimed == 0)
	{
		Datum		q[1] = {PG_GETARG_DATUM(0)};

		stmt_run(&q_queue_broker, q, NULL);
		if (stmt_bool(1))
			ereport(ERROR,
					(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
					 errmsg("queue \"%s\" is in broker delivery mode", queue),
					 errhint("Its tasks are dispatched through RabbitMQ and started with wfe.accept_task; "
							 "wfe.configure_queue(queue, 'poll') makes it a poll queue.")));
		stmt_run(&q_queue_known, q, NULL);
		if (!stmt_bool(1))
			ereport(ERROR,
					(errcode(ERRCODE_UNDEFINED_OBJECT),
					 errmsg("queue \"%s\" does not exist", queue),
					 errhint("Queues come from the contracts registry (wfe.register_worker, wfe.register_action).")));
	}
	SPI_finish();
	return (Datum) 0;
}

