/*
 * fairorder.c — which of two tenants of a fair queue goes first
 * (fairorder.h).
 */
#include "fairorder.h"

/*
 * Passes closer than this are equal: a pass is a sum of 1/weight steps, so
 * two that should be equal differ by rounding only, and the smallest step
 * (weight 10000) is a hundred times this.
 */
#define PASS_EPSILON 1e-6

/* Does the tenant (pass_a, ready_a) go before (pass_b, ready_b)? (fairorder.h) */
bool
wfe_fair_before(double pass_a, int64_t ready_a, double pass_b, int64_t ready_b)
{
	if (pass_a < pass_b - PASS_EPSILON)
		return true;
	if (pass_a > pass_b + PASS_EPSILON)
		return false;
	/* owed the same: the one without a backlog, whose task would wait behind it for nothing */
	return ready_a > ready_b;
}
