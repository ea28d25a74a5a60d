/*
 * envelope.c — the dispatch envelope of an attempt (envelope.h).
 *
 * The JSON is written as text, not through json-c: the input is spliced in
 * as the JSON text the server read (it is valid JSON, and parsing it again
 * would cost the size of every small-track input), and the rest is a fixed
 * set of keys.  The server stores both texts as jsonb, so key order and
 * white space do not matter; what does is that every value equals, as
 * jsonb, what 0.2.0's PL/pgSQL wfe._dispatch wrote.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "envelope.h"
#include "core/base/json.h"

/* A growing text; failed once an allocation has failed. */
typedef struct buf
{
	char	   *data;
	size_t		len;
	size_t		cap;
	int			failed;
} buf;

/* Append n bytes. */
static void
put_n(buf *b, const char *s, size_t n)
{
	if (b->failed)
		return;
	if (b->len + n + 1 > b->cap)
	{
		size_t		cap = b->cap ? b->cap : 1024;
		char	   *p;

		while (b->len + n + 1 > cap)
			cap *= 2;
		p = realloc(b->data, cap);
		if (p == NULL)
		{
			b->failed = 1;
			return;
		}
		b->data = p;
		b->cap = cap;
	}
	memcpy(b->data + b->len, s, n);
	b->len += n;
	b->data[b->len] = '\0';
}

/* Append a C string. */
static void
put(buf *b, const char *s)
{
	put_n(b, s, strlen(s));
}

/* Append a JSON string of s (UTF-8 passed through; quotes, backslashes and controls escaped), or null. */
static void
put_str(buf *b, const char *s)
{
	const char *run;

	if (s == NULL)
	{
		put(b, "null");
		return;
	}
	put(b, "\"");
	run = s;
	for (; *s; s++)
	{
		unsigned char c = (unsigned char) *s;
		char		esc[8];

		if (c >= 0x20 && c != '"' && c != '\\')
			continue;
		put_n(b, run, (size_t) (s - run));
		if (c == '"' || c == '\\')
			snprintf(esc, sizeof(esc), "\\%c", c);
		else
			snprintf(esc, sizeof(esc), "\\u%04x", c);
		put(b, esc);
		run = s + 1;
	}
	put_n(b, run, (size_t) (s - run));
	put(b, "\"");
}

/* Append a key (a JSON string) and its colon, after a comma unless first. */
static void
put_key(buf *b, const char *key, int first)
{
	if (!first)
		put(b, ",");
	put_str(b, key);
	put(b, ":");
}

/* Append a number. */
static void
put_int(buf *b, int64_t v)
{
	char		n[24];

	snprintf(n, sizeof(n), "%" PRId64, v);
	put(b, n);
}

/* Append a number, as a JSON string. */
static void
put_int_str(buf *b, int64_t v)
{
	char		n[24];

	snprintf(n, sizeof(n), "%" PRId64, v);
	put_str(b, n);
}

/* Floor division and its remainder (the remainder never negative). */
static int64_t
floor_div(int64_t a, int64_t b, int64_t *rem)
{
	int64_t		q = a / b,
				r = a % b;

	if (r < 0)
	{
		q--;
		r += b;
	}
	*rem = r;
	return q;
}

/* The ISO 8601 UTC text of a time (envelope.h). */
void
wfe_iso_time(int64_t us, int zulu, char *out)
{
	int64_t		frac,
				secs,
				days,
				z,
				era,
				doe,
				yoe,
				doy,
				mp,
				y,
				m,
				d;

	secs = floor_div(us, 1000000, &frac);
	days = floor_div(secs, 86400, &secs);
	/* days since 1970-01-01 to the civil date (H. Hinnant's days_from_civil, inverted) */
	z = days + 10957 + 719468;
	era = (z >= 0 ? z : z - 146096) / 146097;
	doe = z - era * 146097;
	yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
	y = yoe + era * 400;
	doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
	mp = (5 * doy + 2) / 153;
	d = doy - (153 * mp + 2) / 5 + 1;
	m = mp < 10 ? mp + 3 : mp - 9;
	if (m <= 2)
		y++;
	out += sprintf(out, "%04" PRId64 "-%02" PRId64 "-%02" PRId64 "T%02d:%02d:%02d",
				   y, m, d, (int) (secs / 3600), (int) (secs / 60 % 60), (int) (secs % 60));
	if (zulu)
	{
		sprintf(out, ".%06dZ", (int) frac);
		return;
	}
	/* PostgreSQL's JSON timestamptz: the fraction without its trailing zeros */
	if (frac != 0)
	{
		int			n = sprintf(out, ".%06d", (int) frac);

		while (out[n - 1] == '0')
			n--;
		out += n;
	}
	strcpy(out, "+00:00");
}

/* Append a time as PostgreSQL's JSON writes a timestamptz in UTC. */
static void
put_time(buf *b, int64_t us)
{
	char		t[WFE_ISO_TIME_MAX];

	wfe_iso_time(us, 0, t);
	put_str(b, t);
}

/* The headers (the x-wfe-* keys workers route and deduplicate by). */
static void
build_headers(buf *b, const wfe_envelope_in *in, const char *track)
{
	char		deadline[WFE_ISO_TIME_MAX] = "";

	if (in->has_deadline)
		wfe_iso_time(in->deadline_us, 1, deadline);
	put(b, "{");
	put_key(b, "x-wfe-run-id", 1);
	put_int_str(b, in->run_id);
	put_key(b, "x-wfe-stage", 0);
	put_str(b, in->stage);
	put_key(b, "x-wfe-attempt", 0);
	put_int_str(b, in->attempt);
	put_key(b, "x-wfe-fence", 0);
	put_int_str(b, in->fence);
	put_key(b, "x-wfe-digest", 0);
	put_str(b, in->digest);
	put_key(b, "x-wfe-contract", 0);
	put_str(b, in->worker);
	put_key(b, "x-wfe-tenant", 0);
	put_str(b, in->tenant);
	put_key(b, "x-wfe-track", 0);
	put_str(b, track);
	put_key(b, "traceparent", 0);
	put_str(b, in->traceparent);
	/* '' when the attempt has no deadline: a header value is never null */
	put_key(b, "x-wfe-deadline", 0);
	put_str(b, deadline);
	put(b, "}");
}

/* The body: the attempt, its input inline (small track) or by reference (large). */
static void
build_body(buf *b, const wfe_envelope_in *in, const wfe_envelope *env, const char *input,
		   const char *hex)
{
	int			large = hex != NULL;

	put(b, "{");
	put_key(b, "message_id", 1);
	put_str(b, in->message_id);
	put_key(b, "correlation_id", 0);
	put_int_str(b, in->run_id);
	put_key(b, "workflow_name", 0);
	put_str(b, in->workflow);
	put_key(b, "workflow_version", 0);
	put_str(b, in->version);
	put_key(b, "definition_digest", 0);
	put_str(b, in->digest);
	put_key(b, "run_id", 0);
	put_int(b, in->run_id);
	put_key(b, "stage", 0);
	put_str(b, in->stage);
	put_key(b, "attempt", 0);
	put_int(b, in->attempt);
	put_key(b, "fence", 0);
	put_int(b, in->fence);
	put_key(b, "worker", 0);
	put_str(b, in->worker);
	put_key(b, "track", 0);
	put_str(b, env->track);
	/* what a pushed worker needs to keep the attempt alive */
	put_key(b, "heartbeat_ms", 0);
	if (in->has_heartbeat)
		put_int(b, in->heartbeat_ms);
	else
		put(b, "null");
	put_key(b, "execution_deadline_ms", 0);
	if (in->has_exec)
		put_int(b, in->exec_ms);
	else
		put(b, "null");
	put_key(b, "headers", 0);
	put(b, "{\"content_type\":\"application/json\",\"source\":\"wfe\",\"tenant\":");
	put_str(b, in->tenant);
	put(b, "}");
	/* run:stage:attempt, the key a worker's side effects may deduplicate by */
	put_key(b, "idempotency_key", 0);
	{
		buf			k = {0};

		put_int(&k, in->run_id);
		put(&k, ":");
		put(&k, in->stage);
		put(&k, ":");
		put_int(&k, in->attempt);
		if (k.failed)
			b->failed = 1;
		else
			put_str(b, k.data);
		free(k.data);
	}
	put_key(b, "deadline_at", 0);
	if (in->has_deadline)
		put_time(b, in->deadline_us);
	else
		put(b, "null");
	put_key(b, "payload_inline", 0);
	put(b, large ? "null" : input);
	/* the reference names the attempt: only its holder may fetch it (wfe.fetch_payload) */
	put_key(b, "payload_ref", 0);
	if (large)
	{
		put(b, "{\"bucket\":\"wfe.payloads\",\"key\":");
		put_str(b, env->payload_key);
		put_key(b, "sha256", 0);
		put_str(b, hex);
		put_key(b, "bytes", 0);
		put_int(b, (int64_t) env->input_bytes);
		put_key(b, "run_id", 0);
		put_int(b, in->run_id);
		put_key(b, "stage", 0);
		put_str(b, in->stage);
		put_key(b, "attempt", 0);
		put_int(b, in->attempt);
		put_key(b, "fence", 0);
		put_int(b, in->fence);
		put(b, "}");
	}
	else
		put(b, "null");
	put_key(b, "traceparent", 0);
	put_str(b, in->traceparent);
	put_key(b, "created_at", 0);
	put_time(b, in->created_us);
	put(b, "}");
}

/* Build an attempt's envelope (envelope.h). */
int
wfe_envelope_build(const wfe_envelope_in *in, wfe_sha256_fn sha256, wfe_envelope *out)
{
	const char *input = in->input ? in->input : "{}";
	buf			headers = {0},
				body = {0};
	char		digest[72];
	const char *hex = NULL;

	memset(out, 0, sizeof(*out));
	out->input_bytes = strlen(input);
	/* a large input goes once, by its SHA-256, to wfe.payloads; the envelope carries a reference */
	if ((int64_t) out->input_bytes > in->track_threshold)
	{
		unsigned char hash[32];

		sha256((const unsigned char *) input, out->input_bytes, hash);
		wfe_digest_text(hash, digest);
		out->payload_key = strdup(digest);
		if (out->payload_key == NULL)
			return -1;
		hex = digest + strlen("sha256:");
	}
	out->track = hex ? "large" : "small";
	build_headers(&headers, in, out->track);
	build_body(&body, in, out, input, hex);
	out->headers = headers.data;
	out->body = body.data;
	if (headers.failed || body.failed)
	{
		wfe_envelope_free(out);
		return -1;
	}
	return 0;
}

/* Release an envelope's texts. */
void
wfe_envelope_free(wfe_envelope *env)
{
	free(env->payload_key);
	free(env->headers);
	free(env->body);
	memset(env, 0, sizeof(*env));
}
