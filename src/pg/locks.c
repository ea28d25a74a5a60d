/*
 * locks.c — wfe's own locks: the admission limits' and the result cache's
 * (docs/operations.md "Security model", "Locks no other login can take").
 *
 * These locks were plain advisory locks, pg_advisory_xact_lock(hashtext(
 * 'wfe.cache'), hashtext(key)): any login may call pg_advisory_lock with
 * the same keys (the names are in the docs, cache keys in run_stages), and
 * hold them for as long as its session lives -- the background worker then
 * waited on one, and every tenant's clocks stopped.
 *
 * A wfe lock is an advisory lock tag too, but with field4 WFE_LOCK_SPACE.
 * pg_advisory_lock and its family build their tags with field4 1 (one int8
 * key) or 2 (two int4 keys), and no SQL function builds any other, so no
 * login can take, hold or wait for these: only C code loaded into the
 * server can, and the SQL faces below are granted to nobody (wfe's own
 * SECURITY DEFINER functions call them).  The tags are visible in pg_locks
 * like every lock; seeing one gives nothing to take.  Unlike row locks on a
 * table of keys, they cost no write and leave nothing to clean up; unlike
 * keys derived from a secret, there is nothing that, once seen in pg_locks,
 * could be replayed.  They are transaction locks, released at commit or
 * abort (and by the abort of the subtransaction that took them), as
 * pg_advisory_xact_lock's were.
 */
#include "postgres.h"

#include "common/hashfn.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "storage/lock.h"
#include "utils/builtins.h"

#include "wfe.h"

/* field4 of a wfe lock's tag ("WF"); SQL's advisory functions use 1 and 2 */
#define WFE_LOCK_SPACE 0x5746

/* The tag of wfe lock (space, key): the two names hashed, in wfe's field4. */
static void
lock_tag(LOCKTAG *tag, const char *space, const char *key)
{
	uint32		h1 = hash_bytes((const unsigned char *) space, strlen(space));
	uint32		h2 = hash_bytes((const unsigned char *) key, strlen(key));

	SET_LOCKTAG_ADVISORY(*tag, MyDatabaseId, h1, h2, WFE_LOCK_SPACE);
}

/*
 * Take wfe lock (space, key) until the end of the transaction: wait for it
 * (bounded by lock_timeout, which the background worker always sets), or
 * with try only take it if it is free.  Returns whether it was taken.
 */
bool
wfe_lock(const char *space, const char *key, bool try)
{
	LOCKTAG		tag;

	lock_tag(&tag, space, key);
	return LockAcquire(&tag, ExclusiveLock, false, try) != LOCKACQUIRE_NOT_AVAIL;
}

PG_FUNCTION_INFO_V1(wfe_lock_sql);

/* wfe._lock(space, key, try): wfe_lock for the SQL functions of wfe. */
Datum
wfe_lock_sql(PG_FUNCTION_ARGS)
{
	PG_RETURN_BOOL(wfe_lock(text_to_cstring(PG_GETARG_TEXT_PP(0)), text_to_cstring(PG_GETARG_TEXT_PP(1)),
							PG_GETARG_BOOL(2)));
}
