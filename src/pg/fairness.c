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
 * pass goes first -- on equal passes, the tenant whose next task is newer,
 * the one without a backlog; a tenant that comes back after a while
 * starts at the queue's virtual time (the pass last served), so it gets no
 * burst for the time it had no work (the rule: src/core/flow/fairness.c;
 * the passes are kept here).
 *
 * A tenant with a task limit (max_tasks_in_flight) is served as far as
 * its room goes: its lock is taken (in lock order, like every admission:
 * 74_admission.sql) and its tasks in flight counted, and the stride only
 * gives it what fits.  A tenant at its limit is passed over, and what it
 * would have had goes to the others -- to a lower priority level, when
 * every tenant of the highest is full.
 *
 * A broker queue is not claimed: its tasks over a limit are held, and the
 * release of held tasks when room frees (admission.c) serves its tenants
 * the same way, one task at a time (wfe_fair_held, wfe_fair_keep): the
 * tenants are read by the same skip scan, counting held tasks only (no
 * dispatch message), and the same stride decides.
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
#include "utils/timestamp.h"

#include "core/flow/fairness.h"
#include "admission.h"
#include "spi_stmt.h"
#include "wfe.h"

/*
 * tenants read per claim at most: the cost of a claim stays bounded (more
 * are read in turns: wfe_fair_shares)
 */
#define FAIR_TENANTS_MAX 1000
/* "queue" 0x1f "tenant"; both names are at most 63 bytes */
#define FAIR_KEY_MAX 130

/*
 * The tenants with ready work on $1 after $2 (at most $3 of them), each
 * with the priority and ready_at of its next task, its weight and its task
 * limit, by a
 * skip scan of run_stages_fair (which holds the queued tasks of fair
 * queues only: run_stages.fair); then the same from the first tenant up
 * to $2, for a window that wraps around.  HELD: a filter of the tasks
 * counted (a release's: those with no dispatch message).
 */
#define FAIR_HEADS(FROM, NEXT, HELD) \
	"WITH RECURSIVE h AS (" \
	"  (SELECT p.tenant, p.priority, p.ready_at FROM wfe.run_stages AS p" \
	"    WHERE p.queue = $1 AND p.state = 'queued' AND p.held_until IS NULL AND p.fair" FROM HELD \
	"    ORDER BY p.tenant, p.priority DESC, p.ready_at LIMIT 1)" \
	"  UNION ALL" \
	"  SELECT n.tenant, n.priority, n.ready_at FROM h, LATERAL (" \
	"    SELECT p.tenant, p.priority, p.ready_at FROM wfe.run_stages AS p" \
	"     WHERE p.queue = $1 AND p.state = 'queued' AND p.held_until IS NULL AND p.fair" NEXT HELD \
	"       AND p.tenant > h.tenant" \
	"     ORDER BY p.tenant, p.priority DESC, p.ready_at LIMIT 1) AS n" \
	")" \
	/* (lookups per tenant, not a join, which could give the tenants out of order) */ \
	" SELECT h.tenant, h.priority, h.ready_at," \
	"        coalesce((SELECT l.weight FROM wfe.tenant_limits AS l WHERE l.tenant = h.tenant), 1)," \
	"        (SELECT l.max_tasks_in_flight FROM wfe.tenant_limits AS l WHERE l.tenant = h.tenant)" \
	"   FROM (SELECT * FROM h LIMIT $3) AS h"
static stmt q_fair_heads = STMT(FAIR_HEADS(" AND p.tenant > $2", "", ""), 3, TX, TX, I4);
static stmt q_fair_heads_wrap = STMT(FAIR_HEADS(" AND p.tenant <= $2", " AND p.tenant <= $2", ""), 3, TX, TX, I4);
/* a broker queue's release: the tenants with held tasks (WFE_SQL_HELD: admission.h) */
static stmt q_held_heads = STMT(FAIR_HEADS(" AND p.tenant > $2", "", WFE_SQL_HELD("p")), 3, TX, TX, I4);
static stmt q_held_heads_wrap = STMT(FAIR_HEADS(" AND p.tenant <= $2", " AND p.tenant <= $2", WFE_SQL_HELD("p")),
									 3, TX, TX, I4);

/*
 * A tenant's pass on a queue (tenant "": the queue's virtual time, and
 * where the next claim's window of tenants starts: after next).
 */
typedef struct fair_pass
{
	char		key[FAIR_KEY_MAX];
	double		pass;
	char		next[NAMEDATALEN];
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
	{
		p->pass = start;
		p->next[0] = '\0';
	}
	return p;
}

/*
 * Append the tenants q reads (at most max, bound: $2) to the arrays from
 * index at; returns how many there are now.
 */
static int
read_heads(stmt *q, const char *queue, const char *bound, int max, int at,
		   char **name, int *prio, TimestampTz *next_at, int *weight, int *cap)
{
	Datum		v[3] = {CStringGetTextDatum(queue), CStringGetTextDatum(bound), Int32GetDatum(max)};

	stmt_run(q, v, NULL);
	for (uint64 k = 0; k < SPI_processed; k++, at++)
	{
		HeapTuple	t = SPI_tuptable->vals[k];
		char	   *limit = SPI_getvalue(t, SPI_tuptable->tupdesc, 5);
		bool		isnull;

		name[at] = SPI_getvalue(t, SPI_tuptable->tupdesc, 1);
		prio[at] = pg_strtoint32(SPI_getvalue(t, SPI_tuptable->tupdesc, 2));
		next_at[at] = DatumGetTimestampTz(SPI_getbinval(t, SPI_tuptable->tupdesc, 3, &isnull));
		weight[at] = Max(pg_strtoint32(SPI_getvalue(t, SPI_tuptable->tupdesc, 4)), 1);
		cap[at] = limit ? pg_strtoint32(limit) : -1;	/* -1: no task limit */
	}
	return at;
}

/* strcmp order of two tenants given by index into the names arg (lock order: 74_admission.sql) */
static int
name_cmp(const void *a, const void *b, void *arg)
{
	char	  **name = arg;

	return strcmp(name[*(const int *) a], name[*(const int *) b]);
}

/*
 * Read the tenants with ready work on queue (held: held broker tasks) into
 * the arrays, at most FAIR_TENANTS_MAX of them: from after the last one
 * the previous read of the queue had to stop at (else from the first),
 * wrapping around, so that with more tenants than that each is read within
 * a few reads.  Returns how many.
 */
static int
read_window(const char *queue, bool held, fair_pass *vt, char **name, int *prio, TimestampTz *next_at,
			int *weight, int *cap)
{
	int			n;

	n = read_heads(held ? &q_held_heads : &q_fair_heads, queue, vt->next, FAIR_TENANTS_MAX, 0,
				   name, prio, next_at, weight, cap);
	if (n < FAIR_TENANTS_MAX && vt->next[0] != '\0')
		n = read_heads(held ? &q_held_heads_wrap : &q_fair_heads_wrap, queue, vt->next,
					   FAIR_TENANTS_MAX - n, n, name, prio, next_at, weight, cap);
	if (n == FAIR_TENANTS_MAX)
		strlcpy(vt->next, name[n - 1], sizeof(vt->next));
	else
		vt->next[0] = '\0';
	return n;
}

/*
 * Shares of room tasks of queue for the tenants with ready work at the
 * highest priority ready among those with room: *shares gets one per
 * tenant given any, in the order read; returns how many (0: nothing ready,
 * or every tenant at its limit; *ready says which).  Each share must be
 * handed back with wfe_fair_took once its claim ran.
 */
int
wfe_fair_shares(const char *queue, int room, wfe_fair_share **shares, bool *ready)
{
	int			n;
	int			free_top = PG_INT32_MIN;
	int			top;
	int			out = 0;
	int			nlimited = 0;
	char	  **name;
	int		   *prio;
	TimestampTz *next_at;
	int		   *weight;
	int		   *cap;
	int		   *limited;
	wfe_fair_share *s;
	wfe_fair_tenant *t;
	fair_pass  *vt;

	vt = pass_of(queue, "", 0);
	name = palloc(sizeof(char *) * FAIR_TENANTS_MAX);
	prio = palloc(sizeof(int) * FAIR_TENANTS_MAX);
	next_at = palloc(sizeof(TimestampTz) * FAIR_TENANTS_MAX);
	weight = palloc(sizeof(int) * FAIR_TENANTS_MAX);
	cap = palloc(sizeof(int) * FAIR_TENANTS_MAX);
	limited = palloc(sizeof(int) * FAIR_TENANTS_MAX);
	n = read_window(queue, false, vt, name, prio, next_at, weight, cap);
	*ready = n > 0;
	for (int k = 0; k < n; k++)
		if (cap[k] < 0)
			free_top = Max(free_top, prio[k]);

	/*
	 * The limited tenants that could be served (none of them below a
	 * tenant without a limit in priority): locked in lock order, each then
	 * counted, so cap is what each may still take.  (Their SPI results
	 * replace the heads', which were copied out above.)  Those below are
	 * not served this claim: cap 0.
	 */
	for (int k = 0; k < n; k++)
		if (cap[k] >= 0 && prio[k] >= free_top)
			limited[nlimited++] = k;
		else if (cap[k] >= 0)
			cap[k] = 0;
	qsort_arg(limited, nlimited, sizeof(int), name_cmp, name);
	for (int j = 0; j < nlimited; j++)
		cap[limited[j]] = wfe_tenant_room(name[limited[j]], cap[limited[j]]);

	/* the stride (src/core/flow/fairness.c) decides, one task at a time */
	t = palloc(sizeof(wfe_fair_tenant) * Max(n, 1));
	for (int k = 0; k < n; k++)
	{
		t[k].priority = prio[k];
		t[k].weight = weight[k];
		t[k].cap = cap[k];
		t[k].pass = pass_of(queue, name[k], vt->pass)->pass;
		t[k].next_at = next_at[k];
		t[k].n = 0;
	}
	top = wfe_fair_top(t, n, vt->pass);
	for (int r = 0; r < room; r++)
		if (wfe_fair_next(t, n, top, &vt->pass) < 0)
			break;				/* every tenant served is at its limit */

	s = palloc0(sizeof(wfe_fair_share) * Max(n, 1));
	for (int k = 0; k < n; k++)
	{
		if (t[k].priority != top || t[k].cap == 0)
			continue;			/* lower priority: served when the higher is done; full: passed over */
		pass_of(queue, name[k], 0)->pass = t[k].pass;
		s[out].tenant = name[k];
		s[out].priority = top;
		s[out].weight = t[k].weight;
		s[out].n = t[k].n;
		out++;
	}
	*shares = s;
	return out;
}

/* A share's claim took got of its n tasks: the pass of those not taken is given back. */
void
wfe_fair_took(const char *queue, const wfe_fair_share *share, int got)
{
	fair_pass  *p = pass_of(queue, share->tenant, 0);
	wfe_fair_tenant t = {.priority = share->priority, .weight = share->weight, .cap = share->n,
	.pass = p->pass, .n = share->n};

	wfe_fair_give_back(&t, 0, got);
	p->pass = t.pass;
}

/*
 * The tenants with held broker tasks on queue, for a release (admission.c):
 * each with the priority of its next held task, its weight, its task limit
 * (-1: none) and its pass; cap is left to the caller (the rooms it
 * counted), n at 0; and the queue's virtual time.  Hand it back with
 * wfe_fair_keep.
 */
void
wfe_fair_held(const char *queue, wfe_fair_field *f)
{
	fair_pass  *vt = pass_of(queue, "", 0);
	int		   *prio = palloc(sizeof(int) * FAIR_TENANTS_MAX);
	TimestampTz *next_at = palloc(sizeof(TimestampTz) * FAIR_TENANTS_MAX);
	int		   *weight = palloc(sizeof(int) * FAIR_TENANTS_MAX);

	f->tenant = palloc(sizeof(char *) * FAIR_TENANTS_MAX);
	f->limit = palloc(sizeof(int) * FAIR_TENANTS_MAX);
	f->n = read_window(queue, true, vt, f->tenant, prio, next_at, weight, f->limit);
	f->t = palloc(sizeof(wfe_fair_tenant) * Max(f->n, 1));
	for (int k = 0; k < f->n; k++)
	{
		f->t[k].priority = prio[k];
		f->t[k].weight = weight[k];
		f->t[k].cap = f->limit[k] < 0 ? -1 : 0;
		f->t[k].pass = pass_of(queue, f->tenant[k], vt->pass)->pass;
		f->t[k].next_at = next_at[k];
		f->t[k].n = 0;
	}
	f->vt = vt->pass;
}

/* A release's passes and virtual time are kept for the next decision of queue. */
void
wfe_fair_keep(const char *queue, const wfe_fair_field *f)
{
	for (int k = 0; k < f->n; k++)
		pass_of(queue, f->tenant[k], 0)->pass = f->t[k].pass;
	pass_of(queue, "", 0)->pass = f->vt;
}
