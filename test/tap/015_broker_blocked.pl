# RabbitMQ blocks its publishers (a resource alarm: memory or disk, the
# broker stops reading from publishing connections) while an outbox backlog
# waits.  delivery.md: the one background worker also fires timers and runs
# in-database actions, "SIGTERM stops it cleanly", and "nothing is lost"
# when the broker is unavailable.
#
# Checked: while publishing is blocked, the worker keeps running rounds and
# SIGTERM stops it; once the alarm clears, every dispatch of the backlog
# arrives (counted by message_id; duplicates of unconfirmed messages are
# allowed and reported).
#
# librabbitmq's socket writes have no deadline, so the publisher must never
# write into a blocked connection: it advertises connection.blocked and
# stops publishing while blocked, and a confirm window always fits in the
# socket's send buffer.
#
# Takes about 80 seconds.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);
use WfeRabbit;

my $rabbit = WfeRabbit->new('blocked');
$rabbit->start;
my $node = WfeRabbit::wfe_node('wfe_blocked', $rabbit, "log_statement = none\n");

sub sql { return $node->safe_psql('postgres', $_[0]); }

# Poll a query for at most `seconds` (shorter than poll_query_until's
# default, for what must happen promptly); true if it returned 't'.
sub within
{
	my ($seconds, $query) = @_;
	my $deadline = time + $seconds;
	while (time < $deadline)
	{
		return 1 if sql($query) eq 't';
		usleep(200_000);
	}
	return 0;
}

WfeRabbit::linear_workflow($node, 'tap-blk', 'tapq', 'a');
WfeRabbit::wait_connected($node, 'start');
my $deadline = time + $PostgreSQL::Test::Utils::timeout_default;
usleep(200_000) while !defined $rabbit->queue_messages('wfe.tapq.small') && time < $deadline;

# The alarm: RabbitMQ blocks every publishing connection.
$rabbit->ctl('set_vm_memory_high_watermark', '0');
# a backlog of 2000 dispatches of about 4 kB
sql(q{SELECT wfe.submit('tap-blk', jsonb_build_object('n', i, 'data', repeat('z', 4000) || i))
        FROM generate_series(1, 2000) AS i});
# long enough for a blocked publisher to fill the socket buffers (it
# resends unconfirmed batches after each confirm timeout; about 15 s here)
sleep 30;
my $stuck = sql(q{SELECT count(*) FROM wfe.outbox WHERE state <> 'published'});
cmp_ok($stuck, '>', 0, "while RabbitMQ blocks publishing the rows wait ($stuck not published)");

my $pid = sql(q{SELECT pid FROM pg_stat_activity WHERE backend_type = 'wfe worker'});
my $rounds = sql('SELECT rounds FROM wfe.worker_status()');
ok(within(10, "SELECT rounds > $rounds FROM wfe.worker_status()"),
	'the background worker keeps running rounds while RabbitMQ blocks publishing');
sql("SELECT pg_terminate_backend($pid)");
ok(within(10, "SELECT count(*) = 0 FROM pg_stat_activity WHERE backend_type = 'wfe worker'"),
	'SIGTERM stops the worker while RabbitMQ blocks publishing');

# The alarm clears; the terminated worker is gone, and a new server start
# brings one back, which publishes the backlog.
$rabbit->ctl('set_vm_memory_high_watermark', '0.4');
ok($node->poll_query_until('postgres',
		"SELECT count(*) = 0 FROM pg_stat_activity WHERE backend_type = 'wfe worker'"),
	'the terminated worker is gone once RabbitMQ reads again');
$node->restart;
WfeRabbit::wait_connected($node, 'after the alarm');
WfeRabbit::wait_published($node, 'after the alarm');

my @expected = split /\n/, sql(q{SELECT message_id FROM wfe.outbox WHERE kind = 'dispatch' ORDER BY id});
my ($total, $distinct, $seen) = $rabbit->count_ids('wfe.tapq.small', 3);
my @lost = grep { !$seen->{$_} } @expected;
note sprintf('%d outbox rows; %d messages received, %d distinct, %d duplicates',
	scalar @expected, $total, $distinct, $total - $distinct);
is(scalar @expected, 2000, 'the outbox has the 2000 dispatches');
is(scalar @lost, 0, 'lost = 0: every outbox message_id arrived');
is($distinct, scalar @expected, 'and nothing else');

$node->stop;
$rabbit->stop;
done_testing();
