/*
 * fairorder.h — which of two tenants of a fair queue goes first
 * (operations.md "Flow control": fairness => 'tenant'); pure C, no
 * PostgreSQL headers.
 *
 * Stride scheduling (src/pg/fairness.c) gives the next task to the tenant
 * with the lowest pass.  Equal passes are common: every tenant a claimer
 * has not served yet starts at the queue's virtual time, and a tenant
 * served once is level again with one that has a backlog.  Both are owed
 * the same, so fairness allows either order; what the order decides is
 * latency.  A tenant whose next task became ready later goes first: that
 * is the tenant with no backlog (a tenant with one has an old task at its
 * head), whose task would otherwise wait a whole claim behind a backlog
 * that gains nothing from going first.
 */
#ifndef WFE_FAIRORDER_H
#define WFE_FAIRORDER_H

#include <stdbool.h>
#include <stdint.h>

/*
 * Does a tenant at pass pass_a whose next task became ready at ready_a
 * (any clock, later is larger) go before one at pass_b and ready_b?  The
 * lower pass; on equal passes (within rounding: passes are sums of
 * 1/weight), the later ready.  Neither goes before the other when both
 * are equal.
 */
extern bool wfe_fair_before(double pass_a, int64_t ready_a, double pass_b, int64_t ready_b);

#endif							/* WFE_FAIRORDER_H */
