/*
 * step_operate_element.c — an operator's redrive or skip of one map
 * element NAME[k] (operations.md "Recovery", runtime.md "Map elements").
 *
 * The element must have failed (or timed out) for good.  Either its map is
 * still running (the failure was tolerated) and only the element and the
 * counter row change -- a redriven element waits for a slot when the map
 * has max_concurrency elements under way (held: map.c releases it at the
 * next end of one of them); or its map failed past tolerated_failures and ended
 * the run, which is then reopened as a redrive reopens it: the map runs
 * again (a new attempt of its row), the elements its failure cancelled run
 * again (those that were under way get a new attempt; those never released
 * wait for their turn under max_concurrency), and the element acted on is
 * redriven (a new attempt: a new task, or a new child run) or completed by
 * hand with the operator's result.  Either way the map goes on counting,
 * and its last element's end aggregates its ordered {"items", "failed"}
 * result as any end does; the run continues from there.
 *
 * Reopening a failed map reads its cancelled elements: with the release
 * and the final aggregation, the one step that may touch many elements,
 * and only by an operator's hand.
 */
#include "step_internal.h"

/* The map's own row (not the step's current element's). */
static wfe_row *
map_row(wfe_step *st, int i)
{
	int64_t		elem = st->elem;
	wfe_row    *r;

	st->elem = -1;
	r = wfe_step_row(st, i);
	st->elem = elem;
	return r;
}

const char *
step_element_operate_problem(wfe_step *st, int i)
{
	const wfe_rp_stage *s = &st->rp->stages[i];
	wfe_row    *r = wfe_step_row(st, i);
	wfe_row    *m = map_row(st, i);
	wfe_run    *run = st->run;
	const char *name = wfe_arena_printf(&st->arena, "%s[%lld]", s->name, (long long) st->elem);

	if (!r->exists)
		return wfe_arena_printf(&st->arena, "map %s has no element %s", s->name, name);
	if (run->finished && run->state != WFE_RUN_FAILED)
		return wfe_arena_printf(&st->arena, "the run ended %s; only a failed run is reopened",
								wfe_run_state_name(run->state));
	if (!run->finished && run->intent >= 0)
		return wfe_arena_printf(&st->arena, "the run is %s toward %s; act once it has ended",
								wfe_run_state_name(run->state), step_intent_name(run->intent));
	if (r->state != WFE_FAILED && r->state != WFE_TIMED_OUT)
		return wfe_arena_printf(&st->arena, "element %s is %s, not failed or timed_out", name,
								wfe_state_name(r->state));
	if (m->state == WFE_RUNNING)
		return NULL;			/* a tolerated failure: the map is still under way */
	if ((m->state == WFE_FAILED || m->state == WFE_TIMED_OUT) && run->finished)
		return NULL;			/* the map's failure ended the run: reopened */
	if (m->state == WFE_FAILED || m->state == WFE_TIMED_OUT)
		return wfe_arena_printf(&st->arena,
								"map %s failed and the run took its failure route; act once the run has ended",
								s->name);
	return wfe_arena_printf(&st->arena, "map %s is %s: its result, which counted %s as failed, is final",
							s->name, wfe_state_name(m->state), name);
}

/* The map failed: it runs again, and so do the elements its failure cancelled. */
static void
reopen_map(wfe_step *st, int i)
{
	wfe_row    *m = map_row(st, i);
	wfe_map_counts *c = step_map_counts(st, i);
	int64_t		elem = st->elem;
	wfe_row		elem_row = st->elem_row;
	int64_t    *cancelled;
	int64_t		n = 0;
	wfe_op	   *op;

	/* waiting again, then running with no worker: a new attempt of the map's row */
	st->elem = -1;
	step_emit(st, WFE_OP_RESET, i);
	m->state = WFE_WAITING;
	m->outcome = 0;
	m->result = NULL;
	op = step_emit(st, WFE_OP_PARK, i);
	m->state = WFE_RUNNING;
	m->attempt += 1;
	m->fence = step_next_fence(st, m->fence);
	op->attempt = m->attempt;
	op->fence = m->fence;
	op->delay_us = -1;

	cancelled = wfe_arena_alloc(&st->arena, sizeof(int64_t) * (size_t) (c->total > 0 ? c->total : 1));
	if (st->io->map_cancelled)
		n = st->io->map_cancelled(st->io->arg, i, cancelled, c->total);
	/*
	 * Those released (under way or held when the map failed) take the
	 * slots max_concurrency gives, lowest index first; the rest are held
	 * until an element ends.
	 */
	c->held = 0;
	for (int64_t k = 0; k < n; k++)
		c->held += cancelled[k] < c->released;
	for (int64_t k = 0; k < n; k++)
	{
		wfe_step_element(st, i, cancelled[k]);
		if (!step_element_row(st)->exists)
			continue;
		if (cancelled[k] < c->released && step_map_has_slot(st, i))
		{
			c->held--;
			step_new_attempt(st, i);	/* it was under way: under way again */
		}
		else
		{
			/* never released, or held: it waits for its turn under max_concurrency */
			step_emit(st, WFE_OP_RESET, i);
			step_element_row(st)->state = WFE_WAITING;
			step_element_row(st)->outcome = 0;
		}
	}
	wfe_step_element(st, i, elem);
	st->elem_row = elem_row;
}

/*
 * Has the map a slot for the element being redriven, which (no longer
 * failed) the counts now take as under way?  max_concurrency bounds it as
 * any element: the others under way leave it room or not.
 */
static int
redrive_has_slot(wfe_step *st, int i)
{
	const wfe_rp_stage *s = &st->rp->stages[i];

	return s->max_concurrency < 0 || step_map_under_way(step_map_counts(st, i)) <= s->max_concurrency;
}

/*
 * The redriven element waits for a slot of its map: waiting again, held
 * (counted in the map's counter row), released by the next end of one of
 * its map's elements (map.c) -- so a redrive never puts more elements
 * under way than max_concurrency.
 */
static void
hold(wfe_step *st, int i)
{
	wfe_row    *r = wfe_step_row(st, i);

	step_emit(st, WFE_OP_RESET, i);
	r->state = WFE_WAITING;
	r->outcome = 0;
	step_map_counts(st, i)->held++;
	step_map_write_counts(st, i);
}

void
step_element_operate(wfe_step *st, int i, wfe_operation what, const char *value, const char *by,
					 const char *why)
{
	wfe_map_counts *c = step_map_counts(st, i);
	const char *again = NULL;
	int64_t		elem = st->elem;

	if (st->run->finished)
	{
		/* the run reopens as a redrive of the map would reopen it */
		st->elem = -1;
		again = step_reopen(st, i, by, why);
		st->elem = elem;
	}
	if (map_row(st, i)->state != WFE_RUNNING)
		reopen_map(st, i);
	step_operator_event(st, i, what == WFE_OPERATE_REDRIVE ? "stage.redriven" : "stage.skipped_by_operator",
						by, why);
	c->failed--;				/* the element is no longer failed for good */
	if (what == WFE_OPERATE_REDRIVE && !redrive_has_slot(st, i))
		hold(st, i);
	else if (what == WFE_OPERATE_REDRIVE)
	{
		step_new_attempt(st, i);
		step_map_write_counts(st, i);
	}
	else
		step_completed(st, i, value, BY_HAND);	/* counted by its map as any element's end */
	if (again != NULL)
		step_release_again(st, again);
}
