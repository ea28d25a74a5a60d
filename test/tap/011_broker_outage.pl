# RabbitMQ down while runs proceed (delivery.md "Outbox": "the broker down
# for minutes: rows accumulate, nothing is lost, publishing resumes with
# exponential backoff on reconnect"; quality.md "TAP").
#
# Workers keep submitting runs and completing stages (accept_task and
# complete_task) while the RabbitMQ application is stopped for
# WFE_TAP_OUTAGE_S seconds (default 60, "a minute"; at least 30, to span
# several reconnection attempts of the publisher's exponential backoff).
# With the event projection on, both dispatches (wfe.commands, mandatory)
# and events (wfe.events) pile up in the outbox.  After RabbitMQ is back:
# the publisher reconnects, the outbox drains, and a consumer counting by
# message_id receives every dispatch and every event of the outbox: none
# lost, none unknown; duplicates (allowed: consumers deduplicate) are
# reported.  The test takes about OUTAGE + 40 seconds.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);
use WfeRabbit;

my $outage_s = $ENV{WFE_TAP_OUTAGE_S} // 60;
$outage_s = 30 if $outage_s < 30;

my $rabbit = WfeRabbit->new('outage');
$rabbit->start;
my $node = WfeRabbit::wfe_node('wfe_outage', $rabbit, "wfe.publish_events = on\nlog_statement = none\n");

sub sql { return $node->safe_psql('postgres', $_[0]); }

WfeRabbit::linear_workflow($node, 'tap-out', 'tapq', 'a', 'b', 'c');
WfeRabbit::wait_connected($node, 'start');
my $deadline = time + $PostgreSQL::Test::Utils::timeout_default;
usleep(200_000) while !defined $rabbit->queue_messages('wfe.tapq.small') && time < $deadline;
# the telemetry consumer's queue: every event on wfe.events
$rabbit->probe_ok('declare-queue', 'tap.events');
$rabbit->probe_ok('bind', 'tap.events', 'wfe.events', '#');

# One round of work: a new run, and every queued task accepted and
# completed, as a broker consumer would (tapq is a broker queue: its tasks
# start with accept_task; with the broker down the test reads the attempts
# from the database).
my $runs = 0;
sub work_round
{
	$runs++;
	sql("SELECT wfe.submit('tap-out', jsonb_build_object('n', $runs, 'data', $runs))");
	my @done = split /\n/, sql(q{
SELECT wfe.accept_task(s.run_id, s.stage, s.attempt, s.fence, 'tap-w'),
       wfe.complete_task(s.run_id, s.stage, s.attempt, s.fence, '{}')
  FROM wfe.run_stages AS s WHERE s.queue = 'tapq' AND s.state IN ('queued', 'dispatched')});
	die "work round $runs: unexpected answers: @done" if grep { $_ ne 'accepted|accepted' } @done;
	die "work round $runs: nothing to do: " . sql("SELECT string_agg(run_id || stage || state, ' ') FROM wfe.run_stages") unless @done;
}

# Before: work with the broker up.
work_round() for 1 .. 3;
WfeRabbit::wait_published($node, 'before the outage');

# The outage.
my $offset = -s $node->logfile;
$rabbit->stop_app;
my $t0 = time;
while (time - $t0 < $outage_s)
{
	work_round();
	usleep(300_000);
}
note "$runs runs submitted, $outage_s s of outage";
my $stuck = sql(q{SELECT count(*) FROM wfe.outbox WHERE state <> 'published'});
cmp_ok($stuck, '>', 0, "during the outage outbox rows accumulate ($stuck not published)");
is(sql(q{SELECT count(*) FROM wfe.outbox WHERE state = 'claimed'}), 0,
	'none of them is left claimed: unconfirmed rows go back to pending');
ok($node->poll_query_until('postgres', 'SELECT NOT connected FROM wfe.publisher_lease'),
	'wfe.publisher_lease shows the publisher disconnected');
isnt(sql('SELECT last_error FROM wfe.publisher_lease'), '', 'and why, in last_error');
like(slurp_file($node->logfile, $offset), qr/WARNING:  wfe publisher cannot reach RabbitMQ/,
	"the server log has the 'cannot reach RabbitMQ' warning");
is(sql(q{SELECT count(*) FROM wfe.runs WHERE state <> 'completed' AND run_id < } . ($runs - 1)),
	0, 'runs completed while the broker was down');

# After: the broker is back.
$rabbit->start_app;
$t0 = time;
WfeRabbit::wait_connected($node, 'after the outage');
WfeRabbit::wait_published($node, 'after the outage');
note sprintf('reconnected and drained the outbox in %.1f s', time - $t0);
is(sql('SELECT coalesce(last_error, \'-\') FROM wfe.publisher_lease'), '-',
	'the lease has no error any more');
my $log = slurp_file($node->logfile, $offset);
like($log, qr/wfe publisher connected to RabbitMQ again/, 'the server log says it connected again');
my $warnings = () = $log =~ /wfe publisher cannot reach RabbitMQ/g;
note "'cannot reach RabbitMQ' warnings during the outage: $warnings";

# Count what arrived, by message_id, against the outbox.
for my $c ([ 'dispatch', 'wfe.tapq.small' ], [ 'event', 'tap.events' ])
{
	my ($kind, $queue) = @$c;
	my @expected = split /\n/, sql("SELECT message_id FROM wfe.outbox WHERE kind = '$kind' ORDER BY id");
	my ($total, $distinct, $seen, $order) = $rabbit->count_ids($queue, 3);
	my @lost = grep { !$seen->{$_} } @expected;
	my %expected = map { $_ => 1 } @expected;
	my @unknown = grep { !$expected{$_} } keys %$seen;
	note sprintf('%s: %d outbox rows; %d messages received, %d distinct, %d duplicates',
		$kind, scalar @expected, $total, $distinct, $total - $distinct);
	cmp_ok(scalar @expected, '>=', 3 * ($runs - 2), "$kind: the outbox has the messages of all $runs runs")
	  if $kind eq 'dispatch';
	is(scalar @lost, 0, "$kind: lost = 0, every outbox message_id arrived on $queue")
	  or diag "lost: @lost[0 .. ($#lost < 9 ? $#lost : 9)]";
	is(scalar @unknown, 0, "$kind: every message received is an outbox row");
	is($distinct, scalar @expected, "$kind: distinct message_ids received = outbox rows");

	# messages of a run arrive in outbox id order (first arrivals)
	my %first;
	for my $i (reverse 0 .. $#$order)
	{
		$first{ $order->[$i] } = $i;
	}
	my @disordered;
	for my $line (split /\n/, sql(qq{SELECT run_id, string_agg(message_id::text, ' ' ORDER BY id)
	                                  FROM wfe.outbox WHERE kind = '$kind' GROUP BY run_id}))
	{
		my ($run, $ids) = split /\|/, $line;
		my @pos = map { $first{$_} // -1 } split / /, $ids;
		push @disordered, $run if grep { $pos[$_] <= $pos[ $_ - 1 ] } 1 .. $#pos;
	}
	is(scalar @disordered, 0, "$kind: the messages of each run arrived in outbox id order")
	  or diag "runs out of order: @disordered";
}
is($rabbit->queue_messages('wfe.tapq.large'), 0, 'nothing went to the large track');

$node->stop;
$rabbit->stop;
done_testing();
