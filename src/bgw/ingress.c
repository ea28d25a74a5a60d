/*
 * ingress.c — run commands from RabbitMQ (delivery.md "Run commands from
 * RabbitMQ"), consumed by the background worker on the publisher's
 * connection, between its confirm windows (publisher.c calls
 * wfe_ingress_round with nothing in flight).
 *
 * For each configured ingress (wfe.ingresses) it declares wfe.ingress.NAME
 * once per connection and takes at most a bounded number of commands per
 * round with basic.get, which never waits for a message, so a flood of
 * commands cannot stall timers or publishing.  Each command is:
 *
 *   1. submitted by wfe._ingress_submit in a transaction of its own, as the
 *      ingress's role, with the envelope's idempotency key -- no network
 *      I/O while it is open;
 *   2. acked only once that committed, so a crash in between redelivers it
 *      and the second submit answers accepted = false with the same run;
 *   3. answered on its reply_to queue, if it has one, with its
 *      correlation_id (the AMQP property, else the envelope's).
 *
 * A command the database refuses for what it is (not an envelope, unknown
 * workflow or tenant, context_schema, a limit, a privilege) is copied to
 * wfe.dlq with x-wfe-error (the SQLSTATE) and x-wfe-error-message headers,
 * confirmed, counted, and then acked: rejected without requeue.  A
 * transient error (serialization, lock timeout, shutdown, I/O) requeues it
 * and the ingress waits for the next round.
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "lib/stringinfo.h"
#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/interrupt.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/json.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"

#include "amqp/broker.h"
#include "amqp/topology.h"
#include "bgw.h"

/* How long to wait for the confirm of a dead-lettered copy or a reply. */
#define INGRESS_CONFIRM_TIMEOUT_MS 5000

/* Ingresses declared on the current connection (TopMemoryContext). */
static uint64_t declared_serial = 0;
static char **declared = NULL;
static int	ndeclared = 0;
static int	declared_cap = 0;

/* Ingresses RabbitMQ kept with other arguments, already reported (TopMemoryContext). */
static char **kept = NULL;
static int	nkept = 0;
static int	kept_cap = 0;

/* Append a copy of s to a TopMemoryContext list. */
static void
list_add(char ***list, int *n, int *cap, const char *s)
{
	if (*n == *cap)
	{
		*cap = *cap ? *cap * 2 : 8;
		*list = *list ? repalloc(*list, sizeof(char *) * *cap)
			: MemoryContextAlloc(TopMemoryContext, sizeof(char *) * *cap);
	}
	(*list)[(*n)++] = MemoryContextStrdup(TopMemoryContext, s);
}

/* Is s in the list? */
static bool
list_has(char **list, int n, const char *s)
{
	for (int i = 0; i < n; i++)
		if (strcmp(list[i], s) == 0)
			return true;
	return false;
}

/* Declare ingress NAME's queue unless this connection has: false when the connection failed. */
static bool
ensure_declared(const char *name, char *err, size_t errlen)
{
	wfe_queue_options options = {
		.type = (wfe_queue_type) wfe_amqp_queue_type,
		.retry_ttl_ms = wfe_broker_retry_ttl_ms,
		.delivery_limit = wfe_broker_max_redeliveries,
	};
	int			status;

	if (declared_serial != broker_connection_serial())
	{
		for (int i = 0; i < ndeclared; i++)
			pfree(declared[i]);
		ndeclared = 0;
		declared_serial = broker_connection_serial();
	}
	if (list_has(declared, ndeclared, name))
		return true;
	status = broker_declare_ingress(name, &options, err, errlen);
	if (status == 0)
		return false;
	/* one that exists with other arguments works as it is: say so once */
	if (status < 0 && !list_has(kept, nkept, name))
	{
		ereport(WARNING,
				(errmsg("wfe ingress: RabbitMQ kept the existing queue of ingress \"%s\": %s", name, err),
				 errhint("RabbitMQ cannot change a queue's type or arguments; wfe consumes the existing queue.")));
		list_add(&kept, &nkept, &kept_cap, name);
	}
	list_add(&declared, &ndeclared, &declared_cap, name);
	return true;
}

typedef struct names_unit
{
	MemoryContext cxt;
	char	  **names;
	int			n;
} names_unit;

/* Transaction body: the configured ingresses' names (wfe._ingress_names). */
static void
names_body(void *arg)
{
	names_unit *u = arg;
	bool		isnull;
	Datum		value;
	Datum	   *elems;
	int			n;

	if (SPI_execute("SELECT wfe._ingress_names()", true, 1) != SPI_OK_SELECT || SPI_processed != 1)
		elog(ERROR, "wfe ingress: could not list the ingresses");
	value = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);
	deconstruct_array(DatumGetArrayTypeP(value), TEXTOID, -1, false, TYPALIGN_INT, &elems, NULL, &n);
	u->names = MemoryContextAlloc(u->cxt, sizeof(char *) * Max(n, 1));
	for (int i = 0; i < n; i++)
		u->names[i] = MemoryContextStrdup(u->cxt, TextDatumGetCString(elems[i]));
	u->n = n;
}

typedef struct submit_unit
{
	const char *ingress;
	const char *body;
	MemoryContext cxt;
	int64		run_id;
	bool		accepted;
	char	   *correlation_id; /* the envelope's */
} submit_unit;

/* Transaction body: one command's submit (wfe._ingress_submit). */
static void
submit_body(void *arg)
{
	submit_unit *u = arg;
	Oid			types[2] = {TEXTOID, TEXTOID};
	Datum		values[2] = {CStringGetTextDatum(u->ingress), CStringGetTextDatum(u->body)};
	bool		isnull;

	if (SPI_execute_with_args("SELECT s.run_id, s.accepted, s.correlation_id FROM wfe._ingress_submit($1, $2) AS s",
							  2, types, values, NULL, false, 1) != SPI_OK_SELECT || SPI_processed != 1)
		elog(ERROR, "wfe ingress: a submit did not return one row");
	u->run_id = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
	u->accepted = DatumGetBool(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2, &isnull));
	u->correlation_id = MemoryContextStrdup(u->cxt, SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 3));
}

typedef struct count_unit
{
	const char *ingress;
	const char *reason;
} count_unit;

/* Transaction body: count one rejected command (wfe._ingress_count). */
static void
count_body(void *arg)
{
	count_unit *u = arg;
	Oid			types[2] = {TEXTOID, TEXTOID};
	Datum		values[2] = {CStringGetTextDatum(u->ingress), CStringGetTextDatum(u->reason)};

	if (SPI_execute_with_args("SELECT wfe._ingress_count($1, 'rejected', $2)",
							  2, types, values, NULL, false, 1) != SPI_OK_SELECT)
		elog(ERROR, "wfe ingress: counting a rejected command failed");
}

/*
 * Run fn(arg) in a transaction of its own, as wfe_in_transaction does, but
 * hand the error back (palloc'd in the caller's context) instead of
 * reporting it: the caller decides whether it rejects or requeues.  NULL
 * when the transaction committed.
 */
static ErrorData *
try_transaction(const char *activity, void (*fn) (void *arg), void *arg)
{
	MemoryContext caller = CurrentMemoryContext;
	ErrorData  *volatile edata = NULL;

	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	pgstat_report_activity(STATE_RUNNING, activity);
	PG_TRY();
	{
		SPI_connect();
		PushActiveSnapshot(GetTransactionSnapshot());
		fn(arg);
		SPI_finish();
		PopActiveSnapshot();
		CommitTransactionCommand();
	}
	PG_CATCH();
	{
		MemoryContextSwitchTo(caller);
		edata = CopyErrorData();
		FlushErrorState();
		AbortCurrentTransaction();
	}
	PG_END_TRY();
	MemoryContextSwitchTo(caller);
	pgstat_report_stat(false);
	pgstat_report_activity(STATE_IDLE, NULL);
	return edata;
}

/*
 * Is the error about the moment rather than the command: the same command
 * may well succeed later?  Anything else (data, privileges, limits, a
 * missing object, even an internal error) would fail again: requeueing it
 * would only loop.
 */
static bool
transient(int sqlerrcode)
{
	switch (ERRCODE_TO_CATEGORY(sqlerrcode))
	{
		case ERRCODE_INSUFFICIENT_RESOURCES:	/* 53: disk full, out of memory */
			/* but a tenant's limit (53400) is a refusal, as for a SQL submit */
			return sqlerrcode != ERRCODE_CONFIGURATION_LIMIT_EXCEEDED;
		case ERRCODE_TRANSACTION_ROLLBACK:	/* 40: serialization, deadlock */
		case ERRCODE_CONNECTION_EXCEPTION:	/* 08 */
		case ERRCODE_OPERATOR_INTERVENTION: /* 57: cancel, shutdown */
		case ERRCODE_SYSTEM_ERROR:	/* 58: I/O */
			return true;
		default:
			return sqlerrcode == ERRCODE_LOCK_NOT_AVAILABLE;	/* 55P03: lock_timeout */
	}
}

/* Append "key": "value" (JSON-escaped) to a JSON object being written. */
static void
json_pair(StringInfo buf, const char *key, const char *value)
{
	if (buf->len > 1)
		appendStringInfoChar(buf, ',');
	escape_json(buf, key);
	appendStringInfoChar(buf, ':');
	escape_json(buf, value);
}

/* Publish one message and wait for its confirm: 1 confirmed, 0 refused or unconfirmed, -1 connection failed. */
static int
publish_confirmed(BrokerMessage *msg, char *err, size_t errlen)
{
	BrokerMessage *window[1] = {msg};

	if (!broker_publish(msg, err, errlen) ||
		!broker_await_confirms(window, 1, INGRESS_CONFIRM_TIMEOUT_MS, &ShutdownRequestPending, err, errlen))
		return -1;
	if (msg->status != MSG_ACKED)
	{
		snprintf(err, errlen, "RabbitMQ did not confirm the message (%s)",
				 msg->status == MSG_RETURNED ? "unroutable" : msg->status == MSG_NACKED ? "nacked" : "no confirm");
		return 0;
	}
	return 1;
}

/*
 * Copy a refused command to wfe.dlq with the reason in its headers, then
 * count it and ack it.  -1: the connection failed; 0: the copy was not
 * confirmed (the command was requeued); 1 done.
 */
static int
reject(const char *ingress, BrokerDead *m, ErrorData *edata, char *err, size_t errlen)
{
	StringInfoData headers;
	const char *code = unpack_sql_state(edata->sqlerrcode);
	BrokerMessage copy = {0};
	count_unit	count = {ingress, code};
	int			status;
	ErrorData  *counted;

	ereport(LOG,
			(errmsg("wfe ingress \"%s\" rejected command %s to wfe.dlq: %s (%s)", ingress,
					m->message_id ? m->message_id : "(no message_id)", edata->message, code)));
	initStringInfo(&headers);
	appendStringInfoChar(&headers, '{');
	json_pair(&headers, "x-wfe-error", code);
	json_pair(&headers, "x-wfe-error-message", edata->message ? edata->message : "");
	json_pair(&headers, "x-wfe-ingress", ingress);
	appendStringInfoChar(&headers, '}');

	copy.exchange = WFE_EXCHANGE_COMMANDS;
	copy.routing_key = WFE_KEY_DEAD;
	copy.message_id = m->message_id ? m->message_id : "";
	copy.correlation_id = m->correlation_id;
	copy.headers_json = headers.data;
	copy.body = m->body;
	copy.mandatory = true;		/* wfe.dlq must hold it */
	status = publish_confirmed(&copy, err, errlen);
	if (status <= 0)
	{
		if (status == 0 && !broker_settle(m->tag, false, true, err, errlen))
			return -1;
		return status;
	}
	/* the copy is safe in wfe.dlq: count it, then let the command go */
	counted = try_transaction("wfe ingress: counting a rejected command", count_body, &count);
	if (counted)
		ereport(WARNING, (errmsg("wfe ingress: counting a rejected command failed: %s", counted->message)));
	return broker_settle(m->tag, true, false, err, errlen) ? 1 : -1;
}

/* Answer a submitted command on its reply_to queue: false when the connection failed. */
static bool
reply(BrokerDead *m, const submit_unit *u, char *err, size_t errlen)
{
	BrokerMessage answer = {0};
	char		body[96];

	snprintf(body, sizeof(body), "{\"run_id\": " INT64_FORMAT ", \"accepted\": %s}",
			 u->run_id, u->accepted ? "true" : "false");
	answer.exchange = "";		/* the default exchange routes by queue name */
	answer.routing_key = m->reply_to;
	answer.message_id = m->message_id ? m->message_id : "";
	/* the property if the command has one, else the envelope's */
	answer.correlation_id = m->correlation_id ? m->correlation_id : u->correlation_id;
	answer.body = body;
	switch (publish_confirmed(&answer, err, errlen))
	{
		case -1:
			return false;
		case 0:
			/* the run stands; only the answer is lost (the caller can ask again) */
			ereport(WARNING, (errmsg("wfe ingress: the reply to command %s on \"%s\" was lost: %s",
									 answer.message_id, m->reply_to, err)));
			break;
	}
	return true;
}

/*
 * Take and handle at most max commands of ingress NAME.  Returns how many;
 * -1 when the connection failed (*err says why).  Stops early when the
 * queue is empty or a command had to be requeued.
 */
static int
consume(const char *name, int max, char *err, size_t errlen)
{
	char		queue[WFE_TOPOLOGY_NAME_MAX];
	int			n = 0;

	if (!wfe_topology_ingress_queue(queue, name))
		return 0;				/* the name check in configure_ingress prevents it */
	while (n < max && !ShutdownRequestPending)
	{
		BrokerDead	m;
		submit_unit u = {name, NULL, CurrentMemoryContext, 0, false, NULL};
		ErrorData  *edata;
		int			got = broker_get(queue, &m, err, errlen);

		if (got <= 0)
			return got < 0 ? -1 : n;
		n++;
		u.body = m.body;
		if (!pg_verifymbstr(m.body, strlen(m.body), true))
		{
			/* text the database would refuse: rejected without a transaction */
			edata = palloc0(sizeof(ErrorData));
			edata->sqlerrcode = ERRCODE_CHARACTER_NOT_IN_REPERTOIRE;
			edata->message = pstrdup("a run command must be a JSON envelope: the message body is not valid text");
		}
		else
			edata = try_transaction("wfe ingress: submitting a run command", submit_body, &u);
		if (edata == NULL)
		{
			/* committed: now, and only now, the command may go */
			if (!broker_settle(m.tag, true, false, err, errlen))
				return -1;
			if (m.reply_to && m.reply_to[0] && !reply(&m, &u, err, errlen))
				return -1;
			continue;
		}
		if (transient(edata->sqlerrcode))
		{
			ereport(LOG, (errmsg("wfe ingress \"%s\" requeued command %s: %s", name,
								 m.message_id ? m.message_id : "(no message_id)", edata->message)));
			if (!broker_settle(m.tag, false, true, err, errlen))
				return -1;
			return n;			/* it comes back first: try it next round */
		}
		switch (reject(name, &m, edata, err, errlen))
		{
			case -1:
				return -1;
			case 0:
				return n;		/* requeued; wfe.dlq will take it next round */
		}
	}
	return n;
}

/* See bgw.h. */
int
wfe_ingress_round(int max, bool *configured, char *err, size_t errlen)
{
	names_unit	names = {CurrentMemoryContext, NULL, 0};
	int			done = 0;

	*configured = false;
	if (!wfe_in_transaction("wfe ingress: listing ingresses", names_body, &names) || names.n == 0)
		return 0;
	*configured = true;
	for (int i = 0; i < names.n; i++)
		if (!ensure_declared(names.names[i], err, errlen))
			return -1;
	/* each ingress gets its share of the round, so none starves another */
	for (int i = 0; i < names.n && done < max; i++)
	{
		int			share = Max(1, (max - done) / (names.n - i));
		int			got = consume(names.names[i], share, err, errlen);

		if (got < 0)
			return -1;
		done += got;
	}
	return done;
}
