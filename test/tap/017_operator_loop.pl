# The operator loop against a real RabbitMQ (operations.md "Recovery",
# delivery.md "Pre-acceptance retries and wfe.dlq"):
#
# 1. A poison dispatch: a consumer rejects it until it is past
#    wfe.broker_max_redeliveries and dead-letters it into wfe.dlq; the
#    background worker reads it back, records it in wfe.dead_letters
#    (broker.redeliveries, the x-death history), fails the attempt (no retry
#    left: the run fails) and acks it.  wfe.redrive queues a new attempt with
#    a new fence and a new message; the old attempt's late report is stale;
#    the run completes.
# 2. The same with retries left: the dead dispatch is retried by wfe's
#    policy and the run completes with nobody's help (0.1.0 left it running).
# 3. wfe.skip_stage completes a dead-lettered stage by hand; wfe.replay
#    starts the same run again.
# 4. broker -> poll -> broker: the published attempt is dispatched again
#    with a new fence; the old message is stale, the run completes (0.1.0
#    left it queued for good).
# 5. A broker queue's max_in_flight holds what is over it, and releases it
#    by priority when a task ends.
use strict;
use warnings;

use JSON::PP;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use WfeRabbit;

my $rabbit = WfeRabbit->new('oploop');
$rabbit->start;
my $node = WfeRabbit::wfe_node('wfe_oploop', $rabbit, "wfe.broker_max_redeliveries = 1\n");

sub sql { return $node->safe_psql('postgres', $_[0]); }
sub wait_for
{
	my ($query, $what) = @_;
	return ok($node->poll_query_until('postgres', $query), $what);
}

WfeRabbit::linear_workflow($node, 'op-strict', 'opq', [ 'a', 'retry: {max_attempts: 1}' ], 'b');
WfeRabbit::linear_workflow($node, 'op-lenient', 'opl',
	[ 'a', 'retry: {max_attempts: 2, initial_ms: 100, multiplier: 1, max_ms: 100, jitter: none}' ]);
WfeRabbit::wait_connected($node, 'start');

# Take one dispatch of a queue and report it as a worker would (accept,
# complete): the envelope's attempt and fence.  Returns the two outcomes.
sub work_one
{
	my ($queue) = @_;
	my ($m) = $rabbit->probe_json('consume', "wfe.$queue.small", 1, 60);
	return ('no message', '') unless $m;
	my $e = $m->{body};
	my $acc = sql("SELECT wfe.accept_task($e->{run_id}, '$e->{stage}', $e->{attempt}, $e->{fence}, 'tap')");
	my $done = sql("SELECT wfe.complete_task($e->{run_id}, '$e->{stage}', $e->{attempt}, $e->{fence}, '{}')");
	return ($acc, $done, $e);
}

# A consumer that cannot process the next dispatch of a queue: rejected
# until x-death is past the limit, then dead-lettered into wfe.dlq.
sub poison
{
	my ($queue) = @_;
	my @d = $rabbit->probe_json('reject-to-dlq', "wfe.$queue.small", 1, 1, 120);
	return $d[-1]{action} // 'nothing';
}

#
# 1. Poison, dead letter, redrive.
#
my $r1 = sql(q{SELECT run_id FROM wfe.submit('op-strict', '{"n": 1, "data": "poison"}')});
is(poison('opq'), 'dead', 'poison: the consumer dead-lettered the dispatch into wfe.dlq');
wait_for("SELECT state = 'failed' FROM wfe.runs WHERE run_id = $r1",
	'poison: the background worker read it back and failed the attempt: the run failed');
is($rabbit->queue_messages('wfe.dlq'), 0, 'poison: wfe.dlq is empty (the worker acked it)');
is( sql(qq{SELECT reason || ' ' || attempt || ' ' || ((error ->> 'fence')::bigint >> 32) || ' '
                  || jsonb_typeof(error -> 'x_death') || ' ' || (resolved_at IS NULL)
             FROM wfe.dead_letters WHERE run_id = $r1}),
	'broker.redeliveries 1 1 array true', 'poison: one open dead letter, broker.redeliveries, with x-death');
like(sql("SELECT error ->> 'message' FROM wfe.run_stages WHERE run_id = $r1 AND stage = 'a'"),
	qr/RabbitMQ dead-lettered the dispatch of attempt 1 after 2 rejected deliveries/,
	'poison: the stage error says what happened');
is(sql("SELECT count(*) FROM wfe.events WHERE run_id = $r1 AND type = 'stage.dead_lettered'"), 1,
	'poison: event stage.dead_lettered');
is(sql(q{SELECT dlq FROM wfe.dashboard_queues WHERE queue = 'opq' AND track = 'small'}), 1,
	'poison: dashboard_queues counts the dead letter');

sql("SELECT wfe.redrive($r1, 'a', 'consumer fixed')");
is(sql("SELECT state || ' ' || coalesce(intent, '-') FROM wfe.runs WHERE run_id = $r1"), 'running -',
	'redrive: the failed run is running again');
is(sql("SELECT resolution FROM wfe.dead_letters WHERE run_id = $r1"), 'redriven',
	'redrive: the dead letter is resolved');
my ($acc, $done, $e) = work_one('opq');
is("$acc $done", 'accepted accepted', 'redrive: the new dispatch is accepted and completed');
is("$e->{attempt} " . ($e->{fence} >> 32), '2 2', 'redrive: ... as attempt 2 with a new fence (generation 2)');
is(sql("SELECT wfe.complete_task($r1, 'a', 1, (SELECT (error ->> 'fence')::bigint FROM wfe.dead_letters WHERE run_id = $r1 LIMIT 1), '{}')"), 'stale',
	'redrive: a late report of the dead attempt is stale');
($acc, $done) = work_one('opq');
is("$acc $done", 'accepted accepted', 'redrive: b is dispatched, accepted, completed');
wait_for("SELECT state = 'completed' FROM wfe.runs WHERE run_id = $r1", 'redrive: the run completes');

#
# 2. Retries left: wfe's retry policy takes over, nobody has to act.
#
my $r2 = sql(q{SELECT run_id FROM wfe.submit('op-lenient', '{"n": 2, "data": "once"}')});
is(poison('opl'), 'dead', 'retry: the first dispatch dies in RabbitMQ');
wait_for(
	"SELECT count(*) = 2 FROM wfe.outbox WHERE run_id = $r2 AND kind = 'dispatch' AND state = 'published'",
	'retry: the dead attempt is retried with a new dispatch');
($acc, $done, $e) = work_one('opl');
is("$acc $done $e->{attempt}", 'accepted accepted 2', 'retry: attempt 2 is accepted and completes');
wait_for("SELECT state = 'completed' FROM wfe.runs WHERE run_id = $r2",
	'retry: the run completes (0.1.0 left it running forever)');
is(sql("SELECT resolution FROM wfe.dead_letters WHERE run_id = $r2"), 'retried',
	'retry: its dead letter is recorded and closed as retried');

#
# 3. skip_stage and replay.
#
my $r3 = sql(q{SELECT run_id FROM wfe.submit('op-strict', '{"n": 3, "data": "poison"}')});
is(poison('opq'), 'dead', 'skip: dead-lettered');
wait_for("SELECT state = 'failed' FROM wfe.runs WHERE run_id = $r3", 'skip: the run failed');
sql("SELECT wfe.skip_stage($r3, 'a', '{}', 'done by hand')");
($acc, $done) = work_one('opq');
is("$acc $done", 'accepted accepted', 'skip: b runs on');
wait_for("SELECT state = 'completed' FROM wfe.runs WHERE run_id = $r3", 'skip: the run completes');
is(sql("SELECT resolution FROM wfe.dead_letters WHERE run_id = $r3"), 'skipped', 'skip: dead letter resolved');

my $r4 = sql("SELECT wfe.replay($r1, 'once more')");
is(sql("SELECT replay_of FROM wfe.runs WHERE run_id = $r4"), $r1, 'replay: the new run names the old');
($acc, $done) = work_one('opq');
is("$acc $done", 'accepted accepted', 'replay: a is dispatched and done');
($acc, $done) = work_one('opq');
is("$acc $done", 'accepted accepted', 'replay: b too');
wait_for("SELECT state = 'completed' FROM wfe.runs WHERE run_id = $r4", 'replay: the replay completes');

#
# 4. broker -> poll -> broker.
#
my $r5 = sql(q{SELECT run_id FROM wfe.submit('op-strict', '{"n": 5, "data": "x"}')});
wait_for("SELECT state = 'dispatched' FROM wfe.run_stages WHERE run_id = $r5 AND stage = 'a'",
	'switch: the dispatch is published');
sql(q{SELECT wfe.configure_queue('opq', 'poll')});
is(sql("SELECT state FROM wfe.run_stages WHERE run_id = $r5 AND stage = 'a'"), 'queued',
	'switch: to poll, the attempt is claimable again');
sql(q{SELECT wfe.configure_queue('opq', 'broker')});
wait_for(
	"SELECT count(*) = 2 FROM wfe.outbox WHERE run_id = $r5 AND kind = 'dispatch' AND state = 'published'",
	'switch: back to broker, a second dispatch is published');
is(sql("SELECT string_agg(attempt || ':' || (fence >> 32), ' ' ORDER BY id) FROM wfe.outbox WHERE run_id = $r5"),
	'1:1 1:2', 'switch: the same attempt with a new fence (generations 1, 2)');
($acc, $done) = work_one('opq');
is("$acc $done", 'stale stale', 'switch: the first message, of the old fence, is stale');
($acc, $done) = work_one('opq');
is("$acc $done", 'accepted accepted', 'switch: the second is accepted and completes');
($acc, $done) = work_one('opq');
is("$acc $done", 'accepted accepted', 'switch: b runs');
wait_for("SELECT state = 'completed' FROM wfe.runs WHERE run_id = $r5",
	'switch: the run completes (0.1.0 left it queued for good)');

#
# 5. A broker queue's max_in_flight: a task over the limit is held (queued,
#    no message) and dispatched when room appears, highest priority first.
#
sql(q{SELECT wfe.configure_queue('opl', 'broker', max_in_flight => 1)});
my $h1 = sql(q{SELECT run_id FROM wfe.submit('op-lenient', '{"n": 6, "data": "x"}')});
my $h2 = sql(q{SELECT run_id FROM wfe.submit('op-lenient', '{"n": 7, "data": "x"}')});
my $h3 = sql(q{SELECT run_id FROM wfe.submit('op-lenient', '{"n": 8, "data": "x"}', NULL, '{"priority": 5}')});
wait_for("SELECT state = 'dispatched' FROM wfe.run_stages WHERE run_id = $h1 AND stage = 'a'",
	'limit: the first task is dispatched');
is(sql("SELECT count(*) FROM wfe.outbox WHERE run_id IN ($h2, $h3) AND kind = 'dispatch'"), 0,
	'limit: the two over the limit have no dispatch message');
is(sql("SELECT string_agg(state, ' ' ORDER BY run_id) FROM wfe.run_stages WHERE run_id IN ($h2, $h3)"),
	'queued queued', 'limit: ... and stay queued');
is(sql(q{SELECT state FROM wfe.dashboard_queues WHERE queue = 'opl' AND track = 'small'}), 'full',
	'limit: dashboard_queues shows the queue full');
($acc, $done, $e) = work_one('opl');
is("$acc $done $e->{run_id}", "accepted accepted $h1", 'limit: the first completes');
($acc, $done, $e) = work_one('opl');
is("$acc $done $e->{run_id}", "accepted accepted $h3", 'limit: room: the higher priority task is dispatched next');
($acc, $done, $e) = work_one('opl');
is("$acc $done $e->{run_id}", "accepted accepted $h2", 'limit: then the other');
wait_for("SELECT count(*) = 3 FROM wfe.runs WHERE run_id IN ($h1, $h2, $h3) AND state = 'completed'",
	'limit: all three complete');

$node->stop;
$rabbit->stop;
done_testing();
