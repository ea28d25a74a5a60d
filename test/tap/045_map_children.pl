# Maps whose item executor is a child workflow, and operator actions on
# map elements, with a real background worker (issue 22 items 1 and 6;
# dsl.md "Stages form: new types", runtime.md "Map elements", "Child runs",
# operations.md "Recovery"): nobody calls wfe.tick().
#
# - Each element NAME[i] starts a child run in the parent's tenant and
#   priority, linked to the element; max_concurrency bounds the live
#   children; the children's outputs are the map's ordered result.
# - A failed child fails its element's attempt: the retry starts a new child.
# - Cancelling a child alone fails its element's attempt (child.cancelled).
# - Cancelling the parent cancels the live children of its map's elements.
# - An element failing past tolerated_failures fails the map and the run;
#   redriving that element reopens the run (the cancelled elements run
#   again), and skipping another with a result lets the map re-aggregate
#   and the run complete.
# - Bad names: a name that is no element (42704, with a hint), the map's
#   own name where an element is meant (42809); nothing changes.
# - Attacks by real logins: tenant B's operator cannot redrive, skip or
#   cancel tenant A's elements or children (42704 / unknown, exactly as for
#   a run that does not exist), and nothing of A changes.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use WfeLogin;
use WfeNode;

my $node = WfeNode::node('wfe_map_children', preload => 1, conf => "wfe.poll_interval_ms = 200\n");
WfeNode::worker_runs($node);

sub sql { return $node->safe_psql('postgres', $_[0]); }
sub wait_for { my ($q, $what) = @_; ok($node->poll_query_until('postgres', $q), $what); }

# login(ROLE, SQL): run SQL as login ROLE; (SQLSTATE or '', stdout, message)
sub login
{
	my $r = WfeLogin::as_login($node, @_);
	return ($r->{state}, $r->{out}, $r->{msg});
}

sql(q{SELECT wfe.register_worker('tapmc.pack@1', 'tapmc')});
WfeNode::workflow($node, <<'YAML');
name: publish-asset
version: "1.0.0"
context_schema: {type: object, required: [asset], properties: {asset: {type: string}}}
entry: pack
output: {url: "${stages.pack.result.url}"}
stages:
  - {name: pack, type: worker, worker: tapmc.pack@1, queue: tapmc, input: {asset: "${context.asset}"},
     retry: {max_attempts: 1}, on_success: completed, on_failure: failed}
YAML
WfeNode::workflow($node, <<'YAML');
name: lods
version: "1.0.0"
entry: publish
output: {published: "${stages.publish.result}"}
stages:
  - name: publish
    type: map
    items: "${context.lods}"
    max_concurrency: 2
    item:
      workflow: publish-asset
      input: {asset: "${item}"}
      retry: {max_attempts: 2, initial_ms: 10, jitter: none}
    on_success: completed
    on_failure: failed
YAML

sub submit
{
	my ($lods) = @_;
	return sql("SELECT run_id FROM wfe.submit('lods', '{\"lods\": $lods}', NULL, '{\"tenant\": \"A\", \"priority\": 7}')");
}
# the live (latest) child of element STAGE of run R
sub child { return sql("SELECT max(run_id) FROM wfe.runs WHERE parent_run_id = $_[0] AND parent_stage = '$_[1]'"); }
# the tasks claimed so far, by child run: "stage|attempt|fence|asset"
my %claimed;
# claim the task of child C (claiming what else is ready on the way) and
# complete it with its asset's URL, or fail it
sub work
{
	my ($c, $ok) = @_;
	for (1 .. 100)
	{
		last if $claimed{$c};
		for my $row (split /\n/,
			sql("SELECT run_id || '|' || stage || '|' || attempt || '|' || fence || '|' || (input ->> 'asset')"
				  . " FROM wfe.claim_task('tapmc', 'w1', 10)"))
		{
			my ($run, $rest) = split /\|/, $row, 2;
			$claimed{$run} = $rest;
		}
		sql('SELECT pg_sleep(0.05)') unless $claimed{$c};
	}
	return 'not claimed' unless $claimed{$c};
	my ($stage, $attempt, $fence, $asset) = split /\|/, delete $claimed{$c};
	return sql($ok
		? "SELECT wfe.complete_task($c, '$stage', $attempt, $fence, '{\"url\": \"s3://$asset\"}')"
		: "SELECT wfe.fail_task($c, '$stage', $attempt, $fence, '{\"code\": \"boom\", \"message\": \"no\"}', false)");
}
sub live { return sql("SELECT count(*) FROM wfe.runs WHERE parent_run_id = $_[0] AND finished_at IS NULL"); }

# 1. End to end: children per element, max_concurrency, a retry
my $r1 = submit('["a", "b", "c"]');
is(live($r1), '2', 'max_concurrency 2: two elements each started a child run, the third waits');
is(sql("SELECT string_agg(tenant || ' ' || priority || ' ' || parent_stage || ' ' || parent_attempt, ',' ORDER BY run_id)"
	  . " FROM wfe.runs WHERE parent_run_id = $r1"),
	'A 7 publish[0] 1,A 7 publish[1] 1', "... in the parent's tenant and priority, linked to the element's attempt");
is(sql("SELECT string_agg(stage || '=' || state, ' ' ORDER BY stage) FROM wfe.run_stages WHERE run_id = $r1"),
	'publish=running publish[0]=running publish[1]=running publish[2]=waiting', 'the elements: two running, one waiting');
is(work(child($r1, 'publish[0]'), 1), 'accepted', "publish[0]'s child completes");
wait_for("SELECT count(*) = 1 FROM wfe.runs WHERE parent_run_id = $r1 AND parent_stage = 'publish[2]'",
	"its end reaches the parent: publish[2]'s child starts in its place");
is(work(child($r1, 'publish[1]'), 0), 'accepted', "publish[1]'s child fails");
wait_for("SELECT count(*) = 2 FROM wfe.runs WHERE parent_run_id = $r1 AND parent_stage = 'publish[1]'",
	'child.failed: the element is retried with a new child run');
is(sql("SELECT parent_attempt FROM wfe.runs WHERE run_id = " . child($r1, 'publish[1]')), '2', '... for its attempt 2');
is(work(child($r1, 'publish[1]'), 1), 'accepted', 'the new child completes');
is(work(child($r1, 'publish[2]'), 1), 'accepted', "publish[2]'s child completes");
wait_for("SELECT state = 'completed' FROM wfe.runs WHERE run_id = $r1", 'the parent completed');
is(sql("SELECT output::text FROM wfe.runs WHERE run_id = $r1"),
	'{"published": {"items": [{"url": "s3://a"}, {"url": "s3://b"}, {"url": "s3://c"}], "failed": []}}',
	"the children's outputs are the map's result, in element order, and the run's output");
is(sql("SELECT string_agg(x ->> 'stage', ',' ORDER BY (x ->> 'run_id')::bigint) FROM jsonb_array_elements(wfe.report($r1) -> 'children') AS x"),
	'publish[0],publish[1],publish[2],publish[1]', 'report: the children, each naming its element');

# 2. Cancelling a child alone fails its element's attempt; cancelling the parent cancels the live children
my $r2 = submit('["d", "e", "f"]');
my $c2 = child($r2, 'publish[0]');
is(sql("SELECT wfe.cancel_run($c2, 'not this one')"), 'accepted', 'an operator cancels one element\'s child alone');
wait_for("SELECT count(*) = 2 FROM wfe.runs WHERE parent_run_id = $r2 AND parent_stage = 'publish[0]'",
	"the element's attempt failed (child.cancelled) and its retry started a new child");
is(sql("SELECT e.detail ->> 'error' FROM wfe.events AS e WHERE e.run_id = $r2 AND e.stage = 'publish[0]' AND e.type = 'stage.retry_scheduled'"),
	'child.cancelled', '... the attempt failed with child.cancelled');
is(sql("SELECT wfe.cancel_run($r2, 'stop')"), 'accepted', 'the parent is cancelled');
is(sql("SELECT count(*) FROM wfe.runs WHERE parent_run_id = $r2 AND state NOT IN ('cancelled')"), '0',
	'... and every live child of its elements with it, in the same transaction');
is(sql("SELECT string_agg(stage || '=' || state, ' ' ORDER BY stage) FROM wfe.run_stages WHERE run_id = $r2"),
	'publish=cancelled publish[0]=cancelled publish[1]=cancelled publish[2]=cancelled', 'the map and its elements cancelled');

# 3. A map failing past tolerated_failures, then the operator's redrive and skip of elements
my $r3 = submit('["g", "h", "i"]');
is(work(child($r3, 'publish[0]'), 0), 'accepted', "publish[0]'s child fails");
wait_for("SELECT count(*) = 2 FROM wfe.runs WHERE parent_run_id = $r3 AND parent_stage = 'publish[0]'", '... retried');
is(work(child($r3, 'publish[0]'), 0), 'accepted', '... and fails again');
wait_for("SELECT state = 'failed' FROM wfe.runs WHERE run_id = $r3",
	'publish[0] failed for good past tolerated_failures 0: the map and the run failed');
is(sql("SELECT string_agg(stage || '=' || state, ' ' ORDER BY stage) FROM wfe.run_stages WHERE run_id = $r3"),
	'publish=failed publish[0]=failed publish[1]=cancelled publish[2]=cancelled',
	'the live element and the waiting one were cancelled');

sql(q{CREATE ROLE op_a LOGIN IN ROLE wfe_operator, wfe_reader; SELECT wfe.add_tenant_member('op_a', 'A');
CREATE ROLE op_b LOGIN IN ROLE wfe_operator, wfe_submitter, wfe_reader; SELECT wfe.add_tenant_member('op_b', 'B');});
my $snapshot = join(" || '#' || ",
	map { "coalesce((SELECT string_agg(x::text, ',' ORDER BY x::text) FROM wfe.$_ AS x WHERE x.tenant = 'A'), '')" }
	  qw(runs run_stages events timers));
my $before = sql("SELECT $snapshot");

# bad names, as A's own operator: nothing changes
for my $bad ([ 'publish[3]', '42704', 'past the map\'s end' ], [ 'publish[01]', '42704', 'an index with a leading zero' ],
	[ 'publish[x]', '42704', 'an index that is no number' ], [ 'nosuch[0]', '42704', 'no such map' ],
	[ 'publish', '42809', "the map's own name" ])
{
	my ($name, $want, $what) = @$bad;
	my ($st, $o, $msg) = login('op_a', "SELECT wfe.redrive($r3, '$name', 'x')");
	is($st, $want, "redrive of $name ($what): $want");
	is(sql("SELECT $snapshot"), $before, '... and nothing changed');
}
my ($st, $o, $msg) = login('op_a', "SELECT wfe.fail_stage($r3, 'publish', 'x')");
is($st, '42809', "fail_stage of the map's own name: 42809");
is(sql("SELECT $snapshot"), $before, '... and nothing changed');

# attacks: B's operator against A's run, elements and children
my $missing = 987654321;
for my $call ([ 'redrive', "wfe.redrive(%s, 'publish[0]', 'b')" ],
	[ 'skip_stage', "wfe.skip_stage(%s, 'publish[0]', '{\"url\": \"x\"}', 'b')" ],
	[ 'fail_stage', "wfe.fail_stage(%s, 'publish[1]', 'b')" ])
{
	my ($name, $fmt) = @$call;
	my @a = login('op_b', 'SELECT ' . sprintf($fmt, $r3));
	my @m = login('op_b', 'SELECT ' . sprintf($fmt, $missing));
	is($a[0], '42704', "B's $name of A's element: 42704");
	is("$a[0]|$a[2]" =~ s/\d+/N/gr, "$m[0]|$m[2]" =~ s/\d+/N/gr, '... exactly as for a run that does not exist');
	is(sql("SELECT $snapshot"), $before, '... and nothing of A changed');
}
my $c3 = child($r3, 'publish[0]');
my @a = login('op_b', "SELECT wfe.cancel_run($c3, 'b')");
is("$a[0]|$a[1]", '|unknown', "B's cancel_run of A's element's child: unknown");
is(sql("SELECT $snapshot"), $before, '... and nothing of A changed');

# the operator of A redrives the failed element: the run reopens
($st, $o, $msg) = login('op_a', "SELECT wfe.redrive($r3, 'publish[0]', 'the store is back')");
is($st, '', "A's operator redrives publish[0]");
is(sql("SELECT state FROM wfe.runs WHERE run_id = $r3"), 'running', 'the run reopened');
is(sql("SELECT string_agg(stage || '=' || state, ' ' ORDER BY stage) FROM wfe.run_stages WHERE run_id = $r3"),
	'publish=running publish[0]=running publish[1]=running publish[2]=waiting',
	'the map runs again: publish[0] and publish[1] (cancelled while live) start new children, publish[2] waits its turn');
is(sql("SELECT count(*) FROM wfe.runs WHERE parent_run_id = $r3 AND finished_at IS NULL"), '2', '... two live children');
is(work(child($r3, 'publish[1]'), 1), 'accepted', "publish[1]'s new child completes");
wait_for("SELECT count(*) = 1 FROM wfe.runs WHERE parent_run_id = $r3 AND parent_stage = 'publish[2]' AND finished_at IS NULL",
	"publish[2]'s child starts");
is(work(child($r3, 'publish[0]'), 0), 'accepted', "publish[0]'s new child fails (attempt 3: no retry left)");
wait_for("SELECT state = 'failed' FROM wfe.runs WHERE run_id = $r3",
	'publish[0] failed for good again: the map failed (publish[2] cancelled with its child), the run failed again');
is(sql("SELECT state FROM wfe.runs WHERE run_id = " . child($r3, 'publish[2]')), 'cancelled',
	"publish[2]'s live child was cancelled with it");
($st, $o, $msg) = login('op_a', qq{SELECT wfe.skip_stage($r3, 'publish[0]', '{"url": "s3://by-hand"}', 'published by hand')});
is($st, '', "A's operator skips publish[0] with a result");
wait_for("SELECT count(*) = 2 FROM wfe.runs WHERE parent_run_id = $r3 AND parent_stage = 'publish[2]'",
	'the run reopened: publish[2], cancelled while live, starts a new child');
is(work(child($r3, 'publish[2]'), 1), 'accepted', "publish[2]'s new child completes");
wait_for("SELECT state = 'completed' FROM wfe.runs WHERE run_id = $r3", 'the map re-aggregated and the run completed');
is(sql("SELECT output::text FROM wfe.runs WHERE run_id = $r3"),
	'{"published": {"items": [{"url": "s3://by-hand"}, {"url": "s3://h"}, {"url": "s3://i"}], "failed": []}}',
	"the map's ordered result holds the operator's result for publish[0]");
is(sql("SELECT string_agg(type, ',' ORDER BY event_id) FROM wfe.events WHERE run_id = $r3 AND stage = 'publish[0]'"
	  . " AND type IN ('stage.redriven', 'stage.skipped_by_operator')"),
	'stage.redriven,stage.skipped_by_operator', "the element's timeline records both actions");

done_testing();
