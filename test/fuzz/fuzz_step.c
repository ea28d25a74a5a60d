/*
 * fuzz_step.c — libFuzzer harness over the step core (src/core/engine/step.c).
 *
 * A few fixed workflows are compiled once: the stages form with decisions
 * (one heading a fork branch), nested forks and joins, finalisers, retries;
 * the tasks form with contexts, policies, required outputs and detached
 * tasks.  Each input picks a workflow, a run context and an execution
 * context, starts a run on test/unit/step_harness.h's in-memory server and
 * reads the rest of its bytes as a sequence of events: callbacks (accept,
 * heartbeat, complete, fail) with current, stale or foreign attempt/fence
 * and values from a small set, poll claims, publishes and give-backs,
 * expired deadlines, retry timers (real and made up), in-database action
 * results, the run deadline, a cancel, an operator's redrive, skip, fail or
 * redispatch (reopening a failed run), the result cache's wake-ups (with
 * an entry, sound or tampered with, put there first), and for the maps
 * (worker and child-run items, max_concurrency, tolerated_failures, items
 * bound from the context or from another map's result): an element's
 * reports with current, stale or next-generation fences and attempts, and
 * about indexes past the end or negative; its child's end (completed,
 * failed, cancelled); its retry timers, real and made up; its deadlines;
 * an operator's redrive or skip of it; and for the flow-control keys
 * (rate_limit and concurrency keyed on the context or a result, binding or
 * failing to): every release, retry, redrive and redispatch of a keyed
 * stage.  Every op is applied to the rows as
 * engine.c applies it, and the harness's checks after every event abort
 * the process (so libFuzzer keeps the input) on: an illegal stage or run
 * transition, an op on a stage out of range, a fence or attempt that
 * decreases, a run that finishes twice or without intent, an intent set
 * twice, a core view of a row that differs from the row, a rejection that
 * wrote more than its callback.* event, a stuck run, a finished run that
 * left something waiting, a keyed stage queued without its bound key (or
 * an unkeyed one with one), and the map invariants step_harness.h lists.
 * ASan, LSan and UBSan do the rest.
 *
 * Build and run: make fuzz (make test runs it briefly).
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "step_harness.h"

int			LLVMFuzzerInitialize(int *argc, char ***argv);
int			LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Stages form: nested forks, decisions heading branches, finalisers. */
static const char *FORKS =
"name: forks\n"
"version: \"1.0.0\"\n"
"entry: start\n"
"finalisers: [fin.one@1, fin.two@1]\n"
"defaults:\n"
"  retry: { max_attempts: 2, initial_ms: 10, multiplier: 2, max_ms: 100, jitter: full }\n"
"stages:\n"
"  - { name: start, type: worker, queue: q, worker: w.s@1, on_success: f1, on_failure: recover }\n"
"  - { name: recover, type: action, action: act.r@1, on_success: completed, on_failure: failed }\n"
"  - { name: f1, type: fork, branches: [f2, d1, w1] }\n"
"  - { name: f2, type: fork, branches: [d2, y] }\n"
"  - name: d2\n"
"    type: decision\n"
"    on_evaluation_error: j2\n"
"    branches:\n"
"      - { when: 'stages.start.result.score >= 5', next: z }\n"
"      - { when: \"true\", next: j2 }\n"
"  - { name: z, type: worker, queue: q, worker: w.z@1, input: { s: '${stages.start.result.score}' },"
" on_success: j2, on_failure: j2 }\n"
"  - { name: y, type: worker, queue: q, worker: w.y@1, on_success: j2, on_failure: failed }\n"
"  - { name: j2, type: join, required: [d2, y], acceptable_terminal_states: [completed, failed],"
" on_success: after2, on_failure: j1 }\n"
"  - { name: after2, type: action, action: act.a@1, on_success: j1, on_failure: j1 }\n"
"  - name: d1\n"
"    type: decision\n"
"    on_evaluation_error: failed\n"
"    branches:\n"
"      - { when: \"context.go == true\", next: k1 }\n"
"      - { when: \"true\", next: j1 }\n"
"  - { name: k1, type: worker, queue: q, worker: w.k@1, input: { x: \"${context.x}\" },"
" on_success: j1, on_failure: j1 }\n"
"  - { name: w1, type: worker, queue: q, worker: w.w@1, on_success: j1, on_failure: failed }\n"
"  - { name: j1, type: join, required: [f2, d1, w1], acceptable_terminal_states: [completed, timed_out],"
" on_success: last, on_failure: failed }\n"
"  - name: last\n"
"    type: decision\n"
"    on_evaluation_error: failed\n"
"    branches:\n"
"      - { when: 'stages.w1.result.v == 1', next: completed }\n"
"      - { when: \"true\", next: tail }\n"
"  - { name: tail, type: worker, queue: q, worker: w.t@1, on_success: completed, on_failure: failed }\n";

/* Seed 000's example: a decision that skips a fork, a join, a finaliser. */
static const char *MODEL_INGEST =
"name: model-ingest\n"
"version: \"2.3.0\"\n"
"entry: cache-lookup\n"
"finalisers: [audit.run-terminal@1]\n"
"stages:\n"
"  - { name: cache-lookup, type: action, action: cache.lookup@1, input: { modelId: \"${context.modelId}\" },"
" on_success: cache-route, on_failure: failed }\n"
"  - name: cache-route\n"
"    type: decision\n"
"    on_evaluation_error: failed\n"
"    branches:\n"
"      - { when: 'stages[\"cache-lookup\"].result.hit == true', next: publish }\n"
"      - { when: \"true\", next: render-thumbnail }\n"
"  - { name: render-thumbnail, type: worker, queue: rendering, worker: thumbnail.render@3,"
" on_success: derive-fork, on_failure: failed }\n"
"  - { name: derive-fork, type: fork, branches: [semantic-analysis, technical-metadata] }\n"
"  - { name: semantic-analysis, type: worker, queue: analysis, worker: semantic.analyse@4,"
" on_success: derive-join, on_failure: failed }\n"
"  - { name: technical-metadata, type: worker, queue: metadata, worker: metadata.extract@2,"
" on_success: derive-join, on_failure: failed }\n"
"  - { name: derive-join, type: join, required: [semantic-analysis, technical-metadata],"
" on_success: publish, on_failure: failed }\n"
"  - { name: publish, type: action, action: catalogue.publish@2, on_success: completed, on_failure: failed }\n";

/* A chain with binding, an on_failure route and a decision with an error route. */
static const char *CHAIN =
"name: chain\n"
"version: \"1.0.0\"\n"
"entry: a\n"
"defaults:\n"
"  retry: { max_attempts: 3, initial_ms: 100, multiplier: 3, max_ms: 500, jitter: none }\n"
"stages:\n"
"  - { name: a, type: worker, queue: q, worker: w.a@1, input: { x: \"${context.x}\" },"
" on_success: route, on_failure: cleanup }\n"
"  - name: route\n"
"    type: decision\n"
"    on_evaluation_error: cleanup\n"
"    branches:\n"
"      - { when: \"context.amount > 100\", next: big }\n"
"      - { when: 'stages.a.result.score >= 5', next: mid }\n"
"      - { when: \"true\", next: small }\n"
"  - { name: big, type: action, action: act.b@1, on_success: completed, on_failure: cleanup }\n"
"  - { name: mid, type: worker, queue: q, worker: w.m@1, input: { s: '${stages.a.result.score}' },"
" on_success: completed, on_failure: failed }\n"
"  - { name: small, type: worker, queue: q, worker: w.s@1, on_success: completed, on_failure: failed }\n"
"  - { name: cleanup, type: worker, queue: q, worker: w.c@1, retry: { max_attempts: 1 },"
" on_success: failed, on_failure: failed }\n";

/* The tasks form: contexts, both policies, required outputs, a detached task. */
static const char *TASKS =
"name: tasks-fuzz\n"
"version: \"1.0.0\"\n"
"context: background\n"
"finalisers: [fin.one@1]\n"
"defaults:\n"
"  retry: { max_attempts: 2, initial_ms: 10, multiplier: 2, max_ms: 100, jitter: equal }\n"
"tasks:\n"
"  - { id: root, worker: w.r@1, queue: q, produces: [{ key: tok, type: string }] }\n"
"  - { id: side, action: act.side@1, critical: false }\n"
"  - { id: gated, worker: w.g@1, queue: q, contexts: [foreground], depends_on: [root],"
" produces: [{ key: n, type: integer }] }\n"
"  - { id: lenient, worker: w.l@1, queue: q, depends_on: [gated, side], dependency_policy: allow_skipped,"
" critical: false }\n"
"  - id: needs\n"
"    worker: w.n@1\n"
"    queue: q\n"
"    depends_on: [root, gated]\n"
"    dependency_policy: allow_skipped\n"
"    requires_outputs: [{ producer_task_id: root, key: tok }, { producer_task_id: gated, key: n }]\n"
"    input: { t: \"${outputs.root.tok}\", n: \"${outputs.gated.n}\" }\n"
"  - { id: bg, worker: w.b@1, queue: q, awaits: false, depends_on: [root] }\n"
"  - { id: afterbg, worker: w.a@1, queue: q, depends_on: [bg] }\n"
"  - { id: crit, worker: w.c@1, queue: q, depends_on: [side] }\n";

/* The tasks form without finalisers: roots, a non-critical chain, detached. */
static const char *TASKS_PLAIN =
"name: tasks-plain\n"
"version: \"1.0.0\"\n"
"defaults:\n"
"  retry: { max_attempts: 2, initial_ms: 10, multiplier: 1, max_ms: 10, jitter: none }\n"
"tasks:\n"
"  - { id: a, worker: w.a@1, queue: q }\n"
"  - { id: b, worker: w.b@1, queue: q, awaits: false }\n"
"  - { id: c, worker: w.c@1, queue: q, depends_on: [a], critical: false }\n"
"  - { id: d, worker: w.d@1, queue: q, depends_on: [c], dependency_policy: allow_skipped }\n"
"  - { id: e, action: act.e@1, depends_on: [a, b], contexts: [x] }\n";

/* The result cache: three branches of one key (two bind the same input), a cached task chain. */
static const char *CACHED =
"name: cached\n"
"version: \"1.0.0\"\n"
"entry: f\n"
"defaults:\n"
"  retry: { max_attempts: 2, initial_ms: 10, multiplier: 1, max_ms: 10, jitter: none }\n"
"finalisers: [fin.one@1]\n"
"stages:\n"
"  - { name: f, type: fork, branches: [l, r, o] }\n"
"  - { name: l, type: worker, queue: q, worker: w.e@1, input: { x: \"${context.x}\" }, cache: { ttl_ms: 10 },"
" on_success: j, on_failure: j }\n"
"  - { name: r, type: worker, queue: q, worker: w.e@1, input: { x: \"${context.x}\" }, cache: { ttl_ms: 10 },"
" on_success: j, on_failure: j }\n"
"  - { name: o, type: action, action: act.e@1, input: { x: 1 }, cache: { ttl_ms: 10 },"
" on_success: j, on_failure: j }\n"
"  - { name: j, type: join, required: [l, r, o], acceptable_terminal_states: [completed, failed],"
" on_success: u, on_failure: failed }\n"
"  - { name: u, type: worker, queue: q, worker: w.e@1, input: { x: \"${context.x}\" }, cache: { ttl_ms: 10 },"
" on_success: completed, on_failure: failed }\n";

/* Waits and sleeps: a signal, its timeout route, a sleep until a bound time; and a tasks-form pair. */
static const char *WAITS =
"name: waits\n"
"version: \"1.0.0\"\n"
"entry: approve\n"
"finalisers: [fin.one@1]\n"
"stages:\n"
"  - {name: approve, type: wait, signal: sig.a@1, timeout_ms: 10, on_success: check, on_failure: failed,"
" on_timeout: late}\n"
"  - name: check\n"
"    type: decision\n"
"    branches:\n"
"      - {when: 'stages[\"approve\"].result.ok == true', next: again}\n"
"      - {when: 'true', next: late}\n"
"    on_evaluation_error: failed\n"
"  - {name: again, type: wait, signal: sig.a@1, on_success: nap, on_failure: failed}\n"
"  - {name: nap, type: sleep, duration_ms: 5, on_success: completed}\n"
"  - {name: late, type: sleep, until: '${context.modelId}', on_success: failed, on_failure: failed}\n";

static const char *TASKS_WAITS =
"name: tasks-waits\n"
"version: \"1.0.0\"\n"
"tasks:\n"
"  - {id: a, wait: {signal: sig.a@1, timeout_ms: 10}}\n"
"  - {id: b, sleep: {duration_ms: 5}, depends_on: [a], critical: false}\n"
"  - {id: c, worker: w.c@1, queue: q, depends_on: [b], dependency_policy: allow_skipped}\n";

/* Child runs: a workflow stage whose failure route starts another child, pinned; and a task. */
static const char *CHILDREN =
"name: children\n"
"version: \"1.0.0\"\n"
"entry: call\n"
"finalisers: [fin.one@1]\n"
"stages:\n"
"  - {name: call, type: workflow, workflow: sub, input: {x: '${context.modelId}'},"
" retry: {max_attempts: 2, initial_ms: 1}, on_success: after, on_failure: again}\n"
"  - {name: after, type: worker, queue: q, worker: w.a@1, input: {r: '${stages.call.result}'},"
" on_success: completed, on_failure: failed}\n"
"  - {name: again, type: workflow, workflow: sub@1.0.0, on_success: completed, on_failure: failed}\n";

static const char *TASKS_CHILDREN =
"name: tasks-children\n"
"version: \"1.0.0\"\n"
"tasks:\n"
"  - {id: a, workflow: sub, produces: [{key: url, type: string}]}\n"
"  - {id: b, worker: w.c@1, queue: q, depends_on: [a], requires_outputs: [{producer_task_id: a, key: url}],"
" input: {u: '${outputs.a.url}'}}\n";

/* Maps: worker items under max_concurrency and tolerated_failures, child-run items, a workflow stage. */
static const char *MAPS =
"name: maps\n"
"version: \"1.0.0\"\n"
"entry: render\n"
"finalisers: [fin.one@1]\n"
"stages:\n"
"  - name: render\n"
"    type: map\n"
"    items: '${context.lods}'\n"
"    max_concurrency: 2\n"
"    tolerated_failures: 1\n"
"    item: {worker: w.r@1, queue: q, input: {lod: '${item}', i: '${item_index}'},"
" retry: {max_attempts: 2, initial_ms: 1, multiplier: 1, max_ms: 1, jitter: none}}\n"
"    on_success: subs\n"
"    on_failure: call\n"
"  - name: subs\n"
"    type: map\n"
"    items: [1, 2, 3]\n"
"    max_concurrency: 1\n"
"    item: {workflow: sub, input: {x: '${item}'}, retry: {max_attempts: 2, initial_ms: 1}}\n"
"    on_success: call\n"
"    on_failure: failed\n"
"  - {name: call, type: workflow, workflow: sub, input: {r: '${stages.render.result}'},"
" on_success: completed, on_failure: failed}\n";

/*
 * Maps without bounds: child-run items, no tolerance, then a worker map
 * reading the first, each element under a concurrency key of its own item.
 */
static const char *MAPS_WIDE =
"name: maps-wide\n"
"version: \"1.0.0\"\n"
"entry: fan\n"
"stages:\n"
"  - name: fan\n"
"    type: map\n"
"    items: '${context.lods}'\n"
"    item: {workflow: sub@1.0.0, input: {x: '${item}'}}\n"
"    on_success: each\n"
"    on_failure: failed\n"
"  - name: each\n"
"    type: map\n"
"    items: '${stages.fan.result.items}'\n"
"    max_concurrency: 1\n"
"    tolerated_failures: 5\n"
"    item: {worker: w.e@1, queue: q, input: {v: '${item}'}, concurrency: {key: 'v-${item}', max: 1}}\n"
"    on_success: completed\n"
"    on_failure: failed\n";

/*
 * Flow-control keys (dsl.md "Flow-control keys"): keyed and unkeyed rate
 * limits, keyed concurrency, keys bound from the context (absent in some
 * contexts: the stage's binding failure) and from an earlier result, on a
 * retried stage, fork branches and a failure route.
 */
static const char *FLOW =
"name: flow\n"
"version: \"1.0.0\"\n"
"entry: a\n"
"stages:\n"
"  - {name: a, type: worker, queue: q, worker: w.a@1, rate_limit: {name: api, key: '${context.modelId}'},"
" retry: {max_attempts: 2, initial_ms: 1}, on_success: f, on_failure: b}\n"
"  - {name: f, type: fork, branches: [c, d]}\n"
"  - {name: c, type: worker, queue: q, worker: w.c@1, concurrency: {key: 'k-${context.x}', max: 1},"
" on_success: j, on_failure: j}\n"
"  - {name: d, type: worker, queue: q, worker: w.d@1, rate_limit: api,"
" concurrency: {key: '${stages.a.result.tok}', max: 2}, retry: {max_attempts: 3, initial_ms: 1},"
" on_success: j, on_failure: j}\n"
"  - {name: j, type: join, required: [c, d], acceptable_terminal_states: [completed, failed],"
" on_success: completed, on_failure: failed}\n"
"  - {name: b, type: worker, queue: q, worker: w.b@1, rate_limit: {name: api, key: '${context.amount}'},"
" concurrency: {key: '${context.go}', max: 3}, on_success: completed, on_failure: failed}\n";

static const char *const CHILD_STATES[] = {"completed", "failed", "cancelled"};

static const char *const *const WORKFLOWS[] = {&FORKS, &MODEL_INGEST, &CHAIN, &TASKS, &TASKS_PLAIN, &CACHED,
&WAITS, &TASKS_WAITS, &CHILDREN, &TASKS_CHILDREN, &MAPS, &MAPS_WIDE, &FLOW};
#define NWORKFLOWS (sizeof(WORKFLOWS) / sizeof(WORKFLOWS[0]))
static wfe_run_plan *plans[NWORKFLOWS];

static const char *const CONTEXTS[] = {
	"{}",
	"{\"go\": true, \"x\": 1, \"modelId\": \"m\", \"amount\": 500, \"lods\": [\"a\", \"b\", \"c\", \"d\"]}",
	"{\"go\": false, \"x\": \"s\", \"modelId\": \"m\", \"amount\": 1, \"lods\": []}",
	"{\"go\": 1, \"amount\": \"lots\", \"lods\": \"x\"}",
	"{\"lods\": [1, {\"k\": 2}, null]}",
};
static const char *const EXEC_CONTEXTS[] = {NULL, "foreground", "background", "x"};
static const double RANDOMS[] = {0.0, 0.25, 0.5, 0.999};

static const char *const RESULTS[] = {
	"{}",
	"{\"hit\": true}",
	"{\"hit\": false}",
	"{\"score\": 7, \"v\": 1}",
	"{\"score\": 1, \"v\": 2}",
	"{\"tok\": \"abc\", \"n\": 3}",
	"{\"tok\": 5, \"n\": 1.5}",
	"{\"n\": 2.0, \"tok\": \"\"}",
	"[1, 2]",
	"null",
	"7",
	"\"text\"",
	"{\"arrivals\": {\"y\": \"completed\"}}",
	"{\"score\": \"high\"}",
};
static const char *const ERRORS[] = {
	"{}",
	"{\"code\": \"boom\"}",
	"{\"code\": 5, \"message\": \"x\"}",
	"null",
	"[]",
};
#define N(a) (sizeof(a) / sizeof((a)[0]))

static void
fuzz_violation(sh *h, const char *message)
{
	(void) h;
	fprintf(stderr, "fuzz_step: broken invariant: %s\n", message);
	abort();
}

int
LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void) argc;
	(void) argv;
	for (size_t k = 0; k < NWORKFLOWS; k++)
	{
		plans[k] = sh_plan(*WORKFLOWS[k], (int64_t) k + 1);
		if (plans[k] == NULL)
		{
			fprintf(stderr, "fuzz_step: workflow %zu does not compile\n", k);
			abort();
		}
	}
	return 0;
}

/* An attempt and fence for a callback: the current ones, or near them. */
static void
pick_identity(const sh *h, int i, unsigned sel, int *attempt, int64_t *fence)
{
	*attempt = h->rows[i].attempt;
	*fence = h->rows[i].fence;
	switch (sel & 3)
	{
		case 0:
			break;
		case 1:
			*attempt -= 1;
			break;
		case 2:
			*fence -= 1;
			break;
		default:
			*fence += 1;
	}
}

/* The k-th stage (from s, wrapping) whose attempt is under way, or -1. */
static int
in_flight_from(const sh *h, int s)
{
	for (int n = 0; n < h->nst; n++)
	{
		int			i = (s + n) % h->nst;
		wfe_state	st = h->rows[i].state;

		if (st == WFE_QUEUED || st == WFE_DISPATCHED || st == WFE_RUNNING)
			return i;
	}
	return -1;
}

/* The first element of map stage i (from e, wrapping) under way or awaiting its retry, or -1. */
static int64_t
element_in_flight(const sh *h, int i, int64_t e)
{
	const sh_map *m = &h->maps[i];

	for (int64_t n = 0; n < m->n; n++)
	{
		int64_t		k = (e + n) % m->n;
		wfe_state	st = m->elems[k].state;

		if (st == WFE_QUEUED || st == WFE_DISPATCHED || st == WFE_RUNNING || st == WFE_RETRY_SCHEDULED)
			return k;
	}
	return -1;
}

/* Element e of map i ends as a worker or its child would end it (sel picks how). */
static void
end_element(sh *h, int i, int64_t e, unsigned sel)
{
	sh_row	   *r = &h->maps[i].elems[e];

	if (r->state == WFE_RETRY_SCHEDULED)
	{
		for (int k = h->ntimers - 1; k >= 0; k--)
			if (h->timers[k].stage == i && h->timers[k].elem1 == e + 1 && !h->timers[k].fired)
			{
				sh_fire_timer(h, k);
				return;
			}
		sh_retry_due_at(h, i, e, r->attempt, r->fence);
	}
	else if (h->rp->stages[i].item_workflow)
		sh_child_ended_at(h, i, e, r->attempt, r->fence, 2000 + (int64_t) h->steps,
						  CHILD_STATES[(sel >> 6) % 3], RESULTS[sel % N(RESULTS)]);
	else
	{
		sh_claim_at(h, i, e);
		r = &h->maps[i].elems[e];
		if ((sel & 0xC0) == 0xC0)
			sh_callback_at(h, i, e, WFE_CB_FAIL, r->attempt, r->fence, ERRORS[sel % N(ERRORS)], sel & 1);
		else
			sh_callback_at(h, i, e, WFE_CB_COMPLETE, r->attempt, r->fence, RESULTS[sel % N(RESULTS)], 1);
	}
}

/* An element index near the map's: one of its own, or just past its end, or negative. */
static int64_t
pick_element(const sh *h, int i, unsigned sel)
{
	int64_t		n = h->maps[i].n;

	switch ((sel >> 5) & 7)
	{
		case 6:
			return n;			/* one past the last: no element */
		case 7:
			return (sel & 1) ? -1 : n + 7;
		default:
			return n > 0 ? (int64_t) (sel % (unsigned) n) : 0;
	}
}

/* The first map stage from s (wrapping), or -1. */
static int
map_from(const sh *h, int s)
{
	for (int n = 0; n < h->nst; n++)
		if (h->rp->stages[(s + n) % h->nst].kind == WFE_K_MAP)
			return (s + n) % h->nst;
	return -1;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	sh			h;
	size_t		pos = 3;
	int			commands = 0;

	if (size < 3)
		return 0;
	sh_init(&h, plans[data[0] % NWORKFLOWS], CONTEXTS[data[1] % N(CONTEXTS)],
			EXEC_CONTEXTS[(data[1] >> 2) % N(EXEC_CONTEXTS)]);
	h.violation = fuzz_violation;
	h.random = RANDOMS[(data[2] >> 1) % N(RANDOMS)];
	/* the low halves of new fences: zero, all ones, or something between */
	h.fence_bits = (data[2] & 0x40) ? 0xffffffffu : (uint32_t) data[1] * 0x01010101u;
	if (data[2] & 1)
		for (int i = 0; i < h.nst; i++)
			if (h.rp->stages[i].kind == WFE_K_ACTION)
				sh_set_handler(&h, i);
	if (data[2] & 8)
		for (int i = 0; i < h.nst; i++)
			if (h.rp->stages[i].contract && strncmp(h.rp->stages[i].contract, "w.s@", 4) == 0)
				sh_set_schema(&h, i, "{\"type\": \"object\", \"properties\": {\"x\": {\"type\": \"integer\"}}}",
							  "{\"type\": \"object\", \"required\": [\"score\"]}");
	/* a cache entry for the cached workflow's key: sound, or tampered with */
	if (data[2] & 0x10)
	{
		char		key[128];

		snprintf(key, sizeof(key), "k:w.e@1:{\"x\":%s}",
				 data[1] % N(CONTEXTS) == 1 ? "1" : data[1] % N(CONTEXTS) == 2 ? "\"s\"" : "null");
		sh_cache_put(&h, key, RESULTS[(data[2] >> 1) % N(RESULTS)], !(data[2] & 0x20));
	}
	/* a workflow stage's child: none to run, or one too deep */
	if ((data[1] & 0xc0) == 0x80)
		h.child_version = NULL;
	else if ((data[1] & 0xc0) == 0x40)
		h.child_depth = h.max_depth + 1;
	sh_start(&h);

	while (pos + 3 <= size && commands++ < 400)
	{
		unsigned	cmd = data[pos];
		int			i = data[pos + 1] % h.nst;
		unsigned	sel = data[pos + 2];
		int			attempt;
		int64_t		fence;

		pos += 3;
		pick_identity(&h, i, sel, &attempt, &fence);
		switch (cmd % 20)
		{
			case 17:
				/* an element's report: complete or fail, accept or heartbeat, current or near identity */
				{
					int			m = map_from(&h, i);
					int64_t		e;
					int			a;
					int64_t		f;

					if (m < 0)
						break;
					e = pick_element(&h, m, sel);
					a = e >= 0 && e < h.maps[m].n ? h.maps[m].elems[e].attempt : 1;
					f = e >= 0 && e < h.maps[m].n ? h.maps[m].elems[e].fence : 1;
					if ((sel & 3) == 1)
						f -= 1;
					else if ((sel & 3) == 2)
						f = f + ((int64_t) 1 << 32);
					else if ((sel & 3) == 3)
						a -= 1;
					if (e >= 0 && e < h.maps[m].n && (sel & 4))
						sh_claim_at(&h, m, e);
					switch ((sel >> 3) & 3)
					{
						case 0:
							sh_callback_at(&h, m, e, WFE_CB_COMPLETE, a, f, RESULTS[sel % N(RESULTS)], 1);
							break;
						case 1:
							sh_callback_at(&h, m, e, WFE_CB_FAIL, a, f, ERRORS[sel % N(ERRORS)], sel & 1);
							break;
						case 2:
							sh_callback_at(&h, m, e, WFE_CB_ACCEPT, a, f, NULL, 1);
							break;
						default:
							sh_callback_at(&h, m, e, WFE_CB_HEARTBEAT, a, f, NULL, 1);
					}
				}
				break;
			case 18:
				/* an element's child ends, its retry timer (real or made up) fires, its deadline passes */
				{
					int			m = map_from(&h, i);
					int64_t		e;

					if (m < 0 || h.maps[m].n == 0)
						break;
					e = pick_element(&h, m, sel);
					if (e < 0 || e >= h.maps[m].n)
						break;
					switch (sel & 3)
					{
						case 0:
							sh_child_ended_at(&h, m, e, h.maps[m].elems[e].attempt,
											  h.maps[m].elems[e].fence - ((sel >> 2) & 1), 3000 + (int64_t) sel,
											  CHILD_STATES[(sel >> 3) % 3], RESULTS[(sel >> 2) % N(RESULTS)]);
							break;
						case 1:
							sh_retry_due_at(&h, m, e, h.maps[m].elems[e].attempt - ((sel >> 2) & 1),
											h.maps[m].elems[e].fence);
							break;
						case 2:
							sh_expire_at(&h, m, e, (sel & 4) ? "heartbeat" : "execution");
							break;
						default:
							end_element(&h, m, e, sel);
					}
				}
				break;
			case 19:
				/*
				 * an operator's redrive or skip of an element (refused when it may not act), of a
				 * finished run's too: reopening a failed worker map resets its never-released
				 * elements cancelled -> waiting (test/fuzz/repro/step-map-reopen-cancelled-worker-element
				 * found that wfe.stage_transitions() allowed it a workflow element only)
				 */
				{
					int			m = map_from(&h, i);
					int64_t		e;

					if (m < 0 || h.maps[m].n == 0)
						break;
					e = pick_element(&h, m, sel);
					if (e < 0 || e >= h.maps[m].n)
						break;
					/* ... or its fail_stage or redispatch (an attempt under way fenced, a new dispatch) */
					{
						static const wfe_operation OPS[] = {WFE_OPERATE_REDRIVE, WFE_OPERATE_SKIP,
						WFE_OPERATE_FAIL, WFE_OPERATE_REDISPATCH};
						wfe_operation what = OPS[sel & 3];

						sh_operate_at(&h, m, e, what,
									  what == WFE_OPERATE_SKIP ? RESULTS[(sel >> 2) % N(RESULTS)] :
									  what == WFE_OPERATE_FAIL ? "fuzz" : NULL, "fuzz", "fuzz");
					}
				}
				break;
			case 14:
				/* a signal for the run, whether or not anything waits for it now */
				if (sel & 0x80)
					sh_send_signal(&h, "sig.a@1", RESULTS[sel % N(RESULTS)]);
				else
					/* a child's end for any stage, attempt and fence near the current ones */
					sh_child_ended(&h, i, attempt, fence, 900 + (int64_t) sel, CHILD_STATES[sel % 3],
								   RESULTS[(sel >> 2) % N(RESULTS)]);
				break;
			case 0:
				sh_callback(&h, i, WFE_CB_COMPLETE, attempt, fence, RESULTS[(sel >> 2) % N(RESULTS)], 1);
				break;
			case 1:
				sh_callback(&h, i, WFE_CB_FAIL, attempt, fence, ERRORS[(sel >> 3) % N(ERRORS)], (sel >> 2) & 1);
				break;
			case 2:
				sh_callback(&h, i, WFE_CB_ACCEPT, attempt, fence, NULL, 1);
				break;
			case 3:
				sh_callback(&h, i, WFE_CB_HEARTBEAT, attempt, fence, NULL, 1);
				break;
			case 4:
				sh_claim(&h, i);
				break;
			case 5:
				sh_publish(&h, i);
				break;
			case 6:
				sh_give_back(&h, i);
				break;
			case 7:
				sh_expire(&h, i, (sel & 1) ? "heartbeat" : "execution");
				break;
			case 8:
				if (h.ntimers > 0)
					sh_fire_timer(&h, (int) (sel % (unsigned) h.ntimers));
				break;
			case 9:
				/* a timer made up from near the current attempt and fence */
				sh_retry_due(&h, i, h.rows[i].attempt + (int) (sel % 3) - 1,
							 h.rows[i].fence + (int64_t) ((sel >> 2) % 3) - 1);
				break;
			case 10:
				if ((sel & 7) == 0)
					sh_run_deadline(&h);
				else
					sh_fire_wakes(&h);	/* the cache_ready timers of the waiters a leader woke */
				break;
			case 11:
				if ((sel & 7) == 0)
					sh_cancel(&h, "fuzz");
				break;
			case 12:
				if (sel & 1)
					sh_action_done(&h, i, NULL, ERRORS[(sel >> 1) % N(ERRORS)]);
				else
					sh_action_done(&h, i, RESULTS[(sel >> 1) % N(RESULTS)], NULL);
				break;
			case 13:
				/* an operator's redrive, skip, fail or redispatch (refused when it may not act) */
				{
					wfe_operation op = (wfe_operation) (sel % 4);
					const wfe_rp_stage *st = &h.rp->stages[i];
					const char *value = NULL;
					char		next[160];

					if (op == WFE_OPERATE_SKIP && st->kind == WFE_K_DECISION && st->nbranches > 0)
					{
						const char *name = st->next_name[(sel >> 2) % (unsigned) st->nbranches];

						snprintf(next, sizeof(next), "{\"next\": \"%s\"}", name ? name : "(none)");
						value = next;
					}
					else if (op == WFE_OPERATE_SKIP)
						value = RESULTS[(sel >> 2) % N(RESULTS)];
					else if (op == WFE_OPERATE_FAIL)
						value = "fuzz";
					sh_operate(&h, i, op, value, "fuzz", "fuzz");
				}
				break;
			default:
				/* drive: complete (or fail) some attempt under way, with its identity */
				{
					int			k = in_flight_from(&h, i);

					if (k < 0)
					{
						if (h.nwakes > 0)
							sh_fire_wakes(&h);
						else if (h.ntimers > 0)
							sh_fire_timer(&h, h.ntimers - 1);
					}
					else if (h.rp->stages[k].kind == WFE_K_WAIT)
						sh_send_signal(&h, h.rp->stages[k].contract, RESULTS[sel % N(RESULTS)]);
					else if (h.rp->stages[k].kind == WFE_K_SLEEP && h.ntimers > 0)
						sh_fire_timer(&h, h.ntimers - 1);
					else if (h.rp->stages[k].kind == WFE_K_MAP)
					{
						int64_t		e = element_in_flight(&h, k, (int64_t) sel);

						if (e >= 0)
							end_element(&h, k, e, sel);
						else if (h.ntimers > 0)
							sh_fire_timer(&h, h.ntimers - 1);
					}
					else if (h.rp->stages[k].kind == WFE_K_WORKFLOW)
						sh_child_ended(&h, k, h.rows[k].attempt, h.rows[k].fence, 1000 + (int64_t) h.steps,
									   CHILD_STATES[(sel >> 6) % 3], RESULTS[sel % N(RESULTS)]);
					else if (h.rows[k].has_handler)
						sh_action_done(&h, k, RESULTS[sel % N(RESULTS)], NULL);
					else if ((sel & 0xC0) == 0xC0)
						sh_fail(&h, k, ERRORS[sel % N(ERRORS)], sel & 1);
					else
						sh_complete(&h, k, RESULTS[sel % N(RESULTS)]);
				}
		}
	}
	sh_free(&h);
	return 0;
}
