/*
 * main.c — wfe-worker: options, signals, start-up.
 *
 *   wfe-worker --queue Q --command 'CMD ARGS' [--mode poll|broker] ...
 *
 * Runs CMD (with /bin/sh -c) once per task of queue Q: the task's input
 * JSON on its stdin, its result JSON read from its stdout, the outcome
 * reported to wfe.  See docs/wfe-worker.md.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/base/names.h"
#include "loop.h"
#include "util.h"
#include "worker.h"

#ifndef WFE_VERSION
#define WFE_VERSION "unknown"
#endif

#define DEFAULT_AMQP_URI "amqp://guest:guest@127.0.0.1:5672/"

Options		opts = {
	.mode = MODE_POLL,
	.concurrency = 1,
	.grace_ms = 10000,
	.poll_interval_ms = 5000,
	.lease_ms = 30000,
	.max_redeliveries = 5,
	.retry_ttl_ms = 5000,
	.db_timeout_ms = 30000,
	.max_output_bytes = 64 * 1024 * 1024,
};

volatile sig_atomic_t got_stop_signal = 0;
volatile sig_atomic_t got_sigchld = 0;
int			signal_fd = -1;
static int	signal_write_fd = -1;

/* Print the usage text to `out`. */
static void
usage(FILE *out)
{
	fprintf(out,
			"wfe-worker runs a command for each task of a wfe queue.\n"
			"\n"
			"Usage:\n"
			"  wfe-worker --queue QUEUE --command 'CMD ARGS' [OPTION]...\n"
			"\n"
			"The command runs with /bin/sh -c; it reads the task's input JSON on stdin\n"
			"and writes its result JSON on stdout.  Exit status 0 completes the task,\n"
			"anything else fails it (with the tail of stderr).\n"
			"\n"
			"Options:\n"
			"  -q, --queue=QUEUE          the wfe queue to serve (required)\n"
			"  -c, --command=CMD          the shell command to run per task (required)\n"
			"  -m, --mode=poll|broker     claim with wfe.claim_task (poll, the default) or\n"
			"                             consume RabbitMQ dispatches (broker)\n"
			"  -d, --dsn=CONNINFO         PostgreSQL connection string or URI (default: the\n"
			"                             PG* environment variables)\n"
			"  -u, --amqp-uri=URI[,URI]   RabbitMQ (broker mode; default $WFE_AMQP_URI or\n"
			"                             %s); a cluster's nodes\n"
			"                             comma-separated: the first that answers is used\n"
			"  -w, --worker-id=ID         this worker's name in wfe (default host:pid)\n"
			"  -n, --concurrency=N        commands run at once (default 1)\n"
			"      --heartbeat-ms=N       heartbeat interval (default: half the stage's\n"
			"                             heartbeat_ms or a third of the lease, if shorter)\n"
			"      --lease-ms=N           broker mode: the lease accept_task asks for; a\n"
			"                             task of a worker that died is retried this long\n"
			"                             after its last heartbeat (default 30000)\n"
			"      --max-tasks=N          exit after N tasks\n"
			"      --once                 exit when nothing is left to do\n"
			"      --grace-ms=N           on SIGTERM, how long running commands may take\n"
			"                             before they are terminated (default 10000)\n"
			"      --poll-interval-ms=N   poll mode: claim at least this often even without\n"
			"                             a notification (default 5000)\n"
			"      --no-listen            poll mode: do not LISTEN for wfe_task_ready; claim\n"
			"                             every --poll-interval-ms only (behind a pooler in\n"
			"                             transaction mode, which cannot carry LISTEN)\n"
			"      --max-redeliveries=N   broker mode: dead-letter a message after N retry\n"
			"                             cycles (default 5, as wfe.broker_max_redeliveries)\n"
			"      --declare              broker mode: declare the RabbitMQ topology of the\n"
			"                             queue (normally the wfe publisher does)\n"
			"      --retry-ttl-ms=N       with --declare: the retry queues' TTL (default\n"
			"                             5000, as wfe.broker_retry_ttl_ms)\n"
			"      --queue-type=TYPE      with --declare: classic (default) or quorum, as\n"
			"                             wfe.amqp_queue_type\n"
			"      --db-timeout-ms=N      deadline of each PostgreSQL call (default 30000)\n"
			"      --max-output-bytes=N   largest result accepted on stdout (default 64 MiB)\n"
			"  -v, --verbose              log debug messages too\n"
			"  -V, --version              print the version and exit\n"
			"  -h, --help                 print this help and exit\n"
			"\n"
			"The command's environment has WFE_RUN_ID, WFE_STAGE, WFE_ATTEMPT, WFE_FENCE,\n"
			"WFE_WORKER (the contract), WFE_TENANT, WFE_QUEUE, WFE_WORKER_ID,\n"
			"WFE_DEADLINE_AT, WFE_MESSAGE_ID and TRACEPARENT (the attempt's W3C trace context).\n"
			"\n"
			"SIGTERM or SIGINT: take no new tasks, let running commands finish within\n"
			"--grace-ms, report, exit 0.  A second signal ends the grace period at once.\n"
			"Exit status: 0 done, 1 error, 2 usage error.\n",
			DEFAULT_AMQP_URI);
}

/* A usage error: say what is wrong, point at --help, exit 2. */
static void
usage_error(const char *fmt, const char *arg)
{
	fprintf(stderr, "wfe-worker: ");
	fprintf(stderr, fmt, arg);
	fprintf(stderr, "\nTry \"wfe-worker --help\" for more information.\n");
	exit(2);
}

/* Parse an integer option within [min, max], or exit 2. */
static long
int_option(const char *name, const char *value, long min, long max)
{
	char	   *end;
	long		v;

	errno = 0;
	v = strtol(value, &end, 10);
	if (errno != 0 || end == value || *end != '\0' || v < min || v > max)
	{
		char		msg[200];

		snprintf(msg, sizeof(msg), "invalid value \"%%s\" for --%s (an integer from %ld to %ld)",
				 name, min, max);
		usage_error(msg, value);
	}
	return v;
}

/* SIGTERM/SIGINT: count it and wake the loop. */
static void
on_stop_signal(int sig __attribute__((unused)))
{
	int			save_errno = errno;

	got_stop_signal++;
	if (write(signal_write_fd, "s", 1) < 0)
	{
		/* the pipe is full: the loop wakes anyway */
	}
	errno = save_errno;
}

/* SIGCHLD: a command ended; wake the loop to reap it. */
static void
on_sigchld(int sig __attribute__((unused)))
{
	int			save_errno = errno;

	got_sigchld = 1;
	if (write(signal_write_fd, "c", 1) < 0)
	{
		/* the pipe is full: the loop wakes anyway */
	}
	errno = save_errno;
}

/* See worker.h. */
void
drain_signal_fd(void)
{
	char		buf[64];

	while (read(signal_fd, buf, sizeof(buf)) > 0)
		;
}

/* The self-pipe and the handlers. */
static void
setup_signals(void)
{
	int			fds[2];
	struct sigaction sa;

	if (pipe2(fds, O_CLOEXEC | O_NONBLOCK) < 0)
	{
		wlog(LOG_ERROR, "cannot create a pipe: %s", strerror(errno));
		exit(1);
	}
	signal_fd = fds[0];
	signal_write_fd = fds[1];

	memset(&sa, 0, sizeof(sa));
	sigemptyset(&sa.sa_mask);
	sa.sa_flags = SA_RESTART;
	sa.sa_handler = on_stop_signal;
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	sa.sa_handler = on_sigchld;
	sa.sa_flags = SA_RESTART | SA_NOCLDSTOP;
	sigaction(SIGCHLD, &sa, NULL);
	/* a command that closes its stdin early must not kill the worker */
	signal(SIGPIPE, SIG_IGN);
}

/* Parse the command line into opts; exits on usage errors, --help, --version. */
static void
parse_options(int argc, char **argv)
{
	enum
	{
		OPT_HEARTBEAT = 256, OPT_MAX_TASKS, OPT_ONCE, OPT_GRACE, OPT_POLL_INTERVAL,
		OPT_MAX_REDELIVERIES, OPT_DECLARE, OPT_RETRY_TTL, OPT_QUEUE_TYPE, OPT_DB_TIMEOUT, OPT_MAX_OUTPUT,
		OPT_NO_LISTEN, OPT_LEASE
	};
	static const struct option long_options[] = {
		{"queue", required_argument, NULL, 'q'},
		{"command", required_argument, NULL, 'c'},
		{"mode", required_argument, NULL, 'm'},
		{"dsn", required_argument, NULL, 'd'},
		{"amqp-uri", required_argument, NULL, 'u'},
		{"worker-id", required_argument, NULL, 'w'},
		{"concurrency", required_argument, NULL, 'n'},
		{"heartbeat-ms", required_argument, NULL, OPT_HEARTBEAT},
		{"lease-ms", required_argument, NULL, OPT_LEASE},
		{"max-tasks", required_argument, NULL, OPT_MAX_TASKS},
		{"once", no_argument, NULL, OPT_ONCE},
		{"grace-ms", required_argument, NULL, OPT_GRACE},
		{"poll-interval-ms", required_argument, NULL, OPT_POLL_INTERVAL},
		{"no-listen", no_argument, NULL, OPT_NO_LISTEN},
		{"max-redeliveries", required_argument, NULL, OPT_MAX_REDELIVERIES},
		{"declare", no_argument, NULL, OPT_DECLARE},
		{"retry-ttl-ms", required_argument, NULL, OPT_RETRY_TTL},
		{"queue-type", required_argument, NULL, OPT_QUEUE_TYPE},
		{"db-timeout-ms", required_argument, NULL, OPT_DB_TIMEOUT},
		{"max-output-bytes", required_argument, NULL, OPT_MAX_OUTPUT},
		{"verbose", no_argument, NULL, 'v'},
		{"version", no_argument, NULL, 'V'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0}
	};
	int			c;

	opterr = 0;
	while ((c = getopt_long(argc, argv, ":q:c:m:d:u:w:n:vVh", long_options, NULL)) != -1)
	{
		switch (c)
		{
			case 'q':
				opts.queue = optarg;
				break;
			case 'c':
				opts.command = optarg;
				break;
			case 'm':
				if (strcmp(optarg, "poll") == 0)
					opts.mode = MODE_POLL;
				else if (strcmp(optarg, "broker") == 0)
					opts.mode = MODE_BROKER;
				else
					usage_error("invalid --mode \"%s\" (poll or broker)", optarg);
				break;
			case 'd':
				opts.dsn = optarg;
				break;
			case 'u':
				opts.amqp_uri = optarg;
				break;
			case 'w':
				opts.worker_id = optarg;
				break;
			case 'n':
				/* claim_task takes at most 1000 */
				opts.concurrency = (int) int_option("concurrency", optarg, 1, 1000);
				break;
			case OPT_HEARTBEAT:
				opts.heartbeat_ms = (int) int_option("heartbeat-ms", optarg, 100, INT_MAX);
				break;
			case OPT_LEASE:
				opts.lease_ms = (int) int_option("lease-ms", optarg, 300, INT_MAX);
				break;
			case OPT_MAX_TASKS:
				opts.max_tasks = int_option("max-tasks", optarg, 1, LONG_MAX);
				break;
			case OPT_ONCE:
				opts.once = true;
				break;
			case OPT_GRACE:
				opts.grace_ms = (int) int_option("grace-ms", optarg, 0, INT_MAX);
				break;
			case OPT_POLL_INTERVAL:
				opts.poll_interval_ms = (int) int_option("poll-interval-ms", optarg, 100, INT_MAX);
				break;
			case OPT_NO_LISTEN:
				opts.no_listen = true;
				break;
			case OPT_MAX_REDELIVERIES:
				opts.max_redeliveries = (int) int_option("max-redeliveries", optarg, 0, INT_MAX);
				break;
			case OPT_DECLARE:
				opts.declare = true;
				break;
			case OPT_RETRY_TTL:
				opts.retry_ttl_ms = (int) int_option("retry-ttl-ms", optarg, 1, INT_MAX);
				break;
			case OPT_QUEUE_TYPE:
				if (strcmp(optarg, "classic") == 0)
					opts.quorum = false;
				else if (strcmp(optarg, "quorum") == 0)
					opts.quorum = true;
				else
					usage_error("invalid --queue-type \"%s\" (classic or quorum)", optarg);
				break;
			case OPT_DB_TIMEOUT:
				opts.db_timeout_ms = (int) int_option("db-timeout-ms", optarg, 100, INT_MAX);
				break;
			case OPT_MAX_OUTPUT:
				opts.max_output_bytes = (int) int_option("max-output-bytes", optarg, 2, INT_MAX - 1);
				break;
			case 'v':
				log_min_level = LOG_DEBUG;
				break;
			case 'V':
				printf("wfe-worker %s\n", WFE_VERSION);
				exit(0);
			case 'h':
				usage(stdout);
				exit(0);
			case ':':
				usage_error("option %s needs a value", argv[optind - 1]);
				break;
			default:
				usage_error("unknown option \"%s\"", argv[optind - 1]);
		}
	}
	if (optind < argc)
		usage_error("unexpected argument \"%s\"", argv[optind]);
	if (opts.queue == NULL || opts.queue[0] == '\0')
		usage_error("%s", "--queue is required");
	if (!wfe_queue_name_valid(opts.queue))
		usage_error("invalid --queue \"%s\" (queue names match " WFE_QUEUE_NAME_PATTERN ")",
					opts.queue);
	if (opts.command == NULL || opts.command[0] == '\0')
		usage_error("%s", "--command is required");
	if (opts.amqp_uri == NULL)
		opts.amqp_uri = getenv("WFE_AMQP_URI") && *getenv("WFE_AMQP_URI")
			? getenv("WFE_AMQP_URI") : DEFAULT_AMQP_URI;
}

/* host:pid, unless --worker-id named the worker. */
static void
default_worker_id(void)
{
	static char id[300];
	char		host[256];

	if (opts.worker_id)
		return;
	if (gethostname(host, sizeof(host)) != 0)
		snprintf(host, sizeof(host), "localhost");
	host[sizeof(host) - 1] = '\0';
	snprintf(id, sizeof(id), "%s:%d", host, (int) getpid());
	opts.worker_id = id;
}

/* Entry point. */
int
main(int argc, char **argv)
{
	int			rc;

	parse_options(argc, argv);
	default_worker_id();
	srandom((unsigned) (time(NULL) ^ getpid()));
	setup_signals();
	slots = xmalloc(sizeof(Slot) * opts.concurrency);
	memset(slots, 0, sizeof(Slot) * opts.concurrency);
	for (int i = 0; i < opts.concurrency; i++)
		command_init(&slots[i].cmd);

	wlog(LOG_INFO, "wfe-worker %s: queue %s, %s mode, worker id %s, concurrency %d",
		 WFE_VERSION, opts.queue, opts.mode == MODE_POLL ? "poll" : "broker", opts.worker_id,
		 opts.concurrency);
	rc = worker_loop();
	tasks_kill_all();
	wlog(LOG_INFO, "stopped (exit status %d)", rc);
	return rc;
}
