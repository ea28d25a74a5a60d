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
 * A tenant with a task limit (max_tasks_in_flight) is served as far as
 * its room goes: its lock is taken (in lock order, like every admission:
 * 74_admission.sql) and its tasks in flight counted, and the stride only
 * gives it what fits.  A tenant at its limit is passed over, and what it
 * would have had goes to the others -- to a lower priority level, when
 * every tenant of the highest is full.
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
 * task, its weight and its task limit, by a skip scan of run_stages_fair
 * (which holds the queued tasks of fair queues only: run_stages.fair).
 */
static stmt q_fair_heads = STMT(
	"WITH RECURSIVE h AS ("
	"  (SELECT p.tenant, p.priority FROM wfe.run_stages AS p"
	"    WHERE p.queue = $1 AND p.state = 'queued' AND p.held_until IS NULL AND p.fair"
	"    ORDER BY p.tenant, p.priority DESC, p.ready_at LIMIT 1)"
	"  UNION ALL"
	"  SELECT n.tenant, n.priority FROM h, LATERAL ("
	"    SELECT p.tenant, p.priority FROM wfe.run_stages AS p"
	"     WHERE p.queue = $1 AND p.state = 'queued' AND p.held_until IS NULL AND p.fair AND p.tenant > h.tenant"
	"     ORDER BY p.tenant, p.priority DESC, p.ready_at LIMIT 1) AS n"
	")"
	" SELECT h.tenant, h.priority, coalesce(l.weight, 1), l.max_tasks_in_flight"
	"   FROM (SELECT * FROM h LIMIT " CppAsString2(FAIR_TENANTS_MAX) ") AS h"
	"   LEFT JOIN wfe.tenant_limits AS l ON l.tenant = h.tenant", 1, TX);

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

/* strcmp order of two tenant names (lock order: 74_admission.sql) */
static int
name_cmp(const void *a, const void *b)
{
	return strcmp(*(char *const *) a, *(char *const *) b);
}

/*
 * Shares of room tasks of queue for the tenants with ready work at the
 * highest priority ready among those with room: *shares gets one per
 * tenant given any, in tenant order; returns how many (0: nothing ready,
 * or every tenant at its limit; *ready says which).  Each share must be
 * handed back with wfe_fair_took once its claim ran.
 */
int
wfe_fair_shares(const char *queue, int room, wfe_fair_share **shares, bool *ready)
{
	Datum		v[1] = {CStringGetTextDatum(queue)};
	int			n;
	int			free_top = PG_INT32_MIN;
	int			top = PG_INT32_MIN;
	int			out = 0;
	int			nlimited = 0;
	char	  **name;
	int		   *prio;
	int		   *weight;
	int		   *cap;
	char	  **limited;
	wfe_fair_share *s;
	fair_pass **pass;
	double	   *step;
	int		   *scap;
	fair_pass  *vt;

	stmt_run(&q_fair_heads, v, NULL);
	n = (int) SPI_processed;
	*ready = n > 0;
	name = palloc(sizeof(char *) * Max(n, 1));
	prio = palloc(sizeof(int) * Max(n, 1));
	weight = palloc(sizeof(int) * Max(n, 1));
	cap = palloc(sizeof(int) * Max(n, 1));
	limited = palloc(sizeof(char *) * Max(n, 1));
	for (int k = 0; k < n; k++)
	{
		HeapTuple	t = SPI_tuptable->vals[k];
		char	   *limit = SPI_getvalue(t, SPI_tuptable->tupdesc, 4);

		name[k] = SPI_getvalue(t, SPI_tuptable->tupdesc, 1);
		prio[k] = pg_strtoint32(SPI_getvalue(t, SPI_tuptable->tupdesc, 2));
		weight[k] = Max(pg_strtoint32(SPI_getvalue(t, SPI_tuptable->tupdesc, 3)), 1);
		cap[k] = limit ? pg_strtoint32(limit) : -1;		/* -1: no task limit */
		if (cap[k] < 0)
			free_top = Max(free_top, prio[k]);
	}

	/*
	 * The limited tenants that could be served (none of them below a
	 * tenant without a limit in priority): locked in lock order, each then
	 * counted, so cap is what each may still take.  (Their SPI results
	 * replace the heads', which were copied out above.)
	 */
	for (int k = 0; k < n; k++)
		if (cap[k] >= 0 && prio[k] >= free_top)
			limited[nlimited++] = name[k];
	qsort(limited, nlimited, sizeof(char *), name_cmp);
	for (int j = 0; j < nlimited; j++)
	{
		int			k = 0;

		while (name[k] != limited[j])
			k++;
		cap[k] = wfe_tenant_room(limited[j], cap[k]);
	}
	for (int k = 0; k < n; k++)
		if (cap[k] != 0 && (cap[k] < 0 || prio[k] >= free_top))
			top = Max(top, prio[k]);

	s = palloc0(sizeof(wfe_fair_share) * Max(n, 1));
	pass = palloc(sizeof(fair_pass *) * Max(n, 1));
	step = palloc(sizeof(double) * Max(n, 1));
	scap = palloc(sizeof(int) * Max(n, 1));
	vt = pass_of(queue, "", 0);
	for (int k = 0; k < n; k++)
	{
		if (prio[k] != top || cap[k] == 0)
			continue;			/* lower priority: served when the higher is done; full: passed over */
		s[out].tenant = name[k];
		s[out].priority = top;
		s[out].weight = weight[k];
		scap[out] = cap[k] < 0 ? room : cap[k];
		pass[out] = pass_of(queue, s[out].tenant, vt->pass);
		/* back after a while: from the queue's virtual time, no burst for the time away */
		if (pass[out]->pass < vt->pass)
			pass[out]->pass = vt->pass;
		step[out] = 1.0 / s[out].weight;
		out++;
	}
	/* one task at a time to the lowest pass with room left (ties: tenant order) */
	for (int r = 0; r < room; r++)
	{
		int			best = -1;

		for (int k = 0; k < out; k++)
			if (s[k].n < scap[k] && (best < 0 || pass[k]->pass < pass[best]->pass))
				best = k;
		if (best < 0)
			break;				/* every tenant served is at its limit */
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
