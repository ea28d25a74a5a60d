/*
 * bgw.h — the background worker's part of wfe: the worker itself (bgw.c),
 * the shared state that wakes it (shmem.c), the wakeups of waiting poll
 * workers (ready.c), the outbox publisher it runs (publisher.c) and the
 * run commands it takes from RabbitMQ on the publisher's connection
 * (ingress.c).  The
 * server layer (src/pg) includes this to ask for a wakeup; the rest of
 * wfe.so does not need it.
 */
#ifndef WFE_BGW_H
#define WFE_BGW_H

#include "datatype/timestamp.h"
#include "storage/latch.h"
#include "storage/spin.h"

/* The background worker's settings (GUCs, defined in src/pg/guc.c). */
extern char *wfe_database;
extern int	wfe_poll_interval_ms;
extern int	wfe_retention_s;
extern int	wfe_bgw_batch;		/* wfe.worker_batch */
extern bool wfe_notify;

/* The publisher's and the broker's settings (GUCs, src/pg/guc.c). */
extern char *wfe_amqp_uri;
extern char *wfe_amqp_password_file;
extern bool wfe_publisher_enabled;
extern bool wfe_consume_dlq;
extern int	wfe_publish_batch;
extern int	wfe_confirm_window;
extern int	wfe_broker_retry_ttl_ms;
extern int	wfe_broker_max_redeliveries;
extern int	wfe_amqp_queue_type;	/* a wfe_queue_type (amqp/topology.h) */
extern int	wfe_track_threshold_bytes;
extern bool wfe_publish_events;

/* The background worker (bgw.c). */
extern void wfe_bgw_register(void);
extern bool wfe_in_transaction(const char *activity, void (*fn) (void *arg), void *arg);

#define WFE_READY_SLOTS 64

/* Shared state between backends and the background worker (shmem.c). */
typedef struct WfeShared
{
	slock_t		mutex;
	Latch	   *bgw_latch;		/* NULL while no background worker runs */
	int			bgw_pid;
	TimestampTz sleeping_until; /* the background worker's planned wakeup */
	TimestampTz due_while_awake;	/* earliest future work committed during a round (0: none) */
	TimestampTz wake_requested_at;	/* last commit that set the latch */
	TimestampTz woke_at;		/* when the background worker last woke for it */
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
/* Have the background worker awake by due, once this transaction commits. */
extern void wfe_wake_at(TimestampTz due);

/* Wakeups for poll workers waiting in wfe.claim_task (ready.c). */
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

/* The outbox publisher, run by the background worker (publisher.c). */
extern int	wfe_publisher_round(bool *more, long *wait_ms);
extern void wfe_publisher_shutdown(void);

/*
 * Run commands from RabbitMQ (ingress.c), taken on the publisher's
 * connection with nothing in flight: at most max commands this round.
 * Returns how many, or -1 when the connection failed (*err says why);
 * *configured says whether any ingress is.
 */
extern int	wfe_ingress_round(int max, bool *configured, char *err, size_t errlen);

#endif							/* WFE_BGW_H */
