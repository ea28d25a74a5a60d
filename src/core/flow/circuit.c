/*
 * circuit.c — the decisions of circuit breakers (circuit.h).
 */
#include "core/flow/circuit.h"

#include <stddef.h>

/* A closed circuit with an empty window starting at now_us. */
void
wfe_circuit_init(wfe_circuit *c, int64_t now_us)
{
	c->state = WFE_CIRCUIT_CLOSED;
	c->since_us = now_us;
	c->probe_out = false;
	c->win_start_us = now_us;
	c->calls = c->failures = c->prev_calls = c->prev_failures = 0;
}

/* The state's name as events and dashboards spell it. */
const char *
wfe_circuit_state_name(wfe_circuit_state s)
{
	switch (s)
	{
		case WFE_CIRCUIT_OPEN:
			return "open";
		case WFE_CIRCUIT_HALF_OPEN:
			return "half_open";
		case WFE_CIRCUIT_CLOSED:
			break;
	}
	return "closed";
}

/* Move the fixed windows forward so the current one holds now_us. */
static void
window_roll(wfe_circuit *c, const wfe_circuit_conf *conf, int64_t now_us)
{
	int64_t		w = conf->window_us;

	if (now_us < c->win_start_us + w)
		return;
	if (now_us < c->win_start_us + 2 * w)
	{
		c->prev_calls = c->calls;
		c->prev_failures = c->failures;
		c->win_start_us += w;
	}
	else
	{
		/* a whole window or more went by without a call: both are empty */
		c->prev_calls = c->prev_failures = 0;
		c->win_start_us = now_us - (now_us - c->win_start_us) % w;
	}
	c->calls = c->failures = 0;
}

/* The estimated (calls, failures) over the last window_us. */
void
wfe_circuit_window(const wfe_circuit *c, const wfe_circuit_conf *conf, int64_t now_us,
				   double *calls, double *failures)
{
	wfe_circuit r = *c;
	double		overlap;

	window_roll(&r, conf, now_us);
	/* the share of the previous fixed window still inside the last window_us */
	overlap = 1.0 - (double) (now_us - r.win_start_us) / (double) conf->window_us;
	if (overlap < 0)
		overlap = 0;
	*calls = r.calls + r.prev_calls * overlap;
	*failures = r.failures + r.prev_failures * overlap;
}

/* Enter state s at now_us, with an empty window. */
static void
enter(wfe_circuit *c, wfe_circuit_state s, int64_t now_us)
{
	wfe_circuit_init(c, now_us);
	c->state = s;
}

/* When an open circuit half opens. */
int64_t
wfe_circuit_half_open_at(const wfe_circuit *c, const wfe_circuit_conf *conf)
{
	return c->since_us + conf->open_us;
}

/* An open circuit whose open_us has passed becomes half open. */
wfe_circuit_change
wfe_circuit_tick(wfe_circuit *c, const wfe_circuit_conf *conf, int64_t now_us)
{
	if (c->state != WFE_CIRCUIT_OPEN || now_us < wfe_circuit_half_open_at(c, conf))
		return WFE_CIRCUIT_SAME;
	enter(c, WFE_CIRCUIT_HALF_OPEN, now_us);
	return WFE_CIRCUIT_HALF_OPENED;
}

/* How many of want attempts may be released now. */
int
wfe_circuit_admit(wfe_circuit *c, const wfe_circuit_conf *conf, int64_t now_us,
				  int want, wfe_circuit_change *change)
{
	wfe_circuit_change ch = wfe_circuit_tick(c, conf, now_us);

	if (change != NULL)
		*change = ch;
	if (want <= 0)
		return 0;
	switch (c->state)
	{
		case WFE_CIRCUIT_CLOSED:
			return want;
		case WFE_CIRCUIT_OPEN:
			return 0;
		case WFE_CIRCUIT_HALF_OPEN:
			if (c->probe_out)
				return 0;
			c->probe_out = true;
			return 1;
	}
	return 0;
}

/* Count an ended attempt in the window. */
static void
window_count(wfe_circuit *c, const wfe_circuit_conf *conf, int64_t now_us, bool failed)
{
	window_roll(c, conf, now_us);
	c->calls++;
	if (failed)
		c->failures++;
}

/* An attempt of the queue ended. */
wfe_circuit_change
wfe_circuit_record(wfe_circuit *c, const wfe_circuit_conf *conf, int64_t now_us,
				   wfe_circuit_outcome outcome, bool probe)
{
	bool		failed = outcome == WFE_CIRCUIT_FAILED;
	double		calls,
				failures;

	wfe_circuit_tick(c, conf, now_us);
	switch (c->state)
	{
		case WFE_CIRCUIT_OPEN:
			return WFE_CIRCUIT_SAME;
		case WFE_CIRCUIT_HALF_OPEN:

			/*
			 * Only the probe was released since the circuit opened, but
			 * attempts released before may still end now, before or after
			 * the probe went out: they count, as they would closed, and
			 * decide nothing -- only the probe's own outcome does.
			 */
			if (!(probe && c->probe_out))
			{
				if (outcome != WFE_CIRCUIT_CANCELLED)
					window_count(c, conf, now_us, failed);
				return WFE_CIRCUIT_SAME;
			}
			if (outcome == WFE_CIRCUIT_CANCELLED)
			{
				/* a cancelled probe said nothing: the next claim takes another */
				c->probe_out = false;
				return WFE_CIRCUIT_PROBE_BACK;
			}
			enter(c, failed ? WFE_CIRCUIT_OPEN : WFE_CIRCUIT_CLOSED, now_us);
			return failed ? WFE_CIRCUIT_OPENED : WFE_CIRCUIT_CLOSED_AGAIN;
		case WFE_CIRCUIT_CLOSED:
			break;
	}
	if (outcome == WFE_CIRCUIT_CANCELLED)
		return WFE_CIRCUIT_SAME;
	window_count(c, conf, now_us, failed);
	wfe_circuit_window(c, conf, now_us, &calls, &failures);
	/* a small epsilon: 0.5 x 2 calls must reach a ratio of 0.5 */
	if (calls + 1e-9 >= conf->min_calls && failures + 1e-9 >= conf->failure_ratio * calls)
	{
		enter(c, WFE_CIRCUIT_OPEN, now_us);
		return WFE_CIRCUIT_OPENED;
	}
	return WFE_CIRCUIT_SAME;
}
