# Broker dispatches take rate-limit tokens and respect circuits, as poll
# claims do (issue 24, item 2; operations.md "Flow control"), through a real
# RabbitMQ.  Tasks are ended by SQL (accept_task, complete_task, fail_task),
# as a broker worker would.
#
# 1. A rate of 4/s, burst 1, on a broker queue; 9 runs submitted at once:
#    one dispatched at submit, the other eight held (queued, held_until its
#    token's due, no dispatch message) and in dashboard_stuck as rate
#    limited; the worker's timer dispatches them, never faster than the
#    rate (each dispatch message's insert time logged); RabbitMQ gets all 9.
#    A changed rate dispatches the held ones through it at once.
# 2. A circuit on another broker queue (ratio 0.5, min_calls 2, open 6 s):
#    two dispatched attempts fail, it opens; 4 runs submitted then get no
#    dispatch message and show in dashboard_stuck as circuit open; its half
#    opening dispatches exactly one, the probe; the probe completes, the
#    circuit closes and the other 3 are dispatched.  Only the probe's own
#    end decides: with those 3 out, the circuit half open and a new run
#    dispatched as the probe, the 3 end (a success, two failures) and the
#    circuit stays half open; the probe's success closes it.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);
use WfeRabbit;

my $rabbit = WfeRabbit->new('brokerrate');
$rabbit->start;
my $node = WfeRabbit::wfe_node('wfe_brokerrate', $rabbit);

sub sql { return $node->safe_psql('postgres', $_[0]); }

WfeRabbit::linear_workflow($node, 'trl', 'trlq', [ 'a', 'rate_limit: api' ]);
WfeRabbit::linear_workflow($node, 'tcb', 'tcbq', 'a');
WfeRabbit::wait_connected($node, 'start');

# every dispatch message, with the time it was written
sql(q{
CREATE TABLE public.dispatch_log (run_id bigint, queue text, at timestamptz DEFAULT clock_timestamp());
CREATE FUNCTION public.log_dispatch() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.kind = 'dispatch' THEN
        INSERT INTO public.dispatch_log (run_id, queue)
        SELECT NEW.run_id, st.queue FROM wfe.run_stages AS st
         WHERE st.run_id = NEW.run_id AND st.stage = NEW.stage;
    END IF;
    RETURN NULL;
END
$$;
CREATE TRIGGER log_dispatch AFTER INSERT ON wfe.outbox
    FOR EACH ROW EXECUTE FUNCTION public.log_dispatch();
});

#
# 1. A rate limit on a broker queue.
#
my $rate = 4;
sql("SELECT wfe.configure_rate_limit('api', $rate, 1)");
# (seen inside the submitting transaction: the tokens refill while a slow machine runs the checks)
my @at_submit = split /\n/, sql(q{
BEGIN;
SELECT count(*) FROM (SELECT wfe.submit('trl', jsonb_build_object('n', g, 'data', '{}'::jsonb))
                        FROM generate_series(1, 9) AS g) AS x;
SELECT count(*) FROM public.dispatch_log WHERE queue = 'trlq';
SELECT count(*) FROM wfe.run_stages AS s
 WHERE s.queue = 'trlq' AND s.state = 'queued' AND s.held_until > now() AND s.held_until < 'infinity'
   AND NOT EXISTS (SELECT 1 FROM wfe.outbox AS o WHERE o.run_id = s.run_id);
SELECT count(*) FROM wfe.dashboard_stuck WHERE problem = 'rate limited' AND detail LIKE 'api token due in%';
COMMIT;});
is($at_submit[1], '1', 'burst 1: one dispatched at submit');
is($at_submit[2], '8', 'the other eight are held until their token is due, with no dispatch message');
is($at_submit[3], '8', 'dashboard_stuck lists them: rate limited');
ok($node->poll_query_until('postgres', q{SELECT count(*) = 9 FROM public.dispatch_log WHERE queue = 'trlq'}),
	"the worker's timer dispatches all nine");
# the k-th dispatch (0-based) cannot come before (k - burst) / rate seconds after the first
my $early = sql(qq{
SELECT count(*) FROM (SELECT at, row_number() OVER (ORDER BY at) - 1 AS k FROM public.dispatch_log
                       WHERE queue = 'trlq') AS d,
                     (SELECT min(at) AS t0 FROM public.dispatch_log WHERE queue = 'trlq') AS f
 WHERE extract(epoch FROM d.at - f.t0) < (d.k - 1)::float8 / $rate - 0.05});
is($early, '0', "no dispatch came faster than $rate/s (burst 1)");
my $span = sql(q{SELECT extract(epoch FROM max(at) - min(at)) FROM public.dispatch_log WHERE queue = 'trlq'});
cmp_ok($span, '>=', 7.0 / $rate - 0.05, "the nine took at least 8 tokens' time after the first ($span s)");
cmp_ok($span, '<', 8.0 / $rate + 3, 'and not much more: released by the timer, not a slow poll');
is(sql(q{SELECT count(*) FROM wfe.run_stages WHERE queue = 'trlq' AND held_until IS NOT NULL}), '0',
	'nothing is left held');
WfeRabbit::wait_published($node, 'rate');
is($rabbit->queue_messages('wfe.trlq.small'), 9, 'RabbitMQ holds the nine');

# A changed rate tries its held broker tasks again at once (not at their old due)
sql(q{SELECT wfe.configure_rate_limit('api', 0.02, 1)});
sql(q{SELECT wfe.submit('trl', jsonb_build_object('n', g, 'data', '{}'::jsonb)) FROM generate_series(1, 3) AS g});
cmp_ok(sql(q{SELECT count(*) FROM wfe.run_stages WHERE queue = 'trlq' AND held_until > now() + interval '20 seconds'}),
	'>=', 2, 'at 0.02/s, two or more are held for tens of seconds');
sql(q{SELECT wfe.configure_rate_limit('api', 100, 10)});
ok( $node->poll_query_until('postgres',
		q{SELECT count(*) = 12 AND (SELECT count(*) FROM wfe.run_stages WHERE held_until IS NOT NULL) = 0
		    FROM public.dispatch_log WHERE queue = 'trlq'}),
	'configure_rate_limit: the worker dispatches them now, through the new rate');

#
# 2. A circuit on a broker queue.
#
sql(q{SELECT wfe.configure_circuit('tcbq', 0.5, 2, 60000, 6000)});

# accept and end every dispatched attempt of tcbq with OUTCOME; how many
sub end_dispatched
{
	my ($outcome) = @_;
	my $end = $outcome eq 'fail'
	  ? q{wfe.fail_task(t.run_id, t.stage, t.attempt, t.fence, '{"error": "down"}', false)}
	  : q{wfe.complete_task(t.run_id, t.stage, t.attempt, t.fence, '{}')};
	sql(q{SELECT wfe.accept_task(st.run_id, st.stage, st.attempt, st.fence, 'w')
            FROM wfe.run_stages AS st WHERE st.queue = 'tcbq' AND st.state = 'dispatched'});
	return sql(qq{SELECT count(*) FROM (SELECT $end FROM wfe.run_stages AS t
                                          WHERE t.queue = 'tcbq' AND t.state = 'running') AS x});
}

sql(q{SELECT wfe.submit('tcb', jsonb_build_object('n', g, 'data', '{}'::jsonb)) FROM generate_series(1, 2) AS g});
is(sql(q{SELECT count(*) FROM public.dispatch_log WHERE queue = 'tcbq'}), '2', 'closed: two dispatched');
WfeRabbit::wait_published($node, 'circuit');
is(end_dispatched('fail'), '2', 'both fail');
is(sql(q{SELECT state FROM wfe.circuits WHERE queue = 'tcbq'}), 'open', 'the circuit opens');
sql(q{SELECT wfe.submit('tcb', jsonb_build_object('n', g, 'data', '{}'::jsonb)) FROM generate_series(1, 4) AS g});
is(sql(q{SELECT count(*) FROM public.dispatch_log WHERE queue = 'tcbq'}), '2',
	'open: the four submitted now are not dispatched');
is( sql(q{SELECT count(*) FROM wfe.run_stages AS s WHERE s.queue = 'tcbq' AND s.state = 'queued'
             AND NOT EXISTS (SELECT 1 FROM wfe.outbox AS o WHERE o.run_id = s.run_id)}),
	'4', 'they stay queued, with no dispatch message');
is(sql(q{SELECT count(*) FROM wfe.dashboard_stuck WHERE problem = 'circuit open'}), '4',
	'dashboard_stuck lists them: circuit open');
ok($node->poll_query_until('postgres', q{SELECT state = 'half_open' FROM wfe.circuits WHERE queue = 'tcbq'}),
	"the worker's timer half opens it");
ok($node->poll_query_until('postgres', q{SELECT count(*) = 3 FROM public.dispatch_log WHERE queue = 'tcbq'}),
	'the half opening dispatches one, the probe');
usleep(1_500_000);    # (the worker runs rounds every 200 ms)
is(sql(q{SELECT count(*) FROM public.dispatch_log WHERE queue = 'tcbq'}), '3', 'and only one');
is(sql(q{SELECT count(*) FROM wfe.dashboard_stuck WHERE problem = 'circuit open'}), '3',
	'the other three: circuit open, behind the probe');
WfeRabbit::wait_published($node, 'probe');
is(end_dispatched('complete'), '1', 'the probe completes');
is(sql(q{SELECT state FROM wfe.circuits WHERE queue = 'tcbq'}), 'closed', 'the circuit closes');
ok($node->poll_query_until('postgres', q{SELECT count(*) = 6 FROM public.dispatch_log WHERE queue = 'tcbq'}),
	'closed: the other three are dispatched');
is(sql(q{SELECT count(*) FROM wfe.dashboard_stuck WHERE problem IN ('circuit open', 'rate limited')}), '0',
	'dashboard_stuck has nothing held left');
WfeRabbit::wait_published($node, 'closed');

# Only the probe's own end decides: the three just dispatched are out when
# the circuit half opens (by hand: the cool-down is tested above); the run
# submitted then is dispatched as the probe.
sub circuit { return sql(q{SELECT state || ' ' || probe_out FROM wfe.circuits WHERE queue = 'tcbq'}); }

# accept run RUN's dispatched attempt and end it with OUTCOME (complete | fail)
sub end_run
{
	my ($run, $outcome) = @_;
	my $end = $outcome eq 'fail'
	  ? q{wfe.fail_task(t.run_id, t.stage, t.attempt, t.fence, '{"error": "down"}', false)}
	  : q{wfe.complete_task(t.run_id, t.stage, t.attempt, t.fence, '{}')};
	sql(qq{SELECT wfe.accept_task(st.run_id, st.stage, st.attempt, st.fence, 'w')
             FROM wfe.run_stages AS st WHERE st.run_id = $run AND st.state = 'dispatched'});
	return sql(qq{SELECT $end FROM wfe.run_stages AS t WHERE t.run_id = $run AND t.state = 'running'});
}
my @old = split /\n/, sql(q{SELECT run_id FROM wfe.run_stages WHERE queue = 'tcbq' AND state = 'dispatched' ORDER BY 1});
is(scalar @old, 3, 'three attempts are out');
sql(q{UPDATE wfe.circuits SET state = 'half_open', since = now() WHERE queue = 'tcbq'});
my $probe = sql(q{SELECT run_id FROM wfe.submit('tcb', jsonb_build_object('n', 9, 'data', '{}'::jsonb))});
is(sql("SELECT count(*) FROM public.dispatch_log WHERE run_id = $probe"), '1', 'half open: it is dispatched, the probe');
is(sql(q{SELECT probe_run_id FROM wfe.circuits WHERE queue = 'tcbq'}), $probe, "the circuit keeps the probe's task");
is(end_run($old[0], 'complete'), 'accepted', 'an attempt dispatched before the half opening completes');
is(circuit(), 'half_open true', '... and does not close it: it is not the probe');
end_run($_, 'fail') for @old[1, 2];
is(circuit(), 'half_open true', 'two fail (min_calls 2, ratio 0.5): it does not open again');
is(end_run($probe, 'complete'), 'accepted', 'the probe completes');
is(circuit(), 'closed false', "the probe's own success closes it");
WfeRabbit::wait_published($node, 'probe identity');

$node->stop;
$rabbit->stop;
done_testing();
