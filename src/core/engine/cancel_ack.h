/*
 * cancel_ack.h — the gate of wfe.ack_cancel (runtime.md "Cancellation"):
 * is a pushed worker's acknowledgement of a cancellation request about
 * the attempt that was asked to stop?  Pure C, no PostgreSQL headers; the
 * server layer (src/pg/cancel_ack.c) reads the stage and writes the event.
 */
#ifndef WFE_CANCEL_ACK_H
#define WFE_CANCEL_ACK_H

#include "states.h"

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
	wfe_state	state;			/* the row's state and attempt */
	int			row_attempt;
	int			attempt;		/* the attempt the worker acknowledges */
	int			cancel_named_fence; /* a stage.cancelled event of the row's attempt names the
									 * worker's fence (the fence the cancel superseded) */
} wfe_cancel_ack_in;

/* Decide an acknowledgement. */
extern wfe_cancel_ack wfe_cancel_ack_gate(const wfe_cancel_ack_in *in);

/* "accepted", "stale" or "unknown". */
extern const char *wfe_cancel_ack_word(wfe_cancel_ack a);

#endif							/* WFE_CANCEL_ACK_H */
