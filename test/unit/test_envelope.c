/*
 * test_envelope.c — unit tests of the dispatch envelope builder
 * (src/core/engine/envelope.c): the track by bytes, the headers and body
 * as JSON (parsed back with json-c and checked key by key), escaping,
 * NULL inputs and fields, and the ISO 8601 UTC times.  That the envelope
 * equals 0.2.0's PL/pgSQL one as jsonb is TAP 048's and the regress
 * test's (they need a server).
 *
 * A standalone TAP program, built with ASan/UBSan by the Makefile.
 */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>
#include <openssl/evp.h>

#include "core/engine/envelope.h"

#include "tap.h"

/* OpenSSL's SHA-256, as the CLI passes it. */
static void
sha256(const unsigned char *data, size_t len, unsigned char out[32])
{
	unsigned int n = 32;

	EVP_Digest(data, len, out, &n, EVP_sha256(), NULL);
}

/* Microseconds since 2000-01-01 UTC of a civil UTC time. */
static int64_t
at(int y, int mo, int d, int h, int mi, int s, int us)
{
	/* days from civil (H. Hinnant), then from 1970 to 2000 */
	int64_t		yy = mo <= 2 ? y - 1 : y;
	int64_t		era = (yy >= 0 ? yy : yy - 399) / 400;
	int64_t		yoe = yy - era * 400;
	int64_t		doy = (153 * (mo > 2 ? mo - 3 : mo + 9) + 2) / 5 + d - 1;
	int64_t		doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
	int64_t		days = era * 146097 + doe - 719468 - 10957;

	return ((days * 86400 + h * 3600 + mi * 60 + s) * 1000000LL) + us;
}

/* The attempt most tests vary. */
static wfe_envelope_in
base(void)
{
	wfe_envelope_in in;

	memset(&in, 0, sizeof(in));
	in.run_id = 42;
	in.stage = "charge";
	in.attempt = 2;
	in.fence = 9000000000LL;
	in.message_id = "6b1d3b9e-0a0c-4a3c-9b8e-111111111111";
	in.digest = "sha256:abc";
	in.worker = "billing.charge@1";
	in.tenant = "acme";
	in.workflow = "orders";
	in.version = "3";
	in.input = "{\"amount\": 12.5, \"items\": [1, 2]}";
	in.has_heartbeat = 1;
	in.heartbeat_ms = 5000;
	in.has_exec = 0;
	in.has_deadline = 1;
	in.deadline_us = at(2026, 12, 2, 8, 30, 0, 120000);
	in.traceparent = "00-0123456789abcdef0123456789abcdef-0123456789abcdef-01";
	in.created_us = at(2026, 12, 2, 8, 29, 59, 0);
	in.track_threshold = 524288;
	return in;
}

/* Member k of o as a string, or NULL (also for null). */
static const char *
str(json_object *o, const char *k)
{
	json_object *v;

	if (!json_object_object_get_ex(o, k, &v) || v == NULL || !json_object_is_type(v, json_type_string))
		return NULL;
	return json_object_get_string(v);
}

/* Is member k of o present and JSON null? */
static int
is_null(json_object *o, const char *k)
{
	json_object *v = NULL;

	return json_object_object_get_ex(o, k, &v) && v == NULL;
}

/* Member k of o as an integer (INT64_MIN if not an integer). */
static int64_t
num(json_object *o, const char *k)
{
	json_object *v;

	if (!json_object_object_get_ex(o, k, &v) || v == NULL || !json_object_is_type(v, json_type_int))
		return INT64_MIN;
	return json_object_get_int64(v);
}

/* The times: UTC, ISO 8601, both spellings. */
static void
test_times(void)
{
	char		t[WFE_ISO_TIME_MAX];

	wfe_iso_time(0, 1, t);
	ok(strcmp(t, "2000-01-01T00:00:00.000000Z") == 0, "the epoch, zulu (%s)", t);
	wfe_iso_time(0, 0, t);
	ok(strcmp(t, "2000-01-01T00:00:00+00:00") == 0, "the epoch, as JSON writes a timestamptz (%s)", t);
	wfe_iso_time(at(2026, 12, 2, 8, 30, 0, 120000), 0, t);
	ok(strcmp(t, "2026-12-02T08:30:00.12+00:00") == 0, "trailing fraction zeros dropped (%s)", t);
	wfe_iso_time(at(2026, 12, 2, 8, 30, 0, 120000), 1, t);
	ok(strcmp(t, "2026-12-02T08:30:00.120000Z") == 0, "six fraction digits, zulu (%s)", t);
	wfe_iso_time(at(2024, 2, 29, 23, 59, 59, 999999), 1, t);
	ok(strcmp(t, "2024-02-29T23:59:59.999999Z") == 0, "a leap day's last microsecond (%s)", t);
	wfe_iso_time(at(1999, 12, 31, 23, 59, 59, 1), 0, t);
	ok(strcmp(t, "1999-12-31T23:59:59.000001+00:00") == 0, "before the epoch (%s)", t);
	wfe_iso_time(at(1970, 1, 1, 0, 0, 0, 0) - 1, 1, t);
	ok(strcmp(t, "1969-12-31T23:59:59.999999Z") == 0, "before 1970 (%s)", t);
	wfe_iso_time(at(2100, 3, 1, 12, 0, 0, 500000), 0, t);
	ok(strcmp(t, "2100-03-01T12:00:00.5+00:00") == 0, "2100 is no leap year (%s)", t);
	/* every day of four centuries round-trips through the civil date */
	{
		int			bad = 0;

		for (int64_t d = -73048; d < 73048 * 2 && !bad; d += 1)
		{
			int			y,
						mo,
						dd;

			wfe_iso_time(d * 86400 * 1000000LL, 1, t);
			if (sscanf(t, "%d-%d-%dT", &y, &mo, &dd) != 3 || at(y, mo, dd, 0, 0, 0, 0) != d * 86400 * 1000000LL)
				bad = 1;
		}
		ok(!bad, "every day from 1800 to 2400 round-trips (last: %s)", t);
	}
}

/* The small track: input inline, the headers, the body's keys. */
static void
test_small(void)
{
	wfe_envelope_in in = base();
	wfe_envelope env;
	json_object *h,
			   *b,
			   *v;

	ok(wfe_envelope_build(&in, sha256, &env) == 0, "small: built");
	ok(strcmp(env.track, "small") == 0 && env.payload_key == NULL, "small: track small, no payload key");
	ok(env.input_bytes == strlen(in.input), "small: input bytes counted (%zu)", env.input_bytes);
	h = json_tokener_parse(env.headers);
	b = json_tokener_parse(env.body);
	ok(h != NULL && b != NULL, "small: headers and body are JSON");
	ok(str(h, "x-wfe-run-id") && strcmp(str(h, "x-wfe-run-id"), "42") == 0, "header run id is a string");
	ok(str(h, "x-wfe-attempt") && strcmp(str(h, "x-wfe-attempt"), "2") == 0, "header attempt is a string");
	ok(str(h, "x-wfe-fence") && strcmp(str(h, "x-wfe-fence"), "9000000000") == 0, "header fence is a string");
	ok(str(h, "x-wfe-contract") && strcmp(str(h, "x-wfe-contract"), "billing.charge@1") == 0, "header contract");
	ok(str(h, "x-wfe-track") && strcmp(str(h, "x-wfe-track"), "small") == 0, "header track");
	ok(str(h, "x-wfe-deadline") && strcmp(str(h, "x-wfe-deadline"), "2026-12-02T08:30:00.120000Z") == 0,
	   "header deadline, zulu");
	ok(json_object_object_length(h) == 10, "ten headers (%d)", json_object_object_length(h));
	ok(num(b, "run_id") == 42 && num(b, "attempt") == 2 && num(b, "fence") == 9000000000LL,
	   "body run id, attempt, fence are numbers");
	ok(str(b, "correlation_id") && strcmp(str(b, "correlation_id"), "42") == 0, "body correlation id");
	ok(str(b, "idempotency_key") && strcmp(str(b, "idempotency_key"), "42:charge:2") == 0, "body idempotency key");
	ok(num(b, "heartbeat_ms") == 5000 && is_null(b, "execution_deadline_ms"), "body heartbeat_ms set, execution null");
	ok(str(b, "deadline_at") && strcmp(str(b, "deadline_at"), "2026-12-02T08:30:00.12+00:00") == 0,
	   "body deadline_at, UTC");
	ok(str(b, "created_at") && strcmp(str(b, "created_at"), "2026-12-02T08:29:59+00:00") == 0,
	   "body created_at, UTC");
	ok(json_object_object_get_ex(b, "payload_inline", &v) && v != NULL &&
	   json_object_is_type(v, json_type_object) &&
	   json_object_get_double(json_object_object_get(v, "amount")) == 12.5, "body payload inline");
	ok(is_null(b, "payload_ref"), "body payload_ref null");
	ok(json_object_object_get_ex(b, "headers", &v) && str(v, "tenant") && strcmp(str(v, "tenant"), "acme") == 0 &&
	   strcmp(str(v, "content_type"), "application/json") == 0 && strcmp(str(v, "source"), "wfe") == 0,
	   "body headers");
	ok(json_object_object_length(b) == 20, "20 body keys (%d)", json_object_object_length(b));
	json_object_put(h);
	json_object_put(b);
	wfe_envelope_free(&env);
}

/* The large track: by reference, digested, at the threshold's edge. */
static void
test_large(void)
{
	wfe_envelope_in in = base();
	wfe_envelope env;
	json_object *b,
			   *h,
			   *ref;
	char		expect[72];
	unsigned char hash[32];

	in.track_threshold = (int64_t) strlen(in.input);
	ok(wfe_envelope_build(&in, sha256, &env) == 0 && strcmp(env.track, "small") == 0,
	   "an input of exactly the threshold's bytes is small");
	wfe_envelope_free(&env);
	in.track_threshold--;
	ok(wfe_envelope_build(&in, sha256, &env) == 0 && strcmp(env.track, "large") == 0,
	   "one byte over the threshold is large");
	sha256((const unsigned char *) in.input, strlen(in.input), hash);
	strcpy(expect, "sha256:");
	for (int i = 0; i < 32; i++)
		sprintf(expect + 7 + 2 * i, "%02x", hash[i]);
	ok(env.payload_key && strcmp(env.payload_key, expect) == 0, "payload key is sha256 of the input text");
	b = json_tokener_parse(env.body);
	h = json_tokener_parse(env.headers);
	ok(is_null(b, "payload_inline"), "large: payload_inline null");
	ok(json_object_object_get_ex(b, "payload_ref", &ref) && ref != NULL, "large: payload_ref");
	ok(strcmp(str(ref, "bucket"), "wfe.payloads") == 0 && strcmp(str(ref, "key"), expect) == 0 &&
	   strcmp(str(ref, "sha256"), expect + 7) == 0, "large: ref bucket, key, sha256");
	ok(num(ref, "bytes") == (int64_t) strlen(in.input) && num(ref, "run_id") == 42 &&
	   strcmp(str(ref, "stage"), "charge") == 0 && num(ref, "attempt") == 2 && num(ref, "fence") == 9000000000LL,
	   "large: the ref names the attempt and its bytes");
	ok(json_object_object_length(ref) == 8, "large: eight ref keys");
	ok(strcmp(str(h, "x-wfe-track"), "large") == 0 && strcmp(str(b, "track"), "large") == 0, "large: track named");
	json_object_put(b);
	json_object_put(h);
	wfe_envelope_free(&env);
}

/* NULLs: no input ({}), no deadline, no worker, no traceparent. */
static void
test_nulls(void)
{
	wfe_envelope_in in = base();
	wfe_envelope env;
	json_object *b,
			   *h,
			   *v;

	in.input = NULL;
	in.has_deadline = 0;
	in.worker = NULL;
	in.traceparent = NULL;
	in.has_heartbeat = 0;
	in.has_exec = 1;
	in.exec_ms = 0;
	ok(wfe_envelope_build(&in, sha256, &env) == 0, "nulls: built");
	ok(env.input_bytes == 2, "no input is {} (2 bytes)");
	b = json_tokener_parse(env.body);
	h = json_tokener_parse(env.headers);
	ok(b && json_object_object_get_ex(b, "payload_inline", &v) && v && json_object_object_length(v) == 0,
	   "no input: payload_inline {}");
	ok(str(h, "x-wfe-deadline") && strcmp(str(h, "x-wfe-deadline"), "") == 0, "no deadline: header ''");
	ok(is_null(b, "deadline_at"), "no deadline: body null");
	ok(is_null(h, "x-wfe-contract") && is_null(b, "worker"), "no worker: null");
	ok(is_null(h, "traceparent") && is_null(b, "traceparent"), "no traceparent: null");
	ok(is_null(b, "heartbeat_ms") && num(b, "execution_deadline_ms") == 0, "heartbeat null, exec 0");
	json_object_put(b);
	json_object_put(h);
	wfe_envelope_free(&env);
}

/* Strings that need escaping, and UTF-8 passed through. */
static void
test_escaping(void)
{
	wfe_envelope_in in = base();
	wfe_envelope env;
	json_object *b,
			   *h;

	in.stage = "st\"a\\ge\n\x01";
	in.tenant = "t\xc3\xa9n\xe2\x82\xac\xf0\x9f\x98\x80";	/* tén€😀 */
	in.input = "{\"s\": \"\\u00e9\xe2\x82\xac\", \"n\": null}";
	ok(wfe_envelope_build(&in, sha256, &env) == 0, "escaping: built");
	b = json_tokener_parse(env.body);
	h = json_tokener_parse(env.headers);
	ok(b && h, "escaping: still JSON");
	ok(str(h, "x-wfe-stage") && strcmp(str(h, "x-wfe-stage"), in.stage) == 0, "a stage with quotes, backslash, controls");
	ok(str(b, "idempotency_key") && strcmp(str(b, "idempotency_key"), "42:st\"a\\ge\n\x01:2") == 0,
	   "the idempotency key escaped as a whole");
	ok(str(b, "headers") == NULL && strcmp(str(json_object_object_get(b, "headers"), "tenant"), in.tenant) == 0,
	   "a UTF-8 tenant passed through");
	ok(strcmp(str(json_object_object_get(b, "payload_inline"), "s"), "\xc3\xa9\xe2\x82\xac") == 0,
	   "a unicode input inline");
	json_object_put(b);
	json_object_put(h);
	wfe_envelope_free(&env);
	{
		wfe_envelope empty;

		memset(&empty, 0, sizeof(empty));
		wfe_envelope_free(&empty);
		ok(1, "an empty envelope frees");
	}
}

int
main(void)
{
	test_times();
	test_small();
	test_large();
	test_nulls();
	test_escaping();
	return tap_done();
}
