/*
 * flow_cache.c — which queues have a circuit (wfe.circuits) or serve tenants
 * fairly (wfe.queues.fairness), cached per backend (operations.md "Flow
 * control").
 *
 * Every attempt that ends and every claim asks whether its queue has a
 * circuit, and every claim whether its queue is fair; most queues have
 * neither, and must pay nothing for the controls they do not use.  So the
 * answer is a list in backend memory, read once and dropped when either
 * table changes: a statement trigger on each (wfe._flow_settings_changed)
 * sends a relcache invalidation for it at commit, as queue_grants' does
 * (grants.c).  The circuits' state is not cached: only which queues have
 * one (configure_circuit inserts and deletes; the claims only update).
 */
#include "postgres.h"

#include "catalog/namespace.h"
#include "commands/trigger.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "nodes/pg_list.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/rel.h"

#include "wfe.h"

static MemoryContext flow_context = NULL;
static bool flow_valid = false;
static Oid	flow_relids[2];		/* wfe.circuits, wfe.queues, as last loaded */
static List *circuit_queues = NIL;
static List *fair_queues = NIL;

/* Relcache callback: the lists are stale when either table changes (or all caches reset). */
static void
flow_invalidate(Datum arg, Oid relid)
{
	if (!OidIsValid(relid) || relid == flow_relids[0] || relid == flow_relids[1])
		flow_valid = false;
}

/* The column of every row of sql, copied into the cache's context. */
static List *
flow_read(const char *sql)
{
	List	   *out = NIL;

	if (SPI_execute(sql, true, 0) != SPI_OK_SELECT)
		elog(ERROR, "wfe: could not read the flow-control settings");
	for (uint64 k = 0; k < SPI_processed; k++)
	{
		char	   *q = SPI_getvalue(SPI_tuptable->vals[k], SPI_tuptable->tupdesc, 1);
		MemoryContext old = MemoryContextSwitchTo(flow_context);

		/* the list's cells too: SPI's context is gone at SPI_finish */
		out = lappend(out, pstrdup(q));
		MemoryContextSwitchTo(old);
	}
	return out;
}

/*
 * Reload both lists.  Valid is set before the reads: an invalidation that
 * arrives while they run (opening a table processes them) clears it again,
 * and the next call reloads.
 */
static void
flow_load(void)
{
	static bool registered = false;
	Oid			nsp;

	if (!registered)
	{
		CacheRegisterRelcacheCallback(flow_invalidate, (Datum) 0);
		registered = true;
	}
	if (flow_context == NULL)
		flow_context = AllocSetContextCreate(CacheMemoryContext, "wfe flow settings",
											 ALLOCSET_SMALL_SIZES);
	flow_valid = true;
	nsp = get_namespace_oid("wfe", false);
	flow_relids[0] = get_relname_relid("circuits", nsp);
	flow_relids[1] = get_relname_relid("queues", nsp);
	MemoryContextReset(flow_context);
	circuit_queues = fair_queues = NIL;
	SPI_connect();
	circuit_queues = flow_read("SELECT c.queue FROM wfe.circuits AS c");
	fair_queues = flow_read("SELECT q.queue FROM wfe.queues AS q WHERE q.fairness = 'tenant'");
	SPI_finish();
}

/* Is queue in list? */
static bool
flow_listed(List *list, const char *queue)
{
	ListCell   *lc;

	foreach(lc, list)
		if (strcmp((const char *) lfirst(lc), queue) == 0)
		return true;
	return false;
}

/* Does queue have a circuit breaker? */
bool
wfe_queue_has_circuit(const char *queue)
{
	if (!flow_valid)
		flow_load();
	return circuit_queues != NIL && flow_listed(circuit_queues, queue);
}

/* Does queue serve its tenants fairly (fairness = 'tenant')? */
bool
wfe_queue_is_fair(const char *queue)
{
	if (!flow_valid)
		flow_load();
	return fair_queues != NIL && flow_listed(fair_queues, queue);
}

PG_FUNCTION_INFO_V1(wfe_flow_settings_changed);

/* Statement trigger on wfe.circuits and wfe.queues: every backend drops its lists at our commit. */
Datum
wfe_flow_settings_changed(PG_FUNCTION_ARGS)
{
	TriggerData *td = (TriggerData *) fcinfo->context;

	if (!CALLED_AS_TRIGGER(fcinfo))
		elog(ERROR, "wfe._flow_settings_changed: not called as a trigger");
	CacheInvalidateRelcacheByRelid(RelationGetRelid(td->tg_relation));
	return PointerGetDatum(NULL);
}
