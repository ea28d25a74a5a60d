/*
 * worker.h — wfe-worker's shared state: its options, the task it runs and
 * the slots (one running command each) the event loop drives.
 *
 * The program is single-threaded: one loop (loop.c) waits with poll(2) on
 * the commands' pipes, the PostgreSQL socket, the AMQP socket and a
 * self-pipe the signal handlers write to, with a deadline that is never
 * more than a second away.  Calls into PostgreSQL and RabbitMQ have
 * deadlines of their own, so a signal is always honoured promptly.
 */
#ifndef WFE_WORKER_H
#define WFE_WORKER_H

#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>

#include "command.h"

typedef enum WorkerMode
{
	MODE_POLL,
	MODE_BROKER
} WorkerMode;

typedef struct Options
{
	const char *queue;
	WorkerMode	mode;
	const char *command;
	const char *dsn;
	const char *amqp_uri;
	const char *worker_id;
	int			concurrency;
	int			heartbeat_ms;	/* 0: the task's heartbeat_ms / 2, else 30 s */
	int			lease_ms;		/* broker mode: accept_task's lease */
	long		max_tasks;		/* 0: unlimited */
	bool		once;
	int			grace_ms;
	int			poll_interval_ms;
	bool		no_listen;		/* behind a transaction pooler: no LISTEN */
	int			max_redeliveries;
	bool		declare;
	int			retry_ttl_ms;
	bool		quorum;			/* --queue-type=quorum */
	int			db_timeout_ms;
	int			max_output_bytes;
} Options;

extern Options opts;

/* Set by the signal handlers. */
extern volatile sig_atomic_t got_stop_signal;	/* how many SIGTERM/SIGINT */
extern volatile sig_atomic_t got_sigchld;

/* The read end of the self-pipe the signal handlers write to. */
extern int	signal_fd;
extern void drain_signal_fd(void);

/* What a worker is asked to run: one attempt of one stage. */
typedef struct Task
{
	int64_t		run_id;
	char	   *stage;
	int			attempt;
	int64_t		fence;
	char	   *worker;			/* the contract ref, e.g. thumbnail.render@3 */
	char	   *tenant;
	char	   *input;			/* JSON text written to the command's stdin */
	int			heartbeat_ms;	/* 0 when the stage has none */
	int64_t		deadline_in_ms; /* execution deadline from the start; -1: unknown */
	char	   *deadline_at;	/* text, or NULL */
	char	   *message_id;		/* text, or NULL */
	char	   *traceparent;	/* the attempt's W3C traceparent, or NULL */
} Task;

extern void task_free(Task *t);

typedef enum SlotState
{
	SLOT_FREE,
	SLOT_RUNNING,				/* the command runs (or is being stopped) */
	SLOT_REPORTING				/* the command ended; its outcome waits to be reported */
} SlotState;

/* Why the worker stopped a command before it ended by itself. */
typedef enum StopReason
{
	STOP_NONE,
	STOP_SUPERSEDED,			/* heartbeat answered late, stale or unknown */
	STOP_CANCELLED,				/* a cancel.<queue> message named it */
	STOP_SHUTDOWN,				/* the worker stops and the grace period ran out */
	STOP_OUTPUT_LIMIT			/* stdout grew past --max-output-bytes */
} StopReason;

typedef struct Slot
{
	SlotState	state;
	Task		task;
	Command		cmd;
	int64_t		started_at;
	int64_t		next_heartbeat;
	int			heartbeat_interval;
	int64_t		deadline;		/* when the attempt times out (stages without heartbeat_ms); 0: unknown */
	StopReason	stop;
	int64_t		cancel_fence;	/* the fence a cancel message named */
	char	   *spawn_error;	/* the command could not be started */
	char	   *rejection;		/* PostgreSQL refused the result (reported as bad output) */
	/* broker mode: the delivery to acknowledge once the task is over */
	bool		has_delivery;
	uint64_t	delivery_tag;
	uint64_t	delivery_generation;
} Slot;

extern Slot *slots;				/* opts.concurrency of them */

extern int	slots_free(void);
extern int	slots_busy(void);

/*
 * Start the command for a task on a free slot, taking over the task's
 * strings.  A command that cannot be started is reported failed
 * (command.spawn) like any other outcome.
 */
extern Slot *slot_start(Task *task, bool has_delivery, uint64_t delivery_tag,
						uint64_t generation);

/* Ask a running command to stop (SIGTERM now, SIGKILL 5 s later). */
extern void slot_stop(Slot *s, StopReason why);

/* Count of tasks started, for --max-tasks. */
extern long tasks_started;

/* The exit status main returns (1 after a fatal error). */
extern int	exit_code;

/* True once the worker takes no new tasks (signal, --max-tasks, fatal error). */
extern bool stopping;

/* When the grace period of a shutdown ends (0 while not shutting down). */
extern int64_t shutdown_deadline;

/* tasks.c: drive every slot; returns the earliest time it needs to run again. */
extern int64_t tasks_service(int64_t now);
extern void tasks_add_pollfds(struct pollfd *fds, int *nfds);
extern void tasks_io(void);
extern void tasks_reap(void);
extern void tasks_kill_all(void);

#endif							/* WFE_WORKER_H */
