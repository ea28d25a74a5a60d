# A crash between confirm and mark (delivery.md "Outbox": "a crash between
# confirm and mark republishes: the message_id is deterministic ..., so
# consumers deduplicate"; "on start it repairs what a crash left half
# done").
#
# The publisher is stopped deterministically after RabbitMQ confirmed a
# batch and before its mark commits: a test trigger on wfe.outbox makes
# the mark's UPDATE wait for an advisory lock this test holds.  (A session
# holding the lease row FOR UPDATE would not do: the publisher renews the
# lease with an UPDATE at the start of every round, so it would wait there,
# before claiming anything.)  Then kill -9 of the background worker: the
# postmaster reinitialises, the new worker puts the rows the dead one left
# claimed back to pending and publishes them again.  The queue then holds
# every message twice under the same message_id, the rows end published
# (two attempts), and the new publisher holds the lease with a new token.
#
# Then a mark that fails with an error instead (no crash), for a batch
# RabbitMQ nacked: the rows must not stay claimed by the living publisher
# for ever: the same publisher claims them again in its next round.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);
use WfeRabbit;

my $rabbit = WfeRabbit->new('crash');
$rabbit->start;
my $node = WfeRabbit::wfe_node('wfe_crash', $rabbit,
	# PostgreSQL::Test::Cluster turns this off; the crash must reinitialise
	"restart_after_crash = on\nlog_statement = none\n");

sub sql { return $node->safe_psql('postgres', $_[0]); }

WfeRabbit::linear_workflow($node, 'tap-crash', 'tapq', 'a');
WfeRabbit::wait_connected($node, 'start');
my $deadline = time + $PostgreSQL::Test::Utils::timeout_default;
usleep(200_000) while !defined $rabbit->queue_messages('wfe.tapq.small') && time < $deadline;

# The test's brake: marking a row published waits for advisory lock 4242.
sql(q{
CREATE FUNCTION public.tap_hold_mark() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF OLD.state = 'claimed' AND NEW.state = 'published' THEN
        PERFORM pg_advisory_xact_lock(4242);
    END IF;
    RETURN NEW;
END
$$;
CREATE TRIGGER tap_hold_mark BEFORE UPDATE ON wfe.outbox
    FOR EACH ROW EXECUTE FUNCTION public.tap_hold_mark();});
my $brake = $node->background_psql('postgres');
$brake->query_safe('SELECT pg_advisory_lock(4242)');

my ($holder, $token) = split /\|/, sql('SELECT holder, token FROM wfe.publisher_lease');
my $pid = sql(q{SELECT pid FROM pg_stat_activity WHERE backend_type = 'wfe worker'});
is($holder, "wfe worker $pid", 'the background worker holds the publisher lease');

# Five dispatches in one transaction: one claim, one batch.
sql(q{SELECT wfe.submit('tap-crash', jsonb_build_object('n', i, 'data', i)) FROM generate_series(1, 5) AS i});
my @ids = split /\n/, sql(q{SELECT message_id FROM wfe.outbox WHERE kind = 'dispatch' ORDER BY id});
is(scalar @ids, 5, 'five dispatch rows');
ok( $node->poll_query_until(
		'postgres', qq{
SELECT count(*) = 1 FROM pg_locks AS l
 WHERE l.pid = $pid AND l.locktype = 'advisory' AND NOT l.granted}),
	'the publisher is waiting in its mark');
is($rabbit->queue_messages('wfe.tapq.small'), 5, 'RabbitMQ confirmed the five messages: they are in the queue');
is(sql(q{SELECT string_agg(DISTINCT state || ' by ' || claimed_by, ',') FROM wfe.outbox}),
	"claimed by wfe worker $pid", 'the rows are still claimed, not marked published');

# kill -9 of the worker, between confirm and mark.
my $offset = -s $node->logfile;
is(kill('KILL', $pid), 1, 'kill -9 of the background worker');
$node->wait_for_log(qr/all server processes terminated; reinitializing/, $offset);
pass('the postmaster reinitialises');
eval { $brake->quit };    # the crash ended that session too: the brake is off
$node->wait_for_log(qr/wfe worker repaired 5 rows left by a previous run/, $offset);
pass('the new worker puts the five claimed rows back to pending');
WfeRabbit::wait_published($node, 'after the crash');
is(sql(q{SELECT string_agg(DISTINCT state || ' ' || attempts, ',') FROM wfe.outbox}),
	'published 2', 'every row is published, at its second attempt');
is(sql(q{SELECT count(*) FROM wfe.run_stages WHERE stage = 'a' AND state = 'dispatched'}),
	5, 'the five stages are dispatched');

my ($total, $distinct, $seen) = $rabbit->count_ids('wfe.tapq.small', 2);
note "received $total messages, $distinct distinct message_ids";
is($total, 10, 'the queue received ten messages: the batch was published twice');
is($distinct, 5, 'five distinct message_ids');
is_deeply([ map { $seen->{$_} // 0 } @ids ], [ (2) x 5 ],
	'each outbox message_id arrived twice: republished with the same message_id');

my ($holder2, $token2) = split /\|/, sql('SELECT holder, token FROM wfe.publisher_lease');
my $pid2 = sql(q{SELECT pid FROM pg_stat_activity WHERE backend_type = 'wfe worker'});
is($holder2, "wfe worker $pid2", 'the new worker holds the lease');
cmp_ok($token2, '>', $token, "with a new fencing token ($token -> $token2)");


#
# A mark that fails (an error, not a crash) for a nacked batch.
#
sql(q{
CREATE TABLE public.tap_fail_marks (n int);
INSERT INTO public.tap_fail_marks VALUES (1);
CREATE FUNCTION public.tap_fail_mark() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF OLD.state = 'claimed' AND NEW.state <> 'claimed' AND EXISTS (SELECT 1 FROM public.tap_fail_marks) THEN
        RAISE EXCEPTION 'tap: this mark fails';
    END IF;
    RETURN NEW;
END
$$;
CREATE TRIGGER tap_fail_mark BEFORE UPDATE ON wfe.outbox
    FOR EACH ROW EXECUTE FUNCTION public.tap_fail_mark();});
# the queue refuses messages: RabbitMQ nacks them
$rabbit->ctl('set_policy', 'tap-full', '^wfe\.tapq\.small$',
	'{"max-length": 0, "overflow": "reject-publish"}', '--apply-to', 'queues');
$offset = -s $node->logfile;
my $run = sql(q{SELECT run_id FROM wfe.submit('tap-crash', '{"n": 6, "data": 6}')});
my $id = sql("SELECT id FROM wfe.outbox WHERE run_id = $run AND kind = 'dispatch'");
$node->wait_for_log(qr/ERROR:  tap: this mark fails/, $offset);
pass('the mark of the nacked dispatch failed');
# the fault and the refusal go away
sql('DELETE FROM public.tap_fail_marks');
$rabbit->ctl('clear_policy', 'tap-full');
my $worker_pid = sql(q{SELECT pid FROM pg_stat_activity WHERE backend_type = 'wfe worker'});
my $published = 0;
my $until = time + 15;
while (time < $until && !$published)
{
	$published = sql("SELECT state = 'published' FROM wfe.outbox WHERE id = $id") eq 't';
	usleep(200_000) unless $published;
}
ok($published, 'the same publisher publishes the row later (it does not stay claimed)');
note 'row after the failed mark: ' . sql("SELECT state || ' by ' || coalesce(claimed_by, '-') FROM wfe.outbox WHERE id = $id");
is(sql(q{SELECT pid FROM pg_stat_activity WHERE backend_type = 'wfe worker'}), $worker_pid,
	'(the worker did not restart meanwhile)');
# a restart repairs it in any case
$node->restart;
WfeRabbit::wait_published($node, 'after a restart');
my @m = $rabbit->probe_json('consume', 'wfe.tapq.small', 1, 30);
is($m[0]{properties}{correlation_id}, $run, 'the dispatch arrives');

$node->stop;
$rabbit->stop;
done_testing();
