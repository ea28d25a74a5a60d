/*
 * fuzz_flow.c — libFuzzer harness over the flow-control core
 * (src/core/flow/: operations.md "Flow control").
 *
 * Each input configures one of each control from its first bytes -- a
 * token bucket (rate, burst, epoch), a few concurrency keys with their
 * max, a circuit (failure_ratio, min_calls, window, open time), a few
 * queue and tenant task limits -- and reads the rest as a sequence of
 * events, each one byte of command and two of argument: the clock moves
 * (forward, by steps from a microsecond to an hour, or a little back, as
 * two transactions' now() may), a claim takes tokens, held attempts get
 * their dues, a claim's candidates meet their keys (some keys' locks
 * busy), attempts of a key end, a key's max changes, the circuit admits
 * and attempts of its queue end (failed or not), a release picks held
 * tasks against queue and tenant room, and a transaction takes limit locks
 * in any order.  After every event the harness checks the controls'
 * promises and aborts (so libFuzzer keeps the input) when one breaks:
 *
 *  - rate limits: a take gets at most what it asked, leaves no whole
 *    token behind when it got less, keeps 0 <= tokens <= burst; all takes
 *    together stay within burst + rate x elapsed (the window property's
 *    upper bound); a held attempt's due is not before now, grows with its
 *    place in line and with the last held one's, and finds its token;
 *  - keyed concurrency: a key's claims never go past max less those
 *    running, no-key candidates go, a busy lock's candidates pass, a key
 *    held once holds its later candidates too;
 *  - circuits: closed admits all, open none, half open exactly one probe
 *    until an outcome after it decides; it opens exactly when the window
 *    reaches min_calls and failure_ratio, stays open until open_ms passed,
 *    its counts never go negative or past each other;
 *  - queue and tenant limits: a release never takes a limit past its room,
 *    never releases past a full limit, stops when both sides are out of
 *    room; the lock-order rule only ever waits in increasing order
 *    (tenants by name, then queues), so no two admissions wait in a circle.
 *
 * Fairness and set_priority are decided by the claim's SQL in the server
 * (src/pg/fairness.c, src/sql/79_priority.sql); they have no core to fuzz.
 *
 * Build and run: make fuzz (make test runs it briefly).
 */
#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/flow/admission.h"
#include "core/flow/circuit.h"
#include "core/flow/concurrency.h"
#include "core/flow/ratelimit.h"

int			LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define N(a) (sizeof(a) / sizeof((a)[0]))
#define NKEYS 4
#define NCAND 12
#define NLIMITS 6				/* three queues' rooms, then three tenants' */

static const double RATES[] = {0.001, 0.5, 1.0, 3.3, 4.0, 100.0, 1e6};
static const int BURSTS[] = {1, 2, 5, 1000, 0 /* the default: one second's tokens */};
static const int64_t EPOCHS[] = {0, 1, 851000000000000LL /* 2026 as TimestampTz */};
static const int64_t STEPS_US[] = {0, 1, 999, 1000, 250000, 1000000, 60000000, 3600000000LL};
static const double RATIOS[] = {0.01, 0.33, 0.5, 1.0};
static const int MIN_CALLS[] = {1, 2, 5, 20};
static const int64_t WINDOWS_US[] = {7, 1000, 1000000, 60000000};
static const int64_t OPENS_US[] = {1, 1000, 30000000};
static const char *const NAMES[] = {"", "a", "b", "tenant-b", "q", "z"};

/* Break: print and abort, so libFuzzer keeps the input. */
static void
violation(const char *what, double a, double b)
{
	fprintf(stderr, "fuzz_flow: broken invariant: %s (%.17g, %.17g)\n", what, a, b);
	abort();
}

#define CHECK(cond, what, a, b) do { if (!(cond)) violation(what, (double) (a), (double) (b)); } while (0)

/* The harness's view of everything, beside the cores' own state. */
typedef struct flow
{
	int64_t		now;			/* the clock as the last event saw it */
	int64_t		latest;			/* the latest it has been: elapsed time never shrinks */
	/* a token bucket */
	double		rate;
	int			burst;
	wfe_bucket	bucket;
	int64_t		start;
	double		taken;			/* all tokens taken since start */
	int			takes;
	int64_t		horizon;		/* the due of the last attempt held (0: none) */
	/* keyed concurrency */
	int			max[NKEYS];
	int			busy[NKEYS];	/* attempts of the key running */
	/* a circuit */
	wfe_circuit_conf conf;
	wfe_circuit circuit;
	int			probes;			/* attempts let through since it half opened */
	bool		probe_held;		/* the probe is among the attempts out */
	int			out;			/* attempts released and not ended */
	bool		monotonic;		/* the clock never went back since the circuit's last change */
	/* queue and tenant limits: room left per limit, in flight per limit */
	int			limit[NLIMITS];
	int			in_flight[NLIMITS];
} flow;

/* The clock moves: forward by a step, or a little back. */
static void
tick(flow *f, unsigned sel)
{
	if ((sel & 0xF0) == 0xF0)
	{
		f->now -= (int64_t) (sel & 0x0F) * 1000;
		f->monotonic = false;
	}
	else
		f->now += STEPS_US[sel % N(STEPS_US)] * (int64_t) (1 + (sel >> 4) % 3);
	if (f->now > f->latest)
		f->latest = f->now;
}

/* A claim takes up to want tokens; the held ones get their dues. */
static void
rate_take(flow *f, int want, int held)
{
	int			got = wfe_bucket_take(&f->bucket, f->rate, f->burst, f->now, want);
	int64_t		last = 0;

	CHECK(got >= 0 && got <= want, "a take got more than it asked, or less than nothing", got, want);
	CHECK(f->bucket.tokens >= 0 && f->bucket.tokens <= f->burst, "tokens outside 0 .. burst",
		  f->bucket.tokens, f->burst);
	CHECK(got == want || f->bucket.tokens < 1.0, "a take left a whole token behind", f->bucket.tokens, want);
	f->taken += got;
	f->takes++;
	/* the upper bound of the window property: burst + rate x elapsed (and the take's slack) */
	CHECK(f->taken <= f->burst + f->rate * (double) (f->latest - f->start) / 1e6 + f->takes * 1e-9 + 1e-6,
		  "more tokens taken than burst + rate x elapsed", f->taken, (double) (f->latest - f->start));
	if (got == want)
		return;
	for (int k = 1; k <= held; k++)
	{
		int64_t		due = wfe_bucket_due(&f->bucket, f->rate, f->now, f->horizon, k);

		CHECK(due >= f->now, "a held attempt due before now", due, f->now);
		CHECK(due >= last, "a later place in line due earlier", due, last);
		CHECK(f->horizon == 0 || due >= f->horizon, "due before the last held attempt", due, f->horizon);
		if (k <= f->burst && f->bucket.at_us == f->now)
		{
			/*
			 * (Not when the bucket's time is past this clock, as another
			 * transaction's later now() leaves it: the due is then early, and
			 * the attempt is held again -- late, never over the rate.)
			 */
			/* at its due, the bucket holds its token (none taken meanwhile) */
			wfe_bucket	b = f->bucket;

			wfe_bucket_refill(&b, f->rate, f->burst, due);
			CHECK(b.tokens + 1e-6 * k >= k, "a held attempt's token is not there at its due", b.tokens, k);
		}
		last = due;
	}
	f->horizon = last;			/* as the server keeps held_through */
}

/* A claim's candidates meet their keys. */
static void
slots_claim(flow *f, const uint8_t *arg, int n)
{
	int			slot[NCAND];
	int			room[NKEYS];
	int			room0[NKEYS];
	int			gone[NKEYS] = {0};
	bool		held[NKEYS] = {false};
	wfe_slot_verdict verdict[NCAND];
	int			go;
	int			counted = 0;

	for (int j = 0; j < NKEYS; j++)
	{
		int			r = wfe_slots_room(f->max[j], f->busy[j]);

		CHECK(r >= 0 && r <= f->max[j] && (r == 0 || r == f->max[j] - f->busy[j]), "a key's room is wrong", r,
			  f->busy[j]);
		/* the low bits of the first argument say which keys' locks are busy */
		room[j] = room0[j] = (((arg[0] >> j) & 1) && (arg[0] & 0x80)) ? -1 : r;
	}
	for (int k = 0; k < n; k++)
		slot[k] = (arg[1 + k / 4] >> (2 * (k % 4))) % 5 == 4 ? -1 : (arg[1 + k / 4] >> (2 * (k % 4))) % 4;
	go = wfe_slots_admit(n, slot, room, verdict);
	for (int k = 0; k < n; k++)
	{
		int			j = slot[k];

		counted += verdict[k] == WFE_SLOT_GO;
		if (j < 0)
		{
			CHECK(verdict[k] == WFE_SLOT_GO, "a candidate without a key did not go", k, verdict[k]);
			continue;
		}
		if (room0[j] < 0)
		{
			CHECK(verdict[k] == WFE_SLOT_PASS, "a candidate whose key's lock is busy did not pass", k, verdict[k]);
			continue;
		}
		if (verdict[k] == WFE_SLOT_GO)
		{
			CHECK(!held[j], "a key held a candidate, then let a later one go", k, j);
			gone[j]++;
		}
		else
		{
			CHECK(verdict[k] == WFE_SLOT_HOLD && gone[j] == room0[j], "a candidate held while its key had room",
				  gone[j], room0[j]);
			held[j] = true;
		}
	}
	CHECK(go == counted, "wfe_slots_admit's count is not its verdicts'", go, counted);
	for (int j = 0; j < NKEYS; j++)
	{
		if (room0[j] < 0)
			continue;
		CHECK(gone[j] <= room0[j] && room[j] == room0[j] - gone[j], "a key's room was not consumed as taken",
			  gone[j], room0[j]);
		/* past a lowered max, nothing more goes until enough end */
		CHECK(gone[j] == 0 || f->busy[j] + gone[j] <= f->max[j], "a key went past its max", f->busy[j] + gone[j],
			  f->max[j]);
		f->busy[j] += gone[j];
	}
}

/* The circuit lets attempts through, or not. */
static void
circuit_admit(flow *f, int want)
{
	wfe_circuit_state before = f->circuit.state;
	wfe_circuit_change change;
	int			n = wfe_circuit_admit(&f->circuit, &f->conf, f->now, want, &change);

	CHECK(n >= 0 && n <= (want > 0 ? want : 0), "admitted outside 0 .. want", n, want);
	if (change == WFE_CIRCUIT_HALF_OPENED)
	{
		CHECK(before == WFE_CIRCUIT_OPEN && f->now >= f->circuit.since_us,
			  "half opened from another state than open", before, f->now);
		f->probes = 0;
		f->probe_held = false;	/* the attempts out were released before: none is the probe */
		f->monotonic = true;
	}
	else
		CHECK(change == WFE_CIRCUIT_SAME, "an admit changed the circuit other than by half opening", change, 0);
	switch (f->circuit.state)
	{
		case WFE_CIRCUIT_CLOSED:
			CHECK(n == (want > 0 ? want : 0), "a closed circuit held attempts back", n, want);
			break;
		case WFE_CIRCUIT_OPEN:
			CHECK(n == 0, "an open circuit let attempts through", n, want);
			CHECK(!f->monotonic || f->now < wfe_circuit_half_open_at(&f->circuit, &f->conf),
				  "an open circuit past its open time", f->now, wfe_circuit_half_open_at(&f->circuit, &f->conf));
			break;
		case WFE_CIRCUIT_HALF_OPEN:
			f->probes += n;
			if (n > 0)
				f->probe_held = true;
			CHECK(f->probes <= 1, "more than one probe through a half-open circuit", f->probes, want);
			CHECK(f->circuit.probe_out == (f->probes == 1), "probe_out disagrees with the probes let through",
				  f->circuit.probe_out, f->probes);
			break;
	}
	f->out += n;
}

/*
 * An attempt of the circuit's queue ends as outcome; it is the probe when
 * one is out and want_probe says so (or it is the only attempt out).
 */
static void
circuit_record(flow *f, wfe_circuit_outcome outcome, bool want_probe)
{
	bool		failed = outcome == WFE_CIRCUIT_FAILED;
	bool		cancelled = outcome == WFE_CIRCUIT_CANCELLED;
	bool		probe;
	wfe_circuit c = f->circuit;
	wfe_circuit_state before;
	wfe_circuit_change change;
	double		calls,
				failures;

	if (f->out == 0)
		return;
	/* what it would see: the tick first, then (closed) the window with this call in it */
	if (wfe_circuit_tick(&c, &f->conf, f->now) == WFE_CIRCUIT_HALF_OPENED)
	{
		f->probes = 0;			/* the record half opens it first */
		f->probe_held = false;
	}
	probe = f->probe_held && (want_probe || f->out == 1);
	f->out--;
	if (probe)
		f->probe_held = false;
	before = c.state;
	wfe_circuit_window(&c, &f->conf, f->now, &calls, &failures);
	calls += !cancelled;
	failures += failed;
	change = wfe_circuit_record(&f->circuit, &f->conf, f->now, outcome, probe);
	if (cancelled)
		CHECK(change == (probe && c.probe_out ? WFE_CIRCUIT_PROBE_BACK : WFE_CIRCUIT_SAME),
			  "a cancelled attempt did other than give the probe back", change, probe);
	switch (before)
	{
		case WFE_CIRCUIT_CLOSED:
			if (f->monotonic && f->now >= c.win_start_us)
				CHECK((change == WFE_CIRCUIT_OPENED) ==
					  (calls + 1e-9 >= f->conf.min_calls && failures + 1e-9 >= f->conf.failure_ratio * calls),
					  "a closed circuit opened other than at min_calls and failure_ratio", calls, failures);
			CHECK(change == WFE_CIRCUIT_SAME || change == WFE_CIRCUIT_OPENED, "a closed circuit did not stay or open",
				  change, 0);
			break;
		case WFE_CIRCUIT_OPEN:
			CHECK(change == WFE_CIRCUIT_SAME, "an open circuit's late outcome changed it", change, 0);
			break;
		case WFE_CIRCUIT_HALF_OPEN:
			if (!probe)
				CHECK(change == WFE_CIRCUIT_SAME, "an attempt other than the probe decided", change, c.probe_out);
			else if (cancelled)
			{
				CHECK(!f->circuit.probe_out, "a cancelled probe was not given back", f->circuit.probe_out, 0);
				f->probes = 0;
			}
			else
				CHECK(change == (failed ? WFE_CIRCUIT_OPENED : WFE_CIRCUIT_CLOSED_AGAIN),
					  "the probe's outcome did not decide", change, failed);
			break;
	}
	if (change != WFE_CIRCUIT_SAME && change != WFE_CIRCUIT_PROBE_BACK)
	{
		f->probe_held = false;
		CHECK(f->circuit.since_us == f->now && !f->circuit.probe_out && f->circuit.calls == 0,
			  "a change did not start the new state afresh", f->circuit.since_us, f->now);
		CHECK(f->circuit.state == (change == WFE_CIRCUIT_OPENED ? WFE_CIRCUIT_OPEN : WFE_CIRCUIT_CLOSED),
			  "the state is not the change's", f->circuit.state, change);
		f->monotonic = true;
	}
	CHECK(f->circuit.calls >= 0 && f->circuit.failures >= 0 && f->circuit.failures <= f->circuit.calls &&
		  f->circuit.prev_failures >= 0 && f->circuit.prev_failures <= f->circuit.prev_calls,
		  "the circuit's counts went negative or past each other", f->circuit.calls, f->circuit.failures);
}

/* A release picks held tasks against queue and tenant room. */
static void
release(flow *f, const uint8_t *arg, int n)
{
	wfe_release_scope scope;
	int			qslot[NCAND],
				tslot[NCAND];
	int			room[NLIMITS],
				room0[NLIMITS],
				taken[NLIMITS] = {0};
	bool		go[NCAND];
	int			count,
				counted = 0;
	bool		out = false;	/* both sides were out of room at some point */

	scope.queue_side = arg[0] & 1;
	scope.queue_slot = (arg[0] & 2) ? (int) ((arg[0] >> 2) % 3) : -1;
	scope.tenant_side = arg[0] & 0x10;
	scope.tenant_slot = (arg[0] & 0x20) ? 3 + (int) ((arg[0] >> 6) % 3) : -1;
	for (int l = 0; l < NLIMITS; l++)
	{
		/* a limit whose lock was not taken has room 0 (the second argument's bits) */
		room[l] = room0[l] = (arg[1] >> l) & 1 ? 0 :
			(f->limit[l] > f->in_flight[l] ? f->limit[l] - f->in_flight[l] : 0);
	}
	for (int k = 0; k < n; k++)
	{
		unsigned	b = (unsigned) (arg[2 + k % 2] >> (k / 2 % 4)) ^ ((unsigned) k * 37u);

		qslot[k] = b % 4 == 3 ? -1 : (int) (b % 4);
		tslot[k] = (b >> 2) % 4 == 3 ? -1 : 3 + (int) ((b >> 2) % 4);
	}
	count = wfe_release_pick(&scope, n, qslot, tslot, room, go);
	for (int l = 0; l < NLIMITS; l++)
		room[l] = room0[l];
	for (int k = 0; k < n; k++)
	{
		out = out || wfe_release_exhausted(&scope, room);
		if (!go[k])
			continue;
		counted++;
		CHECK(!out, "a release went on once both sides were out of room", k, n);
		CHECK((qslot[k] < 0 || room[qslot[k]] > 0) && (tslot[k] < 0 || room[tslot[k]] > 0),
			  "a held task released past a full limit", k, qslot[k]);
		if (qslot[k] >= 0)
			room[qslot[k]]--, taken[qslot[k]]++;
		if (tslot[k] >= 0)
			room[tslot[k]]--, taken[tslot[k]]++;
	}
	CHECK(count == counted, "wfe_release_pick's count is not its choices'", count, counted);
	for (int l = 0; l < NLIMITS; l++)
	{
		CHECK(taken[l] <= room0[l], "a release took a limit past its room", taken[l], room0[l]);
		f->in_flight[l] += taken[l];
		CHECK(taken[l] == 0 || f->in_flight[l] <= f->limit[l], "a limit went past its max", f->in_flight[l],
			  f->limit[l]);
	}
}

/* A transaction takes limit locks in the order its bytes say: it may wait only in increasing order. */
static void
lock_order(const uint8_t *arg, int n)
{
	const char *held_tenant = NULL,
			   *held_queue = NULL;

	for (int k = 0; k < n; k++)
	{
		wfe_limit_kind kind = (arg[k] & 0x80) ? WFE_LIMIT_QUEUE : WFE_LIMIT_TENANT;
		const char *name = NAMES[arg[k] % N(NAMES)];

		if (wfe_admission_lock_mode(kind, name, held_tenant, held_queue) != WFE_LOCK_WAIT)
			continue;
		if (kind == WFE_LIMIT_TENANT)
		{
			CHECK(held_queue == NULL && (held_tenant == NULL || strcmp(name, held_tenant) > 0),
				  "waited for a tenant's lock out of order", k, 0);
			held_tenant = name;
		}
		else
		{
			CHECK(held_queue == NULL || strcmp(name, held_queue) > 0, "waited for a queue's lock out of order", k, 0);
			held_queue = name;
		}
	}
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	flow		f;
	size_t		pos = 8;
	int			commands = 0;

	if (size < 8)
		return 0;
	memset(&f, 0, sizeof(f));
	f.start = f.now = f.latest = EPOCHS[data[0] % N(EPOCHS)];
	f.rate = RATES[(data[0] >> 2) % N(RATES)];
	f.burst = BURSTS[data[1] % N(BURSTS)];
	if (f.burst == 0)
		f.burst = wfe_bucket_default_burst(f.rate);
	f.bucket.tokens = f.burst;	/* a new bucket starts full (configure_rate_limit) */
	f.bucket.at_us = f.now;
	for (int j = 0; j < NKEYS; j++)
		f.max[j] = 1 + ((data[2] >> (2 * j)) & 3);
	f.conf.failure_ratio = RATIOS[data[3] % N(RATIOS)];
	f.conf.min_calls = MIN_CALLS[(data[3] >> 2) % N(MIN_CALLS)];
	f.conf.window_us = WINDOWS_US[(data[3] >> 4) % N(WINDOWS_US)];
	f.conf.open_us = OPENS_US[(data[3] >> 6) % N(OPENS_US)];
	wfe_circuit_init(&f.circuit, f.now);
	f.monotonic = true;
	for (int l = 0; l < NLIMITS; l++)
		f.limit[l] = 1 + (data[4 + l / 2] >> (4 * (l % 2)) & 7);

	while (pos + 3 <= size && commands++ < 500)
	{
		unsigned	cmd = data[pos];
		const uint8_t *arg = &data[pos + 1];

		pos += 3;
		switch (cmd % 12)
		{
			case 0:
			case 1:
				tick(&f, arg[0]);
				break;
			case 2:
				rate_take(&f, arg[0] % 40, arg[1] % 40);
				break;
			case 3:
				/* the limit is changed: its buckets forget their held horizon (configure_rate_limit) */
				f.horizon = 0;
				break;
			case 4:
				if (pos + 3 <= size)
				{
					uint8_t		a[4] = {arg[0], arg[1], data[pos], data[pos + 1]};

					slots_claim(&f, a, 1 + (int) (data[pos + 2] % NCAND));
					pos += 3;
				}
				break;
			case 5:
				/* an attempt of a key ends (a completion, a failure, a fence) */
				if (f.busy[arg[0] % NKEYS] > 0)
					f.busy[arg[0] % NKEYS]--;
				break;
			case 6:
				/* a key's max changes: a new definition version (may fall below those running) */
				f.max[arg[0] % NKEYS] = 1 + arg[1] % 4;
				break;
			case 7:
				circuit_admit(&f, (int) (arg[0] % 6) - 1);
				break;
			case 8:
				circuit_record(&f, (arg[0] & 3) == 3 ? WFE_CIRCUIT_SUCCEEDED : (wfe_circuit_outcome) (arg[0] & 3),
							   arg[0] & 4);
				break;
			case 9:
				if (pos + 1 <= size)
				{
					uint8_t		a[4] = {arg[0], arg[1], data[pos], data[pos]};

					release(&f, a, 1 + (int) (arg[1] % NCAND));
					pos += 1;
				}
				break;
			case 10:
				/* a task under a limit ends */
				if (f.in_flight[arg[0] % NLIMITS] > 0)
					f.in_flight[arg[0] % NLIMITS]--;
				if (arg[1] & 1)
					f.limit[arg[1] % NLIMITS] = 1 + arg[0] % 8;	/* or its limit changes */
				break;
			default:
				lock_order(arg, 2);
				if (pos + 4 <= size)
				{
					lock_order(&data[pos], 4);
					pos += 4;
				}
		}
	}
	return 0;
}
