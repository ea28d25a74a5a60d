/*
 * step_operate.c — operator recovery (step.h: wfe_step_operate): redrive,
 * skip, fail and re-dispatch one stage through the same core as every
 * callback, so fencing holds; redrive and skip reopen a failed run.
 */
#include <stdio.h>
#include <string.h>

#include <json-c/json.h>

#include "step_internal.h"

/* An operator event: who, why and what the stage was. */
void
step_operator_event(wfe_step *st, int i, const char *type, const char *by, const char *why)
{
	wfe_row    *r = wfe_step_row(st, i);
	json_object *detail = json_object_new_object();

	json_object_object_add(detail, "by", step_jstr(by));
	json_object_object_add(detail, "reason", step_jstr(why));
	json_object_object_add(detail, "was", step_jstr(wfe_state_name(r->state)));
	step_event_fenced(st, i, r->attempt, type, detail, r->fence);
}

/*
 * A new attempt of stage i, its input already bound in its row: a task is
 * queued, a wait waits again (with a new timeout), a sleep sleeps again,
 * a workflow stage starts a new child run.
 */
void
step_new_attempt(wfe_step *st, int i)
{
	wfe_kind	kind = step_runs_child(st, i) ? WFE_K_WORKFLOW : st->rp->stages[i].kind;

	if (kind == WFE_K_WAIT || kind == WFE_K_SLEEP || kind == WFE_K_WORKFLOW)
	{
		/* waiting again, then released again: the legal way back to running */
		wfe_row    *r = wfe_step_row(st, i);

		step_emit(st, WFE_OP_RESET, i);
		r->state = WFE_WAITING;
		r->outcome = 0;
		if (kind == WFE_K_WORKFLOW)
			step_release_child(st, i, 1);	/* a new child run */
		else
			step_park(st, i, st->io->stage_input ? st->io->stage_input(st->io->arg, i) : NULL);
	}
	else
		step_enqueue(st, i, NULL, 1, NULL);
}

/* A task (it has a queue or a handler), not a decision, fork or join. */
static int
is_task(wfe_step *st, int i)
{
	const wfe_rp_stage *s = &st->rp->stages[i];

	return s->kind != WFE_K_DECISION && s->kind != WFE_K_FORK && s->kind != WFE_K_JOIN;
}

/*
 * Did stage k's failure end the run: failed (or timed out) with its
 * failure routed to the failed terminal, or, in the tasks form, a critical
 * task?
 */
static int
ended_the_run(wfe_step *st, int k)
{
	const wfe_rp_stage *s = &st->rp->stages[k];
	const wfe_row *r = wfe_step_row(st, k);

	if (!r->exists || (r->state != WFE_FAILED && r->state != WFE_TIMED_OUT) || s->kind == WFE_K_FINALISER)
		return 0;
	if (st->rp->tasks_form)
		return s->critical && r->awaits;
	return (s->kind == WFE_K_DECISION ? s->on_evaluation_error :
			r->state == WFE_TIMED_OUT ? s->on_timeout : s->on_failure) == WFE_TO_FAILED;
}

/*
 * Why a failed run cannot be reopened from stage i, or NULL: a join or a
 * decision whose failure ended the run and that does not lie after i would
 * stay failed (a failed join has had all its arrivals; a decision would
 * fail the same way on the same data), and what waits for it would wait
 * for good.  Skip it first.
 */
static const char *
reopen_problem(wfe_step *st, int i)
{
	for (int k = 0; k < st->rp->first_finaliser; k++)
		if (k != i && !is_task(st, k) && ended_the_run(st, k) && !wfe_run_plan_reaches(st->rp, i, k))
			return wfe_arena_printf(&st->arena, "%s %s failed and ended the run; skip it first",
									st->rp->stages[k].kind == WFE_K_JOIN ? "join" : "decision",
									st->rp->stages[k].name);
	return NULL;
}

/* The branch (0-based) of decision i whose target value's "next" names, or -1. */
static int
decision_branch(wfe_step *st, int i, const char *value)
{
	const wfe_rp_stage *s = &st->rp->stages[i];
	json_object *v = step_hold(st, step_jparse(value));
	json_object *next;

	if (!json_object_is_type(v, json_type_object) || !json_object_object_get_ex(v, "next", &next) ||
		!json_object_is_type(next, json_type_string))
		return -1;
	for (int k = 0; k < s->nbranches; k++)
		if (s->next_name[k] && strcmp(s->next_name[k], json_object_get_string(next)) == 0)
			return k;
	return -1;
}

const char *
wfe_step_operate_problem(wfe_step *st, int i, wfe_operation op, const char *value)
{
	const wfe_rp_stage *s = &st->rp->stages[i];
	wfe_row    *r = wfe_step_row(st, i);
	wfe_run    *run = st->run;
	const char *state = wfe_state_name(r->state);
	/* what fail and redispatch act on: a stage, or one map element */
	const char *name = i == st->elem_map && st->elem >= 0 ?
		wfe_arena_printf(&st->arena, "%s[%lld]", s->name, (long long) st->elem) : s->name;

	if (!r->exists)
		return wfe_arena_printf(&st->arena, "stage %s has no row in this run", name);
	/* one element of a map (step_operate_element.c) */
	if (i == st->elem_map && st->elem >= 0 && (op == WFE_OPERATE_REDRIVE || op == WFE_OPERATE_SKIP))
		return step_element_operate_problem(st, i);
	/* its elements have rows of their own: acting on the map alone would strand them */
	if (s->kind == WFE_K_MAP && op != WFE_OPERATE_SKIP && !(i == st->elem_map && st->elem >= 0))
		return wfe_arena_printf(&st->arena, "stage %s is a map: only skip_stage (of a failed map) acts on it yet",
								s->name);
	switch (op)
	{
		case WFE_OPERATE_REDRIVE:
		case WFE_OPERATE_SKIP:
			if (run->finished && run->state != WFE_RUN_FAILED)
				return wfe_arena_printf(&st->arena, "the run ended %s; only a failed run is reopened",
										wfe_run_state_name(run->state));
			if (!run->finished && run->intent >= 0)
				return wfe_arena_printf(&st->arena, "the run is %s toward %s; act once it has ended",
										wfe_run_state_name(run->state), step_intent_name(run->intent));
			if (s->kind == WFE_K_FINALISER)
				return wfe_arena_printf(&st->arena, "stage %s is a finaliser; finalisers run again when a reopened run reaches its new intent",
										s->name);
			if (r->state != WFE_FAILED && r->state != WFE_TIMED_OUT)
				return wfe_arena_printf(&st->arena, "stage %s is %s, not failed or timed_out", s->name, state);
			if (run->finished && reopen_problem(st, i) != NULL)
				return reopen_problem(st, i);
			if (op == WFE_OPERATE_REDRIVE && !is_task(st, i))
				return wfe_arena_printf(&st->arena, "stage %s is a decision, fork or join, which has no attempt to redrive; skip_stage completes it by hand",
										s->name);
			if (op == WFE_OPERATE_SKIP && s->kind == WFE_K_DECISION && decision_branch(st, i, value) < 0)
			{
				char	   *names = "";

				for (int k = 0; k < s->nbranches; k++)
					names = wfe_arena_printf(&st->arena, "%s%s%s", names, k ? ", " : "",
											 s->next_name[k] ? s->next_name[k] : "(a terminal)");
				return wfe_arena_printf(&st->arena, "decision %s is skipped with the branch to take: {\"next\": one of %s}",
										s->name, names);
			}
			return NULL;
		case WFE_OPERATE_FAIL:
			if (run->finished)
				return wfe_arena_printf(&st->arena, "the run ended %s", wfe_run_state_name(run->state));
			if (!WFE_STATE_IN_FLIGHT(r->state))
				return wfe_arena_printf(&st->arena, "stage %s is %s; only an attempt under way (queued, dispatched, running, retry_scheduled) is failed by hand",
										name, state);
			return NULL;
		case WFE_OPERATE_REDISPATCH:
			if (run->finished)
				return wfe_arena_printf(&st->arena, "the run ended %s", wfe_run_state_name(run->state));
			if (r->state != WFE_QUEUED && r->state != WFE_DISPATCHED)
				return wfe_arena_printf(&st->arena, "stage %s is %s; only a queued or dispatched attempt is re-dispatched",
										name, state);
			if (r->queue == NULL || r->has_handler)
				return wfe_arena_printf(&st->arena, "stage %s is not served by a worker queue", name);
			return NULL;
	}
	return "unknown operation";
}

/*
 * The arrivals join j has had, as its branches' rows say: for a join an
 * operator completed by hand, whose stored result holds none.  A branch
 * arrived with the final state of its stage that routes to j (a decision
 * that chose j arrived completed).
 */
static json_object *
arrivals_from_rows(wfe_step *st, int j)
{
	json_object *arrivals = json_object_new_object();

	step_load_all(st);
	for (int k = 0; k < st->rp->first_finaliser; k++)
	{
		const wfe_rp_stage *s = &st->rp->stages[k];
		const wfe_row *r = &st->rows[k];
		int			to_j = 0;

		if (!r->exists || r->branch < 0 || k == j)
			continue;
		if (s->kind == WFE_K_DECISION)
		{
			for (int b = 0; b < s->nbranches; b++)
				to_j |= s->next[b] == j;
			to_j = (to_j && r->state == WFE_COMPLETED) || (s->on_evaluation_error == j && r->state == WFE_FAILED);
		}
		else
			to_j = (s->on_success == j && r->state == WFE_COMPLETED) ||
				(s->on_failure == j && (r->state == WFE_FAILED || r->state == WFE_TIMED_OUT));
		if (to_j)
			json_object_object_add(arrivals, st->rp->stages[r->branch].name,
								   json_object_new_string(wfe_state_name(r->state)));
	}
	return arrivals;
}

/*
 * Waiting again, in a reopened run.  A join forgets the arrivals of the
 * branches that run again (redo[k] set for a stage k of that branch) and
 * keeps the others, which will not arrive a second time.
 */
static void
reset(wfe_step *st, int i, const char *redo)
{
	wfe_row    *r = wfe_step_row(st, i);
	wfe_op	   *op = step_emit(st, WFE_OP_RESET, i);
	json_object *detail = json_object_new_object();

	json_object_object_add(detail, "was", step_jstr(wfe_state_name(r->state)));
	step_event(st, i, r->attempt, "stage.reset", detail);
	if (st->rp->stages[i].kind == WFE_K_JOIN)
	{
		json_object *arrivals = step_hold(st, step_jparse(r->arrivals));
		json_object *kept = json_object_new_object();
		json_object *result = json_object_new_object();

		if (!json_object_is_type(arrivals, json_type_object))
			arrivals = step_hold(st, arrivals_from_rows(st, i));	/* completed by hand: none kept */
		if (json_object_is_type(arrivals, json_type_object))
		{
			json_object_object_foreach(arrivals, b, o)
			{
				int			again = 0;

				for (int k = 0; k < st->rp->nstages && !again; k++)
					again = redo[k] && st->rows[k].branch >= 0 &&
						strcmp(st->rp->stages[st->rows[k].branch].name, b) == 0;
				if (!again)
					json_object_object_add(kept, b, json_object_get(o));
			}
		}
		r->arrivals = wfe_arena_strdup(&st->arena, json_object_to_json_string_ext(kept, JSON_C_TO_STRING_PLAIN));
		json_object_object_add(result, "arrivals", kept);
		op->json = step_json_text(st, result);
	}
	else
		r->arrivals = NULL;
	r->state = WFE_WAITING;
	r->outcome = 0;
	r->result = NULL;
	r->cache_key = NULL;
}

/*
 * Reopen a run that ended failed, to go on from stage i: what its failure
 * cancelled is queued again, what lies downstream of those and of i waits
 * again, and so do the finalisers, which run again at the new intent.
 */
/* reopen's redo[k]: 1 runs again (queued), RELEASE_AGAIN is released as a route would */
#define RELEASE_AGAIN 2

const char *
step_reopen(wfe_step *st, int i, const char *by, const char *why)
{
	const wfe_run_plan *rp = st->rp;
	wfe_run    *run = st->run;
	char	   *redo = wfe_arena_alloc(&st->arena, rp->nstages);

	step_load_all(st);
	step_emit(st, WFE_OP_REOPEN, -1);
	run->state = WFE_RUN_RUNNING;
	run->intent = -1;
	run->finished = 0;
	{
		json_object *detail = json_object_new_object();

		json_object_object_add(detail, "by", step_jstr(by));
		json_object_object_add(detail, "reason", step_jstr(why));
		json_object_object_add(detail, "stage", step_jname(st, i));
		step_event(st, -1, 0, "run.redriven", detail);
	}
	memset(redo, 0, rp->nstages);
	redo[i] = 1;
	/* a stage that waited on the cache when the run failed was skipped, not cancelled: it runs again too */
	for (int k = 0; k < rp->first_finaliser; k++)
		if (st->rows[k].exists && is_task(st, k) && (st->rows[k].state == WFE_CANCELLED ||
													 (st->rows[k].state == WFE_SKIPPED && st->rows[k].cache_key)))
			redo[k] = 1;

	/*
	 * A task whose failure ended the run and that does not lie after i (the
	 * run failed at another branch) runs again with i, or the run could not
	 * finish (reopen_problem refused the other kinds).
	 */
	for (int k = 0; k < rp->first_finaliser; k++)
		if (k != i && is_task(st, k) && ended_the_run(st, k) && !wfe_run_plan_reaches(rp, i, k))
			redo[k] = 1;

	/*
	 * A fork releases its branches one after another: the failure that
	 * ended the run may have come from an earlier branch before a later one
	 * was released, and the intent skipped that one.  It is released again.
	 */
	for (int k = 0; k < rp->first_finaliser; k++)
		if (rp->stages[k].kind == WFE_K_FORK && st->rows[k].exists && st->rows[k].state == WFE_COMPLETED)
			for (int b = 0; b < rp->stages[k].ntargets; b++)
			{
				int			t = rp->stages[k].targets[b];

				if (st->rows[t].exists && st->rows[t].state == WFE_SKIPPED && !redo[t])
					redo[t] = RELEASE_AGAIN;
			}
	for (int k = 0; k < rp->nstages; k++)
	{
		wfe_row    *r = &st->rows[k];
		int			downstream = k >= rp->first_finaliser;

		if (!r->exists || redo[k] || r->state == WFE_WAITING || WFE_STATE_IN_FLIGHT(r->state))
			continue;
		for (int m = 0; !downstream && m < rp->first_finaliser; m++)
			downstream = redo[m] && wfe_run_plan_reaches(rp, m, k);
		if (downstream)
			reset(st, k, redo);
	}
	for (int k = 0; k < rp->first_finaliser; k++)
		if (redo[k] == 1 && k != i && st->rows[k].state == WFE_SKIPPED)
		{
			const char *key = st->rows[k].cache_key;

			reset(st, k, redo);
			step_enqueue(st, k, NULL, 1, key);	/* its bound input is in its row: it runs itself */
		}
		else if (redo[k] == 1 && k != i)
			step_new_attempt(st, k);
	for (int k = 0; k < rp->first_finaliser; k++)
		if (redo[k] == RELEASE_AGAIN)
			reset(st, k, redo);	/* waiting again now, so the action on i sees it live */
	return redo;
}

/*
 * After the operator's action on the reopened run: release the fork
 * branches reopen marked (RELEASE_AGAIN).  Last, because a release may end
 * the run again at once (a decision failing as before), which cancels what
 * is under way, the stage acted on included.
 */
void
step_release_again(wfe_step *st, const char *redo)
{
	for (int k = 0; k < st->rp->first_finaliser && st->run->intent < 0; k++)
		if (redo[k] == RELEASE_AGAIN)
			step_activate(st, k, k, WFE_COMPLETED);
}

/* In a running run: what i's failure skipped downstream may run again. */
static void
unskip_downstream(wfe_step *st, int i)
{
	char	   *redo = wfe_arena_alloc(&st->arena, st->rp->nstages);

	step_load_all(st);
	redo[i] = 1;
	for (int k = 0; k < st->rp->first_finaliser; k++)
		if (k != i && st->rows[k].exists && st->rows[k].state == WFE_SKIPPED &&
			wfe_run_plan_reaches(st->rp, i, k))
			reset(st, k, redo);
}

int
wfe_step_operate_reopens(const wfe_step *st, wfe_operation op)
{
	/* wfe_step_operate_problem lets only a failed run be reopened, by these two */
	return (op == WFE_OPERATE_REDRIVE || op == WFE_OPERATE_SKIP) && st->run->finished;
}

void
wfe_step_operate(wfe_step *st, int i, wfe_operation what, const char *value, const char *by,
				 const char *why)
{
	wfe_row    *r = wfe_step_row(st, i);
	const char *again = NULL;	/* what a reopening releases after the action */

	if (i == st->elem_map && st->elem >= 0 && (what == WFE_OPERATE_REDRIVE || what == WFE_OPERATE_SKIP))
	{
		step_element_operate(st, i, what, value, by, why);
		return;
	}
	switch (what)
	{
		case WFE_OPERATE_REDRIVE:
		case WFE_OPERATE_SKIP:
			if (wfe_step_operate_reopens(st, what))
				again = step_reopen(st, i, by, why);
			else
				unskip_downstream(st, i);
			step_operator_event(st, i, what == WFE_OPERATE_REDRIVE ? "stage.redriven" : "stage.skipped_by_operator",
						   by, why);
			if (what == WFE_OPERATE_REDRIVE)
				step_new_attempt(st, i);
			else if (st->rp->stages[i].kind == WFE_K_DECISION)
			{
				/* decided by hand: the branch the operator named, as if its clause held */
				const wfe_rp_stage *s = &st->rp->stages[i];
				int			k = decision_branch(st, i, value);
				json_object *result = json_object_new_object();
				json_object *detail = json_object_new_object();

				json_object_object_add(result, "branch", json_object_new_int(k + 1));
				json_object_object_add(result, "next", step_jstr(s->next_name[k]));
				step_resolve(st, i, WFE_COMPLETED, result, NULL, WFE_KEEP_BRANCH);
				json_object_object_add(detail, "branch", json_object_new_int(k + 1));
				json_object_object_add(detail, "next", step_jstr(s->next_name[k]));
				step_event(st, i, 1, "stage.decided", detail);
				step_skip_unreachable(st, i, s->next[k]);
				step_route(st, i, s->next[k], r->branch, WFE_COMPLETED);
			}
			else
				step_completed(st, i, value, BY_HAND);
			if (again != NULL)
				step_release_again(st, again);
			break;
		case WFE_OPERATE_FAIL:
			{
				wfe_op	   *op = step_emit(st, WFE_OP_FENCE, i);
				json_object *error = json_object_new_object();

				step_operator_event(st, i, "stage.failed_by_operator", by, why);
				/* the attempt is fenced first: whatever it reports later is stale */
				op->flag = (r->state == WFE_DISPATCHED || r->state == WFE_RUNNING);
				op->text = value;
				op->prev_fence = r->fence;
				r->fence = step_next_fence(st, r->fence);
				op->attempt = r->attempt;
				op->fence = r->fence;
				json_object_object_add(error, "code", json_object_new_string("operator.failed"));
				json_object_object_add(error, "message", step_jstr(value));
				json_object_object_add(error, "by", step_jstr(by));
				step_attempt_failed(st, i, step_json_text(st, error), "\"operator.failed\"", 0, WFE_FAILED);
			}
			break;
		case WFE_OPERATE_REDISPATCH:
			{
				wfe_op	   *op = step_emit(st, WFE_OP_ENQUEUE, i);

				step_operator_event(st, i, "stage.redispatched", by, why);
				/* the same attempt under a new fence: the old message's accept is stale */
				op->flag = 0;
				op->json = NULL;
				r->state = WFE_QUEUED;
				r->fence = step_next_fence(st, r->fence);
				op->attempt = r->attempt;
				op->fence = r->fence;
			}
			break;
	}
}
