/*
 * step_waits.c — the step core's waits and sleeps: stages that run with no
 * worker until a signal, a timeout or a timer ends them (runtime.md
 * "Signals", "Sleep and not_before").
 * What the files of the step core share: step_internal.h.
 */
#include <string.h>

#include <json-c/json.h>

#include "core/expr/expr.h"
#include "step_internal.h"

static void sleep_unbound(wfe_step *st, int i, const char *value, const char *why);

/* Stage i's released attempt is running with no worker: a new attempt and fence. */
static wfe_op *
park(wfe_step *st, int i, const char *input, int64_t delay_us, const char *timer)
{
	wfe_row    *r = wfe_step_row(st, i);
	wfe_op	   *op = step_emit(st, WFE_OP_PARK, i);

	r->state = WFE_RUNNING;
	r->attempt += 1;
	r->fence = step_next_fence(st, r->fence);
	r->outcome = 0;
	op->attempt = r->attempt;
	op->fence = r->fence;
	op->delay_us = delay_us;
	op->text = timer;
	op->json = input;
	return op;
}

/* The oldest buffered signal for wait i, taken: it completes the wait. */
static int
take_buffered(wfe_step *st, int i)
{
	int64_t		id = 0;
	const char *payload = st->io->buffered_signal
		? st->io->buffered_signal(st->io->arg, st->rp->stages[i].contract, st->signal_after, &id)
		: NULL;
	wfe_op	   *op;

	if (payload == NULL)
		return 0;
	/* ids only grow: a second wait released in this step takes the next one */
	st->signal_after = id;
	op = step_emit(st, WFE_OP_SIGNAL_TAKEN, i);
	op->delay_us = id;
	step_completed(st, i, wfe_arena_strdup(&st->arena, payload), BY_ATTEMPT);
	return 1;
}

/* {"slept_until": when} */
static const char *
slept_until(wfe_step *st, json_object *when)
{
	json_object *o = json_object_new_object();

	json_object_object_add(o, "slept_until", when);
	return step_json_text(st, o);
}

/*
 * Release a wait or a sleep (input: a sleep's bound {"until"}).  A wait
 * takes the oldest signal buffered for it, or waits with its timeout timer;
 * a sleep whose time has come completes at once, else waits for its timer.
 */
void
step_park(wfe_step *st, int i, const char *input)
{
	const wfe_rp_stage *s = &st->rp->stages[i];
	json_object *detail = json_object_new_object();

	if (s->kind == WFE_K_WAIT)
	{
		wfe_op	   *op = park(st, i, NULL, s->timeout_ms >= 0 ? s->timeout_ms * 1000 : -1,
							  "wait_timeout");

		json_object_object_add(detail, "signal", step_jstr(s->contract));
		json_object_object_add(detail, "timeout_ms",
							   s->timeout_ms >= 0 ? json_object_new_int64(s->timeout_ms) : NULL);
		step_event_fenced(st, i, op->attempt, "stage.waiting", detail, op->fence);
		take_buffered(st, i);
		return;
	}
	/* a sleep */
	{
		int64_t		delay_us = s->sleep_ms >= 0 ? s->sleep_ms * 1000 : 0;
		const char *until = NULL;
		wfe_op	   *op;

		if (s->sleep_ms < 0)
		{
			json_object *in = step_hold(st, step_jparse(input));
			json_object *u = NULL;
			int64_t		sec = 0;
			int32_t		nsec = 0;
			char		why[128] = "";

			if (in)
				json_object_object_get_ex(in, "until", &u);
			if (u == NULL || !json_object_is_type(u, json_type_string) ||
				wfe_timestamp_parse(json_object_get_string(u), (size_t) json_object_get_string_len(u),
									&sec, &nsec, why, sizeof(why)) != 0)
			{
				sleep_unbound(st, i, u ? json_object_to_json_string_ext(u, JSON_C_TO_STRING_PLAIN) : "null",
							  why);
				json_object_put(detail);
				return;
			}
			until = json_object_get_string(u);
			delay_us = sec * 1000000 + nsec / 1000 - (st->io->now_us ? st->io->now_us(st->io->arg) : 0);
		}
		if (until != NULL && delay_us <= 0)
		{
			/* its time has come already: it completes at once */
			op = park(st, i, input, -1, NULL);
			json_object_object_add(detail, "until", step_jstr(until));
			step_event_fenced(st, i, op->attempt, "stage.sleeping", detail, op->fence);
			step_completed(st, i, slept_until(st, step_jstr(until)), BY_ATTEMPT);
			return;
		}
		op = park(st, i, input, delay_us, "sleep");
		json_object_object_add(detail, "duration_ms", json_object_new_int64(delay_us / 1000));
		if (until)
			json_object_object_add(detail, "until", step_jstr(until));
		step_event_fenced(st, i, op->attempt, "stage.sleeping", detail, op->fence);
	}
}

/* A sleep's until did not bind to an RFC 3339 timestamp: binding.type, the failure route. */
static void
sleep_unbound(wfe_step *st, int i, const char *value, const char *why)
{
	step_bind_failed(st, i, "binding.type",
					 wfe_arena_printf(&st->arena, "until of sleep '%s' is %s, not an RFC 3339 timestamp%s%s",
									  st->rp->stages[i].name, value, why[0] ? ": " : "", why));
}

const char *
wfe_step_signal(wfe_step *st, const char *signal, const char *payload, const char *key,
				const char *by, int *taken)
{
	const wfe_run_plan *rp = st->rp;
	const char *outcome = "late";
	int			released = -1,
				pending = 0;
	json_object *detail = json_object_new_object();

	*taken = -1;
	if (st->run->intent < 0 && !st->run->finished)
	{
		/* the first released wait on it in plan order takes it; else one yet to come buffers it */
		for (int i = 0; i < rp->first_finaliser && released < 0; i++)
		{
			wfe_row    *r;

			if (rp->stages[i].kind != WFE_K_WAIT || strcmp(rp->stages[i].contract, signal) != 0)
				continue;
			r = wfe_step_row(st, i);
			if (r->exists && r->state == WFE_RUNNING)
				released = i;
			else if (r->exists && r->state == WFE_WAITING)
				pending = 1;
		}
		outcome = released >= 0 ? "accepted" : pending ? "buffered" : "late";
	}
	json_object_object_add(detail, "signal", step_jstr(signal));
	json_object_object_add(detail, "outcome", json_object_new_string(outcome));
	json_object_object_add(detail, "idempotency_key", step_jstr(key));
	json_object_object_add(detail, "by", step_jstr(by));
	step_event(st, released, released >= 0 ? wfe_step_row(st, released)->attempt : 0,
			   "signal.received", detail);
	if (released >= 0)
	{
		*taken = released;
		step_completed(st, released, payload, BY_ATTEMPT);
	}
	return outcome;
}

void
wfe_step_wait_timeout(wfe_step *st, int i, int attempt, int64_t fence)
{
	wfe_row    *r = wfe_step_row(st, i);
	const wfe_rp_stage *s = &st->rp->stages[i];
	json_object *detail;
	json_object *error;
	wfe_op	   *op;

	/* a timer of a wait that took its signal, was cancelled or redriven does nothing */
	if (!r->exists || s->kind != WFE_K_WAIT || r->state != WFE_RUNNING || r->attempt != attempt ||
		r->fence != fence)
		return;
	op = step_emit(st, WFE_OP_TIME_OUT, i);
	r->state = WFE_TIMED_OUT;
	r->fence = step_next_fence(st, r->fence);
	op->fence = r->fence;
	detail = json_object_new_object();
	json_object_object_add(detail, "clock", json_object_new_string("wait"));
	json_object_object_add(detail, "signal", step_jstr(s->contract));
	json_object_object_add(detail, "timeout_ms", json_object_new_int64(s->timeout_ms));
	step_event(st, i, r->attempt, "stage.timed_out", detail);
	error = json_object_new_object();
	json_object_object_add(error, "code", json_object_new_string("timeout.wait"));
	json_object_object_add(error, "message", json_object_new_string(
						   wfe_arena_printf(&st->arena, "no signal %s came within %lld ms", s->contract,
											(long long) s->timeout_ms)));
	/* no retry, no dead letter: the author routed the timeout (on_timeout) */
	step_attempt_failed(st, i, step_json_text(st, error), "\"timeout.wait\"", 0, WFE_TIMED_OUT);
}

void
wfe_step_sleep_due(wfe_step *st, int i, int attempt, int64_t fence, const char *due_json)
{
	wfe_row    *r = wfe_step_row(st, i);

	if (!r->exists || st->rp->stages[i].kind != WFE_K_SLEEP || r->state != WFE_RUNNING ||
		r->attempt != attempt || r->fence != fence)
		return;
	step_completed(st, i, slept_until(st, step_jparse(due_json)), BY_ATTEMPT);
}
