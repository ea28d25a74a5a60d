# wfe.amqp_queue_type against queues that exist with the other type
# (delivery.md "RabbitMQ clusters and quorum queues": "A queue that already
# exists with another type is reported once in the log with a hint
# (RabbitMQ refuses to redeclare it), never retried in a loop").
#
# The 0.2.0 situation: classic queues (the default type, declared as 0.2.0
# did: no x-queue-type argument).  Then wfe.amqp_queue_type = quorum: the
# publisher reconnects, RabbitMQ refuses each declaration, the log says so
# once per queue with the hint, and publishing goes on into the existing
# classic queues.  A later reconnection (every connection closed by
# RabbitMQ) reports nothing again.  And a wfe queue first configured after
# the change gets quorum queues.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);
use WfeRabbit;

my $rabbit = WfeRabbit->new('qtype');
$rabbit->start;
my $node = WfeRabbit::wfe_node('wfe_qtype', $rabbit, "log_statement = none\n");

sub sql { return $node->safe_psql('postgres', $_[0]); }

# name => "type arguments" of the broker's queues
sub queues
{
	my %q;
	for (split /\n/, $rabbit->ctl('list_queues', '-q', '--no-table-headers', 'name', 'type', 'arguments'))
	{
		my ($name, $type, $args) = split /\t/, $_, 3;
		$q{$name} = "$type " . ($args // '');
	}
	return \%q;
}

# wait until RabbitMQ has the queue
sub wait_queue
{
	my ($name) = @_;
	my $deadline = time + $PostgreSQL::Test::Utils::timeout_default;
	usleep(200_000) while !defined $rabbit->queue_messages($name) && time < $deadline;
}

is(sql('SHOW wfe.amqp_queue_type'), 'classic', 'wfe.amqp_queue_type is classic by default');
WfeRabbit::linear_workflow($node, 'tap-qt', 'tapqt', 'a');
WfeRabbit::wait_connected($node, 'start');
wait_queue('wfe.tapqt.retry.large');
my $q = queues();
like($q->{'wfe.tapqt.small'}, qr/^classic /, 'the queues are classic queues');
unlike($q->{'wfe.tapqt.small'}, qr/x-queue-type|x-delivery-limit/, 'declared as 0.2.0 did: no x-queue-type');

# quorum now: the existing queues are reported once, with the hint
my $offset = -s $node->logfile;
sql(q{ALTER SYSTEM SET wfe.amqp_queue_type = 'quorum'});
sql('SELECT pg_reload_conf()');
$node->wait_for_log(qr/wfe publisher disconnected: wfe.amqp_queue_type changed/, $offset);
$node->wait_for_log(qr/the RabbitMQ queues of "tapqt" exist with another type than wfe.amqp_queue_type = 'quorum'/,
	$offset);
my $log = substr(slurp_file($node->logfile), $offset);
like($log, qr/406 PRECONDITION_FAILED - inequivalent arg 'x-(?:queue-type|overflow|dead-letter-strategy)'.*\n.*HINT:  RabbitMQ cannot change a queue's type/,
	'the WARNING quotes RabbitMQ and hints at the migration');
like($log, qr/the RabbitMQ queues of "wfe.dlq" exist with another type/, 'wfe.dlq is reported too');

# publishing goes on into the classic queues
my $run = sql(q{SELECT run_id FROM wfe.submit('tap-qt', '{"n": 1, "data": 1}')});
my @m = $rabbit->probe_json('consume', 'wfe.tapqt.small', 1, 30);
is($m[0]{properties}{correlation_id}, $run, 'a dispatch still reaches the existing classic queue');
like(queues()->{'wfe.tapqt.small'}, qr/^classic /, 'which RabbitMQ kept classic');

# a new connection: nothing is reported again, and no retry loop
sub connections { my $n = () = slurp_file($node->logfile) =~ /wfe publisher connected to RabbitMQ/g; return $n; }
my $count = connections();
$rabbit->ctl('close_all_connections', 'tap: reconnect');
my $deadline = time + $PostgreSQL::Test::Utils::timeout_default;
usleep(200_000) while connections() <= $count && time < $deadline;
cmp_ok(connections(), '>', $count, 'the publisher connected again');
my $run2 = sql(q{SELECT run_id FROM wfe.submit('tap-qt', '{"n": 2, "data": 2}')});
@m = $rabbit->probe_json('consume', 'wfe.tapqt.small', 1, 30);
is($m[0]{properties}{correlation_id}, $run2, 'and publishes again');
$log = substr(slurp_file($node->logfile), $offset);
my $warnings = () = $log =~ /WARNING:  wfe publisher: the RabbitMQ queues of "tapqt"/g;
is($warnings, 1, 'the type mismatch of "tapqt" was reported once');
my $disconnects = () = $log =~ /wfe publisher disconnected/g;
cmp_ok($disconnects, '<=', 2, "no retry loop: the publisher disconnected $disconnects times (the change, the close)");

# a queue configured now gets quorum queues
WfeRabbit::linear_workflow($node, 'tap-qt2', 'tapqn', 'a');
wait_queue('wfe.tapqn.retry.large');
$q = queues();
like($q->{'wfe.tapqn.small'}, qr/^quorum .*x-delivery-limit/, 'a queue configured after the change is a quorum queue');
like($q->{'wfe.tapqn.retry.small'}, qr/^quorum .*at-least-once/, 'so is its retry queue');

$node->stop;
$rabbit->stop;
done_testing();
