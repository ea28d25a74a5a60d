/*
 * test_child.c — unit tests of workflow stages in the step core
 * (src/core/engine/child.c; runtime.md "Child runs"): releasing one parks
 * it and starts a child run for its attempt; the child's end completes it
 * with the child's output or fails it with child.failed / child.cancelled;
 * a retry or a redrive starts a new child; a late end changes nothing; an
 * unknown child, the depth limit and the child's context_schema are
 * binding failures that take the failure route.
 *
 * Same harness as test_step.c (step_harness.h: rows in memory, every op
 * applied as engine.c applies it, every transition checked).  A TAP program.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include "step_harness.h"

#include "tap.h"

static void
on_violation(sh *h, const char *message)
{
	(void) h;
	printf("# harness: %s\n", message);
}

/* A parent calling publish-asset, then a worker reading the child's output. */
static const char *PARENT =
"name: parent\n"
"version: \"1.0.0\"\n"
"entry: publish\n"
"stages:\n"
"  - name: publish\n"
"    type: workflow\n"
"    workflow: publish-asset\n"
"    input: { asset: \"${context.asset}\" }\n"
"    retry: { max_attempts: 2, initial_ms: 1000, jitter: none }\n"
"    on_success: after\n"
"    on_failure: failed\n"
"  - name: after\n"
"    type: worker\n"
"    queue: q\n"
"    worker: w.a@1\n"
"    input: { url: \"${stages.publish.result.url}\" }\n"
"    on_success: completed\n"
"    on_failure: failed\n";

/* The tasks form: a pinned child, then an action after it. */
static const char *TASKS =
"name: tasks-child\n"
"version: \"1.0.0\"\n"
"tasks:\n"
"  - {id: pub, workflow: publish-asset@2.0.0, input: {a: 1}}\n"
"  - {id: ship, action: ship@1, depends_on: [pub]}\n";

static wfe_run_plan *rp_parent,
		   *rp_tasks;

static void
open_run(sh *h, const wfe_run_plan *rp, const char *context)
{
	sh_init(h, rp, context, NULL);
	h->violation = on_violation;
}

static void
close_run(sh *h, const char *scenario)
{
	ok(h->violations == 0 && h->steps > 0,
	   "%s: after each of %d events, every transition legal, rows and core agree, run live",
	   scenario, h->steps);
	sh_free(h);
}

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

static int
is(const char *got, const char *want)
{
	return got != NULL && want != NULL && strcmp(got, want) == 0;
}

/* Release, the child's output as the result, and what reads it. */
static void
test_child_completes(void)
{
	sh			h;
	const sh_op *op;
	int			p;

	ok(wfe_stage_transition_legal("workflow", "waiting", "running") &&
	   wfe_stage_transition_legal("workflow", "retry_scheduled", "running") &&
	   !wfe_stage_transition_legal("worker", "retry_scheduled", "running") &&
	   !wfe_stage_transition_legal("wait", "retry_scheduled", "running"),
	   "transitions: retry_scheduled -> running is a workflow stage's only (a new child)");
	open_run(&h, rp_parent, "{\"asset\": \"a-1\"}");
	p = X(&h, "publish");
	sh_start(&h);
	ok(h.rows[p].state == WFE_RUNNING && h.rows[p].attempt == 1 && h.rows[p].queue == NULL,
	   "release: running with no worker and no queue, attempt 1");
	op = sh_find_op(&h, WFE_OP_CHILD, p);
	ok(op && is(op->text, "publish-asset") && is(op->json2, "1") && sh_json_equal(op->json, "{\"asset\": \"a-1\"}"),
	   "release: a CHILD op names the workflow, the resolved version and the bound context");
	ok(op && op->attempt == 1 && op->fence == h.rows[p].fence, "release: the child belongs to that attempt and fence");
	ok(sh_count_events_since(&h, h.mark, "stage.child_started", p) == 1, "release: event stage.child_started");
	ok(h.nchildren == 1, "release: one child run");

	sh_child_ended(&h, p, 1, h.rows[p].fence, 100, "completed", "{\"url\": \"s3://x\"}");
	ok(h.rows[p].state == WFE_COMPLETED && sh_json_equal(h.rows[p].result, "{\"url\": \"s3://x\"}"),
	   "child completed: the stage completed with the child's output");
	ok(h.rows[X(&h, "after")].state == WFE_QUEUED && is(sh_json_get(h.rows[X(&h, "after")].input, "url"), "s3://x"),
	   "child completed: the next stage reads stages.publish.result");
	ok(is(sh_json_get(sh_event_detail(&h, "stage.child_ended", p), "applied"), "true"),
	   "child completed: event stage.child_ended, applied");
	close_run(&h, "child completes");
}

/* A failed child: a retry starts a new child; a late end is recorded only; a cancelled child fails it. */
static void
test_child_fails_and_retries(void)
{
	sh			h;
	int			p;
	int64_t		first;

	open_run(&h, rp_parent, "{\"asset\": \"a-2\"}");
	p = X(&h, "publish");
	sh_start(&h);
	first = h.rows[p].fence;
	sh_child_ended(&h, p, 1, first, 100, "failed", NULL);
	ok(h.rows[p].state == WFE_RETRY_SCHEDULED, "child failed: the attempt failed, a retry is scheduled");
	ok(is(sh_json_get(h.rows[p].error, "code"), "child.failed") &&
	   is(sh_json_get(h.rows[p].error, "child_run_id"), "100"),
	   "child failed: error child.failed naming the child run");
	ok(sh_fire_retry(&h, p) == 1, "retry: the timer fires");
	ok(h.rows[p].state == WFE_RUNNING && h.rows[p].attempt == 2 && h.nchildren == 2 &&
	   h.children[1].attempt == 2 && h.children[1].fence == h.rows[p].fence,
	   "retry: a new attempt starts a new child run");
	ok(sh_json_equal(sh_find_op(&h, WFE_OP_CHILD, p)->json, "{\"asset\": \"a-2\"}"),
	   "retry: the new child gets the bound context again");

	/* the first child's end again (a duplicate timer): recorded, not applied */
	sh_child_ended(&h, p, 1, first, 100, "failed", NULL);
	ok(h.rows[p].state == WFE_RUNNING && h.rows[p].attempt == 2 &&
	   is(sh_json_get(sh_event_detail(&h, "stage.child_ended", p), "applied"), "false") &&
	   h.nops == 1,
	   "late end: an earlier attempt's child changes nothing (one event, applied false)");

	sh_child_ended(&h, p, 2, h.rows[p].fence, 101, "cancelled", NULL);
	ok(h.rows[p].state == WFE_FAILED && is(sh_json_get(h.rows[p].error, "code"), "child.cancelled"),
	   "child cancelled: child.cancelled, retries exhausted: failed");
	ok(h.run.intent == WFE_RUN_FAILED, "child cancelled: on_failure ends the run failed");

	/* an operator's redrive starts a new child run and reopens the run */
	ok(sh_operate(&h, p, WFE_OPERATE_REDRIVE, NULL, "ops", "again") == NULL, "redrive: allowed");
	ok(h.rows[p].state == WFE_RUNNING && h.rows[p].attempt == 3 && h.nchildren == 3,
	   "redrive: attempt 3 with a new child run");
	ok(h.run.intent < 0 && !h.run.finished, "redrive: the run is reopened");
	sh_child_ended(&h, p, 3, h.rows[p].fence, 102, "completed", "{\"url\": \"u\"}");
	ok(h.rows[p].state == WFE_COMPLETED, "redrive: its child's output completes the stage");
	close_run(&h, "child fails and retries");
}

/* Cancelling the parent cancels the stage; its child's later end is late. */
static void
test_parent_cancelled(void)
{
	sh			h;
	int			p;
	int64_t		fence;
	const sh_op *op;

	open_run(&h, rp_parent, "{\"asset\": \"a-3\"}");
	p = X(&h, "publish");
	sh_start(&h);
	fence = h.rows[p].fence;
	sh_cancel(&h, "stop");
	op = sh_find_op(&h, WFE_OP_CANCEL, p);
	ok(op && h.rows[p].state == WFE_CANCELLED && h.rows[p].fence != fence,
	   "parent cancelled: the workflow stage's attempt is cancelled and fenced (the server cancels its child)");
	sh_child_ended(&h, p, 1, fence, 100, "cancelled", NULL);
	ok(h.rows[p].state == WFE_CANCELLED && h.nops == 1 &&
	   is(sh_json_get(sh_event_detail(&h, "stage.child_ended", p), "applied"), "false"),
	   "parent cancelled: the child's end is recorded, never applied");
	ok(h.run.finished && h.run.state == WFE_RUN_CANCELLED, "parent cancelled: the run is cancelled");
	close_run(&h, "parent cancelled");
}

/* Unknown child, depth limit, context_schema: binding failures on the failure route. */
static void
test_child_refused(void)
{
	sh			h;
	int			p;

	open_run(&h, rp_parent, "{\"asset\": \"a-4\"}");
	h.child_version = NULL;
	p = X(&h, "publish");
	sh_start(&h);
	ok(h.rows[p].state == WFE_FAILED && is(sh_json_get(h.rows[p].error, "code"), "contract.unknown") &&
	   h.nchildren == 0, "no active version: contract.unknown, no child");
	ok(h.run.intent == WFE_RUN_FAILED, "no active version: on_failure taken");
	close_run(&h, "unknown child");

	open_run(&h, rp_parent, "{\"asset\": \"a-4\"}");
	h.child_depth = 9;
	p = X(&h, "publish");
	sh_start(&h);
	ok(h.rows[p].state == WFE_FAILED && is(sh_json_get(h.rows[p].error, "code"), "limits.workflow_depth") &&
	   h.nchildren == 0, "depth 9 over a limit of 8: limits.workflow_depth, no child");
	close_run(&h, "depth limit");

	open_run(&h, rp_parent, "{\"asset\": \"a-4\"}");
	h.child_depth = 8;
	sh_start(&h);
	ok(h.nchildren == 1, "depth 8 at a limit of 8: the child starts");
	close_run(&h, "depth at the limit");

	open_run(&h, rp_parent, "{\"asset\": \"a-4\"}");
	p = X(&h, "publish");
	sh_set_schema(&h, p, "{\"type\": \"object\", \"properties\": {\"asset\": {\"type\": \"integer\"}}}", NULL);
	sh_start(&h);
	ok(h.rows[p].state == WFE_FAILED && h.nchildren == 0 &&
	   strncmp(sh_json_get(h.rows[p].error, "code") ? sh_json_get(h.rows[p].error, "code") : "", "binding.", 8) == 0,
	   "context failing the child's context_schema: a binding failure, no child");
	ok(strstr(sh_json_get(h.rows[p].error, "message") ? sh_json_get(h.rows[p].error, "message") : "", "asset") != NULL,
	   "context failing the child's context_schema: the message names the path");
	ok(strstr(sh_json_get(h.rows[p].error, "message") ? sh_json_get(h.rows[p].error, "message") : "",
			  "(context_schema of the child workflow publish-asset@1 #/properties/asset/type)") != NULL,
	   "context failing the child's context_schema: the message names the child's schema, not a contract's");
	close_run(&h, "child context schema");
}

/* The tasks form: workflow: NAME@VERSION as a task's executor. */
static void
test_tasks_child(void)
{
	sh			h;
	int			p;
	const sh_op *op;

	open_run(&h, rp_tasks, "{}");
	h.child_version = "2.0.0";
	p = X(&h, "pub");
	sh_start(&h);
	op = sh_find_op(&h, WFE_OP_CHILD, p);
	ok(op && is(op->text, "publish-asset") && is(op->json2, "2.0.0"), "tasks: the child is NAME, version pinned");
	ok(h.rows[X(&h, "ship")].state == WFE_WAITING, "tasks: the dependent waits for the child");
	sh_child_ended(&h, p, 1, h.rows[p].fence, 7, "completed", "{}");
	ok(h.rows[X(&h, "ship")].state == WFE_QUEUED, "tasks: the child's end releases the dependent");
	close_run(&h, "tasks child");
}

int
main(void)
{
	rp_parent = sh_plan(PARENT, 1);
	rp_tasks = sh_plan(TASKS, 2);
	if (rp_parent == NULL || rp_tasks == NULL)
	{
		fprintf(stderr, "test bug: a workflow does not compile\n");
		return 2;
	}
	test_child_completes();
	test_child_fails_and_retries();
	test_parent_cancelled();
	test_child_refused();
	test_tasks_child();
	wfe_run_plan_free(rp_parent);
	wfe_run_plan_free(rp_tasks);
	return tap_done();
}
