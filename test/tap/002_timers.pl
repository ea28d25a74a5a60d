# The worker's clocks, with nobody calling wfe.tick() (delivery.md "The
# background worker", 1. Timers, and "Wakeups, not polling"): a retry fires
# after its backoff; the queue, execution and heartbeat deadlines each time
# out an attempt, which is fenced (its late report answers stale) and follows
# the stage's retry policy or failure route; a run deadline fails the run; a
# delayed start starts the run on its own.  Then, with a poll interval of an
# hour, the same timers still fire: the worker sleeps until the earliest due
# time and is woken by the commits that add work.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use WfeNode;

my $node = WfeNode::node('wfe_timers', preload => 1, conf => "wfe.poll_interval_ms = 200\n");
WfeNode::worker_runs($node);

sub sql { return $node->safe_psql('postgres', $_[0]); }

# A workflow of one worker stage STAGE on QUEUE (its own contract), with
# extra YAML lines for the stage, routed to ON_FAILURE when it fails; more
# stages may follow in EXTRA.
sub define
{
	my ($name, $stage, $queue, $lines, $on_failure, $extra) = @_;
	$on_failure //= 'failed';
	$extra      //= '';
	sql("SELECT wfe.register_worker('tap.$queue\@1', '$queue')");
	sql("SELECT wfe.register_worker('tap.$1\@1', '$1')") while $extra =~ /queue: (\S+)/g;
	my $yaml = <<"YAML";
name: $name
version: "1.0.0"
entry: $stage
stages:
  - name: $stage
    type: worker
    queue: $queue
    worker: tap.$queue\@1
$lines
    on_success: completed
    on_failure: $on_failure
$extra
YAML
	WfeNode::workflow($node, $yaml);
}

sub submit
{
	my ($workflow, $options) = @_;
	$options //= '{}';
	return sql("SELECT run_id FROM wfe.submit('$workflow', '{}', NULL, '$options')");
}

# Claim one task of QUEUE; returns (run_id, stage, attempt, fence).
sub claim
{
	my ($queue, $lease) = @_;
	my $l = defined $lease ? ", lease_ms => $lease" : '';
	my $row = sql("SELECT run_id, stage, attempt, fence FROM wfe.claim_task('$queue', 'w-tap'$l)");
	return split /\|/, $row;
}

sub stage_row
{
	my ($run, $stage) = @_;
	return sql("SELECT state || ' ' || attempt || ' ' || fence FROM wfe.run_stages "
		  . "WHERE run_id = $run AND stage = '$stage'");
}

sub run_state
{
	return sql("SELECT state || ' ' || coalesce(reason, '-') FROM wfe.runs WHERE run_id = $_[0]");
}

sub events
{
	my ($run, $type) = @_;
	return sql("SELECT coalesce(string_agg(coalesce(stage, '-') || '/' || coalesce(attempt::text, '-'), ' ' "
		  . "ORDER BY event_id), '') FROM wfe.events WHERE run_id = $run AND type = '$type'");
}

my $retry_fast = 'retry: {max_attempts: 3, initial_ms: 200, multiplier: 1, max_ms: 200, jitter: none}';

#
# A retry fires after its backoff.
#
define('tap-retry', 'step', 'tap-retry', "    $retry_fast");
my $r1 = submit('tap-retry');
my ($run, $stage, $a1, $f1) = claim('tap-retry');
is("$run $stage $a1", "$r1 step 1", 'retry: attempt 1 claimed');
is( sql("BEGIN; SELECT wfe.fail_task($r1, 'step', $a1, $f1, '{\"code\": \"tap.flaky\"}', true); "
		  . "SELECT state FROM wfe.run_stages WHERE run_id = $r1 AND stage = 'step'; COMMIT;"),
	"accepted\nretry_scheduled",
	'retry: a retryable failure schedules a retry');
ok( $node->poll_query_until(
		'postgres',
		"SELECT state = 'queued' AND attempt = 2 AND fence > $f1 FROM wfe.run_stages "
		  . "WHERE run_id = $r1 AND stage = 'step'"),
	'retry: the stage is queued again with attempt 2 and a new fence, without wfe.tick()');
is( sql("SELECT count(*) FILTER (WHERE fired_at IS NOT NULL) || ' ' || bool_and(fired_at >= due_at) "
		  . "FROM wfe.timers WHERE run_id = $r1 AND kind = 'retry'"),
	'1 true', 'retry: its timer fired once, not before it was due');
is(events($r1, 'stage.retried'), 'step/2', 'retry: a stage.retried event for attempt 2');
($run, $stage, my $a2, my $f2) = claim('tap-retry');
is("$run $a2", "$r1 2", 'retry: attempt 2 is claimable');
is(sql("SELECT wfe.complete_task($r1, 'step', $a2, $f2)"), 'accepted', 'retry: attempt 2 completes');
is(run_state($r1), 'completed stage step routed to completed', 'retry: the run completed');

#
# Queue deadline: never claimed, the attempt times out (clock queue), is
# retried, times out again, and the stage follows its failure route.
#
define('tap-qd', 'wait', 'tap-qd',
	"    queue_deadline_ms: 300\n"
	  . "    retry: {max_attempts: 2, initial_ms: 100, multiplier: 1, max_ms: 100, jitter: none}",
	'fallback',
	"  - name: fallback\n    type: worker\n    queue: tap-fb\n    worker: tap.tap-fb\@1\n"
	  . "    on_success: completed\n    on_failure: failed\n");
my $r2 = submit('tap-qd');
ok( $node->poll_query_until(
		'postgres',
		"SELECT state = 'queued' FROM wfe.run_stages WHERE run_id = $r2 AND stage = 'fallback'"),
	'queue deadline: the failure route released the fallback stage');
is(stage_row($r2, 'wait') =~ s/ \d+$//r, 'timed_out 2',
	'queue deadline: the stage timed out on its second (last) attempt');
is( sql("SELECT string_agg(attempt || ':' || (detail ->> 'clock'), ' ' ORDER BY event_id) "
		  . "FROM wfe.events WHERE run_id = $r2 AND type = 'stage.timed_out'"),
	'1:queue 2:queue', 'queue deadline: both attempts timed out on the queue clock');
is(events($r2, 'stage.retried'), 'wait/2', 'queue deadline: the first timeout was retried');
is( sql("SELECT error ->> 'code' FROM wfe.run_stages WHERE run_id = $r2 AND stage = 'wait'"),
	'timeout.queue', 'queue deadline: the stage error says timeout.queue');
is( sql("SELECT stage || ' ' || attempt || ' ' || reason FROM wfe.dead_letters WHERE run_id = $r2"),
	'wait 2 retries exhausted', 'queue deadline: a dead letter for the exhausted stage');
is(run_state($r2) =~ s/ .*//r, 'running', 'queue deadline: the run goes on along the failure route');
($run, $stage, my $a, my $f) = claim('tap-fb');
is("$run $stage", "$r2 fallback", 'queue deadline: the fallback stage is claimed');
is(sql("SELECT wfe.complete_task($r2, 'fallback', $a, $f)"), 'accepted', 'fallback completes');
is(run_state($r2), 'completed stage fallback routed to completed', 'queue deadline: the run completed');

#
# Execution deadline: claimed with a 300 ms lease and never reported.
#
define('tap-exec', 'work', 'tap-exec',
	"    retry: {max_attempts: 2, initial_ms: 100, multiplier: 1, max_ms: 100, jitter: none}");
my $r3 = submit('tap-exec');
($run, $stage, $a1, $f1) = claim('tap-exec', 300);
is("$run $a1", "$r3 1", 'execution deadline: attempt 1 claimed with lease_ms 300');
ok( $node->poll_query_until(
		'postgres',
		"SELECT count(*) = 1 FROM wfe.events WHERE run_id = $r3 AND type = 'stage.timed_out' "
		  . "AND attempt = 1 AND detail ->> 'clock' = 'execution'"),
	'execution deadline: attempt 1 timed out on the execution clock');
is(sql("SELECT wfe.complete_task($r3, 'work', $a1, $f1)"), 'stale',
	'execution deadline: the late report of the timed-out attempt is stale');
is(events($r3, 'callback.stale'), 'work/1', 'execution deadline: the stale report is recorded');
is(events($r3, 'stage.completed'), '', 'execution deadline: the stale report completed nothing');
ok( $node->poll_query_until(
		'postgres',
		"SELECT state = 'queued' AND attempt = 2 FROM wfe.run_stages WHERE run_id = $r3 AND stage = 'work'"),
	'execution deadline: the retry queued attempt 2');
($run, $stage, $a2, $f2) = claim('tap-exec');
is(sql("SELECT wfe.complete_task($r3, 'work', $a2, $f2)"), 'accepted',
	'execution deadline: attempt 2 completes');
is(run_state($r3), 'completed stage work routed to completed', 'execution deadline: the run completed');

#
# Heartbeat deadline: claimed, one heartbeat, then silence.
#
define('tap-hb', 'beat', 'tap-hb',
	"    heartbeat_ms: 300\n    retry: {max_attempts: 1}");
my $r4 = submit('tap-hb');
my $hb = sql(<<"SQL");
SELECT run_id, attempt, fence, deadline_at AS d1 FROM wfe.claim_task('tap-hb', 'w-tap') \\gset
SELECT pg_sleep(0.05);
SELECT wfe.heartbeat(:run_id, 'beat', :attempt, :fence);
SELECT deadline_at > :'d1' FROM wfe.run_stages WHERE run_id = :run_id AND stage = 'beat';
SELECT :attempt || ' ' || :fence;
SQL
my @hb = split /\n/, $hb;
is($hb[1], 'accepted', 'heartbeat deadline: the heartbeat is accepted');
is($hb[2], 't', 'heartbeat deadline: the heartbeat pushed the deadline out');
($a1, $f1) = split / /, $hb[3];
ok( $node->poll_query_until(
		'postgres',
		"SELECT state = 'timed_out' FROM wfe.run_stages WHERE run_id = $r4 AND stage = 'beat'"),
	'heartbeat deadline: the silent attempt timed out');
is( sql("SELECT detail ->> 'clock' FROM wfe.events WHERE run_id = $r4 AND type = 'stage.timed_out'"),
	'heartbeat', 'heartbeat deadline: on the heartbeat clock');
ok($node->poll_query_until('postgres', "SELECT state = 'failed' FROM wfe.runs WHERE run_id = $r4"),
	'heartbeat deadline: with no retry left the run failed along on_failure');
is(sql("SELECT wfe.complete_task($r4, 'beat', $a1, $f1)"), 'late',
	'heartbeat deadline: a report after the run ended is late');
is(events($r4, 'stage.completed'), '', 'heartbeat deadline: nothing completed');

#
# Run deadline.
#
define('tap-rd', 'slow', 'tap-rd', '    retry: {max_attempts: 1}');
my $r5 = submit('tap-rd', '{"run_deadline_ms": 300}');
ok($node->poll_query_until('postgres', "SELECT state = 'failed' FROM wfe.runs WHERE run_id = $r5"),
	'run deadline: the run failed on its own');
is(run_state($r5), 'failed run deadline passed', "run deadline: its reason is 'run deadline passed'");
is(events($r5, 'run.deadline_expired'), '-/-', 'run deadline: a run.deadline_expired event');
is(stage_row($r5, 'slow') =~ s/ .*//r, 'cancelled', 'run deadline: the queued stage was cancelled');
ok( sql("SELECT bool_and(fired_at >= due_at) FROM wfe.timers WHERE run_id = $r5 AND kind = 'run_deadline'")
	  eq 't', 'run deadline: the timer did not fire early');

#
# Delayed start: not_before one second ahead.
#
define('tap-nb', 'later', 'tap-nb', '    retry: {max_attempts: 1}');
my $r6 = sql("SELECT run_id FROM wfe.submit('tap-nb', '{}', NULL, "
	  . "jsonb_build_object('not_before', now() + interval '1 second'))");
is(stage_row($r6, 'later'), 'waiting 0 0', 'delayed start: the stage waits at first');
is(events($r6, 'run.started'), '', 'delayed start: the run has not started yet');
ok( $node->poll_query_until(
		'postgres',
		"SELECT state = 'queued' FROM wfe.run_stages WHERE run_id = $r6 AND stage = 'later'"),
	'delayed start: the run started on its own');
is( sql("SELECT bool_and(e.at >= r.not_before) FROM wfe.events AS e JOIN wfe.runs AS r USING (run_id) "
		  . "WHERE e.run_id = $r6 AND e.type = 'run.started'"),
	't', 'delayed start: not before not_before');
is(events($r6, 'run.started'), '-/-', 'delayed start: started once');

#
# Wakeups, not polling: with a poll interval of an hour the worker still
# fires each timer, woken by the commit that adds it.
#
my $offset = -s $node->logfile;
sql("ALTER SYSTEM SET wfe.poll_interval_ms = '1h'");
sql('SELECT pg_reload_conf()');
$node->wait_for_log(qr/wfe worker reloaded its configuration/, $offset);
my $wakeups = sql('SELECT wakeups FROM wfe.worker_status()');

my $r7 = submit('tap-retry');
($run, $stage, $a1, $f1) = claim('tap-retry');
is(sql("SELECT wfe.fail_task($r7, 'step', $a1, $f1, '{}', true)"), 'accepted',
	'long poll: a retry is scheduled');
ok( $node->poll_query_until(
		'postgres',
		"SELECT state = 'queued' AND attempt = 2 FROM wfe.run_stages WHERE run_id = $r7 AND stage = 'step'"),
	'long poll: the retry fires anyway');
ok(sql("SELECT wakeups > $wakeups FROM wfe.worker_status()") eq 't',
	'long poll: the scheduling commit woke the worker');

my $r8 = submit('tap-qd');
ok( $node->poll_query_until(
		'postgres',
		"SELECT count(*) = 1 FROM wfe.events WHERE run_id = $r8 AND type = 'stage.timed_out' AND attempt = 1"),
	'long poll: a queue deadline fires anyway');

my $r9 = submit('tap-exec');
($run, $stage, $a1, $f1) = claim('tap-exec', 300);
is($run, $r9, 'long poll: a task claimed with a 300 ms lease');
ok( $node->poll_query_until(
		'postgres',
		"SELECT count(*) = 1 FROM wfe.events WHERE run_id = $r9 AND type = 'stage.timed_out' AND attempt = 1"),
	'long poll: its execution deadline fires anyway');

my $r10 = submit('tap-rd', '{"run_deadline_ms": 300}');
ok($node->poll_query_until('postgres', "SELECT state = 'failed' FROM wfe.runs WHERE run_id = $r10"),
	'long poll: a run deadline fires anyway');

my $r11 = sql("SELECT run_id FROM wfe.submit('tap-nb', '{}', NULL, "
	  . "jsonb_build_object('not_before', now() + interval '300 ms'))");
ok( $node->poll_query_until(
		'postgres',
		"SELECT state = 'queued' FROM wfe.run_stages WHERE run_id = $r11 AND stage = 'later'"),
	'long poll: a delayed start fires anyway');

$node->stop;
done_testing();
