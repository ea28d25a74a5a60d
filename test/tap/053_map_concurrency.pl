# Keyed concurrency on map elements, and a redrive bounded by max_concurrency
# (dsl.md "Map", operations.md "Keyed concurrency", issue 22).
#
# 1. Bad input: an item's concurrency.max of 0 -- 22023 from
#    wfe.create_definition naming concurrency.max; a key reading an unknown
#    root; concurrency on an item that runs a child workflow.
# 2. End to end, as real logins: two maps (two runs) whose elements share
#    the key value c1 (max 1) and a plain stage of a third run keyed on c1
#    too: never more than one of them runs at once; the others are held
#    (queued, in dashboard_stuck) and each end releases the next in its own
#    transaction -- the background worker's poll interval is an hour, so
#    nothing polls.  A map failing past tolerated_failures cancels its
#    elements, and that frees their key for the held ones of other runs.
# 3. The attacks: tenant B's elements with the same key value have their
#    own slots; a key of 100,000 bytes from an item is stored as its digest.
# 4. A redrive of a failed element while its map runs waits for a slot of
#    max_concurrency: the map never has more elements under way.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use WfeLogin;
use WfeNode;

my $node = WfeNode::node('wfe_map_concurrency', preload => 1, conf => "wfe.poll_interval_ms = 3600000\n");
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
SELECT wfe.register_worker('tap.mc@1', 'mq');
SELECT wfe.grant_queue('worker', 'mq');});

# a map over context.parts whose item has CONCURRENCY, with EXTRA map keys (YAML)
sub map_source
{
	my ($name, $concurrency, $extra) = @_;
	$extra //= '';
	return qq{
name: $name
version: "1.0.0"
entry: m
stages:
  - name: m
    type: map
    items: "\${context.parts}"
$extra
    item:
      worker: tap.mc\@1
      queue: mq
      input: { part: "\${item}" }
      retry: { max_attempts: 1 }
      concurrency: $concurrency
    on_success: completed
    on_failure: failed
};
}

sub define
{
	my ($name, $src) = @_;
	sql('SELECT wfe.create_definition($y$' . $src . '$y$);'
		  . qq{SELECT wfe.approve('$name', '1.0.0'); SELECT wfe.activate('$name', '1.0.0');});
}

# --- 1. bad input -----------------------------------------------------------
my ($st, undef, $err) = login('postgres',
	'SELECT wfe.create_definition($y$' . map_source('bad', '{key: "${item.customer}", max: 0}') . '$y$)');
is($st, '22023', "create_definition refuses an item's concurrency max 0 with 22023");
like($err, qr{/stages/0/item/concurrency/max.*concurrency\.max must be between 1|concurrency\.max must be between 1},
	'... naming concurrency.max');
for my $case (['{key: "${nowhere.customer}", max: 1}', 'expr.unknown_root', 'a key reading an unknown root'],
	['{key: "${item.customer}", max: many}', 'schema.type', 'a max that is not an integer'])
{
	my $codes = sql(q{SELECT string_agg(d ->> 'code' || ' ' || (d ->> 'path'), ', ')
	  FROM jsonb_array_elements(wfe.compile($y$} . map_source('bad', $case->[0]) . q{$y$) -> 'diagnostics') AS d});
	like($codes, qr{\Q$case->[1]\E /stages/0/item/concurrency}, "$case->[2]: $case->[1] ($codes)");
}
my $child = sql(q{SELECT string_agg(d ->> 'code' || ' ' || (d ->> 'path'), ', ')
  FROM jsonb_array_elements(wfe.compile($y$
name: bad
version: "1.0.0"
entry: m
stages:
  - name: m
    type: map
    items: "${context.parts}"
    item: { workflow: other, concurrency: { key: "${item}", max: 1 } }
    on_success: completed
    on_failure: failed
$y$) -> 'diagnostics') AS d});
like($child, qr{schema\.value /stages/0/item/concurrency}, 'an item running a child workflow has no concurrency');
is(sql(q{SELECT count(*) FROM wfe.definitions WHERE workflow = 'bad'}), '0', 'no bad definition was stored');

# --- 2. end to end -----------------------------------------------------------
define('per-customer', map_source('per-customer', '{key: "${item.customer}", max: 1}'));
define('one-stage', q{
name: one-stage
version: "1.0.0"
entry: a
stages:
  - name: a
    type: worker
    queue: mq
    worker: tap.mc@1
    retry: { max_attempts: 1 }
    concurrency: { key: "${context.customer}", max: 1 }
    on_success: completed
    on_failure: failed
});

my $parts = '{"parts": [{"customer": "c1", "n": 0}, {"customer": "c1", "n": 1}, {"customer": "c2", "n": 2}]}';
my @runs = map {
	ok_login('submitter_a', qq{SELECT run_id FROM wfe.submit('per-customer', '$parts', NULL, '{"tenant": "A"}')})
} 1 .. 2;
push @runs, ok_login('submitter_a', q{SELECT run_id FROM wfe.submit('one-stage', '{"customer": "c1"}', NULL, '{"tenant": "A"}')});
is(sql("SELECT string_agg(DISTINCT concurrency_key || ' ' || concurrency_max, ',' ORDER BY concurrency_key || ' ' || concurrency_max)"
	  . " FROM wfe.run_stages WHERE run_id IN ($runs[0], $runs[1]) AND element IS NOT NULL"),
	'c1 1,c2 1', 'each element row carries its own bound key and max');

# the tasks a claim of up to N got, as "run_id stage attempt fence" lines
sub claim
{
	my ($n) = @_;
	my $out = ok_login('worker',
		qq{SELECT run_id || ' ' || stage || ' ' || attempt || ' ' || fence FROM wfe.claim_task('mq', 'w', $n)});
	return grep { /\S/ } split /\n/, $out;
}

# tenant A's work of key c1: "running held ready"
sub c1
{
	return sql(q{SELECT count(*) FILTER (WHERE st.state = 'running') || ' '
	  || count(*) FILTER (WHERE st.state = 'queued' AND st.held_until = 'infinity') || ' '
	  || count(*) FILTER (WHERE st.state = 'queued' AND st.held_until IS NULL)
	  FROM wfe.run_stages AS st WHERE st.tenant = 'A' AND st.concurrency_key = 'c1'});
}

my @got = claim(10);
is(scalar(@got), 2, 'a claim of 10 gets two: one of c1 (max 1, over two maps and a stage) and one of c2');
is(c1(), '1 4 0', 'one of c1 runs, the other four are held (queued, out of the ready index)');
my $stuck = ok_login('reader_a',
	q{SELECT stage || ': ' || detail FROM wfe.dashboard_stuck WHERE problem = 'concurrency limited' ORDER BY run_id, stage});
is(scalar(grep { /^m\[\d\]: key full: 1 in flight$/ } split /\n/, $stuck), 4,
	'dashboard_stuck shows the held elements (3 of c1, 1 of c2), and why') or diag($stuck);
like($stuck, qr/^a: key full: 1 in flight$/m, '... and the held stage of the same key');
is(scalar(claim(10)), 0, 'a claim finds nothing ready');

# the running task of key c1
sub running_c1
{
	return sql(q{SELECT st.run_id || ' ' || st.stage || ' ' || st.attempt || ' ' || st.fence
	  FROM wfe.run_stages AS st WHERE st.tenant = 'A' AND st.concurrency_key = 'c1' AND st.state = 'running'});
}

my $max_seen = 0;
for my $k (1 .. 4)
{
	my ($r, $s, $at, $f) = split / /, running_c1();
	is(ok_login('worker', "SELECT wfe.complete_task($r, '$s', $at, $f, '{}')"), 'accepted', "c1's task $s completes");
	is(c1(), '0 ' . (4 - $k) . ' 1', "its transaction made exactly one held task of c1 ready ($k)");
	@got = claim(10);
	my $c1 = (split / /, c1())[0];
	$max_seen = $c1 if $c1 > $max_seen;
}
my ($r, $s, $at, $f) = split / /, running_c1();
ok_login('worker', "SELECT wfe.complete_task($r, '$s', $at, $f, '{}')");
is($max_seen, 1, 'never more than one task of c1 ran, over two maps and a stage');
is(c1(), '0 0 0', 'all five of c1 ran');
for my $t (split /\n/, sql(q{SELECT run_id || ' ' || stage || ' ' || attempt || ' ' || fence FROM wfe.run_stages
	WHERE tenant = 'A' AND state = 'running'}))
{
	my ($r, $s, $at, $f) = split / /, $t;
	ok_login('worker', "SELECT wfe.complete_task($r, '$s', $at, $f, '{}')");
}
@got = claim(10);
for my $t (@got)
{
	my ($r, $s, $at, $f) = split / /, $t;
	ok_login('worker', "SELECT wfe.complete_task($r, '$s', $at, $f, '{}')");
}
is(sql("SELECT string_agg(state, ' ' ORDER BY run_id) FROM wfe.runs WHERE run_id IN ($runs[0], $runs[1], $runs[2])"),
	'completed completed completed', 'the three runs completed');

# a map that fails past tolerated_failures cancels its elements: their key is free for other runs
my $f1 = ok_login('submitter_a',
	q{SELECT run_id FROM wfe.submit('per-customer', '{"parts": [{"customer": "c3"}, {"customer": "c4"}]}', NULL, '{"tenant": "A"}')});
my $f2 = ok_login('submitter_a',
	q{SELECT run_id FROM wfe.submit('per-customer', '{"parts": [{"customer": "c4"}]}', NULL, '{"tenant": "A"}')});
@got = claim(10);
is(scalar(@got), 2, "c3 and c4 of the first run claimed; the second run's c4 is held");
my ($t3) = grep { /^$f1 m\[0\] / } @got;
($r, $s, $at, $f) = split / /, $t3;
is(ok_login('worker', "SELECT wfe.fail_task($r, '$s', $at, $f, '{\"code\": \"bad\"}', false)"), 'accepted',
	'the first run\'s c3 element fails for good');
is(sql("SELECT st.state || ' ' || (st.held_until IS NULL) FROM wfe.run_stages AS st WHERE st.run_id = $f2 AND st.stage = 'm[0]'"),
	'queued true', "the map failed, its c4 element was cancelled, and that made the other run's c4 ready at once");
is(sql("SELECT state FROM wfe.run_stages WHERE run_id = $f1 AND stage = 'm[1]'"), 'cancelled', '(cancelled)');
($r, $s, $at, $f) = split / /, (claim(10))[0];
ok_login('worker', "SELECT wfe.complete_task($r, '$s', $at, $f, '{}')");

# --- 3. the attacks ----------------------------------------------------------
# A's c1 full again; B's elements with the same key value are B's own
my $a1 = ok_login('submitter_a',
	q{SELECT run_id FROM wfe.submit('per-customer', '{"parts": [{"customer": "c1"}, {"customer": "c1"}]}', NULL, '{"tenant": "A"}')});
is(scalar(claim(10)), 1, "A's c1: one claimed, one held");
my $b1 = ok_login('submitter_b',
	q{SELECT run_id FROM wfe.submit('per-customer', '{"parts": [{"customer": "c1"}, {"customer": "c1"}]}', NULL, '{"tenant": "B"}')});
@got = claim(10);
is(scalar(@got), 1, "tenant B's c1 gets its own slot beside A's full c1");
like($got[0], qr/^$b1 /, "... B's");
is(c1(), '1 1 0', "A's c1 unchanged: one running, one held");
is(ok_login('reader_b', q{SELECT count(*) FROM wfe.run_stages WHERE concurrency_key IS NOT NULL AND tenant = 'A'}),
	'0', "B's reader sees none of A's element keys");

# a key of 100,000 bytes from an item: stored as its digest
my $huge = ok_login('submitter_b',
	q{SELECT run_id FROM wfe.submit('per-customer', jsonb_build_object('parts', jsonb_build_array(jsonb_build_object('customer', repeat('x', 100000)))), NULL, '{"tenant": "B"}')});
is(sql("SELECT concurrency_key = 'sha256:' || encode(sha256(convert_to(repeat('x', 100000), 'UTF8')), 'hex') FROM wfe.run_stages WHERE run_id = $huge AND stage = 'm[0]'"),
	't', "an element's 100,000-byte key is kept as its 71-byte SHA-256 digest");
is(scalar(grep { /^$huge / } claim(10)), 1, 'and the element is claimed like any other');

# --- 4. a redrive bounded by max_concurrency ----------------------------------
define('bounded', map_source('bounded', '{key: "${item.k}", max: 5}', "    max_concurrency: 1\n    tolerated_failures: 1"));
my $bd = ok_login('submitter_a',
	q{SELECT run_id FROM wfe.submit('bounded', '{"parts": [{"k": "r0"}, {"k": "r1"}, {"k": "r2"}]}', NULL, '{"tenant": "A"}')});

# the bounded map's elements under way (queued or running), and their names
sub under_way
{
	return sql("SELECT count(*) || ':' || coalesce(string_agg(stage, ',' ORDER BY stage), '') FROM wfe.run_stages"
		  . " WHERE run_id = $bd AND element IS NOT NULL AND state IN ('queued', 'dispatched', 'running')");
}

sub claim_bd
{
	my ($t) = grep { /^$bd / } claim(10);
	return split / /, $t // '';
}

($r, $s, $at, $f) = claim_bd();
is($s, 'm[0]', 'max_concurrency 1: m[0] is claimed');
is(ok_login('worker', "SELECT wfe.fail_task($r, '$s', $at, $f, '{\"code\": \"bad\"}', false)"), 'accepted',
	'm[0] fails for good (tolerated)');
is(under_way(), '1:m[1]', 'm[1] is released in its place');
ok_login('operator_a', "SELECT wfe.redrive($bd, 'm[0]', 'tap')");
is(under_way(), '1:m[1]', 'm[0] redriven while m[1] runs: it waits for the slot, one element under way');
is(sql("SELECT state FROM wfe.run_stages WHERE run_id = $bd AND stage = 'm[0]'") . ' '
	  . sql("SELECT held FROM wfe.run_maps WHERE run_id = $bd"), 'waiting 1', '... waiting, counted held');
($r, $s, $at, $f) = claim_bd();
is($s, 'm[1]', 'm[1] is claimed');
ok_login('worker', "SELECT wfe.complete_task($r, '$s', $at, $f, '{}')");
is(under_way(), '1:m[0]', "m[1]'s end releases the held m[0] before m[2]");
($r, $s, $at, $f) = claim_bd();
is("$s $at", 'm[0] 2', 'm[0] runs its second attempt');
ok_login('worker', "SELECT wfe.complete_task($r, '$s', $at, $f, '{\"again\": true}')");
is(under_way(), '1:m[2]', 'then m[2]');
($r, $s, $at, $f) = claim_bd();
ok_login('worker', "SELECT wfe.complete_task($r, '$s', $at, $f, '{}')");
is(sql("SELECT state || ' ' || (SELECT result::text FROM wfe.run_stages WHERE run_id = $bd AND stage = 'm') FROM wfe.runs WHERE run_id = $bd"),
	'completed {"items": [{"again": true}, {}, {}], "failed": []}', 'the map and the run complete, m[0] counted');

$node->stop;
done_testing();
