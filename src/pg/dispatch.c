/*
 * dispatch.c — a released attempt's dispatch message, written to the outbox
 * (dispatch.h).  The core builds the envelope (src/core/engine/envelope.c);
 * this file reads what it needs, writes it with prepared statements and
 * wakes the publisher.  The message's id, exchange and routing key come
 * from message.c and src/amqp/topology.c, as everywhere else.
 *
 * Two callers: broker admission (admission.c: a released attempt its
 * queue's and tenant's limits and its key admit, and held work released),
 * and wfe._dispatch(runs, run_stages), kept SQL-callable for tests and
 * tools.
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "access/xact.h"
#include "catalog/pg_type.h"
#include "common/md5.h"
#include "executor/executor.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "mb/pg_wchar.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"
#include "utils/timestamp.h"
#include "utils/uuid.h"

#include "amqp/topology.h"
#include "bgw/bgw.h"
#include "core/engine/envelope.h"
#include "dispatch.h"
#include "spi_stmt.h"
#include "wfe.h"

/* The columns of WFE_DISPATCH_COLUMNS, in order. */
enum
{
	C_RUN_ID, C_STAGE, C_ATTEMPT, C_FENCE, C_DIGEST, C_WORKER, C_TENANT, C_WORKFLOW, C_VERSION,
	C_INPUT, C_HEARTBEAT, C_EXEC, C_DEADLINE, C_TRACE_ID, C_SPAN_ID, C_FLAGS, C_QUEUE, N_COLS
};

/* Where each column is in wfe._dispatch's arguments: the run (0) or the stage (1) row. */
static const struct
{
	int			arg;
	const char *name;
}			composite[N_COLS] = {
	{0, "run_id"}, {1, "stage"}, {1, "attempt"}, {1, "fence"}, {0, "definition_digest"},
	{1, "worker"}, {0, "tenant"}, {0, "workflow"}, {0, "version"}, {1, "input"},
	{1, "heartbeat_ms"}, {1, "exec_ms"}, {1, "deadline_at"}, {0, "trace_id"}, {0, "span_id"},
	{0, "trace_flags"}, {1, "queue"}
};

static stmt q_attempt = STMT(
	"SELECT " WFE_DISPATCH_COLUMNS " FROM wfe.runs AS r, wfe.run_stages AS s"
	" WHERE r.run_id = $1 AND s.run_id = $1 AND s.stage = $2", 2, I8, TX);
/* a large input, once per stage and digest (a redispatch finds it there) */
static stmt q_payload = STMT(
	"INSERT INTO wfe.payloads (key, tenant, bytes, body, run_id, stage)"
	" VALUES ($1, $2, $3, coalesce($4, '{}'), $5, $6)"
	" ON CONFLICT (run_id, stage, key) DO NOTHING", 6, TX, TX, I4, JSONBOID, I8, TX);
static stmt q_outbox = STMT(
	"INSERT INTO wfe.outbox (tenant, run_id, stage, attempt, fence, kind, exchange, routing_key,"
	"                        message_id, headers, body)"
	" VALUES ($1, $2, $3, $4, $5, 'dispatch', $6, $7, $8, $9::jsonb, $10::jsonb)",
	10, TX, I8, TX, I4, I8, TX, TX, UUIDOID, TX, TX);

/* The W3C traceparent of a run's attempt (dispatch.h). */
char *
wfe_attempt_traceparent(const char *trace_id, const char *run_span, const char *flags,
						const char *stage, int attempt)
{
	char	   *seed;
	char		md5[33];
	const char *errstr = NULL;

	if (trace_id == NULL || run_span == NULL || flags == NULL || stage == NULL)
		return NULL;
	/* the attempt's span id: left(md5(run_span || ':' || stage || ':' || attempt), 16) */
	seed = psprintf("%s:%s:%d", run_span, stage, attempt);
	if (!pg_md5_hash(seed, strlen(seed), md5, &errstr))
		elog(ERROR, "wfe: md5 failed: %s", errstr ? errstr : "?");
	pfree(seed);
	md5[16] = '\0';
	return psprintf("00-%s-%s-%s", trace_id, md5, flags);
}

/*
 * SHA-256 of a large input's text, as 0.2.0 took it: of its UTF-8 bytes
 * (convert_to(text, 'UTF8')), whatever the database's encoding.
 */
static void
input_sha256(const unsigned char *data, size_t len, unsigned char out[32])
{
	char	   *utf8 = (char *) pg_server_to_any((const char *) data, (int) len, PG_UTF8);

	wfe_sha256((const unsigned char *) utf8, utf8 == (char *) data ? len : strlen(utf8), out);
}

/* A text column as a C string, or NULL. */
static char *
col_text(Datum *v, bool *n, int c)
{
	return n[c] ? NULL : TextDatumGetCString(v[c]);
}

/* A built envelope, in palloc'd memory. */
typedef struct envelope_copy
{
	bool		large;
	int32		bytes;			/* the input's */
	char		key[WFE_TOPOLOGY_NAME_MAX];	/* the routing key */
	Datum		headers;
	Datum		body;
	Datum		payload_key;	/* large only */
} envelope_copy;

/*
 * Copy env into palloc'd memory and free it: nothing may raise while env
 * holds the builder's malloc'd texts without freeing them.
 */
static envelope_copy *
copy_envelope(wfe_envelope *env, const char *queue)
{
	envelope_copy *c = palloc0(sizeof(envelope_copy));

	PG_TRY();
	{
		c->large = env->payload_key != NULL;
		c->bytes = (int32) env->input_bytes;
		c->headers = CStringGetTextDatum(env->headers);
		c->body = CStringGetTextDatum(env->body);
		if (c->large)
			c->payload_key = CStringGetTextDatum(env->payload_key);
		if (!wfe_topology_routing_key(c->key, "dispatch", queue, env->track))
			elog(ERROR, "wfe: no routing key for queue \"%s\"", queue);
	}
	PG_FINALLY();
	{
		wfe_envelope_free(env);
	}
	PG_END_TRY();
	return c;
}

/* Write the dispatch of the attempt whose columns (WFE_DISPATCH_COLUMNS) are v, n. */
static void
dispatch(Datum *v, bool *n)
{
	wfe_envelope_in in;
	wfe_envelope env;
	char	   *queue = col_text(v, n, C_QUEUE);
	Datum		message_id;
	envelope_copy *copied;

	if (queue == NULL)
		elog(ERROR, "wfe: a dispatch needs a queue");	/* the release asked a broker queue */
	memset(&in, 0, sizeof(in));
	in.run_id = DatumGetInt64(v[C_RUN_ID]);
	in.stage = col_text(v, n, C_STAGE);
	in.attempt = DatumGetInt32(v[C_ATTEMPT]);
	in.fence = DatumGetInt64(v[C_FENCE]);
	message_id = wfe_message_id(in.run_id, in.stage, in.attempt, in.fence, "dispatch");
	in.message_id = DatumGetCString(DirectFunctionCall1(uuid_out, message_id));
	in.digest = col_text(v, n, C_DIGEST);
	in.worker = col_text(v, n, C_WORKER);
	in.tenant = col_text(v, n, C_TENANT);
	in.workflow = col_text(v, n, C_WORKFLOW);
	in.version = col_text(v, n, C_VERSION);
	if (!n[C_INPUT])
	{
		Jsonb	   *jb = DatumGetJsonbP(v[C_INPUT]);

		in.input = JsonbToCString(NULL, &jb->root, VARSIZE(jb));
		v[C_INPUT] = JsonbPGetDatum(jb);	/* detoasted once, for wfe.payloads */
	}
	in.has_heartbeat = !n[C_HEARTBEAT];
	in.heartbeat_ms = in.has_heartbeat ? DatumGetInt32(v[C_HEARTBEAT]) : 0;
	in.has_exec = !n[C_EXEC];
	in.exec_ms = in.has_exec ? DatumGetInt32(v[C_EXEC]) : 0;
	/* a queue deadline is now() plus queue_ms: never infinite */
	in.has_deadline = !n[C_DEADLINE] && !TIMESTAMP_NOT_FINITE(DatumGetTimestampTz(v[C_DEADLINE]));
	in.deadline_us = in.has_deadline ? DatumGetTimestampTz(v[C_DEADLINE]) : 0;
	in.traceparent = wfe_attempt_traceparent(col_text(v, n, C_TRACE_ID), col_text(v, n, C_SPAN_ID),
											 col_text(v, n, C_FLAGS), in.stage, in.attempt);
	in.created_us = GetCurrentTransactionStartTimestamp();	/* now() */
	in.track_threshold = wfe_track_threshold_bytes;

	if (wfe_envelope_build(&in, input_sha256, &env) != 0)
		ereport(ERROR,
				(errcode(ERRCODE_OUT_OF_MEMORY),
				 errmsg("out of memory building the dispatch envelope of run " INT64_FORMAT " stage \"%s\"",
						in.run_id, in.stage)));
	copied = copy_envelope(&env, queue);

	if (copied->large)
	{
		Datum		p[6] = {copied->payload_key, CStringGetTextDatum(in.tenant),
		Int32GetDatum(copied->bytes), v[C_INPUT], Int64GetDatum(in.run_id),
		CStringGetTextDatum(in.stage)};
		char		pn[7] = "      ";

		pn[3] = n[C_INPUT] ? 'n' : ' ';
		stmt_run(&q_payload, p, pn);
	}
	{
		Datum		o[10] = {CStringGetTextDatum(in.tenant), Int64GetDatum(in.run_id),
			CStringGetTextDatum(in.stage), Int32GetDatum(in.attempt), Int64GetDatum(in.fence),
			CStringGetTextDatum(wfe_topology_exchange("dispatch")), CStringGetTextDatum(copied->key),
		message_id, copied->headers, copied->body};

		stmt_run(&q_outbox, o, NULL);
	}
	wfe_wake_at(GetCurrentTransactionStartTimestamp());	/* the publisher has a message */
}

/* Dispatch the attempt of a row of WFE_DISPATCH_COLUMNS (dispatch.h). */
void
wfe_dispatch_row(HeapTuple tuple, TupleDesc desc)
{
	Datum		v[N_COLS];
	bool		n[N_COLS];

	Assert(desc->natts == N_COLS);
	heap_deform_tuple(tuple, desc, v, n);
	dispatch(v, n);
}

/* Read the current attempt of (run_id, stage) and dispatch it (dispatch.h). */
bool
wfe_dispatch_write(int64 run_id, const char *stage)
{
	Datum		a[2] = {Int64GetDatum(run_id), CStringGetTextDatum(stage)};

	stmt_run(&q_attempt, a, NULL);
	if (SPI_processed != 1)
		return false;
	wfe_dispatch_row(SPI_tuptable->vals[0], SPI_tuptable->tupdesc);
	return true;
}

PG_FUNCTION_INFO_V1(wfe_dispatch_sql);

/*
 * wfe._dispatch(p_run wfe.runs, p_stage wfe.run_stages): dispatch the
 * stage's attempt from the rows the caller read (the release of held work).
 */
Datum
wfe_dispatch_sql(PG_FUNCTION_ARGS)
{
	HeapTupleHeader rows[2];
	Datum		v[N_COLS];
	bool		n[N_COLS];

	if (PG_ARGISNULL(0) || PG_ARGISNULL(1))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("wfe._dispatch needs a run and a stage row")));
	rows[0] = PG_GETARG_HEAPTUPLEHEADER(0);
	rows[1] = PG_GETARG_HEAPTUPLEHEADER(1);
	for (int c = 0; c < N_COLS; c++)
		v[c] = GetAttributeByName(rows[composite[c].arg], composite[c].name, &n[c]);
	SPI_connect();
	dispatch(v, n);
	SPI_finish();
	PG_RETURN_VOID();
}
