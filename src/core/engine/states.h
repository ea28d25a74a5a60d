/*
 * states.h — stage and run states, and the legal transitions between them.
 *
 * The tables in states.c are the single source of truth: the step core only
 * emits transitions they list (test_step checks it), the triggers on
 * wfe.run_stages and wfe.runs refuse every other one, and
 * wfe.stage_transitions() / wfe.run_transitions() list them.
 * Plain C: no PostgreSQL headers.
 */
#ifndef WFE_STATES_H
#define WFE_STATES_H

/* Stage states (runtime.md "States"), in the order the docs list them. */
typedef enum wfe_state
{
	WFE_WAITING,
	WFE_QUEUED,
	WFE_DISPATCHED,
	WFE_RUNNING,
	WFE_RETRY_SCHEDULED,
	WFE_COMPLETED,
	WFE_FAILED,
	WFE_TIMED_OUT,
	WFE_SKIPPED,
	WFE_CANCELLED,
	WFE_NSTATES
} wfe_state;

/* Run states; a run's intent uses the three terminal ones. */
typedef enum wfe_run_state
{
	WFE_RUN_RUNNING,
	WFE_RUN_FINALISING,
	WFE_RUN_COMPLETED,
	WFE_RUN_FAILED,
	WFE_RUN_CANCELLED,
	WFE_NRUN_STATES
} wfe_run_state;

/* One legal transition, with what it means (and, for a few, which stage kinds may take it). */
typedef struct wfe_transition
{
	const char *from;
	const char *to;
	const char *why;
	const char *kinds;			/* NULL: every kind; else the kinds, space-separated */
} wfe_transition;

/* The tables, each ended by a {NULL, NULL, NULL} entry. */
extern const wfe_transition wfe_stage_transition_table[];
extern const wfe_transition wfe_run_transition_table[];

/* Names, and back: -1 for a name that is no state. */
extern const char *wfe_state_name(wfe_state s);
extern int	wfe_state_from_name(const char *name);
extern const char *wfe_run_state_name(wfe_run_state s);
extern int	wfe_run_state_from_name(const char *name);

/* Is from -> to legal for some kind (a same-state update always is)? */
extern int	wfe_transition_legal(const wfe_transition *table, const char *from,
								 const char *to);

/* Is from -> to legal for a stage of this kind (wfe.run_stages.kind)? */
extern int	wfe_stage_transition_legal(const char *kind, const char *from, const char *to);

/*
 * Is this a stage row's legal content: a known kind and state, attempt and
 * fence not negative, outcome NULL or completed/failed, skip_reason NULL or
 * one of the five reasons?  (The CHECK constraint of wfe.run_stages.)
 */
extern int	wfe_stage_row_valid(const char *kind, const char *state, long attempt,
								long long fence, const char *outcome, const char *skip_reason);

/* Queued, dispatched, running or retry_scheduled: an attempt is under way. */
#define WFE_STATE_IN_FLIGHT(s) \
	((s) == WFE_QUEUED || (s) == WFE_DISPATCHED || (s) == WFE_RUNNING || \
	 (s) == WFE_RETRY_SCHEDULED)

#endif							/* WFE_STATES_H */
