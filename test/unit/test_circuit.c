/*
 * test_circuit.c — unit tests of circuit breakers (src/core/flow/circuit.c):
 * opening on the failure ratio over min_calls, the sliding window, the
 * cool-down, exactly one probe when half open, the probe's outcome.
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
	ok(wfe_circuit_record(&c, &conf, t + 1 * SEC, true) == WFE_CIRCUIT_SAME, "1 failure of 1: under min_calls");
	ok(wfe_circuit_record(&c, &conf, t + 2 * SEC, true) == WFE_CIRCUIT_SAME, "2 of 2: under min_calls");
	ok(wfe_circuit_record(&c, &conf, t + 3 * SEC, false) == WFE_CIRCUIT_SAME, "2 of 3: under min_calls");
	ch = wfe_circuit_record(&c, &conf, t + 4 * SEC, false);
	ok(ch == WFE_CIRCUIT_OPENED && c.state == WFE_CIRCUIT_OPEN, "2 failed of 4 at ratio 0.5: opens");

	/* open: nothing goes until open_ms has passed */
	ok(wfe_circuit_admit(&c, &conf, t + 5 * SEC, 3, &ch) == 0 && ch == WFE_CIRCUIT_SAME, "open: none go");
	ok(wfe_circuit_half_open_at(&c, &conf) == t + 34 * SEC, "half opens open_ms after opening");
	ok(wfe_circuit_record(&c, &conf, t + 6 * SEC, false) == WFE_CIRCUIT_SAME && c.state == WFE_CIRCUIT_OPEN,
	   "open: an earlier attempt's success does not close it");
	ok(wfe_circuit_admit(&c, &conf, t + 34 * SEC - 1, 3, NULL) == 0, "open: still none 1 us before");

	/* half open: exactly one probe */
	ok(wfe_circuit_tick(&c, &conf, t + 34 * SEC) == WFE_CIRCUIT_HALF_OPENED, "the timer half opens it");
	ok(strcmp(wfe_circuit_state_name(c.state), "half_open") == 0, "named half_open");
	ok(wfe_circuit_record(&c, &conf, t + 34 * SEC, true) == WFE_CIRCUIT_SAME,
	   "half open, no probe out: an earlier attempt's failure decides nothing");
	ok(wfe_circuit_admit(&c, &conf, t + 35 * SEC, 5, NULL) == 1, "half open: one of 5 goes (the probe)");
	ok(wfe_circuit_admit(&c, &conf, t + 35 * SEC, 5, NULL) == 0, "half open: a second claim gets none");
	ok(wfe_circuit_admit(&c, &conf, t + 99 * SEC, 1, NULL) == 0, "half open: none however long the probe takes");

	/* the probe fails: open again, for another open_ms */
	ch = wfe_circuit_record(&c, &conf, t + 36 * SEC, true);
	ok(ch == WFE_CIRCUIT_OPENED && c.state == WFE_CIRCUIT_OPEN, "the probe's failure opens it again");
	ok(wfe_circuit_half_open_at(&c, &conf) == t + 66 * SEC, "for another open_ms");
	ok(wfe_circuit_admit(&c, &conf, t + 66 * SEC, 2, &ch) == 1 && ch == WFE_CIRCUIT_HALF_OPENED,
	   "a claim after open_ms half opens it itself and takes the probe");

	/* the probe succeeds: closed, with a fresh window */
	ch = wfe_circuit_record(&c, &conf, t + 67 * SEC, false);
	ok(ch == WFE_CIRCUIT_CLOSED_AGAIN && c.state == WFE_CIRCUIT_CLOSED, "the probe's success closes it");
	ok(c.calls == 0 && c.prev_calls == 0, "closing starts an empty window");
	ok(wfe_circuit_admit(&c, &conf, t + 67 * SEC, 9, NULL) == 9, "closed again: all go");

	/* the window slides: old failures stop counting */
	wfe_circuit_init(&c, 0);
	for (int k = 0; k < 3; k++)
		wfe_circuit_record(&c, &conf, k * SEC, true);
	/* 3 failures at 0..2 s; at 125 s they are two windows old */
	ok(wfe_circuit_record(&c, &conf, 125 * SEC, true) == WFE_CIRCUIT_SAME,
	   "failures two windows old do not count");
	wfe_circuit_window(&c, &conf, 125 * SEC, &calls, &failures);
	ok(calls == 1 && failures == 1, "the window holds the one recent call");

	/* the previous window counts by its overlap */
	wfe_circuit_init(&c, 0);
	for (int k = 0; k < 4; k++)
		wfe_circuit_record(&c, &conf, 10 * SEC + k, false);
	wfe_circuit_window(&c, &conf, 90 * SEC, &calls, &failures);
	ok(calls > 1.99 && calls < 2.01, "half the previous window overlaps: 4 calls count as 2 (%g)", calls);
	wfe_circuit_window(&c, &conf, 120 * SEC, &calls, &failures);
	ok(calls == 0, "a full window later: none count");

	/* successes keep it closed; the ratio is >=, min_calls is >= */
	{
		wfe_circuit_conf c2 = {0.25, 8, 10 * SEC, 1 * SEC};

		wfe_circuit_init(&c, 0);
		for (int k = 0; k < 7; k++)
			wfe_circuit_record(&c, &c2, k * MS, k < 2);
		ok(c.state == WFE_CIRCUIT_CLOSED, "2 of 7 failed: under min_calls 8");
		ok(wfe_circuit_record(&c, &c2, 8 * MS, false) == WFE_CIRCUIT_OPENED,
		   "2 of 8 = 0.25 >= 0.25: opens");
		wfe_circuit_init(&c, 0);
		for (int k = 0; k < 100; k++)
			wfe_circuit_record(&c, &c2, k * MS, k % 5 == 4);
		ok(c.state == WFE_CIRCUIT_CLOSED, "1 in 5 failing at ratio 0.25 stays closed over 100 calls");
	}

	/* ratio 1: opens only when all failed */
	{
		wfe_circuit_conf c3 = {1.0, 3, 10 * SEC, 1 * SEC};

		wfe_circuit_init(&c, 0);
		wfe_circuit_record(&c, &c3, 1, true);
		wfe_circuit_record(&c, &c3, 2, false);
		wfe_circuit_record(&c, &c3, 3, true);
		ok(c.state == WFE_CIRCUIT_CLOSED, "ratio 1: one success among 3 keeps it closed");
		wfe_circuit_init(&c, 0);
		for (int k = 0; k < 3; k++)
			wfe_circuit_record(&c, &c3, k, true);
		ok(c.state == WFE_CIRCUIT_OPEN, "ratio 1: 3 of 3 failed opens it");
	}

	ok(wfe_circuit_admit(&c, &conf, 0, 0, NULL) == 0, "want 0: none");

	return tap_done();
}
