/*
 * command.c — running the user's command for one task.
 *
 * The command runs as `/bin/sh -c CMD` in a new process group, so that
 * stopping it reaches whatever the shell started.  Its three standard
 * streams are non-blocking pipes the event loop services; nothing here
 * ever waits.
 */
#define _GNU_SOURCE
#include "command.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* How long output pipes may stay open after the process exited. */
#define DRAIN_AFTER_EXIT_MS 2000

/* A command slot that runs nothing. */
void
command_init(Command *c)
{
	memset(c, 0, sizeof(*c));
	c->in_fd = c->out_fd = c->err_fd = -1;
	buf_init(&c->out);
}

/* Close a descriptor if open and mark it closed. */
static void
close_fd(int *fd)
{
	if (*fd >= 0)
	{
		close(*fd);
		*fd = -1;
	}
}

/* Make a descriptor non-blocking. */
static int
set_nonblocking(int fd)
{
	int			flags = fcntl(fd, F_GETFL);

	return flags < 0 ? -1 : fcntl(fd, F_SETFL, flags | O_NONBLOCK);
}

/*
 * In the child: close every descriptor above stderr (the PostgreSQL and
 * AMQP sockets, the self-pipe, other commands' pipes).
 */
static void
close_inherited_fds(void)
{
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 34))
	if (close_range(3, ~0U, 0) == 0)
		return;
#endif
	{
		long		max = sysconf(_SC_OPEN_MAX);

		for (long fd = 3; fd < (max > 0 ? max : 1024); fd++)
			close((int) fd);
	}
}

/*
 * In the child, after fork: a process group of its own, the pipes as its
 * standard streams, default signal handling, the environment; then exec.
 */
static void
child_exec(const char *shell_command, const EnvVar *env, int nenv,
		   int in_fd, int out_fd, int err_fd)
{
	sigset_t	all;
	static const int sigs[] = {SIGPIPE, SIGTERM, SIGINT, SIGCHLD, SIGHUP, SIGQUIT};

	setpgid(0, 0);
	if (dup2(in_fd, 0) < 0 || dup2(out_fd, 1) < 0 || dup2(err_fd, 2) < 0)
		_exit(127);
	close_inherited_fds();
	for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++)
		signal(sigs[i], SIG_DFL);
	sigemptyset(&all);
	sigprocmask(SIG_SETMASK, &all, NULL);
	for (int i = 0; i < nenv; i++)
		if (env[i].value)
			setenv(env[i].name, env[i].value, 1);
	execl("/bin/sh", "sh", "-c", shell_command, (char *) NULL);
	dprintf(2, "wfe-worker: cannot run /bin/sh: %s\n", strerror(errno));
	_exit(127);
}

/* See command.h. */
bool
command_start(Command *c, const char *shell_command, const EnvVar *env, int nenv,
			  const char *input, size_t input_len, size_t out_limit,
			  char *err, size_t errlen)
{
	int			in_pipe[2] = {-1, -1},
				out_pipe[2] = {-1, -1},
				err_pipe[2] = {-1, -1};
	pid_t		pid;

	command_init(c);
	if (pipe2(in_pipe, O_CLOEXEC) < 0 || pipe2(out_pipe, O_CLOEXEC) < 0 ||
		pipe2(err_pipe, O_CLOEXEC) < 0)
	{
		snprintf(err, errlen, "cannot create pipes: %s", strerror(errno));
		goto fail;
	}
	pid = fork();
	if (pid < 0)
	{
		snprintf(err, errlen, "cannot fork: %s", strerror(errno));
		goto fail;
	}
	if (pid == 0)
		child_exec(shell_command, env, nenv, in_pipe[0], out_pipe[1], err_pipe[1]);

	/* both sides set the group, so a signal sent right away finds it */
	setpgid(pid, pid);
	close(in_pipe[0]);
	close(out_pipe[1]);
	close(err_pipe[1]);
	c->pid = pid;
	c->in_fd = in_pipe[1];
	c->out_fd = out_pipe[0];
	c->err_fd = err_pipe[0];
	set_nonblocking(c->in_fd);
	set_nonblocking(c->out_fd);
	set_nonblocking(c->err_fd);
	c->input = input;
	c->input_len = input_len;
	c->out_limit = out_limit;
	if (input_len == 0)
		close_fd(&c->in_fd);
	command_io(c);
	return true;

fail:
	for (int i = 0; i < 2; i++)
	{
		close_fd(&in_pipe[i]);
		close_fd(&out_pipe[i]);
		close_fd(&err_pipe[i]);
	}
	return false;
}

/* See command.h. */
void
command_add_pollfds(Command *c, struct pollfd *fds, int *nfds)
{
	if (c->in_fd >= 0)
		fds[(*nfds)++] = (struct pollfd) {.fd = c->in_fd, .events = POLLOUT};
	if (c->out_fd >= 0)
		fds[(*nfds)++] = (struct pollfd) {.fd = c->out_fd, .events = POLLIN};
	if (c->err_fd >= 0)
		fds[(*nfds)++] = (struct pollfd) {.fd = c->err_fd, .events = POLLIN};
}

/* Keep the last bytes of stderr in the ring. */
static void
err_ring_append(Command *c, const char *data, size_t len)
{
	for (size_t i = 0; i < len; i++)
		c->err_ring[(c->err_total + i) % STDERR_TAIL_BYTES] = data[i];
	c->err_total += len;
}

/* See command.h. */
void
command_io(Command *c)
{
	char		chunk[65536];
	ssize_t		n;

	/* stdin: as much of the input as the pipe takes, then end-of-file */
	while (c->in_fd >= 0)
	{
		if (c->input_off >= c->input_len)
		{
			close_fd(&c->in_fd);
			break;
		}
		n = write(c->in_fd, c->input + c->input_off, c->input_len - c->input_off);
		if (n > 0)
			c->input_off += (size_t) n;
		else if (n < 0 && errno == EINTR)
			continue;
		else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			break;
		else
		{
			/* EPIPE: the command does not read its input, which is its right */
			close_fd(&c->in_fd);
		}
	}

	/* stdout: the result, up to the limit */
	while (c->out_fd >= 0)
	{
		n = read(c->out_fd, chunk, sizeof(chunk));
		if (n > 0)
		{
			if (c->out.len + (size_t) n > c->out_limit)
				c->out_overflow = true;
			else
				buf_append(&c->out, chunk, (size_t) n);
		}
		else if (n < 0 && errno == EINTR)
			continue;
		else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			break;
		else
			close_fd(&c->out_fd);
	}

	/* stderr: only its tail is kept */
	while (c->err_fd >= 0)
	{
		n = read(c->err_fd, chunk, sizeof(chunk));
		if (n > 0)
			err_ring_append(c, chunk, (size_t) n);
		else if (n < 0 && errno == EINTR)
			continue;
		else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			break;
		else
			close_fd(&c->err_fd);
	}
}

/* See command.h. */
void
command_exited(Command *c, int wait_status, int64_t now)
{
	c->exited = true;
	c->wait_status = wait_status;
	c->exited_at = now;
	/* nobody reads the input any more */
	close_fd(&c->in_fd);
}

/* See command.h. */
bool
command_finished(Command *c, int64_t now)
{
	if (!c->exited)
		return false;
	command_io(c);
	if (c->out_fd >= 0 || c->err_fd >= 0)
	{
		if (now - c->exited_at < DRAIN_AFTER_EXIT_MS)
			return false;
		/* a background process keeps the pipes open: stop waiting for it */
		close_fd(&c->out_fd);
		close_fd(&c->err_fd);
	}
	return true;
}

/* See command.h. */
void
command_signal(Command *c, int sig)
{
	if (c->pid <= 0)
		return;
	if (kill(-c->pid, sig) < 0 && !c->exited)
		kill(c->pid, sig);
}

/* See command.h. */
char *
command_stderr_tail(const Command *c)
{
	size_t		len = c->err_total < STDERR_TAIL_BYTES ? (size_t) c->err_total : STDERR_TAIL_BYTES;
	size_t		start = c->err_total < STDERR_TAIL_BYTES ? 0 : (size_t) (c->err_total % STDERR_TAIL_BYTES);
	char		linear[STDERR_TAIL_BYTES];

	for (size_t i = 0; i < len; i++)
		linear[i] = c->err_ring[(start + i) % STDERR_TAIL_BYTES];
	return utf8_clean(linear, len, c->err_total > STDERR_TAIL_BYTES);
}

/* See command.h. */
void
command_cleanup(Command *c)
{
	close_fd(&c->in_fd);
	close_fd(&c->out_fd);
	close_fd(&c->err_fd);
	buf_free(&c->out);
	c->pid = 0;
}
