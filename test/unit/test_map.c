/*
 * test_map.c — unit tests of map stages: the compiler's rules (type: map,
 * for_each, the item roots, the literal items limit, the plan and its
 * Mermaid shape) and the step core's (src/core/engine/map.c): release,
 * max_concurrency, retries of one element, tolerated_failures, the one
 * aggregation, binding failures, and the cost rule (an element's end
 * touches its own row, the counter row and the next element's row only).
 *
 * The step core runs against a small in-memory server of its own here:
 * plan-stage rows and element rows, the counter row, and the ops applied
 * as src/pg/engine.c and src/pg/map.c apply them; every hook call that
 * reads an element is counted.
 *
 * A standalone TAP program.
 */
#pragma GCC diagnostic ignored "-Wunused-parameter"  /* the hooks ignore what they need not read */

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>
#include <openssl/evp.h>

#include "core/base/json.h"
#include "core/engine/runplan.h"
#include "core/engine/step.h"
#include "core/lang/compile.h"
#include "tap.h"


static void
sha256(const unsigned char *data, size_t len, unsigned char out[32])
{
	unsigned int n = 32;

	EVP_Digest(data, len, out, &n, EVP_sha256(), NULL);
}

static wfe_compile_result *
compile_limit(const char *src, int max_map_items)
{
	wfe_compile_options opts;

	wfe_compile_options_init(&opts);
	opts.sha256 = sha256;
	if (max_map_items > 0)
		opts.max_map_items = max_map_items;
	return wfe_compile(src, strlen(src), &opts);
}

/* The code and path of the first diagnostic, "code path", or "" (static buffer). */
static const char *
first_diag(const wfe_compile_result *r)
{
	static char buf[512];
	json_object *d;

	if (json_object_array_length(r->diagnostics) == 0)
		return "";
	d = json_object_array_get_idx(r->diagnostics, 0);
	snprintf(buf, sizeof(buf), "%s %s", json_object_get_string(json_object_object_get(d, "code")),
			 json_object_get_string(json_object_object_get(d, "path")));
	return buf;
}

#define HEAD "name: m\nversion: \"1.0.0\"\nentry: render\nstages:\n"
#define MAP(extra, input) \
	"  - name: render\n    type: map\n    items: \"${context.lods}\"\n" extra \
	"    item:\n      worker: render@1\n      queue: render\n      input: " input "\n" \
	"      retry: { max_attempts: 2, initial_ms: 10, multiplier: 1, max_ms: 10, jitter: none }\n" \
	"    on_success: after\n    on_failure: failed\n"
#define AFTER(input) \
	"  - name: after\n    type: worker\n    worker: publish@1\n    queue: publish\n    input: " input "\n" \
	"    on_success: completed\n    on_failure: failed\n"

static void
test_compiler(void)
{
	static const struct
	{
		const char *src;
		int			limit;
		const char *want;		/* "" compiles */
		const char *what;
	}			cases[] = {
		{HEAD MAP("", "{ lod: \"${item}\", i: \"${item_index}\" }") AFTER("{ r: \"${stages.render.result}\" }"),
		0, "", "a map with item and item_index in its item input, read by the next stage"},
		{HEAD MAP("", "{ lod: \"${item}\" }") AFTER("{ r: \"${item}\" }"),
		0, "expr.unknown_root /stages/1/input/r", "item outside a map's item input"},
		{HEAD MAP("", "{ i: \"${item_index.x}\" }") AFTER("{}"),
		0, "expr.syntax /stages/0/item/input/i", "item_index has no fields"},
		{HEAD "  - name: render\n    type: map\n    items: \"${item}\"\n    item: { worker: render@1, queue: render }\n"
			"    on_success: completed\n    on_failure: failed\n",
		0, "expr.unknown_root /stages/0/items", "item in the items reference itself"},
		{HEAD "  - name: render\n    type: map\n    items: [1, 2, 3]\n    item: { worker: render@1, queue: render }\n"
			"    on_success: completed\n    on_failure: failed\n",
		2, "limits.map_items /stages/0/items", "a literal list over wfe.max_map_items"},
		{HEAD "  - name: render\n    type: map\n    items: [1, 2, 3]\n    item: { worker: render@1, queue: render }\n"
			"    on_success: completed\n    on_failure: failed\n",
		3, "", "a literal list at wfe.max_map_items"},
		{HEAD "  - name: render\n    type: map\n    items: \"${context.lods}\"\n"
			"    on_success: completed\n    on_failure: failed\n",
		0, "schema.required /stages/0", "a map without item"},
		{HEAD "  - name: render\n    type: map\n    items: \"${context.lods}\"\n    item: { input: {} }\n"
			"    on_success: completed\n    on_failure: failed\n",
		0, "schema.required /stages/0/item", "an item without an executor"},
		{HEAD MAP("    max_concurrency: -1\n", "{}") AFTER("{}"),
		0, "schema.value /stages/0/max_concurrency", "a negative max_concurrency"},
		{HEAD MAP("    tolerated_failures: -2\n", "{}") AFTER("{}"),
		0, "schema.value /stages/0/tolerated_failures", "a negative tolerated_failures"},
		{HEAD "  - name: render\n    type: map\n    items: \"lods ${context.lods}\"\n"
			"    item: { worker: render@1, queue: render }\n    on_success: completed\n    on_failure: failed\n",
		0, "schema.type /stages/0/items", "items that are not one reference"},
		{"name: t\nversion: \"1.0.0\"\ntasks:\n  - id: render\n    worker: render@1\n    queue: render\n"
			"    for_each: \"${context.lods}\"\n    max_concurrency: 3\n    input: { lod: \"${item}\" }\n"
			"    produces: [{ key: renders, type: object }]\n",
		0, "", "a task's for_each, with item in its input"},
		{"name: t\nversion: \"1.0.0\"\ntasks:\n  - id: render\n    worker: render@1\n    queue: render\n"
			"    input: { lod: \"${item}\" }\n",
		0, "expr.unknown_root /tasks/0/input/lod", "item in a task without for_each"},
		{"name: t\nversion: \"1.0.0\"\ntasks:\n  - id: render\n    worker: render@1\n    queue: render\n"
			"    max_concurrency: 3\n",
		0, "schema.value /tasks/0", "max_concurrency without for_each"},
	};

	for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++)
	{
		wfe_compile_result *r = compile_limit(cases[k].src, cases[k].limit);
		const char *got = r->ok ? "" : first_diag(r);

		ok(strcmp(got, cases[k].want) == 0, "compile: %s: '%s' (got '%s')", cases[k].what, cases[k].want, got);
		wfe_compile_result_free(r);
	}
	{
		wfe_compile_result *r = compile_limit(HEAD MAP("    max_concurrency: 2\n", "{ lod: \"${item}\" }") AFTER("{}"), 0);
		char	   *mm = r->ok ? wfe_plan_mermaid(r->plan) : NULL;

		ok(r->ok && strstr(r->plan_text, "\"type\":\"map\"") &&
		   strstr(r->plan_text, "\"item\":{\"cache\":null") &&
		   strstr(r->plan_text, "\"max_concurrency\":2") && strstr(r->plan_text, "\"tolerated_failures\":0"),
		   "the plan: type map, its item executor, max_concurrency, tolerated_failures");
		ok(mm && strstr(mm, "s0[/\"render<br/><i>map: worker render@1 on render, 2 at once</i>\"/]"),
		   "Mermaid draws a map as a parallelogram naming its item executor and max_concurrency");
		free(mm);
		wfe_compile_result_free(r);
	}
}

/* ---------------------------------------------------------------------
 * A small in-memory server for the step core
 * --------------------------------------------------------------------- */

#define MAX_ELEMS 12000

typedef struct mrow
{
	wfe_row		row;
	char	   *result;
	char	   *input;
	char	   *concurrency_key;	/* an element's, written by MAP_START */
	int			concurrency_max;
} mrow;

typedef struct msrv
{
	wfe_run_plan *rp;
	wfe_run		run;
	mrow		stages[8];
	mrow	   *elems;
	int64_t		nelems;
	wfe_map_counts counts;
	int			has_counts;
	uint32_t	fence_seq;
	int64_t		limit;
	int64_t		element_loads;	/* load_element calls in the last step */
	int64_t		element_writes; /* element ops written in the last step */
	int			aggregations;
	int			finished;
	const char *context;
	const char *cached_input;	/* the one input the result cache has an entry for, or NULL */
	const char *cached_result;
	int			cache_lookups;
} msrv;

static void
m_load(void *arg, int i, wfe_row *row)
{
	msrv	   *s = arg;

	*row = s->stages[i].row;
	row->loaded = 0;
}

static void
m_load_element(void *arg, int i, int64_t elem, wfe_row *row)
{
	msrv	   *s = arg;

	s->element_loads++;
	if (elem >= s->nelems)
	{
		row->exists = 0;
		return;
	}
	*row = s->elems[elem].row;
	row->loaded = 0;
}

static void
m_map_counts(void *arg, int i, wfe_map_counts *c)
{
	msrv	   *s = arg;

	*c = s->counts;
}

/* The aggregation as q_results computes it, element elem ending with elem_result. */
static const char *
m_map_results(void *arg, int i, int64_t elem, const char *elem_result)
{
	msrv	   *s = arg;
	static char *out;
	size_t		cap = 64 + (size_t) s->nelems * 64,
				n = 0;
	json_object *failed = json_object_new_array();

	s->aggregations++;
	free(out);
	out = malloc(cap);
	n += snprintf(out + n, cap - n, "{\"items\":[");
	for (int64_t k = 0; k < s->nelems; k++)
	{
		const char *r = k == elem ? elem_result :
			s->elems[k].row.state == WFE_COMPLETED ? s->elems[k].result : NULL;

		if (r == NULL)
			json_object_array_add(failed, json_object_new_int64(k));
		n += snprintf(out + n, cap - n, "%s%s", k ? "," : "", r ? r : "null");
	}
	n += snprintf(out + n, cap - n, "],\"failed\":%s}", json_object_to_json_string_ext(failed, JSON_C_TO_STRING_PLAIN));
	json_object_put(failed);
	return out;
}

/* The lowest held element: waiting below `below` (map.c's q_held). */
static int64_t
m_map_held(void *arg, int i, int64_t below)
{
	msrv	   *s = arg;

	for (int64_t k = 0; k < below && k < s->nelems; k++)
		if (s->elems[k].row.state == WFE_WAITING || s->elems[k].row.state == WFE_CANCELLED)
			return k;
	return -1;
}

static int64_t
m_limit(void *arg)
{
	return ((msrv *) arg)->limit;
}

static const char *
m_context(void *arg)
{
	return ((msrv *) arg)->context;
}

static const char *
m_result(void *arg, int i)
{
	return ((msrv *) arg)->stages[i].result;
}

static struct json_object *
m_no_schema(void *arg, int i)
{
	return NULL;
}

static double
m_random(void *arg)
{
	return 0.5;
}

static uint32_t
m_fence_bits(void *arg)
{
	return ++((msrv *) arg)->fence_seq;
}

/* The result cache: one entry, under the key of cached_input (the key is the input here). */
static void
m_cache_entry(void *arg, int i, const char *input, wfe_cache_entry *e)
{
	msrv	   *s = arg;
	static char key[256];

	memset(e, 0, sizeof(*e));
	s->cache_lookups++;
	snprintf(key, sizeof(key), "sha256:%s", input);
	e->key = key;
	if (s->cached_input && strcmp(input, s->cached_input) == 0)
	{
		e->found = 1;
		e->digest_ok = 1;
		e->result = s->cached_result;
	}
}

static const char *
m_null(void *arg, const char *key)
{
	return NULL;
}

static const char *
m_output(void *arg, const char *task, const char *key)
{
	return NULL;
}

static const char *
m_buffered(void *arg, const char *signal, int64_t after, int64_t *id)
{
	return NULL;
}

static int64_t
m_now(void *arg)
{
	return 0;
}

static wfe_step step;

/* The cache entry the next start() finds (its release looks elements up). */
static const char *next_cached_input;
static const char *next_cached_result;

/* A stage's bound input; an element's while the step is about one (engine.c's io_stage_input). */
static const char *
m_stage_input(void *arg, int i)
{
	msrv	   *s = arg;

	if (i == step.elem_map && step.elem >= 0)
		return s->elems[step.elem].input;
	return s->stages[i].input;
}

static wfe_step_io m_io = {
	.load = m_load,.result = m_result,.context = m_context,.output = m_output,
	.input_schema = m_no_schema,.random = m_random,.fence_bits = m_fence_bits,
	.output_schema = m_no_schema,.cache_entry = m_cache_entry,.cache_leader = m_null,
	.buffered_signal = m_buffered,.now_us = m_now,.stage_input = m_stage_input,
	.load_element = m_load_element,.map_counts = m_map_counts,.map_results = m_map_results,
	.max_map_items = m_limit,.map_held = m_map_held
};

static char *
dup(const char *s)
{
	return s ? strdup(s) : NULL;
}

/* Apply the step's ops as engine.c and map.c do, then end it. */
static void
apply(msrv *s)
{
	s->element_writes = 0;
	for (int k = 0; k < step.nops; k++)
	{
		const wfe_op *op = &step.ops[k];
		mrow	   *m = op->stage < 0 ? NULL : op->elem >= 0 ? &s->elems[op->elem] : &s->stages[op->stage];

		if (op->elem >= 0 && op->kind != WFE_OP_EVENT)
			s->element_writes++;
		switch (op->kind)
		{
			case WFE_OP_ENQUEUE:
				m->row.state = WFE_QUEUED;
				m->row.attempt += op->flag;
				m->row.fence = op->fence;
				m->row.outcome = 0;
				if (op->json)
				{
					free(m->input);
					m->input = dup(op->json);
				}
				break;
			case WFE_OP_COMPLETE:
				m->row.state = WFE_COMPLETED;
				m->row.outcome = WFE_COMPLETED;
				free(m->result);
				m->result = dup(op->json);
				break;
			case WFE_OP_CACHE_HIT:
				m->row.state = WFE_COMPLETED;
				m->row.outcome = WFE_COMPLETED;
				m->row.fence = op->fence;
				m->row.cache_key = "hit";
				free(m->result);
				m->result = dup(op->json);
				break;
			case WFE_OP_RETRY:
				m->row.state = WFE_RETRY_SCHEDULED;
				m->row.outcome = WFE_FAILED;
				break;
			case WFE_OP_FAIL:
			case WFE_OP_BIND_FAILED:
				m->row.state = op->kind == WFE_OP_FAIL ? op->state : WFE_FAILED;
				m->row.outcome = WFE_FAILED;
				if (op->kind == WFE_OP_BIND_FAILED)
				{
					m->row.attempt = op->attempt;
					m->row.fence = op->fence;
				}
				free(m->result);
				m->result = dup(op->json);	/* the error, for the tests to read */
				break;
			case WFE_OP_CANCEL:
				m->row.state = WFE_CANCELLED;
				m->row.fence = op->fence;
				break;
			case WFE_OP_SKIP:
				m->row.state = WFE_SKIPPED;
				break;
			case WFE_OP_RESET:
				m->row.state = WFE_WAITING;
				m->row.outcome = 0;
				break;
			case WFE_OP_MAP_START:
				{
					json_object *in = wfe_json_parse(op->json);
					json_object *keys = op->concurrency_key ? wfe_json_parse(op->concurrency_key) : NULL;

					m->row.state = WFE_RUNNING;
					m->row.attempt = op->attempt;
					m->row.fence = op->fence;
					s->nelems = (int64_t) json_object_array_length(in);
					for (int64_t e = 0; e < s->nelems; e++)
					{
						memset(&s->elems[e], 0, sizeof(mrow));
						s->elems[e].row.exists = 1;
						s->elems[e].row.state = WFE_WAITING;
						s->elems[e].row.branch = -1;
						s->elems[e].row.awaits = 1;
						s->elems[e].row.queue = "render";
						s->elems[e].input = dup(json_object_get_string(json_object_array_get_idx(in, e)));
						if (keys != NULL)
						{
							s->elems[e].concurrency_key =
								dup(json_object_get_string(json_object_array_get_idx(keys, e)));
							s->elems[e].concurrency_max = op->concurrency_max;
						}
					}
					s->counts = op->counts;
					s->has_counts = 1;
					s->element_writes += s->nelems;
					json_object_put(in);
					json_object_put(keys);
				}
				break;
			case WFE_OP_MAP_COUNTS:
				s->counts = op->counts;
				break;
			case WFE_OP_MAP_CANCEL:
				for (int64_t e = 0; e < s->nelems; e++)
					if (s->elems[e].row.state == WFE_WAITING || WFE_STATE_IN_FLIGHT(s->elems[e].row.state))
					{
						s->elems[e].row.state = WFE_CANCELLED;
						s->elems[e].row.fence += (int64_t) 1 << 32;
					}
				break;
			case WFE_OP_INTENT:
				s->run.intent = op->state;
				break;
			case WFE_OP_FINISH:
				s->finished = 1;
				s->run.state = op->state;
				break;
			default:
				break;
		}
	}
	wfe_step_end(&step);
}

static msrv *
start(const char *src, const char *context, int64_t limit)
{
	msrv	   *s = calloc(1, sizeof(msrv));
	wfe_compile_result *r = compile_limit(src, 0);
	char		err[256];

	if (!r->ok)
	{
		printf("# compile failed: %s\n", first_diag(r));
		abort();
	}
	s->rp = wfe_run_plan_build(1, r->plan_text, err, sizeof(err));
	wfe_compile_result_free(r);
	s->elems = calloc(MAX_ELEMS, sizeof(mrow));
	s->limit = limit;
	s->context = context;
	s->cached_input = next_cached_input;
	s->cached_result = next_cached_result;
	s->run.run_id = 7;
	s->run.tenant = "t";
	s->run.workflow = "m";
	s->run.version = "1.0.0";
	s->run.intent = -1;
	s->run.state = WFE_RUN_RUNNING;
	for (int i = 0; i < s->rp->nstages; i++)
	{
		s->stages[i].row.exists = 1;
		s->stages[i].row.state = WFE_WAITING;
		s->stages[i].row.branch = -1;
		s->stages[i].row.awaits = 1;
		s->stages[i].row.queue = s->rp->stages[i].kind == WFE_K_WORKER ? "publish" : NULL;
	}
	m_io.arg = s;
	wfe_step_begin(&step, s->rp, &s->run, &m_io);
	wfe_step_start(&step);
	apply(s);
	return s;
}

static void
stop(msrv *s)
{
	for (int64_t e = 0; e < MAX_ELEMS; e++)
	{
		free(s->elems[e].result);
		free(s->elems[e].input);
		free(s->elems[e].concurrency_key);
	}
	for (int i = 0; i < 8; i++)
	{
		free(s->stages[i].result);
		free(s->stages[i].input);
	}
	free(s->elems);
	wfe_run_plan_free(s->rp);
	free(s);
}

/* A worker claims element e (the server's claim: running) and reports. */
static const char *
report(msrv *s, int64_t e, int complete, const char *value, int retryable)
{
	const char *gate;
	int			map = wfe_run_plan_find(s->rp, "render");

	if (s->elems[e].row.state == WFE_QUEUED)
		s->elems[e].row.state = WFE_RUNNING;
	s->element_loads = 0;
	m_io.arg = s;
	wfe_step_begin(&step, s->rp, &s->run, &m_io);
	wfe_step_element(&step, map, e);
	gate = wfe_step_gate(&step, map, complete ? WFE_CB_COMPLETE : WFE_CB_FAIL,
						 s->elems[e].row.attempt, s->elems[e].row.fence, 0);
	if (gate == NULL && complete)
		wfe_step_completed(&step, map, value);
	else if (gate == NULL)
		wfe_step_failed(&step, map, value, retryable);
	apply(s);
	return gate ? gate : "accepted";
}

static void
retry_due(msrv *s, int64_t e)
{
	int			map = wfe_run_plan_find(s->rp, "render");

	wfe_step_begin(&step, s->rp, &s->run, &m_io);
	wfe_step_element(&step, map, e);
	wfe_step_retry_due(&step, map, s->elems[e].row.attempt, s->elems[e].row.fence);
	apply(s);
}

static int
count_state(msrv *s, wfe_state st)
{
	int			n = 0;

	for (int64_t e = 0; e < s->nelems; e++)
		n += s->elems[e].row.state == st;
	return n;
}

static const char *const FLOW = HEAD MAP("    max_concurrency: 2\n    tolerated_failures: 1\n",
										 "{ lod: \"${item}\", i: \"${item_index}\" }")
AFTER("{ r: \"${stages.render.result}\" }");

static void
test_release_and_run(void)
{
	msrv	   *s = start(FLOW, "{\"lods\": [\"a\", \"b\", \"c\", \"d\"]}", 10000);
	int			map = wfe_run_plan_find(s->rp, "render");
	int			after = wfe_run_plan_find(s->rp, "after");

	ok(s->stages[map].row.state == WFE_RUNNING && s->nelems == 4, "release: the map runs with 4 elements");
	ok(strcmp(s->elems[2].input, "{\"i\":2,\"lod\":\"c\"}") == 0, "each element's input bound with item and item_index");
	ok(count_state(s, WFE_QUEUED) == 2 && s->counts.released == 2 && s->counts.total == 4,
	   "max_concurrency 2: two queued, the counter row says 2 of 4 released");
	ok(strcmp(report(s, 1, 0, "{\"code\":\"x\"}", 1), "accepted") == 0 &&
	   s->elems[1].row.state == WFE_RETRY_SCHEDULED && s->counts.released == 2,
	   "an element fails once: its retry is scheduled, nothing new released");
	retry_due(s, 1);
	ok(s->elems[1].row.state == WFE_QUEUED && s->elems[1].row.attempt == 2, "its retry: attempt 2 queued");
	ok(strcmp(report(s, 0, 1, "{\"v\":0}", 0), "accepted") == 0 && s->elems[2].row.state == WFE_QUEUED &&
	   s->counts.released == 3 && s->counts.completed == 1,
	   "element 0 completes: element 2 is released in its place");
	ok(s->element_loads <= 2 && s->element_writes <= 2,
	   "an element's end reads and writes only its row and the next one's (%lld reads, %lld writes)",
	   (long long) s->element_loads, (long long) s->element_writes);
	ok(strcmp(report(s, 0, 1, "{\"v\":9}", 0), "conflict") == 0 && s->counts.completed == 1,
	   "element 0's attempt reporting again, otherwise: conflict, nothing counted");
	report(s, 1, 0, "{\"code\":\"x\"}", 1);
	ok(s->elems[1].row.state == WFE_FAILED && s->counts.failed == 1 && s->stages[map].row.state == WFE_RUNNING,
	   "element 1 fails for good (retries exhausted): tolerated (tolerated_failures 1)");
	report(s, 2, 1, "{\"v\":2}", 0);
	ok(s->aggregations == 0 && s->elems[3].row.state == WFE_QUEUED, "no aggregation before the last element ends");
	report(s, 3, 1, "{\"v\":3}", 0);
	ok(s->aggregations == 1 && s->stages[map].row.state == WFE_COMPLETED,
	   "the last element's end: exactly one aggregation, the map completed");
	ok(strcmp(s->stages[map].result, "{\"items\":[{\"v\":0},null,{\"v\":2},{\"v\":3}],\"failed\":[1]}") == 0,
	   "the map result in element order, the failed element null and listed (%s)", s->stages[map].result);
	ok(s->stages[after].row.state == WFE_QUEUED &&
	   strstr(s->stages[after].input, "\"r\":{\"failed\":[1]") != NULL,
	   "the next stage is released with the map result");
	stop(s);
}

static void
test_tolerance_exceeded(void)
{
	msrv	   *s = start(FLOW, "{\"lods\": [\"a\", \"b\", \"c\", \"d\"]}", 10000);
	int			map = wfe_run_plan_find(s->rp, "render");

	report(s, 0, 0, "{\"code\":\"x\"}", 0);
	ok(s->stages[map].row.state == WFE_RUNNING && s->elems[2].row.state == WFE_QUEUED,
	   "one failure tolerated: the next element goes");
	report(s, 1, 0, "{\"code\":\"x\"}", 0);
	ok(s->stages[map].row.state == WFE_FAILED && strstr(s->stages[map].result, "map.failed"),
	   "a second failure: the map fails (map.failed)");
	ok(s->elems[2].row.state == WFE_CANCELLED && s->elems[3].row.state == WFE_CANCELLED,
	   "the elements under way and those waiting are cancelled");
	ok(s->run.intent == WFE_RUN_FAILED, "the map took on_failure: the run's intent is failed");
	ok(strcmp(report(s, 2, 1, "{}", 0), "late") == 0, "a cancelled element's report: late");
	stop(s);
}

static void
test_run_cancelled(void)
{
	msrv	   *s = start(FLOW, "{\"lods\": [\"a\", \"b\", \"c\"]}", 10000);
	int			map = wfe_run_plan_find(s->rp, "render");

	m_io.arg = s;
	wfe_step_begin(&step, s->rp, &s->run, &m_io);
	wfe_step_cancel(&step, "by hand");
	apply(s);
	ok(s->stages[map].row.state == WFE_CANCELLED && s->elems[0].row.state == WFE_CANCELLED &&
	   s->elems[2].row.state == WFE_CANCELLED, "a cancelled run cancels its map and the map's elements");
	ok(strcmp(report(s, 0, 1, "{}", 0), "late") == 0, "an element's report after that: late");
	stop(s);
}

static void
test_release_failures(void)
{
	msrv	   *s = start(FLOW, "{\"lods\": [1, 2, 3]}", 2);
	int			map = wfe_run_plan_find(s->rp, "render");

	ok(s->stages[map].row.state == WFE_FAILED && strstr(s->stages[map].result, "limits.map_items") &&
	   s->nelems == 0, "items over wfe.max_map_items: limits.map_items, no element");
	stop(s);
	s = start(FLOW, "{\"lods\": \"abc\"}", 10);
	ok(s->stages[map].row.state == WFE_FAILED && strstr(s->stages[map].result, "binding.type"),
	   "items that are not an array: binding.type");
	stop(s);
	s = start(FLOW, "{\"lods\": []}", 10);
	ok(s->stages[map].row.state == WFE_COMPLETED &&
	   strcmp(s->stages[map].result, "{\"failed\":[],\"items\":[]}") == 0,
	   "an empty array completes at once");
	stop(s);
	s = start(FLOW, "{}", 10);
	ok(s->stages[map].row.state == WFE_FAILED && strstr(s->stages[map].result, "binding.missing"),
	   "items missing: binding.missing");
	stop(s);
}

/* The cost rule at 10 and 10,000 elements: every element end reads at most 2 elements. */
static void
test_cost(void)
{
	for (int n = 10; n <= 10000; n *= 1000)
	{
		char	   *ctx = malloc((size_t) n * 4 + 32);
		size_t		len = 0;
		msrv	   *s;
		int64_t		worst_reads = 0,
					worst_writes = 0;

		len += sprintf(ctx + len, "{\"lods\": [");
		for (int k = 0; k < n; k++)
			len += sprintf(ctx + len, "%s%d", k ? "," : "", k % 10);
		sprintf(ctx + len, "]}");
		s = start(FLOW, ctx, 10000);
		for (int64_t e = 0; e < n; e++)
		{
			report(s, e, 1, "{}", 0);
			if (s->element_loads > worst_reads)
				worst_reads = s->element_loads;
			if (s->element_writes > worst_writes)
				worst_writes = s->element_writes;
		}
		ok(s->aggregations == 1 && worst_reads <= 2 && worst_writes <= 2,
		   "%d elements: each end read at most %lld and wrote at most %lld element rows, one aggregation",
		   n, (long long) worst_reads, (long long) worst_writes);
		stop(s);
		free(ctx);
	}
}

/*
 * An item's cache: each element is looked up under the key of its own
 * bound input when released; a hit completes it without an attempt and
 * answers no element of another input; the aggregation reads the hits'
 * results though their rows are written after the step.
 */
#define CACHED(extra) HEAD MAP(extra, "{ lod: \"${item}\" }\n      cache: { ttl_ms: 1000 }") AFTER("{}")

static void
test_element_cache(void)
{
	msrv	   *s;
	int			map;
	int			after;

	/* a, b, a at once: the two a's hit, b runs under its own key */
	next_cached_input = "{\"lod\":\"a\"}";
	next_cached_result = "{\"url\":\"cached-a\"}";
	s = start(CACHED(""), "{\"lods\": [\"a\", \"b\", \"a\"]}", 10000);
	map = wfe_run_plan_find(s->rp, "render");
	after = wfe_run_plan_find(s->rp, "after");
	ok(s->cache_lookups == 3, "each element is looked up under its own key at its release (%d lookups)",
	   s->cache_lookups);
	ok(s->elems[0].row.state == WFE_COMPLETED && s->elems[0].row.attempt == 0 &&
	   s->elems[2].row.state == WFE_COMPLETED && s->elems[2].row.attempt == 0,
	   "the elements whose input has an entry complete from it, without an attempt");
	ok(s->elems[1].row.state == WFE_QUEUED && s->elems[1].row.attempt == 1,
	   "the entry of one element's input answers no element of another: render[1] runs");
	ok(s->counts.completed == 2 && s->counts.released == 3, "the hits are counted as completed (%lld of %lld)",
	   (long long) s->counts.completed, (long long) s->counts.total);
	ok(s->stages[map].row.state == WFE_RUNNING && s->aggregations == 0, "the map runs on: one element is under way");
	ok(strcmp(report(s, 1, 1, "{\"url\":\"b\"}", 0), "accepted") == 0, "render[1] completes");
	ok(s->stages[map].row.state == WFE_COMPLETED && s->aggregations == 1, "its end aggregates, once");
	ok(s->stages[map].result && strcmp(s->stages[map].result,
		"{\"items\":[{\"url\":\"cached-a\"},{\"url\":\"b\"},{\"url\":\"cached-a\"}],\"failed\":[]}") == 0,
	   "the result holds the cached results in element order: %s", s->stages[map].result);
	ok(s->stages[after].row.state == WFE_QUEUED, "the next stage is released");
	stop(s);

	/* every element hits: the map completes at its release */
	s = start(CACHED(""), "{\"lods\": [\"a\", \"a\"]}", 10000);
	map = wfe_run_plan_find(s->rp, "render");
	ok(s->stages[map].row.state == WFE_COMPLETED && s->aggregations == 1 &&
	   strcmp(s->stages[map].result, "{\"items\":[{\"url\":\"cached-a\"},{\"url\":\"cached-a\"}],\"failed\":[]}") == 0,
	   "every element a hit: the map completes at its release, aggregated once: %s", s->stages[map].result);
	stop(s);

	/* max_concurrency 1: b runs; its end releases the a's, which hit, and aggregates them */
	s = start(CACHED("    max_concurrency: 1\n"), "{\"lods\": [\"b\", \"a\", \"a\"]}", 10000);
	map = wfe_run_plan_find(s->rp, "render");
	ok(s->cache_lookups == 1 && s->elems[0].row.state == WFE_QUEUED && s->elems[1].row.state == WFE_WAITING,
	   "max_concurrency 1: render[0] looked up and runs, the others wait");
	ok(strcmp(report(s, 0, 1, "{\"url\":\"b\"}", 0), "accepted") == 0, "render[0] completes");
	ok(s->cache_lookups == 3 && s->elems[1].row.state == WFE_COMPLETED && s->elems[2].row.state == WFE_COMPLETED,
	   "the next elements released are looked up with their own inputs, and hit");
	ok(s->stages[map].row.state == WFE_COMPLETED && s->aggregations == 1 &&
	   strcmp(s->stages[map].result,
			  "{\"items\":[{\"url\":\"b\"},{\"url\":\"cached-a\"},{\"url\":\"cached-a\"}],\"failed\":[]}") == 0,
	   "... and the same step aggregates once, with their results: %s", s->stages[map].result);
	stop(s);
	next_cached_input = next_cached_result = NULL;
}

/* An operator's action on one element (wfe._operate): the problem, or NULL and the action applied. */
static const char *
operate(msrv *s, const char *name, wfe_operation what, const char *value)
{
	static char problem[512];
	int64_t		elem = -1;
	int			i = wfe_map_element_of(s->rp, name, &elem);
	const char *p;

	m_io.arg = s;
	wfe_step_begin(&step, s->rp, &s->run, &m_io);
	wfe_step_element(&step, i, elem);
	p = wfe_step_operate_problem(&step, i, what, value);
	if (p != NULL)
	{
		snprintf(problem, sizeof(problem), "%s", p);
		wfe_step_end(&step);
		return problem;
	}
	wfe_step_operate(&step, i, what, value, "ops", "by hand");
	apply(s);
	return NULL;
}

/* Elements under way: queued or running (what max_concurrency bounds). */
static int
under_way(msrv *s)
{
	return count_state(s, WFE_QUEUED) + count_state(s, WFE_RUNNING);
}

/*
 * A map item's concurrency: {key, max}: the compiler's rules, and each
 * element's key bound at the map's release with item and item_index,
 * handed to the server with the elements (MAP_START), so each element row
 * carries its own key for the claim to gate.
 */
#define KEYED(key, max) HEAD MAP("    max_concurrency: 3\n", \
	"{ lod: \"${item.lod}\" }\n      concurrency: { key: " key ", max: " max " }") AFTER("{}")

static void
test_item_concurrency(void)
{
	static const struct
	{
		const char *src;
		const char *want;
		const char *what;
	}			cases[] = {
		{KEYED("\"${item.customer}\"", "1"), "", "concurrency on a map's item, its key from item"},
		{KEYED("\"${context.tenant}-${item_index}\"", "2"), "", "a key from the context and item_index"},
		{KEYED("\"${item.customer}\"", "0"), "schema.value /stages/0/item/concurrency/max", "max 0"},
		{KEYED("\"${item.customer}\"", "100001"), "schema.value /stages/0/item/concurrency/max",
		"max over 100000"},
		{KEYED("\"${item.customer}\"", "two"), "schema.type /stages/0/item/concurrency/max", "max not a number"},
		{KEYED("\"${nope.customer}\"", "1"), "expr.unknown_root /stages/0/item/concurrency/key",
		"an unknown root in the key"},
		{KEYED("customer", "1"), "schema.value /stages/0/item/concurrency/key", "a key that interpolates nothing"},
		{"name: t\nversion: \"1.0.0\"\ntasks:\n  - id: render\n    worker: render@1\n    queue: render\n"
			"    for_each: \"${context.lods}\"\n    concurrency: { key: \"${item.customer}\", max: 1 }\n",
		"", "a for_each task's concurrency, its key from item"},
		{"name: t\nversion: \"1.0.0\"\ntasks:\n  - id: render\n    worker: render@1\n    queue: render\n"
			"    concurrency: { key: \"${item.customer}\", max: 1 }\n",
		"expr.unknown_root /tasks/0/concurrency/key", "item in the key of a task without for_each"},
		{HEAD "  - name: render\n    type: map\n    items: \"${context.lods}\"\n"
			"    item: { workflow: child, concurrency: { key: \"${item}\", max: 1 } }\n"
			"    on_success: completed\n    on_failure: failed\n",
		"schema.value /stages/0/item/concurrency", "an item that runs a child workflow has no concurrency"},
	};
	msrv	   *s;
	int			map;

	for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++)
	{
		wfe_compile_result *r = compile_limit(cases[k].src, 0);
		const char *got = r->ok ? "" : first_diag(r);

		ok(strcmp(got, cases[k].want) == 0, "compile: %s: '%s' (got '%s')", cases[k].what, cases[k].want, got);
		wfe_compile_result_free(r);
	}
	{
		wfe_compile_result *r = compile_limit(cases[0].src, 0);

		ok(r->ok && strstr(r->plan_text, "\"concurrency\":{\"key\":\"${item.customer}\",\"max\":1}"),
		   "the plan keeps the item's concurrency");
		wfe_compile_result_free(r);
	}

	s = start(KEYED("\"${item.customer}\"", "1"),
			  "{\"lods\": [{\"lod\": 0, \"customer\": \"acme\"}, {\"lod\": 1, \"customer\": 7},"
			  " {\"lod\": 2, \"customer\": \"acme\"}, {\"lod\": 3, \"customer\": \"zeta\"}]}", 10000);
	map = wfe_run_plan_find(s->rp, "render");
	ok(s->stages[map].row.state == WFE_RUNNING && s->elems[0].concurrency_key &&
	   strcmp(s->elems[0].concurrency_key, "acme") == 0 && strcmp(s->elems[1].concurrency_key, "7") == 0 &&
	   strcmp(s->elems[3].concurrency_key, "zeta") == 0 && s->elems[2].concurrency_max == 1,
	   "each element carries its own key (a string as it is, a number its JSON) and max");
	ok(count_state(s, WFE_QUEUED) == 3, "the key gates the claim, not the release: max_concurrency's 3 are queued");
	stop(s);

	s = start(KEYED("\"${item.customer}\"", "1"),
			  "{\"lods\": [{\"lod\": 0, \"customer\": \"acme\"}, {\"lod\": 1}]}", 10000);
	ok(s->stages[map].row.state == WFE_FAILED && strstr(s->stages[map].result, "binding.missing") &&
	   strstr(s->stages[map].result, "element 1: concurrency.key") && s->nelems == 0,
	   "a key that does not bind for one element: the map's binding failure naming it, no element (%s)",
	   s->stages[map].result);
	stop(s);

	s = start(HEAD MAP("", "{ lod: \"${item}\" }") AFTER("{}"), "{\"lods\": [1, 2]}", 10000);
	ok(s->elems[0].concurrency_key == NULL, "an item without concurrency: no keys");
	stop(s);
}

/*
 * A redrive of a failed element while its map runs: the element waits for
 * a slot when max_concurrency is full (held), and the next end of one of
 * the map's elements releases it -- never more under way than the bound.
 */
static void
test_redrive_respects_max_concurrency(void)
{
	msrv	   *s = start(HEAD MAP("    max_concurrency: 2\n    tolerated_failures: 1\n", "{ lod: \"${item}\" }")
						  AFTER("{}"), "{\"lods\": [0, 1, 2, 3, 4]}", 10000);
	int			map = wfe_run_plan_find(s->rp, "render");

	report(s, 0, 0, "{\"code\":\"x\"}", 0);
	ok(s->elems[0].row.state == WFE_FAILED && under_way(s) == 2 && s->counts.released == 3,
	   "render[0] fails for good (tolerated): render[2] takes its slot, 2 under way");
	ok(operate(s, "render[0]", WFE_OPERATE_REDRIVE, NULL) == NULL, "render[0] is redriven while the map runs");
	ok(s->elems[0].row.state == WFE_WAITING && under_way(s) == 2 && s->counts.held == 1 &&
	   s->counts.failed == 0,
	   "max_concurrency full: render[0] waits for a slot (held), still 2 under way (%d)", under_way(s));
	report(s, 1, 1, "{\"v\":1}", 0);
	ok(s->elems[0].row.state == WFE_QUEUED && s->elems[0].row.attempt == 2 && s->counts.held == 0 &&
	   s->elems[3].row.state == WFE_WAITING && under_way(s) == 2,
	   "render[1] ends: the held render[0] takes its slot (attempt 2) before render[3]; 2 under way");
	report(s, 0, 1, "{\"v\":0}", 0);
	ok(s->elems[3].row.state == WFE_QUEUED && under_way(s) == 2, "render[0] ends: render[3] goes");
	report(s, 2, 1, "{\"v\":2}", 0);
	report(s, 3, 1, "{\"v\":3}", 0);
	report(s, 4, 1, "{\"v\":4}", 0);
	ok(s->stages[map].row.state == WFE_COMPLETED && s->aggregations == 1 &&
	   strcmp(s->stages[map].result, "{\"items\":[{\"v\":0},{\"v\":1},{\"v\":2},{\"v\":3},{\"v\":4}],\"failed\":[]}") == 0,
	   "the map completes once, the redriven element's result in its place: %s", s->stages[map].result);
	stop(s);

	/* a slot free: the redrive goes at once */
	s = start(HEAD MAP("    max_concurrency: 2\n    tolerated_failures: 1\n", "{ lod: \"${item}\" }")
			  AFTER("{}"), "{\"lods\": [0, 1]}", 10000);
	report(s, 0, 0, "{\"code\":\"x\"}", 0);
	ok(under_way(s) == 1, "render[0] failed for good, one under way");
	ok(operate(s, "render[0]", WFE_OPERATE_REDRIVE, NULL) == NULL && s->elems[0].row.state == WFE_QUEUED &&
	   s->counts.held == 0 && under_way(s) == 2, "a slot free: the redriven element is queued at once");
	stop(s);

	/* two held: released one per ended element, lowest index first */
	s = start(HEAD MAP("    max_concurrency: 1\n    tolerated_failures: 2\n", "{ lod: \"${item}\" }")
			  AFTER("{}"), "{\"lods\": [0, 1, 2, 3]}", 10000);
	report(s, 0, 0, "{\"code\":\"x\"}", 0);
	report(s, 1, 0, "{\"code\":\"x\"}", 0);
	ok(s->elems[2].row.state == WFE_QUEUED && under_way(s) == 1, "two failed for good, render[2] under way");
	operate(s, "render[1]", WFE_OPERATE_REDRIVE, NULL);
	operate(s, "render[0]", WFE_OPERATE_REDRIVE, NULL);
	ok(s->counts.held == 2 && under_way(s) == 1, "both redriven: both held, one under way");
	report(s, 2, 1, "{}", 0);
	ok(s->elems[0].row.state == WFE_QUEUED && s->elems[1].row.state == WFE_WAITING && under_way(s) == 1 &&
	   s->counts.held == 1, "render[2] ends: render[0] goes, render[1] still held");
	report(s, 0, 1, "{}", 0);
	ok(s->elems[1].row.state == WFE_QUEUED && s->elems[3].row.state == WFE_WAITING && under_way(s) == 1,
	   "render[0] ends: render[1] goes before render[3]");
	stop(s);
}

int
main(void)
{
	test_compiler();
	test_release_and_run();
	test_tolerance_exceeded();
	test_run_cancelled();
	test_release_failures();
	test_cost();
	test_element_cache();
	test_item_concurrency();
	test_redrive_respects_max_concurrency();
	return tap_done();
}
