/*
 * submit.h — the decisions of wfe.submit that need no database: the shape
 * of its arguments (option names, a tenant name, a W3C traceparent), what
 * an idempotency key's earlier run means, and a tenant's run limit.  The
 * server layer (src/pg/submit.c) reads and writes; these decide.
 */
#ifndef WFE_CORE_SUBMIT_H
#define WFE_CORE_SUBMIT_H

#include <stdbool.h>
#include <stdint.h>

/* The options a submit takes, as its hint lists them. */
#define WFE_SUBMIT_OPTIONS_HINT \
	"Options are tenant, execution_context, run_deadline_ms, priority, not_before and traceparent."

/* Is key one of the submit options? */
extern bool wfe_submit_option_known(const char *key);

/* The bounds of a run's priority (option priority, wfe.set_priority). */
#define WFE_PRIORITY_MIN (-1000000)
#define WFE_PRIORITY_MAX 1000000

/* Does s match ^[A-Za-z0-9_.-]{1,63}$, a tenant name (wfe._is_tenant_name)? */
extern bool wfe_tenant_name_valid(const char *s);

/*
 * A submitter's traceparent, read as W3C Trace Context says: version 00 is
 * exactly "00-<trace id>-<parent id>-<flags>"; a later version (not ff) may
 * carry more after a "-", which is ignored; ids are lowercase hex and not
 * all zero.  Only the sampled flag is passed on (flags "01" or "00").
 * False when s is none.
 */
extern bool wfe_traceparent_read(const char *s, char trace_id[33], char parent_id[17], char flags[3]);

/* What an idempotency key's earlier run means for a submit. */
typedef enum wfe_idempotency
{
	WFE_IDEMPOTENT_NEW,			/* no run keeps the key: start one */
	WFE_IDEMPOTENT_EXISTING,	/* the same request again: answer with its run */
	WFE_IDEMPOTENT_CONFLICT		/* the key was used with another context: refuse */
} wfe_idempotency;

extern wfe_idempotency wfe_idempotency_outcome(bool found, bool same_context);

/* May one more run of a tenant with live runs in flight start under limit (< 1: none)? */
extern bool wfe_run_admitted(int64_t live, int limit);

#endif							/* WFE_CORE_SUBMIT_H */
