/*
 * wfe.c — module entry point: wfe, a durable workflow engine in PostgreSQL.
 *
 * _PG_init only asks each part to set itself up; the parts live in their
 * own files (guc.c for configuration, compile_fn.c for the compiler's SQL
 * face, and later the runtime and the background worker).
 */
#include "postgres.h"

#include "fmgr.h"

#include "wfe.h"

PG_MODULE_MAGIC;

void		_PG_init(void);

/* Module load: define configuration. */
void
_PG_init(void)
{
	wfe_guc_init();
}
