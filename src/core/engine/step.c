/*
 * step.c — the step core (step.h): every decision about how a run moves.
 * Binding and decisions are step_bind.c, waits and sleeps step_waits.c,
 * intents and a run's end step_finish.c, the result cache's part of a
 * release step_cache.c, operator recovery step_operate.c (what they share:
 * step_internal.h).
 *
 * The functions below call each other the way a run's consequences chain:
 * a completion routes to a stage, which may be a decision that routes on,
 * or a join that releases its successor, or a terminal that sets the
 * intent, which skips what never started and starts the finalisers.  The
 * chain is bounded by the plan (each call moves a stage out of waiting, or
 * ends), and st->depth guards it anyway.
 */
#include <math.h>
#include <string.h>

#include <json-c/json.h>

#include "core/jsonschema/jsonschema.h"
#include "step_internal.h"

#define STEP_MAX_DEPTH 4096

static void stage_done(wfe_step *st, int i, wfe_state outcome);
static void task_done(wfe_step *st, int i);

/* ---------------------------------------------------------------------
 * Memory, rows and effects
 * --------------------------------------------------------------------- */

/* Keep a parsed object until the step ends. */
json_object *
step_hold(wfe_step *st, json_object *o)
{
	if (o == NULL)
		return NULL;
	if (st->nheld == st->capheld)
	{
		st->capheld = st->capheld ? st->capheld * 2 : 16;
		st->held = realloc(st->held, sizeof(json_object *) * st->capheld);
		if (st->held == NULL)
			abort();
	}
	st->held[st->nheld++] = o;
	return o;
}

static void
release_held(wfe_step *st)
{
	for (int i = 0; i < st->nheld; i++)
		json_object_put(st->held[i]);
	free(st->held);
	st->held = NULL;
	st->nheld = st->capheld = 0;
}

void
wfe_step_begin(wfe_step *st, const wfe_run_plan *rp, wfe_run *run, const wfe_step_io *io)
{
	/* an earlier step that the server's error ended left these behind */
	if (st->rp != NULL)
		wfe_step_end(st);
	memset(st, 0, sizeof(*st));
	st->rp = rp;
	st->run = run;
	st->io = io;
	wfe_arena_init(&st->arena);
	st->rows = wfe_arena_alloc(&st->arena, sizeof(wfe_row) * (rp->nstages + 1));
	st->elem_map = -1;
	st->elem = -1;
}

void
wfe_step_end(wfe_step *st)
{
	release_held(st);
	free(st->ops);
	wfe_arena_free(&st->arena);
	memset(st, 0, sizeof(*st));
}

wfe_row *
wfe_step_row(wfe_step *st, int i)
{
	wfe_row    *r = &st->rows[i];

	if (i == st->elem_map && st->elem >= 0)
		return step_element_row(st);

	if (!r->loaded)
	{
		memset(r, 0, sizeof(*r));
		r->branch = -1;
		st->io->load(st->io->arg, i, r);
		r->loaded = 1;
	}
	return r;
}

/* Every row of the run, for the decisions that look at the whole run. */
void
step_load_all(wfe_step *st)
{
	if (st->all_loaded)
		return;
	for (int i = 0; i < st->rp->nstages; i++)
		(void) wfe_step_row(st, i);
	st->all_loaded = 1;
}

wfe_op *
step_emit(wfe_step *st, wfe_op_kind kind, int stage)
{
	wfe_op	   *op;

	if (st->nops == st->capops)
	{
		st->capops = st->capops ? st->capops * 2 : 16;
		st->ops = realloc(st->ops, sizeof(wfe_op) * st->capops);
		if (st->ops == NULL)
			abort();
	}
	op = &st->ops[st->nops++];
	memset(op, 0, sizeof(*op));
	op->kind = kind;
	op->stage = stage;
	op->branch = -1;
	op->elem = stage >= 0 && stage == st->elem_map ? st->elem : -1;
	return op;
}

/* Serialise (and free) a json-c object into the arena. */
const char *
step_json_text(wfe_step *st, json_object *o)
{
	const char *s;

	if (o == NULL)
		return NULL;
	s = wfe_arena_strdup(&st->arena,
						 json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN));
	json_object_put(o);
	return s;
}

const char *
wfe_step_json_str(wfe_step *st, const char *s)
{
	return step_json_text(st, json_object_new_string(s));
}

json_object *
step_jstr(const char *s)
{
	return s ? json_object_new_string(s) : NULL;
}

/* A stage name as JSON, or null for none. */
json_object *
step_jname(wfe_step *st, int i)
{
	return i >= 0 ? json_object_new_string(st->rp->stages[i].name) : NULL;
}

/* A JSON text parsed into a new object (NULL for NULL or JSON null). */
json_object *
step_jparse(const char *text)
{
	size_t		n;
	char	   *copy;
	json_object *o;

	if (text == NULL)
		return NULL;
	if (text[0] == '{' || text[0] == '[')
		return wfe_json_parse(text);
	/* a bare scalar needs a blank after it, or the tokener waits for more */
	n = strlen(text);
	copy = malloc(n + 2);
	if (copy == NULL)
		abort();
	memcpy(copy, text, n);
	copy[n] = ' ';
	copy[n + 1] = '\0';
	o = wfe_json_parse(copy);
	free(copy);
	return o;
}

void
step_event(wfe_step *st, int stage, int attempt, const char *type, json_object *detail)
{
	wfe_op	   *op = step_emit(st, WFE_OP_EVENT, stage);

	op->attempt = attempt;
	op->text = type;
	op->json = step_json_text(st, detail);
}

/*
 * An event about one fence (the attempt released, cancelled, reported
 * about).  A fence is a capability: it travels apart from the detail,
 * which every reader of the run sees (the server stores it in a column
 * readers cannot select).
 */
void
step_event_fenced(wfe_step *st, int stage, int attempt, const char *type, json_object *detail,
				  int64_t fence)
{
	step_event(st, stage, attempt, type, detail);
	st->ops[st->nops - 1].flag = 1;
	st->ops[st->nops - 1].fence = fence;
}

const char *
step_intent_name(int intent)
{
	return wfe_run_state_name((wfe_run_state) intent);
}

/* ---------------------------------------------------------------------
 * Releasing stages
 * --------------------------------------------------------------------- */

/*
 * A new fence.  A fence is a capability (runtime.md "Who may report"): the
 * high 32 bits count fencings, so fences only grow, and the low 32 bits are
 * fresh random bits from the server, so whoever did not receive the task or
 * the envelope cannot guess the fence of the attempt it names.
 */
int64_t
step_next_fence(wfe_step *st, int64_t fence)
{
	uint64_t	generation = ((uint64_t) fence >> 32) + 1;

	return (int64_t) (generation << 32 | st->io->fence_bits(st->io->arg));
}

/*
 * Queue an attempt: a new fence (and, for a release or a retry, a new
 * attempt).  cache_key: a cache miss's key, which the attempt runs under.
 */
void
step_enqueue(wfe_step *st, int i, const char *input, int new_attempt, const char *cache_key)
{
	wfe_row    *r = wfe_step_row(st, i);
	wfe_op	   *op = step_emit(st, WFE_OP_ENQUEUE, i);
	json_object *detail = json_object_new_object();

	op->flag = new_attempt;
	op->json = input;
	op->text = cache_key;
	op->json2 = r->rate_key;	/* bound at this release; NULL keeps the row's */
	r->rate_key = NULL;
	op->concurrency_key = r->concurrency_key;	/* likewise */
	op->concurrency_max = st->rp->stages[i].concurrency_max;
	r->concurrency_key = NULL;
	if (cache_key != NULL)
		r->cache_key = cache_key;
	r->state = WFE_QUEUED;
	r->attempt += new_attempt;
	r->fence = step_next_fence(st, r->fence);
	r->outcome = 0;
	op->attempt = r->attempt;
	op->fence = r->fence;
	json_object_object_add(detail, "queue", step_jstr(r->queue));
	if (r->cache_key != NULL)
		json_object_object_add(detail, "cache_key", step_jstr(r->cache_key));
	step_event_fenced(st, i, r->attempt, r->attempt == 1 ? "stage.released" : "stage.retried", detail,
					  r->fence);
}

/* Resolve a decision, fork or join at release. */
void
step_resolve(wfe_step *st, int i, wfe_state state, json_object *result, json_object *error, int branch)
{
	wfe_row    *r = wfe_step_row(st, i);
	wfe_op	   *op = step_emit(st, WFE_OP_RESOLVE, i);

	op->state = state;
	op->json = step_json_text(st, result);
	op->json2 = step_json_text(st, error);
	op->branch = branch;
	r->state = state;
	r->attempt = 1;
	r->fence = step_next_fence(st, r->fence);	/* grows again when a redrive resolves it anew */
	r->outcome = state;
	op->fence = r->fence;
	if (branch != WFE_KEEP_BRANCH)
		r->branch = branch;
}

void
step_skip(wfe_step *st, int i, const char *reason, int decision)
{
	wfe_row    *r = wfe_step_row(st, i);
	wfe_op	   *op = step_emit(st, WFE_OP_SKIP, i);
	json_object *detail = json_object_new_object();

	op->text = reason;
	r->state = WFE_SKIPPED;
	json_object_object_add(detail, "reason", step_jstr(reason));
	if (decision >= 0)
		json_object_object_add(detail, "decision", step_jname(st, decision));
	step_event(st, i, 0, "stage.skipped", detail);
}

/*
 * After a decision: skip (branch_not_taken) every waiting stage that no live
 * path can reach any more.  Live paths start at the chosen target, at every
 * stage with an attempt under way, and at the branches a fork has resolved
 * but not released yet (a decision heading a fork branch is decided while
 * its fork is still releasing the branches after it).
 */
void
step_skip_unreachable(wfe_step *st, int decision, int next)
{
	const wfe_run_plan *rp = st->rp;

	step_load_all(st);
	for (int i = 0; i < rp->nstages; i++)
	{
		wfe_row    *r = &st->rows[i];
		int			live = 0;

		if (!r->exists || r->state != WFE_WAITING || rp->stages[i].kind == WFE_K_FINALISER ||
			i == decision)
			continue;
		if (next >= 0 && wfe_run_plan_reaches(rp, next, i))
			live = 1;
		for (int k = 0; !live && k < rp->nstages; k++)
			if (st->rows[k].exists && WFE_STATE_IN_FLIGHT(st->rows[k].state) &&
				wfe_run_plan_reaches(rp, k, i))
				live = 1;
		for (int f = 0; !live && f < rp->nstages; f++)
			if (rp->stages[f].kind == WFE_K_FORK && st->rows[f].exists &&
				st->rows[f].state == WFE_COMPLETED)
				for (int m = 0; !live && m < rp->stages[f].ntargets; m++)
				{
					int			t = rp->stages[f].targets[m];

					if (st->rows[t].exists && st->rows[t].state == WFE_WAITING &&
						wfe_run_plan_reaches(rp, t, i))
						live = 1;
				}
		if (!live)
			step_skip(st, i, "branch_not_taken", decision);
	}
}

/* Follow a route: a terminal sets the intent, a stage is released. */
void
step_route(wfe_step *st, int from, int target, int branch, wfe_state outcome)
{
	if (target == WFE_TO_NONE)
		return;
	if (target == WFE_TO_COMPLETED || target == WFE_TO_FAILED)
	{
		const char *word = target == WFE_TO_COMPLETED ? "completed" : "failed";

		step_set_intent(st, target == WFE_TO_COMPLETED ? WFE_RUN_COMPLETED : WFE_RUN_FAILED,
				   wfe_arena_printf(&st->arena, "stage %s routed to %s",
									st->rp->stages[from].name, word));
		return;
	}
	step_activate(st, target, branch, outcome);
}

/*
 * A fork branch reaches its join: the arrival is recorded, and the last
 * required arrival resolves the join and routes on -- once, because the
 * run's lock serialises racing branches.
 */
static void
arrive(wfe_step *st, int j, int branch, wfe_state outcome)
{
	const wfe_rp_stage *js = &st->rp->stages[j];
	wfe_row    *r = wfe_step_row(st, j);
	json_object *arrivals = step_jparse(r->arrivals);
	json_object *detail = json_object_new_object();
	json_object *result;
	int			complete = 1,
				ok = 1,
				next,
				outer;
	const char *next_name;

	if (!json_object_is_type(arrivals, json_type_object))
	{
		json_object_put(arrivals);
		arrivals = json_object_new_object();
	}
	json_object_object_add(arrivals, branch >= 0 ? st->rp->stages[branch].name : "?",
						   json_object_new_string(wfe_state_name(outcome)));
	json_object_object_add(detail, "branch", step_jname(st, branch));
	json_object_object_add(detail, "outcome", step_jstr(wfe_state_name(outcome)));
	step_event(st, j, 0, "stage.join_arrival", detail);

	for (int k = 0; k < js->ntargets; k++)
		if (!json_object_object_get_ex(arrivals, st->rp->stages[js->targets[k]].name, NULL))
			complete = 0;
	if (!complete)
	{
		wfe_op	   *op = step_emit(st, WFE_OP_ARRIVALS, j);

		r->arrivals = wfe_arena_strdup(&st->arena,
									   json_object_to_json_string_ext(arrivals, JSON_C_TO_STRING_PLAIN));
		result = json_object_new_object();
		json_object_object_add(result, "arrivals", arrivals);
		op->json = step_json_text(st, result);
		return;
	}
	{
		json_object_object_foreach(arrivals, b, o)
		{
			int			s = wfe_state_from_name(json_object_get_string(o));

			(void) b;
			if (s < 0 || !(js->acceptable & (1u << s)))
				ok = 0;
		}
	}
	next = ok ? js->on_success : js->on_failure;
	next_name = ok ? js->on_success_name : js->on_failure_name;
	/* after the join, the run goes on in the branch its fork was in */
	outer = js->fork >= 0 ? wfe_step_row(st, js->fork)->branch : -1;

	result = json_object_new_object();
	json_object_object_add(result, "arrivals", json_object_get(arrivals));
	{
		json_object *error = NULL;

		if (!ok)
		{
			error = json_object_new_object();
			json_object_object_add(error, "code", json_object_new_string("join.unsatisfied"));
			json_object_object_add(error, "arrivals", json_object_get(arrivals));
		}
		step_resolve(st, j, ok ? WFE_COMPLETED : WFE_FAILED, result, error, outer);
	}
	detail = json_object_new_object();
	json_object_object_add(detail, "arrivals", arrivals);
	json_object_object_add(detail, "next", step_jstr(next_name));
	step_event(st, j, 1, ok ? "stage.joined" : "stage.join_failed", detail);
	step_route(st, j, next, outer, ok ? WFE_COMPLETED : WFE_FAILED);
}

/*
 * Release a waiting stage a route leads to: a join records the arrival,
 * decisions and forks resolve at once, executing stages get their input
 * bound and are queued.
 */
void
step_activate(wfe_step *st, int i, int branch, wfe_state outcome)
{
	const wfe_rp_stage *s = &st->rp->stages[i];
	wfe_row    *r = wfe_step_row(st, i);

	if (!r->exists || r->state != WFE_WAITING || r->cache_key != NULL)
		return;					/* skipped, cancelled, resolved or released already */
	if (++st->depth > STEP_MAX_DEPTH)
		abort();				/* a plan cannot chain this far */
	if (s->kind == WFE_K_JOIN)
	{
		arrive(st, i, branch, outcome);
		st->depth--;
		return;
	}
	if (r->branch != branch)
	{
		wfe_op	   *op = step_emit(st, WFE_OP_BRANCH, i);

		op->branch = branch;
		r->branch = branch;
	}

	if (s->kind == WFE_K_DECISION)
	{
		wfe_decision d;
		json_object *detail = json_object_new_object();
		int			next;

		step_decide(st, i, &d);
		if (d.ok)
		{
			json_object *result = json_object_new_object();

			next = s->next[d.branch];
			json_object_object_add(result, "branch", json_object_new_int(d.branch + 1));
			json_object_object_add(result, "next", step_jstr(s->next_name[d.branch]));
			step_resolve(st, i, WFE_COMPLETED, result, NULL, WFE_KEEP_BRANCH);
			json_object_object_add(detail, "branch", json_object_new_int(d.branch + 1));
			json_object_object_add(detail, "next", step_jstr(s->next_name[d.branch]));
			step_event(st, i, 1, "stage.decided", detail);
		}
		else
		{
			json_object *error = json_object_new_object();

			next = s->on_evaluation_error;
			json_object_object_add(error, "code", json_object_new_string("expr.eval"));
			json_object_object_add(error, "message", json_object_new_string(d.message));
			json_object_object_add(error, "branch", d.branch >= 0 ? json_object_new_int(d.branch + 1) : NULL);
			step_resolve(st, i, WFE_FAILED, NULL, error, WFE_KEEP_BRANCH);
			json_object_object_add(detail, "error", json_object_new_string(d.message));
			json_object_object_add(detail, "next", step_jstr(s->on_evaluation_error_name));
			step_event(st, i, 1, "stage.evaluation_error", detail);
		}
		step_skip_unreachable(st, i, next);
		step_route(st, i, next, branch, d.ok ? WFE_COMPLETED : WFE_FAILED);
	}
	else if (s->kind == WFE_K_FORK)
	{
		json_object *result = json_object_new_object();
		json_object *detail = json_object_new_object();
		json_object *branches = json_object_new_array();

		for (int k = 0; k < s->ntargets; k++)
			json_object_array_add(branches, step_jname(st, s->targets[k]));
		json_object_object_add(result, "branches", json_object_get(branches));
		step_resolve(st, i, WFE_COMPLETED, result, NULL, WFE_KEEP_BRANCH);
		json_object_object_add(detail, "branches", branches);
		step_event(st, i, 1, "stage.forked", detail);
		/* each branch runs under its own name, which its join records */
		for (int k = 0; k < s->ntargets; k++)
			step_activate(st, s->targets[k], s->targets[k], WFE_COMPLETED);
	}
	else if (s->kind == WFE_K_WORKFLOW)
		step_release_child(st, i, 0);
	else
	{
		const char *input;
		const char *code = NULL,
				   *message = NULL;

		if (s->kind == WFE_K_MAP)
		{
			step_map_release(st, i);
			st->depth--;
			return;
		}
		/* a wait binds nothing; a sleep binds its `until`, if it has one */
		input = s->kind == WFE_K_FINALISER ? step_finaliser_input(st)
			: (s->kind == WFE_K_WAIT || (s->kind == WFE_K_SLEEP && s->input == NULL)) ? "{}"
			: step_bind_stage(st, i, NULL, &code, &message);
		if (input != NULL && step_bind_rate_key(st, i, &code, &message) < 0)
			input = NULL;
		if (input != NULL && step_bind_concurrency_key(st, i, &code, &message) < 0)
			input = NULL;
		if (input == NULL)
			step_bind_failed(st, i, code, message);
		else if (s->kind == WFE_K_WAIT || s->kind == WFE_K_SLEEP)
			step_park(st, i, s->input ? input : NULL);
		else if (step_cached(st, i))
			step_cached_release(st, i, input, 1);
		else
			step_enqueue(st, i, input, 1, NULL);
	}
	st->depth--;
}

/* Stage i's input did not bind (code, message): its attempt fails without retry, routed on. */
void
step_bind_failed(wfe_step *st, int i, const char *code, const char *message)
{
	wfe_row    *r = wfe_step_row(st, i);
	wfe_op	   *op = step_emit(st, WFE_OP_BIND_FAILED, i);
	json_object *error = json_object_new_object();
	json_object *detail = json_object_new_object();

	json_object_object_add(error, "code", step_jstr(code));
	json_object_object_add(error, "message", step_jstr(message));
	op->json = step_json_text(st, error);
	r->state = WFE_FAILED;
	r->attempt += 1;			/* 1, or the next one in a reopened run */
	r->fence = step_next_fence(st, r->fence);
	r->outcome = WFE_FAILED;
	op->attempt = r->attempt;
	op->fence = r->fence;
	json_object_object_add(detail, "code", step_jstr(code));
	json_object_object_add(detail, "error", step_jstr(message));
	step_event(st, i, r->attempt, "stage.binding_failed", detail);
	stage_done(st, i, WFE_FAILED);
}

/* ---------------------------------------------------------------------
 * The tasks form
 * --------------------------------------------------------------------- */

/* When no awaited task is waiting or under way, the run's intent is completed. */
static void
tasks_maybe_complete(wfe_step *st)
{
	if (st->run->intent >= 0)
		return;
	step_load_all(st);
	for (int i = 0; i < st->rp->nstages; i++)
	{
		wfe_row    *r = &st->rows[i];

		if (r->exists && st->rp->stages[i].kind != WFE_K_FINALISER && r->awaits &&
			(r->state == WFE_WAITING || WFE_STATE_IN_FLIGHT(r->state)))
			return;
	}
	step_set_intent(st, WFE_RUN_COMPLETED, "every awaited task finished");
}

/* Release a waiting task whose dependencies are all done, or skip it. */
static void
task_consider(wfe_step *st, int i)
{
	const wfe_rp_stage *s = &st->rp->stages[i];
	wfe_row    *r = wfe_step_row(st, i);
	const char *reason = NULL;

	if (!r->exists || r->state != WFE_WAITING)
		return;
	if (s->ncontexts >= 0)
	{
		const char *ctx = st->run->execution_context ? st->run->execution_context : "";
		int			in = 0;

		for (int k = 0; k < s->ncontexts; k++)
			in |= s->contexts[k] && strcmp(s->contexts[k], ctx) == 0;
		if (!in)
			reason = "context_gated";	/* pruned before anything is resolved */
	}
	if (reason == NULL)
	{
		int			bad = 0;

		for (int k = 0; k < s->ndeps; k++)
		{
			wfe_row    *d = wfe_step_row(st, s->deps[k]);

			if (!d->exists)
				continue;
			if (d->state == WFE_WAITING || WFE_STATE_IN_FLIGHT(d->state))
				return;			/* not all dependencies are done yet */
			if (!(d->state == WFE_COMPLETED || (d->state == WFE_SKIPPED && s->allow_skipped)))
				bad = 1;
		}
		if (bad)
			reason = "dependency_failed";
		else if (s->nrequires > 0)
		{
			int			missing;

			step_hold(st, step_required_outputs(st, i, &missing));
			if (missing)
				reason = "missing_input";
		}
	}
	if (reason == NULL)
	{
		step_activate(st, i, -1, WFE_COMPLETED);
		return;
	}
	step_skip(st, i, reason, -1);
	task_done(st, i);
}

/* A task ended (or was skipped): a critical failure aborts the run, else its dependents are considered. */
static void
task_done(wfe_step *st, int i)
{
	const wfe_rp_stage *s = &st->rp->stages[i];
	wfe_row    *r = wfe_step_row(st, i);

	if (st->run->intent >= 0)
		return;					/* a detached task finishing after the intent */
	if (++st->depth > STEP_MAX_DEPTH)
		abort();
	if ((r->state == WFE_FAILED || r->state == WFE_TIMED_OUT) && r->awaits && s->critical)
	{
		/* a critical failure halts the run: nothing unstarted is dispatched */
		step_set_intent(st, WFE_RUN_FAILED,
				   wfe_arena_printf(&st->arena, "critical task %s failed", s->name));
		st->depth--;
		return;
	}
	for (int k = 0; k < s->ndependents; k++)
		task_consider(st, s->dependents[k]);
	tasks_maybe_complete(st);
	st->depth--;
}

/* ---------------------------------------------------------------------
 * Attempts
 * --------------------------------------------------------------------- */

/* A stage reached its final state: its route, the task graph, or the next finaliser. */
static void
stage_done(wfe_step *st, int i, wfe_state outcome)
{
	const wfe_rp_stage *s = &st->rp->stages[i];

	if (i == st->elem_map && st->elem >= 0)
	{
		/* an element ended: its map counts it (and may end), nothing routes */
		step_map_element_done(st, i, outcome);
		return;
	}
	if (s->kind == WFE_K_FINALISER)
		step_next_finaliser(st);
	else if (st->rp->tasks_form)
		task_done(st, i);
	else
		step_route(st, i, outcome == WFE_COMPLETED ? s->on_success :
				   outcome == WFE_TIMED_OUT ? s->on_timeout : s->on_failure,
				   wfe_step_row(st, i)->branch, outcome);
}

/* A stage ended: route on (for map.c). */
void
step_stage_done(wfe_step *st, int i, wfe_state outcome)
{
	stage_done(st, i, outcome);
}

/* Delay before the attempt after attempt n: capped exponential backoff with jitter. */
static int64_t
backoff_us(wfe_step *st, const wfe_retry *r, int attempt)
{
	double		base = r->initial_ms * pow(r->multiplier, attempt - 1);
	double		ms;

	if (base > r->max_ms)
		base = r->max_ms;
	switch (r->jitter)
	{
		case WFE_JITTER_FULL:
			ms = st->io->random(st->io->arg) * base;
			break;
		case WFE_JITTER_EQUAL:
			ms = base / 2 + st->io->random(st->io->arg) * base / 2;
			break;
		default:
			ms = base;
	}
	return llround(ms * 1000.0);
}

/* An attempt failed: retry it later while attempts remain, else fail the stage and route on. */
void
step_attempt_failed(wfe_step *st, int i, const char *error, const char *code, int retryable,
			   wfe_state final_state)
{
	const wfe_retry *retry = &st->rp->stages[i].retry;
	wfe_row    *r = wfe_step_row(st, i);
	wfe_op	   *op;
	json_object *detail = json_object_new_object();

	if (retryable && r->attempt < retry->max_attempts)
	{
		op = step_emit(st, WFE_OP_RETRY, i);
		op->json = error;
		op->delay_us = backoff_us(st, retry, r->attempt);
		op->attempt = r->attempt;
		op->fence = r->fence;
		r->state = WFE_RETRY_SCHEDULED;
		r->outcome = WFE_FAILED;
		json_object_object_add(detail, "delay_ms", json_object_new_int64(llround(op->delay_us / 1000.0)));
		json_object_object_add(detail, "error", step_jparse(code));
		step_event(st, i, r->attempt, "stage.retry_scheduled", detail);
		return;
	}
	op = step_emit(st, WFE_OP_FAIL, i);
	op->state = final_state;
	op->json = error;
	op->flag = retryable;		/* retries exhausted: a dead letter */
	op->attempt = r->attempt;
	step_cache_leader_ended(st, i);
	r->state = final_state;
	r->outcome = WFE_FAILED;
	if (final_state == WFE_FAILED)	/* a timeout was recorded when it fired */
	{
		json_object_object_add(detail, "error", step_jparse(code));
		json_object_object_add(detail, "retryable", json_object_new_boolean(retryable));
		step_event(st, i, r->attempt, "stage.failed", detail);
	}
	else
		json_object_put(detail);
	/* a join records the branch's real terminal state (failed or timed_out) */
	stage_done(st, i, final_state);
}

/*
 * Stage i completed with result.  Only an accepted, valid result of an
 * attempt run under a cache key is stored (never an operator's, never a
 * late or stale report: those never get here), and that attempt's end
 * wakes whoever waited on it.
 */
void
step_completed(wfe_step *st, int i, const char *result, completion how)
{
	const wfe_rp_stage *s = &st->rp->stages[i];
	wfe_row    *r = wfe_step_row(st, i);
	json_object *detail = NULL;

	r->result = wfe_arena_strdup(&st->arena, result ? result : "{}");
	if (how != FROM_CACHE)
	{
		wfe_op	   *op = step_emit(st, WFE_OP_COMPLETE, i);

		op->attempt = r->attempt;
		op->json = r->result;
	}
	if (how == BY_ATTEMPT && r->cache_key != NULL && step_cached(st, i))
		step_emit(st, WFE_OP_CACHE_STORE, i)->text = r->cache_key;
	if (how == BY_ATTEMPT)
		step_cache_leader_ended(st, i);
	r->state = WFE_COMPLETED;
	r->outcome = WFE_COMPLETED;
	if (how == FROM_CACHE)
	{
		detail = json_object_new_object();
		json_object_object_add(detail, "cache", json_object_new_string("hit"));
	}
	step_event(st, i, how == FROM_CACHE ? 0 : r->attempt, "stage.completed", detail);
	if (st->rp->tasks_form && s->kind != WFE_K_FINALISER && s->nproduces > 0 &&
		!(i == st->elem_map && st->elem >= 0))
	{
		/* outputs are write-once per (run, task, key) */
		json_object *keys = json_object_new_array();
		wfe_op	   *op = step_emit(st, WFE_OP_OUTPUTS, i);

		for (int k = 0; k < s->nproduces; k++)
			json_object_array_add(keys, step_jstr(s->produces[k].key));
		op->json = step_json_text(st, keys);
		op->json2 = s->kind == WFE_K_MAP ? step_map_outputs(st, i, r->result) : r->result;
	}
	stage_done(st, i, WFE_COMPLETED);
}

void
wfe_step_completed(wfe_step *st, int i, const char *result)
{
	step_completed(st, i, result, BY_ATTEMPT);
}

void
wfe_step_failed(wfe_step *st, int i, const char *error, int retryable)
{
	json_object *e = step_hold(st, step_jparse(error));
	json_object *code = NULL;

	if (json_object_is_type(e, json_type_object))
		json_object_object_get_ex(e, "code", &code);
	step_attempt_failed(st, i, error,
				   code ? wfe_arena_strdup(&st->arena, json_object_to_json_string_ext(code, JSON_C_TO_STRING_PLAIN))
				   : NULL, retryable, WFE_FAILED);
}

void
wfe_step_invalid_result(wfe_step *st, int i, const char *problem)
{
	wfe_row    *r = wfe_step_row(st, i);
	json_object *detail = json_object_new_object();
	json_object *error = json_object_new_object();

	json_object_object_add(detail, "error", step_jstr(problem));
	step_event(st, i, r->attempt, "stage.invalid_result", detail);
	json_object_object_add(error, "code", json_object_new_string("result.schema"));
	json_object_object_add(error, "message", step_jstr(problem));
	step_attempt_failed(st, i, step_json_text(st, error), "\"result.schema\"", 1, WFE_FAILED);
}

void
wfe_step_expired(wfe_step *st, int i, const char *clock, const char *deadline_text,
				 const char *deadline_json)
{
	wfe_row    *r = wfe_step_row(st, i);
	json_object *detail = json_object_new_object();
	json_object *error = json_object_new_object();
	const char *code = wfe_arena_printf(&st->arena, "timeout.%s", clock);
	wfe_op	   *op;

	/* the expired attempt is fenced: whatever it reports later is stale */
	op = step_emit(st, WFE_OP_TIME_OUT, i);
	r->state = WFE_TIMED_OUT;
	r->fence = step_next_fence(st, r->fence);
	op->fence = r->fence;
	json_object_object_add(detail, "clock", step_jstr(clock));
	json_object_object_add(detail, "deadline_at", step_jparse(deadline_json));
	step_event(st, i, r->attempt, "stage.timed_out", detail);
	json_object_object_add(error, "code", step_jstr(code));
	json_object_object_add(error, "message", json_object_new_string(
						   wfe_arena_printf(&st->arena, "%s deadline passed at %s", clock, deadline_text)));
	step_attempt_failed(st, i, step_json_text(st, error), wfe_step_json_str(st, code), 1, WFE_TIMED_OUT);
}

void
wfe_step_retry_due(wfe_step *st, int i, int attempt, int64_t fence)
{
	wfe_row    *r = wfe_step_row(st, i);
	int			intent = st->run->intent;

	/* a timer made for a superseded attempt or fence does nothing */
	if (r->exists && r->state == WFE_RETRY_SCHEDULED && r->attempt == attempt && r->fence == fence &&
		(intent < 0 || st->rp->stages[i].kind == WFE_K_FINALISER ||
		 (!r->awaits && intent == WFE_RUN_COMPLETED)))
	{
		if (step_runs_child(st, i))
			step_release_child(st, i, 1);	/* a new child run */
		else
			step_enqueue(st, i, NULL, 1, NULL);
	}
}

void
wfe_step_run_deadline(wfe_step *st, const char *deadline_json)
{
	json_object *detail;

	if (st->run->intent >= 0)
		return;
	detail = json_object_new_object();
	json_object_object_add(detail, "deadline_at", step_jparse(deadline_json));
	step_event(st, -1, 0, "run.deadline_expired", detail);
	step_set_intent(st, WFE_RUN_FAILED, "run deadline passed");
}

void
wfe_step_cancel(wfe_step *st, const char *reason)
{
	step_set_intent(st, WFE_RUN_CANCELLED, reason);
}

/*
 * A firing, expiry or action of this run raised, so the run cannot go on
 * as planned (a poisoned context, a bug): record the error and fail the
 * run, fencing what is in flight and running its finalisers, whose input
 * does not depend on the run's data.
 */
void
wfe_step_engine_error(wfe_step *st, int i, const char *error_json)
{
	json_object *detail = json_object_new_object();

	if (st->run->intent >= 0)
		return;
	json_object_object_add(detail, "error", step_jparse(error_json));
	step_event(st, i, i >= 0 ? wfe_step_row(st, i)->attempt : 0, "run.engine_error", detail);
	step_set_intent(st, WFE_RUN_FAILED, "engine error");
}

void
wfe_step_start(wfe_step *st)
{
	step_event(st, -1, 0, "run.started", NULL);
	if (!st->rp->tasks_form)
	{
		if (st->rp->entry >= 0)
			step_activate(st, st->rp->entry, -1, WFE_COMPLETED);
		return;
	}
	for (int i = 0; i < st->rp->first_finaliser; i++)
		if (st->rp->stages[i].ndeps == 0)
			task_consider(st, i);
	tasks_maybe_complete(st);
}

void
wfe_step_accepted(wfe_step *st, int i, const char *worker_id)
{
	wfe_row    *r = wfe_step_row(st, i);
	json_object *detail = json_object_new_object();

	step_emit(st, WFE_OP_ACCEPT, i)->text = worker_id;
	r->state = WFE_RUNNING;
	json_object_object_add(detail, "worker_id", step_jstr(worker_id));
	step_event(st, i, r->attempt, "stage.accepted", detail);
}

void
wfe_step_heartbeat(wfe_step *st, int i)
{
	step_emit(st, WFE_OP_HEARTBEAT, i);
}

/* ---------------------------------------------------------------------
 * The callback gate and result checks
 * --------------------------------------------------------------------- */

static const char *const callback_names[] = {"accept_task", "heartbeat", "complete_task", "fail_task"};

/* Record a rejection of a callback that names the current attempt. */
static const char *
reject(wfe_step *st, int i, wfe_callback cb, const char *outcome)
{
	wfe_row    *r = wfe_step_row(st, i);
	json_object *detail = json_object_new_object();

	json_object_object_add(detail, "callback", step_jstr(callback_names[cb]));
	json_object_object_add(detail, "state", step_jstr(wfe_state_name(r->state)));
	json_object_object_add(detail, "reported", r->outcome ? step_jstr(wfe_state_name(r->outcome)) : NULL);
	step_event(st, i, r->attempt, wfe_arena_printf(&st->arena, "callback.%s", outcome), detail);
	return outcome;
}

/* Record a rejection of a callback that does not name the current attempt. */
static const char *
refuse(wfe_step *st, int i, wfe_callback cb, int attempt, int64_t fence, const char *outcome)
{
	wfe_row    *r = wfe_step_row(st, i);
	json_object *detail = json_object_new_object();

	json_object_object_add(detail, "callback", step_jstr(callback_names[cb]));
	json_object_object_add(detail, "current_attempt", json_object_new_int(r->attempt));
	/* the fence reported; the current one stays on the stage row */
	step_event_fenced(st, i, attempt, wfe_arena_printf(&st->arena, "callback.%s", outcome), detail, fence);
	return outcome;
}

const char *
wfe_step_gate(wfe_step *st, int i, wfe_callback cb, int attempt, int64_t fence, int same_value)
{
	wfe_row    *r = wfe_step_row(st, i);
	int			report = (cb == WFE_CB_COMPLETE || cb == WFE_CB_FAIL);
	int			current = r->attempt > 0 && attempt == r->attempt && fence == r->fence;
	int			intent = st->run->intent;

	/* a worker whose report was taken learns so, even after the run ended */
	if (report && current && r->outcome != 0)
		return reject(st, i, cb,
					  (r->outcome == (cb == WFE_CB_COMPLETE ? WFE_COMPLETED : WFE_FAILED) && same_value)
					  ? "duplicate" : "conflict");
	/* finalisers complete a run after its intent; so do the tasks it did not wait for */
	if (intent >= 0 && st->rp->stages[i].kind != WFE_K_FINALISER &&
		(r->awaits || intent != WFE_RUN_COMPLETED))
		return refuse(st, i, cb, attempt, fence, "late");
	if (!current)
		return refuse(st, i, cb, attempt, fence, "stale");
	switch (cb)
	{
		case WFE_CB_ACCEPT:
			if (r->state != WFE_QUEUED && r->state != WFE_DISPATCHED)
				/* a redelivered envelope: the attempt is under way or done */
				return reject(st, i, cb, (r->state == WFE_RUNNING || r->outcome) ? "duplicate" : "stale");
			break;
		case WFE_CB_HEARTBEAT:
			if (r->state != WFE_RUNNING)
				return reject(st, i, cb, "stale");
			break;
		default:
			/* only the holder of a claimed or accepted attempt reports it */
			if (r->state != WFE_RUNNING)
				return reject(st, i, cb, "stale");
	}
	return NULL;
}

const char *
wfe_step_result_problem(wfe_step *st, int i, const char *result_text, json_object *schema)
{
	const wfe_rp_stage *s = &st->rp->stages[i];
	json_object *result = step_hold(st, step_jparse(result_text));

	if (schema != NULL)
	{
		char		msg[512];

		if (wfe_schema_validate(schema, result, msg, sizeof(msg)) != WFE_SCHEMA_VALID)
			return wfe_arena_strdup(&st->arena, msg);
	}
	if (!st->rp->tasks_form || s->kind == WFE_K_FINALISER || s->kind == WFE_K_MAP)
		return NULL;			/* a map's produces hold its aggregated result */
	for (int k = 0; k < s->nproduces; k++)
	{
		const char *key = s->produces[k].key;
		const char *type = s->produces[k].type ? s->produces[k].type : "object";
		json_object *v;
		const char *have;
		int			fits;

		if (!json_object_is_type(result, json_type_object) ||
			!json_object_object_get_ex(result, key, &v))
			return wfe_arena_printf(&st->arena, "result lacks declared output \"%s\"", key);
		have = v == NULL ? "null" : wfe_json_type_name(v);
		if (strcmp(have, "integer") == 0)
			have = "number";
		if (strcmp(type, "integer") == 0)
			fits = v && (json_object_is_type(v, json_type_int) ||
						 (json_object_is_type(v, json_type_double) &&
						  floor(json_object_get_double(v)) == json_object_get_double(v)));
		else if (strcmp(type, "number") == 0 || strcmp(type, "string") == 0 ||
				 strcmp(type, "boolean") == 0 || strcmp(type, "array") == 0)
			fits = strcmp(have, type) == 0;
		else
			fits = strcmp(have, "object") == 0;	/* object, and names ending in Object */
		if (!fits)
			return wfe_arena_printf(&st->arena, "output \"%s\" is %s, declared %s", key, have, type);
	}
	return NULL;
}
