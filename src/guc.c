/*
 * guc.c — wfe's configuration parameters (all named wfe.*).
 */
#include "postgres.h"

#include <limits.h>

#include "miscadmin.h"
#include "utils/guc.h"

#include "wfe.h"

int			wfe_max_definition_bytes = 1024 * 1024;
int			wfe_max_stages = 500;
int			wfe_max_fanout = 64;
int			wfe_max_expression_bytes = 4096;
bool		wfe_four_eyes = false;
char	   *wfe_database = NULL;
int			wfe_poll_interval_ms = 1000;
int			wfe_retention_s = 7 * 24 * 3600;
int			wfe_worker_batch = 100;
bool		wfe_notify = true;

/* Define every wfe.* parameter, then reserve the prefix against typos. */
void
wfe_guc_init(void)
{
	DefineCustomIntVariable("wfe.max_definition_bytes",
							"Largest workflow definition source accepted, in bytes.",
							"Larger sources are refused with diagnostic yaml.too_large.",
							&wfe_max_definition_bytes,
							1024 * 1024, 1024, 64 * 1024 * 1024,
							PGC_SUSET, GUC_UNIT_BYTE,
							NULL, NULL, NULL);
	DefineCustomIntVariable("wfe.max_stages",
							"Most stages or tasks one definition may have.",
							"More are refused with diagnostic limits.stages.",
							&wfe_max_stages,
							500, 1, 10000,
							PGC_SUSET, 0,
							NULL, NULL, NULL);
	DefineCustomIntVariable("wfe.max_fanout",
							"Most branches one fork may have.",
							"Wider forks are refused with diagnostic limits.fanout.",
							&wfe_max_fanout,
							64, 2, 1024,
							PGC_SUSET, 0,
							NULL, NULL, NULL);
	DefineCustomIntVariable("wfe.max_expression_bytes",
							"Longest expression or interpolation accepted, in bytes.",
							"Longer ones are refused with diagnostic expr.too_large.",
							&wfe_max_expression_bytes,
							4096, 16, 65536,
							PGC_SUSET, GUC_UNIT_BYTE,
							NULL, NULL, NULL);
	DefineCustomBoolVariable("wfe.four_eyes",
							 "Forbid approving or activating a definition version one created oneself.",
							 NULL,
							 &wfe_four_eyes,
							 false,
							 PGC_SUSET, 0,
							 NULL, NULL, NULL);
	/*
	 * A PGC_POSTMASTER setting can only be defined while the postmaster
	 * loads preloaded libraries; without preload there is no worker to
	 * configure anyway.
	 */
	if (process_shared_preload_libraries_in_progress)
		DefineCustomStringVariable("wfe.database",
								   "Database the wfe background worker serves.",
								   "Needs wfe in shared_preload_libraries; the worker waits until the extension exists there.",
								   &wfe_database,
								   "postgres",
								   PGC_POSTMASTER, 0,
								   NULL, NULL, NULL);
	DefineCustomIntVariable("wfe.poll_interval_ms",
							"Longest the background worker sleeps without being woken.",
							"A safety net only: commits that add work wake the worker, and it sleeps until the earliest due timer.",
							&wfe_poll_interval_ms,
							1000, 10, 3600 * 1000,
							PGC_SIGHUP, GUC_UNIT_MS,
							NULL, NULL, NULL);
	DefineCustomIntVariable("wfe.retention",
							"How long finished runs, their events and published outbox rows are kept.",
							NULL,
							&wfe_retention_s,
							7 * 24 * 3600, 60, INT_MAX,
							PGC_SIGHUP, GUC_UNIT_S,
							NULL, NULL, NULL);
	DefineCustomIntVariable("wfe.worker_batch",
							"Most timers, deadlines or actions the background worker handles per transaction or round.",
							NULL,
							&wfe_worker_batch,
							100, 1, 10000,
							PGC_SIGHUP, 0,
							NULL, NULL, NULL);
	DefineCustomBoolVariable("wfe.notify",
							 "Send NOTIFY wfe_task_ready when tasks become claimable.",
							 "Poll workers LISTEN on it; turning it off leaves them to poll.",
							 &wfe_notify,
							 true,
							 PGC_USERSET, 0,
							 NULL, NULL, NULL);
	MarkGUCPrefixReserved("wfe");
}
