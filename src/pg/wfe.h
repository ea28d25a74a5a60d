/*
 * wfe.h — what the PostgreSQL-facing parts of wfe share: configuration.
 */
#ifndef WFE_WFE_H
#define WFE_WFE_H

#include "datatype/timestamp.h"
#include "storage/latch.h"
#include "storage/spin.h"
#include "utils/jsonb.h"

/* Admission limits for definitions (GUCs wfe.max_*). */
extern int	wfe_max_definition_bytes;
extern int	wfe_max_stages;
extern int	wfe_max_fanout;
extern int	wfe_max_expression_bytes;
extern bool wfe_four_eyes;
extern bool wfe_schema_format_assertion;

/* The background worker's settings. */
extern char *wfe_database;
extern int	wfe_poll_interval_ms;
extern int	wfe_retention_s;
extern int	wfe_worker_batch;
extern bool wfe_notify;

/* Define the GUCs (called from _PG_init). */
extern void wfe_guc_init(void);

#define WFE_READY_SLOTS 64

/* Shared state between backends and the background worker (shmem.c). */
typedef struct WfeShared
{
	slock_t		mutex;
	Latch	   *worker_latch;	/* NULL while no worker runs */
	int			worker_pid;
	TimestampTz sleeping_until; /* the worker's planned wakeup */
	TimestampTz wake_requested_at;	/* last commit that set the latch */
	TimestampTz woke_at;		/* when the worker last woke for it */
	int64		wakeups_sent;
	int64		rounds;
	int64		timers_fired;
	int64		actions_run;
	TimestampTz started_at;

	/* Who waits for which poll queue (ready.c), by a hash of its name. */
	slock_t		ready_mutex;
	uint32		ready_epoch[WFE_READY_SLOTS];	/* bumped by each notifying commit */
	int32		ready_waiting[WFE_READY_SLOTS];	/* claimers that may wait */
	int32		ready_committing[WFE_READY_SLOTS];	/* commits that released without notifying */
	int64		ready_notified;
	int64		ready_skipped;
} WfeShared;

extern WfeShared *wfe_shared;
extern void wfe_shmem_init(void);
extern void wfe_wake_at(TimestampTz due);

/* Wakeups for poll workers (ready.c). */
extern void wfe_ready_released(const char *queue);
typedef struct wfe_claim_ticket
{
	int			slot;
	uint32		epoch;
	bool		registered;
	bool		maybe_missed;
} wfe_claim_ticket;
extern void wfe_ready_claim_begin(const char *queue, wfe_claim_ticket *t);
extern void wfe_ready_claim_end(const char *queue, wfe_claim_ticket *t, bool short_batch);

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

/* Signed callbacks (callback.c; GUC wfe.callback_tolerance_s). */
extern int	wfe_callback_tolerance_s;

/* Who may serve a queue (grants.c). */
extern bool wfe_may_serve_queue(const char *queue);
extern void wfe_require_queue(const char *queue, const char *what);
extern bool wfe_acts_for_tenant(const char *tenant);
extern bool wfe_may_call_back(const char *queue, const char *tenant, bool has_handler,
							  int64 run_id, const char *stage, const char *what);

/* The background worker (worker.c). */
extern void wfe_worker_register(void);
extern bool wfe_in_transaction(const char *activity, void (*fn) (void *arg), void *arg);

/* The outbox publisher, run by the worker (publisher.c). */
extern int	wfe_publisher_round(bool *more, long *wait_ms);
extern void wfe_publisher_shutdown(void);

/* Publisher and broker settings. */
extern char *wfe_amqp_uri;
extern char *wfe_amqp_password_file;
extern bool wfe_publisher_enabled;
extern bool wfe_consume_dlq;
extern int	wfe_publish_batch;
extern int	wfe_confirm_window;
extern int	wfe_broker_retry_ttl_ms;
extern int	wfe_broker_max_redeliveries;
extern int	wfe_track_threshold_bytes;
extern bool wfe_publish_events;

#endif							/* WFE_WFE_H */
