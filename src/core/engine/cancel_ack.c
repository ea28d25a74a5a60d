/*
 * cancel_ack.c — the gate of wfe.ack_cancel (cancel_ack.h).
 */
#include "cancel_ack.h"

/*
 * Decide an acknowledgement.  The attempt asked to stop is the one whose
 * fence a request to stop superseded: the stage is still at that attempt,
 * and a stage.cancelled or stage.failed_by_operator event of it names the
 * fence the worker held.  The stage's state does not matter: what follows
 * the request at the same attempt (an operator's skip_stage of the stage
 * fail_stage failed) does not unask it, and a new attempt (a redrive, a
 * retry) is another attempt.  Anything else (a later or earlier attempt,
 * a fence never asked to stop) is stale.
 */
wfe_cancel_ack
wfe_cancel_ack_gate(const wfe_cancel_ack_in *in)
{
	if (!in->exists)
		return WFE_CANCEL_ACK_UNKNOWN;
	if (in->row_attempt != in->attempt || !in->stop_named_fence)
		return WFE_CANCEL_ACK_STALE;
	return WFE_CANCEL_ACK_ACCEPTED;
}

/* The answer's word. */
const char *
wfe_cancel_ack_word(wfe_cancel_ack a)
{
	switch (a)
	{
		case WFE_CANCEL_ACK_ACCEPTED:
			return "accepted";
		case WFE_CANCEL_ACK_STALE:
			return "stale";
		case WFE_CANCEL_ACK_UNKNOWN:
			break;
	}
	return "unknown";
}
