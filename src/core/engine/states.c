/*
 * states.c — the legal stage and run transitions (states.h).
 */
#include <string.h>

#include "states.h"

static const char *const stage_names[WFE_NSTATES] = {
	"waiting", "queued", "dispatched", "running", "retry_scheduled",
	"completed", "failed", "timed_out", "skipped", "cancelled"
};

static const char *const run_names[WFE_NRUN_STATES] = {
	"running", "finalising", "completed", "failed", "cancelled"
};

/*
 * Stage transitions (runtime.md "States"); same-state updates are always
 * legal.  Only a running attempt can be reported ("Who may report"), so a
 * queued or dispatched one goes straight to failed only by an operator's
 * hand, and never to completed or retry_scheduled.
 */
const wfe_transition wfe_stage_transition_table[] = {
	{"waiting", "queued", "released: its predecessors are done"},
	{"waiting", "running", "a wait or a sleep released: running with no worker"},
	{"waiting", "completed", "a decision, fork or join resolved, or a cache hit, at release"},
	{"waiting", "failed", "input binding failed, or a join was not satisfied"},
	{"waiting", "skipped", "branch not taken, dependency failed, context gated, missing input, run aborted"},
	{"waiting", "cancelled", "the run was cancelled before the stage was released"},
	{"queued", "dispatched", "published to the broker"},
	{"queued", "running", "claimed by a poll worker, or accepted"},
	{"queued", "timed_out", "queue deadline passed"},
	{"queued", "cancelled", "run intent set or run cancelled"},
	{"dispatched", "running", "accepted by the worker"},
	{"dispatched", "queued", "publisher gave the message back"},
	{"dispatched", "timed_out", "queue deadline passed"},
	{"dispatched", "cancelled", "run intent set or run cancelled"},
	{"running", "completed", "the worker completed the attempt"},
	{"running", "failed", "the attempt failed with no retry left"},
	{"running", "retry_scheduled", "the attempt failed and a retry is due later"},
	{"running", "timed_out", "execution or heartbeat deadline passed, or a wait's timeout"},
	{"running", "cancelled", "run intent set or run cancelled: the attempt is fenced"},
	{"retry_scheduled", "queued", "the retry timer fired: new attempt, new fence"},
	{"retry_scheduled", "cancelled", "run intent set or run cancelled"},
	{"timed_out", "retry_scheduled", "the timed-out attempt is retried later"},
	{"timed_out", "queued", "operator re-drive"},
	{"timed_out", "running", "operator re-drive of a wait or a sleep"},
	{"failed", "running", "operator re-drive of a wait or a sleep"},
	{"cancelled", "running", "operator re-drive of a wait or a sleep"},
	{"failed", "queued", "operator re-drive"},
	{"cancelled", "queued", "operator re-drive"},
	{"failed", "completed", "operator skip: completed by hand"},
	{"timed_out", "completed", "operator skip: completed by hand"},
	{"retry_scheduled", "failed", "operator fail: failed by hand, no retry"},
	{"queued", "failed", "operator fail: failed by hand before anyone took it"},
	{"dispatched", "failed", "operator fail: failed by hand, the message fenced"},
	{"completed", "waiting", "the run was reopened by an operator: runs again"},
	{"failed", "waiting", "the run was reopened by an operator: runs again"},
	{"timed_out", "waiting", "the run was reopened by an operator: runs again"},
	{"skipped", "waiting", "the run was reopened by an operator: runs again"},
	{NULL, NULL, NULL}
};

/* Run transitions: a run ends only through its intent (and finalisers). */
const wfe_transition wfe_run_transition_table[] = {
	{"running", "finalising", "a terminal intent was set; finalisers run"},
	{"running", "completed", "completed intent, no finalisers"},
	{"running", "failed", "failed intent, no finalisers"},
	{"running", "cancelled", "cancelled, no finalisers"},
	{"finalising", "completed", "completed intent and every finaliser succeeded"},
	{"finalising", "failed", "failed intent, or a finaliser failed"},
	{"finalising", "cancelled", "cancelled, finalisers done"},
	{"failed", "running", "reopened by an operator's re-drive or skip of a stage"},
	{NULL, NULL, NULL}
};

const char *
wfe_state_name(wfe_state s)
{
	return (s >= 0 && s < WFE_NSTATES) ? stage_names[s] : "invalid";
}

int
wfe_state_from_name(const char *name)
{
	for (int i = 0; i < WFE_NSTATES; i++)
		if (strcmp(stage_names[i], name) == 0)
			return i;
	return -1;
}

const char *
wfe_run_state_name(wfe_run_state s)
{
	return (s >= 0 && s < WFE_NRUN_STATES) ? run_names[s] : "invalid";
}

int
wfe_run_state_from_name(const char *name)
{
	for (int i = 0; i < WFE_NRUN_STATES; i++)
		if (strcmp(run_names[i], name) == 0)
			return i;
	return -1;
}

int
wfe_transition_legal(const wfe_transition *table, const char *from, const char *to)
{
	if (strcmp(from, to) == 0)
		return 1;
	for (; table->from; table++)
		if (strcmp(table->from, from) == 0 && strcmp(table->to, to) == 0)
			return 1;
	return 0;
}

static const char *const kind_names[] = {
	"action", "worker", "decision", "fork", "join", "finaliser", "wait", "sleep", NULL
};

static const char *const skip_reasons[] = {
	"branch_not_taken", "dependency_failed", "context_gated", "missing_input", "run_aborted", NULL
};

static int
in_list(const char *const *list, const char *s)
{
	for (; *list; list++)
		if (strcmp(*list, s) == 0)
			return 1;
	return 0;
}

int
wfe_stage_row_valid(const char *kind, const char *state, long attempt, long long fence,
					const char *outcome, const char *skip_reason)
{
	return in_list(kind_names, kind) && wfe_state_from_name(state) >= 0 &&
		attempt >= 0 && fence >= 0 &&
		(outcome == NULL || strcmp(outcome, "completed") == 0 || strcmp(outcome, "failed") == 0) &&
		(skip_reason == NULL || in_list(skip_reasons, skip_reason));
}
