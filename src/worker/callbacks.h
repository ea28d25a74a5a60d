/*
 * callbacks.h — the wfe functions a worker calls (runtime.md "Workers"):
 * claim_task, accept_task, heartbeat, complete_task, fail_task, and for
 * broker mode fetch_payload and ack_cancel.  Each callback answers with an
 * outcome word (accepted, duplicate, conflict, stale, late,
 * invalid_result, unknown).
 */
#ifndef WFE_WORKER_CALLBACKS_H
#define WFE_WORKER_CALLBACKS_H

#include <stdbool.h>

#include "db.h"
#include "worker.h"

#define OUTCOME_LEN 32

/*
 * Claim up to `max` tasks of opts.queue.  *tasks is a malloc'd array of *n
 * tasks (each to be started or freed with task_free).
 */
extern DbStatus cb_claim(int max, Task **tasks, int *n, char ***payload_refs, DbError *e);

extern DbStatus cb_accept(const Task *t, char *outcome, DbError *e);
extern DbStatus cb_heartbeat(const Task *t, char *outcome, DbError *e);
extern DbStatus cb_complete(const Task *t, const char *result_json, char *outcome, DbError *e);
extern DbStatus cb_fail(const Task *t, const char *error_json, bool retryable, char *outcome,
						DbError *e);

/* The input a payload reference names (malloc'd JSON text in *input). */
extern DbStatus cb_fetch_payload(const char *ref_json, char **input, DbError *e);

extern DbStatus cb_ack_cancel(const Task *t, int64_t fence, char *outcome, DbError *e);

#endif							/* WFE_WORKER_CALLBACKS_H */
