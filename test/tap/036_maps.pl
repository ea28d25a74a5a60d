# Map stages end to end, with the background worker (issue 22 items 1-2;
# dsl.md and runtime.md "New in 0.3.0": maps and map elements).
#
# - a map over a context array with max_concurrency 2: its elements are
#   claimed as NAME[i] by a real worker login, never more than 2 under way;
#   element 1 fails once and the background worker's retry timer retries
#   it; the map's result is {"items", "failed"} in element order, and the
#   next stage reads it;
# - tolerated_failures exceeded: exactly one map failure, the elements
#   under way cancelled (their late reports refused), the run failed;
# - at run time, items over wfe.max_map_items (limits.map_items) and items
#   that are not an array (binding.type) fail the map at release;
# - attacks, each asserting the refusal and that nothing changed: a report
#   naming an element that is not one (bad index, a non-canonical index,
#   the map's own name) and a report by a worker of another tenant (not
#   granted the queue: a queue grant serves every tenant) about a real
#   element, with its real fence;
# - compile time: item/item_index outside a map's item input
#   (expr.unknown_root), a literal items list over the limit.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use WfeLogin;
use WfeNode;

my $node = WfeNode::node('wfe_maps', preload => 1, conf => "wfe.poll_interval_ms = 100\n");
sub sql { return $node->safe_psql('postgres', $_[0]); }

# login(ROLE, SQL): run SQL as login ROLE; (SQLSTATE or '', stdout)
sub login
{
	my $r = WfeLogin::as_login($node, @_);
	return ($r->{state}, $r->{out});
}

WfeNode::logins($node, worker_a => 'wfe_worker A', worker_b => 'wfe_worker B');
sql(q{SELECT wfe.register_worker('render@1', 'render', '{"type": "object"}', '{"type": "object"}');
SELECT wfe.register_worker('publish@1', 'publish', '{"type": "object"}', '{"type": "object"}');
SELECT wfe.grant_queue('worker_a', 'render');
SELECT wfe.grant_queue('worker_a', 'publish');});

# define(NAME, MAP KEYS): a map `render` over context.lods, then `publish`
# reading its result.
sub define
{
	my ($name, $keys) = @_;
	WfeNode::workflow($node, <<"YAML");
name: $name
version: "1.0.0"
entry: render
stages:
  - name: render
    type: map
    items: "\${context.lods}"
$keys    item:
      worker: render\@1
      queue: render
      input: { lod: "\${item}", index: "\${item_index}", model: "\${context.model}" }
      retry: { max_attempts: 2, initial_ms: 100, multiplier: 1, max_ms: 100, jitter: none }
    on_success: publish
    on_failure: failed
  - name: publish
    type: worker
    worker: publish\@1
    queue: publish
    input: { renders: "\${stages.render.result}" }
    on_success: completed
    on_failure: failed
YAML
}
define('lods', "    max_concurrency: 2\n");
define('strict', "    tolerated_failures: 1\n");

sub submit
{
	my ($wf, $ctx) = @_;
	return sql(qq{SELECT run_id FROM wfe.submit('$wf', '$ctx', NULL, '{"tenant": "A"}')});
}

# claim(ROLE, QUEUE, N): [run_id, stage, attempt, fence, input] of up to N tasks
sub claim
{
	my ($role, $queue, $n) = @_;
	my (undef, $out) = login($role,
		"SELECT run_id || ' ' || stage || ' ' || attempt || ' ' || fence || ' ' || input::text"
		  . " FROM wfe.claim_task('$queue', '$role', $n)");
	return map { [ split / /, $_, 5 ] } grep { length } split /\n/, $out;
}

sub report
{
	my ($role, $fn, $t, $value) = @_;
	my (undef, $out) = login($role, "SELECT wfe.$fn($t->[0], '$t->[1]', $t->[2], $t->[3], '$value')");
	return $out;
}

sub under_way
{
	my ($run) = @_;
	return sql("SELECT count(*) FROM wfe.run_stages WHERE run_id = $run AND element IS NOT NULL"
		  . " AND state IN ('queued', 'dispatched', 'running', 'retry_scheduled')");
}

# --- 1. end to end, max_concurrency observed, one element retried --------
my $run = submit('lods', '{"model": "m1", "lods": ["lod0", "lod1", "lod2", "lod3", "lod4"]}');
is(sql("SELECT state || ' ' || kind FROM wfe.run_stages WHERE run_id = $run AND stage = 'render'"),
	'running map', 'the map is running');
is(sql("SELECT total || ' ' || released FROM wfe.run_maps WHERE run_id = $run"), '5 2',
	'its counter row: 5 elements, 2 released (max_concurrency)');
is(sql("SELECT string_agg(stage || ':' || state, ',' ORDER BY element) FROM wfe.run_stages"
		  . " WHERE run_id = $run AND element IS NOT NULL"),
	'render[0]:queued,render[1]:queued,render[2]:waiting,render[3]:waiting,render[4]:waiting',
	'five element rows NAME[i], the first two queued');
is(sql("SELECT input::text FROM wfe.run_stages WHERE run_id = $run AND stage = 'render[3]'"),
	'{"lod": "lod3", "index": 3, "model": "m1"}', 'each bound with item, item_index and the context');

my $max_seen = 0;
my %results;
my $failed_once = 0;
my $guard = 0;
while (sql("SELECT state FROM wfe.run_stages WHERE run_id = $run AND stage = 'render'") eq 'running'
	&& $guard++ < 200)
{
	my @tasks = claim('worker_a', 'render', 5);
	my $live = under_way($run);
	$max_seen = $live if $live > $max_seen;
	for my $t (@tasks)
	{
		if ($t->[1] eq 'render[1]' && !$failed_once++)
		{
			is(report('worker_a', 'fail_task', $t, '{"code": "gpu.busy"}'), 'accepted',
				'render[1] attempt 1 fails');
			next;
		}
		my ($lod) = $t->[4] =~ /"lod": "(\w+)"/;
		is(report('worker_a', 'complete_task', $t, qq({"url": "s3://$lod"})), 'accepted',
			"$t->[1] attempt $t->[2] completes");
	}
	select(undef, undef, undef, 0.1) unless @tasks;
}
ok($max_seen <= 2 && $max_seen >= 1, "never more than max_concurrency under way (saw $max_seen)");
is(sql("SELECT attempt || ' ' || state FROM wfe.run_stages WHERE run_id = $run AND stage = 'render[1]'"),
	'2 completed', 'render[1] was retried by the background worker, and completed on attempt 2');
is(sql("SELECT result::text FROM wfe.run_stages WHERE run_id = $run AND stage = 'render'"),
	'{"items": [{"url": "s3://lod0"}, {"url": "s3://lod1"}, {"url": "s3://lod2"}, {"url": "s3://lod3"}, '
	  . '{"url": "s3://lod4"}], "failed": []}',
	'the map result: every element result in element order');
is(sql("SELECT completed || ' ' || failed || ' ' || released FROM wfe.run_maps WHERE run_id = $run"),
	'5 0 5', 'the counter row at the end');
is(sql("SELECT count(*) FROM wfe.events WHERE run_id = $run AND stage = 'render' AND type = 'stage.completed'"),
	'1', 'exactly one aggregation (one stage.completed of the map)');
is(sql("SELECT string_agg(DISTINCT stage, ',') FROM wfe.events WHERE run_id = $run AND type = 'stage.retry_scheduled'"),
	'render[1]', 'events name the element: stage.retry_scheduled of render[1]');
my ($p) = claim('worker_a', 'publish', 1);
like($p->[4], qr/"renders": \{"items": \[\{"url": "s3:\/\/lod0"\}/, 'the next stage reads the map result');
report('worker_a', 'complete_task', $p, '{}');
is(sql("SELECT state FROM wfe.runs WHERE run_id = $run"), 'completed', 'the run completed');

# --- 2. tolerated_failures exceeded -------------------------------------
$run = submit('strict', '{"model": "m2", "lods": ["a", "b", "c", "d"]}');
my @t = sort { $a->[1] cmp $b->[1] } claim('worker_a', 'render', 4);
is(scalar(@t), 4, 'without max_concurrency every element is released at once');
is(report('worker_a', 'fail_task', $t[0], '{"code": "bad"}') , 'accepted', 'render[0] fails (retryable)');
# retries: 2 attempts each; fail for good without retry
login('worker_a', "SELECT wfe.fail_task($t[1][0], '$t[1][1]', $t[1][2], $t[1][3], '{\"code\": \"bad\"}', false)");
is(sql("SELECT state FROM wfe.run_stages WHERE run_id = $run AND stage = 'render'"), 'running',
	'one failure for good is tolerated (tolerated_failures 1)');
login('worker_a', "SELECT wfe.fail_task($t[2][0], '$t[2][1]', $t[2][2], $t[2][3], '{\"code\": \"bad\"}', false)");
is(sql("SELECT state || ' ' || (error->>'code') FROM wfe.run_stages WHERE run_id = $run AND stage = 'render'"),
	'failed map.failed', 'a second one fails the map (map.failed)');
is(sql("SELECT count(*) FROM wfe.events WHERE run_id = $run AND stage = 'render' AND type = 'stage.failed'"),
	'1', '... exactly one map failure');
is(sql("SELECT string_agg(stage || ':' || state, ',' ORDER BY element) FROM wfe.run_stages"
		  . " WHERE run_id = $run AND element IS NOT NULL"),
	'render[0]:cancelled,render[1]:failed,render[2]:failed,render[3]:cancelled',
	'the elements under way (and the one awaiting its retry) are cancelled');
is(report('worker_a', 'complete_task', $t[3], '{}'), 'late', 'a late report of a cancelled element is refused');
is(sql("SELECT state FROM wfe.runs WHERE run_id = $run"), 'failed', 'the run took on_failure: failed');

# --- 3. run-time limits and types ---------------------------------------
my $over = sql(q{SET wfe.max_map_items = 3;
SELECT run_id FROM wfe.submit('lods', '{"model": "m", "lods": [1, 2, 3, 4]}', NULL, '{"tenant": "A"}')});
is(sql("SELECT state || ' ' || (error->>'code') FROM wfe.run_stages WHERE run_id = $over AND stage = 'render'"),
	'failed limits.map_items', 'items over wfe.max_map_items at run time: limits.map_items');
is(sql("SELECT count(*) FROM wfe.run_stages WHERE run_id = $over AND element IS NOT NULL"), '0',
	'... and no element was created');
my $notarray = submit('lods', '{"model": "m", "lods": {"a": 1}}');
is(sql("SELECT state || ' ' || (error->>'code') FROM wfe.run_stages WHERE run_id = $notarray AND stage = 'render'"),
	'failed binding.type', 'items that are not an array: binding.type');
my $empty = submit('lods', '{"model": "m", "lods": []}');
is(sql("SELECT state || ' ' || result::text FROM wfe.run_stages WHERE run_id = $empty AND stage = 'render'"),
	'completed {"items": [], "failed": []}', 'an empty array completes at once');

# --- 4. attacks -----------------------------------------------------------
$run = submit('lods', '{"model": "m4", "lods": ["x", "y", "z"]}');
my ($e0) = claim('worker_a', 'render', 1);
my $snapshot = join(" || '#' || ",
	map { "coalesce((SELECT string_agg(x::text, ',' ORDER BY x::text) FROM wfe.$_ AS x WHERE x.run_id = $run), '')" }
	  qw(runs run_stages run_maps timers));
my $before = sql("SELECT $snapshot");
for my $name ('render[7]', 'render[01]', 'render[-1]', 'render[0', 'render', 'render[0][0]')
{
	my $out = report('worker_a', 'complete_task', [ $e0->[0], $name, $e0->[2], $e0->[3] ], '{}');
	is($out, 'unknown', "a report about '$name' (no element): unknown");
}
is(sql("SELECT $snapshot"), $before, '... and nothing of the run changed');
my ($st, $out) = login('worker_b', "SELECT wfe.complete_task($e0->[0], '$e0->[1]', $e0->[2], $e0->[3], '{}')");
is("$st|$out", '|unknown', "another tenant's worker reporting a real element with its fence: unknown");
is(sql("SELECT $snapshot"), $before, '... and nothing of the run changed');
is(report('worker_a', 'complete_task', $e0, '{}'), 'accepted', 'the element\'s own worker: accepted');

# --- 5. compile time ------------------------------------------------------
my $diag = sql(q{SELECT string_agg(d->>'code' || ' ' || (d->>'path'), ', ')
  FROM jsonb_array_elements(wfe.compile($y$
name: bad
version: "1.0.0"
entry: m
stages:
  - name: m
    type: map
    items: [1, 2, 3, 4]
    item: { worker: render@1, queue: render, input: { v: "${item}" } }
    on_success: w
    on_failure: failed
  - name: w
    type: worker
    worker: render@1
    queue: render
    input: { v: "${item_index}" }
    on_success: completed
    on_failure: failed
$y$)->'diagnostics') AS d});
is($diag, 'expr.unknown_root /stages/1/input/v', 'item_index outside a map item input: expr.unknown_root');
$diag = sql(q{SET wfe.max_map_items = 3; SELECT string_agg(d->>'code', ', ')
  FROM jsonb_array_elements(wfe.compile($y$
name: bad
version: "1.0.0"
entry: m
stages:
  - name: m
    type: map
    items: [1, 2, 3, 4]
    item: { worker: render@1, queue: render }
    on_success: completed
    on_failure: failed
$y$)->'diagnostics') AS d});
is($diag, 'limits.map_items', 'a literal items list over wfe.max_map_items: limits.map_items');

done_testing();
