/*
 * step.h — the step core: how a run moves, as a pure function.
 *
 * Given a run plan (runplan.h), the run's rows as the server reads them
 * and one event (a start, an attempt's report, a timeout, a due retry, a
 * run deadline, a cancel), the core decides every consequence — stage and
 * run transitions, event records, dispatches, timers, finalisers — and
 * returns them as an ordered list of effects (wfe_op) for the server to
 * write.  Routing, decisions, forks and joins, skips, the tasks form's
 * dependents, intents, finalisers and backoff live here and nowhere else.
 *
 * The core reads stage rows through the server's I/O hooks (wfe_step_io)
 * as it needs them (a linear step reads two rows, not the run), and keeps
 * its copies up to date as it decides, so later decisions see earlier ones.  It has no
 * PostgreSQL headers: the unit tests and the fuzzer drive it with rows in
 * memory.  Everything it allocates lives in the step's arena, and the few
 * json-c objects it parses are released by wfe_step_end (or, should the
 * server's hook raise, by the next wfe_step_begin).  (A "callback" is
 * something else: a worker's report about an attempt, wfe_callback below.)
 */
#ifndef WFE_STEP_H
#define WFE_STEP_H

#include <stdint.h>

#include "core/base/arena.h"
#include "runplan.h"
#include "states.h"

struct json_object;

/* A stage row as far as the core reads it. */
typedef struct wfe_row
{
	int			loaded;
	int			exists;			/* 0: no such row (treated as not waiting) */
	wfe_state	state;
	int			attempt;
	int64_t		fence;
	int			outcome;		/* 0 none, WFE_COMPLETED or WFE_FAILED */
	int			branch;			/* the fork branch head it runs under, or -1 */
	int			awaits;
	int			has_handler;
	const char *queue;			/* NULL for decisions, forks, joins */
	const char *arrivals;		/* join: JSON of {branch: outcome}, or NULL */
	const char *result;			/* set by this step's completion: its result */
	const char *cache_key;		/* the result cache key it was released under, or NULL */
	const char *rate_key;		/* the rate-limit key bound at this release, or NULL */
	const char *concurrency_key;	/* the concurrency key bound at this release, or NULL */
} wfe_row;

/* A stage's result cache entry, as the server read it (dsl.md "Result cache"). */
typedef struct wfe_cache_entry
{
	const char *key;			/* always set: "sha256:..." */
	int			found;			/* 0: no unexpired entry (a clean miss) */
	int			digest_ok;		/* the stored result matches its stored digest */
	const char *result;			/* JSON text */
	const char *origin;			/* JSON {run_id, stage, attempt, created_at, expires_at} */
} wfe_cache_entry;

/* The run, as the server read it under its lock. */
typedef struct wfe_run
{
	int64_t		run_id;
	const char *tenant;
	const char *workflow;
	const char *version;
	const char *execution_context;	/* NULL: none */
	int			intent;			/* -1 none, else WFE_RUN_COMPLETED/FAILED/CANCELLED */
	wfe_run_state state;
	int			finished;
} wfe_run;

/*
 * A workflow stage's child as its attempt would start it now (runtime.md
 * "Child runs"), as the server resolves it: the version of the named
 * workflow (the active one, or the one NAME@VERSION names if it is not a
 * draft; NULL: none), the nesting depth the child would have (a top-level
 * run's child: 1) and wfe.max_workflow_depth.  The child's context_schema
 * is what input_schema answers for the stage.
 */
typedef struct wfe_child
{
	const char *version;
	int			depth;
	int			max_depth;
} wfe_child;

/* A map's counter row (runtime.md "Map elements"): one per map, written per element end. */
typedef struct wfe_map_counts
{
	int64_t		total;			/* elements bound at release */
	int64_t		released;		/* elements 0..released-1 were released */
	int64_t		completed;		/* elements that completed */
	int64_t		failed;			/* elements that failed for good */
	int64_t		held;			/* elements (below released) an operator redrove while
								 * max_concurrency was full: waiting for a slot */
} wfe_map_counts;

/* The I/O hooks: what the core may ask the server for; every hook may raise. */
typedef struct wfe_step_io
{
	void	   *arg;
	/* fill *row for stage i (row->exists 0 when there is none) */
	void		(*load) (void *arg, int stage, wfe_row *row);
	/* the stored result (JSON text) of a completed stage, or NULL */
	const char *(*result) (void *arg, int stage);
	/* the run's context (JSON text) */
	const char *(*context) (void *arg);
	/* the stored output (JSON text) of a task's key, or NULL */
	const char *(*output) (void *arg, const char *task, const char *key);
	/* the parsed input schema of stage i's contract, or NULL for none */
	struct json_object *(*input_schema) (void *arg, int stage);
	/* uniform in [0, 1), for jitter */
	double		(*random) (void *arg);
	/* 32 unpredictable bits, the low half of a new fence */
	uint32_t	(*fence_bits) (void *arg);
	/* the parsed output schema of stage i's contract, or NULL for none */
	struct json_object *(*output_schema) (void *arg, int stage);
	/*
	 * Result cache: stage i's entry for its bound input (fills *e, e->key
	 * always), and the attempt of another run in flight under a key (JSON
	 * {run_id, stage, attempt}) or NULL.  The server serialises both per
	 * key until commit.  (This run's own stages the core looks at itself.)
	 */
	void		(*cache_entry) (void *arg, int stage, const char *input, wfe_cache_entry *e);
	const char *(*cache_leader) (void *arg, const char *key);
	/*
	 * Signals (runtime.md "Signals"): the payload (JSON text) of the oldest
	 * signal of this run named `signal` kept buffered with an id above
	 * `after`, its id in *id; or NULL.  And the time now, in microseconds
	 * since the Unix epoch (a sleep's `until` is measured against it).
	 */
	const char *(*buffered_signal) (void *arg, const char *signal, int64_t after, int64_t *id);
	int64_t		(*now_us) (void *arg);
	/* the bound input (JSON text) stored in stage i's row, or NULL */
	const char *(*stage_input) (void *arg, int stage);
	/* workflow stage i's child as it would start now (fills *c) */
	void		(*child) (void *arg, int stage, wfe_child *c);
	/*
	 * Maps (map.c): fill *row for element elem of map stage i (NAME[elem]);
	 * fill *c from the map's counter row (all 0 when there is none); the
	 * one final aggregation, {"items": [...], "failed": [...]} in element
	 * order (JSON text), where element elem -- the one whose end this step
	 * decides, not yet written -- ended with elem_result (NULL: failed);
	 * and wfe.max_map_items.
	 */
	void		(*load_element) (void *arg, int stage, int64_t elem, wfe_row *row);
	/*
	 * The indices of map stage's cancelled elements, ascending, at most max
	 * into out; how many.  Only an operator's reopening of a failed map asks
	 * (the one step besides the release and the aggregation that may touch
	 * many elements).  NULL: none.
	 */
	int64_t		(*map_cancelled) (void *arg, int stage, int64_t *out, int64_t max);
	/*
	 * The lowest index below `below` of map stage's elements that wait
	 * (held for a slot: wfe_map_counts.held) -- or are cancelled, as an
	 * operator's reopening of the map resets them in the same step -- or
	 * -1.  Asked only while some are held.
	 */
	int64_t		(*map_held) (void *arg, int stage, int64_t below);
	void		(*map_counts) (void *arg, int stage, wfe_map_counts *c);
	const char *(*map_results) (void *arg, int stage, int64_t elem, const char *elem_result);
	int64_t		(*max_map_items) (void *arg);
} wfe_step_io;

/* The effects, in the order the server writes them. */
typedef enum wfe_op_kind
{
	WFE_OP_EVENT,				/* event row: stage (-1 none), attempt (0 none), text type, json detail;
								 * flag: fence is the fence it is about (kept out of the detail) */
	WFE_OP_ENQUEUE,				/* queued; flag: new attempt; json: input (NULL keeps it); text: a cache miss's key;
								 * json2: the bound rate-limit key (NULL keeps it);
								 * concurrency_key, concurrency_max: the bound keyed concurrency (NULL keeps it) */
	WFE_OP_RESOLVE,				/* decision/fork/join resolved: state, json result, json2 error, branch (or WFE_KEEP_BRANCH) */
	WFE_OP_BIND_FAILED,			/* failed at release: json error */
	WFE_OP_COMPLETE,			/* the attempt completed with json: its result (a report's, a signal's payload, a sleep's) */
	WFE_OP_RETRY,				/* retry_scheduled, json error; a timer after delay_us */
	WFE_OP_FAIL,				/* state (failed or timed_out), json error; flag: dead letter */
	WFE_OP_TIME_OUT,			/* timed_out, fenced */
	WFE_OP_SKIP,				/* skipped, text reason */
	WFE_OP_CANCEL,				/* cancelled and fenced, json error; flag: send a cancel message */
	WFE_OP_BRANCH,				/* record branch */
	WFE_OP_ARRIVALS,			/* join still waiting: json arrivals */
	WFE_OP_OUTPUTS,				/* write the task's declared outputs from its result */
	WFE_OP_ACCEPT,				/* running, accepted by a pushed worker */
	WFE_OP_HEARTBEAT,			/* a running attempt is alive */
	WFE_OP_INTENT,				/* run intent (state) and text reason; retire its timers;
								 * json: the run's output (a completed intent), else NULL */
	WFE_OP_FINALISING,			/* run moves to finalising */
	WFE_OP_FINISH,				/* run ends in state, text reason (NULL keeps it) */
	/* operator recovery (wfe_step_operate) */
	WFE_OP_REOPEN,				/* a failed run is running again: intent, reason, finished_at cleared */
	WFE_OP_RESET,				/* waiting again (the run reopened); json: a join's kept arrivals, or NULL */
	WFE_OP_FENCE,				/* fence the attempt (fence + 1); flag: send a cancel message */
	/* the result cache */
	WFE_OP_CACHE_HIT,			/* completed from an entry: text key, json result, json2 input, flag: coalesced */
	WFE_OP_CACHE_WAIT,			/* waits on the attempt in flight under text key; json: input */
	WFE_OP_CACHE_STORE,			/* store the accepted result under text key */
	WFE_OP_CACHE_WAKE,			/* the attempt in flight under text key ended: its waiters go on */
	/* waits and sleeps */
	WFE_OP_PARK,				/* running with no worker (a wait, a sleep): new attempt, fence;
								 * delay_us >= 0: a timer (text: its kind) after it; json: input */
	WFE_OP_SIGNAL_TAKEN,		/* the buffered signal delay_us (its id) was taken by this wait */
	/* child runs */
	WFE_OP_CHILD,				/* start a child run for the parked workflow stage's attempt (attempt,
								 * fence): text the workflow, json2 its version, json its context */
	/* maps (an op about one element has elem >= 0: its stage is NAME[elem]) */
	WFE_OP_MAP_START,			/* the map runs: attempt, fence; json: the elements' bound inputs
								 * (a JSON array), text: their kind; its counter row from counts;
								 * json2: the elements' bound rate-limit keys (an array; NULL: unkeyed);
								 * concurrency_key: their bound concurrency keys (an array; NULL: unkeyed),
								 * concurrency_max: its max */
	WFE_OP_MAP_COUNTS,			/* the map's counter row is counts */
	WFE_OP_MAP_CANCEL			/* the map's elements under way are cancelled and fenced; json: error */
} wfe_op_kind;

/* wfe_op.branch of a RESOLVE that leaves the row's branch as it is */
#define WFE_KEEP_BRANCH (-2)

typedef struct wfe_op
{
	wfe_op_kind kind;
	int			stage;
	int			state;
	int			attempt;
	int64_t		fence;
	int64_t		prev_fence;		/* CANCEL, FENCE: the fence of the attempt asked to stop */
	int			flag;
	int			branch;
	int64_t		delay_us;
	const char *text;
	const char *json;
	const char *json2;
	int64_t		elem;			/* a map element's index, or -1: the op is about the stage itself */
	const char *concurrency_key;	/* ENQUEUE: the bound concurrency key, or NULL; MAP_START: the elements' */
	int			concurrency_max;	/* ENQUEUE, MAP_START: its max, with a key */
	wfe_map_counts counts;		/* MAP_START, MAP_COUNTS */
} wfe_op;

/* One step's working state. */
typedef struct wfe_step
{
	const wfe_run_plan *rp;
	wfe_run    *run;
	const wfe_step_io *io;
	wfe_arena	arena;
	wfe_row    *rows;			/* rp->nstages */
	int			all_loaded;
	wfe_op	   *ops;
	int			nops;
	int			capops;
	struct json_object **held;	/* parsed JSON to release */
	int			nheld;
	int			capheld;
	int			depth;			/* recursion guard */
	int64_t		signal_after;	/* buffered signals this step took have ids up to this */
	/*
	 * A map element this step is about (map.c): while elem >= 0, stage
	 * elem_map's row is the element's (elem_row), and ops about that stage
	 * are about the element; the map's own row stays in rows[].
	 */
	int			elem_map;
	int64_t		elem;
	wfe_row		elem_row;
	int			counts_loaded;
	wfe_map_counts counts;		/* elem_map's counter row, kept up to date */
	/*
	 * Elements completed from the result cache at their release in this
	 * step (map.c): {"index": result}, for the aggregation to read (their
	 * rows are written after the step); in_release while releasing them.
	 */
	struct json_object *map_hits;
	int			in_release;
} wfe_step;

/* Start a step (releases what an interrupted earlier step still held). */
extern void wfe_step_begin(wfe_step *st, const wfe_run_plan *rp, wfe_run *run,
						   const wfe_step_io *io);
/* Release the step's memory (its ops too: write them first). */
extern void wfe_step_end(wfe_step *st);

/* The stage row as the core sees it now (loaded on first use). */
extern wfe_row *wfe_step_row(wfe_step *st, int stage);

/* Events.  Each appends its consequences to st->ops. */
extern void wfe_step_start(wfe_step *st);
/* result: the accepted result's JSON text (the stage's successors may read it) */
extern void wfe_step_completed(wfe_step *st, int stage, const char *result);
/* error: the reported error's JSON text */
extern void wfe_step_failed(wfe_step *st, int stage, const char *error, int retryable);
/* a completion whose result was refused (wfe_step_result_problem) */
extern void wfe_step_invalid_result(wfe_step *st, int stage, const char *problem);
/* the firing of a queue/execution/heartbeat deadline: fence, then retry or fail */
extern void wfe_step_expired(wfe_step *st, int stage, const char *clock,
							 const char *deadline_text, const char *deadline_json);
extern void wfe_step_retry_due(wfe_step *st, int stage, int attempt, int64_t fence);
extern void wfe_step_run_deadline(wfe_step *st, const char *deadline_json);
extern void wfe_step_cancel(wfe_step *st, const char *reason);
/* an item of a worker round raised for this run (stage -1: the run's own): fail the run */
extern void wfe_step_engine_error(wfe_step *st, int stage, const char *error_json);
extern void wfe_step_accepted(wfe_step *st, int stage, const char *worker_id);
/* a running attempt is alive (nothing to decide: one effect, no event) */
extern void wfe_step_heartbeat(wfe_step *st, int stage);
/* the attempt a stage waited on under its cache key ended; input: the stage's bound input */
extern void wfe_step_cache_ready(wfe_step *st, int stage, const char *input);

/*
 * A signal for this run (wfe.signal, its payload valid): answers
 * "accepted" (a released wait on it took it: *taken is that stage),
 * "buffered" (a wait on it may yet be released: the server keeps it) or
 * "late" (the run has an intent, or every wait on it is past); appends the
 * signal.received event (key and by: its idempotency key and sender).
 */
extern const char *wfe_step_signal(wfe_step *st, const char *signal, const char *payload,
								   const char *key, const char *by, int *taken);
/* a wait's timeout timer fired (for that attempt and fence) */
extern void wfe_step_wait_timeout(wfe_step *st, int stage, int attempt, int64_t fence);
/* a sleep's timer fired (for that attempt and fence); due_json: its due time, a JSON string */
extern void wfe_step_sleep_due(wfe_step *st, int stage, int attempt, int64_t fence,
							   const char *due_json);

/*
 * The child run started for workflow stage i's attempt (and fence) ended
 * in state ("completed", "failed" or "cancelled"; output: its output, JSON
 * text): that attempt completes with the output or fails with child.failed
 * / child.cancelled.  An attempt no longer running (cancelled, fenced,
 * redriven) records the late end and changes nothing.
 */
extern void wfe_step_child_ended(wfe_step *st, int stage, int attempt, int64_t fence,
								 int64_t child_run_id, const char *state, const char *output);

/*
 * Maps (map.c).  The map stage whose element `name` (NAME[i]) names, with
 * *elem set; -1 when name is no element of a map of this plan (no such
 * map, an index that is not a canonical number).  Whether i exists is
 * the server's to say (the element's row).
 */
extern int	wfe_map_element_of(const wfe_run_plan *rp, const char *name, int64_t *elem);
/* What follows in this step is about element elem of map stage i. */
extern void wfe_step_element(wfe_step *st, int stage, int64_t elem);

/* The callback gate: which report of a worker is this (a callback), and what it reports. */
typedef enum wfe_callback
{
	WFE_CB_ACCEPT,
	WFE_CB_HEARTBEAT,
	WFE_CB_COMPLETE,
	WFE_CB_FAIL
} wfe_callback;

/*
 * Answer a callback about an existing stage in the spec's order: duplicate
 * or conflict (this attempt and fence already reported: same_value says
 * whether the report equals what was recorded), late, stale; NULL when it
 * may go on.  A rejection also appends its callback.* event.
 */
extern const char *wfe_step_gate(wfe_step *st, int stage, wfe_callback cb,
								 int attempt, int64_t fence, int same_value);

/*
 * Why a result (JSON text) is not acceptable for stage i: the contract's
 * output schema (NULL: none), then the task's declared produces; or NULL.
 */
extern const char *wfe_step_result_problem(wfe_step *st, int stage, const char *result,
										   struct json_object *output_schema);

/* JSON text of a string (quoted, escaped), in the step's arena. */
extern const char *wfe_step_json_str(wfe_step *st, const char *s);

/*
 * Operator recovery (operations.md "Recovery"): actions a human takes on one
 * stage, through the same core as every callback, so fencing holds (a late
 * report of a redriven or failed-by-hand attempt is stale).
 *
 *   REDRIVE     a failed or timed-out task: a new attempt, a new fence
 *   SKIP        a failed or timed-out stage: completed by hand with a result
 *   FAIL        an attempt under way: fenced, failed without retry, routed on
 *   REDISPATCH  a queued or dispatched task: a new fence (and a new message)
 *
 * REDRIVE and SKIP reopen a run that ended failed: its intent is cleared,
 * what the failure cancelled is queued again, what it skipped downstream
 * and its finalisers wait again, and the run goes on from that stage.
 */
typedef enum wfe_operation
{
	WFE_OPERATE_REDRIVE,
	WFE_OPERATE_SKIP,
	WFE_OPERATE_FAIL,
	WFE_OPERATE_REDISPATCH
} wfe_operation;

/*
 * Why op may not act on stage i now (a sentence), or NULL when it may.
 * value as for wfe_step_operate (a decision is skipped with {"next": NAME},
 * one of its branches' targets).
 */
extern const char *wfe_step_operate_problem(wfe_step *st, int stage, wfe_operation op,
											const char *value);

/*
 * Does op (after wfe_step_operate_problem answered NULL) reopen the ended
 * run, putting it in flight again?  The caller admits that against the
 * tenant's run limit as it admits a submit.
 */
extern int	wfe_step_operate_reopens(const wfe_step *st, wfe_operation op);

/*
 * Act (after wfe_step_operate_problem answered NULL).  value: SKIP's result
 * (JSON text, checked by the caller like a report), FAIL's reason; by and
 * why go in the events.
 */
extern void wfe_step_operate(wfe_step *st, int stage, wfe_operation op, const char *value,
							 const char *by, const char *why);

#endif							/* WFE_STEP_H */
