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
	{"waiting", "queued", "released: its predecessors are done", NULL},
	{"waiting", "running", "a wait, a sleep, a workflow or a map stage released: running with no worker", "wait sleep workflow map"},
	{"waiting", "completed", "a decision, fork or join resolved, or a cache hit, at release", NULL},
	{"waiting", "failed", "input binding failed, or a join was not satisfied", NULL},
	{"waiting", "skipped", "branch not taken, dependency failed, context gated, missing input, run aborted", NULL},
	{"waiting", "cancelled", "the run was cancelled before the stage was released", NULL},
	{"queued", "dispatched", "published to the broker", NULL},
	{"queued", "running", "claimed by a poll worker, or accepted", NULL},
	{"queued", "timed_out", "queue deadline passed", NULL},
	{"queued", "cancelled", "run intent set or run cancelled", NULL},
	{"dispatched", "running", "accepted by the worker", NULL},
	{"dispatched", "queued", "publisher gave the message back", NULL},
	{"dispatched", "timed_out", "queue deadline passed", NULL},
	{"dispatched", "cancelled", "run intent set or run cancelled", NULL},
	{"running", "completed", "the worker completed the attempt", NULL},
	{"running", "failed", "the attempt failed with no retry left", NULL},
	{"running", "retry_scheduled", "the attempt failed and a retry is due later", NULL},
	{"running", "timed_out", "execution or heartbeat deadline passed, or a wait's timeout", NULL},
	{"running", "cancelled", "run intent set or run cancelled: the attempt is fenced", NULL},
	{"retry_scheduled", "queued", "the retry timer fired: new attempt, new fence", NULL},
	{"retry_scheduled", "running", "the retry timer fired: a new child run, new fence", "workflow"},
	{"retry_scheduled", "cancelled", "run intent set or run cancelled", NULL},
	{"timed_out", "retry_scheduled", "the timed-out attempt is retried later", NULL},
	{"timed_out", "queued", "operator re-drive", NULL},
	{"failed", "queued", "operator re-drive", NULL},
	{"cancelled", "queued", "operator re-drive", NULL},
	{"failed", "completed", "operator skip: completed by hand", NULL},
	{"timed_out", "completed", "operator skip: completed by hand", NULL},
	{"retry_scheduled", "failed", "operator fail: failed by hand, no retry", NULL},
	{"queued", "failed", "operator fail: failed by hand before anyone took it", NULL},
	{"dispatched", "failed", "operator fail: failed by hand, the message fenced", NULL},
	{"completed", "waiting", "the run was reopened by an operator: runs again", NULL},
	{"failed", "waiting", "the run was reopened by an operator: runs again", NULL},
	{"timed_out", "waiting", "the run was reopened by an operator: runs again", NULL},
	{"skipped", "waiting", "the run was reopened by an operator: runs again", NULL},
	/* a map's elements have their item's kind: a redrive of the element whose
	 * failure failed the map puts the ones it cancelled before their release
	 * back to waiting their turn (step_operate_element.c) */
	{"cancelled", "waiting", "operator re-drive: a wait, sleep, workflow stage or unreleased element", "wait sleep workflow worker action"},
	{NULL, NULL, NULL, NULL}
};

/* Run transitions: a run ends only through its intent (and finalisers). */
const wfe_transition wfe_run_transition_table[] = {
	{"running", "finalising", "a terminal intent was set; finalisers run", NULL},
	{"running", "completed", "completed intent, no finalisers", NULL},
	{"running", "failed", "failed intent, no finalisers", NULL},
	{"running", "cancelled", "cancelled, no finalisers", NULL},
	{"finalising", "completed", "completed intent and every finaliser succeeded", NULL},
	{"finalising", "failed", "failed intent, or a finaliser failed", NULL},
	{"finalising", "cancelled", "cancelled, finalisers done", NULL},
	{"failed", "running", "reopened by an operator's re-drive or skip of a stage", NULL},
	{NULL, NULL, NULL, NULL}
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

/* Is word one of the space-separated words of list? */
static int
in_words(const char *list, const char *word)
{
	size_t		n = strlen(word);

	for (const char *p = list; (p = strstr(p, word)) != NULL; p += n)
		if ((p == list || p[-1] == ' ') && (p[n] == ' ' || p[n] == '\0'))
			return 1;
	return 0;
}

int
wfe_stage_transition_legal(const char *kind, const char *from, const char *to)
{
	if (strcmp(from, to) == 0)
		return 1;
	for (const wfe_transition *t = wfe_stage_transition_table; t->from; t++)
		if (strcmp(t->from, from) == 0 && strcmp(t->to, to) == 0 &&
			(t->kinds == NULL || in_words(t->kinds, kind)))
			return 1;
	return 0;
}

static const char *const kind_names[] = {
	"action", "worker", "decision", "fork", "join", "finaliser", "wait", "sleep", "workflow", "map", NULL
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
