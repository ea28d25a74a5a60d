/*
 * wfe.h — what the server layer (src/pg) shares: configuration, admission
 * limits, grants, the result cache and message ids.  The background
 * worker's part has its own header, src/bgw/bgw.h.
 */
#ifndef WFE_WFE_H
#define WFE_WFE_H

#include "utils/guc.h"
#include "utils/jsonb.h"

/* Admission limits for definitions (GUCs wfe.max_*). */
extern int	wfe_max_definition_bytes;
extern int	wfe_max_stages;
extern int	wfe_max_fanout;
extern int	wfe_max_workflow_depth;
extern int	wfe_max_map_items;
extern int	wfe_max_rate_keys;

/* ratelimit.c: which locked claim candidates have a token (the others are held) */
struct ItemPointerData;
/* circuit.c: how many of room a claim from queue may take; then what it took */
extern int	wfe_circuit_claim_room(const char *queue, int room);
extern void wfe_circuit_claim_done(int claimed, int64 run_id, const char *stage);
extern void wfe_circuit_attempt_ended(const char *queue, int64 run_id, const char *stage, const char *state);
/* flow_cache.c: which queues have a circuit, which serve tenants fairly (cached per backend) */
extern bool wfe_queue_has_circuit(const char *queue);
extern bool wfe_queue_is_fair(const char *queue);
/* fairness.c: a fair queue's claim, shared between the tenants with ready work by weight */
typedef struct wfe_fair_share
{
	char	   *tenant;
	int			priority;		/* the priority level served */
	int			weight;
	int			n;				/* tasks given to the tenant (0: none this claim) */
} wfe_fair_share;
extern int	wfe_fair_shares(const char *queue, int room, wfe_fair_share **shares, bool *ready);
/*
 * A fair walk's tenant (the claim's, claim.c; a release's, admission.c):
 * col = param written as the range it is, so that the generic plan walks
 * run_stages_fair from the tenant's next task whatever ANALYZE saw.  An
 * equality drops the tenant from the walk's order, which run_stages_ready
 * (queue, priority DESC, ready_at) then gives as well; when the statistics
 * see one tenant (a backlog of one tenant's), the equality matches every
 * row, the smaller index wins, and a claim of another tenant's task
 * filters the whole backlog (70 ms and 3,000 buffers beside 100,000:
 * docs/benchmarks.md "The fair claim's tail").  The range's generic
 * estimate does not read the statistics, and only run_stages_fair gives
 * its order.  (The same rows: the column's collation is deterministic.
 * After a range the index cannot seek to the priority, so the walk starts
 * at the tenant's first entry: the priority served is the tenant's
 * highest, whose entries come first.)
 */
#define WFE_SQL_FAIR_TENANT(col, param) " AND " col " >= " param " AND " col " <= " param
extern void wfe_fair_took(const char *queue, const wfe_fair_share *share, int got);
/* fairness.c: a fair broker queue's tenants with held tasks, for a release (admission.c) */
typedef struct wfe_fair_field
{
	int			n;
	char	  **tenant;
	int		   *limit;			/* max_tasks_in_flight; -1: none */
	struct wfe_fair_tenant *t;	/* the stride's view of each (src/core/flow/fairness.h) */
	double		vt;				/* the queue's virtual time */
} wfe_fair_field;
extern void wfe_fair_held(const char *queue, wfe_fair_field *f);
extern void wfe_fair_keep(const char *queue, const wfe_fair_field *f);
/* claim.c: how many more tasks a tenant with a task limit may be given (its lock taken) */
extern int	wfe_tenant_room(const char *tenant, int limit);
extern void wfe_rate_admit(int n, struct ItemPointerData **tids, char **limit, char **key, char **tenant,
						   bool *take);
/* concurrency.c: which locked claim candidates fit their key (the others are held or left ready) */
extern void wfe_concurrency_admit(const char *queue, int n, struct ItemPointerData **tids, char **tenant,
								  char **key, int *max, bool *take);
/* concurrency.c: an attempt of a stage with keyed concurrency ended: release what now fits */
extern void wfe_concurrency_freed(int64 run_id, const char *stage);
/* concurrency.c: ...the same, for a key already known (a map's elements cancelled at once) */
extern void wfe_concurrency_key_freed(const char *queue, const char *tenant, const char *key, int max);
/*
 * The SQL that stores a bound concurrency key (text expression x): as it
 * is, or a long one as its digest (core/flow/concurrency.h).
 */
#define WFE_SQL_CONCURRENCY_KEY(x) \
	"CASE WHEN octet_length(" x ") > " CppAsString2(WFE_CONCURRENCY_KEY_BYTES) \
	" THEN 'sha256:' || encode(sha256(convert_to(" x ", 'UTF8')), 'hex') ELSE " x " END"
extern int	wfe_max_expression_bytes;
extern bool wfe_four_eyes;
extern bool wfe_schema_format_assertion;
extern int	wfe_schema_step_budget;

/* Define the GUCs (called from _PG_init). */
extern void wfe_guc_init(void);

/* The validator's server side (runtime_fn.c): its interrupt hook, and raising what stopped it. */
extern void wfe_validation_init(void);
extern void wfe_validation_raise_stopped(int rc, const char *detail);

/* The deterministic id of a message about one attempt (message.c). */
extern Datum wfe_message_id(int64 run_id, const char *stage, int attempt, int64 fence,
							const char *kind);
/* The id of an event's message on the wfe.events exchange (message.c). */
extern Datum wfe_event_message_id(int64 event_id);

/* SHA-256 (compile_fn.c: PostgreSQL's cryptohash). */
extern void wfe_sha256(const unsigned char *data, size_t len, unsigned char out[32]);

/* The result cache's server side (cache.c; dsl.md "Result cache"). */
struct wfe_cache_entry;
extern char *wfe_cache_schemas_digest(const char *input_schema, const char *output_schema);
extern void wfe_cache_lookup(const char *tenant, const char *contract, const char *implementation,
							 const char *schemas, const char *input, struct wfe_cache_entry *e);
extern const char *wfe_cache_leader(const char *tenant, const char *key, int64 run_id);

/* Who is calling: a running handler's registrant, else the session's role (handler.c). */
extern Oid	wfe_caller_role(void);
extern Oid	wfe_set_acting_role(Oid role);

/* wfe's own transaction locks, which no login can take (locks.c). */
extern bool wfe_lock(const char *space, const char *key, bool try);
extern void wfe_cache_store(const char *tenant, const char *key, const char *contract,
							int64 ttl_ms, int64 run_id, const char *stage, int attempt,
							const char *result);
extern void wfe_cache_wake(const char *key, int64 run_id, const char *stage);

/* Admission limits at the door (limits.c; GUCs wfe.max_payload_bytes, ...). */
#define WFE_JSON_DEPTH_CEILING 64	/* what binding and validation handle */
extern int	wfe_max_payload_bytes;
extern int	wfe_max_json_depth;
extern int	wfe_max_name_bytes;
extern void wfe_admit_jsonb(Jsonb *jb, const char *what, int extra_depth);
extern void wfe_admit_name(const char *value, Size len, const char *what);
extern char *wfe_admitted_name(text *t, const char *what);

/* Redaction of telemetry (redact.c; GUC wfe.redact_keys). */
extern char *wfe_redact_keys;
extern bool wfe_redact_keys_check(char **newval, void **extra, GucSource source);
extern void wfe_redact_keys_assign(const char *newval, void *extra);
extern Jsonb *wfe_redact_jsonb(Jsonb *jb);

/* Signed callbacks (signed_callback.c; GUC wfe.callback_tolerance_s). */
extern int	wfe_callback_tolerance_s;

/* Who may serve a queue (grants.c). */
extern bool wfe_may_serve_queue(const char *queue);
extern void wfe_require_queue(const char *queue, const char *what);

/* The wfe_task_ready payload of a queue: a keyed tag, not its name (ready_tag.c). */
extern char *wfe_ready_tag(const char *queue);

/* Does the role acting act for tenant (tenants.c, the one place of the rule)? */
extern bool wfe_acts_for_tenant(const char *tenant);
extern bool wfe_may_call_back(const char *queue, const char *tenant, bool has_handler,
							  int64 run_id, const char *stage, const char *what);

/* Append one event about a run outside a step, through the engine's writer (engine.c). */
extern void wfe_engine_event(int64 run_id, const char *tenant, const char *stage, int attempt,
							 const char *type, const char *detail, int64 fence);

/* Schedules (schedule.c; GUC wfe.max_schedule_catch_up). */
extern int	wfe_max_schedule_catch_up;

/* submit.c: admitting one more run of a tenant (53400), starting a child run (both under SPI) */
extern void wfe_admit_run(const char *tenant, const char *again);
extern void wfe_start_child(int64 parent, const char *stage, int attempt, const char *workflow,
							const char *version, const char *context);

#endif							/* WFE_WFE_H */
