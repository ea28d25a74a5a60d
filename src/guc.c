/*
 * guc.c — wfe's configuration parameters (all named wfe.*).
 */
#include "postgres.h"

#include "utils/guc.h"

#include "wfe.h"

int			wfe_max_definition_bytes = 1024 * 1024;
int			wfe_max_stages = 500;
int			wfe_max_fanout = 64;
int			wfe_max_expression_bytes = 4096;
bool		wfe_four_eyes = false;

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
	MarkGUCPrefixReserved("wfe");
}
