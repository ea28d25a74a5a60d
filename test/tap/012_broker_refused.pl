# Dispatches RabbitMQ refuses: unroutable (returned) and nacked
# (delivery.md "Outbox": "a nack, a basic.return (unroutable) ... leaves
# the row pending with attempts, last_error and a backoff; unroutable rows
# raise a WARNING in the log"; "A row that cannot be published never holds
# back rows of other runs or stages"; "A queue's topology is declared before
# the first message to it is published").
#
# 1. The queue wfe.<q>.small is deleted behind wfe's back while the
#    publisher is connected: the next dispatch is returned (mandatory), the
#    log has the WARNING, and the publisher declares the queue again, after
#    which the row is published (same message_id) on a later attempt.
# 2. A queue of that name that RabbitMQ will not let wfe declare (created by
#    someone else without wfe's arguments, so wfe's declaration is refused
#    with 406 and its binding never made): the row stays pending with
#    last_error 'unroutable: ...' while a run on another queue is published;
#    once the impostor is gone and RabbitMQ restarted, the publisher
#    reconnects, declares the topology and the row is published.
# 3. A queue that refuses messages (a RabbitMQ policy: max-length 0,
#    overflow reject-publish): the broker nacks the dispatch, the row stays
#    pending with last_error 'nacked by the broker' and is retried with a
#    backoff, until the policy is cleared and it is published.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);
use WfeRabbit;

my $rabbit = WfeRabbit->new('refused');
$rabbit->start;
my $node = WfeRabbit::wfe_node('wfe_refused', $rabbit);

sub sql { return $node->safe_psql('postgres', $_[0]); }

# Wait until a queue exists in RabbitMQ.
sub wait_queue
{
	my ($queue) = @_;
	my $deadline = time + $PostgreSQL::Test::Utils::timeout_default;
	usleep(200_000) while !defined $rabbit->queue_messages($queue) && time < $deadline;
	return ok(defined $rabbit->queue_messages($queue), "queue $queue exists");
}

# The dispatch row of stage a of a run: "id state attempts last_error".
sub dispatch_row
{
	my ($run) = @_;
	return sql(qq{SELECT id || ' ' || state || ' ' || attempts || ' ' || coalesce(last_error, '-')
	                FROM wfe.outbox WHERE run_id = $run AND kind = 'dispatch' AND stage = 'a'});
}

WfeRabbit::linear_workflow($node, 'tap-unr', 'tapq', 'a');
WfeRabbit::linear_workflow($node, 'tap-other', 'tapq2', 'a');
WfeRabbit::wait_connected($node, 'start');
wait_queue('wfe.tapq.small');
wait_queue('wfe.tapq2.small');

#
# 1. The queue deleted behind wfe's back.
#
my $offset = -s $node->logfile;
$rabbit->probe_ok('delete-queue', 'wfe.tapq.small');
is($rabbit->queue_messages('wfe.tapq.small'), undef, 'wfe.tapq.small is deleted');
my $run = sql(q{SELECT run_id FROM wfe.submit('tap-unr', '{"n": 1, "data": 1}')});
my ($id) = split / /, dispatch_row($run);
$node->wait_for_log(qr/WARNING:  wfe publisher: 1 outbox rows were unroutable and stay pending \(ids \{$id\}\)/,
	$offset);
pass('the returned dispatch raises the unroutable WARNING in the log');
ok($node->poll_query_until('postgres',
		"SELECT state = 'published' FROM wfe.outbox WHERE id = $id"),
	'the publisher declared the queue again and the row is published');
like(dispatch_row($run), qr/^$id published [2-9]\d* -$/,
	'on a later attempt, and the error is cleared');
wait_queue('wfe.tapq.small');
my %bindings = map { ("$_->{source_name} $_->{destination_name} $_->{routing_key}" => 1) }
  @{ JSON::PP::decode_json($rabbit->ctl('-q', 'list_bindings', 'source_name', 'destination_name',
			'routing_key', '--formatter', 'json')) };
ok($bindings{'wfe.commands wfe.tapq.small run.tapq.small'}, 'it is bound to wfe.commands again');
my @m = $rabbit->probe_json('consume', 'wfe.tapq.small', 1, 30);
is($m[0]{properties}{message_id},
	sql("SELECT message_id FROM wfe.outbox WHERE id = $id"),
	'the dispatch arrived in the queue, with its outbox message_id');
is($rabbit->queue_messages('wfe.tapq.small'), 0, 'once');

#
# 2. A queue wfe cannot declare: unroutable until the impostor is gone.
#
$offset = -s $node->logfile;
$rabbit->probe_ok('delete-queue', 'wfe.tapq.small');
$rabbit->probe_ok('declare-queue', 'wfe.tapq.small');    # durable, no arguments, not bound
$run = sql(q{SELECT run_id FROM wfe.submit('tap-unr', '{"n": 2, "data": 2}')});
($id) = split / /, dispatch_row($run);
$node->wait_for_log(qr/WARNING:  wfe publisher: 1 outbox rows were unroutable and stay pending \(ids \{$id\}\)/,
	$offset);
pass('the dispatch is returned: the unroutable WARNING is in the log');
$node->wait_for_log(qr/WARNING:  wfe publisher: RabbitMQ kept the existing queues of "tapq"/, $offset);
pass('the refused declaration of wfe.tapq.small is a WARNING too');
# a retry is due after its backoff; in between the row is pending
ok( $node->poll_query_until(
		'postgres',
		"SELECT state = 'pending' AND attempts >= 2 AND last_error LIKE 'unroutable%' FROM wfe.outbox WHERE id = $id"),
	'the row stays pending, retried with a backoff, with last_error unroutable');
like(dispatch_row($run), qr/^$id pending \d+ unroutable: no queue is bound for wfe\.commands run\.tapq\.small$/,
	"last_error says 'unroutable: no queue is bound for wfe.commands run.tapq.small'");
cmp_ok(sql("SELECT available_at > now() FROM wfe.outbox WHERE id = $id"), 'eq', 't',
	'its next attempt waits for a backoff');
ok(sql('SELECT connected FROM wfe.publisher_lease') eq 't', 'the publisher stays connected');

# other runs are not held back
my $other = sql(q{SELECT run_id FROM wfe.submit('tap-other', '{"n": 3, "data": 3}')});
@m = $rabbit->probe_json('consume', 'wfe.tapq2.small', 1, 30);
is($m[0]{properties}{correlation_id}, $other, 'a run on another queue is published meanwhile');
ok($node->poll_query_until('postgres',
		"SELECT state = 'published' FROM wfe.outbox WHERE run_id = $other AND kind = 'dispatch'"),
	'and its row marked published');
is(sql("SELECT state FROM wfe.outbox WHERE id = $id"), 'pending', 'while the unroutable row is still pending');
is($rabbit->queue_messages('wfe.tapq.small'), 0, 'nothing reached the impostor queue');

# the impostor goes, RabbitMQ restarts: the topology is declared on
# reconnection and the row is published
$offset = -s $node->logfile;
$rabbit->probe_ok('delete-queue', 'wfe.tapq.small');
$rabbit->stop_app;
$rabbit->start_app;
ok($node->poll_query_until('postgres', "SELECT state = 'published' FROM wfe.outbox WHERE id = $id"),
	'after the restart the row is published');
WfeRabbit::wait_connected($node, 'after the restart');
like(slurp_file($node->logfile, $offset),
	qr/wfe publisher disconnected: [^\n]*\n(?:[^\n]*\n)*?[^\n]*wfe publisher connected to RabbitMQ/,
	'the publisher noticed the restart and connected again');
@m = $rabbit->probe_json('consume', 'wfe.tapq.small', 1, 30);
is($m[0]{properties}{message_id}, sql("SELECT message_id FROM wfe.outbox WHERE id = $id"),
	'the dispatch arrived in the redeclared queue with its outbox message_id');
is($m[0]{routing_key}, 'run.tapq.small', 'by its routing key');
my %queues = map { $_->{name} => $_ }
  @{ JSON::PP::decode_json($rabbit->ctl('-q', 'list_queues', 'name', 'arguments', '--formatter', 'json')) };
is_deeply({ map { $_->[0] => $_->[2] } @{ $queues{'wfe.tapq.small'}{arguments} || [] } },
	{ 'x-dead-letter-exchange' => 'wfe.retry', 'x-dead-letter-routing-key' => 'retry.tapq.small' },
	'wfe.tapq.small has wfe\'s arguments again');

#
# 3. Nacked by the broker.
#
# The channels of the publisher's connection (its client says "wfe publisher").
sub publisher_channels
{
	my @conns = @{ JSON::PP::decode_json($rabbit->ctl('-q', 'list_connections', 'pid', 'client_properties',
		'--formatter', 'json')) };
	my @ours = map { $_->{pid} } grep {
		grep { ref $_ eq 'ARRAY' && $_->[0] eq 'product' && $_->[2] eq 'wfe publisher' } @{ $_->{client_properties} }
	} @conns;
	my @channels = @{ JSON::PP::decode_json($rabbit->ctl('-q', 'list_channels', 'pid', 'connection',
		'--formatter', 'json')) };
	return sort map { $_->{pid} } grep { my $c = $_->{connection}; grep { $_ eq $c } @ours } @channels;
}
my @before = publisher_channels();
is(scalar(@before), 1, 'the publisher publishes on one channel');
$offset = -s $node->logfile;
$rabbit->ctl('set_policy', 'tap-full', '^wfe\.tapq\.small$',
	'{"max-length": 0, "overflow": "reject-publish"}', '--apply-to', 'queues');
$run = sql(q{SELECT run_id FROM wfe.submit('tap-unr', '{"n": 4, "data": 4}')});
($id) = split / /, dispatch_row($run);
ok( $node->poll_query_until(
		'postgres',
		"SELECT state = 'pending' AND attempts >= 2 AND last_error = 'nacked by the broker' FROM wfe.outbox WHERE id = $id"),
	'a nacked dispatch stays pending with last_error, and is retried');
# a nack is followed by a new channel on the same connection (a quorum
# queue's route in the old one can be stale: delivery.md)
my $log = slurp_file($node->logfile, $offset);
like($log, qr/wfe publisher: RabbitMQ nacked 1 of 1 messages; publishing goes on on a new channel/,
	'the log says the nack moved publishing to a new channel');
unlike($log, qr/wfe publisher disconnected/, 'without a new connection');
my @after = publisher_channels();
ok(@after == 1 && $after[0] ne $before[0], "the publisher's channel is a new one (@before, then @after)");
is($rabbit->queue_messages('wfe.tapq.small'), 0, 'the queue took nothing');
$rabbit->ctl('clear_policy', 'tap-full');
ok($node->poll_query_until('postgres', "SELECT state = 'published' FROM wfe.outbox WHERE id = $id"),
	'once the queue accepts messages the row is published');
@m = $rabbit->probe_json('consume', 'wfe.tapq.small', 1, 30);
is($m[0]{properties}{message_id}, sql("SELECT message_id FROM wfe.outbox WHERE id = $id"),
	'the dispatch arrived, with its outbox message_id');
is($rabbit->queue_messages('wfe.tapq.small'), 0, 'once');
WfeRabbit::wait_published($node, 'the end');

$node->stop;
$rabbit->stop;
done_testing();
