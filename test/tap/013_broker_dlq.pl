# Pre-acceptance retries and the dead-letter queue (delivery.md "RabbitMQ
# topology": a consumer that cannot process a message rejects it (no
# requeue), which routes it through the retry queue and back; x-death
# counts the cycles; past wfe.broker_max_redeliveries the consumer
# publishes it to wfe.commands with routing key "dead" and acks it).
#
# 1. amqp-probe as that consumer (reject-to-dlq: the rule wfe-worker
#    follows): a dispatch rejected over and over goes round
#    wfe.<q>.retry.small (TTL wfe.broker_retry_ttl_ms = 500 ms) and back to
#    wfe.<q>.small, x-death counting the cycles, until it is past
#    wfe.broker_max_redeliveries (2) and lands in wfe.dlq, unchanged.
# 2. wfe-worker in broker mode (when build/wfe-worker is built): a good
#    task completes; a failing command is an accepted attempt that fails,
#    so wfe retries it with a new attempt (its own retry policy) and never
#    dead-letters it; a dispatch whose large input was tampered with cannot
#    be fetched, so the worker rejects it before acceptance until it is
#    dead-lettered into wfe.dlq, and the stage is never started.
use strict;
use warnings;

use JSON::PP;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);
use WfeRabbit;

my $rabbit = WfeRabbit->new('dlq');
$rabbit->start;
# wfe.consume_dlq off: what lands in wfe.dlq stays there for this test to
# read (017_operator_loop.pl tests the background worker reading it back)
my $node = WfeRabbit::wfe_node('wfe_dlq', $rabbit, "wfe.broker_max_redeliveries = 2\nwfe.consume_dlq = off\n");
my $json = JSON::PP->new->utf8->canonical;

sub sql { return $node->safe_psql('postgres', $_[0]); }

WfeRabbit::linear_workflow($node, 'tap-dlq', 'tapq', 'a');
WfeRabbit::wait_connected($node, 'start');

#
# 1. The consumer rule, played by amqp-probe.
#
my $max = sql('SHOW wfe.broker_max_redeliveries');
is($max, '2', 'wfe.broker_max_redeliveries is 2');
my $run = sql(q{SELECT run_id FROM wfe.submit('tap-dlq', '{"n": 1, "data": "poison"}')});
my $mid = sql("SELECT message_id FROM wfe.outbox WHERE run_id = $run AND kind = 'dispatch'");
my @d = $rabbit->probe_json('reject-to-dlq', 'wfe.tapq.small', $max, 1, 120);
is(scalar @d, $max + 2, 'delivered max + 2 times: rejected max + 1 times, then dead-lettered');
is_deeply([ map { $_->{action} } @d ], [ ('reject') x ($max + 1), 'dead' ],
	'rejected while x-death counts at most max, dead-lettered past it');
is_deeply([ map { $_->{death_count} } @d ], [ 0 .. $max + 1 ], 'x-death counts one per retry cycle');
is_deeply([ map { $_->{properties}{message_id} } @d ], [ ($mid) x ($max + 2) ],
	'every delivery is the same message (its outbox message_id)');
is_deeply([ map { "$_->{exchange} $_->{routing_key}" } @d ], [ ('wfe.commands run.tapq.small') x ($max + 2) ],
	'each comes back through wfe.commands with the run routing key');
ok(!exists $d[0]{headers}{'x-death'}, 'the first delivery has no x-death');
my %death = map { ("$_->{queue} $_->{reason}" => $_) } @{ $d[-1]{headers}{'x-death'} || [] };
is_deeply([ sort keys %death ], [ 'wfe.tapq.retry.small expired', 'wfe.tapq.small rejected' ],
	'x-death: rejected from wfe.tapq.small, expired from wfe.tapq.retry.small');
is_deeply(
	[ map { "$_->{exchange} @{$_->{'routing-keys'}} $_->{count}" } @death{ 'wfe.tapq.small rejected', 'wfe.tapq.retry.small expired' } ],
	[ 'wfe.commands run.tapq.small ' . ($max + 1), 'wfe.retry retry.tapq.small ' . ($max + 1) ],
	'rejected messages go to wfe.retry with retry.tapq.small and expire back');
is_deeply($d[-1]{body}, $d[0]{body}, 'the body never changed');

is($rabbit->queue_messages('wfe.dlq'), 1, 'wfe.dlq has the message');
my ($dead) = $rabbit->probe_json('consume', 'wfe.dlq', 1, 30);
is($dead->{properties}{message_id}, $mid, 'with its message_id');
is("$dead->{exchange} $dead->{routing_key}", 'wfe.commands dead', 'published to wfe.commands with routing key dead');
is_deeply($dead->{body}, $d[0]{body}, 'with its envelope');
is($dead->{headers}{'x-wfe-run-id'}, $run, 'and its x-wfe-* headers');
is($rabbit->queue_messages('wfe.tapq.small') + $rabbit->queue_messages('wfe.tapq.retry.small'),
	0, 'nothing is left in the queue or its retry queue');
is(sql("SELECT state FROM wfe.run_stages WHERE run_id = $run AND stage = 'a'"), 'dispatched',
	'the stage was never accepted: still dispatched');
is(sql("SELECT state || ' ' || attempts FROM wfe.outbox WHERE run_id = $run"), 'published 1',
	'wfe published the dispatch once: the retries were RabbitMQ\'s');

#
# 2. wfe-worker.
#
my $worker_bin = WfeRabbit::top_dir() . '/build/wfe-worker';
SKIP:
{
	skip 'build/wfe-worker is not built', 1 unless -x $worker_bin;

	WfeRabbit::linear_workflow($node, 'tap-w', 'tapw', [ 'a',
		'retry: {max_attempts: 2, initial_ms: 100, multiplier: 1, max_ms: 100, jitter: none}' ]);
	# the publisher declares the queues the worker consumes
	my $deadline = time + $PostgreSQL::Test::Utils::timeout_default;
	usleep(200_000) while !defined $rabbit->queue_messages('wfe.tapw.large') && time < $deadline;
	my $log = "$PostgreSQL::Test::Utils::log_path/wfe-worker.log";
	# the command fails for inputs with "fail": true, and echoes a result otherwise
	my $command = q{if grep -q '"fail": *true'; then echo 'told to fail' >&2; exit 3; fi; echo '{"ok": true}'};
	my $worker = IPC::Run::start(
		[
			$worker_bin, '--queue', 'tapw', '--mode', 'broker',
			'--dsn', $node->connstr('postgres'), '--amqp-uri', $rabbit->uri,
			'--worker-id', 'tap-worker', '--max-redeliveries', $max, '--command', $command
		],
		'<', \undef, '>>', $log, '2>>', $log);

	# a good task completes
	my $good = sql(q{SELECT run_id FROM wfe.submit('tap-w', '{"n": 1, "data": {"fine": true}}')});
	ok($node->poll_query_until('postgres', "SELECT state = 'completed' FROM wfe.runs WHERE run_id = $good"),
		'wfe-worker: a good task completes');
	is(sql("SELECT result::text FROM wfe.run_stages WHERE run_id = $good AND stage = 'a'"),
		'{"ok": true}', 'with the command\'s result');

	# a failing command: accepted, failed, retried by wfe, never dead-lettered
	my $fail = sql(q{SELECT run_id FROM wfe.submit('tap-w', '{"n": 2, "data": {"fail": true}}')});
	ok($node->poll_query_until('postgres', "SELECT state = 'failed' FROM wfe.runs WHERE run_id = $fail"),
		'wfe-worker: a failing command fails the run after the retry policy');
	# (fences shown by generation, fence >> 32: their low half is random)
	is( sql(qq{SELECT string_agg(attempt || ':' || (fence >> 32), ' ' ORDER BY id) || ' / ' || count(DISTINCT message_id)
	             FROM wfe.outbox WHERE run_id = $fail AND kind = 'dispatch'}),
		'1:1 2:2 / 2',
		'each attempt was a dispatch of its own (new attempt, new fence, new message_id)');
	is(sql("SELECT count(*) FROM wfe.events WHERE run_id = $fail AND type = 'stage.accepted'"),
		2, 'both attempts were accepted: these are wfe\'s retries, after acceptance');
	like(sql("SELECT error::text FROM wfe.run_stages WHERE run_id = $fail AND stage = 'a'"),
		qr/told to fail/, 'the stage error has the command\'s stderr');
	is($rabbit->queue_messages('wfe.dlq'), 0, 'nothing of it went to wfe.dlq');

	# a dispatch the worker cannot process: its large input was tampered with
	# (in the submitting transaction, so before the worker can fetch it)
	my $blob = 'p' x 2000;
	my $poison = sql(qq{
BEGIN;
SET LOCAL wfe.track_threshold_bytes = 1024;
SELECT run_id FROM wfe.submit('tap-w', '{"n": 3, "data": "$blob"}');
UPDATE wfe.payloads SET body = '{"tampered": true}'
 WHERE key = (SELECT body -> 'payload_ref' ->> 'key' FROM wfe.outbox WHERE kind = 'dispatch' ORDER BY id DESC LIMIT 1);
COMMIT;});
	my $pmid = sql("SELECT message_id FROM wfe.outbox WHERE run_id = $poison AND kind = 'dispatch'");
	is(sql("SELECT routing_key FROM wfe.outbox WHERE run_id = $poison"), 'run.tapw.large',
		'the poison message is on the large track');
	$deadline = time + $PostgreSQL::Test::Utils::timeout_default;
	usleep(200_000) while ($rabbit->queue_messages('wfe.dlq') // 0) == 0 && time < $deadline;
	is($rabbit->queue_messages('wfe.dlq'), 1, 'wfe-worker dead-lettered it into wfe.dlq');
	($dead) = $rabbit->probe_json('consume', 'wfe.dlq', 1, 30);
	is($dead->{properties}{message_id}, $pmid, 'the dead letter is the poison dispatch');
	is("$dead->{exchange} $dead->{routing_key}", 'wfe.commands dead', 'sent to wfe.commands with routing key dead');
	cmp_ok($dead->{death_count}, '>', $max, 'after more retry cycles than --max-redeliveries');
	is($dead->{body}{message_id}, $pmid, 'with its envelope');
	is($dead->{headers}{'x-wfe-run-id'}, $poison, 'with its x-wfe-* headers');
	is(sql("SELECT state FROM wfe.run_stages WHERE run_id = $poison AND stage = 'a'"), 'dispatched',
		'the stage was never accepted');
	is(sql("SELECT count(*) FROM wfe.events WHERE run_id = $poison AND type = 'stage.accepted'"),
		0, 'no acceptance event');

	$worker->signal('TERM');
	ok($worker->finish, 'wfe-worker stops with exit status 0 on SIGTERM');
	my $wlog = slurp_file($log);
	my $rejections = () = $wlog =~ /rejecting a message from run\.tapw\.large/g;
	is($rejections, $max + 1, "the worker log shows max + 1 rejections of it ($rejections)");
	like($wlog, qr/dead-lettered a message from run\.tapw\.large/, 'and the dead-lettering');
}

$node->stop;
$rabbit->stop;
done_testing();
