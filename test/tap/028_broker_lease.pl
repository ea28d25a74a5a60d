# Leases in broker mode (issue 26): wfe-worker accepts a dispatched task
# with --lease-ms and heartbeats it; killed with kill -9 while it holds the
# task, the attempt times out one lease after its last heartbeat -- not at
# the stage's execution deadline (two minutes here) -- and is retried; a
# second worker runs the retry.  The dead worker's report, arriving late
# with the first attempt's fence, is fenced (stale) and changes nothing.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);
use IPC::Run;
use WfeRabbit;

my $worker_bin = WfeRabbit::top_dir() . '/build/wfe-worker';
plan skip_all => 'build/wfe-worker is not built' unless -x $worker_bin;

my $rabbit = WfeRabbit->new('lease');
$rabbit->start;
my $node = WfeRabbit::wfe_node('wfe_lease', $rabbit);
sub sql { return $node->safe_psql('postgres', $_[0]); }

my $lease_ms = 3000;
WfeRabbit::linear_workflow($node, 'tap-lease', 'tapl', [ 'a',
	'execution_deadline_ms: 120000'
	  . "\n    retry: {max_attempts: 2, initial_ms: 100, multiplier: 1, max_ms: 100, jitter: none}" ]);
WfeRabbit::wait_connected($node, 'start');
my $deadline = time + $PostgreSQL::Test::Utils::timeout_default;
usleep(200_000) while !defined $rabbit->queue_messages('wfe.tapl.large') && time < $deadline;

my %workers;
# start_worker(ID, COMMAND): wfe-worker in broker mode on queue tapl.
sub start_worker
{
	my ($id, $command) = @_;
	my $log = "$PostgreSQL::Test::Utils::log_path/wfe-worker-$id.log";
	$workers{$id} = IPC::Run::start(
		[
			$worker_bin, '--queue', 'tapl', '--mode', 'broker',
			'--dsn', $node->connstr('postgres'), '--amqp-uri', $rabbit->uri,
			'--worker-id', $id, '--lease-ms', $lease_ms, '--command', $command
		],
		'<', \undef, '>>', $log, '2>>', $log);
	return;
}

# w1 takes the task and would run it for 20 s (its command outlives it
# briefly after the kill: only the worker dies).
start_worker('w1', 'sleep 20; echo \'{"late": true}\'');
my $run = sql(q{SELECT run_id FROM wfe.submit('tap-lease', '{"n": 1, "data": {}}')});
ok($node->poll_query_until('postgres',
		"SELECT state = 'running' AND claimed_by = 'w1' FROM wfe.run_stages WHERE run_id = $run AND stage = 'a'"),
	'w1 accepted the task');
my ($fence1, $lease, $window) = split /\|/, sql(
	"SELECT fence, lease_ms, extract(epoch FROM deadline_at - started_at) <= 3.1
	   FROM wfe.run_stages WHERE run_id = $run AND stage = 'a'");
is($lease, $lease_ms, 'accept_task recorded the lease');
is($window, 't', 'the accepted attempt is due one lease after acceptance, not at the execution deadline');

# alive for two leases: the heartbeats renew it
sleep(2 * $lease_ms / 1000);
is( sql("SELECT state || ' ' || attempt || ' ' || (deadline_at > now()) || ' ' || (heartbeat_at > started_at)
	       FROM wfe.run_stages WHERE run_id = $run AND stage = 'a'"),
	'running 1 true true',
	'after two leases w1 still holds attempt 1: its heartbeats renewed the lease');

# w2 will run the retry (for 3 s); then w1 dies
my $w2_secs = 3;
start_worker('w2', qq{sleep $w2_secs; echo '{"ok": true}'});
my $killed = time;
$workers{w1}->signal('KILL');
$workers{w1}->finish;
ok( $node->poll_query_until('postgres',
		"SELECT state = 'running' AND attempt = 2 AND claimed_by = 'w2' FROM wfe.run_stages WHERE run_id = $run AND stage = 'a'"),
	'after the kill, w2 accepted attempt 2');
my $retried = time - $killed;

# the dead worker's report arrives late, with attempt 1's fence, while attempt 2 runs
my $row = "SELECT state || ' ' || attempt || ' ' || fence || ' ' || coalesce(result::text, '-')
             FROM wfe.run_stages WHERE run_id = $run AND stage = 'a'";
my $before = sql($row);
is(sql("SELECT wfe.complete_task($run, 'a', 1, $fence1, '{\"late\": true}')"), 'stale',
	"w1's late report (attempt 1, its fence) is fenced: stale");
is(sql($row), $before, 'and changed nothing: attempt 2 runs on');

ok($node->poll_query_until('postgres', "SELECT state = 'completed' FROM wfe.runs WHERE run_id = $run"),
	'the run completes');
cmp_ok($retried, '<', $lease_ms / 1000 + 8,
	sprintf('attempt 2 started %.1f s after kill -9: about one lease (%d ms), not the 120 s execution deadline',
		$retried, $lease_ms));
is( sql("SELECT string_agg(type || ':' || attempt, ' ' ORDER BY event_id) FROM wfe.events
	      WHERE run_id = $run AND type IN ('stage.accepted', 'stage.timed_out', 'stage.completed')"),
	'stage.accepted:1 stage.timed_out:1 stage.accepted:2 stage.completed:2',
	'attempt 1 timed out, attempt 2 was accepted (by w2) and completed');
is(sql("SELECT claimed_by || ' ' || result::text FROM wfe.run_stages WHERE run_id = $run AND stage = 'a'"),
	'w2 {"ok": true}', "w2 ran the retry; w1's result never landed");

# accept_task refuses a lease that is not positive
my ($rc, $out, $err) = $node->psql('postgres', "SELECT wfe.accept_task($run, 'a', 2, 0, 'x', 0)");
like($err, qr/lease_ms must be positive, not 0/, 'accept_task refuses lease_ms 0 (22023)');

$workers{w2}->signal('TERM');
ok($workers{w2}->finish, 'w2 stops with exit status 0 on SIGTERM');
$node->stop;
$rabbit->stop;
done_testing();
