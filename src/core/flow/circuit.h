/*
 * circuit.h — circuit breakers (operations.md "Flow control"): when a
 * queue stops trying, pure C, no PostgreSQL headers.
 *
 * A circuit is closed (attempts go), open (none go, for open_us) or half
 * open (exactly one probe goes; its success closes the circuit, its failure
 * opens it again; no other attempt's end decides it).  It opens when, over the last window_us, at least
 * min_calls attempts ended and the share that failed is >= failure_ratio.
 * The window is a sliding-window counter: the current fixed window's counts
 * plus the previous window's weighted by how much of it still overlaps the
 * last window_us, so the state is six numbers a row can hold.  The server
 * layer (src/pg/circuit.c) keeps that state in wfe.circuits and asks this
 * file at the claim (how many may go) and where attempts end (what the
 * outcome does).  Times are microseconds on any fixed epoch.
 */
#ifndef WFE_CIRCUIT_H
#define WFE_CIRCUIT_H

#include <stdbool.h>
#include <stdint.h>

typedef enum wfe_circuit_state
{
	WFE_CIRCUIT_CLOSED = 0,
	WFE_CIRCUIT_OPEN,
	WFE_CIRCUIT_HALF_OPEN
} wfe_circuit_state;

/* What a circuit is configured with. */
typedef struct wfe_circuit_conf
{
	double		failure_ratio;	/* (0, 1] */
	int			min_calls;		/* >= 1 */
	int64_t		window_us;		/* > 0 */
	int64_t		open_us;		/* > 0 */
} wfe_circuit_conf;

/* A circuit's state. */
typedef struct wfe_circuit
{
	wfe_circuit_state state;
	int64_t		since_us;		/* when state was entered */
	bool		probe_out;		/* half open: the probe has been let through */
	int64_t		win_start_us;	/* start of the current fixed window */
	int			calls;			/* attempts ended in the current window */
	int			failures;		/* of which failed */
	int			prev_calls;		/* the previous window's */
	int			prev_failures;
} wfe_circuit;

/* The change a call made, for the caller's event (circuit.opened, ...). */
typedef enum wfe_circuit_change
{
	WFE_CIRCUIT_SAME = 0,
	WFE_CIRCUIT_OPENED,
	WFE_CIRCUIT_HALF_OPENED,
	WFE_CIRCUIT_CLOSED_AGAIN,
	WFE_CIRCUIT_PROBE_BACK		/* the probe was cancelled: another may go (no event) */
} wfe_circuit_change;

/* How an attempt ended, for wfe_circuit_record. */
typedef enum wfe_circuit_outcome
{
	WFE_CIRCUIT_SUCCEEDED = 0,
	WFE_CIRCUIT_FAILED,			/* failed (retried or not) or timed out */
	WFE_CIRCUIT_CANCELLED		/* says nothing of the queue's health */
} wfe_circuit_outcome;

/* A closed circuit with an empty window starting at now_us. */
extern void wfe_circuit_init(wfe_circuit *c, int64_t now_us);

/* The state's name as events and dashboards spell it: closed, open, half_open. */
extern const char *wfe_circuit_state_name(wfe_circuit_state s);

/* An open circuit whose open_us has passed becomes half open (no probe out yet). */
extern wfe_circuit_change wfe_circuit_tick(wfe_circuit *c, const wfe_circuit_conf *conf, int64_t now_us);

/*
 * How many of want attempts may be released now: all when closed, none
 * when open, one (the probe) when half open and none is out yet.  Ticks
 * first; *change says what the tick did.
 */
extern int	wfe_circuit_admit(wfe_circuit *c, const wfe_circuit_conf *conf, int64_t now_us,
							  int want, wfe_circuit_change *change);

/*
 * An attempt of the queue ended; probe says it is the half-open probe
 * admit let through (the server layer keeps the probe's identity).
 * Closed: it counts in the window, and may open the circuit.  Half open:
 * the probe's own end decides (success closes, failure opens again, a
 * cancelled probe is given back); any other attempt's end -- one released
 * before the circuit opened -- counts in the window and decides nothing.
 * Open: an attempt released before the circuit opened; it does not count.
 * A cancelled attempt never counts.
 */
extern wfe_circuit_change wfe_circuit_record(wfe_circuit *c, const wfe_circuit_conf *conf,
											 int64_t now_us, wfe_circuit_outcome outcome, bool probe);

/* The estimated (calls, failures) over the last window_us, for dashboards. */
extern void wfe_circuit_window(const wfe_circuit *c, const wfe_circuit_conf *conf, int64_t now_us,
							   double *calls, double *failures);

/* When an open circuit half opens. */
extern int64_t wfe_circuit_half_open_at(const wfe_circuit *c, const wfe_circuit_conf *conf);

#endif							/* WFE_CIRCUIT_H */
