/*
 * wfe.c — module entry point: wfe, a durable workflow engine in PostgreSQL.
 *
 * _PG_init only asks each part to set itself up; the parts live in their
 * own folders (docs/architecture.md has the map): src/pg/ the server layer
 * (guc.c defines the configuration), src/bgw/ the background worker with
 * its shared memory (shmem.c) and the outbox publisher it runs, src/amqp/
 * the AMQP client and topology, src/core/ the pure C cores.
 */
#include "postgres.h"

#include "fmgr.h"
#include "miscadmin.h"

#include "bgw/bgw.h"
#include "bgw/ratebuckets.h"
#include "pg/wfe.h"

PG_MODULE_MAGIC;

void		_PG_init(void);

/*
 * Module load: define configuration; under shared_preload_libraries also
 * reserve shared memory and register the background worker.
 */
void
_PG_init(void)
{
	wfe_guc_init();
	wfe_validation_init();
	if (!process_shared_preload_libraries_in_progress)
		return;
	wfe_shmem_init();
	wfe_rate_shmem_init();
	wfe_bgw_register();
}
