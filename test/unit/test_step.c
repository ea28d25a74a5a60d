/*
 * test_step.c — unit tests of the step core (src/core/engine/step.c): routing,
 * decisions and their skips, forks and joins, retries and backoff,
 * timeouts, binding, intents and finalisers, the tasks form, the callback
 * gate and result checks.
 *
 * Each scenario compiles a workflow, runs it against step_harness.h's
 * in-memory server (rows as the database; every op applied as engine.c
 * applies it) and checks what the rows and the last step's ops say.  The
 * harness checks after every event that every stage and run transition is
 * legal (states.c's tables), that the core's view of each row equals the
 * row, and that the run is live; each scenario ends with one check that
 * none of that ever broke.
 *
 * A standalone TAP program: "ok N - ..." / "not ok N - ...", then "1..N";
 * exit status 1 if anything failed.  Built with ASan/UBSan by the Makefile.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include "step_harness.h"

/* fence generation n with the harness's default random bits (0) */
#define F(n) ((int64_t) (n) << 32)

#include "tap.h"

/* TAP diagnostic line. */
static void
diag(const char *fmt,...) __attribute__((format(printf, 1, 2)));

static void
diag(const char *fmt,...)
{
	va_list		ap;

	printf("# ");
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
}

/* ---------------------------------------------------------------------
 * Workflows
 * --------------------------------------------------------------------- */

/* a -> b -> completed, a's failure -> cleanup -> failed; a binds ${context.x}. */
static const char *LINEAR =
"name: linear\n"
"version: \"1.0.0\"\n"
"entry: a\n"
"defaults:\n"
"  retry: { max_attempts: 4, initial_ms: 100, multiplier: 3, max_ms: 500, jitter: none }\n"
"stages:\n"
"  - name: a\n"
"    type: worker\n"
"    queue: qa\n"
"    worker: w.a@1\n"
"    input: { x: \"${context.x}\", fixed: 1 }\n"
"    on_success: b\n"
"    on_failure: cleanup\n"
"  - name: b\n"
"    type: action\n"
"    action: act.b@1\n"
"    input: { from_a: '${stages.a.result.v}' }\n"
"    on_success: completed\n"
"    on_failure: failed\n"
"  - name: cleanup\n"
"    type: worker\n"
"    queue: qc\n"
"    worker: w.c@1\n"
"    retry: { max_attempts: 1 }\n"
"    on_success: failed\n"
"    on_failure: failed\n";

static const char *JITTER =
"name: jitter\n"
"version: \"1.0.0\"\n"
"entry: full\n"
"stages:\n"
"  - name: full\n"
"    type: worker\n"
"    queue: q\n"
"    worker: w.a@1\n"
"    retry: { max_attempts: 5, initial_ms: 1000, multiplier: 2, max_ms: 3000, jitter: full }\n"
"    on_success: equal\n"
"    on_failure: failed\n"
"  - name: equal\n"
"    type: worker\n"
"    queue: q\n"
"    worker: w.a@1\n"
"    retry: { max_attempts: 5, initial_ms: 1000, multiplier: 2, max_ms: 3000, jitter: equal }\n"
"    on_success: completed\n"
"    on_failure: failed\n";

/* Seed 000's example (examples/model-ingest.yaml). */
static const char *MODEL_INGEST =
"name: model-ingest\n"
"version: \"2.3.0\"\n"
"entry: cache-lookup\n"
"stages:\n"
"  - name: cache-lookup\n"
"    type: action\n"
"    action: cache.lookup@1\n"
"    input: { modelId: \"${context.modelId}\" }\n"
"    on_success: cache-route\n"
"    on_failure: failed\n"
"  - name: cache-route\n"
"    type: decision\n"
"    on_evaluation_error: failed\n"
"    branches:\n"
"      - when: 'stages[\"cache-lookup\"].result.hit == true'\n"
"        next: publish\n"
"      - when: \"true\"\n"
"        next: render-thumbnail\n"
"  - name: render-thumbnail\n"
"    type: worker\n"
"    queue: rendering\n"
"    worker: thumbnail.render@3\n"
"    input: { modelId: \"${context.modelId}\" }\n"
"    execution_deadline_ms: 300000\n"
"    on_success: derive-fork\n"
"    on_failure: failed\n"
"  - name: derive-fork\n"
"    type: fork\n"
"    branches: [semantic-analysis, technical-metadata]\n"
"  - name: semantic-analysis\n"
"    type: worker\n"
"    queue: analysis\n"
"    worker: semantic.analyse@4\n"
"    input: { modelId: \"${context.modelId}\" }\n"
"    on_success: derive-join\n"
"    on_failure: failed\n"
"  - name: technical-metadata\n"
"    type: worker\n"
"    queue: metadata\n"
"    worker: metadata.extract@2\n"
"    input: { modelId: \"${context.modelId}\" }\n"
"    on_success: derive-join\n"
"    on_failure: failed\n"
"  - name: derive-join\n"
"    type: join\n"
"    required: [semantic-analysis, technical-metadata]\n"
"    acceptable_terminal_states: [completed]\n"
"    on_success: publish\n"
"    on_failure: failed\n"
"  - name: publish\n"
"    type: action\n"
"    action: catalogue.publish@2\n"
"    input: { modelId: \"${context.modelId}\" }\n"
"    on_success: completed\n"
"    on_failure: failed\n"
"finalisers: [audit.run-terminal@1]\n"
"defaults:\n"
"  retry: { max_attempts: 2, initial_ms: 10, multiplier: 1, max_ms: 10, jitter: none }\n";

/* A decision over the context and a stage's result, with an error route. */
static const char *DECIDE =
"name: decide\n"
"version: \"1.0.0\"\n"
"entry: prep\n"
"stages:\n"
"  - name: prep\n"
"    type: worker\n"
"    queue: q\n"
"    worker: w.p@1\n"
"    on_success: route\n"
"    on_failure: failed\n"
"  - name: route\n"
"    type: decision\n"
"    on_evaluation_error: oops\n"
"    branches:\n"
"      - when: \"context.amount > 100\"\n"
"        next: big\n"
"      - when: 'stages.prep.result.score >= 5'\n"
"        next: mid\n"
"      - when: \"true\"\n"
"        next: small\n"
"  - name: big\n"
"    type: worker\n"
"    queue: q\n"
"    worker: w.b@1\n"
"    on_success: completed\n"
"    on_failure: failed\n"
"  - name: mid\n"
"    type: worker\n"
"    queue: q\n"
"    worker: w.m@1\n"
"    input: { score: '${stages.prep.result.score}' }\n"
"    on_success: completed\n"
"    on_failure: failed\n"
"  - name: small\n"
"    type: worker\n"
"    queue: q\n"
"    worker: w.s@1\n"
"    on_success: completed\n"
"    on_failure: failed\n"
"  - name: oops\n"
"    type: worker\n"
"    queue: q\n"
"    worker: w.o@1\n"
"    on_success: failed\n"
"    on_failure: failed\n";

/* Nested forks: f1 [a, f2], f2 [b, c]; j2 -> after2 (in branch f2) -> j1. */
static const char *NEST =
"name: nest\n"
"version: \"1.0.0\"\n"
"entry: f1\n"
"stages:\n"
"  - name: f1\n"
"    type: fork\n"
"    branches: [a, f2]\n"
"  - name: a\n"
"    type: worker\n"
"    queue: q\n"
"    worker: w.a@1\n"
"    retry: { max_attempts: 1 }\n"
"    on_success: j1\n"
"    on_failure: j1\n"
"  - name: f2\n"
"    type: fork\n"
"    branches: [b, c]\n"
"  - name: b\n"
"    type: worker\n"
"    queue: q\n"
"    worker: w.b@1\n"
"    on_success: j2\n"
"    on_failure: j2\n"
"  - name: c\n"
"    type: worker\n"
"    queue: q\n"
"    worker: w.c@1\n"
"    retry: { max_attempts: 1 }\n"
"    on_success: j2\n"
"    on_failure: j2\n"
"  - name: j2\n"
"    type: join\n"
"    required: [b, c]\n"
"    on_success: after2\n"
"    on_failure: failed\n"
"  - name: after2\n"
"    type: worker\n"
"    queue: q\n"
"    worker: w.d@1\n"
"    on_success: j1\n"
"    on_failure: j1\n"
"  - name: j1\n"
"    type: join\n"
"    required: [a, f2]\n"
"    acceptable_terminal_states: [completed, timed_out]\n"
"    on_success: done\n"
"    on_failure: failed\n"
"  - name: done\n"
"    type: worker\n"
"    queue: q\n"
"    worker: w.e@1\n"
"    on_success: completed\n"
"    on_failure: failed\n";

/*
 * A fork whose branch heads are decisions: d (first, decided before its
 * siblings are released) and e (decided while b is under way, with b2 after
 * b still waiting).
 */
static const char *FORK_DECISION =
"name: forkdec\n"
"version: \"1.0.0\"\n"
"entry: f\n"
"stages:\n"
"  - name: f\n"
"    type: fork\n"
"    branches: [d, b, e]\n"
"  - name: d\n"
"    type: decision\n"
"    on_evaluation_error: failed\n"
"    branches:\n"
"      - when: \"context.go == true\"\n"
"        next: x\n"
"      - when: \"true\"\n"
"        next: j\n"
"  - { name: x, type: worker, queue: q, worker: w.x@1, on_success: j, on_failure: j }\n"
"  - { name: b, type: worker, queue: q, worker: w.b@1, on_success: b2, on_failure: failed }\n"
"  - { name: b2, type: worker, queue: q, worker: w.b@1, on_success: j, on_failure: failed }\n"
"  - name: e\n"
"    type: decision\n"
"    on_evaluation_error: failed\n"
"    branches:\n"
"      - { when: \"true\", next: j }\n"
"  - name: j\n"
"    type: join\n"
"    required: [d, b, e]\n"
"    on_success: completed\n"
"    on_failure: failed\n";

/* Two branches whose failures also go to the join (recovery). */
static const char *FORK_MEET =
"name: forkmeet\n"
"version: \"1.0.0\"\n"
"entry: split\n"
"stages:\n"
"  - { name: split, type: fork, branches: [l, r] }\n"
"  - { name: l, type: worker, queue: q, worker: w.l@1, retry: { max_attempts: 1 }, on_success: meet, on_failure: meet }\n"
"  - { name: r, type: worker, queue: q, worker: w.r@1, retry: { max_attempts: 1 }, on_success: meet, on_failure: meet }\n"
"  - { name: meet, type: join, required: [l, r], on_success: completed, on_failure: failed }\n";

/* Five branches to put in every state, then two finalisers. */
static const char *INTENTS =
"name: intents\n"
"version: \"1.0.0\"\n"
"entry: f\n"
"defaults:\n"
"  retry: { max_attempts: 2, initial_ms: 10, multiplier: 1, max_ms: 10, jitter: none }\n"
"finalisers: [fin.one@1, fin.two@1]\n"
"stages:\n"
"  - name: f\n"
"    type: fork\n"
"    branches: [p, q, r, s, t]\n"
"  - { name: p, type: worker, queue: q, worker: w.p@1, on_success: j, on_failure: failed }\n"
"  - { name: q, type: worker, queue: q, worker: w.q@1, on_success: j, on_failure: failed }\n"
"  - { name: r, type: worker, queue: q, worker: w.r@1, on_success: j, on_failure: failed }\n"
"  - { name: s, type: worker, queue: q, worker: w.s@1, on_success: j, on_failure: failed }\n"
"  - { name: t, type: worker, queue: q, worker: w.t@1, on_success: j, on_failure: failed }\n"
"  - name: j\n"
"    type: join\n"
"    required: [p, q, r, s, t]\n"
"    on_success: after\n"
"    on_failure: failed\n"
"  - { name: after, type: worker, queue: q, worker: w.z@1, on_success: completed, on_failure: failed }\n";

/* The tasks form: roots, dependents, a non-critical task, both policies. */
static const char *TASKS =
"name: tasks-one\n"
"version: \"1.0.0\"\n"
"defaults:\n"
"  retry: { max_attempts: 1 }\n"
"tasks:\n"
"  - { id: a, worker: w.a@1, queue: q }\n"
"  - { id: b, worker: w.b@1, queue: q }\n"
"  - { id: c, worker: w.c@1, queue: q, depends_on: [a], critical: false }\n"
"  - { id: d, worker: w.d@1, queue: q, depends_on: [c] }\n"
"  - { id: e, worker: w.e@1, queue: q, depends_on: [b] }\n"
"  - { id: both, action: act.both@1, depends_on: [a, b] }\n"
"  - { id: lenient, worker: w.l@1, queue: q, depends_on: [d], dependency_policy: allow_skipped }\n"
"  - { id: strict, worker: w.s@1, queue: q, depends_on: [d] }\n";

/* Contexts, required outputs, detached tasks, a finaliser. */
static const char *TASKS_CONTEXT =
"name: tasks-two\n"
"version: \"1.0.0\"\n"
"context: background\n"
"finalisers: [fin.one@1]\n"
"tasks:\n"
"  - id: p\n"
"    worker: w.p@1\n"
"    queue: q\n"
"    contexts: [foreground]\n"
"    produces: [{ key: tok, type: string }]\n"
"  - id: u\n"
"    worker: w.u@1\n"
"    queue: q\n"
"    depends_on: [p]\n"
"    dependency_policy: allow_skipped\n"
"    requires_outputs: [{ producer_task_id: p, key: tok }]\n"
"    input: { t: \"${outputs.p.tok}\" }\n"
"  - { id: v, worker: w.v@1, queue: q }\n"
"  - id: bg\n"
"    worker: w.bg@1\n"
"    queue: q\n"
"    awaits: false\n"
"    critical: true\n"
"    retry: { max_attempts: 3, initial_ms: 50, multiplier: 2, max_ms: 1000, jitter: none }\n"
"  - { id: bgdep, worker: w.bd@1, queue: q, depends_on: [bg], awaits: false }\n";

/*
 * A gated task with two dependencies; a task that requires outputs of two
 * producers, one finished in an earlier step (read from wfe.outputs), one
 * in this step (read from its result).
 */
static const char *TASKS_EDGE =
"name: tasks-edge\n"
"version: \"1.0.0\"\n"
"tasks:\n"
"  - { id: r1, worker: w.a@1, queue: q }\n"
"  - { id: r2, worker: w.a@1, queue: q }\n"
"  - { id: g, worker: w.g@1, queue: q, contexts: [other], depends_on: [r1, r2] }\n"
"  - { id: after, worker: w.x@1, queue: q, depends_on: [g], dependency_policy: allow_skipped }\n"
"  - { id: p1, worker: w.p@1, queue: q, produces: [{ key: tok, type: string }] }\n"
"  - { id: p2, worker: w.p@1, queue: q, produces: [{ key: n, type: integer }] }\n"
"  - id: both\n"
"    worker: w.b@1\n"
"    queue: q\n"
"    depends_on: [p1, p2]\n"
"    requires_outputs: [{ producer_task_id: p1, key: tok }, { producer_task_id: p2, key: n }]\n"
"    input: { t: \"${outputs.p1.tok}\", n: \"${outputs.p2.n}\" }\n";

/* A critical root task whose binding fails at the start. */
static const char *TASKS_BIND =
"name: tasks-bind\n"
"version: \"1.0.0\"\n"
"tasks:\n"
"  - { id: first, worker: w.a@1, queue: q, input: { v: \"${context.nope}\" } }\n"
"  - { id: other, worker: w.a@1, queue: q }\n"
"  - { id: later, worker: w.a@1, queue: q, depends_on: [other] }\n";

/* The $${ escape, alone and next to a reference. */
static const char *ESCAPE =
"name: escape\n"
"version: \"1.0.0\"\n"
"entry: a\n"
"stages:\n"
"  - name: a\n"
"    type: worker\n"
"    queue: q\n"
"    worker: w.a@1\n"
"    input: { price: \"$${not a reference}\", plain: \"no refs\", n: 2 }\n"
"    on_success: b\n"
"    on_failure: failed\n"
"  - name: b\n"
"    type: worker\n"
"    queue: q\n"
"    worker: w.b@1\n"
"    input: { label: \"$${x} is ${context.x}\" }\n"
"    on_success: completed\n"
"    on_failure: failed\n";

/* Declared outputs of every type. */
static const char *TASKS_PRODUCES =
"name: tasks-three\n"
"version: \"1.0.0\"\n"
"defaults:\n"
"  retry: { max_attempts: 2, initial_ms: 10, multiplier: 1, max_ms: 10, jitter: none }\n"
"tasks:\n"
"  - id: make\n"
"    worker: w.m@1\n"
"    queue: q\n"
"    produces:\n"
"      - { key: n, type: integer }\n"
"      - { key: r, type: number }\n"
"      - { key: s, type: string }\n"
"      - { key: o, type: ConfigObject }\n"
"      - { key: flag, type: boolean }\n"
"      - { key: list, type: array }\n"
"  - id: use\n"
"    worker: w.u@1\n"
"    queue: q\n"
"    depends_on: [make]\n"
"    requires_outputs: [{ producer_task_id: make, key: n }, { producer_task_id: make, key: o }]\n"
"    input: { n: \"${outputs.make.n}\", o: \"${outputs.make.o}\" }\n";

/* The result cache: two branches computing the same thing, then a reader. */
static const char *CACHED =
"name: cached\n"
"version: \"1.0.0\"\n"
"entry: split\n"
"stages:\n"
"  - { name: split, type: fork, branches: [l, r] }\n"
"  - name: l\n"
"    type: worker\n"
"    queue: q\n"
"    worker: embed@1\n"
"    input: { t: \"${context.t}\" }\n"
"    cache: { ttl_ms: 60000 }\n"
"    retry: { max_attempts: 2, initial_ms: 10, multiplier: 1, max_ms: 10, jitter: none }\n"
"    on_success: meet\n"
"    on_failure: meet\n"
"  - name: r\n"
"    type: worker\n"
"    queue: q\n"
"    worker: embed@1\n"
"    input: { t: \"${context.t}\" }\n"
"    cache: { ttl_ms: 60000 }\n"
"    retry: { max_attempts: 2, initial_ms: 10, multiplier: 1, max_ms: 10, jitter: none }\n"
"    on_success: meet\n"
"    on_failure: meet\n"
"  - { name: meet, type: join, required: [l, r], on_success: use, on_failure: failed }\n"
"  - name: use\n"
"    type: worker\n"
"    queue: q\n"
"    worker: use@1\n"
"    input: { v: \"${stages.l.result.v}\" }\n"
"    on_success: completed\n"
"    on_failure: failed\n";

/* The same key three times: two branches, then the stage after their join. */
static const char *CACHED_TAIL =
"name: cached-tail\n"
"version: \"1.0.0\"\n"
"entry: split\n"
"defaults:\n"
"  retry: { max_attempts: 1 }\n"
"stages:\n"
"  - { name: split, type: fork, branches: [l, r] }\n"
"  - { name: l, type: worker, queue: q, worker: embed@1, input: { t: \"${context.t}\" }, cache: { ttl_ms: 60000 },"
" on_success: meet, on_failure: meet }\n"
"  - { name: r, type: worker, queue: q, worker: embed@1, input: { t: \"${context.t}\" }, cache: { ttl_ms: 60000 },"
" on_success: meet, on_failure: meet }\n"
"  - { name: meet, type: join, required: [l, r], acceptable_terminal_states: [completed, failed],"
" on_success: tail, on_failure: failed }\n"
"  - { name: tail, type: worker, queue: q, worker: embed@1, input: { t: \"${context.t}\" }, cache: { ttl_ms: 60000 },"
" on_success: completed, on_failure: failed }\n";

/* A join that fails the run in one branch of an outer fork, a tolerated failure in the other. */
static const char *TWO_JOINS =
"name: two-joins\n"
"version: \"1.0.0\"\n"
"entry: top\n"
"defaults:\n"
"  retry: { max_attempts: 1 }\n"
"stages:\n"
"  - { name: top, type: fork, branches: [x, f] }\n"
"  - { name: x, type: worker, queue: q, worker: w.x@1, on_success: end, on_failure: end }\n"
"  - { name: f, type: fork, branches: [a, b] }\n"
"  - { name: a, type: worker, queue: q, worker: w.a@1, on_success: m, on_failure: m }\n"
"  - { name: b, type: worker, queue: q, worker: w.b@1, on_success: m, on_failure: m }\n"
"  - { name: m, type: join, required: [a, b], on_success: end, on_failure: failed }\n"
"  - { name: end, type: join, required: [x, f], acceptable_terminal_states: [completed, failed],"
" on_success: completed, on_failure: failed }\n";
/* Cached stages whose keys meet in one step: twin tasks, and s1 -> s2 with one input. */
static const char *CACHE_TWIN =
"name: cache-twin\n"
"version: \"1.0.0\"\n"
"tasks:\n"
"  - id: a\n"
"    worker: w.e@1\n"
"    queue: q\n"
"    input: { t: \"${context.t}\" }\n"
"    cache: { ttl_ms: 60000 }\n"
"  - id: b\n"
"    worker: w.e@1\n"
"    queue: q\n"
"    input: { t: \"${context.t}\" }\n"
"    cache: { ttl_ms: 60000 }\n";

static const char *CACHE_TWICE =
"name: cache-twice\n"
"version: \"1.0.0\"\n"
"entry: s1\n"
"stages:\n"
"  - name: s1\n"
"    type: worker\n"
"    queue: q\n"
"    worker: w.e@1\n"
"    input: { t: \"${context.t}\" }\n"
"    cache: { ttl_ms: 60000 }\n"
"    retry: { max_attempts: 1 }\n"
"    on_success: s2\n"
"    on_failure: s2\n"
"  - name: s2\n"
"    type: worker\n"
"    queue: q\n"
"    worker: w.e@1\n"
"    input: { t: \"${context.t}\" }\n"
"    cache: { ttl_ms: 60000 }\n"
"    on_success: completed\n"
"    on_failure: failed\n";

/*
 * Waits and sleeps: approve waits for a signal (timeout to `rejected`),
 * check decides on its payload, pause sleeps, again waits on the same
 * signal with no timeout, rejected sleeps until a bound time.
 */
static const char *WAITS =
"name: waits\n"
"version: \"1.0.0\"\n"
"entry: approve\n"
"stages:\n"
"  - {name: approve, type: wait, signal: approval@1, timeout_ms: 60000,\n"
"     on_success: check, on_failure: failed, on_timeout: rejected}\n"
"  - name: check\n"
"    type: decision\n"
"    branches:\n"
"      - {when: 'stages[\"approve\"].result.approved', next: pause}\n"
"      - {when: 'true', next: rejected}\n"
"    on_evaluation_error: failed\n"
"  - {name: pause, type: sleep, duration_ms: 5000, on_success: again}\n"
"  - {name: again, type: wait, signal: approval@1, on_success: completed, on_failure: failed}\n"
"  - {name: rejected, type: sleep, until: '${context.until}', on_success: failed}\n";

/* The tasks form: wait: and sleep: as a task's executor. */
static const char *TASKS_WAITS =
"name: tasks-waits\n"
"version: \"1.0.0\"\n"
"tasks:\n"
"  - {id: approve, wait: {signal: approval@1, timeout_ms: 1000}}\n"
"  - {id: nap, sleep: {duration_ms: 10}, depends_on: [approve]}\n"
"  - {id: ship, action: ship@1, depends_on: [nap]}\n";

/* Run output (dsl.md "Run output"): a template over results, context and run. */
static const char *OUTPUT =
"name: output\n"
"version: \"1.0.0\"\n"
"entry: a\n"
"output: { url: \"${stages.a.result.url}\", who: \"${context.who}\", label: \"run ${run.workflow}\" }\n"
"stages:\n"
"  - {name: a, type: worker, queue: qa, worker: w.a@1, on_success: completed, on_failure: failed}\n";

static wfe_run_plan *rp_output;

static wfe_run_plan *rp_waits,
		   *rp_tasks_waits;

static wfe_run_plan *rp_cache_twin,
		   *rp_cache_twice;

/* Flow-control keys (dsl.md "Flow-control keys"): a keyed rate limit and keyed concurrency on a retried stage. */
static const char *FLOW_KEYS =
"name: flow-keys\n"
"version: \"1.0.0\"\n"
"entry: a\n"
"stages:\n"
"  - {name: a, type: worker, queue: qa, worker: w.a@1, rate_limit: {name: api, key: '${context.customer}'},"
" concurrency: {key: 'c-${context.customer}', max: 2}, retry: {max_attempts: 2, initial_ms: 1},"
" on_success: completed, on_failure: failed}\n";
static wfe_run_plan *rp_flow_keys;

static wfe_run_plan *rp_linear,
		   *rp_jitter,
		   *rp_model,
		   *rp_decide,
		   *rp_nest,
		   *rp_forkdec,
		   *rp_forkmeet,
		   *rp_intents,
		   *rp_tasks,
		   *rp_tasks_context,
		   *rp_tasks_produces,
		   *rp_escape,
		   *rp_tasks_edge,
		   *rp_tasks_bind,
		   *rp_cached,
		   *rp_cached_tail,
		   *rp_two_joins;

/* ---------------------------------------------------------------------
 * Helpers
 * --------------------------------------------------------------------- */

static void
on_violation(sh *h, const char *message)
{
	(void) h;
	diag("harness: %s", message);
}

/* Start a scenario over a run plan. */
static void
run_open(sh *h, const wfe_run_plan *rp, const char *context, const char *execution_context)
{
	sh_init(h, rp, context, execution_context);
	h->violation = on_violation;
}

/* End a scenario: the check the harness made after every one of its events. */
static void
run_close(sh *h, const char *scenario)
{
	ok(h->violations == 0 && h->steps > 0,
	   "%s: after each of %d events, every transition legal, rows and core agree, run live",
	   scenario, h->steps);
	sh_free(h);
}

/* A stage's index (exit on a name the test got wrong). */
static int
X(const sh *h, const char *name)
{
	int			i = sh_stage(h, name);

	if (i < 0)
	{
		fprintf(stderr, "test bug: no stage %s\n", name);
		exit(2);
	}
	return i;
}

static void
expect_state(const sh *h, const char *name, wfe_state want, const char *what)
{
	wfe_state	got = h->rows[X(h, name)].state;

	ok(got == want, "%s: %s is %s", what, name, wfe_state_name(want));
	if (got != want)
		diag("%s is %s", name, wfe_state_name(got));
}

static void
expect_skipped(const sh *h, const char *name, const char *reason, const char *what)
{
	const sh_row *r = &h->rows[X(h, name)];
	int			good = r->state == WFE_SKIPPED && r->skip_reason && strcmp(r->skip_reason, reason) == 0;

	ok(good, "%s: %s skipped, %s", what, name, reason);
	if (!good)
		diag("%s is %s (%s)", name, wfe_state_name(r->state), r->skip_reason ? r->skip_reason : "no reason");
}

static void
expect_str(const char *got, const char *want, const char *what)
{
	int			good = (got == NULL && want == NULL) ||
		(got != NULL && want != NULL && strcmp(got, want) == 0);

	ok(good, "%s", what);
	if (!good)
		diag("got %s, want %s", got ? got : "NULL", want ? want : "NULL");
}

static void
expect_json(const char *got, const char *want, const char *what)
{
	int			good = sh_json_equal(got, want);

	ok(good, "%s", what);
	if (!good)
		diag("got %s, want %s", got ? got : "NULL", want);
}

static void
expect_int(long long got, long long want, const char *what)
{
	ok(got == want, "%s", what);
	if (got != want)
		diag("got %lld, want %lld", got, want);
}

/* Does the last step's op list have exactly n ops of a kind on a stage (-2: any)? */
static void
expect_ops(const sh *h, wfe_op_kind kind, const char *stage, int n, const char *what)
{
	int			got = sh_count_ops(h, kind, stage ? X(h, stage) : -2);

	ok(got == n, "%s", what);
	if (got != n)
		diag("%d such ops, want %d (the step wrote %d ops)", got, n, h->nops);
}

/* The index of the last step's first op of a kind on a stage, or -1. */
static int
op_index(const sh *h, wfe_op_kind kind, int stage)
{
	for (int k = 0; k < h->nops; k++)
		if (h->ops[k].kind == kind && (stage == -2 || h->ops[k].stage == stage))
			return k;
	return -1;
}

/* The event type at the last step's op k, or "". */
static const char *
op_event(const sh *h, int k)
{
	return k >= 0 && k < h->nops && h->ops[k].kind == WFE_OP_EVENT && h->ops[k].text ? h->ops[k].text : "";
}

/* How many events of a type (on a stage, NULL: any) the run has had. */
static int
events_total(const sh *h, const char *type, const char *stage)
{
	return sh_count_events_since(h, 0, type, stage ? X(h, stage) : -2);
}

/* How many events of a type the last step wrote. */
static int
events_last(const sh *h, const char *type, const char *stage)
{
	return sh_count_events_since(h, h->mark, type, stage ? X(h, stage) : -2);
}

/* ---------------------------------------------------------------------
 * Routing and the end of a run
 * --------------------------------------------------------------------- */

static void
test_linear_success(void)
{
	sh			h;
	int			a,
				b;
	const sh_op *op;

	run_open(&h, rp_linear, "{\"x\": \"hello\"}", NULL);
	a = X(&h, "a");
	b = X(&h, "b");
	sh_start(&h);
	ok(h.nops > 0 && strcmp(op_event(&h, 0), "run.started") == 0, "linear: the start writes run.started first");
	expect_state(&h, "a", WFE_QUEUED, "linear start");
	op = sh_find_op(&h, WFE_OP_ENQUEUE, a);
	ok(op && op->flag == 1 && op->attempt == 1 && op->fence == F(1),
	   "linear start: a is enqueued as a new attempt 1, fence 1");
	expect_json(h.rows[a].input, "{\"x\": \"hello\", \"fixed\": 1}", "linear start: a's input binds ${context.x}");
	ok(events_last(&h, "stage.released", "a") == 1, "linear start: stage.released for a");
	expect_state(&h, "b", WFE_WAITING, "linear start");
	expect_state(&h, "cleanup", WFE_WAITING, "linear start");

	expect_str(sh_accept(&h, a), "accepted", "linear: a is accepted");
	expect_state(&h, "a", WFE_RUNNING, "linear accept");
	expect_str(sh_complete(&h, a, "{\"v\": 7}"), "accepted", "linear: a completes");
	expect_json(h.rows[a].result, "{\"v\": 7}", "linear: a's result is stored");
	expect_state(&h, "b", WFE_QUEUED, "linear: on_success releases b");
	expect_json(h.rows[b].input, "{\"from_a\": 7}", "linear: b's input reads stages.a.result.v");
	ok(h.run.intent < 0, "linear: no intent while b runs");

	expect_str(sh_complete(&h, b, "{}"), "accepted", "linear: b completes");
	expect_int(h.run.intent, WFE_RUN_COMPLETED, "linear: b routes to completed: completed intent");
	expect_str(h.reason, "stage b routed to completed", "linear: the intent's reason names the stage");
	expect_skipped(&h, "cleanup", "branch_not_taken", "linear: completed intent");
	op = sh_find_op(&h, WFE_OP_FINISH, -1);
	ok(op && op->state == WFE_RUN_COMPLETED && op->text == NULL,
	   "linear: FINISH completed, the intent's reason kept");
	ok(h.run.finished && h.run.state == WFE_RUN_COMPLETED, "linear: the run is completed");
	expect_json(sh_event_detail(&h, "run.completed", -1), "{\"intent\": \"completed\"}",
				"linear: event run.completed with the intent");
	ok(op_index(&h, WFE_OP_INTENT, -1) < op_index(&h, WFE_OP_SKIP, -2) &&
	   op_index(&h, WFE_OP_SKIP, -2) < op_index(&h, WFE_OP_FINISH, -1),
	   "linear: intent, then skips, then finish");
	ok(sh_count_ops(&h, WFE_OP_FINALISING, -1) == 0, "linear: no finalisers, no finalising");
	run_close(&h, "linear success");
}

static void
test_linear_failure(void)
{
	sh			h;
	int			a;
	const sh_op *op;

	run_open(&h, rp_linear, "{\"x\": 1}", NULL);
	a = X(&h, "a");
	sh_start(&h);
	sh_claim(&h, a);
	expect_str(sh_fail(&h, a, "{\"code\": \"bad.input\"}", 0), "accepted", "on_failure: a fails, not retryable");
	op = sh_find_op(&h, WFE_OP_FAIL, a);
	ok(op && op->state == WFE_FAILED && op->flag == 0, "on_failure: FAIL without dead letter");
	expect_ops(&h, WFE_OP_RETRY, NULL, 0, "on_failure: a non-retryable failure is not retried");
	expect_int(h.ndead, 0, "on_failure: no dead letter");
	expect_json(sh_event_detail(&h, "stage.failed", a), "{\"error\": \"bad.input\", \"retryable\": false}",
				"on_failure: stage.failed with the error code");
	expect_state(&h, "cleanup", WFE_QUEUED, "on_failure: a's on_failure releases cleanup");
	expect_state(&h, "b", WFE_WAITING, "on_failure");
	expect_str(sh_complete(&h, X(&h, "cleanup"), "{}"), "accepted", "on_failure: cleanup completes");
	expect_int(h.run.intent, WFE_RUN_FAILED, "on_failure: cleanup routes to failed: failed intent");
	expect_skipped(&h, "b", "run_aborted", "on_failure: failed intent");
	op = sh_find_op(&h, WFE_OP_FINISH, -1);
	ok(op && op->state == WFE_RUN_FAILED, "on_failure: FINISH failed");
	ok(events_last(&h, "run.failed", NULL) == 1, "on_failure: event run.failed");
	run_close(&h, "on_failure route");
}

/* ---------------------------------------------------------------------
 * Retries, backoff, timeouts
 * --------------------------------------------------------------------- */

static void
test_retry_backoff(void)
{
	sh			h;
	int			a;
	const sh_op *op;
	static const int64_t want_us[] = {100000, 300000, 500000};	/* 100, 300, min(900, 500) */

	run_open(&h, rp_linear, "{\"x\": 1}", NULL);
	a = X(&h, "a");
	sh_start(&h);
	sh_claim(&h, a);
	for (int n = 1; n <= 3; n++)
	{
		char		what[96];
		int			nt = h.ntimers;

		snprintf(what, sizeof(what), "retry: attempt %d fails, retryable", n);
		expect_str(sh_fail(&h, a, "{\"code\": \"boom\"}", 1), "accepted", what);
		op = sh_find_op(&h, WFE_OP_RETRY, a);
		ok(op && op->delay_us == want_us[n - 1] && op->attempt == n,
		   "retry: after attempt %d the delay is %lld us (initial_ms * multiplier^(n-1), capped)",
		   n, (long long) want_us[n - 1]);
		if (op && op->delay_us != want_us[n - 1])
			diag("delay %lld us", (long long) op->delay_us);
		ok(h.rows[a].state == WFE_RETRY_SCHEDULED && h.rows[a].outcome == WFE_FAILED &&
		   h.ntimers == nt + 1 && h.timers[nt].attempt == n && h.timers[nt].fence == h.rows[a].fence,
		   "retry: attempt %d: retry_scheduled, a timer for this attempt and fence", n);
		if (n == 1)
		{
			int			nev = h.nevents;

			expect_json(sh_event_detail(&h, "stage.retry_scheduled", a),
						"{\"delay_ms\": 100, \"error\": \"boom\"}", "retry: event with delay and error code");
			sh_retry_due(&h, a, 0, 1);
			sh_retry_due(&h, a, 1, 0);
			sh_retry_due(&h, a, 2, 1);
			sh_retry_due(&h, a, 1, 2);
			ok(h.nevents == nev && h.nops == 0 && h.rows[a].state == WFE_RETRY_SCHEDULED,
			   "retry: timers for another attempt or fence do nothing");
		}
		ok(sh_fire_retry(&h, a), "retry: the timer after attempt %d fires", n);
		op = sh_find_op(&h, WFE_OP_ENQUEUE, a);
		ok(op && op->flag == 1 && op->json == NULL && h.rows[a].attempt == n + 1 &&
		   h.rows[a].fence == F(n + 1) && h.rows[a].state == WFE_QUEUED && h.rows[a].error == NULL,
		   "retry: attempt %d queued, new fence, input kept, error cleared", n + 1);
		ok(events_last(&h, "stage.retried", "a") == 1, "retry: event stage.retried");
		if (n == 1)
		{
			expect_str(sh_callback(&h, a, WFE_CB_COMPLETE, 1, 1, "{}", 1), "stale",
					   "retry: the first attempt's late report is stale");
			ok(!sh_fire_timer(&h, 0), "retry: a fired timer does not fire again");
		}
	}
	expect_str(sh_fail(&h, a, "{\"code\": \"boom\"}", 1), "accepted", "retry: the last attempt fails");
	op = sh_find_op(&h, WFE_OP_FAIL, a);
	ok(op && op->flag == 1 && op->attempt == 4 && op->state == WFE_FAILED,
	   "retry: attempts exhausted: FAIL with a dead letter");
	ok(h.ndead == 1 && h.dead[0].stage == a && h.dead[0].attempt == 4, "retry: the dead letter names attempt 4");
	expect_json(sh_event_detail(&h, "stage.failed", a), "{\"error\": \"boom\", \"retryable\": true}",
				"retry: stage.failed says it was retryable");
	expect_state(&h, "cleanup", WFE_QUEUED, "retry: exhausted a follows on_failure");
	run_close(&h, "retry backoff");
}

static void
test_jitter(void)
{
	sh			h;
	const sh_op *op;
	int			full,
				equal;

	run_open(&h, rp_jitter, NULL, NULL);
	full = X(&h, "full");
	equal = X(&h, "equal");
	h.random = 0.25;
	sh_start(&h);
	sh_fail(&h, full, NULL, 1);
	op = sh_find_op(&h, WFE_OP_RETRY, full);
	ok(op && op->delay_us == 250000, "jitter full: random() * base (0.25 * 1000 ms)");
	sh_fire_retry(&h, full);
	sh_fail(&h, full, NULL, 1);
	op = sh_find_op(&h, WFE_OP_RETRY, full);
	ok(op && op->delay_us == 500000, "jitter full: attempt 2: 0.25 * 2000 ms");
	sh_fire_retry(&h, full);
	sh_fail(&h, full, NULL, 1);
	op = sh_find_op(&h, WFE_OP_RETRY, full);
	ok(op && op->delay_us == 750000, "jitter full: attempt 3: 0.25 * min(4000, 3000) ms");
	h.random = 0.0;
	sh_fire_retry(&h, full);
	sh_fail(&h, full, NULL, 1);
	op = sh_find_op(&h, WFE_OP_RETRY, full);
	ok(op && op->delay_us == 0, "jitter full: random() 0 gives no delay");
	sh_fire_retry(&h, full);
	sh_complete(&h, full, "{}");
	expect_state(&h, "equal", WFE_QUEUED, "jitter");

	h.random = 0.25;
	sh_fail(&h, equal, NULL, 1);
	op = sh_find_op(&h, WFE_OP_RETRY, equal);
	ok(op && op->delay_us == 625000, "jitter equal: base/2 + random() * base/2 (500 + 125 ms)");
	sh_fire_retry(&h, equal);
	h.random = 0.5;
	sh_fail(&h, equal, NULL, 1);
	op = sh_find_op(&h, WFE_OP_RETRY, equal);
	ok(op && op->delay_us == 1500000, "jitter equal: attempt 2: 1000 + 0.5 * 1000 ms");
	if (op && op->delay_us != 1500000)
		diag("delay %lld us", (long long) op->delay_us);
	run_close(&h, "jitter");
}

static void
test_timeout(void)
{
	sh			h;
	int			a,
				cleanup;
	const sh_op *op;

	run_open(&h, rp_linear, "{\"x\": 1}", NULL);
	a = X(&h, "a");
	cleanup = X(&h, "cleanup");
	sh_start(&h);
	sh_claim(&h, a);
	ok(sh_expire(&h, a, "execution"), "timeout: a running attempt expires");
	ok(op_index(&h, WFE_OP_TIME_OUT, a) >= 0 && op_index(&h, WFE_OP_TIME_OUT, a) < op_index(&h, WFE_OP_RETRY, a),
	   "timeout: TIME_OUT, then RETRY");
	ok(h.rows[a].state == WFE_RETRY_SCHEDULED && h.rows[a].fence == F(2) && h.rows[a].attempt == 1,
	   "timeout: the attempt is fenced (fence 2) and retried later");
	expect_json(sh_event_detail(&h, "stage.timed_out", a),
				"{\"clock\": \"execution\", \"deadline_at\": \"2030-01-01T00:00:00+00:00\"}",
				"timeout: event stage.timed_out with the clock");
	expect_str(sh_json_get(h.rows[a].error, "code"), "timeout.execution", "timeout: error timeout.execution");
	ok(h.timers[h.ntimers - 1].fence == F(2), "timeout: the retry timer carries the new fence");
	expect_str(sh_callback(&h, a, WFE_CB_COMPLETE, 1, 1, "{}", 1), "stale",
			   "timeout: the expired attempt's report is stale");
	sh_fire_retry(&h, a);
	ok(h.rows[a].attempt == 2 && h.rows[a].fence == F(3), "timeout: attempt 2, fence generation 3");
	ok(sh_expire(&h, a, "execution"), "timeout: a queued attempt expires too");
	expect_str(sh_json_get(h.rows[a].error, "code"), "timeout.queue", "timeout: a queued attempt: timeout.queue");
	ok(!sh_expire(&h, a, "execution"), "timeout: a retry_scheduled stage has no deadline (server)");
	sh_fire_retry(&h, a);
	sh_fail(&h, a, NULL, 0);
	expect_state(&h, "cleanup", WFE_QUEUED, "timeout");
	sh_claim(&h, cleanup);
	sh_expire(&h, cleanup, "heartbeat");
	op = sh_find_op(&h, WFE_OP_FAIL, cleanup);
	ok(op && op->state == WFE_TIMED_OUT && op->flag == 1,
	   "timeout: no attempt left: FAIL as timed_out, a dead letter");
	ok(h.rows[cleanup].state == WFE_TIMED_OUT && events_last(&h, "stage.failed", "cleanup") == 0,
	   "timeout: the stage ends timed_out; no stage.failed (the timeout was recorded)");
	expect_str(sh_json_get(h.rows[cleanup].error, "code"), "timeout.heartbeat", "timeout: timeout.heartbeat");
	expect_int(h.run.intent, WFE_RUN_FAILED, "timeout: on_failure of cleanup: failed");
	ok(h.run.finished && h.run.state == WFE_RUN_FAILED, "timeout: the run failed");
	run_close(&h, "timeout");
}

/* ---------------------------------------------------------------------
 * Binding
 * --------------------------------------------------------------------- */

static void
test_binding(void)
{
	sh			h;
	int			a,
				b;
	const sh_op *op;

	/* ${context.x} missing */
	run_open(&h, rp_linear, "{}", NULL);
	a = X(&h, "a");
	sh_start(&h);
	op = sh_find_op(&h, WFE_OP_BIND_FAILED, a);
	ok(op != NULL, "binding: a missing ${context.x} fails the binding");
	expect_str(op ? sh_json_get(op->json, "code") : NULL, "binding.missing", "binding: code binding.missing");
	ok(h.rows[a].state == WFE_FAILED && h.rows[a].attempt == 1 && h.rows[a].fence == F(1) &&
	   h.rows[a].outcome == WFE_FAILED, "binding: a is failed, attempt 1, fence 1");
	ok(sh_count_ops(&h, WFE_OP_RETRY, -2) == 0 && h.ndead == 0 && h.ntimers == 0,
	   "binding: no retry, no dead letter, although retries are left");
	ok(events_last(&h, "stage.binding_failed", "a") == 1, "binding: event stage.binding_failed");
	expect_state(&h, "cleanup", WFE_QUEUED, "binding: the failure follows on_failure");
	sh_complete(&h, X(&h, "cleanup"), "{}");
	run_close(&h, "binding missing");

	/* the contract's input schema refuses the bound value */
	run_open(&h, rp_linear, "{\"x\": \"text\"}", NULL);
	a = X(&h, "a");
	sh_set_schema(&h, a, "{\"type\": \"object\", \"properties\": {\"x\": {\"type\": \"integer\"}}}", NULL);
	sh_start(&h);
	op = sh_find_op(&h, WFE_OP_BIND_FAILED, a);
	expect_str(op ? sh_json_get(op->json, "code") : NULL, "binding.type", "binding: the input schema: binding.type");
	expect_state(&h, "cleanup", WFE_QUEUED, "binding type");
	sh_fail(&h, X(&h, "cleanup"), NULL, 1);
	run_close(&h, "binding type");

	/* the schema is checked even when nothing interpolates */
	run_open(&h, rp_jitter, NULL, NULL);
	sh_set_schema(&h, X(&h, "full"), "{\"type\": \"object\", \"required\": [\"need\"]}", NULL);
	sh_start(&h);
	ok(sh_find_op(&h, WFE_OP_BIND_FAILED, X(&h, "full")) != NULL,
	   "binding: an input without ${} is still checked against the schema");
	ok(h.run.intent == WFE_RUN_FAILED && h.run.finished, "binding: its on_failure, failed, ends the run");
	run_close(&h, "binding schema");

	/* a stage result that lacks the path */
	run_open(&h, rp_linear, "{\"x\": 1}", NULL);
	a = X(&h, "a");
	b = X(&h, "b");
	sh_start(&h);
	sh_complete(&h, a, "{\"w\": 1}");
	op = sh_find_op(&h, WFE_OP_BIND_FAILED, b);
	expect_str(op ? sh_json_get(op->json, "code") : NULL, "binding.missing",
			   "binding: stages.a.result.v missing: binding.missing");
	ok(h.run.intent == WFE_RUN_FAILED, "binding: b's on_failure, failed");
	expect_skipped(&h, "cleanup", "run_aborted", "binding");
	run_close(&h, "binding stage result");

	/* $${ is a literal ${, also in a template with nothing else to bind */
	run_open(&h, rp_escape, "{\"x\": 5}", NULL);
	sh_start(&h);
	expect_json(h.rows[X(&h, "a")].input, "{\"price\": \"${not a reference}\", \"plain\": \"no refs\", \"n\": 2}",
				"binding: $${ alone is resolved to a literal ${");
	sh_complete(&h, X(&h, "a"), "{}");
	expect_json(h.rows[X(&h, "b")].input, "{\"label\": \"${x} is 5\"}",
				"binding: $${ next to a reference, both resolved");
	sh_complete(&h, X(&h, "b"), "{}");
	run_close(&h, "binding escape");
}

/* ---------------------------------------------------------------------
 * Decisions
 * --------------------------------------------------------------------- */

static void
test_decision_seed000(void)
{
	sh			h;
	int			lookup,
				route,
				publish,
				fin;
	const sh_op *op;
	static const char *const not_taken[] = {"render-thumbnail", "derive-fork", "semantic-analysis",
	"technical-metadata", "derive-join"};

	/* a cache hit: publish, and everything only the miss reaches is skipped */
	run_open(&h, rp_model, "{\"modelId\": \"m-1\"}", NULL);
	lookup = X(&h, "cache-lookup");
	route = X(&h, "cache-route");
	publish = X(&h, "publish");
	fin = X(&h, "finaliser.1");
	sh_start(&h);
	expect_json(h.rows[lookup].input, "{\"modelId\": \"m-1\"}", "seed 000: cache-lookup's input");
	sh_claim(&h, lookup);
	sh_complete(&h, lookup, "{\"hit\": true, \"uri\": \"s3://m\"}");
	op = sh_find_op(&h, WFE_OP_RESOLVE, route);
	ok(op && op->state == WFE_COMPLETED, "seed 000 hit: the decision resolves completed");
	expect_json(h.rows[route].result, "{\"branch\": 1, \"next\": \"publish\"}", "seed 000 hit: result branch 1, publish");
	expect_json(sh_event_detail(&h, "stage.decided", route), "{\"branch\": 1, \"next\": \"publish\"}",
				"seed 000 hit: event stage.decided");
	for (size_t k = 0; k < sizeof(not_taken) / sizeof(not_taken[0]); k++)
		expect_skipped(&h, not_taken[k], "branch_not_taken", "seed 000 hit");
	expect_json(sh_event_detail(&h, "stage.skipped", X(&h, "derive-join")),
				"{\"reason\": \"branch_not_taken\", \"decision\": \"cache-route\"}",
				"seed 000 hit: the skip names the decision");
	expect_state(&h, "publish", WFE_QUEUED, "seed 000 hit: publish, reachable from the taken branch, runs");
	expect_state(&h, "finaliser.1", WFE_WAITING, "seed 000 hit: finalisers wait for the intent");
	sh_complete(&h, publish, "{}");
	ok(h.run.intent == WFE_RUN_COMPLETED && h.run.state == WFE_RUN_FINALISING && !h.run.finished,
	   "seed 000 hit: completed intent, the run is finalising");
	ok(op_index(&h, WFE_OP_INTENT, -1) < op_index(&h, WFE_OP_FINALISING, -1) &&
	   op_index(&h, WFE_OP_FINALISING, -1) < op_index(&h, WFE_OP_ENQUEUE, fin),
	   "seed 000 hit: intent, finalising, then finaliser.1 released");
	expect_str(sh_json_get(h.rows[fin].input, "intent"), "completed", "seed 000: the finaliser's input has the intent");
	expect_str(sh_json_get(h.rows[fin].input, "stages"),
			   "{\"cache-lookup\":\"completed\",\"cache-route\":\"completed\",\"render-thumbnail\":\"skipped\","
			   "\"derive-fork\":\"skipped\",\"semantic-analysis\":\"skipped\",\"technical-metadata\":\"skipped\","
			   "\"derive-join\":\"skipped\",\"publish\":\"completed\"}",
			   "seed 000: the finaliser's input maps each stage to its state");
	expect_str(sh_json_get(h.rows[fin].input, "workflow"), "model-ingest", "seed 000: ... and names the workflow");
	sh_complete(&h, fin, "{}");
	op = sh_find_op(&h, WFE_OP_FINISH, -1);
	ok(op && op->state == WFE_RUN_COMPLETED && h.run.state == WFE_RUN_COMPLETED,
	   "seed 000 hit: the finaliser completed: the run is completed");
	run_close(&h, "seed 000 cache hit");

	/* a miss: render-thumbnail; nothing skipped, publish still reachable */
	run_open(&h, rp_model, "{\"modelId\": \"m-1\"}", NULL);
	lookup = X(&h, "cache-lookup");
	route = X(&h, "cache-route");
	sh_start(&h);
	sh_complete(&h, lookup, "{\"hit\": false}");
	expect_json(h.rows[route].result, "{\"branch\": 2, \"next\": \"render-thumbnail\"}",
				"seed 000 miss: the fallback, branch 2");
	expect_ops(&h, WFE_OP_SKIP, NULL, 0, "seed 000 miss: nothing is skipped");
	expect_state(&h, "render-thumbnail", WFE_QUEUED, "seed 000 miss");
	expect_state(&h, "publish", WFE_WAITING, "seed 000 miss: publish waits (reachable through the join)");
	sh_cancel(&h, "enough");
	run_close(&h, "seed 000 cache miss");

	/* an evaluation error: on_evaluation_error (failed) */
	run_open(&h, rp_model, "{\"modelId\": \"m-1\"}", NULL);
	lookup = X(&h, "cache-lookup");
	route = X(&h, "cache-route");
	sh_start(&h);
	sh_complete(&h, lookup, "{\"uri\": \"s3://m\"}");
	op = sh_find_op(&h, WFE_OP_RESOLVE, route);
	ok(op && op->state == WFE_FAILED && op->json == NULL, "seed 000 error: the decision fails without result");
	expect_str(op ? sh_json_get(op->json2, "code") : NULL, "expr.eval", "seed 000 error: error expr.eval");
	expect_str(op ? sh_json_get(op->json2, "branch") : NULL, "1", "seed 000 error: ... at branch 1");
	ok(events_last(&h, "stage.evaluation_error", "cache-route") == 1, "seed 000 error: event stage.evaluation_error");
	ok(h.run.intent == WFE_RUN_FAILED, "seed 000 error: on_evaluation_error failed: failed intent");
	expect_skipped(&h, "publish", "branch_not_taken", "seed 000 error: nothing live reaches publish");
	expect_state(&h, "finaliser.1", WFE_QUEUED, "seed 000 error: the finaliser runs");
	sh_complete(&h, X(&h, "finaliser.1"), "{}");
	ok(h.run.finished && h.run.state == WFE_RUN_FAILED, "seed 000 error: the run failed");
	run_close(&h, "seed 000 evaluation error");
}

static void
test_decision_rules(void)
{
	static const struct
	{
		const char *context;
		const char *prep;
		const char *taken;
		int			error;
	}			cases[] = {
		{"{\"amount\": 500}", "{\"score\": 1}", "big", 0},
		{"{\"amount\": 1}", "{\"score\": 7}", "mid", 0},
		{"{\"amount\": 1}", "{\"score\": 1}", "small", 0},
		{"{\"amount\": \"lots\"}", "{\"score\": 9}", "oops", 1},
		{"{\"amount\": 1}", "{}", "oops", 1},
	};
	static const char *const targets[] = {"big", "mid", "small", "oops"};

	for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++)
	{
		sh			h;
		char		what[160];
		int			route;

		run_open(&h, rp_decide, cases[c].context, NULL);
		route = X(&h, "route");
		snprintf(what, sizeof(what), "decision %s, prep %s", cases[c].context, cases[c].prep);
		sh_start(&h);
		sh_complete(&h, X(&h, "prep"), cases[c].prep);
		expect_state(&h, cases[c].taken, WFE_QUEUED, what);
		ok(h.rows[route].state == (cases[c].error ? WFE_FAILED : WFE_COMPLETED),
		   "%s: the decision %s", what, cases[c].error ? "failed" : "completed");
		for (size_t t = 0; t < sizeof(targets) / sizeof(targets[0]); t++)
			if (strcmp(targets[t], cases[c].taken) != 0)
				expect_skipped(&h, targets[t], "branch_not_taken", what);
		if (strcmp(cases[c].taken, "mid") == 0)
			expect_json(h.rows[X(&h, "mid")].input, "{\"score\": 7}", "decision: mid binds the result it read");
		if (cases[c].error)
			expect_str(sh_json_get(h.rows[route].error, "code"), "expr.eval", "decision error: expr.eval");
		sh_complete(&h, X(&h, cases[c].taken), "{}");
		ok(h.run.finished && h.run.state == (cases[c].error ? WFE_RUN_FAILED : WFE_RUN_COMPLETED),
		   "%s: the run ends %s", what, cases[c].error ? "failed" : "completed");
		run_close(&h, what);
	}
}

/* ---------------------------------------------------------------------
 * Forks and joins
 * --------------------------------------------------------------------- */

static void
test_fork_join(void)
{
	sh			h;
	int			fork,
				sem,
				tech,
				join,
				publish,
				fin;
	const sh_op *op;

	run_open(&h, rp_model, "{\"modelId\": \"m-2\"}", NULL);
	fork = X(&h, "derive-fork");
	sem = X(&h, "semantic-analysis");
	tech = X(&h, "technical-metadata");
	join = X(&h, "derive-join");
	publish = X(&h, "publish");
	fin = X(&h, "finaliser.1");
	sh_start(&h);
	sh_complete(&h, X(&h, "cache-lookup"), "{\"hit\": false}");
	sh_publish(&h, X(&h, "render-thumbnail"));
	expect_str(sh_accept(&h, X(&h, "render-thumbnail")), "accepted", "fork: render-thumbnail accepted (dispatched)");
	sh_complete(&h, X(&h, "render-thumbnail"), "{}");
	op = sh_find_op(&h, WFE_OP_RESOLVE, fork);
	ok(op && op->state == WFE_COMPLETED, "fork: the fork resolves completed at release");
	expect_json(h.rows[fork].result, "{\"branches\": [\"semantic-analysis\", \"technical-metadata\"]}",
				"fork: result lists the branches");
	ok(events_last(&h, "stage.forked", "derive-fork") == 1, "fork: event stage.forked");
	ok(h.rows[sem].state == WFE_QUEUED && h.rows[sem].branch == sem &&
	   h.rows[tech].state == WFE_QUEUED && h.rows[tech].branch == tech,
	   "fork: both branches released, each recording its branch name");
	ok(sh_count_ops(&h, WFE_OP_BRANCH, sem) == 1 && sh_count_ops(&h, WFE_OP_BRANCH, tech) == 1,
	   "fork: a BRANCH op for each");

	sh_complete(&h, sem, "{}");
	op = sh_find_op(&h, WFE_OP_ARRIVALS, join);
	ok(op && h.rows[join].state == WFE_WAITING, "join: the first arrival is recorded, the join waits");
	expect_json(h.rows[join].result, "{\"arrivals\": {\"semantic-analysis\": \"completed\"}}",
				"join: result.arrivals holds the branch and its outcome");
	expect_json(sh_event_detail(&h, "stage.join_arrival", join),
				"{\"branch\": \"semantic-analysis\", \"outcome\": \"completed\"}", "join: event stage.join_arrival");
	expect_state(&h, "publish", WFE_WAITING, "join: publish waits for the join");

	sh_claim(&h, tech);
	sh_complete(&h, tech, "{}");
	op = sh_find_op(&h, WFE_OP_RESOLVE, join);
	ok(op && op->state == WFE_COMPLETED && sh_count_ops(&h, WFE_OP_RESOLVE, join) == 1,
	   "join: the last required arrival resolves it, once");
	expect_json(h.rows[join].result,
				"{\"arrivals\": {\"semantic-analysis\": \"completed\", \"technical-metadata\": \"completed\"}}",
				"join: result holds every arrival");
	expect_json(sh_event_detail(&h, "stage.joined", join),
				"{\"arrivals\": {\"semantic-analysis\": \"completed\", \"technical-metadata\": \"completed\"},"
				" \"next\": \"publish\"}", "join: event stage.joined names the successor");
	ok(h.rows[publish].state == WFE_QUEUED && h.rows[publish].branch == -1,
	   "join: publish released in the fork's outer branch (none)");
	ok(events_total(&h, "stage.joined", "derive-join") == 1 && events_total(&h, "stage.released", "publish") == 1,
	   "join: joined once, publish released once");

	sh_complete(&h, publish, "{}");
	expect_state(&h, "finaliser.1", WFE_QUEUED, "finaliser");
	expect_str(sh_fail(&h, fin, "{\"code\": \"audit.down\"}", 0), "accepted",
			   "finaliser: a finaliser's failure after the intent is accepted (not late)");
	op = sh_find_op(&h, WFE_OP_FINISH, -1);
	ok(op && op->state == WFE_RUN_FAILED && op->text && strcmp(op->text, "a finaliser failed") == 0,
	   "finaliser: completed intent, a finaliser failed: FINISH failed, \"a finaliser failed\"");
	ok(h.run.state == WFE_RUN_FAILED && h.reason && strcmp(h.reason, "a finaliser failed") == 0,
	   "finaliser: the run is failed with that reason");
	ok(events_last(&h, "run.failed", NULL) == 1, "finaliser: event run.failed");
	run_close(&h, "fork and join");
}

static void
test_nested_forks(void)
{
	sh			h;
	int			f2,
				a,
				b,
				c,
				j1,
				j2,
				after2,
				done;
	const sh_op *op;

	run_open(&h, rp_nest, NULL, NULL);
	f2 = X(&h, "f2");
	a = X(&h, "a");
	b = X(&h, "b");
	c = X(&h, "c");
	j1 = X(&h, "j1");
	j2 = X(&h, "j2");
	after2 = X(&h, "after2");
	done = X(&h, "done");
	sh_start(&h);
	ok(h.rows[a].branch == a && h.rows[f2].branch == f2 && h.rows[f2].state == WFE_COMPLETED &&
	   h.rows[b].branch == b && h.rows[c].branch == c && h.rows[a].state == WFE_QUEUED &&
	   h.rows[b].state == WFE_QUEUED && h.rows[c].state == WFE_QUEUED,
	   "nested: the start resolves both forks and releases a, b, c in their branches");
	sh_complete(&h, b, "{}");
	sh_complete(&h, c, "{}");
	ok(h.rows[j2].state == WFE_COMPLETED && h.rows[j2].branch == f2,
	   "nested: the inner join resolves in its fork's branch (f2)");
	ok(h.rows[after2].state == WFE_QUEUED && h.rows[after2].branch == f2,
	   "nested: after the inner join, the run goes on in the outer branch f2");
	expect_state(&h, "j1", WFE_WAITING, "nested");
	sh_complete(&h, after2, "{}");
	expect_json(h.rows[j1].result, "{\"arrivals\": {\"f2\": \"completed\"}}", "nested: the outer join records f2's arrival");
	sh_claim(&h, a);
	sh_expire(&h, a, "execution");
	ok(h.rows[a].state == WFE_TIMED_OUT, "nested: a times out with no attempt left");
	op = sh_find_op(&h, WFE_OP_RESOLVE, j1);
	ok(op && op->state == WFE_COMPLETED, "nested: timed_out is acceptable to j1: joined");
	expect_json(h.rows[j1].result, "{\"arrivals\": {\"f2\": \"completed\", \"a\": \"timed_out\"}}",
				"nested: the arrival is a's real final state, timed_out");
	ok(h.rows[done].state == WFE_QUEUED && h.rows[done].branch == -1 && sh_count_ops(&h, WFE_OP_BRANCH, done) == 0,
	   "nested: done runs outside any branch");
	sh_complete(&h, done, "{}");
	ok(h.run.finished && h.run.state == WFE_RUN_COMPLETED, "nested: completed");
	run_close(&h, "nested forks");

	/* an arrival that is not acceptable */
	run_open(&h, rp_nest, NULL, NULL);
	a = X(&h, "a");
	b = X(&h, "b");
	c = X(&h, "c");
	j2 = X(&h, "j2");
	sh_start(&h);
	sh_claim(&h, b);
	sh_fail(&h, c, "{\"code\": \"x\"}", 0);
	expect_json(h.rows[j2].result, "{\"arrivals\": {\"c\": \"failed\"}}", "join failed: c's failure arrives");
	expect_state(&h, "j2", WFE_WAITING, "join failed: the join waits for b");
	sh_complete(&h, b, "{}");
	op = sh_find_op(&h, WFE_OP_RESOLVE, j2);
	ok(op && op->state == WFE_FAILED, "join failed: resolved failed");
	expect_str(sh_json_get(h.rows[j2].error, "code"), "join.unsatisfied", "join failed: error join.unsatisfied");
	ok(events_last(&h, "stage.join_failed", "j2") == 1 && events_last(&h, "stage.joined", NULL) == 0,
	   "join failed: event stage.join_failed, no stage.joined");
	ok(h.run.intent == WFE_RUN_FAILED, "join failed: on_failure failed");
	op = sh_find_op(&h, WFE_OP_CANCEL, a);
	ok(op && op->flag == 0 && h.rows[a].state == WFE_CANCELLED && h.rows[a].fence == F(2),
	   "join failed: the queued sibling a is fenced and cancelled, no cancel message");
	expect_skipped(&h, "after2", "run_aborted", "join failed");
	expect_skipped(&h, "j1", "run_aborted", "join failed");
	expect_skipped(&h, "done", "run_aborted", "join failed");
	run_close(&h, "join failed");
}

/* A fork's branch head that is a decision must not skip its sibling branches. */
static void
test_fork_decision(void)
{
	sh			h;
	int			b,
				b2,
				j,
				x,
				d;

	run_open(&h, rp_forkdec, "{\"go\": false}", NULL);
	b = X(&h, "b");
	b2 = X(&h, "b2");
	j = X(&h, "j");
	sh_start(&h);
	ok(h.rows[X(&h, "d")].state == WFE_COMPLETED && h.rows[X(&h, "e")].state == WFE_COMPLETED,
	   "fork decision: both decisions resolve at the fork's release");
	expect_skipped(&h, "x", "branch_not_taken", "fork decision: the branch not taken");
	expect_state(&h, "b", WFE_QUEUED, "fork decision: the sibling released after d is not skipped");
	expect_state(&h, "b2", WFE_WAITING, "fork decision: b2, reachable only from the running b, is not skipped");
	expect_json(h.rows[j].result, "{\"arrivals\": {\"d\": \"completed\", \"e\": \"completed\"}}",
				"fork decision: d's and e's branches arrive at the join under their names");
	if (h.rows[b].state == WFE_QUEUED)
	{
		sh_complete(&h, b, "{}");
		ok(h.rows[b2].state == WFE_QUEUED && h.rows[b2].branch == b, "fork decision: b2 runs in branch b");
		sh_complete(&h, b2, "{}");
		ok(h.rows[j].state == WFE_COMPLETED && h.run.finished && h.run.state == WFE_RUN_COMPLETED,
		   "fork decision: b's branch arrives, the join completes, so does the run");
	}
	else
		ok(0, "fork decision: the run can go on");
	run_close(&h, "fork with decision branches (go false)");

	run_open(&h, rp_forkdec, "{\"go\": true}", NULL);
	b = X(&h, "b");
	b2 = X(&h, "b2");
	x = X(&h, "x");
	d = X(&h, "d");
	sh_start(&h);
	ok(h.rows[x].state == WFE_QUEUED && h.rows[x].branch == d && h.rows[b].state == WFE_QUEUED &&
	   h.rows[b2].state == WFE_WAITING, "fork decision (go): x runs in branch d, b runs, b2 waits");
	sh_complete(&h, x, "{}");
	sh_complete(&h, b, "{}");
	sh_complete(&h, b2, "{}");
	ok(h.run.finished && h.run.state == WFE_RUN_COMPLETED, "fork decision (go): completed");
	run_close(&h, "fork with decision branches (go true)");
}

/* ---------------------------------------------------------------------
 * Intents, finalisers, cancel, run deadline
 * --------------------------------------------------------------------- */

/* Put p..t in queued, running, dispatched, queued, retry_scheduled. */
static void
intents_setup(sh *h)
{
	sh_start(h);
	sh_claim(h, X(h, "q"));
	sh_publish(h, X(h, "r"));
	sh_claim(h, X(h, "t"));
	sh_fail(h, X(h, "t"), "{\"code\": \"flaky\"}", 1);
}

static void
test_intent_failed(void)
{
	sh			h;
	int			p,
				q,
				r,
				s,
				t,
				f1,
				f2,
				nt;
	const sh_op *op;

	run_open(&h, rp_intents, NULL, NULL);
	p = X(&h, "p");
	q = X(&h, "q");
	r = X(&h, "r");
	s = X(&h, "s");
	t = X(&h, "t");
	f1 = X(&h, "finaliser.1");
	f2 = X(&h, "finaliser.2");
	intents_setup(&h);
	ok(h.rows[q].state == WFE_RUNNING && h.rows[r].state == WFE_DISPATCHED && h.rows[s].state == WFE_QUEUED &&
	   h.rows[t].state == WFE_RETRY_SCHEDULED, "intent: siblings running, dispatched, queued, retry_scheduled");
	nt = h.ntimers;
	sh_fail(&h, p, "{\"code\": \"fatal\"}", 0);
	op = sh_find_op(&h, WFE_OP_INTENT, -1);
	ok(op && op->state == WFE_RUN_FAILED && h.run.intent == WFE_RUN_FAILED, "intent: p routes to failed: failed intent");
	expect_str(h.reason, "stage p routed to failed", "intent: reason");
	op = sh_find_op(&h, WFE_OP_CANCEL, q);
	ok(op && op->flag == 1, "intent: running q cancelled with a cancel message");
	op = sh_find_op(&h, WFE_OP_CANCEL, r);
	ok(op && op->flag == 1, "intent: dispatched r cancelled with a cancel message");
	op = sh_find_op(&h, WFE_OP_CANCEL, s);
	ok(op && op->flag == 0, "intent: queued s cancelled without");
	op = sh_find_op(&h, WFE_OP_CANCEL, t);
	ok(op && op->flag == 0, "intent: retry_scheduled t cancelled without");
	expect_ops(&h, WFE_OP_CANCEL, "p", 0, "intent: the failed stage itself is not cancelled");
	ok(h.ncancels == 2 && h.cancels[0].stage == q && h.cancels[0].fence == F(1) && h.cancels[1].stage == r,
	   "intent: two cancel messages, naming the fenced attempts");
	ok(h.rows[q].state == WFE_CANCELLED && h.rows[q].fence == F(2) && h.rows[t].fence == F(2),
	   "intent: cancelled stages are fenced");
	expect_str(sh_json_get(h.rows[q].error, "code"), "run.failed", "intent: the cancel error is run.failed");
	expect_json(sh_event_detail(&h, "stage.cancelled", q),
				"{\"was\": \"running\", \"cancel_requested\": true}", "intent: event stage.cancelled");
	ok(sh_event_fence(&h, "stage.cancelled", q) == F(1),
	   "intent: stage.cancelled is about the fence of the attempt asked to stop (apart from its detail)");
	expect_skipped(&h, "j", "run_aborted", "intent failed");
	expect_skipped(&h, "after", "run_aborted", "intent failed");
	ok(h.timers[nt - 1].fired, "intent: t's pending retry timer is retired");
	ok(h.run.state == WFE_RUN_FINALISING && h.rows[f1].state == WFE_QUEUED && h.rows[f2].state == WFE_WAITING,
	   "intent: finalising; finaliser.1 released, finaliser.2 waits");
	expect_str(sh_json_get(h.rows[f1].input, "intent"), "failed", "intent: the finaliser's input says failed");

	expect_str(sh_callback(&h, q, WFE_CB_COMPLETE, 1, 1, "{}", 1), "late", "intent: q's old attempt is late");
	expect_str(sh_callback(&h, q, WFE_CB_COMPLETE, 1, 2, "{}", 1), "late", "intent: even with the current fence, late");
	expect_str(sh_callback(&h, r, WFE_CB_ACCEPT, 1, 1, NULL, 1), "late", "intent: r's accept is late");
	expect_str(sh_callback(&h, X(&h, "j"), WFE_CB_COMPLETE, 0, 0, "{}", 1), "late",
			   "intent: a never-issued attempt after the intent is late, not stale");
	expect_str(sh_fail(&h, p, "{\"code\": \"fatal\"}", 0), "duplicate",
			   "intent: p's own failure again is a duplicate, even after the intent");
	expect_str(sh_fail(&h, p, "{\"code\": \"other\"}", 0), "conflict", "intent: another error is a conflict");
	expect_str(sh_complete(&h, p, "{}"), "conflict", "intent: a completion of the failed attempt is a conflict");
	ok(h.nops == 1 && strcmp(op_event(&h, 0), "callback.conflict") == 0,
	   "intent: a rejection writes one callback.* event and nothing else");
	sh_retry_due(&h, t, 1, 1);
	ok(h.nops == 0 && h.rows[t].state == WFE_CANCELLED, "intent: a stale retry timer of t does nothing");
	sh_run_deadline(&h);
	ok(h.nops == 0, "intent: the run deadline after the intent does nothing");
	expect_str(sh_cancel(&h, "late"), "late", "intent: cancel_run after the intent is late");
	sh_begin(&h);
	wfe_step_cancel(&h.st, "again");
	sh_end(&h, NULL, "a second intent, straight to the core");
	ok(h.nops == 0 && h.run.intent == WFE_RUN_FAILED, "intent: the core sets an intent once");

	expect_str(sh_complete(&h, f1, "{}"), "accepted", "finalisers: finaliser.1 completes (exempt from late)");
	ok(h.rows[f2].state == WFE_QUEUED && sh_count_ops(&h, WFE_OP_FINISH, -1) == 0,
	   "finalisers: then finaliser.2 is released, in declared order");
	expect_str(sh_fail(&h, f2, "{\"code\": \"flaky\"}", 1), "accepted", "finalisers: finaliser.2 fails, retryable");
	ok(h.rows[f2].state == WFE_RETRY_SCHEDULED && !h.timers[h.ntimers - 1].fired,
	   "finalisers: a finaliser is retried after the intent");
	ok(sh_fire_retry(&h, f2) && h.rows[f2].state == WFE_QUEUED && h.rows[f2].attempt == 2,
	   "finalisers: its retry timer fires: attempt 2");
	sh_fail(&h, f2, "{\"code\": \"flaky\"}", 1);
	op = sh_find_op(&h, WFE_OP_FAIL, f2);
	ok(op && op->flag == 1, "finalisers: finaliser.2 exhausts its retries: dead letter");
	op = sh_find_op(&h, WFE_OP_FINISH, -1);
	ok(op && op->state == WFE_RUN_FAILED && op->text == NULL, "finalisers: failed intent: FINISH failed, reason kept");
	ok(h.run.finished && h.finishes == 1, "finalisers: the run finished once");
	expect_str(sh_complete(&h, f1, "{}"), "duplicate", "finalisers: finaliser.1's report again: duplicate");
	run_close(&h, "failed intent and finalisers");
}

static void
test_intent_completed_finalisers(void)
{
	sh			h;
	static const char *const branches[] = {"p", "q", "r", "s", "t"};
	int			f1,
				f2;

	run_open(&h, rp_intents, NULL, NULL);
	f1 = X(&h, "finaliser.1");
	f2 = X(&h, "finaliser.2");
	sh_start(&h);
	for (size_t k = 0; k < 5; k++)
		sh_complete(&h, X(&h, branches[k]), "{}");
	expect_state(&h, "j", WFE_COMPLETED, "completed intent: the join");
	sh_complete(&h, X(&h, "after"), "{}");
	ok(h.run.intent == WFE_RUN_COMPLETED && h.rows[f1].state == WFE_QUEUED, "completed intent: finaliser.1 runs");
	expect_str(sh_json_get(h.rows[f1].input, "intent"), "completed", "completed intent: the finaliser's input");
	sh_claim(&h, f1);
	sh_fail(&h, f1, "{\"code\": \"flaky\"}", 1);
	expect_state(&h, "finaliser.2", WFE_WAITING, "completed intent: finaliser.2 waits while finaliser.1 retries");
	sh_fire_retry(&h, f1);
	sh_complete(&h, f1, "{}");
	sh_complete(&h, f2, "{}");
	ok(h.run.finished && h.run.state == WFE_RUN_COMPLETED && h.reason &&
	   strcmp(h.reason, "stage after routed to completed") == 0,
	   "completed intent: every finaliser completed: completed");
	run_close(&h, "completed intent and finalisers");
}

static void
test_cancel(void)
{
	sh			h;
	const sh_op *op;

	run_open(&h, rp_intents, NULL, NULL);
	intents_setup(&h);
	expect_str(sh_cancel(&h, "operator says stop"), "accepted", "cancel: accepted");
	op = sh_find_op(&h, WFE_OP_INTENT, -1);
	ok(op && op->state == WFE_RUN_CANCELLED && h.reason && strcmp(h.reason, "operator says stop") == 0,
	   "cancel: cancelled intent with the reason");
	expect_ops(&h, WFE_OP_CANCEL, NULL, 5, "cancel: all five branches in flight are cancelled");
	ok(h.ncancels == 2, "cancel: cancel messages for the running and the dispatched one");
	expect_str(sh_json_get(h.rows[X(&h, "p")].error, "code"), "run.cancelled", "cancel: error run.cancelled");
	expect_skipped(&h, "j", "run_aborted", "cancel");
	expect_skipped(&h, "after", "run_aborted", "cancel");
	expect_state(&h, "finaliser.1", WFE_QUEUED, "cancel: finalisers run when cancelled too");
	sh_complete(&h, X(&h, "finaliser.1"), "{}");
	sh_fail(&h, X(&h, "finaliser.2"), NULL, 0);
	op = sh_find_op(&h, WFE_OP_FINISH, -1);
	ok(op && op->state == WFE_RUN_CANCELLED && h.run.state == WFE_RUN_CANCELLED,
	   "cancel: the run is cancelled, whatever its finalisers did");
	ok(events_last(&h, "run.cancelled", NULL) == 1, "cancel: event run.cancelled");
	run_close(&h, "cancel");
}

static void
test_run_deadline(void)
{
	sh			h;

	run_open(&h, rp_intents, NULL, NULL);
	sh_start(&h);
	sh_run_deadline(&h);
	ok(events_last(&h, "run.deadline_expired", NULL) == 1, "run deadline: event run.deadline_expired");
	ok(h.run.intent == WFE_RUN_FAILED && h.reason && strcmp(h.reason, "run deadline passed") == 0,
	   "run deadline: failed intent, \"run deadline passed\"");
	expect_ops(&h, WFE_OP_CANCEL, NULL, 5, "run deadline: the branches are cancelled");
	sh_run_deadline(&h);
	ok(h.nops == 0, "run deadline: a second firing does nothing");
	sh_complete(&h, X(&h, "finaliser.1"), "{}");
	sh_complete(&h, X(&h, "finaliser.2"), "{}");
	ok(h.run.finished && h.run.state == WFE_RUN_FAILED, "run deadline: the run failed after its finalisers");
	run_close(&h, "run deadline");
}

/* ---------------------------------------------------------------------
 * The tasks form
 * --------------------------------------------------------------------- */

static void
test_tasks_release(void)
{
	sh			h;
	int			a,
				b,
				c;
	const sh_op *op;

	run_open(&h, rp_tasks, NULL, NULL);
	a = X(&h, "a");
	b = X(&h, "b");
	c = X(&h, "c");
	sh_set_handler(&h, X(&h, "both"));	/* an in-database action */
	sh_start(&h);
	ok(h.rows[a].state == WFE_QUEUED && h.rows[b].state == WFE_QUEUED, "tasks: the tasks without deps start");
	expect_int(sh_count_ops(&h, WFE_OP_ENQUEUE, -2), 2, "tasks: only those");
	sh_complete(&h, a, "{}");
	expect_state(&h, "c", WFE_QUEUED, "tasks: a done releases c");
	expect_state(&h, "both", WFE_WAITING, "tasks: both waits for b as well");
	sh_fail(&h, c, "{\"code\": \"nope\"}", 0);
	expect_skipped(&h, "d", "dependency_failed", "tasks: non-critical c failed");
	expect_state(&h, "lenient", WFE_QUEUED, "tasks: allow_skipped: a skipped dependency counts as done");
	expect_skipped(&h, "strict", "dependency_failed", "tasks: require_success");
	ok(h.run.intent < 0, "tasks: a non-critical failure does not end the run");
	expect_state(&h, "b", WFE_QUEUED, "tasks: the unrelated b goes on");
	sh_complete(&h, b, "{}");
	ok(h.rows[X(&h, "e")].state == WFE_QUEUED && h.rows[X(&h, "both")].state == WFE_QUEUED,
	   "tasks: b done releases e, and both (all its deps done)");
	sh_complete(&h, X(&h, "e"), "{}");
	ok(sh_action_done(&h, X(&h, "both"), "{}", NULL) && h.rows[X(&h, "both")].state == WFE_COMPLETED,
	   "tasks: the in-database action both runs and completes");
	ok(h.run.intent < 0, "tasks: lenient still runs");
	sh_complete(&h, X(&h, "lenient"), "{}");
	op = sh_find_op(&h, WFE_OP_INTENT, -1);
	ok(op && op->state == WFE_RUN_COMPLETED && op->text && strcmp(op->text, "every awaited task finished") == 0,
	   "tasks: no awaited task left: completed intent");
	ok(h.run.finished && h.run.state == WFE_RUN_COMPLETED, "tasks: the run completes despite the non-critical failure");
	run_close(&h, "tasks release");
}

static void
test_tasks_critical(void)
{
	sh			h;
	int			a,
				b;
	const sh_op *op;
	static const char *const unstarted[] = {"c", "d", "e", "both", "lenient", "strict"};

	run_open(&h, rp_tasks, NULL, NULL);
	a = X(&h, "a");
	b = X(&h, "b");
	sh_start(&h);
	sh_claim(&h, b);
	sh_fail(&h, a, "{\"code\": \"disk\"}", 0);
	op = sh_find_op(&h, WFE_OP_INTENT, -1);
	ok(op && op->state == WFE_RUN_FAILED && op->text && strcmp(op->text, "critical task a failed") == 0,
	   "tasks critical: a failed critical task: failed intent");
	op = sh_find_op(&h, WFE_OP_CANCEL, b);
	ok(op && op->flag == 1, "tasks critical: the running b is fenced and asked to stop");
	for (size_t k = 0; k < sizeof(unstarted) / sizeof(unstarted[0]); k++)
		expect_skipped(&h, unstarted[k], "run_aborted", "tasks critical");
	ok(h.run.finished && h.run.state == WFE_RUN_FAILED, "tasks critical: the run failed");
	expect_str(sh_complete(&h, b, "{}"), "late", "tasks critical: b's report is late");
	run_close(&h, "tasks critical");

	run_open(&h, rp_tasks, NULL, NULL);
	a = X(&h, "a");
	sh_start(&h);
	sh_claim(&h, a);
	sh_expire(&h, a, "execution");
	ok(h.rows[a].state == WFE_TIMED_OUT && h.run.intent == WFE_RUN_FAILED,
	   "tasks critical: a timed-out critical task aborts the run too");
	run_close(&h, "tasks critical timeout");
}

static void
test_tasks_context(void)
{
	sh			h;
	int			p,
				u,
				v,
				bg,
				fin;
	const sh_op *op;

	/* the plan's context (background): p is gated, u misses p's output */
	run_open(&h, rp_tasks_context, NULL, NULL);
	p = X(&h, "p");
	u = X(&h, "u");
	v = X(&h, "v");
	bg = X(&h, "bg");
	fin = X(&h, "finaliser.1");
	sh_start(&h);
	expect_skipped(&h, "p", "context_gated", "tasks context (background)");
	expect_skipped(&h, "u", "missing_input", "tasks context: allow_skipped, but p's output was never written");
	ok(h.rows[v].state == WFE_QUEUED && h.rows[bg].state == WFE_QUEUED, "tasks context: v and bg start");
	expect_state(&h, "bgdep", WFE_WAITING, "tasks context");
	ok(sh_count_ops(&h, WFE_OP_ENQUEUE, p) == 0, "tasks context: nothing is dispatched for p");
	sh_claim(&h, bg);
	sh_complete(&h, v, "{}");
	op = sh_find_op(&h, WFE_OP_INTENT, -1);
	ok(op && op->state == WFE_RUN_COMPLETED, "awaits false: v done, only detached tasks left: completed intent");
	ok(sh_count_ops(&h, WFE_OP_CANCEL, bg) == 0 && h.rows[bg].state == WFE_RUNNING,
	   "awaits false: the detached bg is not fenced by a completed intent");
	expect_skipped(&h, "bgdep", "branch_not_taken", "awaits false: a detached task still waiting when the run completes");
	expect_state(&h, "finaliser.1", WFE_QUEUED, "awaits false: the finaliser runs");
	expect_str(sh_fail(&h, bg, "{\"code\": \"later\"}", 1), "accepted",
			   "awaits false: the detached task's failure after the intent is accepted");
	ok(h.rows[bg].state == WFE_RETRY_SCHEDULED && sh_fire_retry(&h, bg) && h.rows[bg].attempt == 2,
	   "awaits false: its retry fires after the intent");
	sh_complete(&h, fin, "{}");
	ok(h.run.finished && h.run.state == WFE_RUN_COMPLETED, "awaits false: the run completed");
	expect_str(sh_complete(&h, bg, "{}"), "accepted", "awaits false: it may still complete after the run ended");
	ok(h.nops > 0 && sh_count_ops(&h, WFE_OP_FINISH, -1) == 0 && sh_count_ops(&h, WFE_OP_ENQUEUE, -2) == 0,
	   "awaits false: its completion changes nothing else");
	run_close(&h, "tasks context gated, missing input, awaits false");

	/* foreground: p runs, its output reaches u */
	run_open(&h, rp_tasks_context, NULL, "foreground");
	p = X(&h, "p");
	u = X(&h, "u");
	bg = X(&h, "bg");
	sh_start(&h);
	expect_state(&h, "p", WFE_QUEUED, "tasks context (foreground): p runs");
	expect_str(sh_complete(&h, p, "{\"tok\": 5}"), "invalid_result", "produces: tok is a string, not a number");
	sh_fire_retry(&h, p);
	expect_str(sh_complete(&h, p, "{\"tok\": \"abc\", \"extra\": 1}"), "accepted", "produces: a string tok");
	ok(sh_find_op(&h, WFE_OP_OUTPUTS, p) != NULL && h.noutputs == 1 && strcmp(h.outputs[0].key, "tok") == 0 &&
	   strcmp(h.outputs[0].value, "\"abc\"") == 0, "outputs: the declared key, and only it, is written");
	expect_state(&h, "u", WFE_QUEUED, "outputs: u is released");
	expect_json(h.rows[u].input, "{\"t\": \"abc\"}", "outputs: u's input reads outputs.p.tok");
	sh_claim(&h, bg);
	sh_fail(&h, X(&h, "v"), NULL, 0);
	ok(h.run.intent == WFE_RUN_FAILED, "awaits false: the critical v fails the run");
	ok(sh_find_op(&h, WFE_OP_CANCEL, bg) != NULL, "awaits false: a failed intent fences the detached task");
	expect_str(sh_complete(&h, bg, "{}"), "late", "awaits false: then its report is late");
	run_close(&h, "tasks context foreground, outputs");
}

static void
test_tasks_edges(void)
{
	sh			h;
	const sh_op *op;

	run_open(&h, rp_tasks_edge, NULL, NULL);
	sh_start(&h);
	expect_int(sh_count_ops(&h, WFE_OP_ENQUEUE, -2), 4, "tasks edge: the four roots start");
	sh_complete(&h, X(&h, "r1"), "{}");
	expect_skipped(&h, "g", "context_gated", "tasks edge: gated as soon as it is considered, r2 still running");
	expect_state(&h, "after", WFE_QUEUED, "tasks edge: allow_skipped after the gated g");
	sh_complete(&h, X(&h, "r2"), "{}");
	ok(h.rows[X(&h, "g")].state == WFE_SKIPPED && sh_count_ops(&h, WFE_OP_SKIP, -2) == 0,
	   "tasks edge: r2's end considers g again: nothing changes");
	sh_complete(&h, X(&h, "p1"), "{\"tok\": \"first\"}");
	expect_state(&h, "both", WFE_WAITING, "tasks edge: both waits for p2");
	sh_complete(&h, X(&h, "p2"), "{\"n\": 4}");
	expect_json(h.rows[X(&h, "both")].input, "{\"t\": \"first\", \"n\": 4}",
				"tasks edge: outputs from wfe.outputs (p1, earlier) and from this step's result (p2)");
	sh_complete(&h, X(&h, "after"), "{}");
	sh_complete(&h, X(&h, "both"), "{}");
	ok(h.run.finished && h.run.state == WFE_RUN_COMPLETED, "tasks edge: completed");
	run_close(&h, "tasks gated late, outputs of two steps");

	run_open(&h, rp_tasks_bind, "{}", NULL);
	sh_start(&h);
	ok(sh_find_op(&h, WFE_OP_BIND_FAILED, X(&h, "first")) != NULL, "tasks binding: first's binding fails at the start");
	op = sh_find_op(&h, WFE_OP_INTENT, -1);
	ok(op && op->state == WFE_RUN_FAILED && op->text && strcmp(op->text, "critical task first failed") == 0,
	   "tasks binding: the critical task's binding failure aborts the run");
	ok(sh_find_op(&h, WFE_OP_CANCEL, X(&h, "other")) == NULL && h.rows[X(&h, "other")].state == WFE_SKIPPED,
	   "tasks binding: other, not released yet, is skipped, not cancelled");
	expect_skipped(&h, "other", "run_aborted", "tasks binding");
	expect_skipped(&h, "later", "run_aborted", "tasks binding");
	ok(h.run.finished && h.run.state == WFE_RUN_FAILED && sh_count_ops(&h, WFE_OP_INTENT, -1) == 1,
	   "tasks binding: one intent, the run failed within the start");
	run_close(&h, "tasks binding failure");
}

/* ---------------------------------------------------------------------
 * The gate
 * --------------------------------------------------------------------- */

static void
test_gate(void)
{
	sh			h;
	int			a,
				b,
				cleanup;

	run_open(&h, rp_linear, "{\"x\": 1}", NULL);
	a = X(&h, "a");
	b = X(&h, "b");
	cleanup = X(&h, "cleanup");
	expect_str(sh_callback(&h, a, WFE_CB_COMPLETE, 0, 0, "{}", 1), "stale", "gate: attempt 0, never issued: stale");
	expect_str(sh_callback(&h, -1, WFE_CB_COMPLETE, 1, 1, "{}", 1), "unknown", "gate: no such stage: unknown (the server's)");
	sh_start(&h);
	expect_str(sh_callback(&h, a, WFE_CB_HEARTBEAT, 1, 1, NULL, 1), "stale", "gate: a heartbeat while queued: stale");
	expect_str(sh_callback(&h, a, WFE_CB_COMPLETE, 2, 1, "{}", 1), "stale", "gate: a wrong attempt: stale");
	expect_str(sh_callback(&h, a, WFE_CB_COMPLETE, 1, 2, "{}", 1), "stale", "gate: a wrong fence: stale");
	expect_str(sh_callback(&h, a, WFE_CB_FAIL, 1, 0, "{}", 1), "stale", "gate: an old fence: stale");
	expect_str(sh_callback(&h, b, WFE_CB_COMPLETE, 0, 0, "{}", 1), "stale", "gate: a waiting stage: stale");
	ok(h.nops == 1 && strcmp(op_event(&h, 0), "callback.stale") == 0 && h.ops[0].stage == b,
	   "gate: a rejection writes exactly one callback.* event");
	expect_str(sh_accept(&h, a), "accepted", "gate: accept");
	expect_str(sh_accept(&h, a), "duplicate", "gate: accept again while running: duplicate");
	expect_str(sh_callback(&h, a, WFE_CB_HEARTBEAT, 1, h.rows[a].fence, NULL, 1), "accepted", "gate: heartbeat while running");
	ok(h.nops == 1 && h.ops[0].kind == WFE_OP_HEARTBEAT && h.ops[0].stage == a,
	   "gate: an accepted heartbeat is one HEARTBEAT effect and no event");
	expect_str(sh_callback(&h, a, WFE_CB_HEARTBEAT, 1, 2, NULL, 1), "stale", "gate: heartbeat with a wrong fence");
	expect_str(sh_complete(&h, a, "{\"v\": 1}"), "accepted", "gate: complete");
	expect_str(sh_complete(&h, a, "{\"v\": 1}"), "duplicate", "gate: the same result again: duplicate");
	expect_str(sh_complete(&h, a, "{ \"v\" : 1 }"), "duplicate", "gate: compared as values, not text");
	expect_str(sh_complete(&h, a, "{\"v\": 2}"), "conflict", "gate: another result: conflict");
	expect_str(sh_fail(&h, a, "{}", 1), "conflict", "gate: a failure of the completed attempt: conflict");
	expect_str(sh_accept(&h, a), "duplicate", "gate: accept of a completed attempt: duplicate");
	expect_str(sh_callback(&h, a, WFE_CB_HEARTBEAT, 1, h.rows[a].fence, NULL, 1), "stale", "gate: heartbeat of a completed attempt");
	expect_state(&h, "a", WFE_COMPLETED, "gate: rejections change nothing");
	expect_int(events_total(&h, "stage.released", "b"), 1, "gate: b was released once, whatever came again");

	sh_complete(&h, b, "{\"ok\": true}");
	ok(h.run.finished, "gate: the run finished");
	expect_str(sh_complete(&h, b, "{\"ok\": true}"), "duplicate", "gate: after the run ended, a duplicate is a duplicate");
	expect_str(sh_complete(&h, b, "{\"ok\": false}"), "conflict", "gate: ... and a conflict a conflict");
	expect_str(sh_complete(&h, a, "{\"v\": 1}"), "duplicate", "gate: a's duplicate too");
	expect_str(sh_callback(&h, b, WFE_CB_COMPLETE, 1, 0, "{}", 1), "late", "gate: a stale fence after the intent: late");
	expect_str(sh_callback(&h, cleanup, WFE_CB_COMPLETE, 0, 0, "{}", 1), "late", "gate: a skipped stage: late");
	expect_str(sh_accept(&h, b), "late", "gate: accept after the intent: late");
	expect_str(sh_callback(&h, b, WFE_CB_HEARTBEAT, 1, h.rows[b].fence, NULL, 1), "late", "gate: heartbeat after the intent: late");
	ok(h.nops == 1 && strcmp(op_event(&h, 0), "callback.late") == 0, "gate: late writes one callback.late event");
	run_close(&h, "gate");

	/* only the holder of a claimed or accepted attempt reports it */
	run_open(&h, rp_linear, "{\"x\": 1}", NULL);
	a = X(&h, "a");
	sh_start(&h);
	expect_str(sh_callback(&h, a, WFE_CB_COMPLETE, h.rows[a].attempt, h.rows[a].fence, "{}", 1), "stale",
			   "gate: the right attempt and fence, but nobody claimed it: stale");
	expect_state(&h, "a", WFE_QUEUED, "gate: an unclaimed report changes nothing");
	sh_publish(&h, a);
	expect_str(sh_callback(&h, a, WFE_CB_FAIL, h.rows[a].attempt, h.rows[a].fence, "{\"code\": \"e\"}", 1),
			   "stale", "gate: a dispatched attempt nobody accepted: stale");
	expect_state(&h, "a", WFE_DISPATCHED, "gate: ... and it stays dispatched");
	expect_str(sh_accept(&h, a), "accepted", "gate: the envelope's holder accepts");
	expect_str(sh_fail(&h, a, "{\"code\": \"e\"}", 1), "accepted", "gate: an accepted attempt may fail");
	expect_str(sh_fail(&h, a, "{\"code\": \"e\"}", 1), "duplicate", "gate: retry_scheduled: the same failure again is a duplicate");
	expect_str(sh_accept(&h, a), "duplicate", "gate: accept of a failed attempt: duplicate");
	{
		int64_t		first = h.rows[a].fence;

		sh_fire_retry(&h, a);
		expect_str(sh_callback(&h, a, WFE_CB_FAIL, 1, first, "{\"code\": \"e\"}", 1), "stale",
				   "gate: after the retry the first attempt is stale, no longer duplicate");
	}
	expect_str(sh_complete(&h, a, "{\"v\": 3}"), "accepted", "gate: the retry, claimed, completes");
	sh_cancel(&h, "done");
	run_close(&h, "gate before claim");

	/* fences only grow, and by what the server's random source says */
	run_open(&h, rp_linear, "{\"x\": 1}", NULL);
	a = X(&h, "a");
	h.fence_bits = 0xdeadbeefu;
	sh_start(&h);
	ok(h.rows[a].fence == (int64_t) (((uint64_t) 1 << 32) | 0xdeadbeefu),
	   "fence: generation 1 in the high half, the random bits in the low half");
	expect_str(sh_callback(&h, a, WFE_CB_COMPLETE, 1, F(1), "{}", 1), "stale",
			   "fence: the right generation with other low bits: stale");
	h.fence_bits = 7;
	sh_claim(&h, a);
	sh_expire(&h, a, "execution");
	ok(h.rows[a].fence == (int64_t) (((uint64_t) 2 << 32) | 7u), "fence: a time-out is the next generation");
	sh_fire_retry(&h, a);
	ok(h.rows[a].fence == (int64_t) (((uint64_t) 3 << 32) | 7u) && h.rows[a].attempt == 2,
	   "fence: the retry is the next generation again, even with smaller low bits");
	sh_cancel(&h, "done");
	run_close(&h, "fence growth");

	/* a row no event can make: an unreported attempt that is not under way */
	run_open(&h, rp_linear, "{\"x\": 1}", NULL);
	a = X(&h, "a");
	h.check_liveness = 0;
	h.rows[a].state = WFE_CANCELLED;
	h.rows[a].attempt = 1;
	h.rows[a].fence = 3;
	expect_str(sh_callback(&h, a, WFE_CB_COMPLETE, 1, 3, "{}", 1), "stale",
			   "gate: a current attempt not queued, dispatched or running: stale");
	expect_str(sh_callback(&h, a, WFE_CB_ACCEPT, 1, 3, NULL, 1), "stale",
			   "gate: accept of such an attempt: stale");
	run_close(&h, "gate crafted row");
}

/* ---------------------------------------------------------------------
 * Result checks
 * --------------------------------------------------------------------- */

/* wfe_step_result_problem in a step of its own; the problem copied, or NULL. */
static char *
problem(sh *h, int i, const char *result)
{
	const char *p;
	char	   *copy;

	sh_begin(h);
	p = wfe_step_result_problem(&h->st, i, result, h->output_schema[i]);
	copy = sh_strdup(p);
	sh_end(h, NULL, "result check");
	return copy;
}

static void
expect_problem(sh *h, int i, const char *result, const char *want, const char *what)
{
	char	   *got = problem(h, i, result);
	int			good = want == NULL ? got == NULL : (got != NULL && strcmp(got, want) == 0);

	ok(good, "%s", what);
	if (!good)
		diag("problem: %s (want %s)", got ? got : "none", want ? want : "none");
	free(got);
}

static void
test_result_problems(void)
{
	sh			h;
	int			make,
				use;
	char	   *p;
	const sh_op *op;
	static const char *GOOD =
	"{\"n\": 3, \"r\": 1.5, \"s\": \"x\", \"o\": {\"a\": 1}, \"flag\": true, \"list\": []}";

	run_open(&h, rp_tasks_produces, NULL, NULL);
	make = X(&h, "make");
	use = X(&h, "use");
	sh_start(&h);
	expect_problem(&h, make, GOOD, NULL, "produces: every declared output of its type");
	expect_problem(&h, make, "{\"r\": 1, \"s\": \"x\", \"o\": {}, \"flag\": true, \"list\": []}",
				   "result lacks declared output \"n\"", "produces: a missing key");
	expect_problem(&h, make, "[1, 2]", "result lacks declared output \"n\"", "produces: a result that is no object");
	expect_problem(&h, make, "{\"n\": 1.5, \"r\": 1, \"s\": \"x\", \"o\": {}, \"flag\": true, \"list\": []}",
				   "output \"n\" is number, declared integer", "produces: 1.5 is no integer");
	expect_problem(&h, make, "{\"n\": 2.0, \"r\": 7, \"s\": \"x\", \"o\": {}, \"flag\": true, \"list\": []}",
				   NULL, "produces: 2.0 is an integer, and an integer is a number");
	expect_problem(&h, make, "{\"n\": null, \"r\": 1, \"s\": \"x\", \"o\": {}, \"flag\": true, \"list\": []}",
				   "output \"n\" is null, declared integer", "produces: null is no integer");
	expect_problem(&h, make, "{\"n\": 1, \"r\": \"1\", \"s\": \"x\", \"o\": {}, \"flag\": true, \"list\": []}",
				   "output \"r\" is string, declared number", "produces: a string is no number");
	expect_problem(&h, make, "{\"n\": 1, \"r\": 1, \"s\": 5, \"o\": {}, \"flag\": true, \"list\": []}",
				   "output \"s\" is number, declared string", "produces: a number is no string");
	expect_problem(&h, make, "{\"n\": 1, \"r\": 1, \"s\": \"\", \"o\": [], \"flag\": true, \"list\": []}",
				   "output \"o\" is array, declared ConfigObject", "produces: an ...Object must be an object");
	expect_problem(&h, make, "{\"n\": 1, \"r\": 1, \"s\": \"\", \"o\": {}, \"flag\": 1, \"list\": []}",
				   "output \"flag\" is number, declared boolean", "produces: 1 is no boolean");
	expect_problem(&h, make, "{\"n\": 1, \"r\": 1, \"s\": \"\", \"o\": {}, \"flag\": false, \"list\": {}}",
				   "output \"list\" is object, declared array", "produces: an object is no array");

	expect_str(sh_complete(&h, make, "{}"), "invalid_result", "invalid_result: through the callback");
	ok(events_last(&h, "stage.invalid_result", "make") == 1, "invalid_result: event stage.invalid_result");
	op = sh_find_op(&h, WFE_OP_RETRY, make);
	ok(op != NULL && strcmp(sh_json_get(h.rows[make].error, "code"), "result.schema") == 0,
	   "invalid_result: the attempt fails with result.schema and is retried");
	expect_ops(&h, WFE_OP_COMPLETE, NULL, 0, "invalid_result: nothing is completed");
	sh_fire_retry(&h, make);
	expect_str(sh_complete(&h, make, "{\"n\": \"x\"}"), "invalid_result", "invalid_result: again");
	op = sh_find_op(&h, WFE_OP_FAIL, make);
	ok(op && op->flag == 1 && h.ndead == 1, "invalid_result: retries exhausted: failed, dead letter");
	ok(h.run.intent == WFE_RUN_FAILED, "invalid_result: the critical task failed the run");
	run_close(&h, "result problems");

	run_open(&h, rp_tasks_produces, NULL, NULL);
	make = X(&h, "make");
	use = X(&h, "use");
	sh_start(&h);
	expect_str(sh_complete(&h, make, GOOD), "accepted", "outputs: a good result");
	ok(h.noutputs == 6, "outputs: six outputs written");
	expect_json(h.rows[use].input, "{\"n\": 3, \"o\": {\"a\": 1}}", "outputs: use reads the two it requires");
	sh_complete(&h, use, "[\"anything\"]");
	ok(h.run.finished && h.run.state == WFE_RUN_COMPLETED, "outputs: a task without produces takes any result");
	run_close(&h, "result outputs");

	/* an output schema (stages form) */
	run_open(&h, rp_decide, "{\"amount\": 1}", NULL);
	sh_set_schema(&h, X(&h, "prep"), NULL,
				  "{\"type\": \"object\", \"required\": [\"score\"], \"properties\": {\"score\": {\"type\": \"integer\"}}}");
	sh_start(&h);
	p = problem(&h, X(&h, "prep"), "{}");
	ok(p != NULL, "output schema: a missing required key is a problem");
	free(p);
	p = problem(&h, X(&h, "prep"), "{\"score\": 1.5}");
	ok(p != NULL, "output schema: a wrong type is a problem");
	free(p);
	p = problem(&h, X(&h, "prep"), "{\"score\": 9}");
	ok(p == NULL, "output schema: a valid result is none");
	free(p);
	expect_str(sh_complete(&h, X(&h, "prep"), "{\"score\": \"high\"}"), "invalid_result",
			   "output schema: the callback answers invalid_result");
	sh_fire_retry(&h, X(&h, "prep"));
	expect_str(sh_complete(&h, X(&h, "prep"), "{\"score\": 9}"), "accepted", "output schema: a valid result is accepted");
	expect_state(&h, "mid", WFE_QUEUED, "output schema");
	sh_complete(&h, X(&h, "mid"), "{}");
	run_close(&h, "result output schema");

	/* an in-database action whose result is refused fails with result.schema */
	run_open(&h, rp_linear, "{\"x\": 1}", NULL);
	sh_set_handler(&h, X(&h, "b"));
	sh_set_schema(&h, X(&h, "b"), NULL, "{\"type\": \"object\", \"required\": [\"done\"]}");
	sh_start(&h);
	sh_complete(&h, X(&h, "a"), "{\"v\": 1}");
	ok(sh_action_done(&h, X(&h, "b"), "{}", NULL), "action: the handler ran");
	expect_str(sh_json_get(h.rows[X(&h, "b")].error, "code"), "result.schema",
			   "action: a refused handler result fails the attempt with result.schema");
	expect_state(&h, "b", WFE_RETRY_SCHEDULED, "action: and it is retried");
	sh_fire_retry(&h, X(&h, "b"));
	sh_action_done(&h, X(&h, "b"), NULL, "{\"code\": \"handler.error\"}");
	expect_state(&h, "b", WFE_RETRY_SCHEDULED, "action: a handler error is retried");
	sh_fire_retry(&h, X(&h, "b"));
	sh_action_done(&h, X(&h, "b"), "{\"done\": true}", NULL);
	ok(h.run.finished && h.run.state == WFE_RUN_COMPLETED, "action: a good handler result completes the run");
	run_close(&h, "in-database action");
}

/* ---------------------------------------------------------------------
 * The transition tables themselves
 * --------------------------------------------------------------------- */

static void
test_tables(void)
{
	int			good = 1;

	for (const wfe_transition *t = wfe_stage_transition_table; t->from; t++)
		good &= wfe_state_from_name(t->from) >= 0 && wfe_state_from_name(t->to) >= 0 && t->why != NULL;
	ok(good, "tables: every stage transition names two states");
	good = 1;
	for (const wfe_transition *t = wfe_run_transition_table; t->from; t++)
		good &= wfe_run_state_from_name(t->from) >= 0 && wfe_run_state_from_name(t->to) >= 0;
	ok(good, "tables: every run transition names two run states");
	ok(!wfe_transition_legal(wfe_stage_transition_table, "completed", "queued") &&
	   !wfe_transition_legal(wfe_stage_transition_table, "skipped", "queued") &&
	   wfe_transition_legal(wfe_stage_transition_table, "timed_out", "timed_out"),
	   "tables: a completed or skipped stage is never queued again; same-state is legal");
	good = 1;
	for (int k = 0; k < 2; k++)
	{
		const char *to = (const char *[]) {"completed", "retry_scheduled"}[k];

		good &= !wfe_transition_legal(wfe_stage_transition_table, "queued", to) &&
			!wfe_transition_legal(wfe_stage_transition_table, "dispatched", to);
	}
	ok(good, "tables: only a running attempt is reported: queued and dispatched never go "
	   "straight to completed or retry_scheduled (to failed only by an operator's fail_stage)");
	ok(!wfe_transition_legal(wfe_run_transition_table, "completed", "failed") &&
	   !wfe_transition_legal(wfe_run_transition_table, "finalising", "running"),
	   "tables: a run never leaves a final state, nor goes back to running");
}

/* A step the server's error interrupted: the next begin releases it, nothing was written. */
static void
test_interrupted_step(void)
{
	sh			h;

	run_open(&h, rp_model, "{\"modelId\": \"m\"}", NULL);
	sh_begin(&h);
	wfe_step_start(&h.st);
	ok(h.st.nops > 0, "interrupted: a step decided something, then the server raised");
	sh_start(&h);				/* the next step begins over the leftovers */
	ok(h.rows[X(&h, "cache-lookup")].attempt == 1 && h.rows[X(&h, "cache-lookup")].fence == F(1) &&
	   events_total(&h, "run.started", NULL) == 1,
	   "interrupted: nothing of it was written; the next step starts the run once");
	sh_cancel(&h, "stop");
	sh_complete(&h, X(&h, "finaliser.1"), "{}");
	run_close(&h, "interrupted step");
}


/* ---------------------------------------------------------------------
 * Operator recovery: redrive, skip, fail, redispatch
 * --------------------------------------------------------------------- */

static void
test_redrive(void)
{
	sh			h;
	int			a,
				b,
				cleanup;
	const sh_op *op;
	const char *no;

	/* a fails for good, cleanup runs, the run ends failed; a is redriven */
	run_open(&h, rp_linear, "{\"x\": 1}", NULL);
	a = X(&h, "a");
	b = X(&h, "b");
	cleanup = X(&h, "cleanup");
	sh_start(&h);
	sh_claim(&h, a);
	sh_fail(&h, a, "{\"code\": \"bad.input\"}", 0);
	sh_complete(&h, cleanup, "{}");
	ok(h.run.finished && h.run.state == WFE_RUN_FAILED, "redrive: the run ended failed first");
	no = sh_operate(&h, b, WFE_OPERATE_REDRIVE, NULL, "ops", "try");
	ok(no != NULL && strstr(no, "not failed or timed_out") != NULL, "redrive: a skipped stage is refused");
	no = sh_operate(&h, a, WFE_OPERATE_REDRIVE, NULL, "ops", "input fixed upstream");
	ok(no == NULL, "redrive: a failed stage of a failed run is redriven");
	ok(sh_find_op(&h, WFE_OP_REOPEN, -1) != NULL && h.run.state == WFE_RUN_RUNNING && h.run.intent < 0 &&
	   !h.run.finished, "redrive: the run is reopened: running, no intent");
	expect_json(sh_event_detail(&h, "run.redriven", -1),
				"{\"by\": \"ops\", \"reason\": \"input fixed upstream\", \"stage\": \"a\"}",
				"redrive: run.redriven says who, why and from where");
	expect_json(sh_event_detail(&h, "stage.redriven", a),
				"{\"by\": \"ops\", \"reason\": \"input fixed upstream\", \"was\": \"failed\"}",
				"redrive: stage.redriven says who, why and what the stage was");
	ok(sh_event_fence(&h, "stage.redriven", a) == 4294967296LL,
	   "redrive: stage.redriven is about the stage's fence (apart from its detail)");
	op = sh_find_op(&h, WFE_OP_ENQUEUE, a);
	ok(op && op->flag == 1 && op->attempt == 2 && op->fence == F(2), "redrive: a new attempt (2), a new fence (2)");
	expect_state(&h, "a", WFE_QUEUED, "redrive");
	expect_state(&h, "b", WFE_WAITING, "redrive: what the failure skipped downstream waits again");
	expect_state(&h, "cleanup", WFE_WAITING, "redrive: the failure route's stage waits again");
	expect_str(sh_callback(&h, a, WFE_CB_COMPLETE, 1, 1, "{\"v\": 1}", 1), "stale",
			   "redrive: a late report of the old attempt is stale");
	expect_state(&h, "a", WFE_QUEUED, "redrive: the stale report changed nothing");
	expect_str(sh_complete(&h, a, "{\"v\": 5}"), "accepted", "redrive: the new attempt completes");
	expect_json(h.rows[b].input, "{\"from_a\": 5}", "redrive: b binds the new result");
	sh_complete(&h, b, "{}");
	ok(h.run.finished && h.run.state == WFE_RUN_COMPLETED, "redrive: the reopened run completes");
	expect_skipped(&h, "cleanup", "branch_not_taken", "redrive: the completed intent skips cleanup");
	no = sh_operate(&h, a, WFE_OPERATE_REDRIVE, NULL, "ops", NULL);
	ok(no != NULL && strstr(no, "ended completed") != NULL, "redrive: a completed run is not reopened");
	run_close(&h, "redrive a failed run");

	/* a fork branch fails: its sibling is cancelled, the finaliser runs;
	 * the redrive queues both branches again and runs the finaliser again */
	run_open(&h, rp_model, "{\"modelId\": \"m-1\"}", NULL);
	sh_start(&h);
	sh_complete(&h, X(&h, "cache-lookup"), "{\"hit\": false}");
	sh_complete(&h, X(&h, "render-thumbnail"), "{}");
	sh_complete(&h, X(&h, "semantic-analysis"), "{}");
	sh_claim(&h, X(&h, "technical-metadata"));
	sh_fail(&h, X(&h, "technical-metadata"), "{\"code\": \"x\"}", 0);
	expect_state(&h, "finaliser.1", WFE_QUEUED, "redrive fork: the failed intent runs the finaliser");
	sh_complete(&h, X(&h, "finaliser.1"), "{}");
	ok(h.run.finished && h.run.state == WFE_RUN_FAILED, "redrive fork: the run ended failed");
	ok(sh_operate(&h, X(&h, "technical-metadata"), WFE_OPERATE_REDRIVE, NULL, "ops", "fixed") == NULL,
	   "redrive fork: the failed branch is redriven");
	expect_state(&h, "technical-metadata", WFE_QUEUED, "redrive fork");
	expect_state(&h, "semantic-analysis", WFE_COMPLETED, "redrive fork: the completed sibling stays completed");
	expect_state(&h, "derive-join", WFE_WAITING, "redrive fork: the join waits again");
	expect_json(h.rows[X(&h, "derive-join")].arrivals, "{\"semantic-analysis\": \"completed\"}",
				"redrive fork: the join keeps the completed arrival only");
	expect_state(&h, "finaliser.1", WFE_WAITING, "redrive fork: the finaliser waits again");
	sh_complete(&h, X(&h, "technical-metadata"), "{}");
	expect_state(&h, "publish", WFE_QUEUED, "redrive fork: the join resolves, publish is released");
	sh_complete(&h, X(&h, "publish"), "{}");
	expect_state(&h, "finaliser.1", WFE_QUEUED, "redrive fork: the new intent runs the finaliser again");
	expect_int(h.rows[X(&h, "finaliser.1")].attempt, 2, "redrive fork: ... as its attempt 2");
	sh_complete(&h, X(&h, "finaliser.1"), "{}");
	ok(h.run.finished && h.run.state == WFE_RUN_COMPLETED, "redrive fork: the run completes");
	expect_int(events_total(&h, "run.failed", NULL), 1, "redrive fork: the log keeps the first round's end");
	expect_int(events_total(&h, "run.completed", NULL), 1, "redrive fork: ... and the second's");
	run_close(&h, "redrive a fork branch");

	/* both branches fail into the join; one is redriven: the join forgets
	 * that branch's arrival only, so a second failure still ends the run,
	 * and a success with the other's failure fails the join again */
	run_open(&h, rp_forkmeet, NULL, NULL);
	sh_start(&h);
	sh_fail(&h, X(&h, "l"), "{\"code\": \"x\"}", 0);
	sh_fail(&h, X(&h, "r"), "{\"code\": \"y\"}", 0);
	ok(h.run.finished && h.run.state == WFE_RUN_FAILED, "redrive join: both branches failed, the run failed");
	ok(sh_operate(&h, X(&h, "l"), WFE_OPERATE_REDRIVE, NULL, "ops", NULL) == NULL, "redrive join: l redriven");
	expect_json(h.rows[X(&h, "meet")].arrivals, "{\"r\": \"failed\"}",
				"redrive join: the join keeps r's arrival, forgets l's");
	ok(sh_operate(&h, X(&h, "l"), WFE_OPERATE_FAIL, "no", "ops", NULL) == NULL, "redrive join: l failed by hand");
	ok(h.run.finished && h.run.state == WFE_RUN_FAILED, "redrive join: the join fails again, the run ends failed");
	ok(sh_operate(&h, X(&h, "r"), WFE_OPERATE_SKIP, "{}", "ops", NULL) == NULL, "redrive join: r skipped by hand");
	ok(h.run.finished && h.run.state == WFE_RUN_FAILED && h.rows[X(&h, "meet")].state == WFE_FAILED,
	   "redrive join: r completes into the join, which still has l's failure: failed again");
	ok(sh_operate(&h, X(&h, "l"), WFE_OPERATE_REDRIVE, NULL, "ops", NULL) == NULL, "redrive join: l redriven again");
	expect_json(h.rows[X(&h, "meet")].arrivals, "{\"r\": \"completed\"}",
				"redrive join: the join keeps r's completed arrival");
	sh_complete(&h, X(&h, "l"), "{}");
	ok(h.run.finished && h.run.state == WFE_RUN_COMPLETED, "redrive join: l completes: the join and the run complete");
	expect_int(events_total(&h, "run.redriven", NULL), 3, "redrive join: three reopenings in the log");
	run_close(&h, "redrive into a join");

	/* an in-flight sibling cancelled by the failure is queued again */
	run_open(&h, rp_model, "{\"modelId\": \"m-1\"}", NULL);
	sh_start(&h);
	sh_complete(&h, X(&h, "cache-lookup"), "{\"hit\": false}");
	sh_complete(&h, X(&h, "render-thumbnail"), "{}");
	sh_fail(&h, X(&h, "technical-metadata"), "{\"code\": \"x\"}", 0);
	expect_state(&h, "semantic-analysis", WFE_CANCELLED, "redrive cancelled: the sibling was cancelled");
	sh_complete(&h, X(&h, "finaliser.1"), "{}");
	ok(sh_operate(&h, X(&h, "technical-metadata"), WFE_OPERATE_REDRIVE, NULL, "ops", NULL) == NULL,
	   "redrive cancelled: redriven");
	op = sh_find_op(&h, WFE_OP_ENQUEUE, X(&h, "semantic-analysis"));
	ok(op && op->flag == 1 && h.rows[X(&h, "semantic-analysis")].state == WFE_QUEUED,
	   "redrive cancelled: the cancelled sibling is queued as a new attempt");
	sh_complete(&h, X(&h, "semantic-analysis"), "{}");
	expect_state(&h, "derive-join", WFE_WAITING, "redrive cancelled: the join waits for the redriven branch");
	sh_complete(&h, X(&h, "technical-metadata"), "{}");
	sh_complete(&h, X(&h, "publish"), "{}");
	sh_complete(&h, X(&h, "finaliser.1"), "{}");
	ok(h.run.finished && h.run.state == WFE_RUN_COMPLETED, "redrive cancelled: the run completes");
	run_close(&h, "redrive with a cancelled sibling");

	/* refusals: a decision, a finaliser, a run still finalising */
	run_open(&h, rp_model, "{\"modelId\": \"m-1\"}", NULL);
	sh_start(&h);
	sh_complete(&h, X(&h, "cache-lookup"), "{\"uri\": 1}");
	expect_state(&h, "cache-route", WFE_FAILED, "redrive refusals: the decision failed");
	no = sh_operate(&h, X(&h, "cache-route"), WFE_OPERATE_REDRIVE, NULL, "ops", NULL);
	ok(no != NULL && strstr(no, "finalising") != NULL, "redrive refusals: not while the run is finalising");
	sh_fail(&h, X(&h, "finaliser.1"), "{\"code\": \"audit\"}", 0);
	no = sh_operate(&h, X(&h, "finaliser.1"), WFE_OPERATE_REDRIVE, NULL, "ops", NULL);
	ok(no != NULL && strstr(no, "finaliser") != NULL, "redrive refusals: a finaliser is not redriven");
	no = sh_operate(&h, X(&h, "cache-route"), WFE_OPERATE_REDRIVE, NULL, "ops", NULL);
	ok(no != NULL && strstr(no, "skip_stage") != NULL, "redrive refusals: a decision is skipped, not redriven");
	run_close(&h, "redrive refusals");
}

static void
test_skip_stage(void)
{
	sh			h;
	int			a,
				b;
	const char *no;

	run_open(&h, rp_linear, "{\"x\": 1}", NULL);
	a = X(&h, "a");
	b = X(&h, "b");
	sh_set_schema(&h, a, NULL, "{\"type\": \"object\", \"required\": [\"v\"]}");
	sh_start(&h);
	sh_fail(&h, a, "{\"code\": \"bad\"}", 0);
	sh_complete(&h, X(&h, "cleanup"), "{}");
	no = sh_operate(&h, a, WFE_OPERATE_SKIP, "{\"w\": 1}", "ops", "by hand");
	ok(no != NULL && strstr(no, "v") != NULL, "skip: a result the contract refuses is refused");
	ok(h.run.finished && h.rows[a].state == WFE_FAILED, "skip: ... and nothing changed");
	no = sh_operate(&h, a, WFE_OPERATE_SKIP, "{\"v\": 3}", "ops", "computed by hand");
	ok(no == NULL, "skip: the failed stage is completed by hand");
	expect_state(&h, "a", WFE_COMPLETED, "skip");
	expect_json(h.rows[a].result, "{\"v\": 3}", "skip: with the given result");
	ok(events_last(&h, "stage.skipped_by_operator", "a") == 1 && events_last(&h, "stage.completed", "a") == 1,
	   "skip: stage.skipped_by_operator, then stage.completed");
	expect_json(h.rows[b].input, "{\"from_a\": 3}", "skip: the success route runs on the given result");
	sh_complete(&h, b, "{}");
	ok(h.run.finished && h.run.state == WFE_RUN_COMPLETED, "skip: the reopened run completes");
	run_close(&h, "skip a failed stage");

	/* a failed decision is skipped with the result it should have had */
	run_open(&h, rp_model, "{\"modelId\": \"m-1\"}", NULL);
	sh_start(&h);
	sh_complete(&h, X(&h, "cache-lookup"), "{\"uri\": 1}");
	sh_complete(&h, X(&h, "finaliser.1"), "{}");
	expect_skipped(&h, "publish", "branch_not_taken", "skip decision: the failed decision skipped publish");
	no = sh_operate(&h, X(&h, "cache-route"), WFE_OPERATE_SKIP, "{}", "ops", NULL);
	ok(no != NULL && strstr(no, "one of publish, render-thumbnail") != NULL,
	   "skip decision: without the branch to take, refused with the choices");
	ok(sh_operate(&h, X(&h, "cache-route"), WFE_OPERATE_SKIP, "{\"next\": \"publish\"}", "ops", "cache hit") == NULL,
	   "skip decision: decided by hand");
	ok(h.run.state == WFE_RUN_RUNNING && h.run.intent < 0, "skip decision: the run is running again");
	expect_state(&h, "publish", WFE_QUEUED, "skip decision: the branch named is taken");
	expect_skipped(&h, "render-thumbnail", "branch_not_taken", "skip decision: the other branch is skipped");
	expect_state(&h, "finaliser.1", WFE_WAITING, "skip decision: the finaliser waits again");
	sh_complete(&h, X(&h, "publish"), "{}");
	sh_complete(&h, X(&h, "finaliser.1"), "{}");
	ok(h.run.finished && h.run.state == WFE_RUN_COMPLETED, "skip decision: the run completes");
	run_close(&h, "skip a decision");
}

/* A fork's branch that fails at once ends the run before its later branches are released; reopened, they run. */
static void
test_reopen_fork_unreleased(void)
{
	sh			h;

	run_open(&h, rp_forkdec, "{}", NULL);
	sh_start(&h);
	ok(h.run.finished && h.run.state == WFE_RUN_FAILED, "reopen fork: d's evaluation error failed the run at once");
	expect_skipped(&h, "b", "run_aborted", "reopen fork: b, not released yet, was skipped");
	ok(sh_operate(&h, X(&h, "d"), WFE_OPERATE_SKIP, "{\"next\": \"j\"}", "ops", "no go") == NULL,
	   "reopen fork: d is decided by hand");
	expect_state(&h, "b", WFE_QUEUED, "reopen fork: the branch the failure cut off runs");
	expect_state(&h, "e", WFE_COMPLETED, "reopen fork: ... and so does the other one");
	sh_complete(&h, X(&h, "b"), "{}");
	sh_complete(&h, X(&h, "b2"), "{}");
	ok(h.run.finished && h.run.state == WFE_RUN_COMPLETED, "reopen fork: the join joins, the run completes");
	run_close(&h, "reopen a fork cut short");
}

/* Reopening from a stage whose failure the run took: the stage that ended it runs again too. */
static void
test_reopen_cause(void)
{
	sh			h;

	run_open(&h, rp_forkdec, "{\"go\": true}", NULL);
	sh_start(&h);
	sh_fail(&h, X(&h, "x"), "{\"code\": \"bad\"}", 0);
	expect_state(&h, "x", WFE_FAILED, "reopen cause: x failed, into the join");
	sh_fail(&h, X(&h, "b"), "{\"code\": \"bad\"}", 0);
	ok(h.run.finished && h.run.state == WFE_RUN_FAILED, "reopen cause: b's failure, routed to failed, failed the run");
	ok(sh_operate(&h, X(&h, "x"), WFE_OPERATE_REDRIVE, NULL, "ops", "retry x") == NULL,
	   "reopen cause: x is redriven");
	expect_state(&h, "b", WFE_QUEUED, "reopen cause: b, which ended the run, runs again too");
	sh_complete(&h, X(&h, "x"), "{}");
	sh_complete(&h, X(&h, "b"), "{}");
	sh_complete(&h, X(&h, "b2"), "{}");
	ok(h.run.finished && h.run.state == WFE_RUN_COMPLETED, "reopen cause: the run completes");
	run_close(&h, "reopen where another stage ended the run");

	/* a failed join that ended the run, not after the stage acted on: skipped first */
	run_open(&h, rp_two_joins, "{}", NULL);
	sh_start(&h);
	sh_fail(&h, X(&h, "x"), "{\"code\": \"bad\"}", 0);
	sh_fail(&h, X(&h, "a"), "{\"code\": \"bad\"}", 0);
	sh_fail(&h, X(&h, "b"), "{\"code\": \"bad\"}", 0);
	ok(h.run.finished && h.run.state == WFE_RUN_FAILED && h.rows[X(&h, "m")].state == WFE_FAILED,
	   "reopen join: a and b failed, join m failed the run");
	{
		const char *no = sh_operate(&h, X(&h, "x"), WFE_OPERATE_REDRIVE, NULL, "ops", "retry x");

		ok(no != NULL && strcmp(no, "join m failed and ended the run; skip it first") == 0,
		   "reopen join: redriving x is refused, naming m (%s)", no ? no : "NULL");
	}
	ok(h.run.finished && h.rows[X(&h, "x")].state == WFE_FAILED, "reopen join: ... and nothing changed");
	ok(sh_operate(&h, X(&h, "m"), WFE_OPERATE_SKIP, "{}", "ops", "fine without") == NULL,
	   "reopen join: m is skipped by hand");
	ok(h.run.finished && h.run.state == WFE_RUN_COMPLETED, "reopen join: the outer join takes x's failure, the run completes");
	run_close(&h, "reopen refused at a failed join");
}

static void
test_fail_stage(void)
{
	sh			h;
	int			a;
	const sh_op *op;
	const char *no;

	run_open(&h, rp_linear, "{\"x\": 1}", NULL);
	a = X(&h, "a");
	sh_start(&h);
	no = sh_operate(&h, X(&h, "b"), WFE_OPERATE_FAIL, "stuck", "ops", "stuck");
	ok(no != NULL && strstr(no, "waiting") != NULL, "fail: a waiting stage is refused");
	sh_publish(&h, a);
	sh_accept(&h, a);
	ok(sh_operate(&h, a, WFE_OPERATE_FAIL, "the GPU box is gone", "ops", "host lost") == NULL,
	   "fail: a running attempt is failed by hand");
	op = sh_find_op(&h, WFE_OP_FENCE, a);
	ok(op && op->flag == 1 && op->fence == F(2), "fail: the attempt is fenced (2) and asked to stop");
	{
		/* what ack_cancel's gate reads: the request names the fence the worker holds */
		long long	named = -1;

		for (int k = 0; k < h.nevents; k++)
			if (h.events[k].stage == a && strcmp(h.events[k].type, "stage.failed_by_operator") == 0)
				named = h.events[k].fenced ? h.events[k].fence : -2;
		ok(named == F(1),
		   "fail: stage.failed_by_operator names the fence the worker holds (1), as the cancel message does");
	}
	op = sh_find_op(&h, WFE_OP_FAIL, a);
	ok(op && op->state == WFE_FAILED && op->flag == 0, "fail: FAIL without retry or dead letter");
	expect_str(op ? sh_json_get(op->json, "code") : NULL, "operator.failed", "fail: error operator.failed");
	expect_int(h.ntimers, 0, "fail: no retry although attempts are left");
	expect_state(&h, "cleanup", WFE_QUEUED, "fail: the failure route is taken");
	expect_str(sh_callback(&h, a, WFE_CB_COMPLETE, 1, 1, "{\"v\": 1}", 1), "stale",
			   "fail: the worker's late report is stale");
	run_close(&h, "fail a running attempt");

	/* a retry waiting for its timer is failed; the timer then does nothing */
	run_open(&h, rp_linear, "{\"x\": 1}", NULL);
	a = X(&h, "a");
	sh_start(&h);
	sh_fail(&h, a, "{\"code\": \"flaky\"}", 1);
	expect_state(&h, "a", WFE_RETRY_SCHEDULED, "fail retry");
	ok(sh_operate(&h, a, WFE_OPERATE_FAIL, "give up", "ops", NULL) == NULL, "fail: a scheduled retry is failed");
	expect_state(&h, "a", WFE_FAILED, "fail retry");
	sh_fire_retry(&h, a);
	expect_state(&h, "a", WFE_FAILED, "fail retry: the retry timer does nothing afterwards");
	run_close(&h, "fail a scheduled retry");
}

/*
 * Flow-control keys: bound at the release and written with the attempt
 * (the server's bucket and slot), kept by a retry, and a key that fails
 * to bind is the stage's binding failure.
 */
static void
test_flow_keys(void)
{
	sh			h;
	int			a;
	const sh_op *op;

	run_open(&h, rp_flow_keys, "{\"customer\": \"acme\"}", NULL);
	a = X(&h, "a");
	sh_start(&h);
	op = sh_find_op(&h, WFE_OP_ENQUEUE, a);
	/* (the harness checks the ENQUEUE's max against the plan's) */
	ok(op && op->json2 && strcmp(op->json2, "acme") == 0 && h.rows[a].concurrency_key &&
	   strcmp(h.rows[a].concurrency_key, "c-acme") == 0,
	   "flow keys: the release binds the rate key (acme) and the concurrency key (c-acme)");
	sh_fail(&h, a, "{\"code\": \"flaky\"}", 1);
	expect_state(&h, "a", WFE_RETRY_SCHEDULED, "flow keys");
	sh_fire_retry(&h, a);
	expect_state(&h, "a", WFE_QUEUED, "flow keys: the retry");
	ok(h.rows[a].attempt == 2 && h.rows[a].rate_key && strcmp(h.rows[a].rate_key, "acme") == 0 &&
	   h.rows[a].concurrency_key && strcmp(h.rows[a].concurrency_key, "c-acme") == 0,
	   "flow keys: the retry's attempt keeps its bucket and slot key");
	sh_complete(&h, a, "{}");
	run_close(&h, "flow keys bound");

	run_open(&h, rp_flow_keys, "{}", NULL);
	a = X(&h, "a");
	sh_start(&h);
	op = sh_find_op(&h, WFE_OP_BIND_FAILED, a);
	expect_str(op ? sh_json_get(op->json, "code") : NULL, "binding.missing",
			   "flow keys: a key that does not bind is the stage's binding failure");
	ok(op && strstr(op->json, "rate_limit.key") != NULL, "flow keys: ... naming rate_limit.key (%s)",
	   op ? op->json : "none");
	ok(sh_find_op(&h, WFE_OP_ENQUEUE, a) == NULL && h.rows[a].state == WFE_FAILED && h.ntimers == 0,
	   "flow keys: nothing is queued without its key, and nothing retried");
	run_close(&h, "flow key unbound");
}

static void
test_redispatch(void)
{
	sh			h;
	int			a;
	const sh_op *op;

	run_open(&h, rp_linear, "{\"x\": 1}", NULL);
	a = X(&h, "a");
	sh_start(&h);
	sh_publish(&h, a);
	expect_state(&h, "a", WFE_DISPATCHED, "redispatch");
	ok(sh_operate(&h, a, WFE_OPERATE_REDISPATCH, NULL, "ops", "message lost") == NULL,
	   "redispatch: a dispatched attempt is re-dispatched");
	op = sh_find_op(&h, WFE_OP_ENQUEUE, a);
	ok(op && op->flag == 0 && op->attempt == 1 && op->fence == F(2),
	   "redispatch: the same attempt under a new fence");
	expect_state(&h, "a", WFE_QUEUED, "redispatch");
	ok(events_last(&h, "stage.redispatched", "a") == 1, "redispatch: event stage.redispatched");
	expect_str(sh_callback(&h, a, WFE_CB_ACCEPT, 1, F(1), NULL, 1), "stale",
			   "redispatch: accepting the old message is stale");
	expect_str(sh_callback(&h, a, WFE_CB_ACCEPT, 1, F(2), NULL, 1), "accepted",
			   "redispatch: the new message is accepted");
	ok(sh_operate(&h, a, WFE_OPERATE_REDISPATCH, NULL, "ops", NULL) != NULL,
	   "redispatch: a running attempt is refused");
	sh_complete(&h, a, "{\"v\": 1}");
	sh_complete(&h, X(&h, "b"), "{}");
	run_close(&h, "redispatch");
}

/* ---------------------------------------------------------------------
 * The result cache
 * --------------------------------------------------------------------- */

#define KEY_X "k:embed@1:{\"t\":\"x\"}"

/* Is the detail of stage's last event of type a JSON object with member key == want? */
static int
event_says(const sh *h, const char *type, const char *stage, const char *key, const char *want)
{
	int			i = stage ? sh_stage(h, stage) : -1;

	for (int k = h->nevents - 1; k >= 0; k--)
		if (h->events[k].stage == i && strcmp(h->events[k].type, type) == 0)
		{
			json_object *d = json_tokener_parse(h->events[k].detail ? h->events[k].detail : "null");
			json_object *v = NULL;
			int			yes = d && json_object_object_get_ex(d, key, &v) &&
				strcmp(json_object_to_json_string_ext(v, JSON_C_TO_STRING_PLAIN), want) == 0;

			json_object_put(d);
			return yes;
		}
	return 0;
}

static void
test_cache(void)
{
	sh			h;
	int			l,
				r;

	/* a miss: the first branch runs, the second (same key, same step) waits on it */
	run_open(&h, rp_cached, "{\"t\": \"x\"}", NULL);
	l = X(&h, "l");
	r = X(&h, "r");
	sh_start(&h);
	expect_state(&h, "l", WFE_QUEUED, "cache miss: l is queued");
	ok(h.rows[l].cache_key && strcmp(h.rows[l].cache_key, KEY_X) == 0, "cache miss: l runs under its key");
	ok(event_says(&h, "stage.released", "l", "cache_key", "\"" "k:embed@1:{\\\"t\\\":\\\"x\\\"}" "\""),
	   "cache miss: stage.released names the key");
	expect_state(&h, "r", WFE_WAITING, "cache wait: r, released in the same step under the same key, waits");
	ok(events_last(&h, "stage.cache_waiting", "r") == 1 && event_says(&h, "stage.cache_waiting", "r", "leader",
																	  "{\"run_id\":42,\"stage\":\"l\",\"attempt\":1}"),
	   "cache wait: stage.cache_waiting names the attempt it waits on");
	expect_int(sh_count_ops(&h, WFE_OP_ENQUEUE, -2), 1, "cache wait: one attempt queued, not two");
	/* a retry keeps the key: r goes on waiting */
	sh_fail(&h, l, "{\"code\": \"flaky\"}", 1);
	expect_int(h.nwakes, 0, "cache: a retried leader wakes no one");
	sh_fire_retry(&h, l);
	sh_complete(&h, l, "{\"v\": 7}");
	expect_int(h.ncache, 1, "cache store: the accepted result is stored");
	ok(h.ncache == 1 && strcmp(h.cache[0].key, KEY_X) == 0, "cache store: under the key it ran under");
	expect_int(sh_count_ops(&h, WFE_OP_CACHE_WAKE, l), 1, "cache store: the leader's end wakes its waiters");
	expect_int(h.nwakes, 1, "cache store: one cache_ready timer, for r");
	expect_int(sh_fire_wakes(&h), 1, "cache ready: r's timer fires");
	expect_state(&h, "r", WFE_COMPLETED, "cache ready: r completes from the stored result");
	expect_json(h.rows[r].result, "{\"v\": 7}", "cache ready: with l's result");
	ok(h.rows[r].attempt == 0, "cache ready: without an attempt of its own");
	ok(event_says(&h, "stage.cache_hit", "r", "coalesced", "true"), "cache ready: stage.cache_hit, coalesced");
	expect_state(&h, "use", WFE_QUEUED, "cache ready: the join resolves, the next stage runs");
	sh_complete(&h, X(&h, "use"), "{}");
	ok(h.run.finished && h.run.state == WFE_RUN_COMPLETED, "cache ready: the run completes");
	run_close(&h, "cache miss and coalescing");

	/* a hit: a later run with an entry for its key dispatches nothing */
	run_open(&h, rp_cached, "{\"t\": \"x\"}", NULL);
	sh_cache_put(&h, KEY_X, "{\"v\": 9}", 1);
	sh_start(&h);
	expect_state(&h, "l", WFE_COMPLETED, "cache hit: l completes at release");
	expect_state(&h, "r", WFE_COMPLETED, "cache hit: r too");
	expect_int(sh_count_ops(&h, WFE_OP_ENQUEUE, X(&h, "l")) + sh_count_ops(&h, WFE_OP_ENQUEUE, X(&h, "r")), 0,
			   "cache hit: neither is queued");
	ok(event_says(&h, "stage.cache_hit", "l", "coalesced", "false") &&
	   event_says(&h, "stage.completed", "l", "cache", "\"hit\""),
	   "cache hit: stage.cache_hit, then stage.completed from the cache");
	expect_int(sh_count_ops(&h, WFE_OP_CACHE_STORE, -2), 0, "cache hit: a hit stores nothing");
	expect_json(h.rows[X(&h, "use")].input, "{\"v\": 9}", "cache hit: the next stage binds the cached result");
	run_close(&h, "cache hit");

	/* a corrupt entry and an invalid one: recorded, then a miss */
	run_open(&h, rp_cached, "{\"t\": \"x\"}", NULL);
	sh_cache_put(&h, KEY_X, "{\"v\": 9}", 0);
	sh_start(&h);
	ok(events_last(&h, "stage.cache_corrupt", "l") == 1 && h.rows[X(&h, "l")].state == WFE_QUEUED,
	   "cache corrupt: recorded, and l runs");
	expect_state(&h, "r", WFE_WAITING, "cache corrupt: r waits on l's attempt");
	run_close(&h, "cache corrupt");

	run_open(&h, rp_cached, "{\"t\": \"x\"}", NULL);
	sh_set_schema(&h, X(&h, "l"), NULL, "{\"type\": \"object\", \"required\": [\"w\"]}");
	sh_set_schema(&h, X(&h, "r"), NULL, "{\"type\": \"object\", \"required\": [\"w\"]}");
	sh_cache_put(&h, KEY_X, "{\"v\": 9}", 1);
	sh_start(&h);
	ok(events_last(&h, "stage.cache_invalid", "l") == 1 && h.rows[X(&h, "l")].state == WFE_QUEUED,
	   "cache invalid: an entry the current output contract refuses is recorded, and l runs");
	ok(event_says(&h, "stage.cache_invalid", "l", "origin", "{\"run_id\":7,\"stage\":\"origin\",\"attempt\":1}"),
	   "cache invalid: the event names the entry's origin");
	run_close(&h, "cache invalid");

	/* a leader that fails for good: its waiter runs itself (and waits no more) */
	run_open(&h, rp_cached, "{\"t\": \"x\"}", NULL);
	l = X(&h, "l");
	r = X(&h, "r");
	sh_start(&h);
	sh_fail(&h, l, "{\"code\": \"bad\"}", 0);
	expect_int(h.ncache, 0, "cache leader failed: nothing stored");
	expect_int(h.nwakes, 1, "cache leader failed: its waiter is woken");
	sh_fire_wakes(&h);
	expect_state(&h, "r", WFE_QUEUED, "cache leader failed: r runs itself");
	ok(h.rows[r].attempt == 1 && h.rows[r].cache_key != NULL, "cache leader failed: its own attempt, under the key");
	sh_complete(&h, r, "{\"v\": 1}");
	expect_int(h.ncache, 1, "cache leader failed: r's result is stored");
	run_close(&h, "cache leader failed");

	/* an operator's skip is not stored; a cancel wakes the waiters, who find the run ending */
	run_open(&h, rp_cached, "{\"t\": \"x\"}", NULL);
	l = X(&h, "l");
	sh_start(&h);
	sh_fail(&h, l, "{\"code\": \"bad\"}", 0);
	sh_fire_wakes(&h);
	sh_fail(&h, X(&h, "r"), "{\"code\": \"bad\"}", 0);
	ok(h.run.finished, "cache skip: both failed, the run failed");
	ok(sh_operate(&h, l, WFE_OPERATE_SKIP, "{\"v\": 5}", "ops", "by hand") == NULL, "cache skip: l skipped by hand");
	expect_int(h.ncache, 0, "cache skip: an operator's result is not stored");
	run_close(&h, "cache skip");

	/* another run's attempt in flight under the key: the release waits on it */
	run_open(&h, rp_cached, "{\"t\": \"x\"}", NULL);
	h.foreign_leader = KEY_X;
	sh_start(&h);
	ok(h.rows[X(&h, "l")].state == WFE_WAITING && h.rows[X(&h, "r")].state == WFE_WAITING &&
	   event_says(&h, "stage.cache_waiting", "l", "leader", "{\"run_id\":41,\"stage\":\"leader\",\"attempt\":1}"),
	   "cache foreign leader: both branches wait on the other run's attempt");
	h.foreign_leader = NULL;
	sh_cache_put(&h, KEY_X, "{\"v\": 4}", 1);
	SH_PUSH(h.wakes, h.nwakes, h.capwakes)->stage = X(&h, "l");
	SH_PUSH(h.wakes, h.nwakes, h.capwakes)->stage = X(&h, "r");
	sh_fire_wakes(&h);
	ok(h.rows[X(&h, "l")].state == WFE_COMPLETED && h.rows[X(&h, "r")].state == WFE_COMPLETED,
	   "cache foreign leader: its end (result stored) completes both");
	run_close(&h, "cache foreign leader");

	/* what a step did to a key is seen by the same step: a stored result serves, an ended attempt is no leader */
	run_open(&h, rp_cached_tail, "{\"t\": \"x\"}", NULL);
	sh_start(&h);
	sh_fail(&h, X(&h, "l"), "{\"code\": \"bad\"}", 0);
	sh_fire_wakes(&h);
	sh_complete(&h, X(&h, "r"), "{\"v\": 2}");
	expect_state(&h, "tail", WFE_COMPLETED, "cache same step: r's result, stored in this step, serves tail at once");
	ok(event_says(&h, "stage.cache_hit", "tail", "origin", "{\"run_id\":42,\"stage\":\"r\",\"attempt\":1}"),
	   "cache same step: the hit names r as its origin");
	run_close(&h, "cache stored in the same step");

	run_open(&h, rp_cached_tail, "{\"t\": \"x\"}", NULL);
	sh_start(&h);
	sh_fail(&h, X(&h, "l"), "{\"code\": \"bad\"}", 0);
	sh_fire_wakes(&h);
	sh_fail(&h, X(&h, "r"), "{\"code\": \"bad\"}", 0);
	expect_state(&h, "tail", WFE_QUEUED, "cache same step: an attempt that ended in this step is not waited on");
	run_close(&h, "cache leader ended in the same step");

	run_open(&h, rp_cached, "{\"t\": \"x\"}", NULL);
	sh_start(&h);
	sh_cancel(&h, "enough");
	expect_int(sh_count_ops(&h, WFE_OP_CACHE_WAKE, X(&h, "l")), 1, "cache cancel: the cancelled leader wakes its waiters");
	expect_state(&h, "r", WFE_SKIPPED, "cache cancel: the waiter of this run is skipped with the run");
	sh_fire_wakes(&h);
	expect_int(h.nops, 0, "cache cancel: the waiter's timer, fired after the skip, does nothing");
	expect_state(&h, "r", WFE_SKIPPED, "cache cancel: ... and r stays skipped");
	run_close(&h, "cache cancel");
}

/*
 * Result cache keys that meet within one step, where the server's leader
 * query sees the table as it was before the step: twin tasks released
 * together (the second waits on the first, no second attempt), and a
 * stage released by the end of its own run's attempt under the same key
 * (that attempt is over: it runs itself rather than wait for good).
 */
static void
test_cache_same_step(void)
{
	sh			h;
	const sh_op *op;

	run_open(&h, rp_cache_twin, "{\"t\": \"x\"}", NULL);
	sh_start(&h);
	expect_state(&h, "a", WFE_QUEUED, "cache twins");
	expect_state(&h, "b", WFE_WAITING, "cache twins");
	expect_int(sh_count_ops(&h, WFE_OP_ENQUEUE, -2), 1, "cache twins: one attempt queued");
	ok(sh_find_op(&h, WFE_OP_CACHE_WAIT, X(&h, "b")) != NULL, "cache twins: b waits on a");
	sh_complete(&h, X(&h, "a"), "{\"v\": 1}");
	expect_int(sh_fire_wakes(&h), 1, "cache twins: a's end wakes b");
	op = sh_find_op(&h, WFE_OP_CACHE_HIT, X(&h, "b"));
	ok(op && op->flag == 1 && h.rows[X(&h, "b")].state == WFE_COMPLETED, "cache twins: b completes from a's result, coalesced");
	ok(h.run.finished && h.run.state == WFE_RUN_COMPLETED, "cache twins: the run completes");
	run_close(&h, "cache twins");

	for (int fail = 0; fail <= 1; fail++)
	{
		run_open(&h, rp_cache_twice, "{\"t\": \"x\"}", NULL);
		sh_start(&h);
		if (fail)
			sh_fail(&h, X(&h, "s1"), "{\"code\": \"x\"}", 0);
		else
			sh_complete(&h, X(&h, "s1"), "{\"v\": 1}");
		/* s1's result, stored in this very step, serves s2; a failed s1 leaves s2 to run itself */
		expect_state(&h, "s2", fail ? WFE_QUEUED : WFE_COMPLETED,
					 fail ? "cache s1 fails -> s2" : "cache s1 completes -> s2: a hit on s1's result");
		ok(sh_find_op(&h, WFE_OP_CACHE_WAIT, X(&h, "s2")) == NULL,
		   "cache s1 %s -> s2: s2 does not wait on s1's ended attempt", fail ? "fails" : "completes");
		if (fail)
			sh_complete(&h, X(&h, "s2"), "{\"v\": 2}");
		ok(h.run.finished && h.run.state == WFE_RUN_COMPLETED, "cache s1 %s -> s2: the run completes",
		   fail ? "fails" : "completes");
		run_close(&h, fail ? "cache s1 fails -> s2" : "cache s1 completes -> s2");
	}
}


/* Waits: signal after release, before release (buffered, oldest first), late. */
static void
test_wait_signals(void)
{
	sh			h;
	const sh_op *op;

	ok(wfe_stage_transition_legal("wait", "waiting", "running") &&
	   wfe_stage_transition_legal("sleep", "waiting", "running") &&
	   !wfe_stage_transition_legal("worker", "waiting", "running") &&
	   !wfe_stage_transition_legal("join", "waiting", "running") &&
	   !wfe_stage_transition_legal("join", "cancelled", "waiting"),
	   "transitions: waiting -> running is a wait's or a sleep's only; a join never goes cancelled -> waiting");
	ok(wfe_stage_transition_legal("worker", "cancelled", "waiting") &&
	   wfe_stage_transition_legal("action", "cancelled", "waiting"),
	   "transitions: a worker's or an action's row may go cancelled -> waiting: a map's element its "
	   "failure cancelled before release, when a redrive reopens the map");
	run_open(&h, rp_waits, "{\"until\": \"2000-01-01T00:00:00Z\"}", NULL);
	sh_start(&h);
	expect_state(&h, "approve", WFE_RUNNING, "wait: released, it is running with no worker");
	op = sh_find_op(&h, WFE_OP_PARK, X(&h, "approve"));
	ok(op && op->delay_us == 60000000LL && op->text && strcmp(op->text, "wait_timeout") == 0,
	   "wait: its timeout is a wait_timeout timer of 60 s");
	ok(events_last(&h, "stage.waiting", "approve") == 1, "wait: event stage.waiting");
	ok(h.rows[X(&h, "approve")].queue == NULL, "wait: no queue, so no claim returns it");

	expect_str(sh_send_signal(&h, "approval@1", "{\"approved\": true, \"by\": \"ann\"}"), "accepted",
			   "signal after release: accepted");
	expect_state(&h, "approve", WFE_COMPLETED, "signal after release: the wait completed");
	expect_str(sh_json_get(h.rows[X(&h, "approve")].result, "by"), "ann",
			   "signal after release: the payload is the wait's result");
	expect_state(&h, "check", WFE_COMPLETED, "signal after release: the decision read the payload");
	expect_state(&h, "pause", WFE_RUNNING, "signal after release: the run moved on to the sleep");
	ok(events_last(&h, "signal.received", "approve") == 1, "signal after release: event signal.received");

	/* the next wait is not released: signals are buffered, then taken oldest first */
	expect_str(sh_send_signal(&h, "approval@1", "{\"approved\": true, \"by\": \"bob\"}"), "buffered",
			   "signal before release: buffered");
	expect_str(sh_send_signal(&h, "approval@1", "{\"approved\": true, \"by\": \"cid\"}"), "buffered",
			   "a second signal before release: buffered");
	ok(sh_fire_timer(&h, h.ntimers - 1) == 1, "sleep: its timer fires");
	expect_state(&h, "pause", WFE_COMPLETED, "sleep: completed when due");
	expect_str(sh_json_get(h.rows[X(&h, "pause")].result, "slept_until"), "2030-01-01T00:00:00+00:00",
			   "sleep: result slept_until");
	expect_state(&h, "again", WFE_COMPLETED, "release: the wait took a buffered signal at once");
	expect_str(sh_json_get(h.rows[X(&h, "again")].result, "by"), "bob", "release: the oldest one");
	ok(h.signals[1].taken_by == X(&h, "again") && h.signals[2].taken_by == -1,
	   "release: exactly one buffered signal consumed");
	ok(h.run.finished && h.run.state == WFE_RUN_COMPLETED, "waits: the run completed");
	expect_str(sh_send_signal(&h, "approval@1", "{\"approved\": true}"), "late", "signal after the end: late");
	run_close(&h, "wait signals");
}

/* A wait's timeout: timed_out, on_timeout; a later signal is late; the stale timer does nothing. */
static void
test_wait_timeout(void)
{
	sh			h;
	int			k;

	run_open(&h, rp_waits, "{\"until\": \"2000-01-01T00:00:00Z\"}", NULL);
	h.now_us = 1700000000LL * 1000000;
	sh_start(&h);
	k = h.ntimers - 1;
	ok(sh_fire_timer(&h, k) == 1, "timeout: the wait_timeout timer fires");
	expect_state(&h, "approve", WFE_TIMED_OUT, "timeout: the wait is timed_out");
	expect_ops(&h, WFE_OP_FAIL, "approve", 1, "timeout: failed as timed_out");
	ok(h.ndead == 0, "timeout: no dead letter (the author routed it)");
	expect_state(&h, "rejected", WFE_COMPLETED, "timeout: on_timeout taken; an until in the past completes at once");
	expect_str(sh_json_get(h.rows[X(&h, "rejected")].result, "slept_until"), "2000-01-01T00:00:00Z",
			   "timeout: slept_until is the bound until");
	ok(h.run.intent == WFE_RUN_FAILED, "timeout: the rejection route ends the run failed");
	expect_str(sh_send_signal(&h, "approval@1", "{\"approved\": true}"), "late", "signal after the timeout: late");
	run_close(&h, "wait timeout");

	/* a signal racing the timeout: the signal wins, the timer is stale */
	run_open(&h, rp_waits, "{}", NULL);
	sh_start(&h);
	k = h.ntimers - 1;
	expect_str(sh_send_signal(&h, "approval@1", "{\"approved\": false}"), "accepted", "race: the signal first");
	h.timers[k].fired = 0;
	sh_fire_timer(&h, k);
	ok(h.nops == 0, "race: the timeout that fires after it does nothing");
	expect_state(&h, "approve", WFE_COMPLETED, "race: exactly one won");
	run_close(&h, "wait timeout race");
}

/* A sleep until a future time waits for its timer; one that does not bind fails with binding.type. */
static void
test_sleep_until(void)
{
	sh			h;
	const sh_op *op;

	run_open(&h, rp_waits, "{\"until\": \"2023-11-14T22:13:30Z\"}", NULL);
	h.now_us = 1700000000LL * 1000000;	/* 2023-11-14T22:13:20Z */
	sh_start(&h);
	sh_fire_timer(&h, h.ntimers - 1);
	op = sh_find_op(&h, WFE_OP_PARK, X(&h, "rejected"));
	ok(op && op->delay_us == 10000000LL && op->text && strcmp(op->text, "sleep") == 0,
	   "sleep until: a sleep timer 10 s ahead");
	expect_state(&h, "rejected", WFE_RUNNING, "sleep until: running until its timer");
	run_close(&h, "sleep until");

	run_open(&h, rp_waits, "{\"until\": \"tomorrow\"}", NULL);
	sh_start(&h);
	sh_fire_timer(&h, h.ntimers - 1);
	expect_state(&h, "rejected", WFE_FAILED, "sleep until: not a timestamp fails the stage");
	expect_str(sh_json_get(h.rows[X(&h, "rejected")].error, "code"), "binding.type", "sleep until: binding.type");
	ok(h.run.intent == WFE_RUN_FAILED, "sleep until: no failure route fails the run");
	run_close(&h, "sleep until unbound");
}

/* Cancellation ends a wait; operators redrive a timed-out wait (a new timeout) and skip one. */
static void
test_wait_cancel_operate(void)
{
	sh			h;
	const char *no;
	int			a;

	run_open(&h, rp_waits, "{}", NULL);
	sh_start(&h);
	expect_str(sh_cancel(&h, "stop"), "accepted", "cancel: accepted");
	expect_state(&h, "approve", WFE_CANCELLED, "cancel: the wait is cancelled");
	ok(h.ncancels == 0, "cancel: no cancel message (nobody holds a wait)");
	expect_str(sh_send_signal(&h, "approval@1", "{\"approved\": true}"), "late", "cancel: a signal after it is late");
	ok(h.run.finished && h.run.state == WFE_RUN_CANCELLED, "cancel: the run is cancelled");
	run_close(&h, "wait cancel");

	/* a wait that timed out to `failed`: redrive waits again */
	run_open(&h, rp_waits, "{\"until\": \"x\"}", NULL);
	sh_start(&h);
	a = X(&h, "approve");
	sh_fire_timer(&h, h.ntimers - 1);
	expect_state(&h, "rejected", WFE_FAILED, "redrive: the run failed after the timeout");
	no = sh_operate(&h, a, WFE_OPERATE_REDRIVE, NULL, "ops", "ask again");
	expect_str(no, NULL, "redrive: a timed-out wait may be redriven");
	expect_state(&h, "approve", WFE_RUNNING, "redrive: it waits again");
	ok(h.rows[a].attempt == 2 && h.timers[h.ntimers - 1].kind == 'w' && h.timers[h.ntimers - 1].attempt == 2,
	   "redrive: attempt 2 with a timeout of its own");
	expect_str(sh_send_signal(&h, "approval@1", "{\"approved\": false}"), "accepted", "redrive: a signal is taken");
	run_close(&h, "wait redrive");

	/* a wait that timed out to `failed`: skip it with a result the operator gives */
	run_open(&h, rp_waits, "{\"until\": \"x\"}", NULL);
	sh_start(&h);
	a = X(&h, "approve");
	sh_fire_timer(&h, h.ntimers - 1);
	no = sh_operate(&h, a, WFE_OPERATE_SKIP, "{\"approved\": true}", "ops", "approved by phone");
	expect_str(no, NULL, "skip: a timed-out wait may be skipped");
	expect_state(&h, "approve", WFE_COMPLETED, "skip: completed by hand");
	expect_state(&h, "pause", WFE_RUNNING, "skip: the run went on with the given result");
	run_close(&h, "wait skip");
}

/* Tasks form: a wait task, then a sleep task, then an action; a timeout fails the run (critical). */
static void
test_tasks_waits(void)
{
	sh			h;

	run_open(&h, rp_tasks_waits, "{}", NULL);
	sh_start(&h);
	expect_state(&h, "approve", WFE_RUNNING, "tasks wait: the wait task is running");
	expect_state(&h, "nap", WFE_WAITING, "tasks wait: the sleep waits for it");
	expect_str(sh_send_signal(&h, "approval@1", "{\"ok\": true}"), "accepted", "tasks wait: a signal is accepted");
	expect_state(&h, "nap", WFE_RUNNING, "tasks wait: then the sleep task sleeps");
	sh_fire_timer(&h, h.ntimers - 1);
	expect_state(&h, "ship", WFE_QUEUED, "tasks wait: when it is due, the action is released");
	run_close(&h, "tasks waits");

	run_open(&h, rp_tasks_waits, "{}", NULL);
	sh_start(&h);
	sh_fire_timer(&h, h.ntimers - 1);
	expect_state(&h, "approve", WFE_TIMED_OUT, "tasks wait timeout: timed_out");
	expect_skipped(&h, "nap", "run_aborted", "tasks wait timeout");
	ok(h.run.intent == WFE_RUN_FAILED, "tasks wait timeout: a critical task's timeout fails the run");
	run_close(&h, "tasks waits timeout");
}


/* The run's output: bound at a completed intent; a binding failure fails the run. */
static void
test_run_output(void)
{
	sh			h;
	int			a;
	const sh_op *op;

	run_open(&h, rp_output, "{\"who\": \"ann\"}", NULL);
	a = X(&h, "a");
	sh_start(&h);
	sh_accept(&h, a);
	sh_complete(&h, a, "{\"url\": \"s3://x\"}");
	op = sh_find_op(&h, WFE_OP_INTENT, -1);
	ok(op && op->state == WFE_RUN_COMPLETED, "output: the run's intent is completed");
	expect_json(op ? op->json : NULL, "{\"url\": \"s3://x\", \"who\": \"ann\", \"label\": \"run output\"}",
				"output: bound with the completed intent");
	run_close(&h, "output");

	run_open(&h, rp_output, "{\"who\": \"ann\"}", NULL);
	sh_start(&h);
	sh_accept(&h, a);
	sh_complete(&h, a, "{\"size\": 1}");
	op = sh_find_op(&h, WFE_OP_INTENT, -1);
	ok(op && op->state == WFE_RUN_FAILED && op->json == NULL,
	   "output unbound: the intent becomes failed, with no output");
	ok(h.reason && strncmp(h.reason, "binding.missing: output.url:", 28) == 0,
	   "output unbound: the reason is the binding failure at output.url");
	if (h.reason == NULL || strncmp(h.reason, "binding.missing: output.url:", 28) != 0)
		diag("reason: %s", h.reason ? h.reason : "NULL");
	ok(sh_event_detail(&h, "run.output_failed", -1) != NULL, "output unbound: event run.output_failed");
	run_close(&h, "output unbound");

	run_open(&h, rp_linear, "{\"x\": \"hello\"}", NULL);
	sh_start(&h);
	sh_accept(&h, X(&h, "a"));
	sh_complete(&h, X(&h, "a"), "{\"v\": 1}");
	sh_complete(&h, X(&h, "b"), "{}");
	op = sh_find_op(&h, WFE_OP_INTENT, -1);
	expect_json(op ? op->json : NULL, "{}", "output: a stages-form run without output: has {}");
	run_close(&h, "output default");
}

int
main(void)
{
	struct
	{
		wfe_run_plan **rp;
		const char *yaml;
	}			plans[] = {
		{&rp_linear, LINEAR}, {&rp_jitter, JITTER}, {&rp_model, MODEL_INGEST}, {&rp_decide, DECIDE},
		{&rp_nest, NEST}, {&rp_forkdec, FORK_DECISION}, {&rp_forkmeet, FORK_MEET}, {&rp_intents, INTENTS}, {&rp_tasks, TASKS},
		{&rp_tasks_context, TASKS_CONTEXT}, {&rp_tasks_produces, TASKS_PRODUCES}, {&rp_escape, ESCAPE},
		{&rp_tasks_edge, TASKS_EDGE}, {&rp_tasks_bind, TASKS_BIND}, {&rp_cached, CACHED},
		{&rp_cached_tail, CACHED_TAIL}, {&rp_two_joins, TWO_JOINS},
		{&rp_cache_twin, CACHE_TWIN}, {&rp_cache_twice, CACHE_TWICE}, {&rp_waits, WAITS}, {&rp_tasks_waits, TASKS_WAITS},
		{&rp_output, OUTPUT}, {&rp_flow_keys, FLOW_KEYS},
	};

	for (size_t k = 0; k < sizeof(plans) / sizeof(plans[0]); k++)
	{
		*plans[k].rp = sh_plan(plans[k].yaml, (int64_t) k + 1);
		if (*plans[k].rp == NULL)
		{
			fprintf(stderr, "test bug: workflow %zu does not compile\n", k);
			return 2;
		}
	}

	test_tables();
	test_linear_success();
	test_run_output();
	test_linear_failure();
	test_retry_backoff();
	test_jitter();
	test_timeout();
	test_binding();
	test_decision_seed000();
	test_decision_rules();
	test_fork_join();
	test_nested_forks();
	test_fork_decision();
	test_intent_failed();
	test_intent_completed_finalisers();
	test_cancel();
	test_run_deadline();
	test_tasks_release();
	test_tasks_critical();
	test_tasks_context();
	test_tasks_edges();
	test_gate();
	test_result_problems();
	test_interrupted_step();
	test_redrive();
	test_skip_stage();
	test_reopen_fork_unreleased();
	test_reopen_cause();
	test_fail_stage();
	test_flow_keys();
	test_redispatch();
	test_cache();
	test_cache_same_step();
	test_wait_signals();
	test_wait_timeout();
	test_sleep_until();
	test_wait_cancel_operate();
	test_tasks_waits();

	for (size_t k = 0; k < sizeof(plans) / sizeof(plans[0]); k++)
		wfe_run_plan_free(*plans[k].rp);
	return tap_done();
}
