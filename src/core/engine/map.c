/*
 * map.c — the step core's map stages (dsl.md "New in 0.3.0", runtime.md
 * "Map elements").
 *
 * A map binds its items when released, and each element becomes a unit of
 * work of its own, NAME[i], with the map's item executor: its own row,
 * attempts, fence, retries and deadlines, reported about like any stage.
 * The step core works on one element at a time through the map's stage
 * index (wfe_step_element): while a step is about an element, that stage's
 * row is the element's, the ops about it name the element, and its end is
 * counted here instead of routed.
 *
 * The cost rule: no step reads or writes every element but two -- the
 * release, which binds and creates them (once), and the one final
 * aggregation of their results.  An element's end reads and writes its own
 * row, the map's counter row (wfe_map_counts) and, while elements wait
 * for max_concurrency, the row of the next one to release (a held one --
 * an operator's redrive that found no slot -- first).
 *
 * An item's keyed concurrency (concurrency: {key, max}) binds one key per
 * element at the release, with item and item_index, and MAP_START writes
 * it into each element's row; the claim gates elements by it as any stage.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include "core/base/json.h"
#include "core/jsonschema/jsonschema.h"
#include "bind.h"
#include "step_internal.h"

/* The longest element index: the 31 bits a stage row's element column holds. */
#define MAP_MAX_INDEX 2147483647LL

int
wfe_map_element_of(const wfe_run_plan *rp, const char *name, int64_t *elem)
{
	const char *open = strrchr(name, '[');
	size_t		len = strlen(name);
	int64_t		v = 0;
	char		base[128];
	int			i;

	if (open == NULL || len < 4 || name[len - 1] != ']' || (size_t) (open - name) >= sizeof(base))
		return -1;
	/* a canonical index: digits, no sign, no leading zero (so one name per element) */
	if (open + 1 == name + len - 1 || (open[1] == '0' && open + 2 != name + len - 1))
		return -1;
	for (const char *p = open + 1; p < name + len - 1; p++)
	{
		if (*p < '0' || *p > '9')
			return -1;
		v = v * 10 + (*p - '0');
		if (v > MAP_MAX_INDEX)
			return -1;
	}
	memcpy(base, name, open - name);
	base[open - name] = '\0';
	i = wfe_run_plan_find(rp, base);
	if (i < 0 || rp->stages[i].kind != WFE_K_MAP)
		return -1;
	*elem = v;
	return i;
}

void
wfe_step_element(wfe_step *st, int i, int64_t elem)
{
	st->elem_map = i;
	st->elem = elem;
	st->elem_row.loaded = 0;
}

/* The current element's row (loaded on first use). */
wfe_row *
step_element_row(wfe_step *st)
{
	wfe_row    *r = &st->elem_row;

	if (!r->loaded)
	{
		memset(r, 0, sizeof(*r));
		r->branch = -1;
		st->io->load_element(st->io->arg, st->elem_map, st->elem, r);
		r->loaded = 1;
	}
	return r;
}

/* The map's counter row, read once per step and kept up to date. */
static wfe_map_counts *
counts(wfe_step *st, int i)
{
	if (!st->counts_loaded)
	{
		memset(&st->counts, 0, sizeof(st->counts));
		st->io->map_counts(st->io->arg, i, &st->counts);
		st->counts_loaded = 1;
	}
	return &st->counts;
}

/* Write the counter row as the core now has it. */
static void
write_counts(wfe_step *st, int i)
{
	int64_t		elem = st->elem;
	wfe_op	   *op;

	st->elem = -1;
	op = step_emit(st, WFE_OP_MAP_COUNTS, i);
	op->counts = *counts(st, i);
	st->elem = elem;
}

/* The map's counter row and its write, for an operator's action on an element (step_operate_element.c). */
wfe_map_counts *
step_map_counts(wfe_step *st, int i)
{
	return counts(st, i);
}

void
step_map_write_counts(wfe_step *st, int i)
{
	write_counts(st, i);
}

/* Elements released and not ended, less those held for a slot: what max_concurrency bounds. */
int64_t
step_map_under_way(const wfe_map_counts *c)
{
	return c->released - c->completed - c->failed - c->held;
}

/* Has map stage i a slot for one more element under way? */
int
step_map_has_slot(wfe_step *st, int i)
{
	const wfe_rp_stage *s = &st->rp->stages[i];

	return s->max_concurrency < 0 || step_map_under_way(counts(st, i)) < s->max_concurrency;
}

/*
 * Release the held elements (redriven while max_concurrency was full:
 * step_operate_element.c) that now have a slot, lowest index first, before
 * any element not released yet: they were under way before.
 */
static void
release_held(wfe_step *st, int i)
{
	wfe_map_counts *c = counts(st, i);

	while (c->held > 0 && step_map_has_slot(st, i))
	{
		int64_t		k = st->io->map_held ? st->io->map_held(st->io->arg, i, c->released) : -1;

		c->held--;
		if (k < 0)
			continue;			/* none waits any more (ended by an operator): nothing to release */
		wfe_step_element(st, i, k);
		if (step_runs_child(st, i))
			step_release_child(st, i, 1);	/* a new child run */
		else
			step_enqueue(st, i, NULL, 1, NULL);
	}
}

/*
 * Release element k (its row is the step's element row): a workflow item
 * starts its child run; a cached item goes through the result cache under
 * its own key -- the key of its own bound input, so one element's entry
 * answers no other (dsl.md: each element has its own cache key).  A hit
 * completes the element here: step_map_element_done counts it and keeps
 * its result for the aggregation (in_release).  An element never waits on
 * another attempt in flight under its key (so no wake-up has to find an
 * element): it runs, and stores its result.  input: its bound input when
 * known (the map's release: a child run's start needs it before the rows
 * are written), else NULL.
 */
static void
release_element(wfe_step *st, int i, const char *input)
{
	if (st->rp->stages[i].item_workflow)
	{
		step_release_element_child(st, i, input);
		return;
	}
	if (!step_cached(st, i))
	{
		step_enqueue(st, i, NULL, 1, NULL);	/* its input was bound at the map's release */
		return;
	}
	if (input == NULL)
		input = st->io->stage_input(st->io->arg, i);
	st->in_release = 1;
	step_cached_release(st, i, input ? input : "{}", 0);
	st->in_release = 0;
}

/*
 * Release the elements max_concurrency now allows, in index order.  fresh:
 * the rows were created in this step (their state is known: waiting, no
 * attempt) so they are not read back; inputs: their bound inputs then.
 */
static void
release_more(wfe_step *st, int i, int fresh, json_object *inputs)
{
	const wfe_rp_stage *s = &st->rp->stages[i];
	wfe_map_counts *c = counts(st, i);
	int64_t		was = st->elem;
	wfe_row		was_row = st->elem_row;	/* the ended element's, as this step left it */

	if (c->held > 0)
		release_held(st, i);
	while (c->released < c->total &&
		   (s->max_concurrency < 0 || step_map_under_way(c) < s->max_concurrency))
	{
		int64_t		k = c->released;

		wfe_step_element(st, i, k);
		if (fresh)
		{
			wfe_row    *r = &st->elem_row;

			memset(r, 0, sizeof(*r));
			r->loaded = 1;
			r->exists = 1;
			r->state = WFE_WAITING;
			r->branch = -1;
			r->awaits = st->rows[i].awaits;
			r->queue = s->item_worker ? s->item_queue : NULL;
		}
		c->released++;
		/*
		 * waiting; or cancelled, as read before this step's writes: an
		 * operator's reopening of the failed map reset it to waiting in
		 * this very step (step_operate_element.c), and with a running map
		 * nothing else leaves an unreleased element cancelled
		 */
		if (step_element_row(st)->exists &&
			(step_element_row(st)->state == WFE_WAITING || step_element_row(st)->state == WFE_CANCELLED))
			release_element(st, i, inputs ? json_object_get_string(json_object_array_get_idx(inputs, (size_t) k))
							: NULL);
	}
	st->elem = was;
	st->elem_row = was_row;
}

/* The map stage itself (not an element) completes with its aggregated result. */
static void
map_complete(wfe_step *st, int i, const char *result)
{
	wfe_step_element(st, i, -1);
	step_completed(st, i, result, BY_ATTEMPT);
}

/*
 * Every element has ended: the one final aggregation.  last: the element
 * whose end this step decides (-1: none), with its result (NULL: failed);
 * the elements the cache completed in this step are read from map_hits,
 * their rows not being written yet.
 */
static void
aggregate(wfe_step *st, int i, int64_t last, const char *last_result)
{
	const char *result = st->io->map_results(st->io->arg, i, last, last_result);

	if (st->map_hits != NULL)
	{
		json_object *agg = step_hold(st, step_jparse(result));
		json_object *items = json_object_object_get(agg, "items");
		json_object *failed = json_object_object_get(agg, "failed");
		json_object *still = json_object_new_array();

		json_object_object_foreach(st->map_hits, key, value)
			json_object_array_put_idx(items, (size_t) strtoll(key, NULL, 10), json_object_get(value));
		for (size_t k = 0; k < json_object_array_length(failed); k++)
		{
			json_object *e = json_object_array_get_idx(failed, k);
			char		key[24];

			snprintf(key, sizeof(key), "%lld", (long long) json_object_get_int64(e));
			if (!json_object_object_get_ex(st->map_hits, key, NULL))
				json_object_array_add(still, json_object_get(e));
		}
		json_object_object_add(agg, "failed", still);
		result = step_json_text(st, json_object_get(agg));
	}
	map_complete(st, i, result);
}

/* The map fails without retry (binding, limits, tolerated_failures passed). */
static void
map_fail(wfe_step *st, int i, const char *code, const char *message)
{
	json_object *error = json_object_new_object();
	const char *text;

	wfe_step_element(st, i, -1);
	json_object_object_add(error, "code", step_jstr(code));
	json_object_object_add(error, "message", step_jstr(message));
	text = step_json_text(st, error);
	step_attempt_failed(st, i, text, wfe_step_json_str(st, code), 0, WFE_FAILED);
}

/* A map that cannot start: failed at release with a binding-class error. */
void
step_map_unbound(wfe_step *st, int i, const char *code, const char *message)
{
	wfe_row    *r = wfe_step_row(st, i);
	wfe_op	   *op = step_emit(st, WFE_OP_BIND_FAILED, i);
	json_object *error = json_object_new_object();
	json_object *detail = json_object_new_object();

	json_object_object_add(error, "code", step_jstr(code));
	json_object_object_add(error, "message", step_jstr(message));
	op->json = step_json_text(st, error);
	r->state = WFE_FAILED;
	r->attempt += 1;
	r->fence = step_next_fence(st, r->fence);
	r->outcome = WFE_FAILED;
	op->attempt = r->attempt;
	op->fence = r->fence;
	json_object_object_add(detail, "code", step_jstr(code));
	json_object_object_add(detail, "error", step_jstr(message));
	step_event(st, i, r->attempt, "stage.binding_failed", detail);
	step_stage_done(st, i, WFE_FAILED);
}

/*
 * The map is released: bind its items, check them (an array, within
 * wfe.max_map_items), bind each element's input with item and item_index,
 * start the map (its elements' rows and its counter row, in one op), and
 * release the first elements.
 */
void
step_map_release(wfe_step *st, int i)
{
	const wfe_rp_stage *s = &st->rp->stages[i];
	wfe_row    *r = wfe_step_row(st, i);
	json_object *root = step_root(st, i);
	json_object *bound;
	json_object *items;
	wfe_bind_error err;
	int64_t		n,
				limit = st->io->max_map_items(st->io->arg);
	json_object *inputs;
	json_object *keys = NULL;
	json_object *ckeys = NULL;
	wfe_op	   *op;
	json_object *detail;

	if (s->item_workflow && !step_map_child_ok(st, i))
		return;
	memset(&err, 0, sizeof(err));
	bound = step_hold(st, wfe_bind_input(s->items, root, NULL, NULL, &err));
	if (bound == NULL)
	{
		step_map_unbound(st, i, err.code ? err.code : WFE_BIND_TYPE, err.message);
		return;
	}
	items = json_object_object_get(bound, "items");
	if (!json_object_is_type(items, json_type_array))
	{
		step_map_unbound(st, i, WFE_BIND_TYPE,
					wfe_arena_printf(&st->arena, "the items of map '%s' bound to %s, not an array",
									 s->name, items ? wfe_json_type_name(items) : "null"));
		return;
	}
	n = (int64_t) json_object_array_length(items);
	if (n > limit)
	{
		step_map_unbound(st, i, "limits.map_items",
					wfe_arena_printf(&st->arena,
									 "the items of map '%s' are %lld, over the limit of %lld (wfe.max_map_items)",
									 s->name, (long long) n, (long long) limit));
		return;
	}
	/* each element's input, bound once, here: releasing it later reads nothing else */
	inputs = step_hold(st, json_object_new_array_ext((int) n));
	/* and its rate-limit key: one bucket per element's key value (dsl.md "Flow-control keys") */
	if (s->rate_key != NULL)
		keys = step_hold(st, json_object_new_array_ext((int) n));
	/* and its concurrency key: each element takes a slot of its own key value */
	if (s->concurrency_key != NULL)
		ckeys = step_hold(st, json_object_new_array_ext((int) n));
	for (int64_t k = 0; k < n; k++)
	{
		const char *code = NULL,
				   *message = NULL;
		const char *text;
		const char *key = NULL;
		const char *ckey = NULL;

		json_object_object_add(root, "item", json_object_get(json_object_array_get_idx(items, (size_t) k)));
		json_object_object_add(root, "item_index", json_object_new_int64(k));
		text = step_bind(st, i, root, NULL, &code, &message);
		if (text != NULL && step_rate_key(st, i, root, &key, &code, &message) < 0)
			text = NULL;
		if (text != NULL && step_concurrency_key(st, i, root, &ckey, &code, &message) < 0)
			text = NULL;
		if (text == NULL)
		{
			step_map_unbound(st, i, code, wfe_arena_printf(&st->arena, "element %lld: %s", (long long) k,
													  message ? message : ""));
			return;
		}
		json_object_array_add(inputs, json_object_new_string(text));
		if (keys != NULL)
			json_object_array_add(keys, json_object_new_string(key));
		if (ckeys != NULL)
			json_object_array_add(ckeys, json_object_new_string(ckey));
	}
	op = step_emit(st, WFE_OP_MAP_START, i);
	r->state = WFE_RUNNING;
	r->attempt += 1;
	r->fence = step_next_fence(st, r->fence);
	r->outcome = 0;
	op->attempt = r->attempt;
	op->fence = r->fence;
	op->text = s->item_worker ? "worker" : s->item_workflow ? "workflow" : "action";
	op->json = step_json_text(st, json_object_get(inputs));
	op->json2 = keys ? step_json_text(st, json_object_get(keys)) : NULL;
	op->concurrency_key = ckeys ? step_json_text(st, json_object_get(ckeys)) : NULL;
	op->concurrency_max = s->concurrency_max;
	memset(&st->counts, 0, sizeof(st->counts));
	st->counts.total = n;
	st->counts_loaded = 1;
	op->counts = st->counts;
	detail = json_object_new_object();
	json_object_object_add(detail, "elements", json_object_new_int64(n));
	json_object_object_add(detail, "max_concurrency",
						   s->max_concurrency < 0 ? NULL : json_object_new_int64(s->max_concurrency));
	step_event_fenced(st, i, r->attempt, "stage.released", detail, r->fence);
	if (n == 0)
	{
		map_complete(st, i, "{\"failed\":[],\"items\":[]}");
		return;
	}
	release_more(st, i, 1, inputs);
	write_counts(st, i);
	/* the cache may have answered every element */
	if (st->counts.completed == n && wfe_step_row(st, i)->state == WFE_RUNNING)
		aggregate(st, i, -1, NULL);
}

/*
 * The current element ended (completed, or failed or timed out for good):
 * count it; past tolerated_failures the map fails and its elements under
 * way are cancelled; else the next elements go, and the last one to end
 * aggregates the results.  Every element end runs under the run's lock,
 * so exactly one of them sees the last count.
 */
void
step_map_element_done(wfe_step *st, int i, wfe_state outcome)
{
	const wfe_rp_stage *s = &st->rp->stages[i];
	wfe_map_counts *c = counts(st, i);
	wfe_row    *map;

	if (outcome == WFE_COMPLETED)
		c->completed++;
	else
		c->failed++;
	if (st->in_release)
	{
		/* completed from the cache while released: release_more goes on, its caller aggregates */
		char		key[24];

		if (st->map_hits == NULL)
			st->map_hits = step_hold(st, json_object_new_object());
		snprintf(key, sizeof(key), "%lld", (long long) st->elem);
		json_object_object_add(st->map_hits, key, step_jparse(step_element_row(st)->result));
		return;
	}
	{
		/* the map's own row: still running? (an operator may have ended it) */
		int64_t		elem = st->elem;

		st->elem = -1;
		map = wfe_step_row(st, i);
		st->elem = elem;
	}
	if (map->state != WFE_RUNNING)
	{
		write_counts(st, i);
		return;
	}
	if (c->failed > s->tolerated_failures)
	{
		wfe_op	   *op;
		json_object *error = json_object_new_object();
		const char *message = wfe_arena_printf(&st->arena,
											   "%lld elements of map '%s' failed, over tolerated_failures (%lld)",
											   (long long) c->failed, s->name,
											   (long long) s->tolerated_failures);

		write_counts(st, i);
		st->elem = -1;
		json_object_object_add(error, "code", json_object_new_string("map.failed"));
		json_object_object_add(error, "message", step_jstr(message));
		op = step_emit(st, WFE_OP_MAP_CANCEL, i);
		op->json = step_json_text(st, error);
		map_fail(st, i, "map.failed", message);
		return;
	}
	release_more(st, i, 0, NULL);
	write_counts(st, i);
	if (c->completed + c->failed == c->total && map->state == WFE_RUNNING)
	{
		int64_t		last = st->elem;
		const char *result = outcome == WFE_COMPLETED ? step_element_row(st)->result : NULL;

		aggregate(st, i, last, result);
	}
}

/* A map task's declared outputs: each key holds the whole {"items", "failed"} result. */
const char *
step_map_outputs(wfe_step *st, int i, const char *result)
{
	const wfe_rp_stage *s = &st->rp->stages[i];
	json_object *o = json_object_new_object();

	for (int k = 0; k < s->nproduces; k++)
		json_object_object_add(o, s->produces[k].key, step_jparse(result));
	return step_json_text(st, o);
}
