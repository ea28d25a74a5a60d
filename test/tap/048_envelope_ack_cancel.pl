# Dispatch envelopes built by the core and written by C, and ack_cancel's
# gate in C (issue 24 item 1), on a real RabbitMQ with real logins:
#
#  - a large-track dispatch through the broker path: the message carries
#    the outbox row's headers and body, a payload_ref naming the attempt;
#    the holder (tenant A's worker, a login granted the queue) fetches the
#    input with wfe.fetch_payload; tenant B's worker gets "does not exist";
#  - wfe.ack_cancel as those logins: accepted (the fence the cancellation
#    superseded), stale (another fence: callback.stale), unknown (no such
#    stage: no event); tenant B's worker and a login of tenant A without
#    the queue are refused (unknown; 42501) and nothing changes; bad
#    arguments keep their SQLSTATEs (22004, 22023, 42501 without
#    wfe_worker);
#  - an operator's fail_stage of an attempt a broker worker holds: the
#    worker gets a cancel message naming its fence, and its ack_cancel of
#    that fence is accepted as after a run's cancel (stage.failed_by_operator
#    names the fence); the new fence, another attempt and tenant B's
#    worker are answered as above.
use strict;
use warnings;

use JSON::PP;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use WfeRabbit;
use WfeLogin;
use WfeNode;

my $rabbit = WfeRabbit->new('envelope');
$rabbit->start;
my $node = WfeRabbit::wfe_node('wfe_envelope', $rabbit, "wfe.track_threshold_bytes = 1024\n");
my $json = JSON::PP->new->utf8->canonical;

sub sql { return $node->safe_psql('postgres', $_[0]); }

# A JSON value as an SQL jsonb literal.
sub jsonb { return '$j$' . $json->encode($_[0]) . '$j$::jsonb'; }

# login(ROLE, SQL): run SQL as a real login of ROLE; (SQLSTATE or '', stdout).
sub login
{
	my $r = WfeLogin::as_login($node, @_);
	return ($r->{state}, $r->{out});
}

WfeRabbit::linear_workflow($node, 'tap-envelope', 'envq', 'a', 'b');
WfeNode::logins($node,
	submitter_a => 'wfe_submitter A',
	worker_a => 'wfe_worker A',
	worker_a_other => 'wfe_worker A',
	worker_b => 'wfe_worker B',
	nobody => '');
sql(q{
SELECT wfe.grant_queue('worker_a', 'envq');
SELECT wfe.register_worker('tap.envb@1', 'envb');
SELECT wfe.grant_queue('worker_b', 'envb');});
WfeRabbit::wait_connected($node, 'start');

#
# A large-track dispatch through the broker path.
#
my $blob = "\x{e9}t\x{e9} \x{20ac} " x 200;    # unicode, over 1024 bytes
my ($st, $run) = login('submitter_a',
	"SELECT run_id FROM wfe.submit('tap-envelope', ${\ jsonb({ n => 1, data => $blob })}, options => '{\"tenant\": \"A\"}')");
is($st, '', "tenant A's submitter submits a run with a large input");
chomp $run;
my @m = $rabbit->probe_json('consume', 'wfe.envq.large', 1, 60);
my $m = $m[0];
ok($m, 'its dispatch arrived on wfe.envq.large') or BAIL_OUT('no dispatch arrived');
my $row = sql(qq{SELECT headers::text || E'\\x01' || body::text FROM wfe.outbox
                  WHERE run_id = $run AND stage = 'a' AND kind = 'dispatch'});
my ($h, $b) = split /\x01/, $row;
is_deeply($m->{headers}, $json->decode($h), 'the message carries the outbox row\'s headers');
is_deeply($m->{body}, $json->decode($b), 'and its body');
is($m->{headers}{'x-wfe-track'} . ' ' . $m->{body}{track}, 'large large', 'on the large track');
is($m->{headers}{'x-wfe-tenant'}, 'A', "in tenant A");
ok(!defined $m->{body}{payload_inline}, 'no inline payload');
my $ref = $m->{body}{payload_ref};
is( "$ref->{run_id} $ref->{stage} $ref->{attempt} $ref->{fence}",
	sql(qq{SELECT run_id || ' a ' || attempt || ' ' || fence FROM wfe.run_stages WHERE run_id = $run AND stage = 'a'}),
	'the reference names the attempt dispatched');
is( $ref->{sha256},
	sql(qq{SELECT encode(sha256(convert_to(input::text, 'UTF8')), 'hex') FROM wfe.run_stages
	        WHERE run_id = $run AND stage = 'a'}),
	'its sha256 is the input text\'s');
is($m->{body}{traceparent},
	sql(qq{SELECT wfe._attempt_traceparent(trace_id, span_id, trace_flags, 'a', 1) FROM wfe.runs WHERE run_id = $run}),
	'the traceparent is wfe._attempt_traceparent\'s');
ok($m->{headers}{'x-wfe-deadline'} eq '' && !defined $m->{body}{deadline_at}, 'no deadline: header empty, body null');
like($m->{body}{created_at}, qr/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?\+00:00$/, 'created_at in UTC');

my $out;
($st, $out) = login('worker_a', "SELECT wfe.fetch_payload(${\ jsonb($ref)}) ->> 'data'");
is($st, '', "tenant A's worker, the holder, fetches the payload");
chomp $out;
my $blob_bytes = $blob;
utf8::encode($blob_bytes);
is($out, $blob_bytes, 'and gets the input, unicode intact');
($st) = login('worker_b', "SELECT wfe.fetch_payload(${\ jsonb($ref)})");
is($st, '42704', "tenant B's worker is told it does not exist (42704)");

#
# ack_cancel: the worker accepts, the run is cancelled, the worker acknowledges.
#
my $fence = $ref->{fence};
($st, $out) = login('worker_a', "SELECT wfe.accept_task($run, 'a', 1, $fence, 'w-a')");
chomp $out;
is("$st$out", 'accepted', 'tenant A\'s worker accepts the attempt');
is(sql("SELECT wfe.cancel_run($run, 'tap')"), 'accepted', 'the run is cancelled');
my $new_fence = sql("SELECT fence FROM wfe.run_stages WHERE run_id = $run AND stage = 'a'");
isnt($new_fence, $fence, 'the cancellation superseded the fence');
is( sql(qq{SELECT count(*) FROM wfe.events WHERE run_id = $run AND stage = 'a' AND type = 'stage.cancelled'
            AND fence = $fence}),
	1, 'stage.cancelled names the superseded fence');

# a snapshot of everything ack_cancel may touch
sub snapshot
{
	return sql(qq{SELECT (SELECT string_agg(event_id || type || coalesce(fence::text, '-'), ',' ORDER BY event_id)
	                        FROM wfe.events WHERE run_id = $run),
	                     (SELECT state || attempt || fence FROM wfe.run_stages WHERE run_id = $run AND stage = 'a'),
	                     (SELECT count(*) FROM wfe.outbox WHERE run_id = $run)});
}
my $before = snapshot();

($st, $out) = login('worker_b', "SELECT wfe.ack_cancel($run, 'a', 1, $fence)");
chomp $out;
is("$st$out", 'unknown', "tenant B's worker acknowledging A's attempt: unknown");
is(snapshot(), $before, 'and nothing changed');
($st) = login('worker_a_other', "SELECT wfe.ack_cancel($run, 'a', 1, $fence)");
is($st, '42501', "a worker of tenant A without the queue is refused (42501)");
is(snapshot(), $before, 'and nothing changed');
($st) = login('nobody', "SELECT wfe.ack_cancel($run, 'a', 1, $fence)");
is($st, '42501', 'a login without wfe_worker may not call it (42501)');
($st) = login('worker_a', "SELECT wfe.ack_cancel($run, 'a', NULL, $fence)");
is($st, '22004', 'a NULL argument: 22004');
($st) = login('worker_a', "SELECT wfe.ack_cancel($run, E'a\\x01', 1, $fence)");
is($st, '22023', 'a stage name with a control character: 22023');
is(snapshot(), $before, 'and nothing changed');

($st, $out) = login('worker_a', "SELECT wfe.ack_cancel($run, 'nope', 1, $fence)");
chomp $out;
is("$st$out", 'unknown', 'no such stage: unknown');
is(snapshot(), $before, 'with no event');

($st, $out) = login('worker_a', "SELECT wfe.ack_cancel($run, 'a', 1, $new_fence)");
chomp $out;
is("$st$out", 'stale', 'the new fence (never asked to stop): stale');
is( sql(qq{SELECT tenant || ' ' || attempt || ' ' || detail::text || ' ' || fence FROM wfe.events
            WHERE run_id = $run AND type = 'callback.stale' ORDER BY event_id DESC LIMIT 1}),
	qq{A 1 {"callback": "ack_cancel"} $new_fence}, 'callback.stale recorded, naming the fence sent');
($st, $out) = login('worker_a', "SELECT wfe.ack_cancel($run, 'a', 2, $fence)");
chomp $out;
is("$st$out", 'stale', 'another attempt: stale');

($st, $out) = login('worker_a', "SELECT wfe.ack_cancel($run, 'a', 1, $fence)");
chomp $out;
is("$st$out", 'accepted', 'the superseded fence: accepted');
is( sql(qq{SELECT tenant || ' ' || attempt || ' ' || coalesce(detail::text, 'null') || ' ' || fence FROM wfe.events
            WHERE run_id = $run AND type = 'stage.cancel_acknowledged'}),
	"A 1 null $fence", 'stage.cancel_acknowledged recorded once, naming the fence');
is(sql("SELECT state || ' ' || fence FROM wfe.run_stages WHERE run_id = $run AND stage = 'a'"),
	"cancelled $new_fence", 'the stage is as it was: an acknowledgement is a record, not a transition');

# tenant B's worker learns nothing from A's acknowledged attempt either
($st, $out) = login('worker_b', "SELECT wfe.ack_cancel($run, 'a', 1, $fence)");
chomp $out;
is("$st$out", 'unknown', "tenant B's worker, after: still unknown");

#
# fail_stage: the operator fails the attempt a broker worker holds; the
# worker is asked to stop as for a cancel, and acknowledges the same way.
#
($st, my $run2) = login('submitter_a',
	"SELECT run_id FROM wfe.submit('tap-envelope', ${\ jsonb({ n => 2, data => $blob })}, options => '{\"tenant\": \"A\"}')");
chomp $run2;
@m = $rabbit->probe_json('consume', 'wfe.envq.large', 1, 60);
is($m[0] && $m[0]{body}{run_id}, $run2, 'a second run is dispatched');
my $fence2 = $m[0] ? $m[0]{body}{fence} : -1;
($st, $out) = login('worker_a', "SELECT wfe.accept_task($run2, 'a', 1, $fence2, 'w-a')");
chomp $out;
is("$st$out", 'accepted', 'tenant A\'s worker accepts it');
sql("SELECT wfe.fail_stage($run2, 'a', 'the host is gone')");
my $new_fence2 = sql("SELECT fence FROM wfe.run_stages WHERE run_id = $run2 AND stage = 'a'");
is(sql("SELECT state || ' ' || attempt FROM wfe.run_stages WHERE run_id = $run2 AND stage = 'a'"),
	'failed 1', 'the operator failed the attempt');
is( sql(qq{SELECT count(*) FROM wfe.outbox WHERE run_id = $run2 AND stage = 'a' AND kind = 'cancel'
            AND (body ->> 'fence')::bigint = $fence2}),
	1, 'the worker gets a cancel message naming the fence it holds');
is( sql(qq{SELECT count(*) FROM wfe.events WHERE run_id = $run2 AND stage = 'a' AND type = 'stage.failed_by_operator'
            AND fence = $fence2}),
	1, 'stage.failed_by_operator names it too');
($st, $out) = login('worker_b', "SELECT wfe.ack_cancel($run2, 'a', 1, $fence2)");
chomp $out;
is("$st$out", 'unknown', "tenant B's worker acknowledging it: unknown");
($st, $out) = login('worker_a', "SELECT wfe.ack_cancel($run2, 'a', 1, $new_fence2)");
chomp $out;
is("$st$out", 'stale', 'after fail_stage, the new fence (never asked to stop): stale');
($st, $out) = login('worker_a', "SELECT wfe.ack_cancel($run2, 'a', 2, $fence2)");
chomp $out;
is("$st$out", 'stale', 'after fail_stage, another attempt: stale');
($st, $out) = login('worker_a', "SELECT wfe.ack_cancel($run2, 'a', 1, $fence2)");
chomp $out;
is("$st$out", 'accepted', 'after fail_stage, the fence the worker held: accepted');
is( sql(qq{SELECT tenant || ' ' || attempt || ' ' || fence FROM wfe.events
            WHERE run_id = $run2 AND type = 'stage.cancel_acknowledged'}),
	"A 1 $fence2", 'stage.cancel_acknowledged recorded, naming the fence');
is(sql("SELECT state || ' ' || fence FROM wfe.run_stages WHERE run_id = $run2 AND stage = 'a'"),
	"failed $new_fence2", 'the stage is as the operator left it');

WfeRabbit::wait_published($node, 'the end');
$node->stop;
$rabbit->stop;
done_testing();
