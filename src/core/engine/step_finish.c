/*
 * step_finish.c — the step core's intents, finalisers and the end of a run.
 * What the files of the step core share: step_internal.h.
 */
#include <string.h>

#include <json-c/json.h>

#include "core/jsonschema/jsonschema.h"
#include "step_internal.h"

/* Expose the run's final state: completed only if every finaliser succeeded. */
static void
finish(wfe_step *st)
{
	wfe_run    *run = st->run;
	wfe_run_state final;
	wfe_op	   *op;
	json_object *detail = json_object_new_object();

	if (run->finished)
		return;
	if (run->intent == WFE_RUN_CANCELLED)
		final = WFE_RUN_CANCELLED;
	else if (run->intent == WFE_RUN_COMPLETED)
	{
		final = WFE_RUN_COMPLETED;
		step_load_all(st);
		for (int k = st->rp->first_finaliser; k < st->rp->nstages; k++)
			if (st->rows[k].exists && st->rows[k].state != WFE_COMPLETED)
				final = WFE_RUN_FAILED;
	}
	else
		final = WFE_RUN_FAILED;
	op = step_emit(st, WFE_OP_FINISH, -1);
	op->state = final;
	op->text = (final == WFE_RUN_FAILED && run->intent == WFE_RUN_COMPLETED)
		? "a finaliser failed" : NULL;
	run->state = final;
	run->finished = 1;
	json_object_object_add(detail, "intent", step_jstr(step_intent_name(run->intent)));
	step_event(st, -1, 0, wfe_arena_printf(&st->arena, "run.%s", wfe_run_state_name(final)), detail);
}

/* Release the next finaliser in declared order, or finish the run. */
void
step_next_finaliser(wfe_step *st)
{
	for (int k = st->rp->first_finaliser; k < st->rp->nstages; k++)
	{
		wfe_row    *r = wfe_step_row(st, k);

		if (r->exists && r->state == WFE_WAITING)
		{
			if (st->run->state == WFE_RUN_RUNNING)
			{
				step_emit(st, WFE_OP_FINALISING, -1);
				st->run->state = WFE_RUN_FINALISING;
			}
			step_activate(st, k, -1, WFE_COMPLETED);
			return;
		}
	}
	finish(st);
}

/*
 * The run's output (dsl.md "Run output"), bound when the run reaches a
 * completed intent: the `output` template over every completed stage's
 * result and every task's outputs, or by default {} (stages form) or the
 * outputs map {task: {key: value}} (tasks form).  Read once per run, at its
 * end, so it may read every row.  NULL with *code and *message on a binding
 * failure.
 */
static const char *
run_output(wfe_step *st, const char **code, const char **message)
{
	const wfe_run_plan *rp = st->rp;
	json_object *root;
	json_object *stages;
	json_object *outputs = json_object_new_object();
	json_object *run;
	json_object *bound;
	wfe_bind_error err;
	char	   *canon;
	const char *text;

	for (int i = 0; i < rp->nstages; i++)
	{
		const wfe_rp_stage *s = &rp->stages[i];
		json_object *per = NULL;
		/* a task completed in this step: its outputs are not written yet */
		json_object *fresh = s->nproduces > 0 && wfe_step_row(st, i)->result
			? step_hold(st, step_jparse(wfe_step_row(st, i)->result)) : NULL;

		for (int k = 0; k < s->nproduces; k++)
		{
			json_object *fv = NULL;
			const char *v;

			if (fresh != NULL)
			{
				if (json_object_object_get_ex(fresh, s->produces[k].key, &fv))
				{
					if (per == NULL)
					{
						per = json_object_new_object();
						json_object_object_add(outputs, s->name, per);
					}
					json_object_object_add(per, s->produces[k].key, json_object_get(fv));
				}
				continue;
			}
			v = st->io->output(st->io->arg, s->name, s->produces[k].key);
			if (v == NULL)
				continue;
			if (per == NULL)
			{
				per = json_object_new_object();
				json_object_object_add(outputs, s->name, per);
			}
			json_object_object_add(per, s->produces[k].key, step_jparse(v));
		}
	}
	if (rp->output == NULL)
	{
		if (rp->tasks_form)
			return step_json_text(st, outputs);	/* frees it */
		json_object_put(outputs);
		return "{}";
	}

	root = step_hold(st, json_object_new_object());	/* owns what is added to it */
	stages = json_object_new_object();
	run = json_object_new_object();
	{
		json_object *context = step_jparse(st->io->context(st->io->arg));

		json_object_object_add(root, "context", context ? context : json_object_new_object());
	}
	step_load_all(st);
	for (int t = 0; t < rp->nstages; t++)
	{
		const wfe_rp_stage *ts = &rp->stages[t];
		wfe_row    *tr = &st->rows[t];
		json_object *entry;

		if ((ts->kind != WFE_K_ACTION && ts->kind != WFE_K_WORKER && ts->kind != WFE_K_WAIT &&
			 ts->kind != WFE_K_SLEEP && ts->kind != WFE_K_WORKFLOW && ts->kind != WFE_K_MAP) ||
			!tr->exists || tr->state != WFE_COMPLETED)
			continue;
		entry = json_object_new_object();
		json_object_object_add(entry, "result",
							   step_jparse(tr->result ? tr->result : st->io->result(st->io->arg, t)));
		json_object_object_add(stages, ts->name, entry);
	}
	json_object_object_add(root, "stages", stages);
	json_object_object_add(root, "outputs", outputs);
	json_object_object_add(run, "id", json_object_new_int64(st->run->run_id));
	json_object_object_add(run, "tenant", step_jstr(st->run->tenant));
	json_object_object_add(run, "workflow", step_jstr(st->run->workflow));
	json_object_object_add(run, "version", step_jstr(st->run->version));
	json_object_object_add(root, "run", run);

	memset(&err, 0, sizeof(err));
	bound = wfe_bind_input(rp->output, root, NULL, NULL, &err);
	if (bound == NULL)
	{
		*code = wfe_arena_strdup(&st->arena, err.code ? err.code : WFE_BIND_TYPE);
		/* bind.c names the path from "input"; here it is the run's output */
		*message = wfe_arena_strdup(&st->arena, strncmp(err.message, "input", 5) == 0
									? wfe_arena_printf(&st->arena, "output%s", err.message + 5)
									: err.message);
		return NULL;
	}
	canon = wfe_canonical_json(bound);
	json_object_put(bound);
	text = wfe_arena_strdup(&st->arena, canon ? canon : "{}");
	free(canon);
	return text;
}

/*
 * Set the run's terminal intent (once): fence what is in flight and ask it
 * to stop, skip what never started, then run the finalisers.  Tasks the run
 * does not wait for (awaits: false) go on after a completed intent.
 */
void
step_set_intent(wfe_step *st, wfe_run_state intent, const char *reason)
{
	const wfe_run_plan *rp = st->rp;
	wfe_op	   *op;
	json_object *detail;

	const char *output = NULL;

	if (st->run->intent >= 0)
		return;
	if (intent == WFE_RUN_COMPLETED)
	{
		const char *code = NULL;
		const char *message = NULL;

		/* before the finalisers: an output that does not bind fails the run */
		output = run_output(st, &code, &message);
		if (output == NULL)
		{
			detail = json_object_new_object();
			json_object_object_add(detail, "code", step_jstr(code));
			json_object_object_add(detail, "message", step_jstr(message));
			step_event(st, -1, 0, "run.output_failed", detail);
			intent = WFE_RUN_FAILED;
			reason = wfe_arena_printf(&st->arena, "%s: %s", code, message);
		}
	}
	op = step_emit(st, WFE_OP_INTENT, -1);
	op->state = intent;
	op->text = reason;
	op->json = output;
	st->run->intent = intent;
	detail = json_object_new_object();
	json_object_object_add(detail, "intent", step_jstr(step_intent_name(intent)));
	json_object_object_add(detail, "reason", step_jstr(reason));
	step_event(st, -1, 0, "run.intent", detail);

	step_load_all(st);
	for (int i = 0; i < rp->nstages; i++)
	{
		wfe_row    *r = &st->rows[i];
		wfe_state	was = r->state;

		if (!r->exists || rp->stages[i].kind == WFE_K_FINALISER || !WFE_STATE_IN_FLIGHT(was) ||
			(!r->awaits && intent == WFE_RUN_COMPLETED))
			continue;
		op = step_emit(st, WFE_OP_CANCEL, i);
		{
			json_object *error = json_object_new_object();

			json_object_object_add(error, "code", json_object_new_string(
								   wfe_arena_printf(&st->arena, "run.%s", step_intent_name(intent))));
			json_object_object_add(error, "message", step_jstr(reason));
			op->json = step_json_text(st, error);
		}
		op->flag = (was == WFE_DISPATCHED || was == WFE_RUNNING);
		op->text = reason;
		r->state = WFE_CANCELLED;
		op->prev_fence = r->fence;
		r->fence = step_next_fence(st, r->fence);
		op->attempt = r->attempt;
		op->fence = r->fence;
		detail = json_object_new_object();
		json_object_object_add(detail, "was", step_jstr(wfe_state_name(was)));
		json_object_object_add(detail, "cancel_requested", json_object_new_boolean(op->flag));
		/* the fence of the attempt asked to stop: its ack_cancel names it */
		step_event_fenced(st, i, r->attempt, "stage.cancelled", detail, op->prev_fence);
		step_cache_leader_ended(st, i);
		if (rp->stages[i].kind == WFE_K_MAP)
			step_emit(st, WFE_OP_MAP_CANCEL, i)->json = op->json;
	}
	for (int i = 0; i < rp->nstages; i++)
		if (st->rows[i].exists && st->rows[i].state == WFE_WAITING &&
			rp->stages[i].kind != WFE_K_FINALISER)
			step_skip(st, i, intent == WFE_RUN_COMPLETED ? "branch_not_taken" : "run_aborted", -1);
	step_next_finaliser(st);
}
