/*
 * test_circuit.c — unit tests of circuit breakers (src/core/flow/circuit.c):
 * opening on the failure ratio over min_calls, the sliding window, the
 * cool-down, exactly one probe when half open, the probe's outcome, and
 * that only the probe's own end decides a half-open circuit.
 *
 * A standalone TAP program, built with ASan/UBSan by the Makefile.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "core/flow/circuit.h"
#include "tap.h"


#define MS 1000LL
#define SEC 1000000LL

/* An attempt that is not the probe ended: failed or succeeded. */
static wfe_circuit_change
record(wfe_circuit *c, const wfe_circuit_conf *conf, int64_t now_us, bool failed)
{
	return wfe_circuit_record(c, conf, now_us, failed ? WFE_CIRCUIT_FAILED : WFE_CIRCUIT_SUCCEEDED, false);
}

/* The half-open probe ended: failed or succeeded. */
static wfe_circuit_change
probe_end(wfe_circuit *c, const wfe_circuit_conf *conf, int64_t now_us, bool failed)
{
	return wfe_circuit_record(c, conf, now_us, failed ? WFE_CIRCUIT_FAILED : WFE_CIRCUIT_SUCCEEDED, true);
}

int
main(void)
{
	wfe_circuit_conf conf = {0.5, 4, 60 * SEC, 30 * SEC};
	wfe_circuit c;
	wfe_circuit_change ch;
	int64_t		t = 1000 * SEC;
	double		calls,
				failures;

	/* closed: everything goes; below min_calls nothing opens */
	wfe_circuit_init(&c, t);
	ok(strcmp(wfe_circuit_state_name(c.state), "closed") == 0, "a new circuit is closed");
	ok(wfe_circuit_admit(&c, &conf, t, 7, NULL) == 7, "closed: all 7 go");
	ok(record(&c, &conf, t + 1 * SEC, true) == WFE_CIRCUIT_SAME, "1 failure of 1: under min_calls");
	ok(record(&c, &conf, t + 2 * SEC, true) == WFE_CIRCUIT_SAME, "2 of 2: under min_calls");
	ok(record(&c, &conf, t + 3 * SEC, false) == WFE_CIRCUIT_SAME, "2 of 3: under min_calls");
	ch = record(&c, &conf, t + 4 * SEC, false);
	ok(ch == WFE_CIRCUIT_OPENED && c.state == WFE_CIRCUIT_OPEN, "2 failed of 4 at ratio 0.5: opens");

	/* open: nothing goes until open_ms has passed */
	ok(wfe_circuit_admit(&c, &conf, t + 5 * SEC, 3, &ch) == 0 && ch == WFE_CIRCUIT_SAME, "open: none go");
	ok(wfe_circuit_half_open_at(&c, &conf) == t + 34 * SEC, "half opens open_ms after opening");
	ok(record(&c, &conf, t + 6 * SEC, false) == WFE_CIRCUIT_SAME && c.state == WFE_CIRCUIT_OPEN,
	   "open: an earlier attempt's success does not close it");
	ok(wfe_circuit_admit(&c, &conf, t + 34 * SEC - 1, 3, NULL) == 0, "open: still none 1 us before");

	/* half open: exactly one probe */
	ok(wfe_circuit_tick(&c, &conf, t + 34 * SEC) == WFE_CIRCUIT_HALF_OPENED, "the timer half opens it");
	ok(strcmp(wfe_circuit_state_name(c.state), "half_open") == 0, "named half_open");
	ok(record(&c, &conf, t + 34 * SEC, true) == WFE_CIRCUIT_SAME,
	   "half open, no probe out: an earlier attempt's failure decides nothing");
	ok(wfe_circuit_admit(&c, &conf, t + 35 * SEC, 5, NULL) == 1, "half open: one of 5 goes (the probe)");
	ok(wfe_circuit_admit(&c, &conf, t + 35 * SEC, 5, NULL) == 0, "half open: a second claim gets none");
	ok(wfe_circuit_admit(&c, &conf, t + 99 * SEC, 1, NULL) == 0, "half open: none however long the probe takes");

	/* the probe fails: open again, for another open_ms */
	ch = probe_end(&c, &conf, t + 36 * SEC, true);
	ok(ch == WFE_CIRCUIT_OPENED && c.state == WFE_CIRCUIT_OPEN, "the probe's failure opens it again");
	ok(wfe_circuit_half_open_at(&c, &conf) == t + 66 * SEC, "for another open_ms");
	ok(wfe_circuit_admit(&c, &conf, t + 66 * SEC, 2, &ch) == 1 && ch == WFE_CIRCUIT_HALF_OPENED,
	   "a claim after open_ms half opens it itself and takes the probe");

	/* the probe succeeds: closed, with a fresh window */
	ch = probe_end(&c, &conf, t + 67 * SEC, false);
	ok(ch == WFE_CIRCUIT_CLOSED_AGAIN && c.state == WFE_CIRCUIT_CLOSED, "the probe's success closes it");
	ok(c.calls == 0 && c.prev_calls == 0, "closing starts an empty window");
	ok(wfe_circuit_admit(&c, &conf, t + 67 * SEC, 9, NULL) == 9, "closed again: all go");

	/* the window slides: old failures stop counting */
	wfe_circuit_init(&c, 0);
	for (int k = 0; k < 3; k++)
		record(&c, &conf, k * SEC, true);
	/* 3 failures at 0..2 s; at 125 s they are two windows old */
	ok(record(&c, &conf, 125 * SEC, true) == WFE_CIRCUIT_SAME,
	   "failures two windows old do not count");
	wfe_circuit_window(&c, &conf, 125 * SEC, &calls, &failures);
	ok(calls == 1 && failures == 1, "the window holds the one recent call");

	/* the previous window counts by its overlap */
	wfe_circuit_init(&c, 0);
	for (int k = 0; k < 4; k++)
		record(&c, &conf, 10 * SEC + k, false);
	wfe_circuit_window(&c, &conf, 90 * SEC, &calls, &failures);
	ok(calls > 1.99 && calls < 2.01, "half the previous window overlaps: 4 calls count as 2 (%g)", calls);
	wfe_circuit_window(&c, &conf, 120 * SEC, &calls, &failures);
	ok(calls == 0, "a full window later: none count");

	/* successes keep it closed; the ratio is >=, min_calls is >= */
	{
		wfe_circuit_conf c2 = {0.25, 8, 10 * SEC, 1 * SEC};

		wfe_circuit_init(&c, 0);
		for (int k = 0; k < 7; k++)
			record(&c, &c2, k * MS, k < 2);
		ok(c.state == WFE_CIRCUIT_CLOSED, "2 of 7 failed: under min_calls 8");
		ok(record(&c, &c2, 8 * MS, false) == WFE_CIRCUIT_OPENED,
		   "2 of 8 = 0.25 >= 0.25: opens");
		wfe_circuit_init(&c, 0);
		for (int k = 0; k < 100; k++)
			record(&c, &c2, k * MS, k % 5 == 4);
		ok(c.state == WFE_CIRCUIT_CLOSED, "1 in 5 failing at ratio 0.25 stays closed over 100 calls");
	}

	/* ratio 1: opens only when all failed */
	{
		wfe_circuit_conf c3 = {1.0, 3, 10 * SEC, 1 * SEC};

		wfe_circuit_init(&c, 0);
		record(&c, &c3, 1, true);
		record(&c, &c3, 2, false);
		record(&c, &c3, 3, true);
		ok(c.state == WFE_CIRCUIT_CLOSED, "ratio 1: one success among 3 keeps it closed");
		wfe_circuit_init(&c, 0);
		for (int k = 0; k < 3; k++)
			record(&c, &c3, k, true);
		ok(c.state == WFE_CIRCUIT_OPEN, "ratio 1: 3 of 3 failed opens it");
	}

	/* half open: only the probe's own end decides */
	wfe_circuit_init(&c, 0);
	c.state = WFE_CIRCUIT_HALF_OPEN;
	ok(wfe_circuit_admit(&c, &conf, 1 * SEC, 3, NULL) == 1 && c.probe_out, "half open: the probe goes");
	ok(record(&c, &conf, 2 * SEC, false) == WFE_CIRCUIT_SAME && c.state == WFE_CIRCUIT_HALF_OPEN,
	   "an older attempt's success while the probe is out does not close it");
	ok(record(&c, &conf, 3 * SEC, true) == WFE_CIRCUIT_SAME && c.state == WFE_CIRCUIT_HALF_OPEN,
	   "an older attempt's failure does not open it again");
	for (int k = 0; k < 8; k++)
		record(&c, &conf, 4 * SEC + k, true);
	ok(c.state == WFE_CIRCUIT_HALF_OPEN && c.probe_out, "nor do many, past min_calls and the ratio");
	ok(c.calls == 10 && c.failures == 9, "they count in the window (%d calls, %d failed)", c.calls, c.failures);
	ok(wfe_circuit_admit(&c, &conf, 5 * SEC, 3, NULL) == 0, "and no second probe goes meanwhile");
	ok(wfe_circuit_record(&c, &conf, 6 * SEC, WFE_CIRCUIT_CANCELLED, false) == WFE_CIRCUIT_SAME && c.probe_out,
	   "another attempt cancelled: nothing");
	ok(wfe_circuit_record(&c, &conf, 6 * SEC, WFE_CIRCUIT_CANCELLED, true) == WFE_CIRCUIT_PROBE_BACK
	   && c.state == WFE_CIRCUIT_HALF_OPEN && !c.probe_out, "the probe cancelled: given back, still half open");
	ok(wfe_circuit_admit(&c, &conf, 7 * SEC, 3, NULL) == 1, "so the next claim takes another probe");
	ok(probe_end(&c, &conf, 8 * SEC, false) == WFE_CIRCUIT_CLOSED_AGAIN && c.calls == 0,
	   "its success closes it, with an empty window");
	ok(probe_end(&c, &conf, 9 * SEC, true) == WFE_CIRCUIT_SAME && c.calls == 1,
	   "closed: a late end marked probe is just counted");
	wfe_circuit_init(&c, 0);
	c.state = WFE_CIRCUIT_HALF_OPEN;
	ok(probe_end(&c, &conf, 1 * SEC, true) == WFE_CIRCUIT_SAME && c.state == WFE_CIRCUIT_HALF_OPEN,
	   "half open with no probe out: nothing is the probe's outcome");
	ok(wfe_circuit_record(&c, &conf, 1 * SEC, WFE_CIRCUIT_CANCELLED, false) == WFE_CIRCUIT_SAME && c.calls == 1,
	   "a cancelled attempt never counts");

	ok(wfe_circuit_admit(&c, &conf, 0, 0, NULL) == 0, "want 0: none");

	return tap_done();
}
