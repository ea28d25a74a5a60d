# Child workflows with a real background worker (runtime.md "Child runs";
# issue 22 items 3 and 6): nobody calls wfe.tick().
#
# - A parent's workflow stage starts a child run in the parent's tenant and
#   priority; the child's output completes the parent's stage and the run.
# - A failed child fails the attempt (child.failed); the retry starts a new
#   child, whose output completes it.
# - Cancelling the parent cancels its live child at once; the child's end
#   is recorded on the parent, never applied.
# - Cancelling a child alone fails its parent's attempt (child.cancelled).
# - A workflow calling itself stops at wfe.max_workflow_depth
#   (limits.workflow_depth), and every run up the chain fails.
# - Attacks by real logins: a member of tenant B cannot cancel, report or
#   adopt tenant A's child or parent (unknown / 42704 exactly as for a
#   missing run, 42501 for the engine's functions, 22023 for a submit
#   option naming a parent), and nothing of tenant A changed after each
#   refusal.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use WfeLogin;
use WfeNode;

my $node = WfeNode::node('wfe_children', preload => 1, conf => "wfe.poll_interval_ms = 200\n");
WfeNode::worker_runs($node);

sub sql { return $node->safe_psql('postgres', $_[0]); }
sub wait_for { my ($q, $what) = @_; ok($node->poll_query_until('postgres', $q), $what); }

# login(ROLE, SQL): run SQL as login ROLE; (SQLSTATE or '', stdout, message)
sub login
{
	my $r = WfeLogin::as_login($node, @_);
	return ($r->{state}, $r->{out}, $r->{msg});
}

sql(q{SELECT wfe.register_worker('tapch.pack@1', 'tapch')});
WfeNode::workflow($node, <<'YAML');
name: publish-asset
version: "1.0.0"
context_schema: {type: object, required: [asset], properties: {asset: {type: string}}}
entry: pack
output: {url: "${stages.pack.result.url}"}
stages:
  - {name: pack, type: worker, worker: tapch.pack@1, queue: tapch, input: {asset: "${context.asset}"},
     retry: {max_attempts: 1}, on_success: completed, on_failure: failed}
YAML
WfeNode::workflow($node, <<'YAML');
name: ingest
version: "1.0.0"
entry: publish
output: {url: "${stages.publish.result.url}"}
stages:
  - name: publish
    type: workflow
    workflow: publish-asset
    input: {asset: "${context.asset}"}
    retry: {max_attempts: 2, initial_ms: 10, jitter: none}
    on_success: completed
    on_failure: failed
YAML

sub submit { return sql("SELECT run_id FROM wfe.submit('ingest', '{\"asset\": \"$_[0]\"}', NULL, '{\"tenant\": \"A\", \"priority\": 7}')"); }
sub child { return sql("SELECT max(run_id) FROM wfe.runs WHERE parent_run_id = $_[0]"); }
# claim the child's task and complete it with RESULT, or fail it
sub work
{
	my ($run, $result) = @_;
	my $call = defined $result
	  ? "wfe.complete_task(t.run_id, t.stage, t.attempt, t.fence, '$result')"
	  : q{wfe.fail_task(t.run_id, t.stage, t.attempt, t.fence, '{"code": "boom", "message": "no"}', false)};
	return sql("SELECT $call FROM wfe.claim_task('tapch', 'w1') AS t WHERE t.run_id = $run");
}

# 1. End to end
my $r1 = submit('a-1');
my $c1 = child($r1);
ok($c1, 'the workflow stage started a child run');
is(sql("SELECT tenant || ' ' || priority || ' ' || parent_stage || ' ' || parent_attempt FROM wfe.runs WHERE run_id = $c1"),
	'A 7 publish 1', "... in the parent's tenant, with its priority, linked to the stage's attempt");
is(work($c1, '{"url": "s3://a-1"}'), 'accepted', "the child's task completes");
wait_for("SELECT state = 'completed' FROM wfe.runs WHERE run_id = $r1",
	"the worker brings the child's end to the parent: the parent completed");
is(sql("SELECT output->>'url' FROM wfe.runs WHERE run_id = $r1"), 's3://a-1', "the child's output is the parent's result");
is(sql("SELECT (wfe.report($r1) -> 'children' -> 0 ->> 'run_id') || ' ' || (wfe.report($c1) -> 'parent' ->> 'run_id')"),
	"$c1 $r1", 'report links both ways');

# 2. A failed child, a retry, a new child
my $r2 = submit('a-2');
my $c2 = child($r2);
is(work($c2, undef), 'accepted', "the child's task fails");
wait_for("SELECT count(*) = 2 FROM wfe.runs WHERE parent_run_id = $r2",
	'the child.failed attempt is retried: a new child run');
is(sql("SELECT string_agg(outcome, ',' ORDER BY attempt) FROM wfe.run_timeline($r2)"), 'retry_scheduled,child_started',
	'the timeline: attempt 1 retried, attempt 2 started a child');
my $c2b = child($r2);
is(work($c2b, '{"url": "s3://a-2"}'), 'accepted', "the new child's task completes");
wait_for("SELECT state = 'completed' FROM wfe.runs WHERE run_id = $r2", '... and the parent completed');
is(sql("SELECT string_agg(x ->> 'state', ',') FROM jsonb_array_elements(wfe.report($r2) -> 'children') AS x"),
	'failed,completed', "report: both children, in order");

# 3. Cancelling the parent cancels its child, at once
my $r3 = submit('a-3');
my $c3 = child($r3);
is(sql("SELECT wfe.cancel_run($r3, 'stop')"), 'accepted', 'the parent is cancelled');
is(sql("SELECT state FROM wfe.runs WHERE run_id = $c3"), 'cancelled', '... and its child with it, in the same transaction');
wait_for("SELECT count(*) = 1 FROM wfe.events WHERE run_id = $r3 AND type = 'stage.child_ended' AND detail->>'applied' = 'false'",
	"the child's end reaches the parent: recorded, not applied");
is(sql("SELECT state FROM wfe.run_stages WHERE run_id = $r3"), 'cancelled', "the parent's stage stays cancelled");

# 4. Cancelling a child alone fails its parent's attempt
my $r4 = submit('a-4');
my $c4 = child($r4);
is(sql("SELECT wfe.cancel_run($c4, 'not this one')"), 'accepted', 'an operator cancels the child alone');
wait_for("SELECT count(*) = 2 FROM wfe.runs WHERE parent_run_id = $r4",
	"the parent's attempt failed with child.cancelled and its retry started a new child");
is(sql("SELECT e.detail ->> 'error' FROM wfe.events AS e WHERE e.run_id = $r4 AND e.type = 'stage.retry_scheduled'"),
	'child.cancelled', 'the retried attempt failed with child.cancelled');
my $c4b = child($r4);
sql("SELECT wfe.cancel_run($c4b, 'nor this one')");
wait_for("SELECT state = 'failed' FROM wfe.runs WHERE run_id = $r4", 'cancelled again, retries exhausted: the parent failed');
is(sql("SELECT error ->> 'code' FROM wfe.run_stages WHERE run_id = $r4"), 'child.cancelled', '... with child.cancelled');

# 5. The depth limit
WfeNode::workflow($node, <<'YAML');
name: rec
version: "1.0.0"
entry: a
stages:
  - {name: a, type: worker, worker: tapch.pack@1, queue: tapch, on_success: completed, on_failure: failed}
YAML
WfeNode::workflow($node, <<'YAML');
name: rec
version: "2.0.0"
entry: deeper
stages:
  - {name: deeper, type: workflow, workflow: rec, retry: {max_attempts: 1}, on_success: completed, on_failure: failed}
YAML
my $r5 = sql(q{SET wfe.max_workflow_depth = 3; SELECT run_id FROM wfe.submit('rec', '{}', NULL, '{"tenant": "A"}')});
is(sql("SELECT count(*) FROM wfe.runs WHERE workflow = 'rec'"), '4', 'a workflow calling itself: the run and 3 children');
is(sql("SELECT count(*) FROM wfe.runs AS r JOIN wfe.run_stages AS st USING (run_id)"
	  . " WHERE r.workflow = 'rec' AND st.error ->> 'code' = 'limits.workflow_depth'"
	  . "   AND r.parent_run_id IS NOT NULL AND st.attempt = 1"), '1',
	'the third child refuses a fourth: limits.workflow_depth, once');
wait_for("SELECT state = 'failed' FROM wfe.runs WHERE run_id = $r5", 'every run up the chain fails, the top one too');

# 6. Attacks by real logins: tenant B against tenant A's parent and child
sql(q{CREATE ROLE op_b LOGIN IN ROLE wfe_operator, wfe_submitter, wfe_reader;
SELECT wfe.add_tenant_member('op_b', 'B');});
my $r6 = submit('a-6');
my $c6 = child($r6);
my $missing = 987654321;
my $snapshot = join(" || '#' || ",
	map { "coalesce((SELECT string_agg(x::text, ',' ORDER BY x::text) FROM wfe.$_ AS x WHERE x.tenant = 'A'), '')" }
	  qw(runs run_stages events timers));
my $before = sql("SELECT $snapshot");

for my $call ([ 'cancel_run', "wfe.cancel_run(%s, 'b')" ], [ 'report', 'wfe.report(%s)' ],
	[ 'run_timeline', 'wfe.run_timeline(%s)' ])
{
	my ($name, $fmt) = @$call;
	for my $target ([ 'child', $c6 ], [ 'parent', $r6 ])
	{
		my @a = login('op_b', 'SELECT ' . sprintf($fmt, $target->[1]));
		my @m = login('op_b', 'SELECT ' . sprintf($fmt, $missing));
		# cancel_run answers a word (unknown); the readers raise 42704
		is($name eq 'cancel_run' ? "$a[0]|$a[1]" : $a[0], $name eq 'cancel_run' ? '|unknown' : '42704',
			"B's $name of A's $target->[0]: " . ($name eq 'cancel_run' ? 'unknown' : '42704'));
		is("$a[0]|$a[1]|$a[2]" =~ s/\d+/N/gr, "$m[0]|$m[1]|$m[2]" =~ s/\d+/N/gr,
			'... exactly as for a run that does not exist');
		is(sql("SELECT $snapshot"), $before, '... and nothing of A changed');
	}
}
# a child run is started by the engine in C (src/pg/submit.c): no SQL function to call
my ($st, $o, $msg) = login('op_b', "SELECT wfe._start_child($r6, 'publish', 1, 'publish-asset', '1.0.0', '{\"asset\": \"x\"}')");
is($st, '42883', "B adopting a child under A's run: the engine has no SQL function for it (42883)");
is(sql("SELECT $snapshot"), $before, '... and nothing of A changed');
($st, $o, $msg) = login('op_b', "SELECT wfe._cancel_children($r6, 'publish', 'b')");
is($st, '42501', "B cancelling A's children through the engine's function: 42501");
is(sql("SELECT $snapshot"), $before, '... and nothing of A changed');
($st, $o, $msg) = login('op_b',
	qq{SELECT run_id FROM wfe.submit('publish-asset', '{"asset": "x"}', NULL, '{"tenant": "B", "parent_run_id": $r6}')});
is($st, '22023', 'B submitting a run that names a parent: 22023 (no such option)');
like($msg, qr/unknown submit option: parent_run_id/, '... saying which');
is(sql("SELECT $snapshot"), $before, '... and nothing of A changed');
is(sql("SELECT count(*) FROM wfe.runs WHERE tenant = 'B'"), '0', '... nor anything made for B');

# the operator of A may cancel the child alone (item 6); its parent's attempt fails
sql(q{CREATE ROLE op_a LOGIN IN ROLE wfe_operator, wfe_reader;
SELECT wfe.add_tenant_member('op_a', 'A');});
($st, $o) = login('op_a', "SELECT wfe.cancel_run($c6, 'by hand')");
is("$st|$o", '|accepted', "A's operator cancels A's child alone");
wait_for("SELECT count(*) = 2 FROM wfe.runs WHERE parent_run_id = $r6", "... its parent's attempt failed and a new child started");

done_testing();
