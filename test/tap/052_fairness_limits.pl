# Fairness beside tenant task limits (operations.md "Flow control":
# fairness => 'tenant' with max_tasks_in_flight), and run_stages_fair
# holding fair queues' tasks only.
#
# A worker login claims from fair queue fl, where tenant big (task limit 3)
# queued 50 tasks before tenant small (no limit) queued 10:
# 1. single claims alternate (small first: at equal passes the tenant whose
#    next task is newer goes first) until big is at its limit, then go to
#    small alone: big is passed over, not waited for, and never over its limit;
#    a batch claim gives big nothing more either;
# 2. a completed task of big's makes room: the next claim serves big again,
#    by weight beside small;
# 3. a tenant at its limit at a higher priority does not hold back a lower
#    level: the claim serves the next level's tenants;
# 4. weights with a limit: heavy (weight 3, limit 4 in flight) and light
#    (weight 1) share two batches of 4 claims 4:4, not 6:2 -- the limit
#    caps the weight;
# 5. run_stages_fair holds the ready tasks of fair queues only: a queue
#    that is not fair leaves it empty; making it fair marks its queued
#    tasks (and claims then share them); making it unfair again unmarks them;
# 6. a claim reads 1,000 tenants at most: the next one reads on from there.
# Every claim is made by a real login with only the wfe_worker role.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use WfeNode;

my $node = WfeNode::node('wfe_fair_limits');

sub sql { return $node->safe_psql('postgres', $_[0]); }
# a query as the worker login
sub as_worker { return $node->safe_psql('postgres', $_[0], extra_params => ['-U', 'a_worker']); }

WfeNode::logins($node, a_worker => 'wfe_worker');
# one workflow per queue: fl and f4 fair, nf not (yet)
for my $q ('fl', 'f4', 'nf')
{
	sql(qq{SELECT wfe.register_worker('tap.$q\@1', '$q');});
	WfeNode::workflow($node, <<"YAML");
name: $q
version: "1.0.0"
entry: a
stages:
  - { name: a, type: worker, queue: $q, worker: tap.$q\@1, on_success: completed, on_failure: failed }
YAML
	sql(qq{SELECT wfe.grant_queue('a_worker', '$q');});
}
sql(q{SELECT wfe.configure_queue('fl', fairness => 'tenant');
      SELECT wfe.configure_queue('f4', fairness => 'tenant');
      SELECT wfe.configure_tenant('big', max_tasks_in_flight => 3);});

# queue N tasks of TENANT (at PRIORITY) on the workflow WF
sub queue_tasks
{
	my ($tenant, $n, $priority, $wf) = @_;
	$priority //= 0;
	$wf //= 'fl';
	sql(qq{SELECT wfe.submit('$wf', '{}', NULL, '{"tenant": "$tenant", "priority": $priority}')
	         FROM generate_series(1, $n)});
}
# N claims of one task each (each its own transaction, in one session: a
# claimer's passes live in its backend), or one of N with BATCH (a new
# session): the tenants, in order
sub claims
{
	my ($n, $batch, $queue) = @_;
	$queue //= 'fl';
	return as_worker(qq{SELECT string_agg(t.tenant, ',') FROM wfe.claim_task('$queue', 'w', $n) AS t})
	  if $batch;
	return join ',', split /\n/,
	  as_worker(join "\n", map { qq{SELECT t.tenant FROM wfe.claim_task('$queue', 'w$_', 1) AS t;} } 1 .. $n);
}
sub count_of { my ($list, $t) = @_; return scalar grep { $_ eq $t } split /,/, $list; }
sub in_flight
{
	return sql(qq{SELECT count(*) FROM wfe.run_stages WHERE tenant = '$_[0]' AND state IN ('dispatched', 'running')});
}

# --- 1. a tenant at its limit is passed over ---------------------------------
queue_tasks('big', 50);
queue_tasks('small', 20);
my $got = claims(8);
is($got, 'small,big,small,big,small,big,small,small',
	'single claims alternate, small first (its tasks are newer), until big has its 3 in flight, then serve small alone');
is(in_flight('big'), 3, 'big has 3 tasks in flight: its limit, not more');
is(claims(4, 1), 'small,small,small,small', 'a batch of 4 goes to small: big at its limit gets none');
is(in_flight('big'), 3, 'big still has 3');

# --- 2. room made by a completed task --------------------------------------
my ($run, $stage, $attempt, $fence) = split /\|/, sql(q{
	SELECT run_id, stage, attempt, fence FROM wfe.run_stages
	 WHERE tenant = 'big' AND state = 'running' ORDER BY run_id LIMIT 1});
as_worker(qq{SELECT wfe.complete_task($run, '$stage', $attempt, $fence, '{}')});
is(in_flight('big'), 2, 'one of big\'s tasks completed');
$got = claims(2, 1);
is(count_of($got, 'big') . ':' . count_of($got, 'small'), '1:1',
	'a batch of 2 then serves big (its one free slot) beside small') or diag $got;
is(claims(1), 'small', 'and big is full again: small gets the next');
is(in_flight('big'), 3, 'big never went over 3');

# --- 3. a full tenant at a higher priority does not hold back a lower level ----
sql(q{SELECT wfe.configure_tenant('vip', max_tasks_in_flight => 1)});
queue_tasks('vip', 3, 5);
queue_tasks('small', 5);
$got = claims(3, 1);
is(count_of($got, 'vip') . ':' . count_of($got, 'small'), '1:2',
	"vip's one slot at priority 5 is served first, then priority 0's tenant with room (small), not full big")
  or diag $got;
is(claims(1), 'small', 'vip full at priority 5, big full at 0: small still gets the next claim');
is(in_flight('vip') . ' ' . in_flight('big'), '1 3', 'neither limited tenant went over its limit');

# --- 4. weights capped by a limit ------------------------------------------
sql(q{SELECT wfe.configure_tenant('heavy', max_tasks_in_flight => 4, weight => 3)});
queue_tasks('heavy', 20, 0, 'f4');
queue_tasks('light', 20, 0, 'f4');
$got = claims(4, 1, 'f4');
is(count_of($got, 'heavy') . ':' . count_of($got, 'light'), '3:1',
	'weights 3:1 with room: heavy and light get 3 and 1 of a batch of 4') or diag $got;
$got = claims(4, 1, 'f4');
is(count_of($got, 'heavy') . ':' . count_of($got, 'light'), '1:3',
	'then heavy has room for 1 more (limit 4): the rest of the batch goes to light') or diag $got;
is(in_flight('heavy'), 4, 'heavy has 4 in flight, its limit');

# --- 5. run_stages_fair holds fair queues' tasks only ------------------------
sub fair_entries
{
	return sql(qq{SELECT count(*) FROM wfe.run_stages
	               WHERE queue = '$_[0]' AND state = 'queued' AND held_until IS NULL AND fair});
}
queue_tasks('p', 10, 0, 'nf');
queue_tasks('q', 2, 0, 'nf');
is(fair_entries('nf'), 0, "a queue that is not fair: none of its 12 queued tasks is marked for run_stages_fair");
is(fair_entries('fl'), sql(q{SELECT count(*) FROM wfe.run_stages WHERE queue = 'fl' AND state = 'queued'}),
	"the fair queue's queued tasks all are");
is(sql(q{SELECT pg_get_indexdef('wfe.run_stages_fair'::regclass) ~ 'AND fair'}), 't',
	"run_stages_fair's predicate has run_stages.fair");
sql(q{SELECT wfe.configure_queue('nf', fairness => 'tenant')});
is(fair_entries('nf'), 12, 'made fair: its queued tasks are marked');
$got = claims(4, 1, 'nf');
is(count_of($got, 'p') . ':' . count_of($got, 'q'), '2:2', 'and its claims share them between the tenants')
  or diag $got;
sql(q{SELECT wfe.configure_queue('nf', fairness => 'none')});
is(fair_entries('nf'), 0, 'made unfair again: unmarked');
is(claims(2, 1, 'nf'), 'p,p', 'and claimed oldest first');
queue_tasks('q', 1, 0, 'nf');
is(fair_entries('nf'), 0, 'a task released on it now is not marked either');

# --- 6. more tenants than a claim reads ------------------------------------
# 1,000 tenants a0001..a1000 with a task each, then zz: a claim reads 1,000
# tenants at most; the next claim of the same backend reads on from there
# (zz), wrapping around, so zz is served second, not after the 1,000.
sql(q{SELECT wfe.configure_queue('nf', fairness => 'tenant')});
claims(100, 1, 'nf');    # what nf had queued
is(sql(q{SELECT count(*) FROM wfe.run_stages WHERE queue = 'nf' AND state = 'queued'}), 0, 'nf has nothing queued');
sql(q{SELECT count(*) FROM (SELECT wfe.submit('nf', '{}', NULL, jsonb_build_object('tenant', 'a' || lpad(g::text, 4, '0')))
                              FROM generate_series(1, 1000) AS g) AS s});
queue_tasks('zz', 1, 0, 'nf');
is(claims(2, 0, 'nf'), 'a0001,zz',
	'1,001 tenants: the first claim serves the first of the 1,000 it read, the next reads on and serves zz');

$node->stop;
done_testing();
