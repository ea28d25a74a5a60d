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
 * the elements under way when the map ends early: cancelled, their fences
 * grown; the concurrency keys they held or waited for (their slots free)
 */
static stmt q_cancel_elements = STMT(
	"WITH c AS (UPDATE wfe.run_stages AS st"
	"   SET state = 'cancelled', fence = ((st.fence >> 32) + 1) << 32, finished_at = now(),"
	"       error = $3::jsonb, deadline_at = NULL"
	" WHERE st.run_id = $1 AND st.ordinal = $2 AND st.element IS NOT NULL"
	"   AND st.state IN ('waiting', 'queued', 'dispatched', 'running', 'retry_scheduled')"
	" RETURNING st.queue, st.tenant, st.concurrency_key, st.concurrency_max)"
	" SELECT c.queue, c.tenant, c.concurrency_key, min(c.concurrency_max) FROM c"
	"  WHERE c.concurrency_key IS NOT NULL AND c.queue IS NOT NULL"
	"  GROUP BY c.queue, c.tenant, c.concurrency_key"
	"  ORDER BY c.queue COLLATE \"C\", c.tenant COLLATE \"C\", c.concurrency_key COLLATE \"C\"", 3, I8, I4, TX);

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

/* The keys q_cancel_elements returned: each has slots free now (pg/concurrency.c). */
static void
cancelled_keys_freed(void)
{
	int			n = (int) SPI_processed;
	char	  **row = palloc(sizeof(char *) * 4 * Max(n, 1));

	/* copied out first: each release runs statements of its own */
	for (int k = 0; k < n; k++)
		for (int c = 0; c < 4; c++)
			row[k * 4 + c] = SPI_getvalue(SPI_tuptable->vals[k], SPI_tuptable->tupdesc, c + 1);
	for (int k = 0; k < n; k++)
		wfe_concurrency_key_freed(row[k * 4], row[k * 4 + 1], row[k * 4 + 2], pg_strtoint32(row[k * 4 + 3]));
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
		case WFE_OP_MAP_CANCEL:
			v[1] = Int32GetDatum(s->ordinal);
			v[2] = CStringGetTextDatum(op->json ? op->json : "{}");
			stmt_run(&q_cancel_elements, v, NULL);
			cancelled_keys_freed();
			break;
		default:
			elog(ERROR, "wfe: op %d is no map op", (int) op->kind);
	}
}
