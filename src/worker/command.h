/*
 * command.h — one run of the user's command: /bin/sh -c CMD in a process
 * group of its own, the task's input on its stdin, its stdout collected
 * (the result) and the tail of its stderr kept (the error).
 */
#ifndef WFE_WORKER_COMMAND_H
#define WFE_WORKER_COMMAND_H

#include <poll.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "util.h"

/* How much of stderr a failure report carries. */
#define STDERR_TAIL_BYTES 2048

typedef struct Command
{
	pid_t		pid;			/* also the process group; 0 when none */
	int			in_fd;			/* -1 once closed */
	int			out_fd;
	int			err_fd;
	const char *input;			/* not owned */
	size_t		input_len;
	size_t		input_off;
	Buf			out;
	size_t		out_limit;
	bool		out_overflow;	/* stdout grew past out_limit */
	char		err_ring[STDERR_TAIL_BYTES];
	uint64_t	err_total;		/* bytes of stderr ever read */
	bool		exited;
	int			wait_status;
	int64_t		exited_at;
	int64_t		term_at;		/* when SIGTERM was sent; 0 if not */
	bool		killed;			/* SIGKILL was sent */
} Command;

/* One NAME=VALUE pair of the command's environment. */
typedef struct EnvVar
{
	const char *name;
	const char *value;
} EnvVar;

extern void command_init(Command *c);

/*
 * Start `shell_command` with the given extra environment; `input` must stay
 * valid until the command is cleaned up.  false with *err set on failure.
 */
extern bool command_start(Command *c, const char *shell_command, const EnvVar *env, int nenv,
						  const char *input, size_t input_len, size_t out_limit,
						  char *err, size_t errlen);

/* Add the command's open pipes to a poll set. */
extern void command_add_pollfds(Command *c, struct pollfd *fds, int *nfds);

/* Move whatever the pipes allow, without blocking. */
extern void command_io(Command *c);

/* Record the wait status of the command's process. */
extern void command_exited(Command *c, int wait_status, int64_t now);

/*
 * True once the process has exited and its output is read: both pipes at
 * end-of-file, or 2 s passed since the exit (a background grandchild may
 * hold them open; they are closed then).
 */
extern bool command_finished(Command *c, int64_t now);

/* Send a signal to the command's process group. */
extern void command_signal(Command *c, int sig);

/* The last STDERR_TAIL_BYTES of stderr as clean UTF-8 (malloc'd). */
extern char *command_stderr_tail(const Command *c);

/* Close what is open and free the buffers; the process must be reaped. */
extern void command_cleanup(Command *c);

#endif							/* WFE_WORKER_COMMAND_H */
