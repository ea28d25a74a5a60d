/*
 * envelope.h — the dispatch envelope of an attempt sent to a broker-mode
 * queue (docs/delivery.md "Envelope"): pure C, no PostgreSQL headers.
 *
 * The server layer (src/pg/dispatch.c) reads the attempt's fields, asks
 * wfe_envelope_build for the track and the message's headers and body as
 * JSON text, and writes them to wfe.outbox (and, on the large track, the
 * input to wfe.payloads).  Nothing here depends on a session's settings:
 * every time is written in UTC, ISO 8601.
 */
#ifndef WFE_ENVELOPE_H
#define WFE_ENVELOPE_H

#include <stddef.h>
#include <stdint.h>

#include "core/lang/compile.h"	/* wfe_sha256_fn */

/* What an envelope is built from: the attempt, its run, the moment. */
typedef struct wfe_envelope_in
{
	int64_t		run_id;
	const char *stage;
	int			attempt;
	int64_t		fence;
	const char *message_id;		/* the deterministic id (src/pg/message.c), as text */
	const char *digest;			/* the run's definition digest */
	const char *worker;			/* the worker contract (NULL: null) */
	const char *tenant;
	const char *workflow;		/* the run's workflow name and version */
	const char *version;
	const char *input;			/* the attempt's input, JSON text (NULL: {}) */
	int			has_heartbeat;	/* heartbeat_ms set? (else null) */
	int			heartbeat_ms;
	int			has_exec;		/* exec_ms set? (else null) */
	int			exec_ms;
	int			has_deadline;	/* deadline_us set? */
	int64_t		deadline_us;	/* microseconds since 2000-01-01 00:00 UTC */
	const char *traceparent;	/* the attempt's W3C traceparent (NULL: null) */
	int64_t		created_us;		/* when (microseconds since 2000-01-01 UTC) */
	int64_t		track_threshold;	/* inputs of more bytes go on the large track */
} wfe_envelope_in;

/* A built envelope: malloc'd JSON texts, released by wfe_envelope_free. */
typedef struct wfe_envelope
{
	const char *track;			/* "small" or "large" (static) */
	size_t		input_bytes;	/* the input's JSON text, in bytes */
	char	   *payload_key;	/* large track: "sha256:<hex>", the wfe.payloads key; else NULL */
	char	   *headers;		/* the message's headers (a JSON object) */
	char	   *body;			/* the message's body (a JSON object) */
} wfe_envelope;

/*
 * Build the envelope of *in into *out.  sha256 digests a large input (its
 * JSON text's bytes).  Returns 0, or -1 when memory ran out (*out is then
 * empty).
 */
extern int	wfe_envelope_build(const wfe_envelope_in *in, wfe_sha256_fn sha256, wfe_envelope *out);

/* Release what wfe_envelope_build allocated (an empty envelope is fine). */
extern void wfe_envelope_free(wfe_envelope *env);

/*
 * A time (microseconds since 2000-01-01 UTC) in ISO 8601 UTC, as the
 * envelope writes it, into out (at least WFE_ISO_TIME_MAX bytes).
 * zulu: "YYYY-MM-DDTHH:MM:SS.ffffffZ" (always six fraction digits, the
 * x-wfe-deadline header); else as PostgreSQL writes a timestamptz in JSON
 * in UTC: "YYYY-MM-DDTHH:MM:SS[.f...]+00:00", trailing fraction zeros
 * dropped.
 */
#define WFE_ISO_TIME_MAX 40
extern void wfe_iso_time(int64_t us, int zulu, char *out);

#endif							/* WFE_ENVELOPE_H */
