/*
 * cancel_ack.c — the gate of wfe.ack_cancel (cancel_ack.h).
 */
#include "cancel_ack.h"

/*
 * Decide an acknowledgement.  The attempt asked to stop is the one whose
 * fence the cancellation superseded: the stage is cancelled, still at that
 * attempt, and its stage.cancelled event names the fence the worker held.
 * Anything else (a later attempt, a stage not cancelled, a fence never
 * asked to stop) is stale.
 */
wfe_cancel_ack
wfe_cancel_ack_gate(const wfe_cancel_ack_in *in)
{
	if (!in->exists)
		return WFE_CANCEL_ACK_UNKNOWN;
	if (in->row_attempt != in->attempt || in->state != WFE_CANCELLED || !in->cancel_named_fence)
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
