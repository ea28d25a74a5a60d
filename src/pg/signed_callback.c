/*
 * signed_callback.c — signed callbacks through an HTTP gateway (operations.md
 * "Signed callbacks").
 *
 * wfe.callback(body, signature) is a worker's report that arrives as the
 * JSON body of an HTTP request instead of a database call.  It answers a
 * word, never an error, for everything a forger or a replayer controls:
 *
 *   1. the body is measured (admission limits) and parsed: a body that is
 *      not a callback at all is an error (22P02/22023), since nothing in it
 *      can be authenticated or attributed;
 *   2. the signature: "key_id=K,v1=HEX[,v1=HEX...]" (parsed by
 *      core/engine/signature.c), each v1 an HMAC-SHA256
 *      (PostgreSQL's own, common/hmac.h) of "callback_id.timestamp.body"
 *      under a secret of K valid now (wfe.callback_keys).  Any v1 matching
 *      any valid secret of K passes, which is how keys rotate.  Otherwise
 *      `unauthenticated`;
 *   3. the timestamp within wfe.callback_tolerance_s of now, or `expired`;
 *   4. the callback_id not seen within that window (wfe.callback_ids), or
 *      `replayed`.  3 and 4 compare against one window, computed once to
 *      the microsecond: had 3 compared whole seconds and 4 exact times, a
 *      body whose remembered id had just left the window would still be in
 *      time for 3 (at tolerance 3 s, the same body was accepted again
 *      3.3 s after its timestamp);
 *   5. the call itself, through the very functions a database worker calls
 *      (wfe_complete_task, ...): the same admission limits, queue grant,
 *      fenced gate and outcome words.  A "signal" body goes through
 *      wfe.signal as the caller (the gateway's role): its grant_signal, its
 *      tenants, the same outcome words.
 *
 * Refusals 3-4 are recorded as callback.expired / .replayed events of the
 * run; refusal 2 in wfe.unauthenticated_callbacks, since nothing in an
 * unauthenticated body is anyone's word (a tenant's reader must not see a
 * stranger's text among its run's events).  Nothing else changes.
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "common/cryptohash.h"
#include "common/hmac.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/json.h"
#include "utils/jsonb.h"
#include "utils/numeric.h"
#include "utils/timestamp.h"

#include "core/engine/signature.h"
#include "spi_stmt.h"
#include "wfe.h"

#define DIGEST_BYTES WFE_SIG_DIGEST_BYTES
#define MAX_SIGNATURE_BYTES 1024	/* the whole header */

/* The report functions of engine.c: a signed body takes exactly their path. */
extern PGDLLEXPORT Datum wfe_heartbeat(PG_FUNCTION_ARGS);
extern PGDLLEXPORT Datum wfe_complete_task(PG_FUNCTION_ARGS);
extern PGDLLEXPORT Datum wfe_fail_task(PG_FUNCTION_ARGS);

/* One callback body, parsed. */
typedef struct signed_call
{
	const char *call;			/* complete, fail, heartbeat, signal */
	int64		run_id;
	char	   *stage;			/* NULL for a signal */
	char	   *signal;			/* a signal: its ref, and its idempotency key or NULL */
	char	   *idempotency_key;
	int32		attempt;
	int64		fence;
	Jsonb	   *value;			/* result or error */
	bool		retryable;
	char	   *callback_id;
	int64		timestamp;
} signed_call;

static stmt q_keys = STMT(
	"SELECT k.secret, k.valid_from <= now() AND (k.valid_until IS NULL OR now() < k.valid_until)"
	"  FROM wfe.callback_keys AS k WHERE k.key_id = $1", 1, TX);
/*
 * Remember an id; an old row of the same id (signed before the window's
 * start $4, not yet removed) is taken over.  No row returned: seen within
 * the window.
 */
static stmt q_seen = STMT(
	"INSERT INTO wfe.callback_ids AS c (callback_id, signed_at, key_id)"
	" VALUES ($1, $2, $3)"
	" ON CONFLICT (callback_id) DO UPDATE SET signed_at = excluded.signed_at, key_id = excluded.key_id"
	"  WHERE c.signed_at < $4"
	" RETURNING 1", 4, TX, TIMESTAMPTZOID, TX, TIMESTAMPTZOID);
/*
 * Each accepted id removes up to two signed before the window's start, so
 * the table holds about one window of ids whatever the rate, with no
 * worker needed.
 */
static stmt q_forget = STMT(
	"DELETE FROM wfe.callback_ids AS c WHERE c.ctid = ANY (ARRAY("
	"  SELECT c2.ctid FROM wfe.callback_ids AS c2"
	"   WHERE c2.signed_at < $1"
	"   ORDER BY c2.signed_at LIMIT 2 FOR UPDATE SKIP LOCKED))", 1, TIMESTAMPTZOID);
static stmt q_refused = STMT(
	"INSERT INTO wfe.events (run_id, tenant, stage, attempt, type, detail, fence)"
	" SELECT $1, coalesce((SELECT r.tenant FROM wfe.runs AS r WHERE r.run_id = $1), ''), $2, $3, $4, $5::jsonb, $6",
	6, I8, TX, I4, TX, TX, I8);
/*
 * An unauthenticated body is anyone's text: it goes to a table of its own
 * that the operators and wfe_admin read, never into a tenant's events.
 */
static stmt q_unauthenticated = STMT(
	"INSERT INTO wfe.unauthenticated_callbacks (run_id, stage, attempt, detail, fence, caller)"
	" VALUES ($1, $2, $3, $5::jsonb, $6, $7)", 7, I8, TX, I4, TX, TX, I8, TX);

/* Raise 22023 about the body's field key. */
static void pg_attribute_noreturn()
bad_field(const char *key, const char *what)
{
	ereport(ERROR,
			(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
			 errmsg("the callback body's \"%s\" must be %s", key, what),
			 errhint("The body is {\"call\", \"run_id\", \"stage\", \"attempt\", \"fence\", "
					 "\"result\" | \"error\" + \"retryable\", \"callback_id\", \"timestamp\"}, "
					 "or, for \"call\": \"signal\", {\"call\", \"run_id\", \"signal\", \"payload\", "
					 "\"idempotency_key\", \"callback_id\", \"timestamp\"}.")));
}

/* The body's member key, or NULL when absent (or JSON null). */
static JsonbValue *
member(Jsonb *body, const char *key)
{
	JsonbValue *v = getKeyJsonValueFromContainer(&body->root, key, strlen(key), NULL);

	return (v == NULL || v->type == jbvNull) ? NULL : v;
}

/* A string member, within the name limits. */
static char *
string_member(Jsonb *body, const char *key)
{
	JsonbValue *v = member(body, key);

	if (v == NULL || v->type != jbvString || v->val.string.len == 0)
		bad_field(key, "a non-empty string");
	wfe_admit_name(v->val.string.val, v->val.string.len, key);
	return pnstrdup(v->val.string.val, v->val.string.len);
}

/*
 * An integer member.  run_id and fence may also be a string of digits
 * (with_string): a fence uses all 64 bits, more than a JSON parser that
 * reads numbers as doubles keeps.
 */
static int64
int_member(Jsonb *body, const char *key, bool with_string, int64 min, int64 max)
{
	JsonbValue *v = member(body, key);
	char	   *s,
			   *end;
	long long	n;

	if (v != NULL && v->type == jbvNumeric)
		s = DatumGetCString(DirectFunctionCall1(numeric_out, NumericGetDatum(v->val.numeric)));
	else if (v != NULL && v->type == jbvString && with_string)
		s = pnstrdup(v->val.string.val, v->val.string.len);
	else
		bad_field(key, with_string ? "an integer (or a string of its digits)" : "an integer");
	errno = 0;
	n = strtoll(s, &end, 10);
	if (*s == '\0' || *end != '\0' || errno != 0 || n < min || n > max)
		bad_field(key, psprintf("an integer from " INT64_FORMAT " to " INT64_FORMAT, min, max));
	return (int64) n;
}

/* Parse and check body (JSON text, already measured) into *c. */
static void
parse_body(const char *text, signed_call *c)
{
	Jsonb	   *body = DatumGetJsonbP(DirectFunctionCall1(jsonb_in, CStringGetDatum(text)));
	JsonbValue *v;
	bool		fail;

	wfe_admit_jsonb(body, "the callback body", 0);
	if (!JB_ROOT_IS_OBJECT(body))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("the callback body must be a JSON object")));
	c->call = string_member(body, "call");
	if (strcmp(c->call, "complete") != 0 && strcmp(c->call, "fail") != 0 &&
		strcmp(c->call, "heartbeat") != 0 && strcmp(c->call, "signal") != 0)
		bad_field("call", "\"complete\", \"fail\", \"heartbeat\" or \"signal\"");
	fail = strcmp(c->call, "fail") == 0;
	c->run_id = int_member(body, "run_id", true, 1, PG_INT64_MAX);
	if (strcmp(c->call, "signal") == 0)
	{
		/* {"call": "signal", "run_id", "signal", "payload", "idempotency_key", "callback_id", "timestamp"} */
		c->signal = string_member(body, "signal");
		c->idempotency_key = member(body, "idempotency_key") ? string_member(body, "idempotency_key") : NULL;
		c->callback_id = string_member(body, "callback_id");
		c->timestamp = int_member(body, "timestamp", false, 0, (int64) 1 << 40);
		v = member(body, "payload");
		c->value = v != NULL ? JsonbValueToJsonb(v)
			: DatumGetJsonbP(DirectFunctionCall1(jsonb_in, CStringGetDatum("{}")));
		return;
	}
	c->stage = string_member(body, "stage");
	c->attempt = (int32) int_member(body, "attempt", false, 1, PG_INT32_MAX);
	c->fence = int_member(body, "fence", true, PG_INT64_MIN, PG_INT64_MAX);
	c->callback_id = string_member(body, "callback_id");
	c->timestamp = int_member(body, "timestamp", false, 0, (int64) 1 << 40);
	v = member(body, fail ? "error" : "result");
	c->value = v != NULL ? JsonbValueToJsonb(v)
		: DatumGetJsonbP(DirectFunctionCall1(jsonb_in, CStringGetDatum("{}")));
	v = member(body, "retryable");
	if (v != NULL && v->type != jbvBool)
		bad_field("retryable", "a boolean");
	c->retryable = v == NULL || v->val.boolean;
}

/* HMAC-SHA256 of "callback_id.timestamp.body" under secret into out. */
static void
sign(const uint8 *secret, size_t secret_len, const signed_call *c, const char *body,
	 uint8 out[DIGEST_BYTES])
{
	pg_hmac_ctx *ctx = pg_hmac_create(PG_SHA256);
	char		ts[32];

	snprintf(ts, sizeof(ts), INT64_FORMAT, c->timestamp);
	if (ctx == NULL)
		ereport(ERROR, (errcode(ERRCODE_OUT_OF_MEMORY), errmsg("out of memory")));
	if (pg_hmac_init(ctx, secret, secret_len) < 0 ||
		pg_hmac_update(ctx, (const uint8 *) c->callback_id, strlen(c->callback_id)) < 0 ||
		pg_hmac_update(ctx, (const uint8 *) ".", 1) < 0 ||
		pg_hmac_update(ctx, (const uint8 *) ts, strlen(ts)) < 0 ||
		pg_hmac_update(ctx, (const uint8 *) ".", 1) < 0 ||
		pg_hmac_update(ctx, (const uint8 *) body, strlen(body)) < 0 ||
		pg_hmac_final(ctx, out, DIGEST_BYTES) < 0)
	{
		const char *why = pg_hmac_error(ctx);

		pg_hmac_free(ctx);
		elog(ERROR, "wfe: HMAC-SHA256 failed: %s", why);
	}
	pg_hmac_free(ctx);
}

/*
 * Why sig does not authenticate the body: NULL when a v1 is the HMAC under
 * a secret of its key valid now.  Every valid secret is tried against
 * every v1, so neither the order nor the number of matches shows.
 */
static const char *
unauthentic(const wfe_signature *sig, const signed_call *c, const char *body)
{
	Datum		v[1] = {CStringGetTextDatum(sig->key_id)};
	bool		any_valid = false,
				match = false;
	uint64		nkeys;

	stmt_run(&q_keys, v, NULL);
	nkeys = SPI_processed;
	if (nkeys == 0)
		return "unknown key";
	for (uint64 r = 0; r < nkeys; r++)
	{
		bool		isnull;
		bytea	   *secret;
		uint8		expected[DIGEST_BYTES];

		if (!DatumGetBool(SPI_getbinval(SPI_tuptable->vals[r], SPI_tuptable->tupdesc, 2, &isnull)))
			continue;
		any_valid = true;
		secret = DatumGetByteaPP(SPI_getbinval(SPI_tuptable->vals[r], SPI_tuptable->tupdesc, 1, &isnull));
		sign((const uint8 *) VARDATA_ANY(secret), VARSIZE_ANY_EXHDR(secret), c, body, expected);
		for (int k = 0; k < sig->n; k++)
			match |= wfe_digest_equal(expected, sig->digest[k]);
		explicit_bzero(expected, sizeof(expected));
	}
	if (!any_valid)
		return "key not valid now";
	return match ? NULL : "bad signature";
}

/* Add "key": value (a JSON string, or null) to the detail being built in buf. */
static void
detail_string(StringInfo buf, const char *key, const char *value)
{
	appendStringInfo(buf, "%s\"%s\": ", buf->len > 1 ? ", " : "", key);
	if (value == NULL)
		appendStringInfoString(buf, "null");
	else
		escape_json(buf, value);
}

/*
 * Record a refused callback and answer WORD: an authentic one (expired,
 * replayed) as an event of its run (type callback.WORD), an
 * unauthenticated one in wfe.unauthenticated_callbacks.
 */
static const char *
refuse(const char *word, const char *reason, const signed_call *c, const char *key_id)
{
	StringInfoData detail;
	Datum		v[7];
	char		n[8] = "       ";

	initStringInfo(&detail);
	appendStringInfoChar(&detail, '{');
	detail_string(&detail, "callback", c->call);
	if (c->signal != NULL)
		detail_string(&detail, "signal", c->signal);
	detail_string(&detail, "callback_id", c->callback_id);
	detail_string(&detail, "key_id", key_id);
	detail_string(&detail, "reason", reason);
	appendStringInfo(&detail, ", \"timestamp\": " INT64_FORMAT "}", c->timestamp);
	v[0] = Int64GetDatum(c->run_id);
	v[1] = stmt_text_or_null(c->stage, &n[1]);	/* a signal is about no stage, attempt or fence */
	v[2] = Int32GetDatum(c->attempt);
	v[3] = CStringGetTextDatum(psprintf("callback.%s", word));
	v[4] = CStringGetTextDatum(detail.data);
	v[5] = Int64GetDatum(c->fence);
	v[6] = CStringGetTextDatum(GetUserNameFromId(GetOuterUserId(), false));	/* who sent it */
	if (c->stage == NULL)
		n[2] = n[5] = 'n';
	stmt_run(strcmp(word, "unauthenticated") == 0 ? &q_unauthenticated : &q_refused, v, n);
	return word;
}

/*
 * The checks of an authentic call before it may act: signature, time,
 * replay.  A refusal word, or NULL when the call may go on.
 */
static const char *
admit_signed(const char *header, const signed_call *c, const char *body)
{
	wfe_signature sig;
	const char *why;
	TimestampTz now,
				signed_at,
				window_start;
	int64		tolerance = (int64) wfe_callback_tolerance_s * USECS_PER_SEC;
	Datum		v[4];

	if (!wfe_signature_parse(header, strlen(header), &sig))
		return refuse("unauthenticated", "malformed signature", c, NULL);
	why = unauthentic(&sig, c, body);
	if (why != NULL)
		return refuse("unauthenticated", why, c, sig.key_id);

	/*
	 * The window, to the microsecond, around the transaction's start (the
	 * now() the key's validity was read at).  The expiry check and the
	 * replay memory both use window_start, so an id is forgotten only once
	 * its body would answer expired.
	 */
	now = GetCurrentTransactionStartTimestamp();
	signed_at = time_t_to_timestamptz((pg_time_t) c->timestamp);
	window_start = now - tolerance;
	if (signed_at < window_start || signed_at > now + tolerance)
		return refuse("expired",
					  psprintf("timestamp " INT64_FORMAT " is more than wfe.callback_tolerance_s (%d) from now (%s)",
							   c->timestamp, wfe_callback_tolerance_s,
							   DatumGetCString(DirectFunctionCall1(numeric_out,
																   DirectFunctionCall2(extract_timestamptz,
																					   CStringGetTextDatum("epoch"),
																					   TimestampTzGetDatum(now))))),
					  c, sig.key_id);

	v[0] = CStringGetTextDatum(c->callback_id);
	v[1] = TimestampTzGetDatum(signed_at);
	v[2] = CStringGetTextDatum(sig.key_id);
	v[3] = TimestampTzGetDatum(window_start);
	stmt_run(&q_seen, v, NULL);
	if (SPI_processed == 0)
		return refuse("replayed", "callback_id seen within the tolerance window", c, sig.key_id);
	stmt_run(&q_forget, &v[3], NULL);
	return NULL;
}

PG_FUNCTION_INFO_V1(wfe_callback);

/* wfe.callback(body text, signature text) RETURNS text */
Datum
wfe_callback(PG_FUNCTION_ARGS)
{
	text	   *body_t,
			   *header_t;
	char	   *body;
	signed_call c;
	const char *refusal;
	text	   *result;
	Datum		stage;

	if (PG_ARGISNULL(0) || PG_ARGISNULL(1))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("body and signature must not be null")));
	body_t = PG_GETARG_TEXT_PP(0);
	header_t = PG_GETARG_TEXT_PP(1);
	/* measured before anything is built from them */
	if (VARSIZE_ANY_EXHDR(body_t) > (Size) wfe_max_payload_bytes)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("the callback body is %zu bytes, more than wfe.max_payload_bytes (%d)",
						VARSIZE_ANY_EXHDR(body_t), wfe_max_payload_bytes)));
	if (VARSIZE_ANY_EXHDR(header_t) > MAX_SIGNATURE_BYTES)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("the signature is %zu bytes, more than %d",
						VARSIZE_ANY_EXHDR(header_t), MAX_SIGNATURE_BYTES),
				 errhint("A signature is key_id=...,v1=<64 hex digits>, with at most %d v1= values.",
						 WFE_SIG_MAX)));
	body = text_to_cstring(body_t);
	memset(&c, 0, sizeof(c));
	parse_body(body, &c);

	SPI_connect();
	refusal = admit_signed(text_to_cstring(header_t), &c, body);
	if (refusal != NULL)
	{
		result = cstring_to_text(refusal);
		result = (text *) SPI_datumTransfer(PointerGetDatum(result), false, -1);
		SPI_finish();
		PG_RETURN_TEXT_P(result);
	}
	/* authentic, in time, new: the very call a database caller makes */
	if (c.signal != NULL)
	{
		Oid			types[4] = {INT8OID, TEXTOID, JSONBOID, TEXTOID};
		Datum		args[4] = {Int64GetDatum(c.run_id), CStringGetTextDatum(c.signal),
		JsonbPGetDatum(c.value), c.idempotency_key ? CStringGetTextDatum(c.idempotency_key) : (Datum) 0};
		char		nulls[5] = {' ', ' ', ' ', c.idempotency_key ? ' ' : 'n', '\0'};
		bool		isnull;

		if (SPI_execute_with_args("SELECT wfe.signal($1, $2, $3, $4)", 4, types, args, nulls, false, 1)
			!= SPI_OK_SELECT || SPI_processed != 1)
			elog(ERROR, "wfe: could not send a signed signal");
		result = DatumGetTextPP(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
		result = (text *) SPI_datumTransfer(PointerGetDatum(result), false, -1);
		SPI_finish();
		PG_RETURN_TEXT_P(result);
	}
	SPI_finish();

	stage = CStringGetTextDatum(c.stage);
	if (strcmp(c.call, "heartbeat") == 0)
		return DirectFunctionCall4(wfe_heartbeat, Int64GetDatum(c.run_id), stage,
								   Int32GetDatum(c.attempt), Int64GetDatum(c.fence));
	if (strcmp(c.call, "complete") == 0)
		return DirectFunctionCall5(wfe_complete_task, Int64GetDatum(c.run_id), stage,
								   Int32GetDatum(c.attempt), Int64GetDatum(c.fence),
								   JsonbPGetDatum(c.value));
	return DirectFunctionCall6(wfe_fail_task, Int64GetDatum(c.run_id), stage,
							   Int32GetDatum(c.attempt), Int64GetDatum(c.fence),
							   JsonbPGetDatum(c.value), BoolGetDatum(c.retryable));
}
