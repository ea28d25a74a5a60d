/*
 * test_map_operate.c — unit tests of an operator's fail_stage and
 * redispatch of one map element NAME[i] (docs/operations.md "Operator
 * actions on one element"), and of what a map's early end does to its
 * elements under way (the cancel messages to the workers holding them).
 *
 * The step core runs against test/unit/step_harness.h's in-memory server,
 * which checks after every event that each transition is legal, fences
 * never go back, the map's counter row agrees with its elements and no
 * more run at once than max_concurrency allows.
 *
 * A standalone TAP program.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "step_harness.h"
#include "tap.h"

/* four LODs, three at once, one failure tolerated, three attempts each */
#define PLAN(extra) \
	"name: m\nversion: \"1.0.0\"\nentry: render\nstages:\n" \
	"  - name: render\n    type: map\n    items: \"${context.lods}\"\n" \
	"    max_concurrency: 3\n    tolerated_failures: 1\n" \
	"    item:\n      worker: render@1\n      queue: render\n      input: { lod: \"${item}\" }\n" \
	"      retry: { max_attempts: 3, initial_ms: 10, multiplier: 1, max_ms: 10, jitter: none }\n" extra \
	"    on_success: completed\n    on_failure: failed\n"

#define LODS "{\"lods\": [\"a\", \"b\", \"c\", \"d\"]}"

static int	M;					/* the map's stage index */

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

static void
on_violation(sh *h, const char *message)
{
	(void) h;
	diag("harness: %s", message);
}

static sh  *
open_run(wfe_run_plan *rp)
{
	sh		   *h = calloc(1, sizeof(sh));

	sh_init(h, rp, LODS, NULL);
	h->violation = on_violation;
	M = sh_stage(h, "render");
	sh_start(h);
	return h;
}

static void
close_run(sh *h, const char *scenario)
{
	ok(h->violations == 0 && h->steps > 0,
	   "%s: after each of %d events, every transition legal, fences only grow, the counter row agrees",
	   scenario, h->steps);
	sh_free(h);
	free(h);
}

/* Element e's row. */
static sh_row *
el(sh *h, int64_t e)
{
	return &h->maps[M].elems[e];
}

/* A worker's report about element e with a given attempt and fence. */
static const char *
report(sh *h, int64_t e, int complete, int attempt, int64_t fence)
{
	return sh_callback_at(h, M, e, complete ? WFE_CB_COMPLETE : WFE_CB_FAIL, attempt, fence,
						  complete ? "{\"url\": \"x\"}" : "{\"code\": \"gpu.lost\"}", 1);
}

/* The publisher's confirm of element e's dispatch (broker delivery). */
static void
publish(sh *h, int64_t e)
{
	sh_elem_enter(h, M, e);
	sh_publish(h, M);
	sh_elem_leave(h);
}

/* The cancel messages written so far for element e: how many, the last one's fence (-1: none). */
static int
cancels_of(const sh *h, int64_t e, int64_t *fence)
{
	int			n = 0;

	*fence = -1;
	for (int k = 0; k < h->ncancels; k++)
		if (h->cancels[k].stage == M && h->cancels[k].elem1 == e + 1)
		{
			n++;
			*fence = h->cancels[k].fence;
		}
	return n;
}

/* The fence of element e's last event of a type since event `from`, -1 when none or about no fence. */
static long long
event_fence(const sh *h, int from, const char *type, int64_t e)
{
	long long	f = -1;

	/* the harness records an element's events under its map's index: e is the one acted on */
	(void) e;
	for (int k = from; k < h->nevents; k++)
		if (h->events[k].stage == M && strcmp(h->events[k].type, type) == 0)
			f = h->events[k].fenced ? h->events[k].fence : -1;
	return f;
}

/* fail_stage on one element: like a worker's failure for good, never retried; tolerated_failures counts it. */
static void
test_fail_element(wfe_run_plan *rp)
{
	sh		   *h = open_run(rp);
	int64_t		fence0,
				fence1,
				asked;
	int			dead,
				mark;
	const char *no;

	ok(el(h, 0)->state == WFE_QUEUED && el(h, 2)->state == WFE_QUEUED && el(h, 3)->state == WFE_WAITING,
	   "release: three elements queued (max_concurrency 3), render[3] waits");
	sh_claim_at(h, M, 0);
	fence0 = el(h, 0)->fence;
	dead = h->ndead;
	mark = h->nevents;
	no = sh_operate_at(h, M, 0, WFE_OPERATE_FAIL, "the GPU box is gone", "ops", "host lost");
	ok(no == NULL, "fail_stage render[0] (running): allowed (%s)", no ? no : "");
	ok(el(h, 0)->state == WFE_FAILED && el(h, 0)->attempt == 1 && el(h, 0)->fence != fence0,
	   "render[0] failed at once, not retried (attempt 1 of 3), its fence changed");
	ok(el(h, 0)->error && strstr(el(h, 0)->error, "\"operator.failed\"") && strstr(el(h, 0)->error, "GPU box"),
	   "its error: operator.failed with the reason (%s)", el(h, 0)->error ? el(h, 0)->error : "null");
	ok(event_fence(h, mark, "stage.failed_by_operator", 0) == fence0,
	   "stage.failed_by_operator names the fence of the attempt it stopped");
	ok(h->ndead == dead, "no dead letter: the operator chose the failure, retries were not exhausted");
	ok(cancels_of(h, 0, &asked) == 1 && asked == fence0,
	   "the worker holding render[0] is asked to stop, with the fence it holds");
	ok(h->maps[M].counts.failed == 1 && h->rows[M].state == WFE_RUNNING,
	   "counted as one failed element: tolerated (tolerated_failures 1), the map goes on");
	ok(el(h, 3)->state == WFE_QUEUED && h->maps[M].counts.released == 4,
	   "its slot under max_concurrency went to render[3]");
	ok(strcmp(report(h, 0, 1, 1, fence0), "stale") == 0 && strcmp(report(h, 0, 0, 1, fence0), "stale") == 0 &&
	   el(h, 0)->state == WFE_FAILED && h->maps[M].counts.failed == 1,
	   "the stopped attempt's completion or failure: stale, nothing counted");
	no = sh_operate_at(h, M, 0, WFE_OPERATE_FAIL, "again", "ops", NULL);
	ok(no && strstr(no, "render[0] is failed"), "fail_stage of a failed element: refused (%s)", no ? no : "");

	/* an element awaiting its retry: failed for good, its retry timer fenced */
	sh_claim_at(h, M, 1);
	ok(strcmp(report(h, 1, 0, 1, el(h, 1)->fence), "accepted") == 0 && el(h, 1)->state == WFE_RETRY_SCHEDULED,
	   "render[1] fails once: its retry is scheduled");
	fence1 = el(h, 1)->fence;
	publish(h, 2);
	ok(el(h, 2)->state == WFE_DISPATCHED, "render[2] dispatched to a broker worker");
	mark = h->nevents;
	no = sh_operate_at(h, M, 1, WFE_OPERATE_FAIL, "give up", "ops", NULL);
	ok(no == NULL && el(h, 1)->state == WFE_FAILED && cancels_of(h, 1, &asked) == 0,
	   "fail_stage render[1] (retry_scheduled): failed; nobody holds it, no cancel message");
	ok(h->rows[M].state == WFE_FAILED && h->run.intent == WFE_RUN_FAILED,
	   "a second failed element, past tolerated_failures: the map fails and takes on_failure");
	ok(el(h, 2)->state == WFE_CANCELLED && el(h, 3)->state == WFE_CANCELLED,
	   "the elements still under way are cancelled");
	ok(cancels_of(h, 2, &asked) == 1 && event_fence(h, mark, "stage.cancelled", 2) == asked,
	   "render[2] (dispatched): a cancel message and a stage.cancelled event, both naming the fence its worker holds");
	ok(cancels_of(h, 3, &asked) == 0, "render[3] (queued, held by nobody): no cancel message");
	sh_retry_due_at(h, M, 1, 1, fence1);
	ok(el(h, 1)->state == WFE_FAILED, "render[1]'s old retry timer fires: nothing happens");
	no = sh_operate_at(h, M, 2, WFE_OPERATE_FAIL, "late", "ops", NULL);
	ok(no != NULL, "fail_stage of a cancelled element of a finished run: refused (%s)", no ? no : "");
	close_run(h, "fail_stage on elements");
}

/* redispatch of one element: the same attempt under a new fence and a new dispatch. */
static void
test_redispatch_element(wfe_run_plan *rp)
{
	sh		   *h = open_run(rp);
	int64_t		fence0;
	const char *no;

	no = sh_operate_at(h, M, 3, WFE_OPERATE_REDISPATCH, NULL, "ops", NULL);
	ok(no && strstr(no, "render[3] is waiting"), "redispatch of an element max_concurrency holds back: refused (%s)",
	   no ? no : "");
	no = sh_operate_at(h, M, 3, WFE_OPERATE_FAIL, "x", "ops", NULL);
	ok(no && strstr(no, "render[3] is waiting"), "fail_stage of an element not released yet: refused (%s)", no ? no : "");
	publish(h, 0);
	fence0 = el(h, 0)->fence;
	no = sh_operate_at(h, M, 0, WFE_OPERATE_REDISPATCH, NULL, "ops", "message lost");
	ok(no == NULL && el(h, 0)->state == WFE_QUEUED && el(h, 0)->attempt == 1 && el(h, 0)->fence > fence0,
	   "redispatch render[0] (dispatched): queued again, the same attempt, a new fence");
	ok(sh_count_ops(h, WFE_OP_ENQUEUE, M) == 1 && sh_find_op(h, WFE_OP_ENQUEUE, M)->flag == 0,
	   "one new dispatch, no new attempt");
	ok(sh_event_fence(h, "stage.redispatched", M) == fence0, "stage.redispatched names the old dispatch's fence");
	ok(strcmp(sh_callback_at(h, M, 0, WFE_CB_ACCEPT, 1, fence0, NULL, 1), "stale") == 0 &&
	   el(h, 0)->state == WFE_QUEUED, "the old message's accept_task: stale");
	publish(h, 0);
	ok(strcmp(sh_callback_at(h, M, 0, WFE_CB_ACCEPT, 1, el(h, 0)->fence, NULL, 1), "accepted") == 0 &&
	   strcmp(report(h, 0, 1, 1, el(h, 0)->fence), "accepted") == 0 && h->maps[M].counts.completed == 1,
	   "the new message's accept and completion: accepted, counted once");
	ok(strcmp(report(h, 0, 1, 1, fence0), "stale") == 0, "the old fence's completion afterwards: stale");
	ok(h->maps[M].counts.completed == 1, "... nothing counted twice");
	no = sh_operate_at(h, M, 1, WFE_OPERATE_REDISPATCH, NULL, "ops", NULL);
	ok(no == NULL && el(h, 1)->state == WFE_QUEUED, "redispatch render[1] (queued): allowed");
	sh_claim_at(h, M, 2);
	no = sh_operate_at(h, M, 2, WFE_OPERATE_REDISPATCH, NULL, "ops", NULL);
	ok(no && strstr(no, "only a queued or dispatched"), "redispatch of a running element: refused (%s)", no ? no : "");
	no = sh_operate_at(h, M, 4, WFE_OPERATE_FAIL, "x", "ops", NULL);
	ok(no != NULL, "fail_stage of render[4], past the end: refused (%s)", no ? no : "");
	no = sh_operate_at(h, M, -1, WFE_OPERATE_FAIL, "x", "ops", NULL);
	ok(no != NULL, "fail_stage of the map's own name: refused (%s)", no ? no : "");
	close_run(h, "redispatch of elements");
}

/* A map's early end asks every broker worker holding one of its elements to stop. */
static void
test_cancel_messages(wfe_run_plan *rp)
{
	sh		   *h = open_run(rp);
	int64_t		held0,
				held1,
				asked;
	int			mark;

	/* the run cancelled: render[0] running, render[1] dispatched, render[2] queued, render[3] waiting */
	sh_claim_at(h, M, 0);
	publish(h, 1);
	held0 = el(h, 0)->fence;
	held1 = el(h, 1)->fence;
	mark = h->nevents;
	ok(strcmp(sh_cancel(h, "by hand"), "accepted") == 0 && h->rows[M].state == WFE_CANCELLED,
	   "the run is cancelled: its map too");
	ok(cancels_of(h, 0, &asked) == 1 && asked == held0 && cancels_of(h, 1, &asked) == 1 && asked == held1,
	   "render[0] (running) and render[1] (dispatched): one cancel message each, with the fence the worker holds");
	ok(cancels_of(h, 2, &asked) == 0 && cancels_of(h, 3, &asked) == 0,
	   "render[2] (queued) and render[3] (waiting): none, nobody holds them");
	ok(event_fence(h, mark, "stage.cancelled", 0) != -1, "each cancelled element with an attempt has its stage.cancelled");
	close_run(h, "run cancelled");

	/* timeouts: an element timed out for good, past tolerated_failures, cancels the others */
	h = open_run(rp);
	sh_claim_at(h, M, 0);
	report(h, 0, 0, 1, el(h, 0)->fence);
	sh_operate_at(h, M, 0, WFE_OPERATE_FAIL, "no", "ops", NULL);
	sh_claim_at(h, M, 2);
	held0 = el(h, 2)->fence;
	for (int a = 1; a <= 3; a++)
	{
		sh_claim_at(h, M, 1);
		sh_expire_at(h, M, 1, "execution");
		if (el(h, 1)->state == WFE_RETRY_SCHEDULED)
			sh_retry_due_at(h, M, 1, el(h, 1)->attempt, el(h, 1)->fence);
	}
	ok(el(h, 1)->state == WFE_TIMED_OUT && el(h, 1)->attempt == 3 && h->rows[M].state == WFE_FAILED,
	   "render[1] timed out three times: a second failure, the map fails");
	ok(cancels_of(h, 1, &asked) == 0,
	   "the timed-out attempt itself gets no cancel message (as no stage's timeout does: its worker is presumed gone)");
	ok(cancels_of(h, 2, &asked) == 1 && asked == held0 && el(h, 2)->state == WFE_CANCELLED,
	   "render[2], running when the map failed: cancelled, its worker asked to stop");
	close_run(h, "element timed out");
}

int
main(void)
{
	wfe_run_plan *rp = sh_plan(PLAN(""), 1);

	test_fail_element(rp);
	test_redispatch_element(rp);
	test_cancel_messages(rp);
	wfe_run_plan_free(rp);
	return tap_done();
}
