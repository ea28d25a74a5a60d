/*
 * step_cache.c — the result cache at release (dsl.md "Result cache"): a
 * cached stage's release looks its key up (the server computes it and
 * reads the entry: io->cache_entry), completes from a sound entry,
 * records an unsound one, waits on an attempt in flight under the key, or
 * runs; an attempt run under a key stores its result and wakes its
 * waiters when it ends.
 */
#include <stdio.h>
#include <string.h>

#include <json-c/json.h>

#include "step_internal.h"

/* Does stage i keep its results in the cache? */
int
step_cached(wfe_step *st, int i)
{
	const wfe_rp_stage *s = &st->rp->stages[i];

	return s->cache_ttl_ms >= 0 && s->kind != WFE_K_FINALISER && s->contract != NULL;
}

/* The attempt stage i ran under its cache key is over, whatever it did: its waiters go on. */
void
step_cache_leader_ended(wfe_step *st, int i)
{
	wfe_row    *r = wfe_step_row(st, i);

	if (r->cache_key != NULL && step_cached(st, i))
		step_emit(st, WFE_OP_CACHE_WAKE, i)->text = r->cache_key;
}

/* An event's detail about an entry: its key and where its result came from. */
static json_object *
cache_detail(const wfe_cache_entry *e)
{
	json_object *d = json_object_new_object();

	json_object_object_add(d, "key", step_jstr(e->key));
	if (e->origin != NULL)
		json_object_object_add(d, "origin", step_jparse(e->origin));
	return d;
}

/*
 * This run's own stages, as this step sees them: the server's answers
 * (cache_entry, cache_leader) come from the rows as they were before the
 * step, so what the step itself did to a key is looked up here.
 *
 * A result this step stored under key (a stage that completed earlier in
 * the step), as a found entry, or 0.
 */
static int
stored_in_step(wfe_step *st, const char *key, wfe_cache_entry *e)
{
	for (int k = st->nops - 1; k >= 0; k--)
	{
		const wfe_op *op = &st->ops[k];

		if (op->kind == WFE_OP_CACHE_STORE && strcmp(op->text, key) == 0)
		{
			const wfe_row *r = &st->rows[op->stage];

			e->found = 1;
			e->digest_ok = 1;
			e->result = r->result;
			e->origin = wfe_arena_printf(&st->arena, "{\"run_id\": %lld, \"stage\": %s, \"attempt\": %d}",
										 (long long) st->run->run_id,
										 wfe_step_json_str(st, st->rp->stages[op->stage].name), r->attempt);
			return 1;
		}
	}
	return 0;
}

/*
 * An attempt of this run in flight under key, as JSON, or NULL (the
 * server's cache_leader answers for the other runs): one this very step
 * may have queued (a fork releasing two branches with the same input),
 * and none that ended in it.
 */
static const char *
leader_in_run(wfe_step *st, const char *key)
{
	for (int k = 0; k < st->rp->nstages; k++)
	{
		const wfe_row *r = &st->rows[k];

		if (r->loaded && r->exists && r->cache_key != NULL && strcmp(r->cache_key, key) == 0 &&
			WFE_STATE_IN_FLIGHT(r->state))
			return wfe_arena_printf(&st->arena, "{\"run_id\": %lld, \"stage\": %s, \"attempt\": %d}",
									(long long) st->run->run_id, wfe_step_json_str(st, st->rp->stages[k].name),
									r->attempt);
	}
	return NULL;
}

/*
 * Release cached stage i with its bound input.  A sound entry completes it
 * without an attempt; an unsound one (digest mismatch: corrupt; refused by
 * the current output contract: invalid) is recorded and counts as a miss.
 * On a miss the stage waits on an attempt already in flight under the same
 * key (when may_wait), else it is queued under the key.
 */
void
step_cached_release(wfe_step *st, int i, const char *input, int may_wait)
{
	wfe_row    *r = wfe_step_row(st, i);
	wfe_cache_entry e;
	const char *leader;
	const char *key;

	memset(&e, 0, sizeof(e));
	st->io->cache_entry(st->io->arg, i, input, &e);
	key = wfe_arena_strdup(&st->arena, e.key);
	if (!e.found)
		(void) stored_in_step(st, key, &e);
	if (e.found)
	{
		const char *result = wfe_arena_strdup(&st->arena, e.result ? e.result : "null");
		const char *problem = e.digest_ok
			? wfe_step_result_problem(st, i, result, st->io->output_schema(st->io->arg, i))
			: "the stored result does not match its digest";
		json_object *detail = cache_detail(&e);

		if (problem == NULL)
		{
			wfe_op	   *op = step_emit(st, WFE_OP_CACHE_HIT, i);

			op->text = key;
			op->json = result;
			op->json2 = input;
			op->flag = !may_wait;
			r->cache_key = key;
			r->fence = step_next_fence(st, r->fence);
			op->fence = r->fence;
			json_object_object_add(detail, "coalesced", json_object_new_boolean(!may_wait));
			step_event(st, i, 0, "stage.cache_hit", detail);
			step_completed(st, i, result, FROM_CACHE);
			return;
		}
		json_object_object_add(detail, "error", step_jstr(problem));
		step_event(st, i, 0, e.digest_ok ? "stage.cache_invalid" : "stage.cache_corrupt", detail);
	}
	if (may_wait && ((leader = leader_in_run(st, key)) != NULL ||
					 (leader = st->io->cache_leader(st->io->arg, key)) != NULL))
	{
		wfe_op	   *op = step_emit(st, WFE_OP_CACHE_WAIT, i);
		json_object *detail = json_object_new_object();

		op->text = key;
		op->json = input;
		r->cache_key = key;
		json_object_object_add(detail, "key", step_jstr(key));
		json_object_object_add(detail, "leader", step_jparse(leader));
		step_event(st, i, 0, "stage.cache_waiting", detail);
		return;
	}
	step_enqueue(st, i, input, 1, key);
}

void
wfe_step_cache_ready(wfe_step *st, int i, const char *input)
{
	wfe_row    *r = wfe_step_row(st, i);

	/* skipped, cancelled or released since: nothing waits any more */
	if (!r->exists || r->state != WFE_WAITING || r->cache_key == NULL || !step_cached(st, i) ||
		st->run->intent >= 0)
		return;
	/* woken once: it completes from the entry or runs itself, and waits no more */
	step_cached_release(st, i, input ? input : "{}", 0);
}
