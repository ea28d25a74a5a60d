/*
 * child.h — child runs, the server's half (child.c; runtime.md "Child
 * runs"): what engine.c asks when a workflow stage is released, and the
 * work it leaves for after a step (starting a child, cancelling one).
 */
#ifndef WFE_PG_CHILD_H
#define WFE_PG_CHILD_H

#include "nodes/pg_list.h"

/*
 * The definition a workflow stage names (NAME: its active version;
 * NAME@VERSION: that version unless a draft): true with its id and version,
 * or false when there is none.
 */
extern bool wfe_child_resolve(const char *ref, int64 *definition_id, char **version);

/* The nesting depth a child of run_id would have (a submitted run's child: 1). */
extern int	wfe_child_depth(int64 run_id);

/* After a step: start a child run, or cancel the live children of a stage. */
extern List *wfe_child_defer_start(List *work, int64 parent, const char *stage, int attempt,
								   const char *workflow, const char *version, const char *context);
extern List *wfe_child_defer_cancel(List *work, int64 parent, const char *stage, const char *reason);
/* ... or the live children of every element of a map of child runs (its elements were cancelled) */
extern List *wfe_child_defer_cancel_map(List *work, int64 parent, const char *map, const char *reason);

/* Do the work left for after a step (the step is over: each child's own step nests). */
extern void wfe_child_run(List *work);

/* A run ended: if it is a child, a child_ended timer for its parent's stage. */
extern void wfe_child_finished(int64 run_id);

/* The ended child of a parent's stage attempt: its id, state and output; false if none. */
extern bool wfe_child_outcome(int64 parent, const char *stage, int attempt,
							  int64 *child, char **state, char **output);

#endif							/* WFE_PG_CHILD_H */
