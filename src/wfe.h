/*
 * wfe.h — what the PostgreSQL-facing parts of wfe share: configuration.
 */
#ifndef WFE_WFE_H
#define WFE_WFE_H

/* Admission limits for definitions (GUCs wfe.max_*). */
extern int	wfe_max_definition_bytes;
extern int	wfe_max_stages;
extern int	wfe_max_fanout;
extern int	wfe_max_expression_bytes;
extern bool wfe_four_eyes;

/* Define the GUCs (called from _PG_init). */
extern void wfe_guc_init(void);

#endif							/* WFE_WFE_H */
