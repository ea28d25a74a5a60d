/*
 * child.c — workflow stages: the step core's half of a child run
 * (dsl.md "Stages form: new types", runtime.md "Child runs").
 *
 * Releasing a workflow stage resolves its child (the server's child hook),
 * binds the child's context against the child's context_schema, parks the
 * stage (running, no worker) and asks the server to start a child run for
 * that attempt (WFE_OP_CHILD).  The child's end comes back as
 * wfe_step_child_ended, which completes or fails the attempt; a retry or a
 * redrive releases the stage again, and so starts a new child.  Stopping a
 * child whose parent's attempt ended otherwise (cancelled, timed out,
 * fenced by an operator) is the server's: it follows the attempt's fence.
 */
#include <string.h>

#include "step_internal.h"

static void release(wfe_step *st, int i, int again, const char *bound);

/* The workflow a stage names, without its @VERSION. */
static const char *
child_workflow(wfe_step *st, int i)
{
	const char *ref = st->rp->stages[i].contract;
	const char *at = strrchr(ref, '@');

	return at ? wfe_arena_strndup(&st->arena, ref, (size_t) (at - ref)) : ref;
}

/*
 * Release workflow stage i (or map element NAME[k] of a map whose items
 * are child runs): a new attempt starts a child run.  again: a retry or a
 * redrive, whose context is bound in its row already.
 */
void
step_release_child(wfe_step *st, int i, int again)
{
	release(st, i, again, NULL);
}

/* A map element's first attempt, its context bound at the map's release (map_child.c). */
void
step_release_child_bound(wfe_step *st, int i, const char *input)
{
	release(st, i, 1, input);
}

/* Is stage i, as the step now sees it, an attempt that a child run carries? */
int
step_runs_child(const wfe_step *st, int i)
{
	const wfe_rp_stage *s = &st->rp->stages[i];

	return s->kind == WFE_K_WORKFLOW ||
		(s->kind == WFE_K_MAP && s->item_workflow && i == st->elem_map && st->elem >= 0);
}

/* step_release_child's work; bound: the context, bound already and in the row (or NULL: read it). */
static void
release(wfe_step *st, int i, int again, const char *bound)
{
	const wfe_rp_stage *s = &st->rp->stages[i];
	wfe_row    *r = wfe_step_row(st, i);
	wfe_child	c = {NULL, 0, 0};
	const char *code = NULL,
			   *message = NULL;
	const char *input;
	wfe_op	   *op;
	json_object *detail;

	if (st->io->child)
		st->io->child(st->io->arg, i, &c);
	if (c.version == NULL)
	{
		step_bind_failed(st, i, "contract.unknown",
						 wfe_arena_printf(&st->arena, strchr(s->contract, '@')
										  ? "workflow %s is not approved: no child run can start"
										  : "workflow %s has no active version: no child run can start",
										  s->contract));
		return;
	}
	if (c.depth > c.max_depth)
	{
		step_bind_failed(st, i, "limits.workflow_depth",
						 wfe_arena_printf(&st->arena,
										  "a child run of %s would be nested %d deep; wfe.max_workflow_depth is %d",
										  s->contract, c.depth, c.max_depth));
		return;
	}
	input = bound ? bound : again ? st->io->stage_input(st->io->arg, i)
		: step_bind_stage(st, i,
						  wfe_arena_printf(&st->arena, "context_schema of the child workflow %s@%s",
										   child_workflow(st, i), c.version),
						  &code, &message);
	if (input == NULL)
	{
		step_bind_failed(st, i, code ? code : "binding.type",
						 message ? message : "the stage has no bound input");
		return;
	}

	/* running with no worker: a new attempt, a new fence */
	op = step_emit(st, WFE_OP_PARK, i);
	r->state = WFE_RUNNING;
	r->attempt += 1;
	r->fence = step_next_fence(st, r->fence);
	r->outcome = 0;
	op->attempt = r->attempt;
	op->fence = r->fence;
	op->delay_us = -1;
	op->json = again ? NULL : input;

	op = step_emit(st, WFE_OP_CHILD, i);
	op->attempt = r->attempt;
	op->fence = r->fence;
	op->text = child_workflow(st, i);
	op->json = input;
	op->json2 = wfe_arena_strdup(&st->arena, c.version);

	detail = json_object_new_object();
	json_object_object_add(detail, "workflow", step_jstr(op->text));
	json_object_object_add(detail, "version", step_jstr(c.version));
	step_event_fenced(st, i, r->attempt, "stage.child_started", detail, r->fence);
}

void
wfe_step_child_ended(wfe_step *st, int i, int attempt, int64_t fence, int64_t child_run_id,
					 const char *state, const char *output)
{
	wfe_row    *r = wfe_step_row(st, i);
	json_object *detail = json_object_new_object();
	int			applies = r->exists && step_runs_child(st, i) &&
		r->state == WFE_RUNNING && r->attempt == attempt && r->fence == fence;
	const char *code;
	const char *problem;
	json_object *error;

	json_object_object_add(detail, "child_run_id", json_object_new_int64(child_run_id));
	json_object_object_add(detail, "state", step_jstr(state));
	json_object_object_add(detail, "applied", json_object_new_boolean(applies));
	step_event(st, i, attempt, "stage.child_ended", detail);
	/* a late end (the attempt was cancelled, fenced or redriven) is recorded, never applied */
	if (!applies)
		return;
	if (strcmp(state, "completed") == 0)
	{
		/* a tasks-form stage's declared outputs hold the child's output as a worker's result */
		problem = wfe_step_result_problem(st, i, output ? output : "{}", NULL);
		if (problem != NULL)
			wfe_step_invalid_result(st, i, problem);
		else
			step_completed(st, i, output ? output : "{}", BY_ATTEMPT);
		return;
	}
	code = strcmp(state, "cancelled") == 0 ? "child.cancelled" : "child.failed";
	error = json_object_new_object();
	json_object_object_add(error, "code", json_object_new_string(code));
	json_object_object_add(error, "message", json_object_new_string(
						   wfe_arena_printf(&st->arena, "child run %lld %s", (long long) child_run_id,
											code[6] == 'c' ? "was cancelled" : "failed")));
	json_object_object_add(error, "child_run_id", json_object_new_int64(child_run_id));
	/* the stage's retry policy may start a new child run */
	step_attempt_failed(st, i, step_json_text(st, error), wfe_step_json_str(st, code), 1, WFE_FAILED);
}
