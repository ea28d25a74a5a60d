# wfe.redact_keys and trace context (docs/operations.md "Redaction",
# "Traces"), as real logins of two tenants:
#
# - secrets planted in a run's context, a stage's error and result, an
#   output and an operator's reason never appear on any surface a person
#   reads -- the event rows, the event projection on the outbox, report,
#   run_timeline, run_mermaid, run_spans, every view (dashboards, metrics)
#   -- while the worker that claims the task, and the dispatch envelope of a
#   broker queue, still carry them;
# - only a superuser sets wfe.redact_keys: a submitter's SET and set_config
#   are refused (42501) and change nothing; a value that is not a list of
#   keys is refused by the check hook (22023) and changes nothing;
# - submit's traceparent: malformed ones are refused with 22023 naming the
#   option; a later version's extra fields are ignored and unknown flags
#   cleared; the run keeps the trace id, each claimed task and envelope
#   carries a traceparent whose span is its attempt's, and run_spans gives
#   the same ids in OTLP/JSON; another tenant's run is answered as none.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use JSON::PP;
use WfeLogin;
use WfeNode;

my $node = WfeNode::node('wfe_redaction');
sub sql { return $node->safe_psql('postgres', $_[0]); }

# login(ROLE, SQL): (SQLSTATE or '', stdout, stderr), connected as ROLE itself
sub login
{
	my $r = WfeLogin::as_login($node, lc $_[0], $_[1], strict => 1);
	return ($r->{state}, $r->{out}, $r->{err});
}

sub ok_login
{
	my ($role, $q) = @_;
	my ($st, $out, $err) = login($role, $q);
	is($st, '', "$role: " . substr($q, 0, 70)) or diag($err);
	return $out;
}

# the setting as an operator would set it: for the database, by a superuser,
# in a session that has loaded wfe (which checks the value)
sql(q{LOAD 'wfe'; ALTER DATABASE postgres SET wfe.redact_keys = 'password, api_key, reason'});
sql(q{ALTER DATABASE postgres SET wfe.publish_events = on});
WfeNode::tenant_logins($node, [qw(A B)], qw(operator reader submitter worker));
sql(q{
SELECT wfe.register_worker('t.q@1', 'q');
SELECT wfe.register_worker('t.qb@1', 'qb');
SELECT wfe.grant_queue('worker_A', 'q');
SELECT wfe.grant_queue('worker_B', 'q');
SELECT wfe.configure_queue('qb', 'broker');});
WfeNode::workflow($node, <<'YAML');
name: flow
version: "1.0.0"
entry: work
stages:
  - name: work
    type: worker
    queue: q
    worker: t.q@1
    input: { doc: "${context.doc}" }
    retry: { max_attempts: 1 }
    on_success: completed
    on_failure: failed
YAML
WfeNode::workflow($node, <<'YAML');
name: pushed
version: "1.0.0"
entry: work
stages:
  - name: work
    type: worker
    queue: qb
    worker: t.qb@1
    input: { doc: "${context.doc}" }
    on_success: completed
    on_failure: failed
YAML

# ---- who may set wfe.redact_keys -----------------------------------------
# Before the session loads wfe the setting is a placeholder, which SET
# accepts; loading wfe (the submit) throws a non-superuser's value away.
my ($st, $shown) = login('submitter_A', q{SET wfe.redact_keys = '';
SELECT count(*) FROM wfe.submit('flow', '{}', NULL, '{"tenant": "A"}');
SHOW wfe.redact_keys;
SET wfe.redact_keys = '';});
like($shown, qr/^password, api_key, reason$/m, 'a submitter\'s SET before wfe was loaded is thrown away when it loads');
is($st, '42501', 'once loaded, a submitter cannot clear wfe.redact_keys for its session');
($st) = login('submitter_A', q{SELECT count(*) FROM wfe.submit('flow', '{}', NULL, '{"tenant": "A"}');
SELECT set_config('wfe.redact_keys', '', false);});
is($st, '42501', 'nor with set_config');
my ($bad, $out, $err) = login('postgres', q{LOAD 'wfe'; ALTER DATABASE postgres SET wfe.redact_keys = 'api key'});
is($bad, '22023', 'a value that is not a list of keys is refused by the check hook');
like($err, qr/comma-separated list of JSON keys/, 'the refusal says what is expected');
($bad) = login('postgres', q{LOAD 'wfe'; SET wfe.redact_keys = 'a,,b'});
is($bad, '22023', 'an empty key is refused');
is(ok_login('reader_A', 'SHOW wfe.redact_keys'), 'password, api_key, reason', 'the refused values changed nothing');

# ---- traceparent: refused and accepted -----------------------------------
my $trace = '4bf92f3577b34da6a3ce929d0e0e4736';
my $parent = '00f067aa0ba902b7';
my $runs_before = sql('SELECT count(*) FROM wfe.runs');
for my $tp ('00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7', # no flags
	'00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01',       # uppercase
	'00-00000000000000000000000000000000-00f067aa0ba902b7-01',       # zero trace id
	'00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01',       # zero parent id
	'ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01',       # version ff
	'00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra', # version 00 has no more fields
	'42')
{
	my $opt = $tp eq '42' ? '42' : qq{"$tp"};
	my ($s, undef, $e) = login('submitter_A',
		qq{SELECT run_id FROM wfe.submit('flow', '{}', NULL, '{"tenant": "A", "traceparent": $opt}')});
	is($s, '22023', "traceparent $tp is refused");
	like($e, qr/option traceparent/, 'the refusal names the option');
}
is(sql('SELECT count(*) FROM wfe.runs'), $runs_before, 'no refused submit made a run');
# a later version: its extra field is ignored, the unknown flag bits cleared
my $later = ok_login('submitter_A', qq{SELECT run_id FROM wfe.submit('flow', '{}', NULL,
	'{"tenant": "A", "traceparent": "01-$trace-$parent-ff-what-comes-later"}')});
is(sql("SELECT trace_id || ' ' || trace_parent || ' ' || trace_flags FROM wfe.runs WHERE run_id = $later"),
	"$trace $parent 01", 'a later version is read as W3C says: its fields kept, flags but sampled cleared');
sql("SELECT wfe.cancel_run(run_id) FROM wfe.runs WHERE finished_at IS NULL");  # the queue is for the run below

# ---- a run with secrets ---------------------------------------------------
my $run = ok_login('submitter_A', qq{SELECT run_id FROM wfe.submit('flow',
	'{"doc": {"user": "ann", "password": "S3CRET-context", "deep": [{"api_key": "S3CRET-deep"}]}}', NULL,
	'{"tenant": "A", "traceparent": "00-$trace-$parent-01"}')});
my ($r, $a, $f, $input, $tp) = split /\|/,
	ok_login('worker_A', q{SELECT run_id, attempt, fence, input, traceparent FROM wfe.claim_task('q', 'w')});
is($r, $run, 'the worker claims the run');
like($input, qr/S3CRET-context/, 'the worker receives the context unredacted');
like($input, qr/S3CRET-deep/, 'nested too');
like($tp, qr/^00-$trace-[0-9a-f]{16}-01$/, 'the claimed task carries a traceparent in the run\'s trace');
my ($span1) = $tp =~ /^00-[0-9a-f]{32}-([0-9a-f]{16})-/;
ok_login('worker_A', qq{SELECT wfe.fail_task($r, 'work', $a, $f,
	'{"code": "denied", "password": "S3CRET-error", "context": {"api_key": ["S3CRET-error-deep"]}}', false)});
is(sql("SELECT state FROM wfe.runs WHERE run_id = $run"), 'failed', 'the run failed');
# the operator's reason goes to the event log under the key "reason"
ok_login('operator_A', qq{SELECT wfe.redrive($run, 'work', 'S3CRET-reason')});
($r, $a, $f, $input, $tp) = split /\|/,
	ok_login('worker_A', q{SELECT run_id, attempt, fence, input, traceparent FROM wfe.claim_task('q', 'w')});
like($input, qr/S3CRET-context/, 'the redriven attempt receives the context unredacted');
my ($span2) = $tp =~ /^00-$trace-([0-9a-f]{16})-01$/;
ok(defined $span2 && $span2 ne $span1, 'the new attempt has a span of its own');
ok_login('worker_A', qq{SELECT wfe.complete_task($r, 'work', $a, $f,
	'{"ok": true, "api_key": "S3CRET-result", "nested": {"password": {"v": "S3CRET-result-deep"}}}')});
is(sql("SELECT state FROM wfe.runs WHERE run_id = $run"), 'completed', 'the run completed');

# a run whose last attempt failed: the stage keeps the error whole
my $failed = ok_login('submitter_A', q{SELECT run_id FROM wfe.submit('flow', '{"doc": {}}', NULL, '{"tenant": "A"}')});
($r, $a, $f) = split /\|/, ok_login('worker_A', q{SELECT run_id, attempt, fence FROM wfe.claim_task('q', 'w')});
ok_login('worker_A', qq{SELECT wfe.fail_task($r, 'work', $a, $f, '{"code": "denied", "password": "S3CRET-last-error"}', false)});
is(sql("SELECT state FROM wfe.runs WHERE run_id = $failed"), 'failed', 'the second run failed');

# a broker queue: the dispatch envelope is what the worker receives
my $pushed = ok_login('submitter_A', q{SELECT run_id FROM wfe.submit('pushed',
	'{"doc": {"password": "S3CRET-envelope"}}', NULL, '{"tenant": "A"}')});
my $env = decode_json(sql("SELECT body FROM wfe.outbox WHERE run_id = $pushed AND kind = 'dispatch'"));
like(encode_json($env->{payload_inline}), qr/S3CRET-envelope/, 'the dispatch envelope carries the input unredacted');
my ($ptrace) = sql("SELECT trace_id || '/' || span_id FROM wfe.runs WHERE run_id = $pushed");
my ($pt, $ps) = split m{/}, $ptrace;
like($env->{traceparent}, qr/^00-$pt-[0-9a-f]{16}-01$/, 'the envelope carries the attempt\'s traceparent');
is(sql("SELECT headers ->> 'traceparent' FROM wfe.outbox WHERE run_id = $pushed AND kind = 'dispatch'"),
	$env->{traceparent}, 'and so do its AMQP headers');
like(sql("SELECT parentSpan FROM (SELECT jsonb_path_query_first(wfe.run_spans($pushed),
	'\$.resourceSpans[0].scopeSpans[0].spans[0].spanId') #>> '{}' AS parentSpan) AS x"), qr/^$ps$/,
	'a run submitted without traceparent has a trace and a span of its own');

# ---- every surface a person reads ----------------------------------------
my @secrets = qw(S3CRET-context S3CRET-deep S3CRET-error S3CRET-error-deep S3CRET-reason S3CRET-result
	S3CRET-result-deep S3CRET-last-error);
my $views = q{SELECT format('SELECT %L || '': '' || t::text FROM wfe.%I AS t', c.relname, c.relname)
  FROM pg_class AS c JOIN pg_namespace AS n ON n.oid = c.relnamespace
 WHERE n.nspname = 'wfe' AND c.relkind = 'v' AND has_table_privilege(c.oid, 'SELECT')
 ORDER BY c.relname \gexec};
my %seen;
for my $who (qw(reader_A operator_A submitter_A))
{
	my $surfaces = join("\n",
		($who eq 'submitter_A' ? () : ("SELECT event_id, type, detail FROM wfe.events WHERE run_id IN ($run, $failed);", $views)),
		(map { ("SELECT wfe.report($_);", "SELECT * FROM wfe.run_timeline($_);", "SELECT wfe.run_mermaid($_);",
				"SELECT wfe.run_spans($_);") } $run, $failed));
	my $text = ok_login($who, $surfaces);
	for my $s (@secrets)
	{
		unlike($text, qr/$s/, "$who: $s appears on no surface");
	}
	$seen{$who} = $text;
}
like($seen{reader_A}, qr/"reason": "\[redacted\]"/, 'the event row shows the operator\'s reason redacted');
like($seen{reader_A}, qr/dashboard_runs: /, 'the dashboards were read');
like($seen{reader_A}, qr/metrics: /, 'and the metrics');
like($seen{submitter_A}, qr/"api_key": "\[redacted\]"/, 'the report shows the result redacted');
like($seen{submitter_A}, qr/"wfe\.error", "value": \{"stringValue": "\{\\"code\\": \\"denied\\", \\"password\\": \\"\[redacted\]\\"\}"/,
	'the spans show the last error redacted');
like($seen{submitter_A}, qr/"ok": true/, 'what is not listed is shown');
# the projection on the outbox (what the wfe.events exchange receives)
my $projected = sql("SELECT string_agg(body::text, E'\\n') FROM wfe.outbox WHERE kind = 'event' AND run_id IN ($run, $failed)");
like($projected, qr/run\.redriven/, 'the events were projected');
unlike($projected, qr/S3CRET/, 'the projection carries no secret');
# the state itself is the run's data, which the engine and the workers need
like(sql("SELECT result::text FROM wfe.run_stages WHERE run_id = $run"), qr/S3CRET-result/,
	'the stored result is kept whole (redaction is of telemetry)');

# ---- run_spans: OTLP/JSON ------------------------------------------------
my $otlp = decode_json(ok_login('reader_A', "SELECT wfe.run_spans($run)"));
my $scope = $otlp->{resourceSpans}[0]{scopeSpans}[0];
is($scope->{scope}{name}, 'wfe', 'the instrumentation scope is wfe');
is_deeply([ map { $_->{key} } @{ $otlp->{resourceSpans}[0]{resource}{attributes} } ],
	[ 'service.name', 'service.version' ], 'the resource names the service');
my @spans = @{ $scope->{spans} };
is(scalar @spans, 3, 'a span for the run and one per attempt');
my ($root, @tries) = @spans;
is($root->{traceId}, $trace, 'the run span is in the submitter\'s trace');
is($root->{parentSpanId}, $parent, 'its parent is the submitter\'s span');
is($root->{kind}, 1, 'SPAN_KIND_INTERNAL');
is_deeply($root->{status}, { code => 1 }, 'a completed run: STATUS_CODE_OK');
is_deeply([ map { $_->{spanId} } @tries ], [ $span1, $span2 ], 'the attempt spans are those the workers were given');
is_deeply([ map { $_->{parentSpanId} } @tries ], [ ($root->{spanId}) x 2 ], 'children of the run span');
is_deeply([ map { $_->{status}{code} } @tries ], [ 2, 1 ], 'the failed attempt is an error, the second ok');
for my $s (@spans)
{
	like($s->{traceId}, qr/^[0-9a-f]{32}$/, 'traceId: 32 lowercase hex digits');
	like($s->{spanId}, qr/^[0-9a-f]{16}$/, 'spanId: 16 lowercase hex digits');
	ok(!ref $s->{startTimeUnixNano} && $s->{startTimeUnixNano} =~ /^\d{19}$/, 'startTimeUnixNano: a decimal string');
	ok($s->{endTimeUnixNano} =~ /^\d{19}$/ && $s->{endTimeUnixNano} >= $s->{startTimeUnixNano},
		'endTimeUnixNano: a decimal string, not before the start');
	ok((grep { $_->{key} eq 'wfe.run_id' && $_->{value}{intValue} eq "$run" } @{ $s->{attributes} }),
		'wfe.run_id: an intValue, as a string');
}

# ---- tenants --------------------------------------------------------------
my ($sb, undef, $eb) = login('reader_B', "SELECT wfe.run_spans($run)");
my ($sn, undef, $en) = login('reader_B', "SELECT wfe.run_spans(999999)");
is($sb, '42704', 'another tenant\'s run: 42704');
is($sn, '42704', 'as for a run that does not exist');
my ($mb) = $eb =~ /ERROR:\s+\S+\s+(.*)/;
my ($mn) = $en =~ /ERROR:\s+\S+\s+(.*)/;
is($mb =~ s/\d+/N/gr, $mn =~ s/\d+/N/gr, 'with the same message');

done_testing();
