/*
 * grants.c — who may serve a queue (docs/operations.md "Security model").
 *
 * A role may claim from, accept on and report for a queue only when the
 * queue was granted (wfe.grant_queue) to a role whose privileges it has;
 * superusers and members of wfe_admin always may.  The callers are SECURITY DEFINER functions, so
 * the role asking is not GetUserId() (that is the extension's owner) but
 * wfe_caller_role(): the session's role, SET ROLE included -- or, inside an
 * in-database action's handler, its registrant (handler.c).
 *
 * Claims and reports are the hot path, so the grants are cached per
 * backend: queue name -> the roles it is granted to.  Any change to
 * wfe.queue_grants sends a relcache invalidation for the table at commit
 * (its trigger), which every backend takes in before it next consults the
 * cache, so no backend decides on a grant revoked before its statement.
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "catalog/namespace.h"
#include "commands/trigger.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/hsearch.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"

#include "wfe.h"

#define QUEUE_NAME_MAX 64		/* queue names have at most 63 bytes */

typedef struct grant_entry
{
	char		queue[QUEUE_NAME_MAX];
	int			nroles;
	Oid		   *roles;			/* in CacheMemoryContext */
} grant_entry;

static HTAB *grant_cache;
static MemoryContext grant_context;
static Oid	grants_relid = InvalidOid;	/* wfe.queue_grants, when the cache was filled */
static bool callback_registered;

/*
 * The cache is dropped when wfe.queue_grants (or every relation) changes.
 * An invalidation callback must not read catalogs, so it compares with
 * the table's OID remembered when the cache was filled.
 */
static void
grants_invalidate(Datum arg, Oid relid)
{
	if (grant_cache == NULL || (OidIsValid(relid) && relid != grants_relid))
		return;
	grant_cache = NULL;
	MemoryContextReset(grant_context);
}

/*
 * Read the roles queue is granted to into a new cache entry.  The read
 * comes first: opening the table may process invalidations, which may
 * drop the cache, so the cache is only touched after it.
 */
static grant_entry *
grants_load(const char *queue)
{
	grant_entry *e;
	Datum		arg = CStringGetTextDatum(queue);
	Oid			argtype = TEXTOID;
	Oid			relid;
	Oid		   *roles;
	int			nroles;

	SPI_connect();
	if (SPI_execute_with_args("SELECT g.role::oid FROM wfe.queue_grants AS g WHERE g.queue = $1",
							  1, &argtype, &arg, NULL, true, 0) != SPI_OK_SELECT)
		elog(ERROR, "wfe: could not read wfe.queue_grants");
	nroles = (int) SPI_processed;
	roles = MemoryContextAlloc(TopMemoryContext, sizeof(Oid) * Max(nroles, 1));
	for (int k = 0; k < nroles; k++)
	{
		bool		isnull;

		roles[k] = DatumGetObjectId(SPI_getbinval(SPI_tuptable->vals[k], SPI_tuptable->tupdesc, 1, &isnull));
	}
	SPI_finish();
	relid = get_relname_relid("queue_grants", get_namespace_oid("wfe", false));

	if (grant_context == NULL)
		grant_context = AllocSetContextCreate(CacheMemoryContext, "wfe queue grants",
											  ALLOCSET_SMALL_SIZES);
	if (!callback_registered)
	{
		CacheRegisterRelcacheCallback(grants_invalidate, (Datum) 0);
		callback_registered = true;
	}
	if (grant_cache == NULL || relid != grants_relid)
	{
		HASHCTL		ctl;

		MemoryContextReset(grant_context);
		ctl.keysize = QUEUE_NAME_MAX;
		ctl.entrysize = sizeof(grant_entry);
		ctl.hcxt = grant_context;
		grant_cache = hash_create("wfe queue grants", 64, &ctl,
								  HASH_ELEM | HASH_STRINGS | HASH_CONTEXT);
		grants_relid = relid;
	}
	e = hash_search(grant_cache, queue, HASH_ENTER, NULL);
	e->nroles = nroles;
	e->roles = MemoryContextAlloc(grant_context, sizeof(Oid) * Max(nroles, 1));
	memcpy(e->roles, roles, sizeof(Oid) * nroles);
	pfree(roles);
	return e;
}

/* May the role acting in this session serve queue? */
bool
wfe_may_serve_queue(const char *queue)
{
	Oid			caller = wfe_caller_role();
	grant_entry *e = NULL;

	Oid			admin = get_role_oid("wfe_admin", true);

	/* operations.md: superusers and wfe_admin pass queue grants */
	if (superuser_arg(caller) || (OidIsValid(admin) && has_privs_of_role(caller, admin)))
		return true;
	if (strlen(queue) >= QUEUE_NAME_MAX)
		return false;			/* no queue has such a name */
	/*
	 * A grant revoked since the last statement must count now, also inside
	 * a transaction that already checked it: take in the invalidations that
	 * arrived (cheap when there are none) before trusting the cache
	 * (test/isolation/specs/queue-grant-revoke.spec).
	 */
	AcceptInvalidationMessages();
	if (grant_cache != NULL)
		e = hash_search(grant_cache, queue, HASH_FIND, NULL);
	if (e == NULL)
		e = grants_load(queue);
	for (int k = 0; k < e->nroles; k++)
		if (has_privs_of_role(caller, e->roles[k]))
			return true;
	return false;
}

/* Raise 42501 unless the session's role may serve queue; what names the call. */
void
wfe_require_queue(const char *queue, const char *what)
{
	if (!wfe_may_serve_queue(queue))
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("role \"%s\" may not %s queue \"%s\"",
						GetUserNameFromId(wfe_caller_role(), false), what, queue),
				 errhint("An administrator grants a queue with wfe.grant_queue(role, queue).")));
}

/*
 * May the session's role call back about stage of run_id (its queue, NULL
 * for a decision, fork, join or handler stage; its run's tenant)?  Whoever
 * serves the queue may.  Anyone else is refused -- but told why (42501)
 * only if it acts for the run's tenant: to a caller that may neither serve
 * nor see the run, another tenant's run is one that does not exist, and
 * false asks the caller to answer unknown (operations.md "Tenants").  The
 * queue check is cached; the tenant one is the slow path of refusals only.
 */
bool
wfe_may_call_back(const char *queue, const char *tenant, bool has_handler,
				  int64 run_id, const char *stage, const char *what)
{
	if (queue != NULL && wfe_may_serve_queue(queue))
		return true;
	if (!wfe_acts_for_tenant(tenant))
		return false;
	if (has_handler)
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("stage \"%s\" of run " INT64_FORMAT " is an in-database action: workers cannot report it",
						stage, run_id),
				 errhint("Its handler's result is reported by wfe itself.")));
	if (queue != NULL)
		wfe_require_queue(queue, what);
	return true;				/* a stage no one serves: the gate answers */
}

PG_FUNCTION_INFO_V1(wfe_may_call_back_sql);

/* wfe._may_call_back(queue, tenant, handler, run_id, stage, what): the rule above, for SQL callers. */
Datum
wfe_may_call_back_sql(PG_FUNCTION_ARGS)
{
	PG_RETURN_BOOL(wfe_may_call_back(PG_ARGISNULL(0) ? NULL : text_to_cstring(PG_GETARG_TEXT_PP(0)),
									 text_to_cstring(PG_GETARG_TEXT_PP(1)), PG_GETARG_BOOL(2),
									 PG_GETARG_INT64(3), text_to_cstring(PG_GETARG_TEXT_PP(4)),
									 text_to_cstring(PG_GETARG_TEXT_PP(5))));
}

PG_FUNCTION_INFO_V1(wfe_queue_grants_changed);

/* Statement trigger on wfe.queue_grants: every backend drops its cache at our commit. */
Datum
wfe_queue_grants_changed(PG_FUNCTION_ARGS)
{
	TriggerData *td = (TriggerData *) fcinfo->context;

	if (!CALLED_AS_TRIGGER(fcinfo))
		elog(ERROR, "wfe._queue_grants_changed: not called as a trigger");
	CacheInvalidateRelcacheByRelid(RelationGetRelid(td->tg_relation));
	return PointerGetDatum(NULL);
}
