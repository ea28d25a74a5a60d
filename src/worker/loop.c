/*
 * loop.c — wfe-worker's event loop.
 *
 * Each turn: notice signals, reap commands, (re)connect what is down,
 * take tasks (poll or broker intake), drive the slots (heartbeats, stops,
 * reports), decide whether to exit, then wait in poll(2) for the
 * self-pipe, the commands' pipes and the two sockets — at most until the
 * next thing that is due, and never more than a second.
 */
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>

#include "broker.h"
#include "db.h"
#include "intake.h"
#include "loop.h"
#include "util.h"

/* Reconnection delays: 0.5 s doubling up to 30 s, with jitter. */
#define BACKOFF_MIN_MS 500
#define BACKOFF_MAX_MS 30000

/* A connection that lived this long resets the backoff when it is lost. */
#define STABLE_CONNECTION_MS 30000

typedef struct Backoff
{
	int64_t		next_at;
	int			delay;
	bool		up;				/* connected at the last look */
	int64_t		up_since;
} Backoff;

int			exit_code = 0;

static Backoff db_backoff,
			amqp_backoff;

/* A connection attempt failed: wait longer before the next. */
static void
backoff_failed(Backoff *b, int64_t now)
{
	b->delay = b->delay ? b->delay * 2 : BACKOFF_MIN_MS;
	if (b->delay > BACKOFF_MAX_MS)
		b->delay = BACKOFF_MAX_MS;
	/* +-25% so that a fleet of workers does not reconnect in step */
	b->next_at = now + b->delay * 3 / 4 + random() % (b->delay / 2 + 1);
}

/*
 * A connection attempt succeeded.  The delay is kept: a connection that
 * fails right after it was made (a queue that does not exist, a refused
 * LISTEN) must not be retried in a tight loop.
 */
static void
backoff_connected(Backoff *b, int64_t now)
{
	b->up = true;
	b->up_since = now;
	b->next_at = 0;
}

/*
 * Notice a connection that went away since the last look (any code may
 * drop one) and schedule the next attempt.
 */
static bool
backoff_check_lost(Backoff *b, bool connected, int64_t now)
{
	if (!b->up || connected)
		return false;
	b->up = false;
	if (now - b->up_since >= STABLE_CONNECTION_MS)
		b->delay = 0;
	backoff_failed(b, now);
	return true;
}

/* With --once, a lost or failed connection ends the run (exit status 1). */
static void
once_fatal(void)
{
	if (opts.once && !stopping)
	{
		wlog(LOG_ERROR, "giving up (--once)");
		exit_code = 1;
		stopping = true;
	}
}

/* See loop.h. */
void
loop_task_done(Slot *s)
{
	if (opts.mode == MODE_BROKER)
		consume_task_done(s);
	else
		poll_task_done();
}

/* Act on SIGTERM/SIGINT: the first starts a shutdown, the second ends its grace. */
static void
handle_stop_signals(int64_t now)
{
	static int	handled = 0;
	int			got = got_stop_signal;

	if (got == handled)
		return;
	if (handled == 0)
	{
		wlog(LOG_INFO, "stopping: taking no new tasks; running commands have %d ms to finish",
			 opts.grace_ms);
		stopping = true;
		shutdown_deadline = now + opts.grace_ms;
	}
	if (got >= 2 && handled < 2)
	{
		wlog(LOG_INFO, "second stop signal: terminating the running commands now");
		shutdown_deadline = now;
	}
	handled = got;
}

/* Connect what is down and due for another attempt. */
static void
ensure_connections(int64_t now)
{
	char		err[512];

	if (backoff_check_lost(&db_backoff, db_connected(), now) ||
		backoff_check_lost(&amqp_backoff, broker_connected(), now))
		once_fatal();

	/* reports may still need PostgreSQL while stopping */
	if (!db_connected() && now >= db_backoff.next_at && !(stopping && slots_busy() == 0))
	{
		DbError		e;

		if (db_connect(&e))
		{
			wlog(LOG_INFO, "connected to PostgreSQL%s",
				 opts.mode == MODE_POLL && !opts.no_listen ? "; listening on wfe_task_ready" : "");
			backoff_connected(&db_backoff, now);
		}
		else
		{
			backoff_failed(&db_backoff, now);
			wlog(opts.once ? LOG_ERROR : LOG_WARNING, "cannot connect to PostgreSQL: %s%s", e.message,
				 opts.once ? "" : " (will retry)");
			once_fatal();
		}
	}
	/* acknowledgements need RabbitMQ too, but a new connection cannot send them */
	if (opts.mode == MODE_BROKER && !broker_connected() && now >= amqp_backoff.next_at && !stopping)
	{
		if (broker_connect(err, sizeof(err)))
		{
			wlog(LOG_INFO, "connected to RabbitMQ at %s; listening for cancel.%s", broker_node(), opts.queue);
			backoff_connected(&amqp_backoff, now);
		}
		else
		{
			backoff_failed(&amqp_backoff, now);
			wlog(opts.once ? LOG_ERROR : LOG_WARNING, "cannot connect to RabbitMQ: %s%s", err,
				 opts.once ? "" : " (will retry)");
			once_fatal();
		}
	}
}

/* The earlier of two times, 0 meaning none. */
static int64_t
earliest(int64_t a, int64_t b)
{
	if (a == 0)
		return b;
	if (b == 0)
		return a;
	return a < b ? a : b;
}

/* Is the work over? */
static bool
finished(int64_t now)
{
	if (slots_busy() > 0)
		return false;
	if (stopping)
		return true;
	if (!opts.once)
		return false;
	if (opts.mode == MODE_POLL && poll_drained())
	{
		wlog(LOG_INFO, "nothing left to claim (--once)");
		return true;
	}
	if (opts.mode == MODE_BROKER && broker_connected() && consume_idle(now))
	{
		wlog(LOG_INFO, "nothing delivered for a while (--once)");
		return true;
	}
	return false;
}

/* Wait for something to do, at most until `until`. */
static void
wait_for_events(int64_t now, int64_t until)
{
	int			max = 3 + 3 * opts.concurrency;
	struct pollfd *fds = xmalloc(sizeof(struct pollfd) * max);
	int			n = 0,
				db_idx = -1,
				timeout;
	int64_t		wait = until - now;

	fds[n++] = (struct pollfd) {.fd = signal_fd, .events = POLLIN};
	tasks_add_pollfds(fds, &n);
	if (db_connected())
	{
		db_idx = n;
		fds[n++] = (struct pollfd) {.fd = db_socket(), .events = POLLIN};
	}
	if (broker_connected())
		fds[n++] = (struct pollfd) {.fd = broker_socket(), .events = POLLIN};
	/* (a signal needs no check: its handler wrote to the self-pipe) */
	if (broker_has_buffered())
		wait = 0;
	timeout = wait < 0 ? 0 : wait > 1000 ? 1000 : (int) wait;

	if (poll(fds, n, timeout) < 0 && errno != EINTR)
		wlog(LOG_WARNING, "poll failed: %s", strerror(errno));
	drain_signal_fd();
	got_sigchld = 0;
	tasks_reap();
	tasks_io();
	if (db_idx >= 0 && fds[db_idx].revents && db_connected())
		db_consume_input();
	if (broker_connected())
	{
		char		err[512];

		/* also sends the AMQP heartbeat when one is due */
		if (!broker_pump(err, sizeof(err)))
			wlog(LOG_WARNING, "lost the RabbitMQ connection: %s", err);
	}
	free(fds);
}

/* See loop.h. */
int
worker_loop(void)
{
	for (;;)
	{
		int64_t		now = now_ms();
		int64_t		next;

		handle_stop_signals(now);
		tasks_reap();
		ensure_connections(now);
		if (opts.mode == MODE_POLL)
			poll_intake(now);
		else
			consume_intake(now);
		next = tasks_service(now);
		if (finished(now))
			break;

		now = now_ms();
		next = earliest(next, opts.mode == MODE_POLL ? poll_next(now) : consume_next(now));
		if (!db_connected() && !(stopping && slots_busy() == 0))
			next = earliest(next, db_backoff.next_at ? db_backoff.next_at : now);
		if (opts.mode == MODE_BROKER && !broker_connected() && !stopping)
			next = earliest(next, amqp_backoff.next_at ? amqp_backoff.next_at : now);
		if (stopping && shutdown_deadline > 0)
			next = earliest(next, shutdown_deadline);
		wait_for_events(now, next ? next : now + 1000);
	}

	if (opts.mode == MODE_BROKER)
	{
		/* whatever was delivered and not started goes back to its queue */
		consume_intake(now_ms());
		broker_disconnect();
	}
	db_disconnect();
	return exit_code;
}
