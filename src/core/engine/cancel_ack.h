/*
 * cancel_ack.h — the gate of wfe.ack_cancel (runtime.md "Cancellation"):
 * is a pushed worker's acknowledgement of a request to stop about the
 * attempt that was asked to stop?  Pure C, no PostgreSQL headers; the
 * server layer (src/pg/cancel_ack.c) reads the stage and writes the event.
 *
 * Two things ask a worker to stop an attempt, each fencing it and writing
 * an event whose fence column is the fence the worker holds: a run's
 * cancel or terminal intent (stage.cancelled) and an operator's fail_stage
 * (stage.failed_by_operator).  A broker worker gets the same cancel
 * message for both, so both are acknowledged the same way.
 */
#ifndef WFE_CANCEL_ACK_H
#define WFE_CANCEL_ACK_H

/* ack_cancel's answers, as the spec words them (wfe_cancel_ack_word). */
typedef enum wfe_cancel_ack
{
	WFE_CANCEL_ACK_ACCEPTED,	/* the attempt asked to stop: stage.cancel_acknowledged */
	WFE_CANCEL_ACK_STALE,		/* another attempt, or one never asked to stop: callback.stale */
	WFE_CANCEL_ACK_UNKNOWN		/* no such stage, or one the caller may not report for: no event */
} wfe_cancel_ack;

/* What the gate looks at: the stage row as it is, and the acknowledgement. */
typedef struct wfe_cancel_ack_in
{
	int			exists;			/* the stage row exists and the caller may call back about it */
	int			row_attempt;	/* the row's attempt */
	int			attempt;		/* the attempt the worker acknowledges */
	int			stop_named_fence;	/* a request to stop the row's attempt (stage.cancelled,
									 * stage.failed_by_operator) names the worker's fence */
} wfe_cancel_ack_in;

/* Decide an acknowledgement. */
extern wfe_cancel_ack wfe_cancel_ack_gate(const wfe_cancel_ack_in *in);

/* "accepted", "stale" or "unknown". */
extern const char *wfe_cancel_ack_word(wfe_cancel_ack a);

#endif							/* WFE_CANCEL_ACK_H */
