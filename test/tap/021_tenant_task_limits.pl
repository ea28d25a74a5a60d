# A tenant's max_tasks_in_flight with real workers (operations.md
# "Backpressure"): wfe-worker processes serve two poll queues, then two
# broker queues through a real RabbitMQ, each with room for more tasks than
# the tenant may run; the tenant never has more than its 2 tasks in flight,
# and every task completes.
#
# In flight is counted by triggers on wfe.run_stages and wfe.outbox, in the
# transaction of every change, as the docs define it (dispatched or running,
# or queued with a dispatch message of its current fence still to publish);
# admissions of a limited tenant take turns, so each sees the others'
# committed work and the largest count logged is the largest there was.
#
# 1. Poll: 5 tasks of tenant acme across queues tpa and tpb, 3 of an
#    unlimited tenant beside them; two workers of concurrency 3 that claim
#    only when notified (their poll interval is a minute): each task's end
#    wakes them for the tenant's next one.
# 2. Broker: 5 tasks of tenant bee across queues tba and tbb; 2 dispatched
#    at submit, 3 held (queued, no message), released highest priority
#    first as tasks end.
# 3. configure_tenant raising or lifting the limit, and configure_queue
#    raising a queue's, release held tasks at once; a queue's max_in_flight
#    holds beside the tenant's.
use strict;
use warnings;

use Time::HiRes qw(time);
use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use WfeRabbit;
use WfeNode;

my $worker_bin = WfeRabbit::top_dir() . '/build/wfe-worker';
plan skip_all => "$worker_bin is not built" unless -x $worker_bin;

my $rabbit = WfeRabbit->new('tenantlim');
$rabbit->start;
my $node = WfeRabbit::wfe_node('wfe_tenantlim', $rabbit);

sub sql { return $node->safe_psql('postgres', $_[0]); }
sub wait_for
{
	my ($query, $what) = @_;
	return ok($node->poll_query_until('postgres', $query), $what);
}

# the log of a tenant's tasks in flight, written at every change
sql(q{
CREATE TABLE public.in_flight_log (tenant text, n int, at timestamptz DEFAULT clock_timestamp());
CREATE FUNCTION public.log_in_flight() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO public.in_flight_log (tenant, n)
    SELECT NEW.tenant, count(*) FROM wfe.run_stages AS s
     WHERE s.tenant = NEW.tenant AND s.queue IS NOT NULL
       AND (s.state IN ('dispatched', 'running')
            OR (s.state = 'queued'
                AND EXISTS (SELECT 1 FROM wfe.outbox AS o
                             WHERE o.run_id = s.run_id AND o.stage = s.stage AND o.attempt = s.attempt
                               AND o.fence = s.fence AND o.kind = 'dispatch' AND o.state <> 'published')));
    RETURN NULL;
END
$$;
CREATE TRIGGER log_in_flight AFTER INSERT OR UPDATE ON wfe.run_stages
    FOR EACH ROW EXECUTE FUNCTION public.log_in_flight();
CREATE TRIGGER log_in_flight AFTER INSERT ON wfe.outbox
    FOR EACH ROW EXECUTE FUNCTION public.log_in_flight();
});

# A poll workflow of one worker stage on QUEUE.
sub poll_workflow
{
	my ($queue) = @_;
	sql(qq{SELECT wfe.register_worker('tap.$queue\@1', '$queue');});
	WfeNode::workflow($node, <<"YAML");
name: $queue
version: "1.0.0"
entry: a
stages:
  - name: a
    type: worker
    queue: $queue
    worker: tap.$queue\@1
    on_success: completed
    on_failure: failed
YAML
	return;
}

# Submit a run of WORKFLOW for TENANT at PRIORITY; its id.
sub submit
{
	my ($workflow, $tenant, $priority) = @_;
	return sql(qq{SELECT run_id FROM wfe.submit('$workflow', '{"n": 1, "data": "x"}', NULL,
	                     '{"tenant": "$tenant", "priority": $priority}')});
}

# Start a wfe-worker on QUEUE with room for 3 tasks at once; each task takes 0.4 s.
my @workers;
sub start_worker
{
	my ($queue, @mode) = @_;
	my $log = $PostgreSQL::Test::Utils::tmp_check . "/worker-$queue.log";
	push @workers,
	  IPC::Run::start(
		[
			$worker_bin, '--queue', $queue, '--dsn', $node->connstr('postgres'),
			'--command', q{cat >/dev/null; sleep 0.4; echo '{}'},
			'--concurrency', '3', '--worker-id', "tap-$queue", @mode
		],
		'<', \undef, '>>', $log, '2>&1');
	return;
}

sub stop_workers
{
	$_->signal('TERM') for @workers;
	$_->finish for @workers;
	@workers = ();
	return;
}

sub max_in_flight
{
	my ($tenant) = @_;
	return sql("SELECT coalesce(max(n), 0) FROM public.in_flight_log WHERE tenant = '$tenant'");
}

#
# 1. Poll.
#
poll_workflow($_) for qw(tpa tpb);
sql(q{SELECT wfe.configure_tenant('acme', max_tasks_in_flight => 2)});
my @acme = map { submit($_, 'acme', 0) } qw(tpa tpb tpa tpb tpa);
my @free = map { submit('tpa', 'free', 0) } 1 .. 3;
my $t0 = time;
start_worker($_, '--poll-interval-ms', '60000') for qw(tpa tpb);
wait_for("SELECT count(*) = 8 FROM wfe.runs WHERE state = 'completed'", 'poll: all 8 runs complete');
my $took = sprintf("%.1f", time - $t0);
cmp_ok($took, '<', 30, "poll: in ${took}s: each end woke the workers (they poll once a minute)");
is(max_in_flight('acme'), 2, 'poll: acme never had more than 2 tasks in flight (and had 2)');
is(sql(q{SELECT count(DISTINCT queue) FROM wfe.run_stages WHERE tenant = 'acme' AND state = 'completed'}), 2,
	'poll: across both queues');
cmp_ok(max_in_flight('free'), '>=', 1, 'poll: the unlimited tenant ran beside it');
stop_workers();

#
# 2. Broker.
#
WfeRabbit::linear_workflow($node, $_, $_, 'a') for qw(tba tbb);
WfeRabbit::wait_connected($node, 'broker');
sql(q{SELECT wfe.configure_tenant('bee', max_tasks_in_flight => 2)});
my @bee = map { submit($_->[0], 'bee', $_->[1]) } ([ 'tba', 1 ], [ 'tbb', 2 ], [ 'tba', 3 ], [ 'tbb', 4 ], [ 'tba', 5 ]);
is(sql("SELECT string_agg(run_id::text, ' ' ORDER BY id) FROM wfe.outbox WHERE tenant = 'bee' AND kind = 'dispatch'"),
	"$bee[0] $bee[1]", 'broker: the first two are dispatched at submit');
is( sql(q{SELECT count(*) FROM wfe.run_stages AS s WHERE s.tenant = 'bee' AND s.state = 'queued'
             AND NOT EXISTS (SELECT 1 FROM wfe.outbox AS o WHERE o.run_id = s.run_id)}),
	3, 'broker: three are held: queued, no dispatch message');
is( sql(q{SELECT count(*) || ' ' || min(detail) FROM wfe.dashboard_stuck WHERE problem = 'tenant full'}),
	'3 bee at max_tasks_in_flight 2', 'broker: dashboard_stuck lists them, tenant full');
start_worker($_, '--mode', 'broker', '--amqp-uri', $rabbit->uri) for qw(tba tbb);
wait_for("SELECT count(*) = 5 FROM wfe.runs WHERE tenant = 'bee' AND state = 'completed'",
	'broker: all 5 runs complete');
is(max_in_flight('bee'), 2, 'broker: bee never had more than 2 tasks in flight (and had 2)');
is(sql("SELECT string_agg(run_id::text, ' ' ORDER BY id) FROM wfe.outbox WHERE tenant = 'bee' AND kind = 'dispatch'"),
	"$bee[0] $bee[1] $bee[4] $bee[3] $bee[2]", 'broker: the held ones were dispatched highest priority first');
stop_workers();

#
# 3. configure_tenant releases; a queue limit holds beside the tenant's.
#
WfeRabbit::linear_workflow($node, 'tbc', 'tbc', 'a');
sql(q{SELECT wfe.configure_tenant('bee', max_tasks_in_flight => 1)});
my @c = map { submit('tbc', 'bee', $_) } 1 .. 3;
my $dispatched = q{SELECT count(*) FROM wfe.outbox WHERE tenant = 'bee' AND kind = 'dispatch' AND stage = 'a'
                      AND run_id IN (SELECT run_id FROM wfe.runs WHERE workflow = 'tbc')};
is(sql($dispatched), 1, 'raise: limit 1: one of three dispatched');
sql(q{SELECT wfe.configure_queue('tbc', 'broker', max_in_flight => 2)});
sql(q{SELECT wfe.configure_tenant('bee', max_tasks_in_flight => 5)});
is(sql($dispatched), 2, 'raise: limit 5: one more at once, and no more (the queue holds at its 2)');
sql(q{SELECT wfe.configure_queue('tbc', 'broker', max_in_flight => NULL)});
is(sql($dispatched), 3, 'raise: the queue\'s limit lifted: the last one goes');
sql(q{SELECT wfe.configure_tenant('bee', max_tasks_in_flight => 1)});
submit('tbc', 'bee', 0);
is(sql($dispatched), 3, 'lower: limit 1 under 3 in flight: nothing in flight is touched, a new task is held');
sql(q{SELECT wfe.configure_tenant('bee')});
is(sql($dispatched), 4, 'lift: the held task is dispatched');

$node->stop;
$rabbit->stop;
done_testing();
