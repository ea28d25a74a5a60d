/*
 * ready_tag.c — what a wfe_task_ready notification says: a keyed tag of the
 * queue, not its name (docs/delivery.md "Wake-ups and who can hear them").
 *
 * PostgreSQL has no privilege for LISTEN: any login that can connect can
 * listen on wfe_task_ready.  So the payload is the lowercase hex
 * HMAC-SHA256 of the queue's name under a per-database key (wfe.ready_key,
 * drawn at CREATE EXTENSION, readable by no role but the extension's
 * owner).  An outsider hears opaque tags; a worker asks wfe.ready_tag(queue)
 * once per LISTEN connection, which answers only a role that may serve the
 * queue -- the same grant check, and the same refusal, as claim_task.
 *
 * One key for the database rather than one per queue: the tag already
 * binds the queue's name, and a single row is one thing to draw, rotate
 * and reason about.  The key is cached per backend; a change to
 * wfe.ready_key (its trigger sends a relcache invalidation) or DROP and
 * CREATE EXTENSION (which draws a new key) drops the cached copy, as
 * grants.c does for the grants.
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "catalog/namespace.h"
#include "catalog/pg_class.h"
#include "commands/trigger.h"
#include "common/hmac.h"
#include "common/sha2.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/syscache.h"

#include "wfe.h"

#define READY_KEY_MAX 1024		/* the table's CHECK */

static char ready_key[READY_KEY_MAX];
static int	ready_key_len = -1;	/* -1: not loaded */
static Oid	ready_key_relid = InvalidOid;
static bool callback_registered;

/* Relcache callback: forget the key when wfe.ready_key (or every relation) changes. */
static void
ready_key_invalidate(Datum arg, Oid relid)
{
	if (!OidIsValid(relid) || relid == ready_key_relid)
		ready_key_len = -1;
}

/* The owner of relation relid. */
static Oid
rel_owner(Oid relid)
{
	HeapTuple	tup = SearchSysCache1(RELOID, ObjectIdGetDatum(relid));
	Oid			owner;

	if (!HeapTupleIsValid(tup))
		elog(ERROR, "cache lookup failed for relation %u", relid);
	owner = ((Form_pg_class) GETSTRUCT(tup))->relowner;
	ReleaseSysCache(tup);
	return owner;
}

/*
 * Load the key, as the table's owner: the callers are wfe's SECURITY
 * DEFINER functions and the background worker, but a release may also
 * come from inside a handler running as its registrant (handler.c), who
 * may not read the key and must not be refused a release for it.
 */
static void
ready_key_load(void)
{
	Oid			nsp = get_namespace_oid("wfe", false);
	Oid			relid = get_relname_relid("ready_key", nsp);
	Oid			save_user;
	int			save_sec;
	bool		isnull;
	bytea	   *key;

	if (!OidIsValid(relid))
		elog(ERROR, "wfe: table wfe.ready_key is missing");
	if (!callback_registered)
	{
		CacheRegisterRelcacheCallback(ready_key_invalidate, (Datum) 0);
		callback_registered = true;
	}
	GetUserIdAndSecContext(&save_user, &save_sec);
	SetUserIdAndSecContext(rel_owner(relid), save_sec | SECURITY_LOCAL_USERID_CHANGE);
	SPI_connect();
	if (SPI_execute("SELECT k.key FROM wfe.ready_key AS k", true, 2) != SPI_OK_SELECT ||
		SPI_processed != 1)
		elog(ERROR, "wfe: wfe.ready_key must hold exactly one key");
	key = DatumGetByteaPP(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
	if (isnull || VARSIZE_ANY_EXHDR(key) < 16 || VARSIZE_ANY_EXHDR(key) > READY_KEY_MAX)
		elog(ERROR, "wfe: the key in wfe.ready_key is not 16 to 1024 bytes");
	memcpy(ready_key, VARDATA_ANY(key), VARSIZE_ANY_EXHDR(key));
	/* after the read: an invalidation it took in must not mark this copy stale */
	ready_key_relid = relid;
	ready_key_len = (int) VARSIZE_ANY_EXHDR(key);
	SPI_finish();
	SetUserIdAndSecContext(save_user, save_sec);
}

/* The wfe_task_ready payload for queue: hex HMAC-SHA256(key, queue), palloc'd. */
char *
wfe_ready_tag(const char *queue)
{
	uint8		mac[PG_SHA256_DIGEST_LENGTH];
	char	   *out = palloc(PG_SHA256_DIGEST_LENGTH * 2 + 1);
	pg_hmac_ctx *ctx;

	AcceptInvalidationMessages();
	if (ready_key_len < 0)
		ready_key_load();
	ctx = pg_hmac_create(PG_SHA256);
	if (ctx == NULL || pg_hmac_init(ctx, (const uint8 *) ready_key, ready_key_len) < 0 ||
		pg_hmac_update(ctx, (const uint8 *) queue, strlen(queue)) < 0 ||
		pg_hmac_final(ctx, mac, sizeof(mac)) < 0)
		elog(ERROR, "could not compute HMAC-SHA256: %s", pg_hmac_error(ctx));
	pg_hmac_free(ctx);
	hex_encode((const char *) mac, sizeof(mac), out);
	out[PG_SHA256_DIGEST_LENGTH * 2] = '\0';
	return out;
}

PG_FUNCTION_INFO_V1(wfe_ready_tag_sql);

/* wfe.ready_tag(queue): the tag, for a role that may serve queue; 42501 otherwise. */
Datum
wfe_ready_tag_sql(PG_FUNCTION_ARGS)
{
	char	   *queue = wfe_admitted_name(PG_GETARG_TEXT_PP(0), "queue");

	/* first, as in claim_task: a role that may not claim learns nothing */
	wfe_require_queue(queue, "listen on");
	PG_RETURN_TEXT_P(cstring_to_text(wfe_ready_tag(queue)));
}

PG_FUNCTION_INFO_V1(wfe_ready_tag_internal);

/* wfe._ready_tag(queue): the tag, for wfe's own functions (granted to nobody). */
Datum
wfe_ready_tag_internal(PG_FUNCTION_ARGS)
{
	PG_RETURN_TEXT_P(cstring_to_text(wfe_ready_tag(text_to_cstring(PG_GETARG_TEXT_PP(0)))));
}

PG_FUNCTION_INFO_V1(wfe_ready_key_changed);

/* Statement trigger on wfe.ready_key: every backend forgets its copy of the key at our commit. */
Datum
wfe_ready_key_changed(PG_FUNCTION_ARGS)
{
	TriggerData *td = (TriggerData *) fcinfo->context;

	if (!CALLED_AS_TRIGGER(fcinfo))
		elog(ERROR, "wfe._ready_key_changed: not called as a trigger");
	CacheInvalidateRelcacheByRelid(RelationGetRelid(td->tg_relation));
	return PointerGetDatum(NULL);
}
