/*
 * wfe.h — what the PostgreSQL-facing parts of wfe share: configuration.
 */
#ifndef WFE_WFE_H
#define WFE_WFE_H

#include "datatype/timestamp.h"
#include "storage/latch.h"
#include "storage/spin.h"

/* Admission limits for definitions (GUCs wfe.max_*). */
extern int	wfe_max_definition_bytes;
extern int	wfe_max_stages;
extern int	wfe_max_fanout;
extern int	wfe_max_expression_bytes;
extern bool wfe_four_eyes;

/* The background worker's settings. */
extern char *wfe_database;
extern int	wfe_poll_interval_ms;
extern int	wfe_retention_s;
extern int	wfe_worker_batch;
extern bool wfe_notify;

/* Define the GUCs (called from _PG_init). */
extern void wfe_guc_init(void);

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
} WfeShared;

extern WfeShared *wfe_shared;
extern void wfe_shmem_init(void);

/* The background worker (worker.c). */
extern void wfe_worker_register(void);

#endif							/* WFE_WFE_H */
