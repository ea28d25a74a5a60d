/*
 * step_internal.h — what the files of the step core share: step.c (how a
 * run moves), step_bind.c (binding and decisions), step_waits.c (waits and
 * sleeps), step_finish.c (intents, finalisers, a run's end), step_cache.c
 * (the result cache at release), step_operate.c (operator recovery) and
 * child.c (workflow stages' child runs).  Not
 * for the server: it includes step.h and knows nothing of this.
 */
#ifndef WFE_STEP_INTERNAL_H
#define WFE_STEP_INTERNAL_H

#include <json-c/json.h>

#include "bind.h"
#include "step.h"

/* Memory, rows and effects (step.c) */
extern json_object *step_hold(wfe_step *st, json_object *o);
extern void step_load_all(wfe_step *st);
extern wfe_op *step_emit(wfe_step *st, wfe_op_kind kind, int stage);
extern const char *step_json_text(wfe_step *st, json_object *o);
extern json_object *step_jstr(const char *s);
extern json_object *step_jname(wfe_step *st, int i);
extern json_object *step_jparse(const char *text);
extern void step_event(wfe_step *st, int stage, int attempt, const char *type, json_object *detail);
extern void step_event_fenced(wfe_step *st, int stage, int attempt, const char *type, json_object *detail,
							  int64_t fence);
extern const char *step_intent_name(int intent);

/* Binding and decisions (step_bind.c) */
extern json_object *step_required_outputs(wfe_step *st, int i, int *missing);
extern void step_decide(wfe_step *st, int i, wfe_decision *d);
extern const char *step_finaliser_input(wfe_step *st);
extern int	step_bind_rate_key(wfe_step *st, int i, const char **code, const char **message);
extern int	step_bind_concurrency_key(wfe_step *st, int i, const char **code, const char **message);

/* Intents, finalisers, the end of a run (step_finish.c) */
extern void step_next_finaliser(wfe_step *st);
extern void step_set_intent(wfe_step *st, wfe_run_state intent, const char *reason);

/* Releasing, routing, ending attempts (step.c) */
extern void step_skip(wfe_step *st, int i, const char *reason, int decision);
extern int64_t step_next_fence(wfe_step *st, int64_t fence);
extern void step_enqueue(wfe_step *st, int i, const char *input, int new_attempt, const char *cache_key);
extern void step_resolve(wfe_step *st, int i, wfe_state state, json_object *result, json_object *error, int branch);
extern void step_skip_unreachable(wfe_step *st, int decision, int next);
extern void step_route(wfe_step *st, int from, int target, int branch, wfe_state outcome);
extern void step_activate(wfe_step *st, int i, int branch, wfe_state outcome);
extern void step_park(wfe_step *st, int i, const char *input);
extern const char *step_bind_stage(wfe_step *st, int i, const char *whose, const char **code, const char **message);
extern void step_bind_failed(wfe_step *st, int i, const char *code, const char *message);
extern void step_attempt_failed(wfe_step *st, int i, const char *error, const char *code, int retryable, wfe_state final_state);

/* How a stage completed: what its completion stores and whom it wakes. */
typedef enum completion
{
	BY_ATTEMPT,					/* an accepted, valid result of its attempt */
	BY_HAND,					/* an operator's skip */
	FROM_CACHE					/* a cache entry, at release */
} completion;

extern void step_completed(wfe_step *st, int i, const char *result, completion how);

extern void step_stage_done(wfe_step *st, int i, wfe_state outcome);

/* Maps (map.c) */
extern wfe_row *step_element_row(wfe_step *st);
extern void step_map_release(wfe_step *st, int i);
extern void step_map_element_done(wfe_step *st, int i, wfe_state outcome);
extern const char *step_map_outputs(wfe_step *st, int i, const char *result);
extern void step_map_unbound(wfe_step *st, int i, const char *code, const char *message);
extern const char *step_bind(wfe_step *st, int i, json_object *root, const char *whose,
							 const char **code, const char **message);
extern json_object *step_root(wfe_step *st, int i);
extern int	step_rate_key(wfe_step *st, int i, json_object *root, const char **key_out,
						  const char **code, const char **message);
extern int64_t step_map_under_way(const wfe_map_counts *c);
extern int	step_map_has_slot(wfe_step *st, int i);
extern int	step_concurrency_key(wfe_step *st, int i, json_object *root, const char **key_out,
								 const char **code, const char **message);

/* The result cache (step_cache.c) */
extern int step_cached(wfe_step *st, int i);
extern void step_cache_leader_ended(wfe_step *st, int i);
extern void step_cached_release(wfe_step *st, int i, const char *input, int may_wait);

/* Child runs (child.c) */
extern void step_release_child(wfe_step *st, int i, int again);
extern int	step_runs_child(const wfe_step *st, int i);
extern void step_release_child_bound(wfe_step *st, int i, const char *input);

/* Operator recovery (step_operate.c), and of one map element (step_operate_element.c) */
extern void step_operator_event(wfe_step *st, int i, const char *type, const char *by, const char *why);
extern void step_new_attempt(wfe_step *st, int i);
extern const char *step_reopen(wfe_step *st, int i, const char *by, const char *why);
extern void step_release_again(wfe_step *st, const char *redo);
extern const char *step_element_operate_problem(wfe_step *st, int i);
extern void step_element_operate(wfe_step *st, int i, wfe_operation what, const char *value,
								 const char *by, const char *why);
extern wfe_map_counts *step_map_counts(wfe_step *st, int i);
extern void step_map_write_counts(wfe_step *st, int i);

/* Maps whose elements are child runs (map_child.c) */
extern int	step_map_child_ok(wfe_step *st, int i);
extern void step_release_element_child(wfe_step *st, int i, const char *input);

#endif							/* WFE_STEP_INTERNAL_H */
