/*
 * step_harness.h — an in-memory server for the step core (core/engine/step.h),
 * shared by test/unit/test_step.c and test/fuzz/fuzz_step.c.
 *
 * One run's rows live in arrays: they are "the database".  The I/O hooks
 * (wfe_step_io) read them the way engine.c's io_* functions read wfe.run_stages,
 * and sh_apply() writes every effect the core returns exactly as engine.c's
 * apply() does: the same attempt and fence arithmetic, results, errors,
 * skip reasons, branches, arrivals, timers, dead letters, cancel messages,
 * outputs, run intent and run state.  The sh_* "server" functions mirror
 * engine.c's entry points (a callback through the gate, the start, a retry
 * timer, an expired deadline, the run deadline, a cancel, an in-database
 * action's result) and the SQL-side transitions the core never sees (a poll
 * claim, the publisher's dispatch and give-back).  Map stages have their
 * element rows (NAME[i], made by MAP_START, read by io->load_element) and
 * their counter row (io->map_counts), the element ops written to the
 * element's row exactly as to a stage's (sh_elem_enter swaps it in), and
 * the *_at entry points name an element: its reports, retry timers,
 * deadlines, child's end, claim and an operator's action.
 *
 * After every event, sh_check() verifies what must always hold:
 *   - every stage state change the ops imply is in wfe_stage_transition_table
 *     and every run state change in wfe_run_transition_table (checked as
 *     each op is written, like the triggers on wfe.run_stages and wfe.runs);
 *   - ops name stages in range, fences and attempts never decrease, the
 *     intent is set once, a run finishes once, skip reasons and resolved
 *     states are ones the table's CHECK constraints allow;
 *   - the core's copy of every row it read equals the row after the write
 *     (so the core's later decisions in a step saw what the database holds);
 *   - a gate rejection wrote exactly one callback.* event and nothing else;
 *   - maps: an element's state changes are legal for its item's kind and its
 *     fence and attempt never decrease; a map aggregates at most once per
 *     attempt; its counters never exceed its elements (completed + failed
 *     <= released <= total = elements, completed <= elements completed); no
 *     element past the released ones runs; no more elements are under way
 *     than max_concurrency, an operator's redrive included (it waits for a
 *     slot: runtime.md "Operator actions on one element");
 *   - optionally, liveness: a started run without intent has an attempt
 *     under way, a run with an intent is finalising or finished, a finished
 *     run has nothing waiting or under way it waits for.
 * A breach goes to h->violation(): the unit test counts it, the fuzzer
 * aborts.  Everything the harness allocates is freed by sh_free().
 */
#ifndef WFE_STEP_HARNESS_H
#define WFE_STEP_HARNESS_H

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include "core/lang/compile.h"
#include "core/engine/runplan.h"
#include "core/engine/states.h"
#include "core/engine/step.h"

#define SH_FN static __attribute__((unused))

/* A stage row of wfe.run_stages, as far as the engine writes it. */
typedef struct sh_row
{
	wfe_state	state;
	int			attempt;
	int64_t		fence;
	int			outcome;		/* 0, WFE_COMPLETED or WFE_FAILED */
	int			branch;			/* stage index or -1 */
	int			awaits;
	int			has_handler;
	char	   *queue;
	char	   *input;
	char	   *result;
	char	   *error;
	char	   *skip_reason;
	char	   *claimed_by;
	char	   *arrivals;		/* (result -> 'arrivals')::text */
	char	   *cache_key;
	char	   *rate_key;		/* the bound rate_limit.key and concurrency.key (run_stages' columns) */
	char	   *concurrency_key;
} sh_row;

/* A result cache entry (wfe.cache_entries): key, result, whether its digest holds. */
typedef struct sh_cache
{
	char	   *key;
	char	   *result;
	int			digest_ok;
} sh_cache;

typedef struct sh_event
{
	int			stage;
	int			attempt;
	char	   *type;
	char	   *detail;
	int			fenced;			/* the event is about fence (wfe.events.fence) */
	long long	fence;
} sh_event;

typedef struct sh_timer
{
	int			stage;
	int			attempt;
	int64_t		fence;
	int64_t		delay_us;
	int			fired;
	char		kind;			/* 0 retry, 'w' a wait's timeout, 's' a sleep's end */
	int64_t		elem1;			/* a map element's index + 1, or 0: the stage's own */
} sh_timer;

/* A signal kept for the run (wfe.signals): buffered, or taken by a wait. */
typedef struct sh_signal
{
	char	   *name;
	char	   *payload;
	int64_t		id;
	int			taken_by;		/* the wait that took it, or -1 while buffered */
} sh_signal;

typedef struct sh_output
{
	int			task;
	char	   *key;
	char	   *value;
} sh_output;

/* A dead letter or a cancel message: which attempt. */
typedef struct sh_mark
{
	int			stage;
	int			attempt;
	int64_t		fence;
	int64_t		elem1;			/* a map element's index + 1, or 0: the stage's own */
} sh_mark;

/* A copy of one op of the last step (the core's strings die with the step). */
typedef struct sh_op
{
	wfe_op_kind kind;
	int			stage;
	int			state;
	int			attempt;
	int64_t		fence;
	int			flag;
	int			branch;
	int64_t		delay_us;
	char	   *text;
	char	   *json;
	char	   *json2;
} sh_op;

/* A map stage's elements (their rows of wfe.run_stages) and its wfe.run_maps row. */
typedef struct sh_map
{
	sh_row	   *elems;
	int64_t		n;
	wfe_map_counts counts;
	int			agg_attempt;	/* the map attempt that last aggregated (0: none) */
} sh_map;

typedef struct sh sh;
typedef void (*sh_violation_fn) (sh *h, const char *message);

struct sh
{
	const wfe_run_plan *rp;
	wfe_run_plan *owned_rp;		/* freed by sh_free when set */
	int			nst;
	sh_row	   *rows;
	wfe_run		run;			/* the wfe.runs row */
	char	   *reason;
	char	   *context;
	char	   *execution_context;
	int			started;
	int			finishes;
	struct json_object **input_schema;	/* per stage, owned (engine.c caches them) */
	struct json_object **output_schema;
	double		random;			/* what io->random returns */
	uint32_t	fence_bits;		/* what io->fence_bits returns */

	sh_event   *events;
	int			nevents,
				capevents;
	int			mark;			/* first event of the last step */
	sh_timer   *timers;
	int			ntimers,
				captimers;
	sh_output  *outputs;
	int			noutputs,
				capoutputs;
	sh_mark    *dead;
	int			ndead,
				capdead;
	sh_mark    *cancels;
	int			ncancels,
				capcancels;
	sh_cache   *cache;			/* the result cache */
	int			ncache,
				capcache;
	sh_mark    *wakes;			/* cache_ready timers: a waiter's leader ended */
	const char *foreign_leader;	/* a key another run has an attempt in flight under */
	int			nwakes,
				capwakes;
	sh_signal  *signals;		/* wfe.signals */
	int			nsignals,
				capsignals;
	int64_t		now_us;			/* what io->now_us returns */
	const char *child_version;	/* what io->child answers: the version (NULL: none), */
	int			child_depth;	/* the depth a child would have, */
	int			max_depth;		/* and wfe.max_workflow_depth */
	sh_mark    *children;		/* child runs started (WFE_OP_CHILD): stage, attempt, fence */
	int			nchildren,
				capchildren;
	sh_map	   *maps;			/* per stage: a map's elements (n 0 for other stages) */
	int			cur_map;		/* while an element's row is swapped into rows[cur_map]: */
	int64_t		cur_elem;		/* its index, else -1 */
	sh_op	   *ops;			/* the last step's ops */
	int			nops,
				capops;
	char	  **garbage;		/* replaced strings, freed after the step */
	int			ngarbage,
				capgarbage;

	int			steps;			/* events checked */
	int			check_liveness;
	int			violations;
	sh_violation_fn violation;
	void	   *arg;

	wfe_step	st;
	wfe_run		view;			/* the run as the core sees it in a step */
	wfe_step_io io;
};

/* ---------------------------------------------------------------------
 * Small things
 * --------------------------------------------------------------------- */

static void *
sh_realloc(void *p, size_t n)
{
	void	   *q = realloc(p, n ? n : 1);

	if (q == NULL)
		abort();
	return q;
}

static char *
sh_strdup(const char *s)
{
	char	   *d;

	if (s == NULL)
		return NULL;
	d = strdup(s);
	if (d == NULL)
		abort();
	return d;
}

/* Grow a dynamic array by one zeroed element; return it. */
#define SH_PUSH(arr, n, cap) \
	(((n) == (cap) ? ((cap) = (cap) ? (cap) * 2 : 16, \
					  (arr) = sh_realloc((arr), sizeof(*(arr)) * (size_t) (cap))) : 0), \
	 memset(&(arr)[(n)], 0, sizeof(*(arr))), &(arr)[(n)++])

static void
sh_violate(sh *h, const char *fmt,...) __attribute__((format(printf, 2, 3)));

static void
sh_violate(sh *h, const char *fmt,...)
{
	char		msg[1024];
	va_list		ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	h->violations++;
	if (h->violation)
		h->violation(h, msg);
}

/* Replace a string field; the old value lives until the step ends. */
static void
sh_set(sh *h, char **field, const char *value)
{
	if (*field)
		*SH_PUSH(h->garbage, h->ngarbage, h->capgarbage) = *field;
	*field = sh_strdup(value);
}

static void
sh_collect(sh *h)
{
	for (int i = 0; i < h->ngarbage; i++)
		free(h->garbage[i]);
	h->ngarbage = 0;
}

/* Parse JSON text (a bare scalar needs a blank after it, as in step.c). */
SH_FN json_object *
sh_parse(const char *text)
{
	char	   *padded;
	json_object *o;

	if (text == NULL)
		return NULL;
	padded = sh_realloc(NULL, strlen(text) + 2);
	sprintf(padded, "%s ", text);
	o = wfe_json_parse(padded);
	free(padded);
	return o;
}

/* Do two JSON texts hold equal values (jsonb's =)?  NULL equals nothing. */
SH_FN int
sh_json_equal(const char *a, const char *b)
{
	json_object *x,
			   *y;
	char	   *cx,
			   *cy;
	int			eq;

	if (a == NULL || b == NULL)
		return 0;
	x = sh_parse(a);
	y = sh_parse(b);
	cx = wfe_canonical_json(x);
	cy = wfe_canonical_json(y);
	eq = cx && cy && strcmp(cx, cy) == 0;
	free(cx);
	free(cy);
	json_object_put(x);
	json_object_put(y);
	return eq;
}

static const char *
sh_sname(const sh *h, int i)
{
	static char buf[160];

	if (i >= 0 && i == h->cur_map && h->cur_elem >= 0)
	{
		snprintf(buf, sizeof(buf), "%s[%lld]", h->rp->stages[i].name, (long long) h->cur_elem);
		return buf;
	}
	return i >= 0 && i < h->nst ? h->rp->stages[i].name : "(none)";
}

/*
 * Swap element e's row of map stage i into rows[i] (and back): the
 * writes, checks and SQL transitions then apply to the element's row as
 * they do to a stage's, as engine.c and map.c write an element's row
 * like any stage row.
 */
static void
sh_elem_swap(sh *h, int i, int64_t e)
{
	sh_row		t = h->rows[i];

	h->rows[i] = h->maps[i].elems[e];
	h->maps[i].elems[e] = t;
}

static void
sh_elem_enter(sh *h, int i, int64_t e)
{
	sh_elem_swap(h, i, e);
	h->cur_map = i;
	h->cur_elem = e;
}

static void
sh_elem_leave(sh *h)
{
	if (h->cur_elem < 0)
		return;
	sh_elem_swap(h, h->cur_map, h->cur_elem);
	h->cur_map = -1;
	h->cur_elem = -1;
}

/* The row of stage i, or of its element elem (>= 0). */
static sh_row *
sh_rowp(sh *h, int i, int64_t elem)
{
	return elem >= 0 ? &h->maps[i].elems[elem] : &h->rows[i];
}

SH_FN int
sh_stage(const sh *h, const char *name)
{
	return wfe_run_plan_find(h->rp, name);
}

/* A string member of plan stage i (stages, then finalisers), or NULL. */
static const char *
sh_plan_str(const sh *h, int i, const char *key)
{
	json_object *list,
			   *o,
			   *v;
	int			fin = i >= h->rp->first_finaliser;

	if (!json_object_object_get_ex(h->rp->plan, fin ? "finalisers" : "stages", &list))
		return NULL;
	o = json_object_array_get_idx(list, fin ? i - h->rp->first_finaliser : i);
	if (o && json_object_object_get_ex(o, key, &v) && json_object_is_type(v, json_type_string))
		return json_object_get_string(v);
	return NULL;
}

/* Compile YAML and build its run plan, or NULL (diagnostics on stderr). */
static void
sh_fake_sha256(const unsigned char *data, size_t len, unsigned char out[32])
{
	/* the digest plays no part in running a plan */
	memset(out, 0, 32);
	for (size_t i = 0; i < len; i++)
		out[i % 32] = (unsigned char) (out[i % 32] * 31 + data[i]);
}

/* The oldest buffered signal named name with an id above after (q_buffered). */
static const char *
sh_io_buffered_signal(void *arg, const char *name, int64_t after, int64_t *id)
{
	sh		   *h = arg;

	for (int k = 0; k < h->nsignals; k++)
		if (h->signals[k].taken_by < 0 && h->signals[k].id > after &&
			strcmp(h->signals[k].name, name) == 0)
		{
			*id = h->signals[k].id;
			return h->signals[k].payload;
		}
	return NULL;
}

static int64_t
sh_io_now_us(void *arg)
{
	return ((sh *) arg)->now_us;
}

static const char *sh_io_stage_input(void *arg, int i);

/* A workflow stage's child as the server resolves it. */
static void
sh_io_child(void *arg, int i, wfe_child *c)
{
	sh		   *h = arg;

	(void) i;
	c->version = h->child_version;
	c->depth = h->child_depth;
	c->max_depth = h->max_depth;
}

/* wfe.max_map_items as the harness runs it (its plans' maps bind few items) */
static int64_t
sh_io_max_map_items(void *arg)
{
	(void) arg;
	return 10000;
}

SH_FN wfe_run_plan *
sh_plan(const char *yaml, int64_t definition_id)
{
	wfe_compile_options opts;
	wfe_compile_result *res;
	wfe_run_plan *rp = NULL;
	char		err[256];

	wfe_compile_options_init(&opts);
	opts.sha256 = sh_fake_sha256;
	res = wfe_compile(yaml, strlen(yaml), &opts);
	if (res->ok)
	{
		rp = wfe_run_plan_build(definition_id, res->plan_text, err, sizeof(err));
		if (rp == NULL)
			fprintf(stderr, "step harness: run plan: %s\n", err);
	}
	else
		fprintf(stderr, "step harness: the workflow does not compile: %s\n",
				json_object_to_json_string(res->diagnostics));
	wfe_compile_result_free(res);
	return rp;
}

/* ---------------------------------------------------------------------
 * The I/O hooks: the database as engine.c reads it
 * --------------------------------------------------------------------- */

static void
sh_io_load(void *arg, int i, wfe_row *row)
{
	sh		   *h = arg;
	sh_row	   *r;

	if (i < 0 || i >= h->nst)
	{
		sh_violate(h, "the core loads stage %d of %d", i, h->nst);
		row->exists = 0;
		return;
	}
	r = &h->rows[i];
	row->exists = 1;
	row->state = r->state;
	row->attempt = r->attempt;
	row->fence = r->fence;
	row->outcome = r->outcome;
	row->branch = r->branch;
	row->awaits = r->awaits;
	row->has_handler = r->has_handler;
	row->queue = r->queue;
	row->arrivals = r->arrivals;
	row->cache_key = r->cache_key;
}

static const char *
sh_io_result(void *arg, int i)
{
	sh		   *h = arg;

	if (i < 0 || i >= h->nst)
	{
		sh_violate(h, "the core reads the result of stage %d of %d", i, h->nst);
		return NULL;
	}
	return h->rows[i].result;
}

static const char *
sh_io_context(void *arg)
{
	sh		   *h = arg;

	return h->context ? h->context : "{}";
}

static const char *
sh_io_output(void *arg, const char *task, const char *key)
{
	sh		   *h = arg;
	int			t = task ? wfe_run_plan_find(h->rp, task) : -1;

	for (int k = 0; k < h->noutputs; k++)
		if (h->outputs[k].task == t && strcmp(h->outputs[k].key, key) == 0)
			return h->outputs[k].value;
	return NULL;
}

static const char *
sh_io_stage_input(void *arg, int i)
{
	sh		   *h = arg;

	if (i == h->st.elem_map && h->st.elem >= 0 && h->st.elem < h->maps[i].n)
		return h->maps[i].elems[h->st.elem].input;
	return h->rows[i].input;
}

/* An element's row (q_element): exists only for an index the map has. */
static void
sh_io_load_element(void *arg, int i, int64_t elem, wfe_row *row)
{
	sh		   *h = arg;
	sh_row	   *r;

	memset(row, 0, sizeof(*row));
	if (i < 0 || i >= h->nst || h->rp->stages[i].kind != WFE_K_MAP)
	{
		sh_violate(h, "the core loads element %lld of stage %d, no map", (long long) elem, i);
		return;
	}
	if (elem < 0 || elem >= h->maps[i].n)
		return;
	r = &h->maps[i].elems[elem];
	row->exists = 1;
	row->state = r->state;
	row->attempt = r->attempt;
	row->fence = r->fence;
	row->outcome = r->outcome;
	row->branch = r->branch;
	row->awaits = r->awaits;
	row->has_handler = r->has_handler;
	row->queue = r->queue;
	row->cache_key = r->cache_key;
}

/* The map's counter row (q_counts): all 0 when there is none. */
static void
sh_io_map_counts(void *arg, int i, wfe_map_counts *c)
{
	*c = ((sh *) arg)->maps[i].counts;
}

/* The cancelled elements, ascending (q_cancelled). */
static int64_t
sh_io_map_cancelled(void *arg, int i, int64_t *out, int64_t max)
{
	sh		   *h = arg;
	int64_t		n = 0;

	for (int64_t e = 0; e < h->maps[i].n && n < max; e++)
		if (h->maps[i].elems[e].state == WFE_CANCELLED)
			out[n++] = e;
	return n;
}

/* The lowest held element: waiting below the released ones (q_held). */
static int64_t
sh_io_map_held(void *arg, int i, int64_t below)
{
	sh		   *h = arg;

	for (int64_t e = 0; e < h->maps[i].n && e < below; e++)
		if (h->maps[i].elems[e].state == WFE_WAITING || h->maps[i].elems[e].state == WFE_CANCELLED)
			return e;
	return -1;
}

/*
 * The one aggregation (q_results): element order, the failed ones null
 * and listed; elem ends now with elem_result.  Once per map attempt.
 */
static const char *
sh_io_map_results(void *arg, int i, int64_t elem, const char *elem_result)
{
	sh		   *h = arg;
	sh_map	   *m = &h->maps[i];
	json_object *items = json_object_new_array();
	json_object *failed = json_object_new_array();
	json_object *o = json_object_new_object();
	char	   *text;

	if (m->agg_attempt == h->rows[i].attempt)
		sh_violate(h, "%s: aggregated twice in attempt %d", sh_sname(h, i), h->rows[i].attempt);
	m->agg_attempt = h->rows[i].attempt;
	for (int64_t k = 0; k < m->n; k++)
	{
		const char *r = k == elem ? elem_result :
			m->elems[k].state == WFE_COMPLETED ? (m->elems[k].result ? m->elems[k].result : "{}") : NULL;
		json_object *v = r ? sh_parse(r) : NULL;

		if (r == NULL)
			json_object_array_add(failed, json_object_new_int64(k));
		json_object_array_add(items, v);
	}
	json_object_object_add(o, "items", items);
	json_object_object_add(o, "failed", failed);
	text = sh_strdup(json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN));
	json_object_put(o);
	*SH_PUSH(h->garbage, h->ngarbage, h->capgarbage) = text;	/* lives until the step ends */
	return text;
}

static struct json_object *
sh_io_input_schema(void *arg, int i)
{
	sh		   *h = arg;

	if (i < 0 || i >= h->nst)
	{
		sh_violate(h, "the core asks for the input schema of stage %d of %d", i, h->nst);
		return NULL;
	}
	return h->input_schema[i];
}

static double
sh_io_random(void *arg)
{
	sh		   *h = arg;

	return h->random;
}

static uint32_t
sh_io_fence_bits(void *arg)
{
	sh		   *h = arg;

	return h->fence_bits;
}

static struct json_object *
sh_io_output_schema(void *arg, int i)
{
	sh		   *h = arg;

	if (i < 0 || i >= h->nst)
	{
		sh_violate(h, "the core asks for the output schema of stage %d of %d", i, h->nst);
		return NULL;
	}
	return h->output_schema[i];
}

/* The harness's cache key: readable, and as input-sensitive as the real one. */
static char *
sh_cache_key(sh *h, int i, const char *input)
{
	const char *contract = h->rp->stages[i].contract ? h->rp->stages[i].contract : "?";
	char	   *key = sh_realloc(NULL, strlen(contract) + strlen(input) + 8);

	sprintf(key, "k:%s:%s", contract, input);
	return key;
}

static void
sh_io_cache_entry(void *arg, int i, const char *input, wfe_cache_entry *e)
{
	sh		   *h = arg;
	char	   *key;

	if (i < 0 || i >= h->nst || input == NULL)
	{
		sh_violate(h, "the core looks up stage %d of %d in the cache (input %s)", i, h->nst,
				   input ? input : "NULL");
		e->key = "k:?";
		return;
	}
	key = sh_cache_key(h, i, input);
	SH_PUSH(h->garbage, h->ngarbage, h->capgarbage)[0] = key;
	e->key = key;
	for (int k = 0; k < h->ncache; k++)
		if (strcmp(h->cache[k].key, key) == 0)
		{
			e->found = 1;
			e->digest_ok = h->cache[k].digest_ok;
			e->result = h->cache[k].result;
			e->origin = "{\"run_id\": 7, \"stage\": \"origin\", \"attempt\": 1}";
		}
}

/*
 * q_cache_leader: an attempt of another run under the key.  The harness
 * has one run, so there is none unless a test says so (h->foreign_leader).
 */
static const char *
sh_io_cache_leader(void *arg, const char *key)
{
	sh		   *h = arg;

	return h->foreign_leader && strcmp(h->foreign_leader, key) == 0
		? "{\"run_id\": 41, \"stage\": \"leader\", \"attempt\": 1}" : NULL;
}

/* Put an entry in the cache (digest_ok 0: a tampered one). */
SH_FN void
sh_cache_put(sh *h, const char *key, const char *result, int digest_ok)
{
	sh_cache   *c = SH_PUSH(h->cache, h->ncache, h->capcache);

	c->key = sh_strdup(key);
	c->result = sh_strdup(result);
	c->digest_ok = digest_ok;
}

/* ---------------------------------------------------------------------
 * A run: its rows as wfe.submit inserts them
 * --------------------------------------------------------------------- */

/*
 * Set up a run of rp: every stage (and finaliser) waiting, attempt 0,
 * fence 0; a worker's queue is its spec's, an action's and a finaliser's
 * its contract's (here: "actions" and "final"); awaits from the spec.
 * execution_context NULL takes the plan's default context.
 */
SH_FN void
sh_init(sh *h, const wfe_run_plan *rp, const char *context, const char *execution_context)
{
	json_object *v;

	memset(h, 0, sizeof(*h));
	h->rp = rp;
	h->nst = rp->nstages;
	h->rows = sh_realloc(NULL, sizeof(sh_row) * (size_t) (h->nst + 1));
	memset(h->rows, 0, sizeof(sh_row) * (size_t) (h->nst + 1));
	h->input_schema = sh_realloc(NULL, sizeof(json_object *) * (size_t) (h->nst + 1));
	h->output_schema = sh_realloc(NULL, sizeof(json_object *) * (size_t) (h->nst + 1));
	h->maps = sh_realloc(NULL, sizeof(sh_map) * (size_t) (h->nst + 1));
	memset(h->maps, 0, sizeof(sh_map) * (size_t) (h->nst + 1));
	h->cur_map = -1;
	h->cur_elem = -1;
	memset(h->input_schema, 0, sizeof(json_object *) * (size_t) (h->nst + 1));
	memset(h->output_schema, 0, sizeof(json_object *) * (size_t) (h->nst + 1));
	for (int i = 0; i < h->nst; i++)
	{
		const wfe_rp_stage *s = &rp->stages[i];
		sh_row	   *r = &h->rows[i];

		r->state = WFE_WAITING;
		r->branch = -1;
		r->awaits = s->awaits;
		if (s->kind == WFE_K_WORKER)
			r->queue = sh_strdup(sh_plan_str(h, i, "queue"));
		else if (s->kind == WFE_K_ACTION)
			r->queue = sh_strdup("actions");
		else if (s->kind == WFE_K_FINALISER)
			r->queue = sh_strdup("final");
	}
	h->context = sh_strdup(context ? context : "{}");
	if (execution_context)
		h->execution_context = sh_strdup(execution_context);
	else if (json_object_object_get_ex(rp->plan, "context", &v) &&
			 json_object_is_type(v, json_type_string))
		h->execution_context = sh_strdup(json_object_get_string(v));
	h->run.run_id = 42;
	h->run.tenant = "acme";
	h->run.workflow = json_object_object_get_ex(rp->plan, "name", &v) ? json_object_get_string(v) : "w";
	h->run.version = json_object_object_get_ex(rp->plan, "version", &v) ? json_object_get_string(v) : "1";
	h->run.execution_context = h->execution_context;
	h->run.intent = -1;
	h->run.state = WFE_RUN_RUNNING;
	h->run.finished = 0;
	h->check_liveness = 1;
	h->random = 0.5;
	h->child_version = "1";
	h->child_depth = 1;
	h->max_depth = 8;
}

/* An in-database action: a handler, no queue (wfe._run_handler runs it). */
SH_FN void
sh_set_handler(sh *h, int i)
{
	free(h->rows[i].queue);
	h->rows[i].queue = NULL;
	h->rows[i].has_handler = 1;
}

/* Give stage i's contract an input or output schema (JSON text; owned). */
SH_FN void
sh_set_schema(sh *h, int i, const char *input, const char *output)
{
	if (input)
	{
		json_object_put(h->input_schema[i]);
		h->input_schema[i] = sh_parse(input);
	}
	if (output)
	{
		json_object_put(h->output_schema[i]);
		h->output_schema[i] = sh_parse(output);
	}
}

static void
sh_free_row(sh_row *r)
{
	free(r->queue);
	free(r->input);
	free(r->result);
	free(r->error);
	free(r->skip_reason);
	free(r->claimed_by);
	free(r->arrivals);
	free(r->cache_key);
	free(r->rate_key);
	free(r->concurrency_key);
}

/* Drop map stage i's elements (and its counter row). */
static void
sh_free_elems(sh *h, int i)
{
	for (int64_t e = 0; e < h->maps[i].n; e++)
		sh_free_row(&h->maps[i].elems[e]);
	free(h->maps[i].elems);
	h->maps[i].elems = NULL;
	h->maps[i].n = 0;
}

static void
sh_free_ops(sh *h)
{
	for (int k = 0; k < h->nops; k++)
	{
		free(h->ops[k].text);
		free(h->ops[k].json);
		free(h->ops[k].json2);
	}
	h->nops = 0;
}

SH_FN void
sh_free(sh *h)
{
	wfe_step_end(&h->st);
	sh_elem_leave(h);
	for (int i = 0; i < h->nst; i++)
	{
		sh_free_row(&h->rows[i]);
		sh_free_elems(h, i);
		json_object_put(h->input_schema[i]);
		json_object_put(h->output_schema[i]);
	}
	free(h->rows);
	free(h->maps);
	free(h->input_schema);
	free(h->output_schema);
	for (int k = 0; k < h->nevents; k++)
	{
		free(h->events[k].type);
		free(h->events[k].detail);
	}
	free(h->events);
	free(h->timers);
	for (int k = 0; k < h->nsignals; k++)
	{
		free(h->signals[k].name);
		free(h->signals[k].payload);
	}
	free(h->signals);
	for (int k = 0; k < h->noutputs; k++)
	{
		free(h->outputs[k].key);
		free(h->outputs[k].value);
	}
	free(h->outputs);
	free(h->dead);
	free(h->cancels);
	for (int k = 0; k < h->ncache; k++)
	{
		free(h->cache[k].key);
		free(h->cache[k].result);
	}
	free(h->cache);
	free(h->wakes);
	free(h->children);
	sh_free_ops(h);
	free(h->ops);
	sh_collect(h);
	free(h->garbage);
	free(h->reason);
	free(h->context);
	free(h->execution_context);
	wfe_run_plan_free(h->owned_rp);
	memset(h, 0, sizeof(*h));
}

/* ---------------------------------------------------------------------
 * Writing: engine.c's apply()
 * --------------------------------------------------------------------- */

static void
sh_record_event(sh *h, int stage, int attempt, const char *type, const char *detail)
{
	sh_event   *e = SH_PUSH(h->events, h->nevents, h->capevents);

	e->stage = stage;
	e->attempt = attempt;
	e->type = sh_strdup(type ? type : "(null)");
	e->detail = sh_strdup(detail);
	e->fenced = 0;
	e->fence = 0;
	if (getenv("SH_TRACE"))		/* to read a fuzzer's crash: SH_TRACE=1 build/fuzz/fuzz_step crash-... */
		fprintf(stderr, "  event %s %s attempt %d %s\n", stage >= 0 ? sh_sname(h, stage) : "-",
				type ? type : "(null)", attempt, detail ? detail : "");
	if (type == NULL)
		sh_violate(h, "an event without a type");
}

/* The kind of rows[i] as wfe.run_stages has it (an element's: its item's executor). */
static const char *
sh_kind(const sh *h, int i)
{
	const wfe_rp_stage *s = &h->rp->stages[i];

	if (s->kind == WFE_K_MAP && i == h->cur_map)
		return s->item_workflow ? "workflow" : s->item_worker ? "worker" : "action";
	switch (s->kind)
	{
		case WFE_K_WAIT:
			return "wait";
		case WFE_K_SLEEP:
			return "sleep";
		case WFE_K_WORKFLOW:
			return "workflow";
		case WFE_K_MAP:
			return "map";
		default:
			return "worker";
	}
}

/* The stage trigger: refuse a transition the table does not list. */
static void
sh_move(sh *h, int i, wfe_state to, const char *by)
{
	sh_row	   *r = &h->rows[i];

	if (to < 0 || to >= WFE_NSTATES)
	{
		sh_violate(h, "%s: %s to state %d, which is no state", sh_sname(h, i), by, (int) to);
		return;
	}
	if (!wfe_stage_transition_legal(sh_kind(h, i), wfe_state_name(r->state), wfe_state_name(to)))
		sh_violate(h, "%s: illegal stage transition %s -> %s (%s)", sh_sname(h, i),
				   wfe_state_name(r->state), wfe_state_name(to), by);
	r->state = to;
}

/* The run trigger. */
static void
sh_run_move(sh *h, int to, const char *by)
{
	if (to < 0 || to >= WFE_NRUN_STATES)
	{
		sh_violate(h, "run: %s to state %d, which is no run state", by, to);
		return;
	}
	if (h->run.finished)
		sh_violate(h, "run: %s after the run finished (%s -> %s)", by,
				   wfe_run_state_name(h->run.state), wfe_run_state_name((wfe_run_state) to));
	if (!wfe_transition_legal(wfe_run_transition_table, wfe_run_state_name(h->run.state),
							  wfe_run_state_name((wfe_run_state) to)))
		sh_violate(h, "run: illegal run transition %s -> %s (%s)",
				   wfe_run_state_name(h->run.state), wfe_run_state_name((wfe_run_state) to), by);
	h->run.state = (wfe_run_state) to;
}

/*
 * A new fence from the core (from fence, or from 0 for a resolve): it must
 * be the next generation in the high half with io's random low half, so
 * fences only grow and cannot be guessed.
 */
static void
sh_new_fence(sh *h, int i, int64_t from, int64_t fence, const char *by)
{
	int64_t		want = (int64_t) (((((uint64_t) from) >> 32) + 1) << 32 | h->fence_bits);

	if (fence <= h->rows[i].fence)
		sh_violate(h, "%s: fence does not grow from %lld to %lld (%s)", sh_sname(h, i),
				   (long long) h->rows[i].fence, (long long) fence, by);
	if (fence != want)
		sh_violate(h, "%s: new fence %lld, not the next generation %lld (%s)", sh_sname(h, i),
				   (long long) fence, (long long) want, by);
	h->rows[i].fence = fence;
}

static void
sh_set_attempt(sh *h, int i, int attempt, const char *by)
{
	if (attempt < h->rows[i].attempt)
		sh_violate(h, "%s: attempt decreases from %d to %d (%s)", sh_sname(h, i),
				   h->rows[i].attempt, attempt, by);
	h->rows[i].attempt = attempt;
}

/* result (and the arrivals io_load reads from it) */
static void
sh_set_result(sh *h, int i, const char *json)
{
	json_object *o = sh_parse(json);
	json_object *a;

	sh_set(h, &h->rows[i].result, json);
	if (o && json_object_is_type(o, json_type_object) && json_object_object_get_ex(o, "arrivals", &a))
		sh_set(h, &h->rows[i].arrivals, json_object_to_json_string_ext(a, JSON_C_TO_STRING_SPACED));
	else
		sh_set(h, &h->rows[i].arrivals, NULL);
	json_object_put(o);
}

static int
sh_skip_reason_ok(const char *r)
{
	static const char *const ok[] = {"branch_not_taken", "dependency_failed", "context_gated",
	"missing_input", "run_aborted"};

	for (size_t k = 0; r && k < sizeof(ok) / sizeof(ok[0]); k++)
		if (strcmp(r, ok[k]) == 0)
			return 1;
	return 0;
}

/* wfe.outputs: the task's declared keys from the reported result, write-once */
static void
sh_write_outputs(sh *h, int i, const char *keys_json, const char *reported)
{
	json_object *keys = sh_parse(keys_json);
	json_object *result = sh_parse(reported ? reported : "{}");

	if (!json_object_is_type(keys, json_type_array))
		sh_violate(h, "%s: OUTPUTS op without a key list", sh_sname(h, i));
	for (size_t k = 0; keys && json_object_is_type(keys, json_type_array) &&
		 k < json_object_array_length(keys); k++)
	{
		const char *key = json_object_get_string(json_object_array_get_idx(keys, k));
		json_object *v;
		int			exists = 0;

		if (!json_object_is_type(result, json_type_object) ||
			!json_object_object_get_ex(result, key, &v))
		{
			/* wfe.outputs.value is NOT NULL: the insert would raise */
			sh_violate(h, "%s: output %s is not in the result", sh_sname(h, i), key);
			continue;
		}
		for (int m = 0; m < h->noutputs; m++)
			exists |= h->outputs[m].task == i && strcmp(h->outputs[m].key, key) == 0;
		if (!exists)
		{
			sh_output  *o = SH_PUSH(h->outputs, h->noutputs, h->capoutputs);

			o->task = i;
			o->key = sh_strdup(key);
			o->value = sh_strdup(v ? json_object_to_json_string_ext(v, JSON_C_TO_STRING_PLAIN) : "null");
		}
	}
	json_object_put(keys);
	json_object_put(result);
}

static int	sh_in_flight(wfe_state s);

/*
 * MAP_START (map.c's q_release): the map's row runs (attempt, fence), one
 * waiting row per bound input, and the counter row.
 */
static void
sh_map_start(sh *h, int i, const wfe_op *op)
{
	const wfe_rp_stage *s = &h->rp->stages[i];
	json_object *in = sh_parse(op->json);
	sh_map	   *m = &h->maps[i];

	if (s->kind != WFE_K_MAP || op->elem >= 0 || !json_object_is_type(in, json_type_array))
	{
		sh_violate(h, "%s: MAP_START on a %s stage, element %lld, inputs %s", sh_sname(h, i),
				   s->kind == WFE_K_MAP ? "map" : "non-map", (long long) op->elem, op->json ? op->json : "NULL");
		json_object_put(in);
		return;
	}
	sh_move(h, i, WFE_RUNNING, "map start");
	sh_set_attempt(h, i, op->attempt, "map start");
	sh_new_fence(h, i, h->rows[i].fence, op->fence, "map start");
	h->rows[i].outcome = 0;
	sh_set(h, &h->rows[i].error, NULL);
	sh_free_elems(h, i);
	m->n = (int64_t) json_object_array_length(in);
	m->elems = sh_realloc(NULL, sizeof(sh_row) * (size_t) (m->n + 1));
	memset(m->elems, 0, sizeof(sh_row) * (size_t) (m->n + 1));
	for (int64_t e = 0; e < m->n; e++)
	{
		sh_row	   *r = &m->elems[e];

		r->state = WFE_WAITING;
		r->branch = -1;
		r->awaits = 1;
		r->queue = s->item_worker ? sh_strdup(s->item_queue) : NULL;
		r->input = sh_strdup(json_object_to_json_string_ext(json_object_array_get_idx(in, e),
															JSON_C_TO_STRING_PLAIN));
	}
	m->counts = op->counts;
	m->agg_attempt = 0;
	if (op->counts.total != m->n)
		sh_violate(h, "%s: MAP_START binds %lld inputs, counts %lld", sh_sname(h, i), (long long) m->n,
				   (long long) op->counts.total);
	/* an item's concurrency: one bound key per element (a string each), with the item's max */
	if ((s->concurrency_key != NULL) != (op->concurrency_key != NULL))
		sh_violate(h, "%s: MAP_START with%s concurrency keys for an item with%s concurrency", sh_sname(h, i),
				   op->concurrency_key ? "" : "out", s->concurrency_key ? "" : "out");
	else if (op->concurrency_key != NULL)
	{
		json_object *keys = sh_parse(op->concurrency_key);
		int			bad = !json_object_is_type(keys, json_type_array) ||
			(int64_t) json_object_array_length(keys) != m->n || op->concurrency_max != s->concurrency_max;

		for (int64_t e = 0; !bad && e < m->n; e++)
			bad = !json_object_is_type(json_object_array_get_idx(keys, e), json_type_string);
		if (bad)
			sh_violate(h, "%s: MAP_START concurrency keys %s (max %d) for %lld elements", sh_sname(h, i),
					   op->concurrency_key, op->concurrency_max, (long long) m->n);
		json_object_put(keys);
	}
	json_object_put(in);
}

/* Write the step's effects in order; reported is the callback's value. */
static void
sh_apply(sh *h, const char *reported)
{
	wfe_step   *st = &h->st;

	sh_free_ops(h);
	h->mark = h->nevents;
	for (int k = 0; k < st->nops; k++)
	{
		const wfe_op *op = &st->ops[k];
		sh_op	   *c = SH_PUSH(h->ops, h->nops, h->capops);
		int			i = op->stage;
		sh_row	   *r;

		c->kind = op->kind;
		c->stage = op->stage;
		c->state = op->state;
		c->attempt = op->attempt;
		c->fence = op->fence;
		c->flag = op->flag;
		c->branch = op->branch;
		c->delay_us = op->delay_us;
		c->text = sh_strdup(op->text);
		c->json = sh_strdup(op->json);
		c->json2 = sh_strdup(op->json2);

		if (i < -1 || i >= h->nst)
		{
			sh_violate(h, "op %d (kind %d) names stage %d of %d", k, (int) op->kind, i, h->nst);
			continue;
		}
		if (i < 0 && op->kind != WFE_OP_EVENT && op->kind != WFE_OP_INTENT &&
			op->kind != WFE_OP_FINALISING && op->kind != WFE_OP_FINISH && op->kind != WFE_OP_REOPEN)
		{
			sh_violate(h, "op %d (kind %d) needs a stage and has none", k, (int) op->kind);
			continue;
		}
		/* an event may name an element that does not exist (callback.unknown): it writes no row */
		if (op->elem >= 0 && op->kind != WFE_OP_MAP_START && op->kind != WFE_OP_MAP_COUNTS &&
			op->kind != WFE_OP_MAP_CANCEL && op->kind != WFE_OP_EVENT)
		{
			if (h->rp->stages[i].kind != WFE_K_MAP || op->elem >= h->maps[i].n)
			{
				sh_violate(h, "op %d (kind %d) names element %lld of %s, which has %lld", k, (int) op->kind,
						   (long long) op->elem, sh_sname(h, i), (long long) h->maps[i].n);
				continue;
			}
			sh_elem_enter(h, i, op->elem);
		}
		r = i >= 0 ? &h->rows[i] : NULL;
		if (op->branch < WFE_KEEP_BRANCH || op->branch >= h->nst)
			sh_violate(h, "op %d (kind %d) names branch %d of %d", k, (int) op->kind, op->branch, h->nst);
		switch (op->kind)
		{
			case WFE_OP_EVENT:
				sh_record_event(h, i, op->attempt, op->text, op->json);
				h->events[h->nevents - 1].fenced = op->flag;
				h->events[h->nevents - 1].fence = op->fence;
				/* fences are capabilities: the detail, which readers see, never has one */
				if (op->json && strstr(op->json, "fence\"") != NULL)
					sh_violate(h, "event %s carries a fence in its detail: %s", op->text, op->json);
				break;
			case WFE_OP_ENQUEUE:
				sh_move(h, i, WFE_QUEUED, "enqueue");
				sh_set_attempt(h, i, r->attempt + (op->flag ? 1 : 0), "enqueue");
				sh_new_fence(h, i, r->fence, op->fence, "enqueue");
				if (op->json)
					sh_set(h, &r->input, op->json);
				if (op->text)
					sh_set(h, &r->cache_key, op->text);
				/*
				 * Flow-control keys (dsl.md "Flow-control keys"): bound at a release,
				 * NULL keeps the row's.  A keyed stage must never be queued without
				 * its key -- the server would then claim it past its bucket or slots
				 * -- and a stage without one must never get one.
				 */
				if (op->json2)
					sh_set(h, &r->rate_key, op->json2);
				if (op->concurrency_key)
					sh_set(h, &r->concurrency_key, op->concurrency_key);
				if (op->elem < 0 &&
					((h->rp->stages[i].rate_key != NULL) != (r->rate_key != NULL) ||
					 (h->rp->stages[i].concurrency_key != NULL) != (r->concurrency_key != NULL) ||
					 (op->concurrency_key != NULL && op->concurrency_max != h->rp->stages[i].concurrency_max)))
					sh_violate(h, "%s: queued with rate key %s and concurrency key %s (max %d) for a stage"
							   " with%s rate_limit.key and with%s concurrency", sh_sname(h, i),
							   r->rate_key ? r->rate_key : "(none)",
							   r->concurrency_key ? r->concurrency_key : "(none)", op->concurrency_max,
							   h->rp->stages[i].rate_key ? "" : "out",
							   h->rp->stages[i].concurrency_key ? "" : "out");
				r->outcome = 0;
				sh_set(h, &r->error, NULL);
				sh_set(h, &r->claimed_by, NULL);
				if (op->attempt != r->attempt || op->fence != r->fence)
					sh_violate(h, "%s: ENQUEUE says attempt %d fence %lld, the row has %d and %lld",
							   sh_sname(h, i), op->attempt, (long long) op->fence, r->attempt,
							   (long long) r->fence);
				break;
			case WFE_OP_RESOLVE:
				if (op->state != WFE_COMPLETED && op->state != WFE_FAILED)
					sh_violate(h, "%s: resolved to %s, not an outcome", sh_sname(h, i),
							   wfe_state_name((wfe_state) op->state));
				sh_move(h, i, (wfe_state) op->state, "resolve");
				sh_set_attempt(h, i, 1, "resolve");
				sh_new_fence(h, i, r->fence, op->fence, "resolve");
				r->outcome = op->state;
				sh_set_result(h, i, op->json);
				sh_set(h, &r->error, op->json2);
				if (op->branch != WFE_KEEP_BRANCH)
					r->branch = op->branch;
				break;
			case WFE_OP_BIND_FAILED:
				if (op->json == NULL)
					sh_violate(h, "%s: BIND_FAILED without an error", sh_sname(h, i));
				sh_move(h, i, WFE_FAILED, "binding failed");
				sh_set_attempt(h, i, op->attempt, "binding failed");
				if (op->attempt != r->attempt || op->attempt < 1)
					sh_violate(h, "%s: BIND_FAILED says attempt %d, the row has %d", sh_sname(h, i), op->attempt,
							   r->attempt);
				sh_new_fence(h, i, r->fence, op->fence, "binding failed");
				r->outcome = WFE_FAILED;
				sh_set(h, &r->error, op->json);
				break;
			case WFE_OP_COMPLETE:
				sh_move(h, i, WFE_COMPLETED, "complete");
				r->outcome = WFE_COMPLETED;
				sh_set_result(h, i, op->json ? op->json : reported ? reported : "{}");
				sh_set(h, &r->error, NULL);
				break;
			case WFE_OP_RETRY:
				{
					sh_timer   *t;

					sh_move(h, i, WFE_RETRY_SCHEDULED, "retry");
					r->outcome = WFE_FAILED;
					sh_set(h, &r->error, op->json ? op->json : "{}");
					t = SH_PUSH(h->timers, h->ntimers, h->captimers);
					t->stage = i;
					t->elem1 = h->cur_elem + 1;
					t->attempt = r->attempt;	/* RETURNING st.attempt, st.fence */
					t->fence = r->fence;
					t->delay_us = op->delay_us;
					if (op->attempt != r->attempt || op->fence != r->fence)
						sh_violate(h, "%s: RETRY says attempt %d fence %lld, the row has %d and %lld",
								   sh_sname(h, i), op->attempt, (long long) op->fence, r->attempt,
								   (long long) r->fence);
					if (op->delay_us < 0)
						sh_violate(h, "%s: negative retry delay", sh_sname(h, i));
				}
				break;
			case WFE_OP_FAIL:
				if (op->state != WFE_FAILED && op->state != WFE_TIMED_OUT)
					sh_violate(h, "%s: FAIL to %s", sh_sname(h, i), wfe_state_name((wfe_state) op->state));
				sh_move(h, i, (wfe_state) op->state, "fail");
				r->outcome = WFE_FAILED;
				sh_set(h, &r->error, op->json ? op->json : "{}");
				if (op->flag)
				{
					sh_mark    *d = SH_PUSH(h->dead, h->ndead, h->capdead);

					d->stage = i;
					d->attempt = op->attempt;
					d->fence = r->fence;
				}
				break;
			case WFE_OP_TIME_OUT:
				sh_move(h, i, WFE_TIMED_OUT, "time out");
				sh_new_fence(h, i, r->fence, op->fence, "time out");
				break;
			case WFE_OP_SKIP:
				if (!sh_skip_reason_ok(op->text))
					sh_violate(h, "%s: skip reason %s is not allowed", sh_sname(h, i),
							   op->text ? op->text : "(null)");
				sh_move(h, i, WFE_SKIPPED, "skip");
				sh_set(h, &r->skip_reason, op->text);
				break;
			case WFE_OP_CANCEL:
				if (op->json == NULL)
					sh_violate(h, "%s: CANCEL without an error", sh_sname(h, i));
				sh_move(h, i, WFE_CANCELLED, "cancel");
				if (op->prev_fence != r->fence)
					sh_violate(h, "%s: CANCEL names fence %lld as cancelled, the row had %lld",
							   sh_sname(h, i), (long long) op->prev_fence, (long long) r->fence);
				sh_new_fence(h, i, r->fence, op->fence, "cancel");
				sh_set(h, &r->error, op->json);
				if (op->attempt != r->attempt || op->fence != r->fence)
					sh_violate(h, "%s: CANCEL says attempt %d fence %lld, the row has %d and %lld",
							   sh_sname(h, i), op->attempt, (long long) op->fence, r->attempt,
							   (long long) r->fence);
				if (op->flag && r->queue != NULL)
				{
					sh_mark    *m = SH_PUSH(h->cancels, h->ncancels, h->capcancels);

					m->stage = i;
					m->attempt = op->attempt;
					m->fence = op->prev_fence;	/* the message names the fenced attempt */
				}
				break;
			case WFE_OP_BRANCH:
				r->branch = op->branch;
				break;
			case WFE_OP_ARRIVALS:
				if (op->json == NULL)
					sh_violate(h, "%s: ARRIVALS without arrivals", sh_sname(h, i));
				sh_set_result(h, i, op->json);
				break;
			case WFE_OP_OUTPUTS:
				sh_write_outputs(h, i, op->json, op->json2 ? op->json2 : reported);
				break;
			case WFE_OP_ACCEPT:
				sh_move(h, i, WFE_RUNNING, "accept");
				sh_set(h, &r->claimed_by, op->text ? op->text : "");
				break;
			case WFE_OP_HEARTBEAT:
				break;
			case WFE_OP_PARK:
				sh_move(h, i, WFE_RUNNING, "park");
				sh_set_attempt(h, i, op->attempt, "park");
				sh_new_fence(h, i, r->fence, op->fence, "park");
				if (op->json)
					sh_set(h, &r->input, op->json);
				r->outcome = 0;
				sh_set(h, &r->error, NULL);
				if (r->queue != NULL)
					sh_violate(h, "%s: parked with a queue", sh_sname(h, i));
				if (op->delay_us >= 0 && op->text != NULL)
				{
					sh_timer   *t = SH_PUSH(h->timers, h->ntimers, h->captimers);

					t->stage = i;
					t->elem1 = h->cur_elem + 1;
					t->attempt = op->attempt;
					t->fence = op->fence;
					t->delay_us = op->delay_us;
					t->kind = op->text[0] == 'w' ? 'w' : 's';
				}
				break;
			case WFE_OP_SIGNAL_TAKEN:
				for (int k = 0; k < h->nsignals; k++)
					if (h->signals[k].id == op->delay_us)
					{
						if (h->signals[k].taken_by >= 0)
							sh_violate(h, "%s: signal %lld taken twice", sh_sname(h, i), (long long) op->delay_us);
						h->signals[k].taken_by = i;
					}
				break;
			case WFE_OP_INTENT:
				if (h->run.intent >= 0)
					sh_violate(h, "run: intent %s set over intent %s",
							   wfe_run_state_name((wfe_run_state) op->state),
							   wfe_run_state_name((wfe_run_state) h->run.intent));
				if (op->state != WFE_RUN_COMPLETED && op->state != WFE_RUN_FAILED &&
					op->state != WFE_RUN_CANCELLED)
					sh_violate(h, "run: intent %d is not terminal", op->state);
				h->run.intent = op->state;
				sh_set(h, &h->reason, op->text);
				/* q_retire_timers: a detached task's go on after a completed intent */
				for (int t = 0; t < h->ntimers; t++)
					if (!h->timers[t].fired &&
						!(op->state == WFE_RUN_COMPLETED && !h->rows[h->timers[t].stage].awaits))
						h->timers[t].fired = 1;
				break;
			case WFE_OP_FINALISING:
				if (h->run.state == WFE_RUN_RUNNING)
					sh_run_move(h, WFE_RUN_FINALISING, "finalising");
				break;
			case WFE_OP_FINISH:
				if (h->finishes++ > 0)
					sh_violate(h, "run: finishes a second time, as %s",
							   wfe_run_state_name((wfe_run_state) op->state));
				if (h->run.intent < 0)
					sh_violate(h, "run: finishes without an intent");
				sh_run_move(h, op->state, "finish");
				h->run.finished = 1;
				if (op->text)
					sh_set(h, &h->reason, op->text);
				break;
			case WFE_OP_REOPEN:
				/* q_reopen: only a failed run, and the run trigger's failed -> running */
				if (!h->run.finished || h->run.state != WFE_RUN_FAILED)
					sh_violate(h, "run: reopened while %s%s", wfe_run_state_name(h->run.state),
							   h->run.finished ? "" : " (not finished)");
				if (!wfe_transition_legal(wfe_run_transition_table, wfe_run_state_name(h->run.state),
										  "running"))
					sh_violate(h, "run: illegal run transition %s -> running (reopen)",
							   wfe_run_state_name(h->run.state));
				h->run.state = WFE_RUN_RUNNING;
				h->run.intent = -1;
				h->run.finished = 0;
				h->finishes = 0;
				sh_set(h, &h->reason, NULL);
				break;
			case WFE_OP_CACHE_HIT:
				if (op->text == NULL || op->json == NULL || op->json2 == NULL)
					sh_violate(h, "%s: CACHE_HIT without a key, result or input", sh_sname(h, i));
				sh_move(h, i, WFE_COMPLETED, "cache hit");
				sh_new_fence(h, i, r->fence, op->fence, "cache hit");
				r->outcome = WFE_COMPLETED;
				sh_set_result(h, i, op->json);
				sh_set(h, &r->input, op->json2);
				sh_set(h, &r->cache_key, op->text);
				break;
			case WFE_OP_CACHE_WAIT:
				if (r->state != WFE_WAITING || op->text == NULL || op->json == NULL)
					sh_violate(h, "%s: CACHE_WAIT while %s (key %s)", sh_sname(h, i),
							   wfe_state_name(r->state), op->text ? op->text : "NULL");
				sh_set(h, &r->cache_key, op->text);
				sh_set(h, &r->input, op->json);
				break;
			case WFE_OP_CACHE_STORE:
				if (r->state != WFE_COMPLETED || r->cache_key == NULL || op->text == NULL ||
					strcmp(op->text, r->cache_key) != 0)
					sh_violate(h, "%s: CACHE_STORE while %s under key %s", sh_sname(h, i),
							   wfe_state_name(r->state), op->text ? op->text : "NULL");
				else
					sh_cache_put(h, op->text, r->result ? r->result : "{}", 1);
				break;
			case WFE_OP_CACHE_WAKE:
				if (op->text == NULL)
					sh_violate(h, "%s: CACHE_WAKE without a key", sh_sname(h, i));
				for (int w = 0; op->text && w < h->nst; w++)
					if (w != i && h->rows[w].state == WFE_WAITING && h->rows[w].cache_key &&
						strcmp(h->rows[w].cache_key, op->text) == 0)
					{
						sh_mark    *m = SH_PUSH(h->wakes, h->nwakes, h->capwakes);

						m->stage = w;
					}
				break;
			case WFE_OP_RESET:
				sh_set(h, &r->cache_key, NULL);
				sh_move(h, i, WFE_WAITING, "reset");
				r->outcome = 0;
				sh_set_result(h, i, op->json);
				sh_set(h, &r->error, NULL);
				sh_set(h, &r->skip_reason, NULL);
				sh_set(h, &r->claimed_by, NULL);
				break;
			case WFE_OP_FENCE:
				if (op->prev_fence != r->fence)
					sh_violate(h, "%s: FENCE names fence %lld as fenced, the row had %lld",
							   sh_sname(h, i), (long long) op->prev_fence, (long long) r->fence);
				sh_new_fence(h, i, r->fence, op->fence, "fence");
				if (op->attempt != r->attempt || op->fence != r->fence)
					sh_violate(h, "%s: FENCE says attempt %d fence %lld, the row has %d and %lld",
							   sh_sname(h, i), op->attempt, (long long) op->fence, r->attempt,
							   (long long) r->fence);
				if (op->flag && r->queue != NULL)
				{
					sh_mark    *m = SH_PUSH(h->cancels, h->ncancels, h->capcancels);

					m->stage = i;
					m->elem1 = h->cur_elem + 1;
					m->attempt = op->attempt;
					m->fence = op->prev_fence;
				}
				break;
			case WFE_OP_CHILD:
				/* engine.c starts a child run for the attempt it parked */
				if ((h->rp->stages[i].kind != WFE_K_WORKFLOW && !(i == h->cur_map && h->rp->stages[i].item_workflow)) ||
					r->state != WFE_RUNNING ||
					op->attempt != r->attempt || op->fence != r->fence || op->text == NULL ||
					op->json == NULL || op->json2 == NULL)
					sh_violate(h, "%s: CHILD for attempt %d while %s (attempt %d)", sh_sname(h, i),
							   op->attempt, wfe_state_name(r->state), r->attempt);
				else
				{
					sh_mark    *m = SH_PUSH(h->children, h->nchildren, h->capchildren);

					m->stage = i;
					m->elem1 = h->cur_elem + 1;
					m->attempt = op->attempt;
					m->fence = op->fence;
				}
				break;
			case WFE_OP_MAP_START:
				sh_map_start(h, i, op);
				break;
			case WFE_OP_MAP_COUNTS:
				if (h->maps[i].n == 0 && op->counts.total > 0)
					sh_violate(h, "%s: MAP_COUNTS for a map without elements", sh_sname(h, i));
				h->maps[i].counts = op->counts;
				break;
			case WFE_OP_MAP_CANCEL:
				if (op->json == NULL)
					sh_violate(h, "%s: MAP_CANCEL without an error", sh_sname(h, i));
				for (int64_t e = 0; e < h->maps[i].n; e++)
				{
					wfe_state	es = h->maps[i].elems[e].state;

					if (es == WFE_WAITING || sh_in_flight(es))
					{
						int64_t		asked;

						sh_elem_enter(h, i, e);
						asked = h->rows[i].fence;
						sh_move(h, i, WFE_CANCELLED, "map cancel");
						h->rows[i].fence += (int64_t) 1 << 32;	/* q_cancel_elements: the next generation */
						sh_set(h, &h->rows[i].error, op->json);
						/* an element that had an attempt: its stage.cancelled, naming the fence asked to stop */
						if (es != WFE_WAITING)
						{
							sh_record_event(h, i, h->rows[i].attempt, "stage.cancelled", NULL);
							h->events[h->nevents - 1].fenced = 1;
							h->events[h->nevents - 1].fence = asked;
						}
						/* its pushed worker is asked to stop (a queue's delivery mode is no core matter) */
						if ((es == WFE_DISPATCHED || es == WFE_RUNNING) && h->rows[i].queue != NULL)
						{
							sh_mark    *m = SH_PUSH(h->cancels, h->ncancels, h->capcancels);

							m->stage = i;
							m->elem1 = e + 1;
							m->attempt = h->rows[i].attempt;
							m->fence = asked;
						}
						sh_elem_leave(h);
					}
				}
				break;
			default:
				sh_violate(h, "op %d has kind %d, which is no op", k, (int) op->kind);
		}
		sh_elem_leave(h);
	}
}

/* ---------------------------------------------------------------------
 * The checks after every event
 * --------------------------------------------------------------------- */

static int
sh_in_flight(wfe_state s)
{
	return WFE_STATE_IN_FLIGHT(s);
}

/* Liveness of the run, as far as the server can see it. */
static void
sh_check_live(sh *h, const char *what)
{
	const wfe_run_plan *rp = h->rp;
	int			busy = 0,
				finalising = 0;

	for (int i = 0; i < h->nst; i++)
	{
		if (i < rp->first_finaliser)
			busy |= sh_in_flight(h->rows[i].state);	/* an awaited task may wait for a detached one */
		else
			finalising |= sh_in_flight(h->rows[i].state);
	}
	/* a stage woken by its cache_ready timer goes on when the timer fires */
	for (int k = 0; k < h->nwakes; k++)
		busy |= h->rows[h->wakes[k].stage].state == WFE_WAITING;
	/* ... and one waiting on another run's attempt, when that attempt ends */
	for (int i = 0; h->foreign_leader && i < h->nst; i++)
		busy |= h->rows[i].state == WFE_WAITING && h->rows[i].cache_key &&
			strcmp(h->rows[i].cache_key, h->foreign_leader) == 0;
	if (h->run.intent < 0)
	{
		if (!busy)
			sh_violate(h, "after %s: the run has no intent and nothing it waits for is under way (stuck)",
					   what);
		if (finalising)
			sh_violate(h, "after %s: a finaliser runs before the intent", what);
		return;
	}
	if (!h->run.finished)
	{
		if (!finalising)
			sh_violate(h, "after %s: the run has intent %s but no finaliser under way and has not finished",
					   what, wfe_run_state_name((wfe_run_state) h->run.intent));
		return;
	}
	for (int i = 0; i < h->nst; i++)
	{
		wfe_state	s = h->rows[i].state;

		if (s == WFE_WAITING || (sh_in_flight(s) &&
								 (i >= rp->first_finaliser || h->rows[i].awaits ||
								  h->run.intent != WFE_RUN_COMPLETED)))
			sh_violate(h, "after %s: the run finished %s but %s is still %s", what,
					   wfe_run_state_name(h->run.state), sh_sname(h, i), wfe_state_name(s));
		/* a map's elements end with it, or are cancelled with it */
		for (int64_t e = 0; h->cur_elem < 0 && e < h->maps[i].n; e++)
			if (sh_in_flight(h->maps[i].elems[e].state) || h->maps[i].elems[e].state == WFE_RETRY_SCHEDULED)
				sh_violate(h, "after %s: the run finished %s but %s[%lld] is still %s", what,
						   wfe_run_state_name(h->run.state), sh_sname(h, i), (long long) e,
						   wfe_state_name(h->maps[i].elems[e].state));
	}
}

/*
 * A map's counter row and its elements: the counts never exceed the items
 * (completed + failed + held <= released <= total = elements), as many
 * elements wait below the released ones as are held, and no more elements
 * are under way than max_concurrency lets run, an operator's redrive
 * included (runtime.md "Operator actions on one element").
 */
static void
sh_check_maps(sh *h, const char *what)
{
	for (int i = 0; i < h->nst; i++)
	{
		const sh_map *m = &h->maps[i];
		const wfe_map_counts *c = &m->counts;
		int64_t		busy = 0,
					done = 0,
					held = 0;

		if (h->rp->stages[i].kind != WFE_K_MAP || m->n == 0)
			continue;
		if (c->completed < 0 || c->failed < 0 || c->held < 0 ||
			c->completed + c->failed + c->held > c->released ||
			c->released > c->total || c->total != m->n)
			sh_violate(h, "after %s: %s: counts total %lld released %lld completed %lld failed %lld held %lld of %lld elements",
					   what, sh_sname(h, i), (long long) c->total, (long long) c->released,
					   (long long) c->completed, (long long) c->failed, (long long) c->held, (long long) m->n);
		for (int64_t e = 0; e < m->n; e++)
		{
			busy += sh_in_flight(m->elems[e].state) || m->elems[e].state == WFE_RETRY_SCHEDULED;
			done += m->elems[e].state == WFE_COMPLETED;
			held += e < c->released && m->elems[e].state == WFE_WAITING;
			if (e >= c->released && m->elems[e].state != WFE_WAITING && m->elems[e].state != WFE_CANCELLED &&
				m->elems[e].state != WFE_SKIPPED)
				sh_violate(h, "after %s: %s[%lld] is %s, past the %lld released", what, sh_sname(h, i),
						   (long long) e, wfe_state_name(m->elems[e].state), (long long) c->released);
		}
		if (c->completed > done)
			sh_violate(h, "after %s: %s: %lld counted completed, %lld elements are", what, sh_sname(h, i),
					   (long long) c->completed, (long long) done);
		if (h->rows[i].state == WFE_RUNNING && held != c->held)
			sh_violate(h, "after %s: %s: %lld elements wait below the released ones, %lld counted held", what,
					   sh_sname(h, i), (long long) held, (long long) c->held);
		if (h->rp->stages[i].max_concurrency >= 0 && busy > h->rp->stages[i].max_concurrency)
			sh_violate(h, "after %s: %s: %lld elements under way, max_concurrency %lld", what,
					   sh_sname(h, i), (long long) busy, (long long) h->rp->stages[i].max_concurrency);
	}
}

/* After every event: the core's view equals the rows, and what must hold does. */
static void
sh_check(sh *h, const char *what)
{
	wfe_step   *st = &h->st;

	h->steps++;
	for (int i = 0; st->rows && i < h->nst; i++)
	{
		const wfe_row *c = &st->rows[i];
		const sh_row *r = &h->rows[i];

		if (!c->loaded || !c->exists)
			continue;
		if (c->state != r->state || c->attempt != r->attempt || c->fence != r->fence ||
			c->outcome != r->outcome || c->branch != r->branch)
			sh_violate(h, "after %s: %s: the core holds %s/%d/%lld/outcome %d/branch %d, the row %s/%d/%lld/outcome %d/branch %d",
					   what, sh_sname(h, i),
					   wfe_state_name(c->state), c->attempt, (long long) c->fence, c->outcome, c->branch,
					   wfe_state_name(r->state), r->attempt, (long long) r->fence, r->outcome, r->branch);
	}
	if (st->elem >= 0 && st->elem_map >= 0 && st->elem_map < h->nst && st->elem < h->maps[st->elem_map].n &&
		st->elem_row.loaded && st->elem_row.exists)
	{
		const wfe_row *c = &st->elem_row;
		const sh_row *r = &h->maps[st->elem_map].elems[st->elem];

		if (c->state != r->state || c->attempt != r->attempt || c->fence != r->fence || c->outcome != r->outcome)
			sh_violate(h, "after %s: %s[%lld]: the core holds %s/%d/%lld/outcome %d, the row %s/%d/%lld/outcome %d",
					   what, sh_sname(h, st->elem_map), (long long) st->elem,
					   wfe_state_name(c->state), c->attempt, (long long) c->fence, c->outcome,
					   wfe_state_name(r->state), r->attempt, (long long) r->fence, r->outcome);
	}
	sh_check_maps(h, what);
	if (st->run && (st->run->intent != h->run.intent || st->run->state != h->run.state ||
					st->run->finished != h->run.finished))
		sh_violate(h, "after %s: the core's run is %d/%s/%d, the row %d/%s/%d", what,
				   st->run->intent, wfe_run_state_name(st->run->state), st->run->finished,
				   h->run.intent, wfe_run_state_name(h->run.state), h->run.finished);
	if (h->run.finished && h->finishes != 1)
		sh_violate(h, "after %s: a finished run with %d FINISH ops", what, h->finishes);
	if (h->check_liveness && h->started)
		sh_check_live(h, what);
}

/* ---------------------------------------------------------------------
 * The server: engine.c's entry points
 * --------------------------------------------------------------------- */

static void
sh_begin(sh *h)
{
	h->view = h->run;
	h->io.arg = h;
	h->io.load = sh_io_load;
	h->io.result = sh_io_result;
	h->io.context = sh_io_context;
	h->io.output = sh_io_output;
	h->io.input_schema = sh_io_input_schema;
	h->io.random = sh_io_random;
	h->io.fence_bits = sh_io_fence_bits;
	h->io.output_schema = sh_io_output_schema;
	h->io.cache_entry = sh_io_cache_entry;
	h->io.cache_leader = sh_io_cache_leader;
	h->io.buffered_signal = sh_io_buffered_signal;
	h->io.now_us = sh_io_now_us;
	h->io.stage_input = sh_io_stage_input;
	h->io.child = sh_io_child;
	h->io.max_map_items = sh_io_max_map_items;
	h->io.load_element = sh_io_load_element;
	h->io.map_counts = sh_io_map_counts;
	h->io.map_cancelled = sh_io_map_cancelled;
	h->io.map_held = sh_io_map_held;
	h->io.map_results = sh_io_map_results;
	wfe_step_begin(&h->st, h->rp, &h->view, &h->io);
}

static void
sh_end(sh *h, const char *reported, const char *what)
{
	sh_apply(h, reported);
	sh_check(h, what);
	wfe_step_end(&h->st);
	sh_collect(h);
}

/* A step that only records an event, as the SQL layer does (no core). */
static void
sh_sql_event(sh *h, int stage, int attempt, const char *type)
{
	sh_free_ops(h);
	h->mark = h->nevents;
	sh_record_event(h, stage, attempt, type, NULL);
}

/* wfe._start_run, once (a not_before timer does nothing for a started run). */
SH_FN void
sh_start(sh *h)
{
	if (h->started || h->run.intent >= 0)
		return;
	h->started = 1;
	sh_begin(h);
	wfe_step_start(&h->st);
	sh_end(h, NULL, "start");
}

static const char *const sh_cb_names[] = {"accept", "heartbeat", "complete", "fail"};

/*
 * One callback about stage i, as engine.c's callback() handles it: the
 * gate, then the transition.  value: the reported result or error (JSON).
 * Returns the outcome word.
 */
SH_FN const char *
sh_callback_at(sh *h, int i, int64_t elem, wfe_callback cb, int attempt, int64_t fence, const char *value,
			   int retryable);

SH_FN const char *
sh_callback(sh *h, int i, wfe_callback cb, int attempt, int64_t fence, const char *value,
			int retryable)
{
	return sh_callback_at(h, i, -1, cb, attempt, fence, value, retryable);
}

/*
 * The same about element elem (>= 0) of map stage i (NAME[elem]): an
 * index wfe_map_element_of refuses (negative) is unknown before the core.
 */
SH_FN const char *
sh_callback_at(sh *h, int i, int64_t elem, wfe_callback cb, int attempt, int64_t fence, const char *value,
			   int retryable)
{
	wfe_row    *row;
	const char *outcome;
	int			same = 0;
	int			report = cb == WFE_CB_COMPLETE || cb == WFE_CB_FAIL;
	char		what[128];

	/* engine.c: no worker reports a wait or a sleep */
	if (i < 0 || i >= h->nst || h->rp->stages[i].kind == WFE_K_WAIT || h->rp->stages[i].kind == WFE_K_SLEEP ||
		(elem >= 0 && h->rp->stages[i].kind != WFE_K_MAP) || elem < -1 ||
		(h->rp->stages[i].kind == WFE_K_MAP && elem < 0))	/* engine.c: a map's elements are reported about */
	{
		sh_sql_event(h, -1, attempt, "callback.unknown");
		return "unknown";
	}
	snprintf(what, sizeof(what), "%s %s[%lld] (attempt %d, fence %lld)", sh_cb_names[cb],
			 sh_sname(h, i), (long long) elem, attempt, (long long) fence);
	if (report && value == NULL)
		value = "{}";			/* the SQL functions' default */
	sh_begin(h);
	if (elem >= 0)
		wfe_step_element(&h->st, i, elem);
	row = wfe_step_row(&h->st, i);
	if (report && row->exists && row->outcome == (cb == WFE_CB_COMPLETE ? WFE_COMPLETED : WFE_FAILED))
		same = sh_json_equal(cb == WFE_CB_COMPLETE ? sh_rowp(h, i, elem)->result : sh_rowp(h, i, elem)->error,
							 value);
	outcome = wfe_step_gate(&h->st, i, cb, attempt, fence, same);
	if (outcome == NULL)
	{
		outcome = "accepted";
		switch (cb)
		{
			case WFE_CB_ACCEPT:
				wfe_step_accepted(&h->st, i, "worker-1");
				break;
			case WFE_CB_HEARTBEAT:
				wfe_step_heartbeat(&h->st, i);
				break;
			case WFE_CB_COMPLETE:
				{
					const char *problem = wfe_step_result_problem(&h->st, i, value, h->output_schema[i]);

					if (problem != NULL)
					{
						wfe_step_invalid_result(&h->st, i, problem);
						outcome = "invalid_result";
					}
					else
						wfe_step_completed(&h->st, i, value);
				}
				break;
			case WFE_CB_FAIL:
				wfe_step_failed(&h->st, i, value, retryable);
				break;
		}
		sh_end(h, value, what);
		return outcome;
	}
	sh_end(h, value, what);
	/* a rejection: exactly its callback.* event, nothing else */
	{
		char		want[64];

		snprintf(want, sizeof(want), "callback.%s", outcome);
		if (h->nops != 1 || h->ops[0].kind != WFE_OP_EVENT || h->ops[0].text == NULL ||
			strcmp(h->ops[0].text, want) != 0 || h->ops[0].stage != i)
			sh_violate(h, "after %s: the %s answer wrote %d ops, not just one %s event", what,
					   outcome, h->nops, want);
	}
	return outcome;
}

SH_FN int	sh_claim(sh *h, int i);

/*
 * The current attempt's holder reports: a worker reports what it claimed,
 * so a queued attempt is claimed first (a report of an attempt nobody
 * claimed is stale: sh_callback reports as anyone).
 */
SH_FN const char *
sh_complete(sh *h, int i, const char *result)
{
	sh_claim(h, i);
	return sh_callback(h, i, WFE_CB_COMPLETE, h->rows[i].attempt, h->rows[i].fence, result, 1);
}

SH_FN const char *
sh_fail(sh *h, int i, const char *error, int retryable)
{
	sh_claim(h, i);
	return sh_callback(h, i, WFE_CB_FAIL, h->rows[i].attempt, h->rows[i].fence, error, retryable);
}

SH_FN const char *
sh_accept(sh *h, int i)
{
	return sh_callback(h, i, WFE_CB_ACCEPT, h->rows[i].attempt, h->rows[i].fence, NULL, 1);
}

/* A retry timer for (attempt, fence) fires: wfe._timer_fired(.., 'retry', ..). */
SH_FN void
sh_retry_due_at(sh *h, int i, int64_t elem, int attempt, int64_t fence)
{
	char		what[128];

	snprintf(what, sizeof(what), "retry timer of %s[%lld] (attempt %d, fence %lld)", sh_sname(h, i),
			 (long long) elem, attempt, (long long) fence);
	sh_begin(h);
	if (elem >= 0)
		wfe_step_element(&h->st, i, elem);
	wfe_step_retry_due(&h->st, i, attempt, fence);
	sh_end(h, NULL, what);
}

SH_FN void
sh_retry_due(sh *h, int i, int attempt, int64_t fence)
{
	sh_retry_due_at(h, i, -1, attempt, fence);
}

/* Fire the cache_ready timers of the waiters a leader's end woke; how many fired. */
SH_FN int
sh_fire_wakes(sh *h)
{
	int			n = 0;

	while (h->nwakes > 0)
	{
		int			i = h->wakes[--h->nwakes].stage;
		char		what[96];

		snprintf(what, sizeof(what), "cache_ready timer of %s", sh_sname(h, i));
		sh_begin(h);
		wfe_step_cache_ready(&h->st, i, h->rows[i].input);
		sh_end(h, NULL, what);
		n++;
	}
	return n;
}

/* Fire timer k if it has not fired (wfe._fire_timer); 0 if it had. */
SH_FN int
sh_fire_timer(sh *h, int k)
{
	sh_timer   *t;
	char		what[96];

	if (k < 0 || k >= h->ntimers || h->timers[k].fired)
		return 0;
	t = &h->timers[k];
	t->fired = 1;
	if (t->kind == 0)
	{
		sh_retry_due_at(h, t->stage, t->elem1 - 1, t->attempt, t->fence);
		return 1;
	}
	snprintf(what, sizeof(what), "%s timer of %s", t->kind == 'w' ? "wait_timeout" : "sleep",
			 sh_sname(h, t->stage));
	sh_begin(h);
	if (t->kind == 'w')
		wfe_step_wait_timeout(&h->st, t->stage, t->attempt, t->fence);
	else
		wfe_step_sleep_due(&h->st, t->stage, t->attempt, t->fence, "\"2030-01-01T00:00:00+00:00\"");
	sh_end(h, NULL, what);
	return 1;
}

/*
 * The child run started for workflow stage i's attempt and fence ended in
 * state with output (engine.c's child_ended timer fired for the parent).
 */
SH_FN void
sh_child_ended_at(sh *h, int i, int64_t elem, int attempt, int64_t fence, int64_t child, const char *state,
				  const char *output)
{
	/* wfe_child_outcome finds no child of a map's own row: only its elements start children */
	if (h->rp->stages[i].kind == WFE_K_MAP && elem < 0)
		return;
	sh_begin(h);
	if (elem >= 0)
		wfe_step_element(&h->st, i, elem);
	wfe_step_child_ended(&h->st, i, attempt, fence, child, state, output);
	sh_end(h, output, "child ended");
}

SH_FN void
sh_child_ended(sh *h, int i, int attempt, int64_t fence, int64_t child, const char *state,
			   const char *output)
{
	sh_child_ended_at(h, i, -1, attempt, fence, child, state, output);
}

/*
 * wfe.signal after its checks (grant, tenant, plan, payload, duplicates):
 * the core's answer, and the signal kept when accepted or buffered.
 */
SH_FN const char *
sh_send_signal(sh *h, const char *name, const char *payload)
{
	const char *outcome;
	int			taken = -1;

	sh_begin(h);
	outcome = wfe_step_signal(&h->st, name, payload, NULL, "tester", &taken);
	sh_end(h, payload, "signal");
	if (strcmp(outcome, "late") != 0)
	{
		sh_signal  *g = SH_PUSH(h->signals, h->nsignals, h->capsignals);

		g->name = strdup(name);
		g->payload = strdup(payload);
		g->id = h->nsignals;
		g->taken_by = taken;
	}
	return outcome;
}

/* Fire stage i's pending retry timer; 0 if it has none. */
SH_FN int
sh_fire_retry(sh *h, int i)
{
	for (int k = h->ntimers - 1; k >= 0; k--)
		if (h->timers[k].stage == i && !h->timers[k].fired)
			return sh_fire_timer(h, k);
	return 0;
}

/*
 * wfe._expire: the attempt's deadline passed.  Only a queued, dispatched or
 * running attempt can expire (q_expiring); the clock is queue for the first
 * two, else the given one (execution or heartbeat).  Returns whether it did.
 */
SH_FN int
sh_expire_at(sh *h, int i, int64_t elem, const char *clock)
{
	wfe_state	s = sh_rowp(h, i, elem)->state;
	char		what[128];

	/* a map's own row has no deadline: its elements have theirs */
	if (h->rp->stages[i].kind == WFE_K_MAP && elem < 0)
		return 0;
	if (s != WFE_QUEUED && s != WFE_DISPATCHED && s != WFE_RUNNING)
		return 0;
	if (s != WFE_RUNNING)
		clock = "queue";
	snprintf(what, sizeof(what), "%s deadline of %s[%lld]", clock, sh_sname(h, i), (long long) elem);
	sh_begin(h);
	if (elem >= 0)
		wfe_step_element(&h->st, i, elem);
	wfe_step_expired(&h->st, i, clock, "2030-01-01 00:00:00+00", "\"2030-01-01T00:00:00+00:00\"");
	sh_end(h, NULL, what);
	return 1;
}

SH_FN int
sh_expire(sh *h, int i, const char *clock)
{
	return sh_expire_at(h, i, -1, clock);
}

/* The run deadline timer (retired, so never fired, once the intent is set). */
SH_FN void
sh_run_deadline(sh *h)
{
	sh_begin(h);
	wfe_step_run_deadline(&h->st, "\"2030-01-01T00:00:00+00:00\"");
	sh_end(h, NULL, "run deadline");
}

/* wfe.cancel_run: late once the run has an intent. */
SH_FN const char *
sh_cancel(sh *h, const char *reason)
{
	if (h->run.intent >= 0)
	{
		sh_sql_event(h, -1, 0, "callback.late");
		return "late";
	}
	sh_record_event(h, -1, 0, "run.cancel_requested", NULL);
	sh_begin(h);
	wfe_step_cancel(&h->st, reason);
	sh_end(h, NULL, "cancel");
	return "accepted";
}

/* wfe.claim_task (SQL): a queued attempt of a poll queue becomes running. */
SH_FN int
sh_claim(sh *h, int i)
{
	sh_row	   *r = &h->rows[i];

	if (r->state != WFE_QUEUED || r->queue == NULL || r->has_handler)
		return 0;
	sh_free_ops(h);
	h->mark = h->nevents;
	sh_move(h, i, WFE_RUNNING, "claim");
	sh_set(h, &r->claimed_by, "poller");
	sh_record_event(h, i, r->attempt, "stage.claimed", NULL);
	sh_collect(h);
	if (h->check_liveness && h->started)
		sh_check_live(h, "claim");
	h->steps++;
	return 1;
}

/* wfe._mark_published (SQL): the broker confirmed the dispatch. */
SH_FN int
sh_publish(sh *h, int i)
{
	sh_row	   *r = &h->rows[i];

	if (r->state != WFE_QUEUED || r->queue == NULL || r->has_handler)
		return 0;
	sh_free_ops(h);
	h->mark = h->nevents;
	sh_move(h, i, WFE_DISPATCHED, "publish");
	h->steps++;
	return 1;
}

/* The publisher gave the message back (or the queue went back to poll). */
SH_FN int
sh_give_back(sh *h, int i)
{
	if (h->rows[i].state != WFE_DISPATCHED)
		return 0;
	sh_free_ops(h);
	h->mark = h->nevents;
	sh_move(h, i, WFE_QUEUED, "give back");
	h->steps++;
	return 1;
}

/*
 * wfe._run_handler then wfe._action_done: a queued in-database action runs
 * (SQL: running) and ends with a result or an error (JSON text).
 */
SH_FN int
sh_action_done(sh *h, int i, const char *result, const char *error)
{
	char		what[96];
	char	   *err = NULL;

	if (h->rows[i].state != WFE_QUEUED || !h->rows[i].has_handler)
		return 0;
	sh_move(h, i, WFE_RUNNING, "handler");
	sh_record_event(h, i, h->rows[i].attempt, "stage.claimed", NULL);
	snprintf(what, sizeof(what), "handler of %s", sh_sname(h, i));
	if (error == NULL && result == NULL)
		result = "{}";
	sh_begin(h);
	if (error != NULL)
		wfe_step_failed(&h->st, i, error, 1);
	else
	{
		const char *problem = wfe_step_result_problem(&h->st, i, result, h->output_schema[i]);

		if (problem != NULL)
		{
			const char *q = wfe_step_json_str(&h->st, problem);

			err = sh_realloc(NULL, strlen(q) + 64);
			sprintf(err, "{\"code\": \"result.schema\", \"message\": %s}", q);
			wfe_step_failed(&h->st, i, err, 1);
		}
		else
			wfe_step_completed(&h->st, i, result);
	}
	sh_end(h, error ? NULL : result, what);
	free(err);
	return 1;
}

SH_FN const char *sh_json_get(const char *json, const char *key);

/*
 * wfe._operate: an operator's action on stage i.  Returns NULL when it was
 * done, else the core's refusal, or wfe.redrive's (a static copy; nothing
 * was written).
 */
SH_FN const char *
sh_operate_at(sh *h, int i, int64_t elem, wfe_operation op, const char *value, const char *by, const char *why)
{
	static char refusal[512];
	const char *problem;
	char		what[128];

	snprintf(what, sizeof(what), "operation %d on %s[%lld]", (int) op, sh_sname(h, i), (long long) elem);
	/* engine.c's operate_stage: of a map's own name only skip; else name an element */
	if (h->rp->stages[i].kind == WFE_K_MAP && elem < 0 && op != WFE_OPERATE_SKIP)
	{
		snprintf(refusal, sizeof(refusal), "cannot act on map %s: name one of its elements", sh_sname(h, i));
		return refusal;
	}
	/* wfe.redrive's own refusal (src/sql/81_recovery.sql): a binding failure would fail again */
	if (op == WFE_OPERATE_REDRIVE && (elem < 0 || elem < h->maps[i].n))
	{
		const sh_row *r = elem >= 0 ? &h->maps[i].elems[elem] : &h->rows[i];
		const char *code = r->state == WFE_FAILED && r->error ? sh_json_get(r->error, "code") : NULL;

		if (code != NULL && strncmp(code, "binding.", 8) == 0)
		{
			snprintf(refusal, sizeof(refusal), "cannot redrive stage %s: its input could not be bound (%s)",
					 sh_sname(h, i), code);
			return refusal;
		}
	}
	sh_begin(h);
	if (elem >= 0)
		wfe_step_element(&h->st, i, elem);
	problem = wfe_step_operate_problem(&h->st, i, op, value);
	if (problem == NULL && op == WFE_OPERATE_SKIP && h->rp->stages[i].kind != WFE_K_DECISION)
		problem = wfe_step_result_problem(&h->st, i, value ? value : "{}", h->output_schema[i]);
	if (problem != NULL)
	{
		snprintf(refusal, sizeof(refusal), "%s", problem);
		wfe_step_end(&h->st);
		sh_collect(h);
		return refusal;
	}
	wfe_step_operate(&h->st, i, op, value, by, why);
	sh_end(h, op == WFE_OPERATE_SKIP ? (value ? value : "{}") : NULL, what);
	return NULL;
}

SH_FN const char *
sh_operate(sh *h, int i, wfe_operation op, const char *value, const char *by, const char *why)
{
	return sh_operate_at(h, i, -1, op, value, by, why);
}

/* wfe.claim_task of element elem of map stage i (a worker item's queued attempt). */
SH_FN int
sh_claim_at(sh *h, int i, int64_t elem)
{
	int			n;

	if (elem < 0)
		return sh_claim(h, i);
	if (elem >= h->maps[i].n)
		return 0;
	sh_elem_enter(h, i, elem);
	n = sh_claim(h, i);
	sh_elem_leave(h);
	return n;
}

/* ---------------------------------------------------------------------
 * Looking at the last step
 * --------------------------------------------------------------------- */

/* How many ops of this kind (stage -2: any) did the last step write? */
SH_FN int
sh_count_ops(const sh *h, wfe_op_kind kind, int stage)
{
	int			n = 0;

	for (int k = 0; k < h->nops; k++)
		n += h->ops[k].kind == kind && (stage == -2 || h->ops[k].stage == stage);
	return n;
}

/* The last step's first op of this kind on this stage (-2: any), or NULL. */
SH_FN const sh_op *
sh_find_op(const sh *h, wfe_op_kind kind, int stage)
{
	for (int k = 0; k < h->nops; k++)
		if (h->ops[k].kind == kind && (stage == -2 || h->ops[k].stage == stage))
			return &h->ops[k];
	return NULL;
}

/* Events of a type on a stage (-2: any) since event index `from`. */
SH_FN int
sh_count_events_since(const sh *h, int from, const char *type, int stage)
{
	int			n = 0;

	for (int k = from; k < h->nevents; k++)
		n += strcmp(h->events[k].type, type) == 0 && (stage == -2 || h->events[k].stage == stage);
	return n;
}

/* The fence of the last step's first such event; -1 when it is about none. */
SH_FN long long
sh_event_fence(const sh *h, const char *type, int stage)
{
	for (int k = h->mark; k < h->nevents; k++)
		if (strcmp(h->events[k].type, type) == 0 && (stage == -2 || h->events[k].stage == stage))
			return h->events[k].fenced ? h->events[k].fence : -1;
	return -1;
}

/* The detail of the last step's first such event, or NULL. */
SH_FN const char *
sh_event_detail(const sh *h, const char *type, int stage)
{
	for (int k = h->mark; k < h->nevents; k++)
		if (strcmp(h->events[k].type, type) == 0 && (stage == -2 || h->events[k].stage == stage))
			return h->events[k].detail;
	return NULL;
}

/* A string member of a JSON text (in a static buffer), or "" */
SH_FN const char *
sh_json_get(const char *json, const char *key)
{
	static char buf[1024];
	json_object *o = sh_parse(json);
	json_object *v;

	buf[0] = '\0';
	if (o && json_object_is_type(o, json_type_object) && json_object_object_get_ex(o, key, &v))
		snprintf(buf, sizeof(buf), "%s",
				 json_object_is_type(v, json_type_string) ? json_object_get_string(v)
				 : json_object_to_json_string_ext(v, JSON_C_TO_STRING_PLAIN));
	json_object_put(o);
	return buf;
}

#endif							/* WFE_STEP_HARNESS_H */
