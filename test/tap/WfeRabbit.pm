# WfeRabbit — a private RabbitMQ node for wfe's TAP tests, and the set-up
# the broker tests share.
#
#   my $rabbit = WfeRabbit->new('dispatch');
#   $rabbit->start;
#   my $node = WfeRabbit::wfe_node('wfe_dispatch', $rabbit, "wfe.publish_batch = 7\n");
#   my @msgs = $rabbit->probe_json('consume', 'wfe.q.small', 1, 30);
#   $rabbit->stop_app; ... $rabbit->start_app;
#   $rabbit->stop;     # also done at exit for nodes still running
#
#   my @nodes = WfeRabbit::cluster('three', 3);   # a cluster on loopback
#   $nodes[1]->kill9; ... $nodes[1]->start;       # the node rejoins
#
# The node is the Debian rabbitmq-server run as the user running the test
# (the harness runs TAP as "postgres" when started as root), on loopback
# only, with everything of its own: a node name, free ports (AMQP,
# distribution, a private epmd, the CLI's distribution port), its data,
# logs, configuration and Erlang cookie (HOME) under the test's temporary
# directory.  Nothing of a system RabbitMQ (or another test's node) is
# shared or touched.  When stopped, its log is copied to the test's log
# directory (tmp_check/log), where the harness shows it after a failure.
#
# build/test/amqp-probe (make test-tools) is the AMQP client the tests use.
package WfeRabbit;

use strict;
use warnings;

use Cwd qw(abs_path);
use File::Basename qw(dirname);
use File::Copy qw(copy);
use File::Path qw(make_path);
use IPC::Run;
use JSON::PP;
use POSIX qw(WNOHANG);
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);
use WfeNode;

# Where the Debian package puts the server scripts.
my $RABBIT_BIN = '/usr/lib/rabbitmq/bin';
# The top of the source tree (this file is test/tap/WfeRabbit.pm).
my $TOP = abs_path(dirname(__FILE__) . '/../..');
# Nodes started and not stopped yet: stopped at exit, whatever happened.
my @running;

# The top of the source tree.
sub top_dir { return $TOP; }

# The path of amqp-probe; dies with a hint when it was not built.
sub probe_path
{
	my $path = "$TOP/build/test/amqp-probe";
	die "$path is missing: run 'make test-tools'\n" unless -x $path;
	return $path;
}

# WfeRabbit->new(NAME[, EPMD_PORT, COOKIE]): a node (not started) with its
# own ports and files.  The nodes of a cluster share an epmd (its port) and
# an Erlang cookie.
sub new
{
	my ($class, $name, $shared_epmd, $cookie) = @_;
	my $base = PostgreSQL::Test::Utils::tempdir("rabbit_$name");
	(my $short = $name) =~ s/[^A-Za-z0-9]//g;
	my $self = bless {
		name => $name,
		base => $base,
		nodename => "wfetap${short}$$\@localhost",
		port => PostgreSQL::Test::Cluster::get_free_port(),
		dist_port => PostgreSQL::Test::Cluster::get_free_port(),
		epmd_port => $shared_epmd // PostgreSQL::Test::Cluster::get_free_port(),
		ctl_port => PostgreSQL::Test::Cluster::get_free_port(),
		pid => undef,
	}, $class;

	make_path("$base/home", "$base/mnesia", "$base/log");
	chmod 0700, "$base/home";
	if (defined $cookie)
	{
		_write("$base/home/.erlang.cookie", $cookie);
		chmod 0400, "$base/home/.erlang.cookie";
	}
	_write("$base/enabled_plugins", "[].\n");
	_write("$base/rabbitmq-env.conf", "# nothing: the environment says it all\n");
	# loopback only; a small disk limit so that a full CI disk does not
	# block publishers (which would look like a wfe bug)
	_write("$base/rabbitmq.conf",
		"listeners.tcp.default = 127.0.0.1:$self->{port}\n"
		  . "loopback_users.guest = true\n"
		  . "disk_free_limit.absolute = 1MB\n"
		  . "log.file.level = info\n"
		  . "log.console = false\n");
	my $loopback = '-kernel inet_dist_use_interface {127,0,0,1}';
	$self->{env} = {
		HOME => "$base/home",    # the Erlang cookie lives here, for server and CLI
		RABBITMQ_NODENAME => $self->{nodename},
		RABBITMQ_NODE_IP_ADDRESS => '127.0.0.1',
		RABBITMQ_NODE_PORT => $self->{port},
		RABBITMQ_DIST_PORT => $self->{dist_port},
		ERL_EPMD_ADDRESS => '127.0.0.1',
		ERL_EPMD_PORT => $self->{epmd_port},
		RABBITMQ_CTL_DIST_PORT_MIN => $self->{ctl_port},
		RABBITMQ_CTL_DIST_PORT_MAX => $self->{ctl_port},
		RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS => $loopback,
		RABBITMQ_CTL_ERL_ARGS => $loopback,
		RABBITMQ_MNESIA_BASE => "$base/mnesia",
		RABBITMQ_LOG_BASE => "$base/log",
		RABBITMQ_ENABLED_PLUGINS_FILE => "$base/enabled_plugins",
		RABBITMQ_CONFIG_FILE => "$base/rabbitmq.conf",
		RABBITMQ_ADVANCED_CONFIG_FILE => "$base/advanced.config",
		RABBITMQ_CONF_ENV_FILE => "$base/rabbitmq-env.conf",
		RABBITMQ_PID_FILE => "$base/rabbitmq.pid",
		ERL_CRASH_DUMP => "$base/erl_crash.dump",
	};
	return $self;
}

# Write a small file.
sub _write
{
	my ($path, $text) = @_;
	open(my $fh, '>', $path) or die "cannot write $path: $!";
	print $fh $text;
	close($fh) or die "cannot write $path: $!";
}

# The AMQP URI of the node (an empty vhost path means "/").
sub uri
{
	my ($self) = @_;
	return "amqp://guest:guest\@127.0.0.1:$self->{port}/";
}

# The AMQP port.
sub port { return $_[0]->{port}; }

# The node's own log file.
sub logfile
{
	my ($self) = @_;
	return "$self->{base}/log/$self->{nodename}.log";
}

# Run a command with the node's environment; return (exit status, stdout,
# stderr).  Commands that hang are cut off after `timeout` seconds.
sub _run
{
	my ($self, $cmd, $timeout) = @_;
	my ($out, $err) = ('', '');
	local %ENV = (%ENV, %{ $self->{env} });
	my $ok = eval {
		IPC::Run::run($cmd, '<', \undef, '>', \$out, '2>', \$err,
			IPC::Run::timeout($timeout // $PostgreSQL::Test::Utils::timeout_default));
		1;
	};
	return (-1, $out, $err . ($@ // '')) unless $ok;
	return ($? >> 8, $out, $err);
}

# rabbitmqctl ARGS... against this node; its stdout, or die.
sub ctl
{
	my ($self, @args) = @_;
	my ($rc, $out, $err) = $self->_run([ "$RABBIT_BIN/rabbitmqctl", '-n', $self->{nodename}, @args ]);
	die "rabbitmqctl @args failed (status $rc): $err$out" if $rc != 0;
	return $out;
}

# Is the server process (the rabbitmq-server script) still running?
sub _alive
{
	my ($self) = @_;
	return 0 unless $self->{pid};
	return 1 if waitpid($self->{pid}, WNOHANG) == 0;
	$self->{pid} = undef;    # reaped (or not our child any more)
	return 0;
}

# The last lines of the node's log and of the server script's output.
sub _log_tail
{
	my ($self) = @_;
	my $tail = '';
	for my $f ($self->logfile, "$self->{base}/server.out")
	{
		next unless -f $f;
		my @lines = split /\n/, slurp_file($f);
		splice(@lines, 0, @lines - 30) if @lines > 30;
		$tail .= "--- $f\n" . join("\n", @lines) . "\n";
	}
	return $tail;
}

# Start the node and wait until RabbitMQ runs in it.
sub start
{
	my ($self) = @_;
	die "RabbitMQ node $self->{nodename} is already running\n" if $self->{pid};
	my $pid;
	{
		local %ENV = (%ENV, %{ $self->{env} });
		$pid = fork();
		die "fork: $!" unless defined $pid;
		if ($pid == 0)
		{
			# a process group of its own, so that a failed stop can end it all
			POSIX::setpgid(0, 0);
			chdir $self->{base};
			open(STDIN, '<', '/dev/null');
			open(STDOUT, '>>', "$self->{base}/server.out");
			open(STDERR, '>&', \*STDOUT);
			exec("$RABBIT_BIN/rabbitmq-server") or POSIX::_exit(127);
		}
	}
	$self->{pid} = $pid;
	push @running, $self;
	note "RabbitMQ node $self->{nodename} starting on 127.0.0.1:$self->{port}";
	$self->_await_startup;
	return $self;
}

# Wait until the RabbitMQ application runs (after start or start_app).
sub _await_startup
{
	my ($self) = @_;
	my $deadline = time + $PostgreSQL::Test::Utils::timeout_default;
	my $err = '';
	while (time < $deadline)
	{
		die "RabbitMQ node $self->{nodename} exited while starting\n" . $self->_log_tail
		  unless $self->_alive;
		my ($rc, $out, $e) = $self->_run(
			[ "$RABBIT_BIN/rabbitmqctl", '-n', $self->{nodename}, '-q', 'await_startup', '--timeout', '30' ], 60);
		return if $rc == 0;
		$err = $e . $out;
		usleep(500_000);    # not up yet (epmd does not know the node yet)
	}
	die "RabbitMQ node $self->{nodename} did not start: $err\n" . $self->_log_tail;
}

# Stop the RabbitMQ application (the Erlang node stays): connections are
# closed and the port stops listening, as in a broker outage.
sub stop_app
{
	my ($self) = @_;
	$self->ctl('stop_app');
	note "RabbitMQ application stopped on $self->{nodename}";
}

# Start the RabbitMQ application again and wait until it runs.
sub start_app
{
	my ($self) = @_;
	$self->ctl('start_app');
	$self->_await_startup;
	note "RabbitMQ application started again on $self->{nodename}";
}

# Stop the node: rabbitmqctl stop, else kill its process group; then its
# private epmd.  Its log goes to the test's log directory.
sub stop
{
	my ($self) = @_;
	return unless grep { $_ == $self } @running;
	my $pid = $self->{pid};
	if ($self->_alive)
	{
		my ($rc, $out, $err) =
		  $self->_run([ "$RABBIT_BIN/rabbitmqctl", '-n', $self->{nodename}, 'stop' ], 60);
		my $deadline = time + 30;
		usleep(100_000) while $self->_alive && time < $deadline;
		if ($self->_alive)
		{
			diag "RabbitMQ node $self->{nodename} did not stop (rabbitmqctl: $rc $err): killing it";
			kill 'KILL', -$pid;
			waitpid($pid, 0);
			$self->{pid} = undef;
		}
	}
	# the Erlang VM started an epmd on our private port; it has no node left
	$self->_run([ 'epmd', '-kill' ], 30);
	@running = grep { $_ != $self } @running;
	if (-f $self->logfile && defined $PostgreSQL::Test::Utils::log_path)
	{
		copy($self->logfile, "$PostgreSQL::Test::Utils::log_path/rabbitmq_$self->{name}.log");
	}
	return;
}

# kill -9 the node's Erlang VM (a crash: nothing is flushed, no goodbye to
# the cluster), and wait until the server script noticed.
sub kill9
{
	my ($self) = @_;
	my $beam = slurp_file("$self->{base}/rabbitmq.pid");
	$beam =~ s/\s+//g;
	die "no Erlang VM pid in $self->{base}/rabbitmq.pid" unless $beam =~ /^\d+$/;
	kill 'KILL', $beam;
	my $deadline = time + 60;
	usleep(100_000) while $self->_alive && time < $deadline;
	note "RabbitMQ node $self->{nodename} killed with SIGKILL (Erlang VM pid $beam)";
	return;
}

# The node's listening TCP sockets, as `ss -ltnpH` shows them: a list of
# "address:port" of the sockets its Erlang VM holds, plus its epmd's.
sub listening
{
	my ($self) = @_;
	my $beam = slurp_file("$self->{base}/rabbitmq.pid");
	$beam =~ s/\s+//g;
	my ($rc, $out, $err) = $self->_run([ 'ss', '-ltnpH' ], 30);
	die "ss -ltnpH failed: $err" if $rc != 0;
	my @socks;
	for my $line (split /\n/, $out)
	{
		my @f = split ' ', $line;
		my $local = $f[3] // next;
		push @socks, $local
		  if $line =~ /pid=$beam,/ || $local =~ /:$self->{epmd_port}$/;
	}
	return @socks;
}

# cluster(NAME, N): N started RabbitMQ nodes on loopback forming a cluster:
# each with its own node name, AMQP and distribution ports and files; one
# epmd and one Erlang cookie for them all.  Nodes 2..N joined node 1.
sub cluster
{
	my ($name, $n) = @_;
	my $epmd = PostgreSQL::Test::Cluster::get_free_port();
	my $cookie = join '', map { ('A' .. 'Z')[ int(rand(26)) ] } 1 .. 20;
	my @nodes = map { WfeRabbit->new("$name$_", $epmd, $cookie) } 1 .. $n;
	$_->start for @nodes;
	for my $node (@nodes[ 1 .. $#nodes ])
	{
		$node->ctl('stop_app');
		$node->ctl('join_cluster', $nodes[0]{nodename});
		$node->start_app;
	}
	return @nodes;
}

# The nodes a node sees running in its cluster.
sub running_nodes
{
	my ($self) = @_;
	my $out = $self->ctl('eval', 'rabbit_nodes:all_running().');
	return sort($out =~ /'?([A-Za-z0-9_.-]+\@[A-Za-z0-9_.-]+)'?/g);
}

# The members of quorum queue QUEUE as this node reports them: a list of
# [node name, Raft state] ("leader", "follower", or another state such as
# "noproc" for a member that is not running); empty when it cannot tell.
sub quorum_members
{
	my ($self, $queue) = @_;
	my ($rc, $out, $err) = $self->_run(
		[ "$RABBIT_BIN/rabbitmq-queues", '-n', $self->{nodename}, '-q', '--formatter', 'json',
		  'quorum_status', $queue ], 60);
	return () if $rc != 0;
	my $rows = eval { decode_json($out) };
	return () unless ref $rows eq 'ARRAY';
	return map { [ $_->{'Node Name'} // '?', $_->{'Raft State'} // '?' ] } @$rows;
}

# Wait until each of QUEUES has a running member on each of the cluster's
# NODES nodes (one leader, the rest followers), as this node sees them: the
# cluster can then lose any one node and keep every queue available.  (A
# member can still be starting some time after its node joined, under
# load; killing another node then would take its queue's quorum with it.)
# True when ready; false at the timeout, saying what it saw.
sub await_quorum
{
	my ($self, $nodes, @queues) = @_;
	my $deadline = time + $PostgreSQL::Test::Utils::timeout_default;
	my $seen;
	while (1)
	{
		my $ready = 1;
		$seen = '';
		for my $q (@queues)
		{
			my @m = $self->quorum_members($q);
			my $live = grep { $_->[1] =~ /^(?:leader|follower)$/ } @m;
			my $leaders = grep { $_->[1] eq 'leader' } @m;
			$seen .= "$q: " . join(', ', map { "@$_" } @m) . '; ';
			$ready &&= $live == $nodes && $leaders == 1;
		}
		return 1 if $ready;
		last if time >= $deadline;
		usleep(500_000);
	}
	diag "quorum queues not ready: $seen";
	return 0;
}

# The node's name (name@localhost).
sub nodename { return $_[0]->{nodename}; }

# At exit (also after a die), stop what is still running.
END
{
	local $?;
	# (a copy: stop takes each node off @running)
	my @nodes = reverse @running;
	$_->stop for @nodes;
}

# Run amqp-probe against this node: (exit status, stdout, stderr).
sub probe
{
	my ($self, @args) = @_;
	my ($out, $err) = ('', '');
	IPC::Run::run([ probe_path(), $self->uri, @args ], '<', \undef, '>', \$out, '2>', \$err,
		IPC::Run::timeout($PostgreSQL::Test::Utils::timeout_default + 60));
	return ($? >> 8, $out, $err);
}

# Run amqp-probe; its stdout, or die when it failed.  Status 3 (fewer
# messages than asked for arrived in time) is not a failure here: the
# caller counts what it got.
sub probe_ok
{
	my ($self, @args) = @_;
	my ($rc, $out, $err) = $self->probe(@args);
	die "amqp-probe @args failed (status $rc): $err" if $rc != 0 && $rc != 3;
	note "amqp-probe @args: $err" if $rc == 3;
	return $out;
}

# Run a consuming amqp-probe subcommand; its JSON lines, decoded.
sub probe_json
{
	my ($self, @args) = @_;
	my $json = JSON::PP->new->utf8;
	return map { $json->decode($_) } grep { /\S/ } split /\n/, $self->probe_ok(@args);
}

# Drain a queue until it is idle for IDLE_S seconds, counting by
# message_id: (total, distinct, {message_id => count}, [message_ids in the
# order they arrived]).
sub count_ids
{
	my ($self, $queue, $idle_s) = @_;
	my $out = $self->probe_ok('count-ids', $queue, $idle_s, 'list');
	my (%seen, @order);
	while ($out =~ /^id (\S+)$/mg)
	{
		push @order, $1;
		$seen{$1}++;
	}
	$out =~ /^total (\d+) distinct (\d+)$/m or die "amqp-probe count-ids said: $out";
	die "amqp-probe count-ids listed " . scalar(@order) . " of $1 messages" if @order != $1;
	return ($1, $2, \%seen, \@order);
}

# The number of messages in a queue, or undef when the queue does not exist.
sub queue_messages
{
	my ($self, $queue) = @_;
	my ($rc, $out, $err) = $self->probe('queue-info', $queue);
	return undef if $rc == 4;
	die "amqp-probe queue-info $queue failed (status $rc): $err" if $rc != 0;
	$out =~ /^messages (\d+)/ or die "amqp-probe queue-info said: $out";
	return $1;
}

#
# The set-up the broker tests share.
#

# wfe_node(NAME, RABBIT, EXTRA_CONF): a started node (WfeNode::node, wfe
# preloaded and created), its background worker publishing to RABBIT;
# EXTRA_CONF comes last, so that it wins.
sub wfe_node
{
	my ($name, $rabbit, $extra) = @_;
	return WfeNode::node($name,
		preload => 1,
		conf => "wfe.poll_interval_ms = 200\n"
		  . "wfe.amqp_uri = '" . $rabbit->uri . "'\n"
		  . "wfe.broker_retry_ttl_ms = 500\n"
		  . "log_min_messages = info\n"
		  . ($extra // ''));
}

# linear_workflow(NODE, NAME, QUEUE, STAGES...): a worker contract on QUEUE
# (in broker mode) and an active workflow of worker stages run one after
# the other; each stage is a name or [name, extra YAML lines].  The first
# stage's input is the run's context.data and context.n.
sub linear_workflow
{
	my ($node, $name, $queue, @stages) = @_;
	my $yaml = "name: $name\nversion: \"1.0.0\"\nentry: "
	  . (ref $stages[0] ? $stages[0][0] : $stages[0]) . "\nstages:\n";
	for my $i (0 .. $#stages)
	{
		my ($stage, $extra) = ref $stages[$i] ? @{ $stages[$i] } : ($stages[$i], '');
		my $next = $i < $#stages ? (ref $stages[ $i + 1 ] ? $stages[ $i + 1 ][0] : $stages[ $i + 1 ]) : 'completed';
		$yaml .= "  - name: $stage\n    type: worker\n    queue: $queue\n    worker: tap.$queue\@1\n"
		  . ($i == 0 ? "    input: { data: \"\${context.data}\", n: \"\${context.n}\" }\n" : "    input: { n: \"\${context.n}\" }\n")
		  . ($extra ? "    $extra\n" : '')
		  . "    on_success: $next\n    on_failure: failed\n";
	}
	$node->safe_psql('postgres', qq{
SELECT wfe.register_worker('tap.$queue\@1', '$queue');
SELECT wfe.configure_queue('$queue', 'broker');});
	WfeNode::workflow($node, $yaml);
	return;
}

# wait_published(NODE, WHAT): wait until every outbox row is published.
sub wait_published
{
	my ($node, $what) = @_;
	return ok($node->poll_query_until('postgres',
			"SELECT count(*) = 0 FROM wfe.outbox WHERE state <> 'published'"),
		"$what: every outbox row is published");
}

# wait_connected(NODE, WHAT): wait until the publisher says it is connected.
sub wait_connected
{
	my ($node, $what) = @_;
	return ok($node->poll_query_until('postgres', 'SELECT connected FROM wfe.publisher_lease'),
		"$what: wfe.publisher_lease shows the publisher connected");
}

1;
