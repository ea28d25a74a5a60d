/*
 * test_cancel_ack.c — unit tests of wfe.ack_cancel's gate
 * (src/core/engine/cancel_ack.c): unknown, stale and accepted over every
 * stage state, the attempt and the fence named by stage.cancelled.
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
gate(int exists, wfe_state state, int row_attempt, int attempt, int named)
{
	wfe_cancel_ack_in in;

	memset(&in, 0, sizeof(in));
	in.exists = exists;
	in.state = state;
	in.row_attempt = row_attempt;
	in.attempt = attempt;
	in.cancel_named_fence = named;
	return wfe_cancel_ack_word(wfe_cancel_ack_gate(&in));
}

int
main(void)
{
	ok(strcmp(gate(1, WFE_CANCELLED, 2, 2, 1), "accepted") == 0,
	   "the cancelled attempt, its fence named by stage.cancelled: accepted");
	ok(strcmp(gate(0, WFE_CANCELLED, 2, 2, 1), "unknown") == 0,
	   "no stage (or a caller who may not report for it): unknown");
	ok(strcmp(gate(0, WFE_RUNNING, 0, 1, 0), "unknown") == 0, "unknown comes first, whatever else");
	ok(strcmp(gate(1, WFE_CANCELLED, 3, 2, 1), "stale") == 0, "an earlier attempt: stale");
	ok(strcmp(gate(1, WFE_CANCELLED, 2, 3, 1), "stale") == 0, "a later attempt than the row's: stale");
	ok(strcmp(gate(1, WFE_CANCELLED, 2, 2, 0), "stale") == 0,
	   "a fence the cancellation did not supersede (the new one, or any other): stale");
	for (int s = 0; s < WFE_NSTATES; s++)
		if (s != WFE_CANCELLED)
			ok(strcmp(gate(1, (wfe_state) s, 1, 1, 1), "stale") == 0,
			   "a stage %s, not cancelled: stale", wfe_state_name((wfe_state) s));
	ok(strcmp(wfe_cancel_ack_word((wfe_cancel_ack) 99), "unknown") == 0, "an unknown verdict's word is unknown");
	return tap_done();
}
