/*
 * message.c — what names a message: its deterministic id and, for the
 * outbox, its exchange and routing key.  The rules live here and in
 * src/amqp/topology.c only; SQL asks through wfe._message_id,
 * wfe._exchange and wfe._routing_key, the claim calls wfe_message_id and
 * the event projection (event_projection.c) wfe_event_message_id.
 */
#include "postgres.h"

#include "common/md5.h"
#include "fmgr.h"
#include "utils/builtins.h"
#include "utils/uuid.h"

#include "amqp/topology.h"
#include "pg/wfe.h"

/* md5 of text as a uuid (what md5(text)::uuid gives in SQL); frees text. */
static Datum
md5_uuid(char *text)
{
	pg_uuid_t  *uuid = palloc(sizeof(pg_uuid_t));
	const char *errstr = NULL;

	if (!pg_md5_binary(text, strlen(text), uuid->data, &errstr))
		elog(ERROR, "wfe: md5 failed: %s", errstr ? errstr : "?");
	pfree(text);
	return UUIDPGetDatum(uuid);
}

/*
 * The deterministic id of a message about one attempt: md5 of
 * "run:stage:attempt:fence:kind" as a uuid, so a republished message keeps
 * its id and consumers deduplicate.
 */
Datum
wfe_message_id(int64 run_id, const char *stage, int attempt, int64 fence, const char *kind)
{
	return md5_uuid(psprintf(INT64_FORMAT ":%s:%d:" INT64_FORMAT ":%s", run_id, stage, attempt,
							 fence, kind));
}

/* The id of an event's message on the wfe.events exchange: md5 of "event:<event_id>" as a uuid. */
Datum
wfe_event_message_id(int64 event_id)
{
	return md5_uuid(psprintf("event:" INT64_FORMAT, event_id));
}

PG_FUNCTION_INFO_V1(wfe_message_id_sql);
PG_FUNCTION_INFO_V1(wfe_exchange_sql);
PG_FUNCTION_INFO_V1(wfe_routing_key_sql);

/* wfe._message_id(run_id, stage, attempt, fence, kind) RETURNS uuid (STRICT). */
Datum
wfe_message_id_sql(PG_FUNCTION_ARGS)
{
	return wfe_message_id(PG_GETARG_INT64(0), text_to_cstring(PG_GETARG_TEXT_PP(1)),
						  PG_GETARG_INT32(2), PG_GETARG_INT64(3),
						  text_to_cstring(PG_GETARG_TEXT_PP(4)));
}

/* Raise 22023: an outbox kind (or track) topology.c does not know. */
static void pg_attribute_noreturn()
unknown_kind(const char *what, const char *value)
{
	ereport(ERROR,
			(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
			 errmsg("wfe has no %s \"%s\"", what, value),
			 errhint("Outbox messages are of kind dispatch (track small or large), cancel or event.")));
}

/* wfe._exchange(kind) RETURNS text (STRICT): the exchange a kind of message goes to. */
Datum
wfe_exchange_sql(PG_FUNCTION_ARGS)
{
	char	   *kind = text_to_cstring(PG_GETARG_TEXT_PP(0));
	const char *exchange = wfe_topology_exchange(kind);

	if (exchange == NULL)
		unknown_kind("message kind", kind);
	PG_RETURN_TEXT_P(cstring_to_text(exchange));
}

/*
 * wfe._routing_key(kind, queue, track DEFAULT NULL) RETURNS text: the
 * routing key of a dispatch (track small or large) or a cancel (no track).
 * NULL when kind or queue is.
 */
Datum
wfe_routing_key_sql(PG_FUNCTION_ARGS)
{
	char		key[WFE_TOPOLOGY_NAME_MAX];
	char	   *kind;
	char	   *track;

	if (PG_ARGISNULL(0) || PG_ARGISNULL(1))
		PG_RETURN_NULL();
	kind = text_to_cstring(PG_GETARG_TEXT_PP(0));
	track = PG_ARGISNULL(2) ? NULL : text_to_cstring(PG_GETARG_TEXT_PP(2));
	if (!wfe_topology_routing_key(key, kind, text_to_cstring(PG_GETARG_TEXT_PP(1)), track))
		unknown_kind(strcmp(kind, "dispatch") == 0 ? "dispatch track" : "routing key for kind",
					 strcmp(kind, "dispatch") == 0 ? (track ? track : "(null)") : kind);
	PG_RETURN_TEXT_P(cstring_to_text(key));
}
