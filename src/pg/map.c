/*
 * map.c — the server layer of map stages: what the step core's map ops
 * write and its map hooks read (core/engine/map.c decides).
 *
 * A map's elements are rows of wfe.run_stages named NAME[i], with the
 * map's ordinal and their index in `element`, so claim_task, the envelope,
 * the callbacks, the timers and the clocks take them as any stage.  A
 * map's progress is its one wfe.run_maps row.  What each statement touches
 * is the cost rule of runtime.md "Map elements": one element's row and the
 * counter row per element end; every element only at the map's release
 * (the insert) and its final aggregation (q_results, over the
 * run_stages_elements index).
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "utils/builtins.h"

#include "core/engine/step.h"
#include "core/flow/concurrency.h"
#include "spi_stmt.h"
#include "wfe.h"
#include "map.h"

/*
 * the elements, each with its bound input and its rate limit (the map's
 * row holds its item's) under its own bound key ($6: an array, or NULL),
 * its own bound concurrency key ($7: an array, or NULL; max $8), and the
 * counter row
 */
static stmt q_elements = STMT(
	"INSERT INTO wfe.run_stages (run_id, stage, tenant, ordinal, kind, queue, worker, handler, priority,"
	"                            awaits, exec_ms, queue_ms, heartbeat_ms, input, element, rate_limit, rate_key,"
	"                            concurrency_key, concurrency_max)"
	" SELECT m.run_id, m.stage || '[' || (e.n - 1) || ']', m.tenant, m.ordinal, $3, coalesce($4, c.queue),"
	"        m.worker, c.handler, m.priority, m.awaits, m.exec_ms, m.queue_ms, m.heartbeat_ms, e.input::jsonb,"
	"        e.n - 1, m.rate_limit, $6::jsonb ->> (e.n - 1)::int,"
	"        " WFE_SQL_CONCURRENCY_KEY("($7::jsonb ->> (e.n - 1)::int)") ", CASE WHEN $7 IS NOT NULL THEN $8 END"
	"   FROM wfe.run_stages AS m LEFT JOIN wfe.contracts AS c ON c.ref = m.worker,"
	"        jsonb_array_elements_text($5::jsonb) WITH ORDINALITY AS e(input, n)"
	"  WHERE m.run_id = $1 AND m.stage = $2", 8, I8, TX, TX, TX, TX, TX, TX, I4);
static stmt q_start = STMT(
	"UPDATE wfe.run_stages AS st"
	"   SET state = 'running', attempt = $3, fence = $4, outcome = NULL, error = NULL, result = NULL,"
	"       ready_at = now(), started_at = now(), finished_at = NULL, deadline_at = NULL"
	" WHERE st.run_id = $1 AND st.stage = $2", 4, I8, TX, I4, I8);
static stmt q_counts_insert = STMT(
	"INSERT INTO wfe.run_maps (run_id, stage, tenant, total, released, completed, failed, held)"
	" VALUES ($1, $2, $3, $4, 0, 0, 0, 0)", 4, I8, TX, TX, I4);
static stmt q_counts_write = STMT(
	"UPDATE wfe.run_maps AS m SET released = $3, completed = $4, failed = $5, held = $6"
	" WHERE m.run_id = $1 AND m.stage = $2", 6, I8, TX, I4, I4, I4, I4);
static stmt q_counts_read = STMT(
	"SELECT m.total, m.released, m.completed, m.failed, m.held FROM wfe.run_maps AS m"
	" WHERE m.run_id = $1 AND m.stage = $2", 2, I8, TX);
/*
 * a held element: waiting below the released ones, or cancelled there
 * when an operator's reopening of the map resets it in this very step
 * (asked only while the counter row counts some: an operator's redrive,
 * rare; over the run_stages_elements index)
 */
static stmt q_held = STMT(
	"SELECT st.element FROM wfe.run_stages AS st"
	" WHERE st.run_id = $1 AND st.ordinal = $2 AND st.element IS NOT NULL AND st.element < $3"
	"   AND st.state IN ('waiting', 'cancelled')"
	" ORDER BY st.element LIMIT 1", 3, I8, I4, I4);
/*
 * the one final aggregation: results in element order, a failed element's
 * null; element $3, whose end the step is deciding, ended with $4 (NULL:
 * failed) though its row does not say so yet
 */
static stmt q_results = STMT(
	"SELECT jsonb_build_object("
	"         'items', coalesce(jsonb_agg(x.result ORDER BY x.element), '[]'),"
	"         'failed', coalesce(jsonb_agg(x.element ORDER BY x.element) FILTER (WHERE x.result IS NULL), '[]'))::text"
	"  FROM (SELECT st.element,"
	"               CASE WHEN st.element = $3 THEN $4::jsonb"
	"                    WHEN st.state = 'completed' THEN st.result END AS result"
	"          FROM wfe.run_stages AS st"
	"         WHERE st.run_id = $1 AND st.ordinal = $2 AND st.element IS NOT NULL) AS x", 4, I8, I4, I4, TX);
/*
 * The elements under way when the map ends early (past tolerated_failures,
 * or the run's intent or cancel): cancelled and fenced as a stage's cancel
 * is (engine.c's q_cancel, q_cancel_message).  Each one dispatched or
 * running on a broker queue gets a cancel message naming the fence its
 * worker holds, so that worker stops and its ack_cancel is accepted.  Old
 * is locked first: the row a claim or accept_task committed meanwhile is
 * the one whose state decides.  Returns, for the stage.cancelled events,
 * every element cancelled: (stage, attempt, fence asked to stop, state it
 * was in, cancel messages written, and its queue, tenant, concurrency key
 * and max: the key's slot it held or waited for is free now).
 */
static stmt q_cancel_elements = STMT(
	"WITH old AS ("
	"  SELECT st.stage, st.state, st.fence FROM wfe.run_stages AS st"
	"   WHERE st.run_id = $1 AND st.ordinal = $2 AND st.element IS NOT NULL"
	"     AND st.state IN ('waiting', 'queued', 'dispatched', 'running', 'retry_scheduled')"
	"     FOR UPDATE),"
	" c AS ("
	"  UPDATE wfe.run_stages AS st"
	"     SET state = 'cancelled', fence = ((st.fence >> 32) + 1) << 32, finished_at = now(),"
	"         error = $3::jsonb, deadline_at = NULL"
	"    FROM old WHERE st.run_id = $1 AND st.stage = old.stage"
	"  RETURNING st.stage, st.element, st.tenant, st.queue, st.attempt, st.fence, old.fence AS asked, old.state AS was,"
	"            st.concurrency_key, st.concurrency_max),"
	" m AS ("
	"  INSERT INTO wfe.outbox (tenant, run_id, stage, attempt, fence, kind, exchange, routing_key, message_id, body)"
	"  SELECT c.tenant, $1, c.stage, c.attempt, c.fence, 'cancel', wfe._exchange('cancel'),"
	"         wfe._routing_key('cancel', q.queue), wfe._message_id($1, c.stage, c.attempt, c.fence, 'cancel'),"
	"         jsonb_build_object('run_id', $1, 'stage', c.stage, 'attempt', c.attempt, 'fence', c.asked,"
	"                            'reason', $3::jsonb ->> 'message')"
	"    FROM c JOIN wfe.queues AS q ON q.queue = c.queue AND q.delivery = 'broker'"
	"   WHERE c.was IN ('dispatched', 'running')"
	"  RETURNING 1)"
	" SELECT c.stage, c.attempt, c.asked, c.was, (SELECT count(*) FROM m),"
	"        c.queue, c.tenant, c.concurrency_key, c.concurrency_max FROM c"
	"  ORDER BY c.element", 3, I8, I4, TX);

/* an operator reopening a failed map: the elements its failure cancelled */
static stmt q_cancelled = STMT(
	"SELECT st.element FROM wfe.run_stages AS st"
	" WHERE st.run_id = $1 AND st.ordinal = $2 AND st.element IS NOT NULL AND st.state = 'cancelled'"
	" ORDER BY st.element", 2, I8, I4);

int64
wfe_map_cancelled(int64 run_id, int ordinal, int64_t *out, int64_t max)
{
	Datum		v[2] = {Int64GetDatum(run_id), Int32GetDatum(ordinal)};
	int64		n = 0;

	stmt_run(&q_cancelled, v, NULL);
	for (uint64 k = 0; k < SPI_processed && n < max; k++)
		out[n++] = pg_strtoint64(SPI_getvalue(SPI_tuptable->vals[k], SPI_tuptable->tupdesc, 1));
	return n;
}

int64
wfe_map_held(int64 run_id, int ordinal, int64 below)
{
	Datum		v[3] = {Int64GetDatum(run_id), Int32GetDatum(ordinal), Int32GetDatum((int32) below)};

	stmt_run(&q_held, v, NULL);
	return SPI_processed == 1 ? pg_strtoint64(stmt_col(1)) : -1;
}

char *
wfe_map_element_name(const char *map, int64 elem)
{
	return psprintf("%s[" INT64_FORMAT "]", map, elem);
}

void
wfe_map_read_counts(int64 run_id, const char *map, wfe_map_counts *c)
{
	Datum		v[2] = {Int64GetDatum(run_id), CStringGetTextDatum(map)};

	memset(c, 0, sizeof(*c));
	stmt_run(&q_counts_read, v, NULL);
	if (SPI_processed != 1)
		return;
	c->total = pg_strtoint64(stmt_col(1));
	c->released = pg_strtoint64(stmt_col(2));
	c->completed = pg_strtoint64(stmt_col(3));
	c->failed = pg_strtoint64(stmt_col(4));
	c->held = pg_strtoint64(stmt_col(5));
}

const char *
wfe_map_results(int64 run_id, int ordinal, int64 elem, const char *elem_result)
{
	char		n[5] = "    ";
	Datum		v[4] = {Int64GetDatum(run_id), Int32GetDatum(ordinal), Int32GetDatum((int32) elem),
	stmt_text_or_null(elem_result, &n[3])};

	stmt_run(&q_results, v, n);
	return stmt_col(1);
}

/* A key an early end of a map freed: its queue, tenant, key and max. */
typedef struct freed_key
{
	char	   *queue;
	char	   *tenant;
	char	   *key;
	int			max;
} freed_key;

/* The lock order of concurrency keys: queue, tenant, key, COLLATE "C". */
static int
freed_key_cmp(const void *a, const void *b)
{
	const freed_key *x = a;
	const freed_key *y = b;
	int			c = strcmp(x->queue, y->queue);

	if (c == 0)
		c = strcmp(x->tenant, y->tenant);
	return c != 0 ? c : strcmp(x->key, y->key);
}

/* Release each key once, in lock order, with the smallest max its elements had. */
static void
release_freed_keys(freed_key *keys, int n)
{
	qsort(keys, n, sizeof(freed_key), freed_key_cmp);
	for (int k = 0; k < n;)
	{
		int			max = keys[k].max;
		int			e = k + 1;

		for (; e < n && freed_key_cmp(&keys[k], &keys[e]) == 0; e++)
			max = Min(max, keys[e].max);
		wfe_concurrency_key_freed(keys[k].queue, keys[k].tenant, keys[k].key, max);
		k = e;
	}
}


void
wfe_map_apply(int64 run_id, const char *tenant, const wfe_rp_stage *s, const wfe_op *op)
{
	Datum		v[8];
	char		n[9] = "        ";

	v[0] = Int64GetDatum(run_id);
	v[1] = CStringGetTextDatum(s->name);
	switch (op->kind)
	{
		case WFE_OP_MAP_START:
			v[2] = Int32GetDatum(op->attempt);
			v[3] = Int64GetDatum(op->fence);
			stmt_run(&q_start, v, NULL);
			v[2] = CStringGetTextDatum(op->text);
			v[3] = stmt_text_or_null(s->item_worker ? s->item_queue : NULL, &n[3]);
			v[4] = CStringGetTextDatum(op->json);
			v[5] = stmt_text_or_null(op->json2, &n[5]);
			v[6] = stmt_text_or_null(op->concurrency_key, &n[6]);
			v[7] = Int32GetDatum(op->concurrency_max);
			stmt_run(&q_elements, v, n);
			v[2] = CStringGetTextDatum(tenant);
			v[3] = Int32GetDatum((int32) op->counts.total);
			stmt_run(&q_counts_insert, v, NULL);
			break;
		case WFE_OP_MAP_COUNTS:
			v[2] = Int32GetDatum((int32) op->counts.released);
			v[3] = Int32GetDatum((int32) op->counts.completed);
			v[4] = Int32GetDatum((int32) op->counts.failed);
			v[5] = Int32GetDatum((int32) op->counts.held);
			stmt_run(&q_counts_write, v, NULL);
			break;
		default:
			elog(ERROR, "wfe: op %d is no map op", (int) op->kind);
	}
}

int64
wfe_map_cancel(int64 run_id, const wfe_rp_stage *s, const char *error, wfe_map_cancelled_fn each, void *arg)
{
	Datum		v[3] = {Int64GetDatum(run_id), Int32GetDatum(s->ordinal), CStringGetTextDatum(error ? error : "{}")};
	int64		sent = 0;

	freed_key  *keys;
	int			nkeys = 0;

	stmt_run(&q_cancel_elements, v, NULL);
	keys = palloc(sizeof(freed_key) * Max(SPI_processed, 1));
	for (uint64 k = 0; k < SPI_processed; k++)
	{
		HeapTuple	t = SPI_tuptable->vals[k];
		TupleDesc	d = SPI_tuptable->tupdesc;
		char	   *was = SPI_getvalue(t, d, 4);
		char	   *queue = SPI_getvalue(t, d, 6);
		char	   *key = SPI_getvalue(t, d, 8);

		/* an element never released had no attempt: no event, no message */
		if (strcmp(was, "waiting") != 0)
			each(arg, SPI_getvalue(t, d, 1), pg_strtoint32(SPI_getvalue(t, d, 2)),
				 pg_strtoint64(SPI_getvalue(t, d, 3)), was);
		sent = pg_strtoint64(SPI_getvalue(t, d, 5));
		if (key != NULL && queue != NULL)
		{
			keys[nkeys].queue = queue;
			keys[nkeys].tenant = SPI_getvalue(t, d, 7);
			keys[nkeys].key = key;
			keys[nkeys].max = pg_strtoint32(SPI_getvalue(t, d, 9));
			nkeys++;
		}
	}
	/* after the rows are read: each release runs statements of its own */
	release_freed_keys(keys, nkeys);
	return sent;
}
