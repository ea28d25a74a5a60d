/*
 * fairness.c — which tenants a claim on a fair queue serves, and how many
 * tasks each (operations.md "Flow control": fairness => 'tenant').
 *
 * On a queue with fairness = 'tenant', a claim serves the tenants with
 * ready work in proportion to their weights (wfe.tenant_limits.weight,
 * default 1), within the highest priority any of them has ready, so one
 * tenant's backlog of 100,000 does not hold back another's few tasks.
 *
 * The tenants with ready work are read by a skip scan of run_stages_fair
 * (queue, tenant, priority DESC, ready_at): one index probe per tenant,
 * whatever the backlog.  Who goes next is stride scheduling: each tenant
 * has a pass that grows by 1/weight per task it is given, and the lowest
 * pass goes first; a tenant that comes back after a while starts at the
 * queue's virtual time (the pass last served), so it gets no burst for
 * the time it had no work.
 *
 * The passes live in this backend's memory, not in a table: a claim writes
 * nothing and waits for no other claimer (no hot row per queue, which is
 * what made peers' global limits cost half their throughput).  Each claimer
 * is fair by itself, so several claimers together are too: their union
 * serves tenants in the same proportions.  A restart starts the passes
 * again, which costs at most one round of unfairness.
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "utils/builtins.h"
#include "utils/hsearch.h"
#include "utils/memutils.h"

#include "spi_stmt.h"
#include "wfe.h"

/* tenants read per claim at most: the cost of a claim stays bounded */
#define FAIR_TENANTS_MAX 1000
/* "queue" 0x1f "tenant"; both names are at most 63 bytes */
#define FAIR_KEY_MAX 130

/*
 * The tenants with ready work on $1, each with the priority of its next
 * task and its weight, by a skip scan of run_stages_fair.
 */
static stmt q_fair_heads = STMT(
	"WITH RECURSIVE h AS ("
	"  (SELECT p.tenant, p.priority FROM wfe.run_stages AS p"
	"    WHERE p.queue = $1 AND p.state = 'queued' AND p.held_until IS NULL"
	"    ORDER BY p.tenant, p.priority DESC, p.ready_at LIMIT 1)"
	"  UNION ALL"
	"  SELECT n.tenant, n.priority FROM h, LATERAL ("
	"    SELECT p.tenant, p.priority FROM wfe.run_stages AS p"
	"     WHERE p.queue = $1 AND p.state = 'queued' AND p.held_until IS NULL AND p.tenant > h.tenant"
	"     ORDER BY p.tenant, p.priority DESC, p.ready_at LIMIT 1) AS n"
	")"
	" SELECT h.tenant, h.priority,"
	"        coalesce((SELECT l.weight FROM wfe.tenant_limits AS l WHERE l.tenant = h.tenant), 1)"
	"   FROM (SELECT * FROM h LIMIT " CppAsString2(FAIR_TENANTS_MAX) ") AS h", 1, TX);

/* A tenant's pass on a queue (tenant "": the queue's virtual time). */
typedef struct fair_pass
{
	char		key[FAIR_KEY_MAX];
	double		pass;
} fair_pass;

static HTAB *passes = NULL;

/* The pass entry of (queue, tenant), made at start when new. */
static fair_pass *
pass_of(const char *queue, const char *tenant, double start)
{
	char		key[FAIR_KEY_MAX];
	bool		found;
	fair_pass  *p;

	if (passes == NULL)
	{
		HASHCTL		ctl;

		ctl.keysize = FAIR_KEY_MAX;
		ctl.entrysize = sizeof(fair_pass);
		passes = hash_create("wfe fair passes", 64, &ctl, HASH_ELEM | HASH_STRINGS);
	}
	memset(key, 0, sizeof(key));
	snprintf(key, sizeof(key), "%s\x1f%s", queue, tenant);
	p = hash_search(passes, key, HASH_ENTER, &found);
	if (!found)
		p->pass = start;
	return p;
}

/*
 * Shares of room tasks of queue for the tenants with ready work at the
 * highest priority ready: *shares gets one per tenant given any, in
 * tenant order; returns how many (0: nothing ready).  Each share must be
 * handed back with wfe_fair_took once its claim ran.
 */
int
wfe_fair_shares(const char *queue, int room, wfe_fair_share **shares)
{
	Datum		v[1] = {CStringGetTextDatum(queue)};
	int			n;
	int			top = PG_INT32_MIN;
	int			out = 0;
	wfe_fair_share *s;
	fair_pass **pass;
	double	   *step;
	fair_pass  *vt;

	stmt_run(&q_fair_heads, v, NULL);
	n = (int) SPI_processed;
	s = palloc0(sizeof(wfe_fair_share) * Max(n, 1));
	pass = palloc(sizeof(fair_pass *) * Max(n, 1));
	step = palloc(sizeof(double) * Max(n, 1));
	for (int k = 0; k < n; k++)
		top = Max(top, pg_strtoint32(SPI_getvalue(SPI_tuptable->vals[k], SPI_tuptable->tupdesc, 2)));
	vt = pass_of(queue, "", 0);
	for (int k = 0; k < n; k++)
	{
		HeapTuple	t = SPI_tuptable->vals[k];
		int			weight;

		if (pg_strtoint32(SPI_getvalue(t, SPI_tuptable->tupdesc, 2)) != top)
			continue;			/* lower priority: served when the higher is done */
		weight = pg_strtoint32(SPI_getvalue(t, SPI_tuptable->tupdesc, 3));
		s[out].tenant = SPI_getvalue(t, SPI_tuptable->tupdesc, 1);
		s[out].priority = top;
		s[out].weight = Max(weight, 1);
		pass[out] = pass_of(queue, s[out].tenant, vt->pass);
		/* back after a while: from the queue's virtual time, no burst for the time away */
		if (pass[out]->pass < vt->pass)
			pass[out]->pass = vt->pass;
		step[out] = 1.0 / s[out].weight;
		out++;
	}
	/* one task at a time to the lowest pass (ties: tenant order) */
	for (int r = 0; r < room && out > 0; r++)
	{
		int			best = 0;

		for (int k = 1; k < out; k++)
			if (pass[k]->pass < pass[best]->pass)
				best = k;
		vt->pass = pass[best]->pass;
		pass[best]->pass += step[best];
		s[best].n++;
	}
	*shares = s;
	return out;
}

/* A share's claim took got of its n tasks: the pass of those not taken is given back. */
void
wfe_fair_took(const char *queue, const wfe_fair_share *share, int got)
{
	if (got < share->n)
		pass_of(queue, share->tenant, 0)->pass -= (double) (share->n - got) / share->weight;
}
