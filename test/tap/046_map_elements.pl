# Map elements as units of work of their own, seen from outside (issue 22
# item 2 and the visibility of item 5; runtime.md "Map elements", dsl.md
# "Flow-control keys"), with the background worker and real logins:
#
# - the result cache per element: one element's entry answers an element
#   of the same input in another run, never one of another input;
# - flow-control keys per element: a map item's `rate_limit` with a key
#   bound from `item` gives each element the bucket of its own key value
#   (two elements of one key: the second is held; another key's goes), and
#   an unkeyed one is one bucket for every element;
# - wfe.report's map entry counts its elements by state, and run_mermaid's
#   map node shows them, as a reader of the run's tenant reads them;
# - attacks, each asserting the refusal and that nothing changed: accept,
#   heartbeat, fail, complete_tasks and ack_cancel naming an element that
#   is not one (bad index, the map's own name), a signal named like an
#   element, and another tenant's reader, operator and worker on the map
#   run (its report, picture, timeline, counter row, elements, cancel, a
#   report with the element's real fence, a claim).
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use WfeLogin;
use WfeNode;

my $node = WfeNode::node('wfe_map_elements', preload => 1, conf => "wfe.poll_interval_ms = 100\n");
sub sql { return $node->safe_psql('postgres', $_[0]); }

# login(ROLE, SQL): run SQL as login ROLE; (SQLSTATE or '', stdout)
sub login
{
	my $r = WfeLogin::as_login($node, @_);
	return ($r->{state}, $r->{out});
}

WfeNode::logins($node,
	worker_a => 'wfe_worker A',
	worker_b => 'wfe_worker B',
	reader_a => 'wfe_reader A',
	reader_b => 'wfe_reader B',
	operator_b => 'wfe_operator B');
sql(q{SELECT wfe.register_worker('lod@1', 'lods', '{"type": "object"}', '{"type": "object"}');
SELECT wfe.register_signal('go@1');
SELECT wfe.configure_rate_limit('per_lod', 0.0001, 1);
SELECT wfe.configure_rate_limit('shared', 0.0001, 2);
SELECT wfe.grant_queue('worker_a', 'lods');});

# define(NAME, RATE_LIMIT): a map over context.lods whose item takes RATE_LIMIT
sub define
{
	my ($name, $rate) = @_;
	WfeNode::workflow($node, <<"YAML");
name: $name
version: "1.0.0"
entry: render
stages:
  - name: render
    type: map
    items: "\${context.lods}"
    tolerated_failures: 1
    item:
      worker: lod\@1
      queue: lods
      input: { lod: "\${item}", index: "\${item_index}" }
      retry: { max_attempts: 1 }
      rate_limit: $rate
    on_success: completed
    on_failure: failed
YAML
}
define('keyed', '{ name: per_lod, key: "${item}" }');
define('unkeyed', 'shared');

sub submit
{
	my ($wf, $ctx, $tenant) = @_;
	$tenant //= 'A';
	return sql(qq{SELECT run_id FROM wfe.submit('$wf', '$ctx', NULL, '{"tenant": "$tenant"}')});
}

# claim(ROLE, N): [run_id, stage, attempt, fence, input] of up to N tasks
sub claim
{
	my ($role, $n) = @_;
	my (undef, $out) = login($role,
		"SELECT run_id || ' ' || stage || ' ' || attempt || ' ' || fence || ' ' || input::text"
		  . " FROM wfe.claim_task('lods', '$role', $n)");
	return sort { $a->[1] cmp $b->[1] } map { [ split / /, $_, 5 ] } grep { length } split /\n/, $out;
}

sub elements
{
	my ($run, $col) = @_;
	return sql("SELECT string_agg(stage || ':' || coalesce(${col}::text, '-'), ',' ORDER BY element)"
		  . " FROM wfe.run_stages WHERE run_id = $run AND element IS NOT NULL");
}

# --- 1. flow-control keys of its own per element ------------------------
my $keyed = submit('keyed', '{"lods": ["hi", "hi", "lo", "mid"]}');
is(elements($keyed, 'rate_limit'), 'render[0]:per_lod,render[1]:per_lod,render[2]:per_lod,render[3]:per_lod',
	'every element takes its tokens from the item\'s rate limit');
is(elements($keyed, 'rate_key'), 'render[0]:hi,render[1]:hi,render[2]:lo,render[3]:mid',
	'each element\'s key is bound from its own item');
my @t = claim('worker_a', 10);
is(join(',', map { $_->[1] } @t), 'render[0],render[2],render[3]',
	'one token per key value: render[1] shares "hi" with render[0] and is held; "lo" and "mid" go');
is(sql("SELECT state || ' ' || (held_until IS NOT NULL) FROM wfe.run_stages WHERE run_id = $keyed AND stage = 'render[1]'"),
	'queued true', 'render[1] stays queued, held until its bucket refills');
is(sql("SELECT count(*) FROM wfe.run_stages WHERE run_id = $keyed AND element IS NOT NULL AND held_until IS NOT NULL"),
	'1', '... and it alone');

my $unkeyed = submit('unkeyed', '{"lods": ["a", "b", "c", "d"]}');
is(elements($unkeyed, 'rate_key'), 'render[0]:-,render[1]:-,render[2]:-,render[3]:-',
	'an unkeyed rate limit binds no key');
my @u = claim('worker_a', 10);
is(scalar(@u), 2, 'an unkeyed rate limit is one bucket for every element: its burst (2) goes, no more');
is(sql("SELECT count(*) FROM wfe.run_stages WHERE run_id = $unkeyed AND element IS NOT NULL AND held_until IS NOT NULL"),
	'2', 'the other two are held');

# the result cache: each element under the key of its own input
WfeNode::workflow($node, <<'YAML');
name: cached
version: "1.0.0"
entry: render
stages:
  - name: render
    type: map
    items: "${context.lods}"
    item:
      worker: lod@1
      queue: lods
      input: { lod: "${item}" }
      cache: { ttl_ms: 600000 }
    on_success: completed
    on_failure: failed
YAML
my $c1 = submit('cached', '{"lods": ["p", "q"]}');
for my $t (grep { $_->[0] == $c1 } claim('worker_a', 10))
{
	my ($lod) = $t->[4] =~ /"lod": "(\w+)"/;
	login('worker_a', "SELECT wfe.complete_task($t->[0], '$t->[1]', $t->[2], $t->[3], '{\"url\": \"$lod\"}')");
}
is(sql("SELECT state FROM wfe.runs WHERE run_id = $c1"), 'completed', 'a cached map ran its elements and completed');
my $c2 = submit('cached', '{"lods": ["q", "r", "p"]}');
is(elements($c2, 'state'), 'render[0]:completed,render[1]:queued,render[2]:completed',
	'another run: the elements whose own input has an entry complete from it, "r" runs');
is(elements($c2, 'attempt'), 'render[0]:0,render[1]:1,render[2]:0', '... the hits without an attempt');
is(sql("SELECT count(DISTINCT cache_key) FROM wfe.run_stages WHERE run_id = $c2 AND element IS NOT NULL"), '3',
	'each element has a key of its own');
my ($r1) = grep { $_->[0] == $c2 } claim('worker_a', 10);
login('worker_a', "SELECT wfe.complete_task($r1->[0], '$r1->[1]', $r1->[2], $r1->[3], '{\"url\": \"r\"}')");
is(sql("SELECT result::text FROM wfe.run_stages WHERE run_id = $c2 AND stage = 'render'"),
	'{"items": [{"url": "q"}, {"url": "r"}, {"url": "p"}], "failed": []}',
	'the aggregation holds the cached results in element order');

# --- 2. counts in the report and the picture, as the tenant's reader ------
login('worker_a', "SELECT wfe.complete_task($t[0][0], '$t[0][1]', $t[0][2], $t[0][3], '{\"ok\": 0}')");
login('worker_a', "SELECT wfe.fail_task($t[1][0], '$t[1][1]', $t[1][2], $t[1][3], '{\"code\": \"bad\"}', false)");
my ($st, $out) = login('reader_a', "SELECT s -> 'elements' FROM jsonb_array_elements(wfe.report($keyed) -> 'stages') AS s"
	  . " WHERE s ->> 'stage' = 'render'");
is("$st|$out",
	'|{"items": 4, "failed": 1, "queued": 1, "running": 1, "skipped": 0, "waiting": 0, "released": 4, '
	  . '"cancelled": 0, "completed": 1, "timed_out": 0, "dispatched": 0, "retry_scheduled": 0}',
	'report: the map\'s elements counted by state (one completed, one failed, one running, one held queued)');
($st, $out) = login('reader_a', "SELECT l FROM regexp_split_to_table(wfe.run_mermaid($keyed), E'\\n') AS l"
	  . " WHERE l LIKE '  s0[/%'");
like($out, qr{<br/><b>4 elements</b>: 1 completed, 1 failed, 1 running, 1 queued"/\]$},
	'run_mermaid: the map node shows its element counts');

# --- 3. attacks: names that are not elements ------------------------------
my $run = submit('unkeyed', '{"lods": ["x", "y"]}');
sql("SELECT wfe.configure_rate_limit('shared', 1000, 100)");
sql("UPDATE wfe.run_stages SET held_until = NULL WHERE held_until IS NOT NULL");
my ($e0) = grep { $_->[0] == $run } claim('worker_a', 10);
ok($e0, "an element of run $run claimed");
my $snapshot = join(" || '#' || ",
	map { "coalesce((SELECT string_agg(x::text, ',' ORDER BY x::text) FROM wfe.$_ AS x WHERE x.run_id = $run), '')" }
	  qw(runs run_stages run_maps timers signals));
my $before = sql("SELECT $snapshot");
my $events = sql("SELECT count(*) FROM wfe.events WHERE run_id = $run AND type NOT LIKE 'callback.%'");
my ($r, $a, $f) = @$e0[ 0, 2, 3 ];
for my $name ('render[9]', 'render[00]', 'render', 'render[+1]', 'render[0]x')
{
	for my $call ("wfe.accept_task($r, '$name', $a, $f, 'worker_a')", "wfe.heartbeat($r, '$name', $a, $f)",
		"wfe.fail_task($r, '$name', $a, $f, '{\"code\": \"x\"}', false)", "wfe.ack_cancel($r, '$name', $a, $f)")
	{
		my ($s, $o) = login('worker_a', "SELECT $call");
		ok($s ne '' || $o =~ /^(unknown|stale|refused|false|f)$/, "$call: refused ($s$o)");
	}
	my ($s, $o) = login('worker_a', "SELECT outcome FROM wfe.complete_tasks('[{\"run_id\": $r, \"stage\": \"$name\", "
		  . "\"attempt\": $a, \"fence\": $f, \"result\": {}}]')");
	is("$s|$o", '|unknown', "complete_tasks about '$name': unknown");
}
my ($s, $o) = login('postgres', "SELECT wfe.signal($r, 'render[0]', '{}')");
is($s, '22023', 'a signal named like an element: 22023 (the run waits for no such signal)');
is(sql("SELECT $snapshot"), $before, 'after every refused call, nothing of the run changed');
is(sql("SELECT count(*) FROM wfe.events WHERE run_id = $run AND type NOT LIKE 'callback.%'"), $events,
	'... and no event but the refusals\' callback.* ones');

# --- 4. attacks: another tenant on the map run ----------------------------
for my $q ("wfe.report($run)", "wfe.run_mermaid($run)", "wfe.run_timeline($run)")
{
	($s, $o) = login('reader_b', "SELECT $q");
	is($s, '42704', "tenant B's reader: $q is a run that does not exist");
}
($s, $o) = login('reader_b', "SELECT count(*) FROM wfe.run_maps WHERE run_id = $run");
is("$s|$o", '|0', "tenant B's reader sees no counter row of A's map");
($s, $o) = login('reader_b', "SELECT count(*) FROM wfe.run_stages WHERE run_id = $run");
is("$s|$o", '|0', '... nor any of its elements');
($s, $o) = login('operator_b', "SELECT wfe.cancel_run($run, 'not yours')");
is("$s|$o", '|unknown', "tenant B's operator cancelling A's map run: unknown (no existence oracle)");
# a queue grant serves every tenant (036): tenant B's worker, not granted A's queue
($s, $o) = login('worker_b', "SELECT wfe.complete_task($r, '$e0->[1]', $a, $f, '{}')");
is("$s|$o", '|unknown', "tenant B's worker reporting A's element with its real fence: unknown");
($s, $o) = login('worker_b', "SELECT count(*) FROM wfe.claim_task('lods', 'worker_b', 10)");
isnt($s, '', "tenant B's worker cannot claim A's elements ($s)");
is(sql("SELECT $snapshot"), $before, 'nothing of the run changed');
($s, $o) = login('worker_a', "SELECT wfe.complete_task($r, '$e0->[1]', $a, $f, '{}')");
is("$s|$o", '|accepted', 'the element\'s own worker: accepted');

done_testing();
