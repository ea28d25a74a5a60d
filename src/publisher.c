/*
 * publisher.c — the outbox publisher, one round per worker round.
 *
 *   1. hold the publisher lease (its fencing token guards every mark);
 *   2. claim a batch of pending rows (SKIP LOCKED) and commit;
 *   3. with no transaction open, publish them with publisher confirms
 *      (dispatches mandatory) and read the confirms;
 *   4. in a second transaction, mark exactly the confirmed rows published;
 *      nacked, returned (unroutable) and unconfirmed rows go back to
 *      pending with a backoff.
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

#include "broker.h"
#include "wfe.h"

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

static char holder[64];
static int64 lease_token = -1;
static char *connected_uri = NULL;	/* TopMemoryContext */
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

/* Has this connection declared the queue's topology?  Declare it if not. */
static bool
ensure_queue(const char *queue)
{
	char		err[256];

	int			status;

	for (int i = 0; i < ndeclared; i++)
		if (strcmp(declared[i], queue) == 0)
			return true;
	status = broker_declare_queue(queue, wfe_broker_retry_ttl_ms, err, sizeof(err));
	if (status == 0)
	{
		strlcpy(last_error, err, sizeof(last_error));
		disconnect(err);
		return false;
	}
	if (status < 0)
	{
		/* the queue works as it is; say once why the setting did not apply */
		ereport(WARNING,
				(errmsg("wfe publisher: RabbitMQ kept the existing queues of \"%s\": %s", queue, err),
				 errhint("Queue arguments such as wfe.broker_retry_ttl_ms apply only to new queues; "
						 "delete the old ones in RabbitMQ to apply a change.")));
		strlcpy(last_error, err, sizeof(last_error));
	}
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

/* The queue a dispatch routing key names: run.<queue>.<track>. */
static char *
queue_of(const char *routing_key)
{
	const char *dot = strrchr(routing_key, '.');

	if (strncmp(routing_key, "run.", 4) != 0 || dot == NULL || dot <= routing_key + 4)
		return NULL;
	return pnstrdup(routing_key + 4, dot - routing_key - 4);
}

/* Connect (respecting the backoff) and declare the base topology. */
static bool
connect_if_needed(long *wait_ms)
{
	TimestampTz now = GetCurrentTimestamp();
	char		err[256];
	long		backoff;

	if (broker_is_connected() && connected_uri && strcmp(connected_uri, wfe_amqp_uri) == 0)
		return true;
	if (broker_is_connected())
	{
		disconnect("wfe.amqp_uri changed");
		next_connect_at = 0;
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
		broker_declare_base(err, sizeof(err)))
	{
		if (connected_uri)
			pfree(connected_uri);
		connected_uri = MemoryContextStrdup(TopMemoryContext, wfe_amqp_uri);
		ereport(LOG, (errmsg("wfe publisher connected to RabbitMQ%s",
							 connect_failures ? " again" : "")));
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
		: SPI_execute_with_args("SELECT l.token FROM wfe.publisher_lease AS l WHERE l.holder = $1",
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

typedef struct claim_unit
{
	MemoryContext cxt;
	int64		token;
	BrokerMessage *msgs;
	int			n;
} claim_unit;

/* Transaction body: claim a batch and copy it out of SPI memory. */
static void
claim_body(void *arg)
{
	claim_unit *u = arg;
	Oid			types[3] = {TEXTOID, INT8OID, INT4OID};
	Datum		values[3];

	values[0] = CStringGetTextDatum(holder);
	values[1] = Int64GetDatum(u->token);
	values[2] = Int32GetDatum(wfe_publish_batch);
	if (SPI_execute_with_args("SELECT id, kind, exchange, routing_key, message_id::text, "
							  "run_id::text, headers, body FROM wfe._outbox_claim($1, $2, $3) "
							  "ORDER BY id",
							  3, types, values, NULL, false, 0) != SPI_OK_SELECT)
		elog(ERROR, "wfe publisher: claim failed");
	u->n = (int) SPI_processed;
	u->msgs = MemoryContextAllocZero(u->cxt, sizeof(BrokerMessage) * (u->n + 1));
	for (int i = 0; i < u->n; i++)
	{
		HeapTuple	tup = SPI_tuptable->vals[i];
		TupleDesc	desc = SPI_tuptable->tupdesc;
		BrokerMessage *m = &u->msgs[i];
		bool		isnull;
		char	   *kind = SPI_getvalue(tup, desc, 2);
		char	   *run_id = SPI_getvalue(tup, desc, 6);

		m->id = DatumGetInt64(SPI_getbinval(tup, desc, 1, &isnull));
		m->exchange = MemoryContextStrdup(u->cxt, SPI_getvalue(tup, desc, 3));
		m->routing_key = MemoryContextStrdup(u->cxt, SPI_getvalue(tup, desc, 4));
		m->message_id = MemoryContextStrdup(u->cxt, SPI_getvalue(tup, desc, 5));
		m->correlation_id = run_id ? MemoryContextStrdup(u->cxt, run_id) : "";
		m->headers_json = MemoryContextStrdup(u->cxt, SPI_getvalue(tup, desc, 7));
		m->body = MemoryContextStrdup(u->cxt, SPI_getvalue(tup, desc, 8));
		/* only dispatches must reach a queue; control and events may have no consumer */
		m->mandatory = strcmp(kind, "dispatch") == 0;
		m->status = MSG_UNSENT;
	}
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

/* The ids of messages in a given state, as int8[]. */
static ArrayType *
ids_where(BrokerMessage *msgs, int n, bool (*pred) (const BrokerMessage *))
{
	Datum	   *ids = palloc(sizeof(Datum) * (n + 1));
	int			k = 0;

	for (int i = 0; i < n; i++)
		if (pred(&msgs[i]))
			ids[k++] = Int64GetDatum(msgs[i].id);
	return construct_array(ids, k, INT8OID, sizeof(int64), FLOAT8PASSBYVAL, TYPALIGN_DOUBLE);
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

/* Publish and confirm a claimed batch, window by window. */
static const char *
publish_batch(BrokerMessage *msgs, int n)
{
	static char err[256];

	/*
	 * A queue's topology exists before its first message.  All of the batch's
	 * queues are declared before anything is published, because recovering
	 * from a refused declaration reopens the channel and restarts the
	 * delivery tags.
	 */
	for (int i = 0; i < n; i++)
	{
		char	   *queue = msgs[i].mandatory ? queue_of(msgs[i].routing_key) : NULL;

		if (queue && !ensure_queue(queue))
			return last_error;
	}
	for (int start = 0, end = 0; start < n; start = end)
	{
		size_t		bytes = 0;

		/* a window: up to wfe.confirm_window messages and WINDOW_MAX_BYTES */
		for (end = start; end < n && end - start < wfe_confirm_window; end++)
		{
			bytes += strlen(msgs[end].body);
			if (end > start && bytes > WINDOW_MAX_BYTES)
				break;
		}
		for (int i = start; i < end; i++)
		{
			if (!broker_publish(&msgs[i], err, sizeof(err)))
			{
				disconnect(err);
				return err;
			}
		}
		if (!broker_await_confirms(msgs + start, end - start, CONFIRM_TIMEOUT_MS,
								   &ShutdownRequestPending, err, sizeof(err)))
		{
			disconnect(err);
			return err;
		}
		if (ShutdownRequestPending)
			return "shutting down";
		if (broker_is_blocked())
			return "RabbitMQ is blocking publishers (resource alarm)";
		for (int i = start; i < end; i++)
			if (msgs[i].status == MSG_SENT)
			{
				/* the broker stopped answering: do not write more into it */
				disconnect("confirms timed out");
				return "confirm timeout";
			}
	}
	/* a returned dispatch: its queue vanished, so declare it again next time */
	for (int i = 0; i < n; i++)
		if (msgs[i].status == MSG_RETURNED)
			forget_queue(queue_of(msgs[i].routing_key));
	for (int i = 0; i < n; i++)
		if (msgs[i].status == MSG_SENT)
			return "confirm timeout";
		else if (msgs[i].status == MSG_NACKED)
			return "nacked by the broker";
	return NULL;
}

int
wfe_publisher_round(bool *more, long *wait_ms)
{
	lease_unit	lease = {CurrentMemoryContext, false, false, -1, NULL, 0};
	claim_unit	claim = {CurrentMemoryContext, 0, NULL, 0};
	mark_unit	mark = {0};

	*more = false;
	*wait_ms = -1;
	if (holder[0] == '\0')
		snprintf(holder, sizeof(holder), "wfe worker %d", MyProcPid);
	if (!wfe_publisher_enabled || wfe_amqp_uri == NULL || wfe_amqp_uri[0] == '\0')
	{
		if (broker_is_connected())
			disconnect("publishing is off");
		return 0;
	}

	lease.connected = connect_if_needed(wait_ms);
	{
		TimestampTz now = GetCurrentTimestamp();

		lease.renew = lease_token < 0 || lease.connected != lease_connected ||
			strcmp(last_error, lease_error) != 0 ||
			TimestampDifferenceExceeds(lease_renewed_at, now, LEASE_RENEW_MS);
		if (!wfe_in_transaction("wfe publisher: lease", lease_body, &lease))
			return 0;
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
		return 0;
	if (lease.token < 0)
	{
		*wait_ms = 1000;		/* another publisher is live; look again later */
		return 0;
	}
	if (lease.token != lease_token)
	{
		ereport(LOG, (errmsg("wfe publisher holds the lease (token %lld)", (long long) lease.token)));
		lease_token = lease.token;
	}
	for (int i = 0; i < lease.nqueues; i++)
		if (!ensure_queue(lease.queues[i]))
			return 0;

	/* while RabbitMQ blocks publishers, publish nothing (rows wait in the outbox) */
	if (broker_is_blocked())
	{
		char		err[256];

		if (!broker_poll(100, err, sizeof(err)))
		{
			disconnect(err);
			return 0;
		}
		if (broker_is_blocked())
		{
			strlcpy(last_error, "RabbitMQ is blocking publishers (resource alarm)", sizeof(last_error));
			*wait_ms = 500;
			return 0;
		}
		last_error[0] = '\0';
	}

	/* NB: no transaction is open from here until the mark */
	claim.token = lease_token;
	if (!wfe_in_transaction("wfe publisher: claiming", claim_body, &claim) || claim.n == 0)
		return 0;
	pgstat_report_activity(STATE_RUNNING, "wfe publisher: publishing");
	mark.error = publish_batch(claim.msgs, claim.n);

	mark.token = lease_token;
	mark.published = ids_where(claim.msgs, claim.n, is_published);
	mark.failed = ids_where(claim.msgs, claim.n, is_failed);
	mark.unroutable = ids_where(claim.msgs, claim.n, is_returned);
	if (!wfe_in_transaction("wfe publisher: marking", mark_body, &mark))
		return 0;				/* rows stay claimed: the next claim takes them again */
	*more = claim.n >= wfe_publish_batch && mark.error == NULL;
	return mark.marked;
}

void
wfe_publisher_shutdown(void)
{
	disconnect(NULL);
}
