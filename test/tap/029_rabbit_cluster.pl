# A three-node RabbitMQ cluster with quorum queues, and one node killed
# under load (delivery.md "RabbitMQ clusters and quorum queues").
#
# Three nodes on loopback: three node names and port sets, one epmd and one
# Erlang cookie, distribution bound to 127.0.0.1 (checked with ss: nothing
# of theirs listens on another address).  wfe publishes with
# wfe.amqp_queue_type = quorum and wfe.amqp_uri listing the three nodes;
# three wfe-worker processes consume, each naming the nodes in another
# order.  Each task's command appends "run stage attempt fence" to a file:
# its side effect.
#
# Half the runs are submitted, and once some have completed the node the
# publisher is connected to is killed with SIGKILL; the other half are
# submitted at once.  Then we count: every run completes, each stage at its
# first attempt (no dispatch was lost and had to time out: no stage has a
# deadline that would hide a loss), nothing went to wfe.dlq, and no
# attempt's side effect ran twice for one fence (the publisher's
# republished, unconfirmed messages and the redeliveries to other workers
# were answered "duplicate").  Then the killed node starts again and
# rejoins the cluster.
use strict;
use warnings;

use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);
use WfeRabbit;

my $worker_bin = WfeRabbit::top_dir() . '/build/wfe-worker';
plan skip_all => 'build/wfe-worker is not built' unless -x $worker_bin;

my $RUNS = 240;    # in two halves; two stages each
my @rabbits = WfeRabbit::cluster('cl', 3);
my @names = map { $_->nodename } @rabbits;
is_deeply([ $rabbits[0]->running_nodes ], [ sort @names ], 'three RabbitMQ nodes run as one cluster');

# Erlang distribution, epmd and AMQP on loopback only
for my $r (@rabbits)
{
	my @socks = $r->listening;
	my @public = grep { !/^(?:127\.0\.0\.1|\[::1\]):\d+$/ } @socks;
	ok(@socks >= 3 && !@public,
		"$r->{nodename} listens on loopback only (@socks)" . (@public ? "; NOT: @public" : ''));
}

my @QUEUES = qw(wfe.tapc.small wfe.tapc.large wfe.tapc.retry.small wfe.tapc.retry.large wfe.dlq);
my $uris = join ',', map { $_->uri } @rabbits;
# (this wfe.amqp_uri comes after wfe_node's, which names node 1 alone)
my $node = WfeRabbit::wfe_node('wfe_cluster', $rabbits[0],
	"wfe.amqp_uri = '$uris'\nwfe.amqp_queue_type = quorum\nwfe.broker_max_redeliveries = 5\n"
	  . "log_statement = none\n");
sub sql { return $node->safe_psql('postgres', $_[0]); }

WfeRabbit::linear_workflow($node, 'tap-cluster', 'tapc', 'a', 'b');
WfeRabbit::wait_connected($node, 'start');
my $deadline = time + $PostgreSQL::Test::Utils::timeout_default;
usleep(200_000) while !defined $rabbits[1]->queue_messages('wfe.tapc.large') && time < $deadline;

# the queues are quorum queues, replicated on the three nodes, with wfe's arguments
my $qinfo = $rabbits[2]->ctl('list_queues', '-q', '--no-table-headers', 'name', 'type', 'arguments');
like($qinfo, qr/^wfe\.tapc\.small\s+quorum\s+.*x-delivery-limit[^\n]*5/m,
	'wfe.tapc.small is a quorum queue with x-delivery-limit = wfe.broker_max_redeliveries');
like($qinfo, qr/^wfe\.tapc\.small\s+quorum\s+.*x-dead-letter-strategy[^\n]*at-least-once/m,
	'which dead-letters at least once');
like($qinfo, qr/^wfe\.tapc\.retry\.small\s+quorum\s+.*x-message-ttl/m, 'so is its retry queue');
like($qinfo, qr/^wfe\.dlq\s+quorum/m, 'and wfe.dlq');
my $members = $rabbits[0]->ctl('eval',
	'{ok, Q} = rabbit_amqqueue:lookup(rabbit_misc:r(<<"/">>, queue, <<"wfe.tapc.small">>)), '
	  . 'length(amqqueue:get_type_state(Q) =/= undefined andalso maps:get(nodes, amqqueue:get_type_state(Q))).');
like($members, qr/^3$/m, 'wfe.tapc.small has a member on each node');

# The kill below tests wfe, not RabbitMQ's own limits: every queue must be
# able to lose any one node and keep its quorum.  Under load a member can
# still be starting after its node joined; killing another node then stops
# that queue until the killed node is back (wfe survives that -- the rows
# wait in the outbox -- but not within this test's time).
ok($rabbits[0]->await_quorum(3, @QUEUES), 'every quorum queue has a running member on each node');

# the side effect of each attempt: one line per run of the command
my $effects = "$PostgreSQL::Test::Utils::tmp_check/cluster_effects.txt";
unlink $effects;
my $command = qq{cat >/dev/null; echo "\$WFE_RUN_ID \$WFE_STAGE \$WFE_ATTEMPT \$WFE_FENCE" >>$effects; echo '{"ok": true}'};
my @workers;
for my $i (0 .. 2)
{
	# each names the nodes starting with another one
	my @order = map { $rabbits[ ($i + $_) % 3 ]->uri } 0 .. 2;
	my $log = "$PostgreSQL::Test::Utils::log_path/wfe-worker-cluster-$i.log";
	push @workers, IPC::Run::start(
		[
			$worker_bin, '--queue', 'tapc', '--mode', 'broker',
			'--dsn', $node->connstr('postgres'), '--amqp-uri', join(',', @order),
			'--worker-id', "tap-cluster-$i", '--concurrency', '4', '--queue-type', 'quorum',
			'--command', $command
		],
		'<', \undef, '>>', $log, '2>>', $log);
}

sub submit
{
	my ($from, $to) = @_;
	sql(qq{SELECT count(*) FROM generate_series($from, $to) AS g,
	         LATERAL wfe.submit('tap-cluster', jsonb_build_object('n', g, 'data', g))});
}

sub completed { return sql(q{SELECT count(*) FROM wfe.runs WHERE state = 'completed'}); }

# When runs do not complete: where their dispatches are, as notes (on
# stdout, in order, so that a CI log's excerpt of this file shows them).
sub say_where_runs_wait
{
	my ($victim) = @_;
	my ($alive) = grep { $_ != $victim } @rabbits;
	my @lines = (
		'runs: ' . sql(q{SELECT string_agg(state || ' ' || n, ', ') FROM
			(SELECT state, count(*) AS n FROM wfe.runs GROUP BY 1) AS r}),
		'stages: ' . sql(q{SELECT string_agg(state || '/' || attempt || ' ' || n, ', ') FROM
			(SELECT state, attempt, count(*) AS n FROM wfe.run_stages GROUP BY 1, 2) AS s}),
		'outbox: ' . sql(q{SELECT string_agg(state || ' attempts ' || attempts || ' ' || n
			|| coalesce(': ' || left(last_error, 80), ''), '; ') FROM
			(SELECT state, attempts, last_error, count(*) AS n FROM wfe.outbox GROUP BY 1, 2, 3) AS o}),
		'lease: ' . sql(q{SELECT row_to_json(l) FROM wfe.publisher_lease AS l}),
		'background worker: ' . sql(q{SELECT string_agg(coalesce(wait_event, 'running') || ' ' || left(query, 60), '; ')
			FROM pg_stat_activity WHERE backend_type LIKE 'wfe%'}),
		map({ "queue $_" } split /\n/, $alive->ctl('list_queues', '-q', '--no-table-headers', 'name',
			'messages_ready', 'messages_unacknowledged', 'consumers', 'leader', 'online')));
	for my $i (0 .. 2)
	{
		my @log = grep { !/started the command|completed in/ }
		  split /\n/, slurp_file("$PostgreSQL::Test::Utils::log_path/wfe-worker-cluster-$i.log");
		push @lines, map { "worker $i: " . substr($_, 11, 150) } @log[ ($#log > 3 ? $#log - 3 : 0) .. $#log ];
	}
	my @server = grep { /wfe publisher|wfe worker|WARNING|ERROR/ } split /\n/, slurp_file($node->logfile);
	push @lines, map { 'server: ' . substr($_, 11, 150) } @server[ ($#server > 11 ? $#server - 11 : 0) .. $#server ];
	note $_ for grep { defined } @lines;
	return;
}

my $half = $RUNS / 2;
submit(1, $half);
$deadline = time + $PostgreSQL::Test::Utils::timeout_default;
usleep(100_000) while completed() < $half / 4 && time < $deadline;

# the node the publisher is connected to: kill -9 it, under load
my ($addr) = slurp_file($node->logfile) =~ /.*wfe publisher connected to RabbitMQ(?: again)? at (\S+)/s;
my ($victim) = grep { "127.0.0.1:" . $_->port eq ($addr // '') } @rabbits;
ok($victim, "the publisher is connected to a node of the cluster (" . ($addr // 'none') . ")");
$victim //= $rabbits[0];
my $done_at_kill = completed();
$victim->kill9;
submit($half + 1, $RUNS);
cmp_ok($done_at_kill, '<', $half, "the node was killed under load ($done_at_kill of $half runs completed)");

ok($node->poll_query_until('postgres', "SELECT count(*) = $RUNS FROM wfe.runs WHERE state = 'completed'"),
	"every run completed ($RUNS)")
  or say_where_runs_wait($victim);
is(sql(q{SELECT count(*) FROM wfe.run_stages WHERE attempt <> 1 OR state <> 'completed'}),
	0, 'each stage completed at its first attempt: no dispatch was lost');
is(sql(q{SELECT count(*) FROM wfe.dead_letters}), 0, 'nothing was dead-lettered');

my $log = slurp_file($node->logfile);
my @at = $log =~ /wfe publisher connected to RabbitMQ(?: again)? at (\S+)/g;
ok(@at > 1 && $at[-1] ne $addr, "the publisher moved on to another node (@at)");

# the side effects: one per attempt, none twice for a fence
my %seen;
my @lines = split /\n/, slurp_file($effects);
$seen{$_}++ for @lines;
my @twice = grep { $seen{$_} > 1 } sort keys %seen;
is(scalar(@lines), 2 * $RUNS, 'one side effect per stage (' . scalar(@lines) . ')');
is_deeply(\@twice, [], 'no attempt\'s side effect ran twice for one fence');
my @fences = sort map { my @f = split; "$f[0] $f[1] $f[3]" } keys %seen;
my @db = sort split /\n/, sql(q{SELECT run_id || ' ' || stage || ' ' || fence FROM wfe.run_stages});
is_deeply(\@fences, \@db, 'and each ran under the fence of the attempt that completed');

# the workers whose node died moved on too
my $moved = 0;
for my $i (0 .. 2)
{
	my $wlog = slurp_file("$PostgreSQL::Test::Utils::log_path/wfe-worker-cluster-$i.log");
	my @at = $wlog =~ /connected to RabbitMQ at (\S+);/g;
	$moved++ if @at > 1 && $at[0] eq $addr && $at[-1] ne $addr;
}
cmp_ok($moved, '>=', 1, "the wfe-worker connected to the killed node moved to another ($moved)");

# every message was settled: nothing is left in the queues
my ($alive) = grep { $_ != $victim } @rabbits;
$deadline = time + 60;
usleep(200_000)
  while (($alive->queue_messages('wfe.tapc.small') // 1) + ($alive->queue_messages('wfe.tapc.large') // 1)) > 0
  && time < $deadline;
is($alive->queue_messages('wfe.tapc.small') + $alive->queue_messages('wfe.tapc.large'),
	0, 'the work queues are empty: every delivery was acknowledged');
is($alive->queue_messages('wfe.dlq'), 0, 'wfe.dlq is empty');

# the killed node starts again and rejoins
$victim->start;
is_deeply([ $alive->running_nodes ], [ sort @names ], 'the killed node rejoined the cluster');

for my $w (@workers)
{
	$w->signal('TERM');
	ok($w->finish, 'a wfe-worker stops with exit status 0 on SIGTERM');
}
$node->stop;
$_->stop for reverse @rabbits;
done_testing();
