# The publisher's settings at run time (delivery.md "Outbox":
# "wfe.publisher_enabled is on by default and idles while wfe.amqp_uri is
# empty; both are reloadable (pg_reload_conf()), and a changed URI
# reconnects at once"; "A queue's topology is declared ... also for queues
# registered or configured after the publisher connected").
#
# Checked: with wfe.publisher_enabled off the outbox is left alone while
# the worker keeps running rounds, and on again it is published; a URI
# pointing nowhere disconnects at once and keeps rows pending (the lease
# says why), the right one connects again and they are published; a queue
# configured for the broker after the publisher connected gets its
# topology before its first message.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);
use WfeRabbit;

my $rabbit = WfeRabbit->new('settings');
$rabbit->start;
my $node = WfeRabbit::wfe_node('wfe_settings', $rabbit, "log_statement = none\n");

sub sql { return $node->safe_psql('postgres', $_[0]); }

# Set a wfe GUC with ALTER SYSTEM and reload.
sub set_conf
{
	my ($name, $value) = @_;
	sql("ALTER SYSTEM SET $name = '$value'");
	sql('SELECT pg_reload_conf()');
}

# Wait until the worker has run a few more rounds (it has looked at the
# outbox again).
sub some_rounds
{
	my $rounds = sql('SELECT rounds FROM wfe.worker_status()');
	return $node->poll_query_until('postgres', "SELECT rounds >= $rounds + 3 FROM wfe.worker_status()");
}

WfeRabbit::linear_workflow($node, 'tap-set', 'tapq', 'a');
WfeRabbit::wait_connected($node, 'start');

# wfe.publisher_enabled off: the outbox waits; on: it is published.
my $offset = -s $node->logfile;
set_conf('wfe.publisher_enabled', 'off');
$node->wait_for_log(qr/wfe publisher disconnected: publishing is off/, $offset);
pass('publisher_enabled off: the publisher disconnects');
my $run = sql(q{SELECT run_id FROM wfe.submit('tap-set', '{"n": 1, "data": 1}')});
ok(some_rounds(), 'the worker keeps running rounds');
is(sql("SELECT state FROM wfe.outbox WHERE run_id = $run"), 'pending', 'and leaves the outbox row pending');
set_conf('wfe.publisher_enabled', 'on');
ok($node->poll_query_until('postgres', "SELECT state = 'published' FROM wfe.outbox WHERE run_id = $run"),
	'publisher_enabled on: the row is published');
my @m = $rabbit->probe_json('consume', 'wfe.tapq.small', 1, 30);
is($m[0]{properties}{correlation_id}, $run, 'and arrives');

# A URI pointing nowhere: disconnected at once, rows wait; back: published.
my $nowhere = PostgreSQL::Test::Cluster::get_free_port();
$offset = -s $node->logfile;
set_conf('wfe.amqp_uri', "amqp://guest:guest\@127.0.0.1:$nowhere/");
$node->wait_for_log(qr/wfe publisher disconnected: wfe.amqp_uri changed/, $offset);
pass('a changed URI disconnects at once');
ok($node->poll_query_until('postgres', 'SELECT NOT connected FROM wfe.publisher_lease'),
	'the lease shows the publisher disconnected');
like(sql('SELECT last_error FROM wfe.publisher_lease'), qr/cannot connect to 127\.0\.0\.1:$nowhere/,
	'with the reason');
$node->wait_for_log(qr/WARNING:  wfe publisher cannot reach RabbitMQ/, $offset);
pass("the log has the 'cannot reach RabbitMQ' warning");
$run = sql(q{SELECT run_id FROM wfe.submit('tap-set', '{"n": 2, "data": 2}')});
ok(some_rounds(), 'the worker keeps running rounds');
is(sql("SELECT state FROM wfe.outbox WHERE run_id = $run"), 'pending', 'the new row waits');
set_conf('wfe.amqp_uri', $rabbit->uri);
WfeRabbit::wait_connected($node, 'the right URI again');
ok($node->poll_query_until('postgres', "SELECT state = 'published' FROM wfe.outbox WHERE run_id = $run"),
	'and the row is published');
@m = $rabbit->probe_json('consume', 'wfe.tapq.small', 1, 30);
is($m[0]{properties}{correlation_id}, $run, 'and arrives');

# A queue configured for the broker while connected: declared before its
# first message (mandatory: it would be returned otherwise).
$offset = -s $node->logfile;
WfeRabbit::linear_workflow($node, 'tap-late', 'tapq-late', 'a');
$run = sql(q{SELECT run_id FROM wfe.submit('tap-late', '{"n": 3, "data": 3}')});
@m = $rabbit->probe_json('consume', 'wfe.tapq-late.small', 1, 60);
is($m[0]{properties}{correlation_id}, $run, 'a queue configured later gets its dispatch');
ok($node->poll_query_until('postgres', "SELECT state = 'published' FROM wfe.outbox WHERE run_id = $run"),
	'published');
is(sql("SELECT attempts || ' ' || coalesce(last_error, '-') FROM wfe.outbox WHERE run_id = $run"), '1 -',
	'at the first attempt: its topology was there first');
unlike(slurp_file($node->logfile, $offset), qr/unroutable/, 'nothing was unroutable');

$node->stop;
$rabbit->stop;
done_testing();
