# Dispatch messages on a real RabbitMQ (delivery.md "Outbox", "RabbitMQ
# topology", "Tracks and the envelope"): the topology the publisher
# declares; a dispatch's routing key, properties, x-wfe-* headers and
# envelope, field by field, against the outbox row, the run and the stage,
# for a stage without and with a queue deadline (x-wfe-deadline is ISO 8601
# in UTC whatever the DateStyle and TimeZone of the session that released
# the stage); messages of consecutive
# outbox ids arrive in id order across claims and confirm windows; the
# large track: an input over wfe.track_threshold_bytes goes by reference
# (payload_ref) to run.<queue>.large, wfe.fetch_payload returns it, and
# refuses a tampered payload row (XX001), a reference whose hash is not its
# key (22023) and an unknown one (42704).
use strict;
use warnings;

use JSON::PP;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use WfeRabbit;

my $rabbit = WfeRabbit->new('dispatch');
$rabbit->start;
# small batches and windows, so that 20 messages take several claims and
# several confirm windows
my $node = WfeRabbit::wfe_node('wfe_dispatch', $rabbit,
	"wfe.publish_batch = 7\nwfe.confirm_window = 3\n");
my $json = JSON::PP->new->utf8->canonical;

sub sql { return $node->safe_psql('postgres', $_[0]); }

# A JSON value as an SQL jsonb literal.
sub jsonb { return '$j$' . $json->encode($_[0]) . '$j$::jsonb'; }

sql(q{
CREATE FUNCTION tap_sqlstate(q text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE q;
    RETURN 'ok';
EXCEPTION WHEN OTHERS THEN
    RETURN SQLSTATE;
END
$$;
-- does a text read (in this session's DateStyle) as the given instant?
CREATE FUNCTION tap_same_instant(t text, d timestamptz) RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
    RETURN t::timestamptz = d;
EXCEPTION WHEN OTHERS THEN
    RETURN false;
END
$$;});
WfeRabbit::linear_workflow($node, 'tap-env', 'tapq', 'a',
	[ 'b', 'queue_deadline_ms: 600000' ], 'c', [ 'd', 'queue_deadline_ms: 600000' ]);
WfeRabbit::wait_connected($node, 'start');

#
# The topology: declared on connect and for the broker queue.
#
my $deadline = time + $PostgreSQL::Test::Utils::timeout_default;
sleep 1 while !defined $rabbit->queue_messages('wfe.tapq.small') && time < $deadline;
my %queues = map { $_->{name} => $_ }
  @{ decode_json($rabbit->ctl('-q', 'list_queues', 'name', 'durable', 'arguments', '--formatter', 'json')) };
my %args_of = map {
	my $q = $_;
	($q => { map { $_->[0] => $_->[2] } @{ $queues{$q}{arguments} || [] } })
} keys %queues;
for my $track (qw(small large))
{
	my $q = "wfe.tapq.$track";
	ok($queues{$q} && $queues{$q}{durable}, "queue $q exists and is durable");
	is_deeply($args_of{$q},
		{ 'x-dead-letter-exchange' => 'wfe.retry', 'x-dead-letter-routing-key' => "retry.tapq.$track" },
		"$q dead-letters to wfe.retry with retry.tapq.$track");
	$q = "wfe.tapq.retry.$track";
	ok($queues{$q} && $queues{$q}{durable}, "queue $q exists and is durable");
	is_deeply(
		$args_of{$q},
		{
			'x-message-ttl' => 500,
			'x-dead-letter-exchange' => 'wfe.commands',
			'x-dead-letter-routing-key' => "run.tapq.$track"
		},
		"$q holds messages for wfe.broker_retry_ttl_ms and dead-letters back with run.tapq.$track");
}
ok($queues{'wfe.dlq'} && $queues{'wfe.dlq'}{durable}, 'queue wfe.dlq exists and is durable');
my %exchanges = map { $_->{name} => $_ }
  @{ decode_json($rabbit->ctl('-q', 'list_exchanges', 'name', 'type', 'durable', '--formatter', 'json')) };
for my $x (qw(wfe.commands wfe.retry wfe.events))
{
	is(($exchanges{$x}{type} // '') . '/' . ($exchanges{$x}{durable} ? 'durable' : 'transient'),
		'topic/durable', "exchange $x is a durable topic exchange");
}
my %bindings = map { ("$_->{source_name} $_->{destination_name} $_->{routing_key}" => 1) }
  @{ decode_json($rabbit->ctl('-q', 'list_bindings', 'source_name', 'destination_name', 'routing_key',
			'--formatter', 'json')) };
for my $b ('wfe.commands wfe.tapq.small run.tapq.small', 'wfe.commands wfe.tapq.large run.tapq.large',
	'wfe.retry wfe.tapq.retry.small retry.tapq.small', 'wfe.retry wfe.tapq.retry.large retry.tapq.large',
	'wfe.commands wfe.dlq dead')
{
	ok($bindings{$b}, "binding $b");
}

#
# One dispatch, field by field.
#
# (and the attempt's W3C traceparent, docs/operations.md "Traces")
my @HEADERS = qw(traceparent x-wfe-attempt x-wfe-contract x-wfe-deadline x-wfe-digest x-wfe-fence x-wfe-run-id
  x-wfe-stage x-wfe-tenant x-wfe-track);
# the envelope of delivery.md ...
my @BODY_KEYS = qw(attempt correlation_id created_at deadline_at definition_digest fence headers
  idempotency_key message_id payload_inline payload_ref run_id stage track worker workflow_name
  workflow_version);
# ... and what wfe adds for pushed workers to keep an attempt alive
# (docs/wfe-worker.md): the stage's heartbeat and execution deadline
# (docs/wfe-worker.md), and the attempt's traceparent
my @BODY_EXTRA = qw(execution_deadline_ms heartbeat_ms traceparent);

# The current attempt of a stage, as the database has it.
sub stage_row
{
	my ($run, $stage) = @_;
	my @f = split /\|/, sql(qq{
SELECT s.attempt, s.fence, coalesce(s.deadline_at::text, ''), s.worker, s.tenant, r.definition_digest,
       r.workflow, r.version, s.input::text,
       wfe._message_id(s.run_id, s.stage, s.attempt, s.fence, 'dispatch'),
       coalesce(s.heartbeat_ms::text, 'null'), coalesce(s.exec_ms::text, 'null')
  FROM wfe.run_stages AS s JOIN wfe.runs AS r USING (run_id)
 WHERE s.run_id = $run AND s.stage = '$stage'}), -1;
	my %row;
	@row{qw(attempt fence deadline worker tenant digest workflow version input message_id heartbeat_ms exec_ms)} = @f;
	return \%row;
}

# Check a consumed dispatch message against the database: what it says is
# the stage's current attempt of `run`, on `track`.  `t0` and `t1` bracket
# the time it was published.
sub check_dispatch
{
	my ($what, $m, $run, $stage, $track, $t0, $t1) = @_;
	my $s = stage_row($run, $stage);
	my $p = $m->{properties};
	my $h = $m->{headers};
	my $b = $m->{body};

	is($m->{exchange}, 'wfe.commands', "$what: published to wfe.commands");
	is($m->{routing_key}, "run.tapq.$track", "$what: routing key run.tapq.$track");
	ok(!$m->{redelivered}, "$what: not a redelivery");
	# properties
	is($p->{message_id}, $s->{message_id},
		"$what: message_id is the deterministic id of (run, stage, attempt, fence, dispatch)");
	is( sql(qq{SELECT count(*) FROM wfe.outbox WHERE message_id = '$p->{message_id}'
	             AND run_id = $run AND stage = '$stage' AND kind = 'dispatch' AND fence = $s->{fence}}),
		1, "$what: message_id is that of the stage's outbox row");
	is($p->{correlation_id}, "$run", "$what: correlation_id is the run id");
	is($p->{content_type}, 'application/json', "$what: content_type application/json");
	is($p->{delivery_mode}, 2, "$what: delivery_mode 2 (persistent)");
	ok(defined $p->{timestamp} && $p->{timestamp} >= $t0 - 2 && $p->{timestamp} <= $t1 + 2,
		"$what: timestamp is the time of publishing ($p->{timestamp} in [$t0, $t1])");
	# headers: all of them, always, and nothing else
	is_deeply([ sort keys %$h ], \@HEADERS, "$what: exactly the nine x-wfe-* headers and traceparent");
	is($h->{traceparent}, sql(qq{SELECT '00-' || trace_id || '-' || left(md5(span_id || ':$stage:$s->{attempt}'), 16)
	                               || '-' || trace_flags FROM wfe.runs WHERE run_id = $run}),
		"$what: traceparent: the run's trace, the attempt's span");
	is_deeply(
		[ @$h{qw(x-wfe-run-id x-wfe-stage x-wfe-attempt x-wfe-fence x-wfe-digest x-wfe-contract x-wfe-tenant x-wfe-track)} ],
		[ "$run", $stage, $s->{attempt}, $s->{fence}, $s->{digest}, $s->{worker}, $s->{tenant}, $track ],
		"$what: x-wfe-* headers name the run, stage, attempt, fence, digest, contract, tenant and track");
	if ($s->{deadline} eq '')
	{
		is($h->{'x-wfe-deadline'}, '', "$what: x-wfe-deadline is an empty string without a deadline");
	}
	else
	{
		is( sql(qq{SELECT '$h->{'x-wfe-deadline'}'::timestamptz = deadline_at FROM wfe.run_stages
		             WHERE run_id = $run AND stage = '$stage'}),
			't', "$what: x-wfe-deadline is the stage's deadline ($h->{'x-wfe-deadline'})");
	}
	# the envelope
	ok($m->{body_is_json}, "$what: the body is JSON");
	is_deeply([ grep { !exists $b->{$_} } @BODY_KEYS ], [], "$what: the envelope has every key of the spec");
	is_deeply([ sort keys %$b ], [ sort @BODY_KEYS, @BODY_EXTRA ],
		"$what: and besides them only heartbeat_ms, execution_deadline_ms and traceparent");
	is($b->{traceparent}, $h->{traceparent}, "$what: the body's traceparent is the header's");
	is(($b->{heartbeat_ms} // 'null') . ' ' . ($b->{execution_deadline_ms} // 'null'),
		"$s->{heartbeat_ms} $s->{exec_ms}", "$what: which are the stage's");
	is( sql(qq{SELECT body = ${\ jsonb($b)} FROM wfe.outbox WHERE message_id = '$p->{message_id}'}),
		't', "$what: the body is the outbox row's body");
	is_deeply(
		[ @$b{qw(message_id correlation_id workflow_name workflow_version definition_digest stage worker track idempotency_key)} ],
		[ $p->{message_id}, "$run", $s->{workflow}, $s->{version}, $s->{digest}, $stage, $s->{worker}, $track,
			"$run:$stage:$s->{attempt}" ],
		"$what: envelope identity: message_id, correlation_id, workflow, version, digest, stage, worker, track, idempotency_key");
	ok($b->{run_id} == $run && $b->{attempt} == $s->{attempt} && $b->{fence} == $s->{fence},
		"$what: envelope run_id, attempt and fence are numbers of the attempt");
	is_deeply($b->{headers}, { content_type => 'application/json', source => 'wfe', tenant => $s->{tenant} },
		"$what: envelope headers");
	if ($s->{deadline} eq '')
	{
		ok(!defined $b->{deadline_at}, "$what: envelope deadline_at is null without a deadline");
	}
	else
	{
		is(sql(qq{SELECT '$b->{deadline_at}'::timestamptz = '$s->{deadline}'::timestamptz}),
			't', "$what: envelope deadline_at is the stage's deadline");
	}
	is(sql(qq{SELECT '$b->{created_at}'::timestamptz <= now()}), 't', "$what: created_at is a timestamp");
	is((defined $b->{payload_inline} ? 1 : 0) + (defined $b->{payload_ref} ? 1 : 0),
		1, "$what: exactly one of payload_inline and payload_ref is non-null");
	if ($track eq 'small')
	{
		is(sql(qq{SELECT ${\ jsonb($b->{payload_inline})} = '$s->{input}'::jsonb}),
			't', "$what: payload_inline is the stage's bound input");
	}
	return $s;
}

# Consume one message from a queue (undef if none came).
sub consume_one
{
	my ($queue) = @_;
	my @m = $rabbit->probe_json('consume', $queue, 1, 60);
	return $m[0];
}

my $t0 = time;
my $run = sql(q{SELECT run_id FROM wfe.submit('tap-env', '{"n": 1, "data": {"modelId": "m-1"}}')});
my $m = consume_one('wfe.tapq.small');
my $t1 = time;
ok($m, 'the dispatch of stage a arrived on wfe.tapq.small') or BAIL_OUT('no dispatch arrived');
my $s = check_dispatch('stage a', $m, $run, 'a', 'small', $t0, $t1);
is_deeply($m->{body}{payload_inline}, { n => 1, data => { modelId => 'm-1' } },
	'stage a: payload_inline is the input the definition binds from the context');
# (the consumer may see the message before the publisher marks the row)
WfeRabbit::wait_published($node, 'stage a');
is(sql(q{SELECT state || ' ' || attempts || ' ' || coalesce(last_error, '-') FROM wfe.outbox WHERE kind = 'dispatch'}),
	'published 1 -', 'the outbox row is published after one attempt, without an error');

# A worker accepts and completes it; stage b (with a queue deadline) is next.
my $env = $m->{body};
is(sql(qq{SELECT wfe.accept_task($env->{run_id}, '$env->{stage}', $env->{attempt}, $env->{fence}, 'tap-w')}),
	'accepted', 'the envelope identifies the attempt for accept_task');
is(sql(qq{SELECT wfe.complete_task($env->{run_id}, '$env->{stage}', $env->{attempt}, $env->{fence}, '{}')}),
	'accepted', 'complete_task with it');
$t0 = time;
$m = consume_one('wfe.tapq.small');
$t1 = time;
ok($m, 'the dispatch of stage b arrived') or BAIL_OUT('no dispatch arrived');
$s = check_dispatch('stage b (queue deadline)', $m, $run, 'b', 'small', $t0, $t1);
isnt($m->{headers}{'x-wfe-deadline'}, '', 'stage b: x-wfe-deadline is set');
sql(qq{SELECT wfe.accept_task($run, 'b', $s->{attempt}, $s->{fence}, 'tap-w'),
              wfe.complete_task($run, 'b', $s->{attempt}, $s->{fence}, '{}')});
$m = consume_one('wfe.tapq.small');
ok($m, 'the dispatch of stage c arrived') or BAIL_OUT('no dispatch arrived');
$s = check_dispatch('stage c', $m, $run, 'c', 'small', $t0, time);
# stage d (a deadline again) is released by a session with another
# DateStyle and TimeZone: what the message says must not depend on them
sql(qq{SET datestyle = 'SQL, DMY';
SET timezone = 'America/New_York';
SELECT wfe.accept_task($run, 'c', $s->{attempt}, $s->{fence}, 'tap-w'),
       wfe.complete_task($run, 'c', $s->{attempt}, $s->{fence}, '{}')});
$m = consume_one('wfe.tapq.small');
ok($m, 'the dispatch of stage d arrived') or BAIL_OUT('no dispatch arrived');
$s = stage_row($run, 'd');
is($m->{properties}{message_id}, $s->{message_id}, 'stage d: its message_id');
is(sql(qq{SELECT '$m->{body}{deadline_at}'::timestamptz = deadline_at FROM wfe.run_stages
           WHERE run_id = $run AND stage = 'd'}),
	't', 'stage d: envelope deadline_at is the deadline, whatever the DateStyle of the releasing session');
is( sql(qq{SELECT tap_same_instant('$m->{headers}{'x-wfe-deadline'}', deadline_at) FROM wfe.run_stages
             WHERE run_id = $run AND stage = 'd'}),
	't', "stage d: x-wfe-deadline reads as the deadline too ($m->{headers}{'x-wfe-deadline'})");
sql(qq{SELECT wfe.accept_task($run, 'd', $s->{attempt}, $s->{fence}, 'tap-w'),
              wfe.complete_task($run, 'd', $s->{attempt}, $s->{fence}, '{}')});
is(sql("SELECT state FROM wfe.runs WHERE run_id = $run"), 'completed', 'the run completed');
is_deeply(
	[ split /\n/, sql("SELECT message_id FROM wfe.outbox WHERE run_id = $run AND kind = 'dispatch' ORDER BY id") ],
	[ map { sql("SELECT wfe._message_id($run, '$_', 1, fence, 'dispatch') FROM wfe.run_stages WHERE run_id = $run AND stage = '$_'") } qw(a b c d) ],
	'one dispatch per stage, each with its own deterministic id');

#
# Order: 20 dispatches of consecutive outbox ids, published over three
# claims (wfe.publish_batch = 7) of several confirm windows (3) each, arrive
# in id order.
#
my $first = sql(q{SELECT coalesce(max(id), 0) FROM wfe.outbox});
sql(q{SELECT wfe.submit('tap-env', jsonb_build_object('n', i, 'data', i)) FROM generate_series(1, 20) AS i});
my @expected = split /\n/,
  sql("SELECT message_id FROM wfe.outbox WHERE id > $first AND kind = 'dispatch' ORDER BY id");
is(scalar @expected, 20, '20 dispatch rows of consecutive ids');
my @got = map { $_->{properties}{message_id} } $rabbit->probe_json('consume', 'wfe.tapq.small', 20, 60);
is(scalar @got, 20, 'all 20 arrived');
is_deeply(\@got, \@expected, 'they arrived in outbox id order');
WfeRabbit::wait_published($node, '20 runs');
cmp_ok(sql("SELECT count(DISTINCT claimed_at) FROM wfe.outbox WHERE id > $first AND kind = 'dispatch'"),
	'>=', 3, 'they took several claims');

#
# The large track.
#
my $blob = 'x' x 3000;
$t0 = time;
my $big = sql(qq{SET wfe.track_threshold_bytes = 1024;
SELECT run_id FROM wfe.submit('tap-env', '{"n": 2, "data": "$blob"}')});
$m = consume_one('wfe.tapq.large');
$t1 = time;
ok($m, 'an input over wfe.track_threshold_bytes (1024) arrived on wfe.tapq.large')
  or BAIL_OUT('no dispatch arrived');
$s = check_dispatch('large track', $m, $big, 'a', 'large', $t0, $t1);
my $ref = $m->{body}{payload_ref};
ok(!defined $m->{body}{payload_inline}, 'large track: payload_inline is null');
is_deeply([ sort keys %{ $ref || {} } ], [qw(attempt bucket bytes fence key run_id sha256 stage)],
	'payload_ref has bucket, key, sha256 and bytes, and names its attempt (run_id, stage, attempt, fence)');
is("$ref->{run_id} $ref->{stage} $ref->{attempt} $ref->{fence}",
	sql(qq{SELECT run_id || ' ' || stage || ' ' || attempt || ' ' || fence FROM wfe.run_stages WHERE run_id = $big AND stage = 'a'}),
	'payload_ref names the attempt dispatched');
is($ref->{bucket}, 'wfe.payloads', 'payload_ref bucket is wfe.payloads');
is( $ref->{sha256},
	sql(qq{SELECT encode(sha256(convert_to(input::text, 'UTF8')), 'hex') FROM wfe.run_stages
	        WHERE run_id = $big AND stage = 'a'}),
	'payload_ref sha256 is the SHA-256 of the input');
is($ref->{key}, "sha256:$ref->{sha256}", 'payload_ref key is sha256:<hex>');
is( $ref->{bytes},
	sql(qq{SELECT octet_length(input::text) FROM wfe.run_stages WHERE run_id = $big AND stage = 'a'}),
	'payload_ref bytes is the size of the input');
cmp_ok($ref->{bytes}, '>', 1024, 'which is over the threshold');
is(sql(qq{SELECT wfe.fetch_payload(${\ jsonb($ref)}) = input FROM wfe.run_stages WHERE run_id = $big AND stage = 'a'}),
	't', 'wfe.fetch_payload(payload_ref) returns the input');
is($json->decode(sql(qq{SELECT wfe.fetch_payload(${\ jsonb($ref)})}))->{data},
	$blob, 'the fetched input carries the submitted data');
is($rabbit->queue_messages('wfe.tapq.small'), 0, 'nothing of it went to the small track');

# the same input under the default threshold goes inline
my $inline = sql(qq{SELECT run_id FROM wfe.submit('tap-env', '{"n": 2, "data": "$blob"}')});
$m = consume_one('wfe.tapq.small');
ok($m, 'the same input under the default threshold arrived on wfe.tapq.small')
  or BAIL_OUT('no dispatch arrived');
check_dispatch('same input, default threshold', $m, $inline, 'a', 'small', $t0, time);

# references that must be refused
my %bad = %$ref;
$bad{sha256} = '0' x 64;
is(sql(qq{SELECT tap_sqlstate('SELECT wfe.fetch_payload(' || quote_literal(${\ jsonb(\%bad)}::text) || ')')}),
	'22023', 'a reference whose sha256 is not its key is refused (22023)');
my %unknown = (%$ref, key => 'sha256:' . ('0' x 64), sha256 => '0' x 64);
is(sql(qq{SELECT tap_sqlstate('SELECT wfe.fetch_payload(' || quote_literal(${\ jsonb(\%unknown)}::text) || ')')}),
	'42704', 'a reference to no payload is refused (42704)');
sql(qq{UPDATE wfe.payloads SET body = '{"n": 2, "data": "tampered"}' WHERE key = '$ref->{key}'});
is(sql(qq{SELECT tap_sqlstate('SELECT wfe.fetch_payload(' || quote_literal(${\ jsonb($ref)}::text) || ')')}),
	'XX001', 'a tampered payload row is refused (XX001 data_corrupted)');

WfeRabbit::wait_published($node, 'the end');
is(sql(q{SELECT count(*) FROM wfe.outbox WHERE last_error IS NOT NULL OR attempts <> 1}),
	0, 'every row was published at its first attempt');

$node->stop;
$rabbit->stop;
done_testing();
