# Fairness between tenants on a broker queue (issue 24, "flow control";
# operations.md "Fairness between tenants"): the broker tasks a queue's
# max_in_flight holds back are released, when room frees, to the tenants
# with held tasks in proportion to their weights, not in submit order --
# through a real RabbitMQ.  Tasks are ended by SQL (accept_task,
# complete_task) in one session, as a broker worker's connection would: each
# end frees one slot, and the release it runs dispatches one held task.
#
# 1. Fair queue, max_in_flight 2: tenant big submits 20 runs (2 dispatched,
#    18 held), then tenant small (weight 2) submits 6 (held).  As tasks
#    end, the released ones go big, small, small, big, small, small, ...:
#    small's 6 are all dispatched within the first 9 releases, in its own
#    submit order, never two at once over the queue's limit; all 26 runs
#    complete and nothing is left held.
# 2. The same with fairness off: the 18 held of big go first, then small's
#    6 (priority, then submit order, as before).
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use WfeRabbit;

my $rabbit = WfeRabbit->new('brokerfair');
$rabbit->start;
my $node = WfeRabbit::wfe_node('wfe_brokerfair', $rabbit);

sub sql { return $node->safe_psql('postgres', $_[0]); }

WfeRabbit::linear_workflow($node, 'tfb', 'tfbq', 'a');
WfeRabbit::wait_connected($node, 'start');

# every dispatch message, in the order written, with its tenant and the
# queue's tasks in flight just after it (the count admission.c keeps)
sql(q{
CREATE TABLE public.dispatch_log (id bigserial, run_id bigint, tenant text, in_flight int);
CREATE FUNCTION public.log_dispatch() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.kind = 'dispatch' THEN
        INSERT INTO public.dispatch_log (run_id, tenant, in_flight)
        SELECT NEW.run_id, r.tenant,
               (SELECT count(*) FROM wfe.run_stages AS s
                 WHERE s.queue = 'tfbq'
                   AND (s.state IN ('dispatched', 'running')
                        OR (s.state = 'queued'
                            AND EXISTS (SELECT 1 FROM wfe.outbox AS o
                                         WHERE o.run_id = s.run_id AND o.stage = s.stage
                                           AND o.attempt = s.attempt AND o.fence = s.fence
                                           AND o.kind = 'dispatch' AND o.state <> 'published'))))
          FROM wfe.runs AS r WHERE r.run_id = NEW.run_id;
    END IF;
    RETURN NULL;
END
$$;
CREATE TRIGGER log_dispatch AFTER INSERT ON wfe.outbox
    FOR EACH ROW EXECUTE FUNCTION public.log_dispatch();
SELECT wfe.configure_tenant('small', weight => 2);
});

# One session ends the tasks: a broker worker's connection (its releases'
# passes live in its backend, as a claimer's do).
my $session = $node->background_psql('postgres');
$session->set_query_timer_restart();    # a timeout per query, not for the whole session

# submit N runs of TENANT; their run ids
sub submit
{
	my ($tenant, $n) = @_;
	return split /\n/, sql(qq{SELECT s.run_id FROM generate_series(1, $n) AS g,
	                             LATERAL wfe.submit('tfb', jsonb_build_object('n', g, 'data', '{}'::jsonb), NULL,
	                                                '{"tenant": "$tenant"}') AS s
	                            ORDER BY s.run_id});
}

# the queue's held tasks: queued, no dispatch message
sub held
{
	return sql(q{SELECT count(*) FROM wfe.run_stages AS s WHERE s.queue = 'tfbq' AND s.state = 'queued'
	               AND NOT EXISTS (SELECT 1 FROM wfe.outbox AS o WHERE o.run_id = s.run_id)});
}

# wait until N runs have started (the worker starts submitted runs)
sub started
{
	return $node->poll_query_until('postgres',
		"SELECT count(*) = $_[0] FROM wfe.run_stages WHERE queue = 'tfbq' AND state <> 'waiting'");
}

# End the tasks of the queue one at a time, each once RabbitMQ has it, until
# TOTAL runs completed; false if one was not dispatched in time.
sub end_all
{
	my ($total) = @_;
	while (sql(q{SELECT count(*) FROM wfe.runs WHERE state = 'completed'}) < $total)
	{
		return 0
		  unless $node->poll_query_until('postgres',
			q{SELECT count(*) > 0 FROM wfe.run_stages WHERE queue = 'tfbq' AND state = 'dispatched'});
		$session->query_safe(q{
SELECT wfe.accept_task(s.run_id, s.stage, s.attempt, s.fence, 'w'),
       wfe.complete_task(s.run_id, s.stage, s.attempt, s.fence, '{}')
  FROM (SELECT * FROM wfe.run_stages WHERE queue = 'tfbq' AND state = 'dispatched'
         ORDER BY run_id LIMIT 1) AS s});
	}
	return 1;
}

# the tenants of the dispatches after the first SKIP since id FROM, as letters
sub order_after
{
	my ($from, $skip) = @_;
	return sql(qq{SELECT string_agg(left(tenant, 1), '' ORDER BY id)
	                FROM (SELECT * FROM public.dispatch_log WHERE id > $from ORDER BY id OFFSET $skip) AS d});
}

#
# 1. Fair: small's few are not held behind big's backlog.
#
sql(q{SELECT wfe.configure_queue('tfbq', 'broker', 2, fairness => 'tenant')});
my @big = submit('big', 20);
my @small = submit('small', 6);
ok(started(26), 'the 26 runs start');
is(sql(q{SELECT string_agg(left(tenant, 1), '' ORDER BY id) FROM public.dispatch_log}), 'bb',
	'max_in_flight 2: two of big dispatched as they start');
is(held(), '24', "big's 18 and small's 6 are held");
ok(end_all(26), 'every held task is dispatched as tasks end');
# (both start at the same pass: on equal passes the tenant whose next task
# is newer goes first, small -- src/core/flow/fairness.c)
is(order_after(0, 2), 's' . ('bss' x 2) . 'bs' . ('b' x 15),
	'released by weight (small 2, big 1): small, big, small, small, ..., then big alone');
is( sql(q{SELECT string_agg(run_id::text, ' ' ORDER BY id) FROM public.dispatch_log WHERE tenant = 'small'}),
	join(' ', @small), "small's in its own submit order");
is(sql(q{SELECT max(in_flight) FROM public.dispatch_log}), '2', 'never more than max_in_flight in flight');
is(sql(q{SELECT count(*) FROM public.dispatch_log}), '26', 'each task dispatched once');
is(sql(q{SELECT count(*) FROM wfe.runs WHERE state <> 'completed'}), '0', 'all 26 runs complete');
WfeRabbit::wait_published($node, 'fair');

#
# 2. Fairness off: in submit order, as before.
#
sql(q{SELECT wfe.configure_queue('tfbq', 'broker', 2, fairness => 'none')});
my $mark = sql(q{SELECT max(id) FROM public.dispatch_log});
submit('big', 20);
submit('small', 6);
ok(started(52), 'the 26 runs start');
is(held(), '24', "big's 18 and small's 6 are held");
ok(end_all(52), 'fairness off: every held task is dispatched as tasks end');
is(order_after($mark, 2), ('b' x 18) . ('s' x 6), "fairness off: big's 18 held first, then small's 6");
is(sql(q{SELECT max(in_flight) FROM public.dispatch_log}), '2', 'never more than max_in_flight in flight');
is(sql(q{SELECT count(*) FROM public.dispatch_log}), '52', 'each task dispatched once');
WfeRabbit::wait_published($node, 'in order');

$session->quit;
$node->stop;
$rabbit->stop;
done_testing();
