/*
 * child.c — child runs, the server's half (runtime.md "Child runs").
 *
 * The step core decides (core/engine/child.c); this file answers its
 * questions (which definition a workflow stage names, how deep a child
 * would be) and writes what it decided once the step is over: starting a
 * child run (wfe_start_child, submit.c), cancelling the live child of an attempt
 * that ended otherwise (wfe._cancel_children), and, when a child run ends,
 * the child_ended timer that brings its end to the parent.
 *
 * Lock order: a parent, then its children.  A step holds its run's lock;
 * starting or cancelling a child locks the child, which is the order.  A
 * child's end never takes its parent's lock (a parent being cancelled may
 * be waiting for the child's): it leaves a timer, due at once, that steps
 * the parent in a transaction of its own.
 */
#include "postgres.h"

#include "executor/spi.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"

#include "bgw/bgw.h"
#include "child.h"
#include "spi_stmt.h"
#include "wfe.h"

static stmt q_resolve = STMT(
	"SELECT d.definition_id, d.version FROM wfe.definitions AS d"
	" WHERE d.workflow = $1"
	"   AND CASE WHEN $2::text IS NULL THEN d.state = 'active' ELSE d.version = $2 AND d.state <> 'draft' END",
	2, TX, TX);
/* the depth of a run: how many parents it has (bounded, should a cycle ever be written by hand) */
static stmt q_depth = STMT(
	"WITH RECURSIVE up (parent, n) AS ("
	"  SELECT r.parent_run_id, 0 FROM wfe.runs AS r WHERE r.run_id = $1"
	"  UNION ALL"
	"  SELECT r.parent_run_id, up.n + 1 FROM wfe.runs AS r JOIN up ON r.run_id = up.parent WHERE up.n < 1000)"
	" SELECT max(up.n) FROM up", 1, I8);
static stmt q_cancel = STMT(
	"SELECT wfe._cancel_children($1, $2, $3)", 3, I8, TX, TX);
/* every element of map $2 with a live child (the elements' names are $2[k]) */
static stmt q_cancel_map = STMT(
	"SELECT wfe._cancel_children($1, x.parent_stage, $3)"
	"  FROM (SELECT DISTINCT c.parent_stage FROM wfe.runs AS c"
	"         WHERE c.parent_run_id = $1 AND c.intent IS NULL"
	"           AND left(c.parent_stage, length($2) + 1) = $2 || '[') AS x", 3, I8, TX, TX);
/* the parent's stage row is read, not locked: its fence now names the attempt the timer is for */
static stmt q_finished = STMT(
	"INSERT INTO wfe.timers (tenant, run_id, stage, attempt, fence, kind, due_at)"
	" SELECT c.tenant, c.parent_run_id, c.parent_stage, c.parent_attempt, st.fence, 'child_ended', now()"
	"   FROM wfe.runs AS c"
	"   JOIN wfe.run_stages AS st ON st.run_id = c.parent_run_id AND st.stage = c.parent_stage"
	"  WHERE c.run_id = $1 AND c.parent_run_id IS NOT NULL", 1, I8);
static stmt q_outcome = STMT(
	"SELECT c.run_id, c.state, c.output::text FROM wfe.runs AS c"
	" WHERE c.parent_run_id = $1 AND c.parent_stage = $2 AND c.parent_attempt = $3"
	"   AND c.finished_at IS NOT NULL"
	" ORDER BY c.run_id DESC LIMIT 1", 3, I8, TX, I4);

/* Work left for after a step. */
typedef struct child_work
{
	bool		start;			/* else cancel */
	bool		map;			/* cancel: the children of every element of map `stage` */
	int64		parent;
	char	   *stage;
	int			attempt;
	char	   *workflow;
	char	   *version;
	char	   *context;
	char	   *reason;
} child_work;

bool
wfe_child_resolve(const char *ref, int64 *definition_id, char **version)
{
	const char *at = strrchr(ref, '@');
	char		n[3] = "  ";
	Datum		v[2];

	v[0] = CStringGetTextDatum(at ? pnstrdup(ref, at - ref) : ref);
	v[1] = stmt_text_or_null(at ? at + 1 : NULL, &n[1]);
	stmt_run(&q_resolve, v, n);
	if (SPI_processed != 1)
		return false;
	*definition_id = pg_strtoint64(stmt_col(1));
	*version = stmt_col(2);
	return true;
}

int
wfe_child_depth(int64 run_id)
{
	Datum		v[1] = {Int64GetDatum(run_id)};
	char	   *n;

	stmt_run(&q_depth, v, NULL);
	n = SPI_processed == 1 ? stmt_col(1) : NULL;
	return (n ? pg_strtoint32(n) : 0) + 1;
}

List *
wfe_child_defer_start(List *work, int64 parent, const char *stage, int attempt,
					  const char *workflow, const char *version, const char *context)
{
	child_work *w = palloc0(sizeof(child_work));

	/* copies: the step's strings die with it */
	w->start = true;
	w->parent = parent;
	w->stage = pstrdup(stage);
	w->attempt = attempt;
	w->workflow = pstrdup(workflow);
	w->version = pstrdup(version);
	w->context = pstrdup(context);
	return lappend(work, w);
}

List *
wfe_child_defer_cancel(List *work, int64 parent, const char *stage, const char *reason)
{
	child_work *w = palloc0(sizeof(child_work));

	w->parent = parent;
	w->stage = pstrdup(stage);
	w->reason = reason ? pstrdup(reason) : NULL;
	return lappend(work, w);
}

List *
wfe_child_defer_cancel_map(List *work, int64 parent, const char *map, const char *reason)
{
	child_work *w;

	work = wfe_child_defer_cancel(work, parent, map, reason);
	w = llast(work);
	w->map = true;
	return work;
}

void
wfe_child_run(List *work)
{
	ListCell   *lc;

	foreach(lc, work)
	{
		child_work *w = lfirst(lc);
		char		n[7] = "      ";
		Datum		v[6];

		v[0] = Int64GetDatum(w->parent);
		v[1] = CStringGetTextDatum(w->stage);
		if (w->start)
			wfe_start_child(w->parent, w->stage, w->attempt, w->workflow, w->version, w->context);
		else
		{
			v[2] = stmt_text_or_null(w->reason, &n[2]);
			stmt_run(w->map ? &q_cancel_map : &q_cancel, v, n);
		}
	}
}

void
wfe_child_finished(int64 run_id)
{
	Datum		v[1] = {Int64GetDatum(run_id)};

	stmt_run(&q_finished, v, NULL);
	if (SPI_processed > 0)
		wfe_wake_at(GetCurrentTimestamp());
}

bool
wfe_child_outcome(int64 parent, const char *stage, int attempt, int64 *child, char **state, char **output)
{
	Datum		v[3] = {Int64GetDatum(parent), CStringGetTextDatum(stage), Int32GetDatum(attempt)};

	stmt_run(&q_outcome, v, NULL);
	if (SPI_processed != 1)
		return false;
	*child = pg_strtoint64(stmt_col(1));
	*state = stmt_col(2);
	*output = stmt_col(3);
	return true;
}
