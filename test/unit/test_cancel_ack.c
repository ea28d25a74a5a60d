/*
 * test_cancel_ack.c — unit tests of wfe.ack_cancel's gate
 * (src/core/engine/cancel_ack.c): unknown, stale and accepted, the attempt
 * and the fence named by a request to stop (stage.cancelled, or an
 * operator's stage.failed_by_operator).
 *
 * A standalone TAP program, built with ASan/UBSan by the Makefile.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "core/engine/cancel_ack.h"

#include "tap.h"

/* The gate's answer word for one case. */
static const char *
gate(int exists, int row_attempt, int attempt, int named)
{
	wfe_cancel_ack_in in;

	memset(&in, 0, sizeof(in));
	in.exists = exists;
	in.row_attempt = row_attempt;
	in.attempt = attempt;
	in.stop_named_fence = named;
	return wfe_cancel_ack_word(wfe_cancel_ack_gate(&in));
}

int
main(void)
{
	ok(strcmp(gate(1, 2, 2, 1), "accepted") == 0,
	   "the attempt asked to stop, its fence named by the request (a cancel or a fail_stage): accepted");
	ok(strcmp(gate(0, 2, 2, 1), "unknown") == 0,
	   "no stage (or a caller who may not report for it): unknown");
	ok(strcmp(gate(0, 0, 1, 0), "unknown") == 0, "unknown comes first, whatever else");
	ok(strcmp(gate(1, 3, 2, 1), "stale") == 0,
	   "an earlier attempt (the stage was redriven or retried since): stale");
	ok(strcmp(gate(1, 2, 3, 1), "stale") == 0, "a later attempt than the row's: stale");
	ok(strcmp(gate(1, 2, 2, 0), "stale") == 0,
	   "a fence no request to stop superseded (the new one, or any other): stale");
	ok(strcmp(gate(1, 0, 0, 0), "stale") == 0, "a stage never released, no request: stale");
	ok(strcmp(wfe_cancel_ack_word((wfe_cancel_ack) 99), "unknown") == 0, "an unknown verdict's word is unknown");
	return tap_done();
}
