/*
 * publisher.c — the outbox publisher, run by the background worker.
 *
 *   1. hold the publisher lease (its fencing token guards every mark);
 *   2. claim a batch of pending rows (SKIP LOCKED) and commit;
 *   3. with no transaction open, publish them with publisher confirms
 *      (dispatches mandatory), one confirm window in flight at a time;
 *   4. in another transaction, mark exactly the confirmed rows published;
 *      nacked, returned (unroutable) and unconfirmed rows go back to
 *      pending with a backoff.
 *
 * The database work overlaps the broker's: while a window is in flight
 * (RabbitMQ storing and confirming it) the publisher claims the next batch
 * or marks a batch whose messages are all settled, each in a short
 * transaction of its own, so a drain costs about the broker's time rather
 * than the sum of both.  The batches it holds form one stream of messages
 * in claim order, cut into full windows; a round publishes about one
 * batch's worth, and what is held carries over to the next round (with
 * nothing in flight in between).
 *
 * A crash between 3 and 4 republishes with the same deterministic
 * message_id, so consumers deduplicate; the broker down for minutes only
 * makes rows wait.  Reconnection backs off exponentially.
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/interrupt.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "amqp/broker.h"
#include "amqp/topology.h"
#include "bgw.h"

/* How long to wait for the confirms of one window. */
#define CONFIRM_TIMEOUT_MS 5000

/*
 * A confirm window also ends at this many body bytes, so one window always
 * fits in the socket's send buffer: librabbitmq's writes have no deadline,
 * and a window larger than the buffer could block the worker if the broker
 * stopped reading in the middle of it.
 */
#define WINDOW_MAX_BYTES (1024 * 1024)
#define MAX_RECONNECT_BACKOFF_MS 30000

/*
 * How often the ingress queues are looked at while any ingress is
 * configured: a command waits at most about this long (basic.get never
 * blocks; nothing wakes the worker when a command arrives).
 */
#define INGRESS_POLL_MS 200

static char holder[64];
static int64 lease_token = -1;
static char *connected_uri = NULL;	/* TopMemoryContext */
static int	connected_queue_type = -1;	/* wfe.amqp_queue_type when connected */
static TimestampTz next_connect_at = 0;
static char *failed_uri = NULL;	/* TopMemoryContext: the URI the backoff is for */
static int	connect_failures = 0;
static char last_error[256] = "";

/* Queues whose topology this connection has declared (TopMemoryContext). */
static char **declared = NULL;
static int	ndeclared = 0;
static int	declared_cap = 0;

/* Forget everything tied to the connection. */
static void
disconnect(const char *why)
{
	if (broker_is_connected() && why)
		ereport(LOG, (errmsg("wfe publisher disconnected: %s", why)));
	broker_disconnect();
	for (int i = 0; i < ndeclared; i++)
		pfree(declared[i]);
	ndeclared = 0;
}

/*
 * Queues (and "wfe.dlq") RabbitMQ kept as they were, already reported: for
 * the life of the process, not of a connection, so that a failover to
 * another node does not report them again (TopMemoryContext).
 */
static char **kept = NULL;
static int	nkept = 0;
static int	kept_cap = 0;

/*
 * RabbitMQ kept an existing queue that disagrees with what we declared:
 * it works as it is (RabbitMQ cannot change a queue's type or arguments),
 * so say so once, with what to do, and go on -- never retry in a loop.
 */
static void
report_kept(const char *queue, const char *err)
{
	for (int i = 0; i < nkept; i++)
		if (strcmp(kept[i], queue) == 0)
			return;
	if (wfe_topology_type_mismatch(err))
		ereport(WARNING,
				(errmsg("wfe publisher: the RabbitMQ queues of \"%s\" exist with another type than wfe.amqp_queue_type = '%s': %s",
						queue, wfe_queue_type_name((wfe_queue_type) wfe_amqp_queue_type), err),
				 errhint("RabbitMQ cannot change a queue's type; wfe publishes to the existing queues.  "
						 "To move them to the new type, drain and delete them as docs/operations.md "
						 "(\"Moving to quorum queues\") says, or set wfe.amqp_queue_type back.")));
	else
		ereport(WARNING,
				(errmsg("wfe publisher: RabbitMQ kept the existing queues of \"%s\": %s", queue, err),
				 errhint("Queue arguments such as wfe.broker_retry_ttl_ms apply only to new queues; "
						 "delete the old ones in RabbitMQ to apply a change.")));
	if (nkept == kept_cap)
	{
		kept_cap = kept_cap ? kept_cap * 2 : 16;
		kept = kept
			? repalloc(kept, sizeof(char *) * kept_cap)
			: MemoryContextAlloc(TopMemoryContext, sizeof(char *) * kept_cap);
	}
	kept[nkept++] = MemoryContextStrdup(TopMemoryContext, queue);
}

/* The queue was declared as configured: a later disagreement is news again. */
static void
unreport_kept(const char *queue)
{
	for (int i = 0; i < nkept; i++)
		if (strcmp(kept[i], queue) == 0)
		{
			pfree(kept[i]);
			kept[i] = kept[--nkept];
			return;
		}
}

/* Has this connection declared the queue's topology?  Declare it if not. */
static bool
ensure_queue(const char *queue)
{
	char		err[256];
	wfe_queue_options options = {
		.type = (wfe_queue_type) wfe_amqp_queue_type,
		.retry_ttl_ms = wfe_broker_retry_ttl_ms,
		.delivery_limit = wfe_broker_max_redeliveries,
	};
	int			status;

	for (int i = 0; i < ndeclared; i++)
		if (strcmp(declared[i], queue) == 0)
			return true;
	status = broker_declare_queue(queue, &options, err, sizeof(err));
	if (status == 0)
	{
		strlcpy(last_error, err, sizeof(last_error));
		disconnect(err);
		return false;
	}
	if (status < 0)
	{
		report_kept(queue, err);
		strlcpy(last_error, err, sizeof(last_error));
	}
	else
		unreport_kept(queue);
	if (ndeclared == declared_cap)
	{
		declared_cap = declared_cap ? declared_cap * 2 : 16;
		declared = declared
			? repalloc(declared, sizeof(char *) * declared_cap)
			: MemoryContextAlloc(TopMemoryContext, sizeof(char *) * declared_cap);
	}
	declared[ndeclared++] = MemoryContextStrdup(TopMemoryContext, queue);
	return true;
}

/* Forget that a queue's topology was declared (NULL is fine). */
static void
forget_queue(const char *queue)
{
	for (int i = 0; queue && i < ndeclared; i++)
		if (strcmp(declared[i], queue) == 0)
		{
			pfree(declared[i]);
			declared[i] = declared[--ndeclared];
			return;
		}
}

/* The queue a dispatch routing key names (palloc'd), or NULL. */
static char *
queue_of(const char *routing_key)
{
	const char *queue;
	size_t		len;

	if (!wfe_topology_queue_of_run_key(routing_key, &queue, &len))
		return NULL;
	return pnstrdup(queue, len);
}

/* Connect (respecting the backoff) and declare the base topology. */
static bool
connect_if_needed(long *wait_ms)
{
	TimestampTz now = GetCurrentTimestamp();
	char		err[512];
	long		backoff;
	int			base = 0;

	if (broker_is_connected() && connected_uri && strcmp(connected_uri, wfe_amqp_uri) == 0 &&
		connected_queue_type == wfe_amqp_queue_type)
		return true;
	if (broker_is_connected())
	{
		/* declare again, with the new setting */
		disconnect(connected_queue_type == wfe_amqp_queue_type
				   ? "wfe.amqp_uri changed" : "wfe.amqp_queue_type changed");
		next_connect_at = 0;
	}
	if (connected_queue_type != wfe_amqp_queue_type)
	{
		/* what was kept under the old type is worth a word under the new one */
		for (int i = 0; i < nkept; i++)
			pfree(kept[i]);
		nkept = 0;
	}
	/* a corrected URI is tried at once, not after the old one's backoff */
	if (failed_uri && strcmp(failed_uri, wfe_amqp_uri) != 0)
		next_connect_at = 0;
	if (now < next_connect_at)
	{
		*wait_ms = (long) ((next_connect_at - now) / 1000);
		return false;
	}
	if (broker_connect(wfe_amqp_uri, wfe_amqp_password_file, err, sizeof(err)) &&
		(base = broker_declare_base(wfe_amqp_queue_type, err, sizeof(err))) != 0)
	{
		if (base < 0)
			report_kept(WFE_QUEUE_DLQ, err);
		else
			unreport_kept(WFE_QUEUE_DLQ);
		if (connected_uri)
			pfree(connected_uri);
		connected_uri = MemoryContextStrdup(TopMemoryContext, wfe_amqp_uri);
		connected_queue_type = wfe_amqp_queue_type;
		ereport(LOG, (errmsg("wfe publisher connected to RabbitMQ%s at %s",
							 connect_failures ? " again" : "", broker_node())));
		connect_failures = 0;
		last_error[0] = '\0';
		return true;
	}
	disconnect(NULL);
	/* log the first failure of a streak, then every tenth */
	if (connect_failures % 10 == 0)
		ereport(WARNING, (errmsg("wfe publisher cannot reach RabbitMQ: %s", err),
						  errhint("Outbox rows stay pending; publishing resumes when the broker is back.")));
	strlcpy(last_error, err, sizeof(last_error));
	connect_failures++;
	backoff = Min(MAX_RECONNECT_BACKOFF_MS, 100L << Min(connect_failures, 9));
	if (failed_uri)
		pfree(failed_uri);
	failed_uri = MemoryContextStrdup(TopMemoryContext, wfe_amqp_uri);
	next_connect_at = TimestampTzPlusMilliseconds(now, backoff);
	*wait_ms = backoff;
	return false;
}

/*
 * The lease is renewed (a write, so a commit that waits for WAL) at most
 * this often; in between a round only reads it.  Leases expire after 30 s.
 */
#define LEASE_RENEW_MS 5000

static TimestampTz lease_renewed_at = 0;
static bool lease_connected = false;
static char lease_error[256] = "";

typedef struct lease_unit
{
	MemoryContext cxt;
	bool		renew;			/* write the lease, not just read it */
	bool		connected;
	int64		token;			/* -1: someone else holds the lease */
	char	  **queues;
	int			nqueues;
} lease_unit;

/* Transaction body: take or renew the lease; list the broker queues. */
static void
lease_body(void *arg)
{
	lease_unit *u = arg;
	Oid			types[3] = {TEXTOID, BOOLOID, TEXTOID};
	Datum		values[3];
	char		nulls[3] = {' ', ' ', last_error[0] ? ' ' : 'n'};
	bool		isnull;
	Datum		token;

	values[0] = CStringGetTextDatum(holder);
	values[1] = BoolGetDatum(u->connected);
	values[2] = CStringGetTextDatum(last_error);
	if (u->renew
		? SPI_execute_with_args("SELECT wfe._publisher_lease($1, $2, $3)",
								3, types, values, nulls, false, 1) != SPI_OK_SELECT
		: SPI_execute_with_args("SELECT l.token FROM wfe.publisher_lease AS l WHERE l.holder OPERATOR(pg_catalog.=) $1",
								1, types, values, nulls, true, 1) != SPI_OK_SELECT)
		elog(ERROR, "wfe publisher: lease query failed");
	if (SPI_processed == 0)
	{
		u->token = -1;			/* read only: we no longer hold it */
		return;
	}
	token = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);
	u->token = isnull ? -1 : DatumGetInt64(token);
	if (u->token < 0 || !u->connected)
		return;
	if (SPI_execute("SELECT q FROM wfe._broker_queues() AS q", true, 0) != SPI_OK_SELECT)
		elog(ERROR, "wfe publisher: listing broker queues failed");
	u->nqueues = (int) SPI_processed;
	u->queues = MemoryContextAlloc(u->cxt, sizeof(char *) * (u->nqueues + 1));
	for (int i = 0; i < u->nqueues; i++)
		u->queues[i] = MemoryContextStrdup(u->cxt,
										   SPI_getvalue(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1));
}

/*
 * A batch: the rows of one claim, in their own memory context under
 * TopMemoryContext, because batches outlive a round.  The batches the
 * publisher holds form one stream, in claim order (so in outbox id order):
 * windows are cut from it without regard to where one batch ends, so a
 * window may hold the end of one batch and the start of the next.  `base`
 * is the stream position of a batch's first message.
 */
typedef struct Batch
{
	MemoryContext cxt;
	struct Batch *next;
	BrokerMessage *msgs;
	int			n;
	int64		base;
	const char *error;			/* why some of its messages failed (in cxt), or NULL */
} Batch;

/*
 * What the publisher holds, oldest first: the batches not marked yet.  The
 * messages before stream position sent_to are settled (acked, nacked,
 * returned, or given up on: unconfirmed), those from sent_to to held_to not
 * sent yet; while a window is in flight, it is the last messages before
 * sent_to.  Between rounds nothing is in flight.
 */
static Batch *held = NULL;
static int64 sent_to = 0;
static int64 held_to = 0;
static bool more_rows = false;	/* the last claim was full: more may wait */

/* A new, empty batch in a memory context of its own. */
static Batch *
batch_new(void)
{
	MemoryContext cxt = AllocSetContextCreate(TopMemoryContext, "wfe publisher batch",
											  ALLOCSET_DEFAULT_SIZES);
	Batch	   *b = MemoryContextAllocZero(cxt, sizeof(Batch));

	b->cxt = cxt;
	return b;
}

static void
batch_free(Batch *b)
{
	if (b)
		MemoryContextDelete(b->cxt);
}

/* The batch holding stream position `seq`. */
static Batch *
batch_at(int64 seq)
{
	for (Batch *b = held; b; b = b->next)
		if (seq < b->base + b->n)
			return b;
	elog(ERROR, "wfe publisher: no message at stream position %lld", (long long) seq);
	return NULL;				/* keep compiler quiet */
}

typedef struct claim_unit
{
	int64		token;
	ArrayType  *held;			/* ids of the rows we still hold */
	Batch	   *batch;
} claim_unit;

/* Transaction body: claim a batch and copy it out of SPI memory. */
static void
claim_body(void *arg)
{
	claim_unit *u = arg;
	Batch	   *b = u->batch;
	Oid			types[4] = {TEXTOID, INT8OID, INT4OID, INT8ARRAYOID};
	Datum		values[4];

	values[0] = CStringGetTextDatum(holder);
	values[1] = Int64GetDatum(u->token);
	values[2] = Int32GetDatum(wfe_publish_batch);
	values[3] = PointerGetDatum(u->held);
	if (SPI_execute_with_args("SELECT id, kind, exchange, routing_key, message_id::pg_catalog.text, "
							  "run_id::pg_catalog.text, headers, body FROM wfe._outbox_claim($1, $2, $3, $4) "
							  "ORDER BY id",
							  4, types, values, NULL, false, 0) != SPI_OK_SELECT)
		elog(ERROR, "wfe publisher: claim failed");
	b->n = (int) SPI_processed;
	b->msgs = MemoryContextAllocZero(b->cxt, sizeof(BrokerMessage) * (b->n + 1));
	for (int i = 0; i < b->n; i++)
	{
		HeapTuple	tup = SPI_tuptable->vals[i];
		TupleDesc	desc = SPI_tuptable->tupdesc;
		BrokerMessage *m = &b->msgs[i];
		bool		isnull;
		char	   *kind = SPI_getvalue(tup, desc, 2);
		char	   *run_id = SPI_getvalue(tup, desc, 6);

		m->id = DatumGetInt64(SPI_getbinval(tup, desc, 1, &isnull));
		m->exchange = MemoryContextStrdup(b->cxt, SPI_getvalue(tup, desc, 3));
		m->routing_key = MemoryContextStrdup(b->cxt, SPI_getvalue(tup, desc, 4));
		m->message_id = MemoryContextStrdup(b->cxt, SPI_getvalue(tup, desc, 5));
		m->correlation_id = run_id ? MemoryContextStrdup(b->cxt, run_id) : "";
		m->headers_json = MemoryContextStrdup(b->cxt, SPI_getvalue(tup, desc, 7));
		m->body = MemoryContextStrdup(b->cxt, SPI_getvalue(tup, desc, 8));
		/* only dispatches must reach a queue; control and events may have no consumer */
		m->mandatory = strcmp(kind, "dispatch") == 0;
		m->status = MSG_UNSENT;
	}
}

/* The ids of a batch's messages (all, or those `pred` picks), as int8[]. */
static ArrayType *
ids_of(Batch *b, bool (*pred) (const BrokerMessage *))
{
	Datum	   *ids = palloc(sizeof(Datum) * (b->n + 1));
	int			k = 0;

	for (int i = 0; i < b->n; i++)
		if (pred == NULL || pred(&b->msgs[i]))
			ids[k++] = Int64GetDatum(b->msgs[i].id);
	return construct_array(ids, k, INT8OID, sizeof(int64), FLOAT8PASSBYVAL, TYPALIGN_DOUBLE);
}

/*
 * Claim the next batch, in a short transaction of its own, and append it
 * to the stream.  The claim leaves alone the rows the publisher holds
 * (rows it claimed and no longer holds go back to pending).  False when
 * nothing was claimed.
 */
static bool
claim_batch(void)
{
	claim_unit	u;
	Datum	   *ids;
	int			k = 0;
	Batch	  **tail = &held;

	for (Batch *b = held; b; b = b->next)
		k += b->n;
	ids = palloc(sizeof(Datum) * (k + 1));
	k = 0;
	for (Batch *b = held; b; b = b->next)
		for (int i = 0; i < b->n; i++)
			ids[k++] = Int64GetDatum(b->msgs[i].id);
	u.held = construct_array(ids, k, INT8OID, sizeof(int64), FLOAT8PASSBYVAL, TYPALIGN_DOUBLE);
	u.token = lease_token;
	u.batch = batch_new();
	more_rows = false;
	if (!wfe_in_transaction("wfe publisher: claiming", claim_body, &u) || u.batch->n == 0)
	{
		batch_free(u.batch);
		return false;
	}
	more_rows = u.batch->n >= wfe_publish_batch;
	u.batch->base = held_to;
	held_to += u.batch->n;
	while (*tail)
		tail = &(*tail)->next;
	*tail = u.batch;
	return true;
}

typedef struct mark_unit
{
	int64		token;
	ArrayType  *published;
	ArrayType  *failed;
	ArrayType  *unroutable;
	const char *error;
	int			marked;
} mark_unit;

/* Transaction body: record the outcome of the batch. */
static void
mark_body(void *arg)
{
	mark_unit  *u = arg;
	Oid			types[6] = {TEXTOID, INT8OID, INT8ARRAYOID, INT8ARRAYOID, TEXTOID, INT8ARRAYOID};
	Datum		values[6];
	char		nulls[6] = {' ', ' ', ' ', ' ', u->error ? ' ' : 'n', ' '};
	bool		isnull;

	values[0] = CStringGetTextDatum(holder);
	values[1] = Int64GetDatum(u->token);
	values[2] = PointerGetDatum(u->published);
	values[3] = PointerGetDatum(u->failed);
	values[4] = u->error ? CStringGetTextDatum(u->error) : (Datum) 0;
	values[5] = PointerGetDatum(u->unroutable);
	if (SPI_execute_with_args("SELECT wfe._outbox_mark($1, $2, $3, $4, $5, $6)", 6, types, values,
							  nulls, false, 1) != SPI_OK_SELECT)
		elog(ERROR, "wfe publisher: marking failed");
	u->marked = DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
}

static bool
is_published(const BrokerMessage *m)
{
	return m->status == MSG_ACKED;
}

static bool
is_returned(const BrokerMessage *m)
{
	return m->status == MSG_RETURNED;
}

static bool
is_failed(const BrokerMessage *m)
{
	return m->status != MSG_ACKED && m->status != MSG_RETURNED;
}

/*
 * Mark the oldest batch (in a transaction of its own) and drop it: exactly
 * the acked rows become published; returned ones are unroutable; the rest
 * (nacked, unconfirmed, never sent) go back to pending with the batch's
 * error.  If the transaction fails the rows stay claimed, and the next claim
 * puts them back to pending (they are no longer held).  Returns the rows
 * marked.
 */
static int
mark_oldest(void)
{
	Batch	   *b = held;
	mark_unit	mark = {0};

	if (b == NULL)
		return 0;
	held = b->next;
	mark.token = lease_token;
	mark.error = b->error;
	mark.published = ids_of(b, is_published);
	mark.failed = ids_of(b, is_failed);
	mark.unroutable = ids_of(b, is_returned);
	if (!wfe_in_transaction("wfe publisher: marking", mark_body, &mark))
		mark.marked = 0;
	batch_free(b);
	if (held == NULL)
		sent_to = held_to;
	return mark.marked;
}

/* Is the oldest batch settled, all of it before stream position `upto`? */
static bool
oldest_settled(int64 upto)
{
	return held && held->base + held->n <= upto;
}

/*
 * The publisher stops with what it holds (the broker went away or blocks
 * publishers, publishing was turned off, the worker stops): every batch is
 * marked as it is; messages not sent or not confirmed go back to pending
 * with `why` (unless their batch has an error of its own), as the unsent
 * rows of an interrupted batch always did.  Returns the rows marked.
 */
static int
flush(const char *why)
{
	int			marked = 0;

	for (Batch *b = held; b; b = b->next)
		if (b->error == NULL)
			b->error = MemoryContextStrdup(b->cxt, why && why[0] ? why : "publishing stopped");
	while (held)
		marked += mark_oldest();
	more_rows = false;
	return marked;
}

/*
 * Forget what the publisher holds without marking it (the lease was lost:
 * a mark would be refused).  The rows stay claimed, and go back to pending
 * at the next claim of this holder or when the worker starts again.
 */
static void
discard(void)
{
	while (held)
	{
		Batch	   *b = held;

		held = b->next;
		batch_free(b);
	}
	sent_to = held_to;
	more_rows = false;
}

/*
 * Publish and confirm windows from the stream until `quota` messages went
 * out or nothing is left to send.  While a window is in flight (RabbitMQ
 * stores and confirms it), the publisher does one piece of database work
 * that does not depend on it, each a short transaction of its own: it
 * claims the next batch when the unsent messages would not fill another
 * window and the last claim was full (so windows stay full), or else marks
 * the oldest batch if all of it is settled.  Returns the messages acked;
 * *error says why it stopped early, or stays NULL.
 */
static int
publish_stream(int quota, const char **error)
{
	static char err[256];
	BrokerMessage **win = palloc(sizeof(BrokerMessage *) * Max(wfe_confirm_window, 1));
	int			acked = 0;
	int			sent = 0;

	*error = NULL;
	while (sent_to < held_to && sent < quota)
	{
		int64		start = sent_to;
		size_t		bytes = 0;
		int			n = 0;
		const char *checked = NULL;

		/* a window: up to wfe.confirm_window messages and WINDOW_MAX_BYTES */
		for (int64 seq = start; seq < held_to && n < wfe_confirm_window; seq++)
		{
			Batch	   *b = batch_at(seq);
			BrokerMessage *m = &b->msgs[seq - b->base];

			bytes += strlen(m->body);
			if (n > 0 && bytes > WINDOW_MAX_BYTES)
				break;
			win[n++] = m;
		}

		/*
		 * A queue's topology exists before its first message.  Nothing is in
		 * flight here, so recovering from a refused declaration (which
		 * reopens the channel and restarts the delivery tags) loses nothing.
		 */
		for (int i = 0; i < n; i++)
		{
			char	   *queue;

			if (!win[i]->mandatory || (checked && strcmp(checked, win[i]->routing_key) == 0))
				continue;
			checked = win[i]->routing_key;
			queue = queue_of(checked);
			if (queue && !ensure_queue(queue))
			{
				*error = last_error;
				return acked;
			}
		}
		for (int i = 0; i < n; i++)
		{
			if (!broker_publish(win[i], err, sizeof(err)))
			{
				disconnect(err);
				*error = err;
				return acked;
			}
		}
		sent_to += n;
		sent += n;

		/* NB: no transaction is open while the window is sent or confirmed */
		if (more_rows && held_to - sent_to < wfe_confirm_window && !ShutdownRequestPending)
			(void) claim_batch();
		else if (oldest_settled(start))
			(void) mark_oldest();
		pgstat_report_activity(STATE_RUNNING, "wfe publisher: publishing");

		if (!broker_await_confirms(win, n, CONFIRM_TIMEOUT_MS, &ShutdownRequestPending,
								   err, sizeof(err)))
		{
			disconnect(err);
			*error = err;
			return acked;
		}
		for (int i = 0; i < n; i++)
		{
			if (win[i]->status == MSG_ACKED)
				acked++;
			else if (win[i]->status == MSG_RETURNED)
			{
				/* its queue vanished: declare it again before the next window */
				forget_queue(queue_of(win[i]->routing_key));
			}
			else if (win[i]->status == MSG_NACKED)
			{
				Batch	   *b = batch_at(start + i);

				if (b->error == NULL)
					b->error = MemoryContextStrdup(b->cxt, "nacked by the broker");
			}
		}
		if (ShutdownRequestPending)
		{
			*error = "shutting down";
			return acked;
		}
		if (broker_is_blocked())
		{
			*error = "RabbitMQ is blocking publishers (resource alarm)";
			return acked;
		}
		for (int i = 0; i < n; i++)
			if (win[i]->status == MSG_SENT)
			{
				/* the broker stopped answering: do not write more into it */
				disconnect("confirms timed out");
				*error = "confirm timeout";
				return acked;
			}
	}
	return acked;
}

/* Transaction body: record one dead dispatch (wfe._broker_dead_letter). */
static void
dead_body(void *arg)
{
	BrokerDead *d = arg;
	Oid			types[4] = {TEXTOID, TEXTOID, TEXTOID, TEXTOID};
	Datum		values[4];
	char		nulls[4] = {d->message_id ? ' ' : 'n', ' ', ' ', ' '};

	values[0] = d->message_id ? CStringGetTextDatum(d->message_id) : (Datum) 0;
	values[1] = CStringGetTextDatum(d->routing_key);
	values[2] = CStringGetTextDatum(d->headers_json);
	values[3] = CStringGetTextDatum(d->body);
	if (SPI_execute_with_args("SELECT wfe._broker_dead_letter($1, $2, $3::jsonb, $4)",
							  4, types, values, nulls, false, 1) != SPI_OK_SELECT)
		elog(ERROR, "wfe publisher: recording a dead dispatch failed");
}

/*
 * Read wfe.dlq back (at most max messages): each dead dispatch is recorded
 * and its attempt failed through the engine in a transaction, and acked
 * only once that committed (a crash in between reads it again, and the
 * second recording finds it done).  One the database refuses is given back
 * to wfe.dlq and the rest wait for the next round.  Returns how many; false
 * in *failed when the connection failed.
 */
static int
drain_dlq(int max, bool *failed)
{
	char		err[256];
	int			n = 0;

	*failed = false;
	while (n < max && !ShutdownRequestPending)
	{
		BrokerDead	d;
		int			got = broker_dlq_get(&d, err, sizeof(err));
		bool		ok;

		if (got == 0)
			break;
		if (got < 0)
		{
			disconnect(err);
			*failed = true;
			break;
		}
		ok = wfe_in_transaction("wfe publisher: a dead dispatch", dead_body, &d);
		if (!broker_dlq_settle(d.tag, ok, err, sizeof(err)))
		{
			disconnect(err);
			*failed = true;
			break;
		}
		if (!ok)
			break;				/* logged; it waits in wfe.dlq for the next round */
		n++;
	}
	return n;
}

int
wfe_publisher_round(bool *more, long *wait_ms)
{
	lease_unit	lease = {CurrentMemoryContext, false, false, -1, NULL, 0};
	const char *error;
	int			done = 0;

	*more = false;
	*wait_ms = -1;
	if (holder[0] == '\0')
		snprintf(holder, sizeof(holder), "wfe worker %d", MyProcPid);
	if (!wfe_publisher_enabled || wfe_amqp_uri == NULL || wfe_amqp_uri[0] == '\0')
	{
		done = flush("publishing is off");
		if (broker_is_connected())
			disconnect("publishing is off");
		return done;
	}

	lease.connected = connect_if_needed(wait_ms);
	if (!lease.connected)
		done = flush(last_error);	/* (held only if the URI just changed) */
	{
		TimestampTz now = GetCurrentTimestamp();

		lease.renew = lease_token < 0 || lease.connected != lease_connected ||
			strcmp(last_error, lease_error) != 0 ||
			TimestampDifferenceExceeds(lease_renewed_at, now, LEASE_RENEW_MS);
		if (!wfe_in_transaction("wfe publisher: lease", lease_body, &lease))
		{
			*more = held != NULL;	/* look again soon: rows are held */
			return done;
		}
		if (lease.renew)
		{
			lease_renewed_at = now;
			lease_connected = lease.connected;
			strlcpy(lease_error, last_error, sizeof(lease_error));
		}
		else if (lease.token < 0)
			lease_token = -1;	/* lost it: take it again next round */
	}
	if (!lease.connected)
		return done;
	if (lease.token < 0)
	{
		discard();
		*wait_ms = 1000;		/* another publisher is live; look again later */
		return 0;
	}
	if (lease.token != lease_token)
	{
		ereport(LOG, (errmsg("wfe publisher holds the lease (token %lld)", (long long) lease.token)));
		discard();				/* claimed under a token that is not ours any more */
		lease_token = lease.token;
	}
	for (int i = 0; i < lease.nqueues; i++)
		if (!ensure_queue(lease.queues[i]))
			return flush(last_error);

	/* while RabbitMQ blocks publishers, publish nothing (rows wait in the outbox) */
	if (broker_is_blocked())
	{
		char		err[256];

		if (!broker_poll(100, err, sizeof(err)))
		{
			disconnect(err);
			return flush(err);
		}
		if (broker_is_blocked())
		{
			strlcpy(last_error, "RabbitMQ is blocking publishers (resource alarm)", sizeof(last_error));
			*wait_ms = 500;
			return flush(last_error);
		}
		last_error[0] = '\0';
	}

	/*
	 * NB: no transaction is open from here on but for the claims and marks,
	 * each short, and done while a window is in flight but for this first
	 * claim of a round that holds nothing to send.
	 */
	if (sent_to == held_to)
		(void) claim_batch();
	done = publish_stream(wfe_publish_batch, &error);
	if (error)
	{
		(void) flush(error);
		return done;
	}
	/* all sent, and the outbox had no more: mark at once (a lone dispatch too) */
	if (sent_to == held_to && !more_rows)
		while (held)
			(void) mark_oldest();
	/* nothing is in flight now: read back what died in RabbitMQ */
	if (wfe_consume_dlq && sent_to == held_to)
	{
		bool		failed;
		int			dead = drain_dlq(wfe_publish_batch, &failed);

		if (failed)
			return done + flush(last_error);
		if (dead >= wfe_publish_batch)
			*more = true;
	}
	/* ... and take the run commands waiting (ingress.c), a bounded number */
	if (sent_to == held_to)
	{
		char		err[256];
		bool		configured;
		int			commands = wfe_ingress_round(wfe_bgw_batch, &configured, err, sizeof(err));

		if (commands < 0)
		{
			strlcpy(last_error, err, sizeof(last_error));
			disconnect(err);
			return done + flush(err);
		}
		if (commands >= wfe_bgw_batch)
			*more = true;
		/* commands arrive without waking us: look again soon */
		if (configured && (*wait_ms < 0 || *wait_ms > INGRESS_POLL_MS))
			*wait_ms = INGRESS_POLL_MS;
	}
	*more = *more || held != NULL || more_rows;
	return done;
}

void
wfe_publisher_shutdown(void)
{
	/* mark what the broker confirmed, so a clean stop republishes nothing */
	if (held)
		(void) flush("shutting down");
	disconnect(NULL);
}
