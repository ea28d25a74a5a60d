/*
 * test_map_child.c — unit tests of maps whose item executor is a child
 * workflow (src/core/engine/map_child.c; dsl.md "Stages form: new types"):
 * the compiler's rules (item: {workflow}, for_each on a workflow task, the
 * plan and its Mermaid shape) and the step core's: each element starts a
 * child run (pinned at its release, linked to NAME[i]), the child's output
 * is the element's result, child.failed / child.cancelled fail the element
 * (its retry starts a new child; tolerated_failures applies), a stale
 * child end changes nothing, max_concurrency bounds the live children, a
 * map that cannot start its children fails at release, and cancelling the
 * map asks the server to cancel its elements' children.
 *
 * The step core runs against a small in-memory server (as in test_map.c):
 * plan-stage rows and element rows, the counter row, the children started,
 * and the ops applied as src/pg/engine.c, map.c and child.c apply them.
 *
 * A standalone TAP program.
 */
#pragma GCC diagnostic ignored "-Wunused-parameter"  /* the hooks ignore what they need not read */

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
compile(const char *src)
{
	wfe_compile_options opts;

	wfe_compile_options_init(&opts);
	opts.sha256 = sha256;
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
#define MAP(extra, item_extra) \
	"  - name: render\n    type: map\n    items: \"${context.lods}\"\n" extra \
	"    item:\n      workflow: publish-asset\n      input: { lod: \"${item}\", i: \"${item_index}\" }\n" \
	"      retry: { max_attempts: 2, initial_ms: 10, multiplier: 1, max_ms: 10, jitter: none }\n" item_extra \
	"    on_success: after\n    on_failure: failed\n"
#define AFTER \
	"  - name: after\n    type: action\n    action: note@1\n    input: { r: \"${stages.render.result}\" }\n" \
	"    on_success: completed\n    on_failure: failed\n"

static void
test_compiler(void)
{
	static const struct
	{
		const char *src;
		const char *want;		/* "" compiles */
		const char *what;
	}			cases[] = {
		{HEAD MAP("    max_concurrency: 2\n", "") AFTER, "", "a map whose item is a child workflow"},
		{HEAD MAP("", "      queue: render\n") AFTER, "schema.value /stages/0/item/queue",
		"a child workflow item has no queue"},
		{HEAD MAP("", "      cache: { ttl_ms: 1000 }\n") AFTER, "schema.value /stages/0/item/cache",
		"a child workflow item has no cache"},
		{HEAD "  - name: render\n    type: map\n    items: \"${context.lods}\"\n"
			"    item: { workflow: publish-asset, action: note@1 }\n    on_success: completed\n    on_failure: failed\n",
		"schema.required /stages/0/item", "a child workflow and an action: one executor only"},
		{HEAD "  - name: render\n    type: map\n    items: \"${context.lods}\"\n"
			"    item: { workflow: \"Bad Name\" }\n    on_success: completed\n    on_failure: failed\n",
		"schema.value /stages/0/item/workflow", "an item workflow that is no workflow name"},
		{"name: t\nversion: \"1.0.0\"\ntasks:\n  - id: render\n    workflow: publish-asset@1.0.0\n"
			"    for_each: \"${context.lods}\"\n    max_concurrency: 3\n    input: { lod: \"${item}\" }\n",
		"", "a workflow task's for_each"},
		{"name: t\nversion: \"1.0.0\"\ntasks:\n  - id: render\n    workflow: publish-asset\n"
			"    max_concurrency: 3\n",
		"schema.value /tasks/0", "a workflow task's max_concurrency without for_each"},
		{"name: t\nversion: \"1.0.0\"\ntasks:\n  - id: render\n    workflow: publish-asset\n"
			"    input: { lod: \"${item}\" }\n",
		"expr.unknown_root /tasks/0/input/lod", "item in a workflow task without for_each"},
	};

	for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++)
	{
		wfe_compile_result *r = compile(cases[k].src);
		const char *got = r->ok ? "" : first_diag(r);

		ok(strcmp(got, cases[k].want) == 0, "compile: %s: '%s' (got '%s')", cases[k].what, cases[k].want, got);
		wfe_compile_result_free(r);
	}
	{
		wfe_compile_result *r = compile(HEAD MAP("    max_concurrency: 2\n", "") AFTER);
		char	   *mm = r->ok ? wfe_plan_mermaid(r->plan) : NULL;

		ok(r->ok && strstr(r->plan_text, "\"item\":{\"execution_deadline_ms\"") &&
		   strstr(r->plan_text, "\"workflow\":\"publish-asset\"") &&
		   !strstr(r->plan_text, "\"contracts\":[\"note@1\",\"publish-asset\""),
		   "the plan: the item names its workflow, which is no contract");
		ok(mm && strstr(mm, "s0[/\"render<br/><i>map: workflow publish-asset, 2 at once</i>\"/]"),
		   "Mermaid draws the map naming its child workflow and max_concurrency");
		free(mm);
		wfe_compile_result_free(r);
	}
}

/* ---------------------------------------------------------------------
 * A small in-memory server for the step core
 * --------------------------------------------------------------------- */

#define MAX_ELEMS 16

typedef struct mrow
{
	wfe_row		row;
	char	   *result;
	char	   *input;
} mrow;

/* A child run the server started: for which element, attempt and fence, with what context. */
typedef struct mchild
{
	int64_t		elem;
	int			attempt;
	int64_t		fence;
	char	   *version;
	char	   *context;
} mchild;

typedef struct msrv
{
	wfe_run_plan *rp;
	wfe_run		run;
	mrow		stages[8];
	mrow		elems[MAX_ELEMS];
	int64_t		nelems;
	wfe_map_counts counts;
	uint32_t	fence_seq;
	int			aggregations;
	int			map_cancels;	/* MAP_CANCEL ops: the server cancels the elements' children */
	mchild		children[64];
	int			nchildren;
	const char *child_version;	/* what io->child answers (NULL: none) */
	int			child_depth;
	const char *context;
	char	   *output;			/* the run's output, bound at its completed intent */
} msrv;

static wfe_step step;

static char *
dup(const char *s)
{
	return s ? strdup(s) : NULL;
}

static void
m_load(void *arg, int i, wfe_row *row)
{
	*row = ((msrv *) arg)->stages[i].row;
	row->loaded = 0;
}

static void
m_load_element(void *arg, int i, int64_t elem, wfe_row *row)
{
	msrv	   *s = arg;

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
	*c = ((msrv *) arg)->counts;
}

/* The aggregation as q_results computes it, element elem ending with elem_result. */
static const char *
m_map_results(void *arg, int i, int64_t elem, const char *elem_result)
{
	msrv	   *s = arg;
	static char out[4096];
	size_t		n = 0;
	json_object *failed = json_object_new_array();

	s->aggregations++;
	n += snprintf(out + n, sizeof(out) - n, "{\"items\":[");
	for (int64_t k = 0; k < s->nelems; k++)
	{
		const char *r = k == elem ? elem_result :
			s->elems[k].row.state == WFE_COMPLETED ? s->elems[k].result : NULL;

		if (r == NULL)
			json_object_array_add(failed, json_object_new_int64(k));
		n += snprintf(out + n, sizeof(out) - n, "%s%s", k ? "," : "", r ? r : "null");
	}
	snprintf(out + n, sizeof(out) - n, "],\"failed\":%s}",
			 json_object_to_json_string_ext(failed, JSON_C_TO_STRING_PLAIN));
	json_object_put(failed);
	return out;
}

static int64_t
m_limit(void *arg)
{
	return 10000;
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

static void
m_cache_entry(void *arg, int i, const char *input, wfe_cache_entry *e)
{
	memset(e, 0, sizeof(*e));
	e->key = "sha256:0";
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

/* The stored input of stage i, or of the step's current element (as io_stage_input). */
static const char *
m_stage_input(void *arg, int i)
{
	msrv	   *s = arg;

	if (i == step.elem_map && step.elem >= 0)
		return s->elems[step.elem].input;
	return s->stages[i].input;
}

static void
m_child(void *arg, int i, wfe_child *c)
{
	msrv	   *s = arg;

	c->version = s->child_version;
	c->depth = s->child_depth;
	c->max_depth = 8;
}

/* The cancelled elements, ascending (q_cancelled). */
static int64_t
m_map_cancelled(void *arg, int i, int64_t *out, int64_t max)
{
	msrv	   *s = arg;
	int64_t		n = 0;

	for (int64_t e = 0; e < s->nelems && n < max; e++)
		if (s->elems[e].row.state == WFE_CANCELLED)
			out[n++] = e;
	return n;
}

static wfe_step_io m_io = {
	.load = m_load,.result = m_result,.context = m_context,.output = m_output,
	.input_schema = m_no_schema,.random = m_random,.fence_bits = m_fence_bits,
	.output_schema = m_no_schema,.cache_entry = m_cache_entry,.cache_leader = m_null,
	.buffered_signal = m_buffered,.now_us = m_now,.stage_input = m_stage_input,
	.child = m_child,.map_cancelled = m_map_cancelled,
	.load_element = m_load_element,.map_counts = m_map_counts,.map_results = m_map_results,
	.max_map_items = m_limit
};

/* An attempt queued (ENQUEUE) or parked running (PARK): its state, attempt, fence and bound input. */
static void
start_attempt(mrow *m, wfe_state state, int attempt, const wfe_op *op)
{
	m->row.state = state;
	m->row.attempt = attempt;
	m->row.fence = op->fence;
	m->row.outcome = 0;
	if (op->json)
	{
		free(m->input);
		m->input = dup(op->json);
	}
}

/* Apply the step's ops as engine.c, map.c and child.c do, then end it. */
static void
apply(msrv *s)
{
	for (int k = 0; k < step.nops; k++)
	{
		const wfe_op *op = &step.ops[k];
		mrow	   *m = op->stage < 0 ? NULL : op->elem >= 0 ? &s->elems[op->elem] : &s->stages[op->stage];

		switch (op->kind)
		{
			case WFE_OP_ENQUEUE:
				start_attempt(m, WFE_QUEUED, m->row.attempt + op->flag, op);
				break;
			case WFE_OP_PARK:
				start_attempt(m, WFE_RUNNING, op->attempt, op);
				break;
			case WFE_OP_CHILD:
				{
					mchild	   *c = &s->children[s->nchildren++];

					c->elem = op->elem;
					c->attempt = op->attempt;
					c->fence = op->fence;
					c->version = dup(op->json2);
					c->context = dup(op->json);
				}
				break;
			case WFE_OP_RESET:
				m->row.state = WFE_WAITING;
				m->row.outcome = 0;
				break;
			case WFE_OP_COMPLETE:
				m->row.state = WFE_COMPLETED;
				m->row.outcome = WFE_COMPLETED;
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
			case WFE_OP_MAP_START:
				{
					json_object *in = wfe_json_parse(op->json);

					ok(strcmp(op->text, "workflow") == 0, "the elements' rows are of kind workflow");
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
						s->elems[e].input = dup(json_object_get_string(json_object_array_get_idx(in, e)));
					}
					s->counts = op->counts;
					json_object_put(in);
				}
				break;
			case WFE_OP_MAP_COUNTS:
				s->counts = op->counts;
				break;
			case WFE_OP_MAP_CANCEL:
				s->map_cancels++;
				for (int64_t e = 0; e < s->nelems; e++)
					if (s->elems[e].row.state == WFE_WAITING || WFE_STATE_IN_FLIGHT(s->elems[e].row.state))
					{
						s->elems[e].row.state = WFE_CANCELLED;
						s->elems[e].row.fence += (int64_t) 1 << 32;
					}
				break;
			case WFE_OP_INTENT:
				s->run.intent = op->state;
				free(s->output);
				s->output = dup(op->json);
				break;
			case WFE_OP_FINISH:
				s->run.state = op->state;
				s->run.finished = 1;
				break;
			case WFE_OP_REOPEN:
				s->run.state = WFE_RUN_RUNNING;
				s->run.intent = -1;
				s->run.finished = 0;
				break;
			default:
				break;
		}
	}
	wfe_step_end(&step);
}

static msrv *
start(const char *src, const char *context, const char *version, int depth)
{
	msrv	   *s = calloc(1, sizeof(msrv));
	wfe_compile_result *r = compile(src);
	char		err[256];

	if (!r->ok)
	{
		printf("# compile failed: %s\n", first_diag(r));
		abort();
	}
	s->rp = wfe_run_plan_build(1, r->plan_text, err, sizeof(err));
	wfe_compile_result_free(r);
	s->context = context;
	s->child_version = version;
	s->child_depth = depth;
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
	for (int e = 0; e < MAX_ELEMS; e++)
	{
		free(s->elems[e].result);
		free(s->elems[e].input);
	}
	for (int i = 0; i < 8; i++)
	{
		free(s->stages[i].result);
		free(s->stages[i].input);
	}
	for (int c = 0; c < s->nchildren; c++)
	{
		free(s->children[c].version);
		free(s->children[c].context);
	}
	wfe_run_plan_free(s->rp);
	free(s->output);
	free(s);
}

/* The latest child run started for element e, or NULL. */
static mchild *
child_of(msrv *s, int64_t e)
{
	for (int c = s->nchildren - 1; c >= 0; c--)
		if (s->children[c].elem == e)
			return &s->children[c];
	return NULL;
}

/* Element e's latest child ended (the child_ended timer, as engine.c steps it). */
static void
child_ended(msrv *s, int64_t e, const char *state, const char *output)
{
	int			map = wfe_run_plan_find(s->rp, "render");
	mchild	   *c = child_of(s, e);

	wfe_step_begin(&step, s->rp, &s->run, &m_io);
	wfe_step_element(&step, map, e);
	wfe_step_child_ended(&step, map, c->attempt, c->fence, 100 + (int64_t) (c - s->children), state, output);
	apply(s);
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

static const char *const FLOW = HEAD MAP("    max_concurrency: 2\n    tolerated_failures: 1\n", "") AFTER;

static void
test_elements_run_children(void)
{
	msrv	   *s = start(FLOW, "{\"lods\": [\"a\", \"b\", \"c\", \"d\"]}", "1.2.0", 1);
	int			map = wfe_run_plan_find(s->rp, "render");
	int			after = wfe_run_plan_find(s->rp, "after");
	int			before;

	ok(s->stages[map].row.state == WFE_RUNNING && s->nelems == 4, "release: the map runs with 4 elements");
	ok(s->nchildren == 2 && s->children[0].elem == 0 && s->children[1].elem == 1 &&
	   count_state(s, WFE_RUNNING) == 2 && count_state(s, WFE_WAITING) == 2,
	   "max_concurrency 2: two elements start a child run each, two wait");
	ok(strcmp(s->children[1].context, "{\"i\":1,\"lod\":\"b\"}") == 0 &&
	   strcmp(s->children[1].version, "1.2.0") == 0 && s->children[1].attempt == 1 &&
	   s->children[1].fence == s->elems[1].row.fence,
	   "a child's context is its element's bound input, pinned at the version active at release, for the element's attempt and fence");
	child_ended(s, 0, "completed", "{\"url\":\"a.glb\"}");
	ok(s->elems[0].row.state == WFE_COMPLETED && strcmp(s->elems[0].result, "{\"url\":\"a.glb\"}") == 0,
	   "the child's output is the element's result");
	ok(s->nchildren == 3 && s->children[2].elem == 2 && s->elems[2].row.state == WFE_RUNNING &&
	   s->counts.completed == 1 && s->counts.released == 3,
	   "a live child ended: the next element's child starts in its place");
	child_ended(s, 1, "failed", NULL);
	ok(s->elems[1].row.state == WFE_RETRY_SCHEDULED && s->nchildren == 3 && s->counts.failed == 0,
	   "child.failed fails the element's attempt: its retry is scheduled, no child yet");
	retry_due(s, 1);
	ok(s->nchildren == 4 && child_of(s, 1)->attempt == 2 && s->elems[1].row.state == WFE_RUNNING &&
	   strcmp(child_of(s, 1)->context, "{\"i\":1,\"lod\":\"b\"}") == 0,
	   "the retry starts a new child run (attempt 2) with the same context");
	before = s->nchildren;
	{
		/* the first child of element 1 ends late: recorded, never applied */
		wfe_step_begin(&step, s->rp, &s->run, &m_io);
		wfe_step_element(&step, map, 1);
		wfe_step_child_ended(&step, map, 1, s->children[1].fence, 101, "completed", "{\"late\":true}");
		apply(s);
	}
	ok(s->elems[1].row.state == WFE_RUNNING && s->nchildren == before && s->counts.completed == 1,
	   "a superseded child's end changes nothing");
	child_ended(s, 1, "cancelled", NULL);
	ok(s->elems[1].row.state == WFE_FAILED && s->counts.failed == 1 && s->stages[map].row.state == WFE_RUNNING &&
	   strstr(s->elems[1].result, "child.cancelled") != NULL,
	   "child.cancelled on the last attempt fails the element for good: tolerated (tolerated_failures 1)");
	ok(s->elems[3].row.state == WFE_RUNNING && child_of(s, 3) != NULL, "the last element's child starts");
	child_ended(s, 2, "completed", "{\"url\":\"c.glb\"}");
	ok(s->aggregations == 0, "no aggregation before the last element ends");
	child_ended(s, 3, "completed", "{\"url\":\"d.glb\"}");
	ok(s->aggregations == 1 && s->stages[map].row.state == WFE_COMPLETED &&
	   strcmp(s->stages[map].result,
			  "{\"items\":[{\"url\":\"a.glb\"},null,{\"url\":\"c.glb\"},{\"url\":\"d.glb\"}],\"failed\":[1]}") == 0,
	   "the last child's end: one aggregation, the children's outputs in element order (%s)",
	   s->stages[map].result ? s->stages[map].result : "null");
	ok(s->stages[after].row.state == WFE_QUEUED || s->stages[after].row.state == WFE_RUNNING ||
	   s->stages[after].row.state == WFE_COMPLETED, "the run goes on past the map");
	stop(s);
}

static void
test_tolerance_and_cancel(void)
{
	msrv	   *s = start(FLOW, "{\"lods\": [\"a\", \"b\", \"c\"]}", "1.2.0", 1);
	int			map = wfe_run_plan_find(s->rp, "render");

	child_ended(s, 0, "failed", NULL);
	retry_due(s, 0);
	child_ended(s, 0, "failed", NULL);
	ok(s->elems[0].row.state == WFE_FAILED && s->stages[map].row.state == WFE_RUNNING && s->map_cancels == 0,
	   "one element failed for good: tolerated");
	child_ended(s, 1, "cancelled", NULL);
	retry_due(s, 1);
	child_ended(s, 1, "failed", NULL);
	ok(s->stages[map].row.state == WFE_FAILED && strstr(s->stages[map].result, "map.failed") &&
	   s->map_cancels == 1 && s->elems[2].row.state == WFE_CANCELLED,
	   "a second: the map fails (map.failed), its live element is cancelled (the server cancels its child)");
	ok(s->run.intent == WFE_RUN_FAILED, "the map took on_failure: the run's intent is failed");
	stop(s);

	s = start(FLOW, "{\"lods\": [\"a\", \"b\", \"c\"]}", "1.2.0", 1);
	m_io.arg = s;
	wfe_step_begin(&step, s->rp, &s->run, &m_io);
	wfe_step_cancel(&step, "by hand");
	apply(s);
	ok(s->stages[map].row.state == WFE_CANCELLED && s->map_cancels == 1 &&
	   s->elems[0].row.state == WFE_CANCELLED && s->elems[2].row.state == WFE_CANCELLED,
	   "a cancelled run cancels the map and its elements: cancellation flows down to their children");
	{
		int			n = s->nchildren;

		child_ended(s, 0, "cancelled", NULL);
		ok(s->nchildren == n && s->elems[0].row.state == WFE_CANCELLED,
		   "the cancelled child's end afterwards: recorded, nothing applied, no new child");
	}
	stop(s);
}

static void
test_release_failures(void)
{
	msrv	   *s = start(FLOW, "{\"lods\": [\"a\"]}", NULL, 1);
	int			map = wfe_run_plan_find(s->rp, "render");

	ok(s->stages[map].row.state == WFE_FAILED && strstr(s->stages[map].result, "contract.unknown") &&
	   s->nelems == 0 && s->nchildren == 0,
	   "a child workflow with no active version: the map fails at release (contract.unknown), no element");
	stop(s);
	s = start(FLOW, "{\"lods\": [\"a\"]}", "1.2.0", 9);
	ok(s->stages[map].row.state == WFE_FAILED && strstr(s->stages[map].result, "limits.workflow_depth") &&
	   s->nchildren == 0, "children past wfe.max_workflow_depth: limits.workflow_depth, no child");
	stop(s);
	s = start(FLOW, "{\"lods\": []}", "1.2.0", 1);
	ok(s->stages[map].row.state == WFE_COMPLETED && s->nchildren == 0, "an empty array: completed, no child");
	stop(s);
}

/* An operator's action on one element (wfe._operate): the problem, or NULL and the action applied. */
static const char *
operate(msrv *s, const char *name, wfe_operation what, const char *value)
{
	static char problem[512];
	int64_t		elem = -1;
	int			i = wfe_map_element_of(s->rp, name, &elem);
	const char *p;

	if (i < 0)
		i = wfe_run_plan_find(s->rp, name);
	m_io.arg = s;
	wfe_step_begin(&step, s->rp, &s->run, &m_io);
	if (elem >= 0)
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

/* The run's finalising: its intent reached, nothing to finalise, finished (engine.c's last step). */
static void
settle(msrv *s)
{
	if (s->run.intent >= 0 && !s->run.finished)
	{
		s->run.finished = 1;
		s->run.state = s->run.intent;
	}
}

static void
test_operator_on_elements(void)
{
	static const char *const TIGHT = HEAD MAP("    max_concurrency: 2\n", "") AFTER;
	msrv	   *s = start(TIGHT, "{\"lods\": [\"a\", \"b\", \"c\", \"d\"]}", "1.2.0", 1);
	int			map = wfe_run_plan_find(s->rp, "render");
	const char *p;
	int			n;

	child_ended(s, 0, "completed", "{\"url\":\"a\"}");
	child_ended(s, 1, "failed", NULL);
	retry_due(s, 1);
	child_ended(s, 1, "failed", NULL);
	settle(s);
	ok(s->stages[map].row.state == WFE_FAILED && s->elems[1].row.state == WFE_FAILED &&
	   s->elems[2].row.state == WFE_CANCELLED && s->elems[3].row.state == WFE_CANCELLED &&
	   s->run.state == WFE_RUN_FAILED,
	   "render[1] failed for good past tolerated_failures 0: the map failed, render[2] (live) and render[3] (waiting) cancelled, the run failed");
	p = operate(s, "render[0]", WFE_OPERATE_REDRIVE, NULL);
	ok(p && strstr(p, "element render[0] is completed, not failed"), "redrive of a completed element: refused (%s)", p ? p : "");
	p = operate(s, "render", WFE_OPERATE_REDRIVE, NULL);
	ok(p && strstr(p, "is a map"), "redrive of the map's own name: refused, it has no attempt of its own (%s)", p ? p : "");
	n = s->nchildren;
	p = operate(s, "render[1]", WFE_OPERATE_REDRIVE, NULL);
	ok(p == NULL && s->run.state == WFE_RUN_RUNNING && s->run.intent == -1 && s->stages[map].row.state == WFE_RUNNING,
	   "redrive render[1]: the run reopens, the map runs again");
	ok(s->elems[1].row.state == WFE_RUNNING && child_of(s, 1)->attempt == 3 &&
	   s->elems[2].row.state == WFE_RUNNING && s->elems[3].row.state == WFE_WAITING && s->nchildren == n + 2,
	   "render[1] starts a new child (attempt 3); render[2], cancelled while live, starts again; render[3] waits its turn");
	ok(s->counts.failed == 0 && s->counts.released == 3, "the counter row: the failure no longer counted");
	child_ended(s, 1, "completed", "{\"url\":\"b\"}");
	ok(s->elems[3].row.state == WFE_RUNNING, "max_concurrency holds: render[3] starts when render[1] ends");
	child_ended(s, 2, "completed", "{\"url\":\"c\"}");
	child_ended(s, 3, "failed", NULL);
	retry_due(s, 3);
	child_ended(s, 3, "failed", NULL);
	settle(s);
	ok(s->stages[map].row.state == WFE_FAILED && s->run.state == WFE_RUN_FAILED, "render[3] fails for good: the map and the run fail again");
	p = operate(s, "render[3]", WFE_OPERATE_SKIP, "{\"url\":\"by-hand\"}");
	ok(p == NULL && s->elems[3].row.state == WFE_COMPLETED && s->aggregations == 1 &&
	   s->stages[map].row.state == WFE_COMPLETED &&
	   strcmp(s->stages[map].result,
			  "{\"items\":[{\"url\":\"a\"},{\"url\":\"b\"},{\"url\":\"c\"},{\"url\":\"by-hand\"}],\"failed\":[]}") == 0,
	   "skip render[3] with a result: the map re-aggregates its ordered result (%s)",
	   s->stages[map].result ? s->stages[map].result : "null");
	ok(s->run.intent == -1 && s->run.state == WFE_RUN_RUNNING, "... and the run continues past the map");
	stop(s);

	s = start(FLOW, "{\"lods\": [\"a\", \"b\", \"c\"]}", "1.2.0", 1);
	child_ended(s, 0, "failed", NULL);
	retry_due(s, 0);
	child_ended(s, 0, "failed", NULL);
	p = operate(s, "render[0]", WFE_OPERATE_SKIP, "{\"url\":\"x\"}");
	ok(p == NULL && s->elems[0].row.state == WFE_COMPLETED && s->counts.failed == 0 && s->counts.completed == 1 &&
	   s->stages[map].row.state == WFE_RUNNING,
	   "a tolerated failure, the map still running: skip completes the element, the counter row follows");
	p = operate(s, "render[1]", WFE_OPERATE_SKIP, "{}");
	ok(p && strstr(p, "is running, not failed"), "skip of an element under way: refused (%s)", p ? p : "");
	stop(s);
}

/* The run's output reads the map's result (dsl.md "Run output"). */
static void
test_run_output(void)
{
	msrv	   *s = start(HEAD "  - name: render\n    type: map\n    items: \"${context.lods}\"\n"
						  "    item: { workflow: publish-asset, input: { lod: \"${item}\" } }\n"
						  "    on_success: completed\n    on_failure: failed\n"
						  "output: { urls: \"${stages.render.result.items}\" }\n",
						  "{\"lods\": [\"a\", \"b\"]}", "1.2.0", 1);

	child_ended(s, 0, "completed", "{\"url\":\"a\"}");
	child_ended(s, 1, "completed", "{\"url\":\"b\"}");
	ok(s->run.intent == WFE_RUN_COMPLETED && s->output &&
	   strcmp(s->output, "{\"urls\":[{\"url\":\"a\"},{\"url\":\"b\"}]}") == 0,
	   "the run's output template reads the map's result (%s)", s->output ? s->output : "null");
	stop(s);
}

int
main(void)
{
	test_compiler();
	test_elements_run_children();
	test_tolerance_and_cancel();
	test_release_failures();
	test_operator_on_elements();
	test_run_output();
	return tap_done();
}
