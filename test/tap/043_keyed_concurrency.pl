# Keyed concurrency (operations.md "Flow control", dsl.md "Flow-control keys").
#
# 1. Bad input: concurrency.max below 1 (or not an integer), a key that
#    interpolates nothing, a key reading an unknown root -- compile
#    diagnostics, and 22023 from wfe.create_definition naming concurrency.max.
# 2. End to end, as real logins: a tenant's runs for customer c1 (max 2)
#    and c2: a claim takes two of c1 and the one of c2, and holds the rest
#    (queued, shown in dashboard_stuck); a completion, a failure and a
#    cancellation each release one held attempt in their own transaction
#    -- the background worker's poll interval is an hour, so nothing polls
#    -- and never more than two of c1 run.  A key that fails to bind is the
#    stage's binding failure.
# 3. The attacks: tenant B's runs with the same key value neither wait for
#    tenant A's full key nor take its slots; B's reader sees none of A's
#    keys or held work, and no wfe role reads wfe.concurrency_recheck
#    (refused, nothing changed); a key of 100,000 bytes from a run's input
#    is stored as its 71-byte digest and the run goes on.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use WfeLogin;
use WfeNode;

my $node = WfeNode::node('wfe_keyed_concurrency', preload => 1, conf => "wfe.poll_interval_ms = 3600000\n");
WfeNode::worker_runs($node, rounds => 0);

sub sql { return $node->safe_psql('postgres', $_[0]); }

# psql as a login: (SQLSTATE or '', stdout, stderr)
sub login
{
	my $r = WfeLogin::as_login($node, @_, strict => 1);
	return ($r->{state}, $r->{out}, $r->{err});
}

# ok_login(ROLE, SQL): WfeLogin::ok_login on this node
sub ok_login { return WfeLogin::ok_login($node, @_); }

WfeNode::tenant_logins($node, [qw(A B)], qw(submitter reader operator));
WfeNode::logins($node, worker => 'wfe_worker');
sql(q{
SELECT wfe.register_worker('tap.kc@1', 'kq');
SELECT wfe.grant_queue('worker', 'kq');});

# a definition whose stage has CONCURRENCY (YAML)
sub source
{
	my ($name, $concurrency) = @_;
	return qq{
name: $name
version: "1.0.0"
entry: a
stages:
  - name: a
    type: worker
    queue: kq
    worker: tap.kc\@1
    input: { tag: t }
    retry: { max_attempts: 1 }
    concurrency: $concurrency
    on_success: completed
    on_failure: failed
};
}

# --- 1. bad input -----------------------------------------------------------
my $diags = sql(q{SELECT string_agg(d ->> 'code' || ' ' || (d ->> 'path') || ': ' || (d ->> 'message'), E'\n')
  FROM jsonb_array_elements(wfe.compile($y$} . source('bad', '{key: "${context.customer}", max: 0}') . q{$y$) -> 'diagnostics') AS d});
like($diags, qr{^schema\.value /stages/0/concurrency/max: concurrency\.max must be between 1 and \d+, not 0$}m,
	'max 0: schema.value at /stages/0/concurrency/max');
my ($st, undef, $err) = login('postgres',
	'SELECT wfe.create_definition($y$' . source('bad', '{key: "${context.customer}", max: 0}') . '$y$)');
is($st, '22023', 'create_definition refuses max 0 with 22023');
like($err, qr/concurrency\.max must be between 1/, '... naming concurrency.max');
for my $case (['{key: "${context.customer}", max: many}', 'schema.type', 'a max that is not an integer'],
	['{key: "everyone", max: 1}', 'schema.value', 'a key that interpolates nothing'],
	['{key: "${nowhere.x}", max: 1}', 'expr.unknown_root', 'a key reading an unknown root'],
	['{max: 1}', 'schema.required', 'no key'],
	['[c, 1]', 'schema.type', 'not a mapping'])
{
	my $codes = sql(q{SELECT string_agg(d ->> 'code', ' ')
	  FROM jsonb_array_elements(wfe.compile($y$} . source('bad', $case->[0]) . q{$y$) -> 'diagnostics') AS d});
	like($codes, qr/\b\Q$case->[1]\E\b/, "$case->[2]: $case->[1]");
}
is(sql(q{SELECT count(*) FROM wfe.definitions WHERE workflow = 'bad'}), '0', 'no bad definition was stored');

# --- 2. end to end -----------------------------------------------------------
sql('SELECT wfe.create_definition($y$' . source('per-customer', '{key: "${context.customer}", max: 2}') . '$y$);'
	  . q{SELECT wfe.approve('per-customer', '1.0.0'); SELECT wfe.activate('per-customer', '1.0.0');});

my @a = map {
	ok_login('submitter_a', qq{SELECT run_id FROM wfe.submit('per-customer', '{"customer": "$_"}', NULL, '{"tenant": "A"}')})
} (('c1') x 5, 'c2');

# the tasks a claim of up to N got, as "run_id stage attempt fence" lines
sub claim
{
	my ($n) = @_;
	my $out = ok_login('worker',
		qq{SELECT run_id || ' ' || stage || ' ' || attempt || ' ' || fence FROM wfe.claim_task('kq', 'w', $n)});
	return grep { /\S/ } split /\n/, $out;
}

sub state
{
	return sql(q{SELECT count(*) FILTER (WHERE st.state = 'running' AND r.context ->> 'customer' = 'c1') || ' '
	  || count(*) FILTER (WHERE st.state = 'queued' AND st.held_until = 'infinity') || ' '
	  || count(*) FILTER (WHERE st.state = 'queued' AND st.held_until IS NULL)
	  FROM wfe.run_stages AS st JOIN wfe.runs AS r USING (run_id) WHERE r.tenant = 'A'});
}

my @got = claim(10);
is(scalar(@got), 3, 'a claim of 10 gets three: two of c1 (max 2) and the one of c2');
is(state(), '2 3 0', 'two of c1 run, three are held (queued, out of the ready index)');
my $stuck = ok_login('reader_a',
	q{SELECT problem || ': ' || detail FROM wfe.dashboard_stuck WHERE problem = 'concurrency limited' ORDER BY run_id});
is(scalar(grep { /^concurrency limited: key full: 2 in flight$/ } split /\n/, $stuck),
	3, 'dashboard_stuck shows the three held, and why');
is(scalar(claim(10)), 0, 'a claim finds nothing ready: the held are not walked over');

# the running tasks of c1, by run
sub running_c1
{
	return split /\n/, sql(q{SELECT st.run_id || ' ' || st.stage || ' ' || st.attempt || ' ' || st.fence
	  FROM wfe.run_stages AS st JOIN wfe.runs AS r USING (run_id)
	 WHERE r.tenant = 'A' AND r.context ->> 'customer' = 'c1' AND st.state = 'running' ORDER BY st.run_id});
}

my ($r, $s, $at, $f) = split / /, (running_c1())[0];
is(ok_login('worker', "SELECT wfe.complete_task($r, '$s', $at, $f, '{}')"), 'accepted', 'a c1 task completes');
is(state(), '1 2 1', 'its transaction made one held attempt ready');
is(scalar(claim(10)), 1, 'the next claim takes it');
is(state(), '2 2 0', 'two of c1 run again');

($r, $s, $at, $f) = split / /, (running_c1())[0];
is(ok_login('worker', "SELECT wfe.fail_task($r, '$s', $at, $f, '{\"e\": 1}', false)"), 'accepted', 'a c1 task fails');
is(state(), '1 1 1', 'a failure releases one');
is(scalar(claim(10)), 1, 'claimed');

($r) = split / /, (running_c1())[0];
ok_login('operator_a', "SELECT wfe.cancel_run($r, 'tap')");
is(state(), '1 0 1', 'a cancellation releases the last held one');
is(scalar(claim(10)), 1, 'claimed');
is(state(), '2 0 0', 'never more than two of c1 ran');

# a key that fails to bind: the stage's binding failure
my $nokey = ok_login('submitter_a', q{SELECT run_id FROM wfe.submit('per-customer', '{}', NULL, '{"tenant": "A"}')});
is(sql("SELECT r.state || ' ' || st.state || ' ' || (st.error ->> 'code') || ' ' || (st.error ->> 'message' LIKE 'concurrency.key:%')
  FROM wfe.runs AS r JOIN wfe.run_stages AS st USING (run_id) WHERE r.run_id = $nokey"),
	'failed failed binding.missing true', 'a key that fails to bind fails the stage at release');

# --- 3. the attacks ----------------------------------------------------------
# A's key c1 is full (two running); B's runs with the same key value are B's own
my @b = map {
	ok_login('submitter_b', q{SELECT run_id FROM wfe.submit('per-customer', '{"customer": "c1"}', NULL, '{"tenant": "B"}')})
} 1 .. 3;
@got = claim(10);
is(scalar(@got), 2, "tenant B's c1 gets its own two slots beside A's full c1");
is(state(), '2 0 0', "... and A's c1 is unchanged");
is(sql(q{SELECT count(*) FROM wfe.run_stages WHERE tenant = 'B' AND held_until = 'infinity'}), '1',
	"B's third is held by B's key");
is(ok_login('reader_b', q{SELECT count(*) FROM wfe.run_stages WHERE concurrency_key IS NOT NULL AND tenant = 'A'}),
	'0', "B's reader sees none of A's keys");
is(ok_login('reader_b', q{SELECT count(*) FROM wfe.dashboard_stuck WHERE run_id IN (SELECT run_id FROM wfe.runs WHERE tenant = 'A')}),
	'0', "... nor A's held work");
sql(q{INSERT INTO wfe.concurrency_recheck (queue, tenant, key, max) VALUES ('kq', 'A', 'c1', 2)});
for my $role (qw(reader_b operator_b submitter_b worker))
{
	($st) = login($role, q{SELECT * FROM wfe.concurrency_recheck});
	is($st, '42501', "$role cannot read wfe.concurrency_recheck");
	($st) = login($role, q{DELETE FROM wfe.concurrency_recheck});
	is($st, '42501', "$role cannot empty it");
}
is(sql(q{SELECT count(*) FROM wfe.concurrency_recheck}), '1', 'nothing changed');
sql(q{DELETE FROM wfe.concurrency_recheck});

# a key of 100,000 bytes from a run's input: stored as its digest
my $huge = ok_login('submitter_b',
	q{SELECT run_id FROM wfe.submit('per-customer', jsonb_build_object('customer', repeat('x', 100000)), NULL, '{"tenant": "B"}')});
is(sql("SELECT concurrency_key ~ '^sha256:[0-9a-f]{64}\$' AND concurrency_key = 'sha256:' || encode(sha256(convert_to(repeat('x', 100000), 'UTF8')), 'hex') FROM wfe.run_stages WHERE run_id = $huge"),
	't', 'a 100,000-byte key is kept as its 71-byte SHA-256 digest');
is(scalar(grep { /^$huge / } claim(10)), 1, 'and its run is claimed like any other');

$node->stop;
done_testing();
