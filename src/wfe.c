/*
 * wfe.c — module entry point: wfe, a durable workflow engine in PostgreSQL.
 *
 * _PG_init only asks each part to set itself up; the parts live in their
 * own files: guc.c (configuration), shmem.c (wakeups), worker.c (the
 * background worker), publisher.c and broker.c (the outbox publisher it
 * runs), compile_fn.c and runtime_fn.c (C behind SQL functions),
 * transitions.c (the legal state transitions).
 */
#include "postgres.h"

#include "fmgr.h"
#include "miscadmin.h"

#include "bgw/bgw.h"
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
	if (!process_shared_preload_libraries_in_progress)
		return;
	wfe_shmem_init();
	wfe_bgw_register();
}
