/*
 * dispatch.h — writing a released attempt's dispatch message to the outbox
 * (broker-mode queues; docs/architecture.md "Dispatch").
 *
 * The envelope is built by the core (src/core/engine/envelope.c); this
 * layer reads the attempt, writes wfe.outbox (and wfe.payloads on the large
 * track) and wakes the publisher.  Admission (wfe._broker_admit) is the
 * caller's: these functions dispatch unconditionally.  Call inside SPI.
 */
#ifndef WFE_DISPATCH_H
#define WFE_DISPATCH_H

#include "access/htup.h"
#include "access/tupdesc.h"

/*
 * What a dispatch reads of an attempt, in this order, from a query over
 * "wfe.runs AS r, wfe.run_stages AS s": a caller that reads the attempt
 * anyway (the engine's admission-gated read) selects these and hands the
 * row to wfe_dispatch_row.
 */
#define WFE_DISPATCH_COLUMNS \
	"r.run_id, s.stage, s.attempt, s.fence, r.definition_digest, s.worker, r.tenant," \
	" r.workflow, r.version, s.input, s.heartbeat_ms, s.exec_ms, s.deadline_at," \
	" r.trace_id, r.span_id, r.trace_flags, s.queue"

/* Dispatch the attempt of a row of WFE_DISPATCH_COLUMNS (row 0 of an SPI result, say). */
extern void wfe_dispatch_row(HeapTuple tuple, TupleDesc desc);

/* Read the current attempt of (run_id, stage) and dispatch it; false if there is no such stage. */
extern bool wfe_dispatch_write(int64 run_id, const char *stage);

/* The W3C traceparent of a run's attempt (36_trace_context.sql's rule); NULL if an id is NULL. */
extern char *wfe_attempt_traceparent(const char *trace_id, const char *run_span, const char *flags,
									 const char *stage, int attempt);

#endif							/* WFE_DISPATCH_H */
