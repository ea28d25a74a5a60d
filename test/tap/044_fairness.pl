# Fairness between tenants on a shared queue (operations.md "Flow control":
# configure_queue(..., fairness => 'tenant'), configure_tenant(..., weight)).
#
# 1. Bad input: a fairness other than none or tenant, a weight below 1 or
#    above 10000: 22023 naming the parameter; nothing changed.
# 2. Real logins: an operator acting for tenant small, a worker and a login
#    with no wfe role may not raise a tenant's weight (their own or
#    another's) nor switch a queue's fairness, through the functions or the
#    tables: refused (42501), and nothing changed.
# 3. Behaviour: tenant big queues 200 tasks, then small queues 10.  On an
#    unfair queue the first 20 claims are all big's (oldest first); on a
#    fair queue small's 10 are among the first 20, alternating.  Weights
#    3:1 give 3:1 of the claims, one at a time and in batches.  Fairness
#    serves within a priority level: a higher-priority task goes first.
#    fairness NULL keeps the queue's; weight NULL keeps the tenant's.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use WfeNode;

my $node = WfeNode::node('wfe_fairness');

sub sql { return $node->safe_psql('postgres', $_[0]); }

# psql logged in as LOGIN: (exit status, stderr)
sub as_login
{
	my ($login, $query) = @_;
	my ($out, $err) = ('', '');
	my $status = $node->psql('postgres', "\\set VERBOSITY verbose\n$query",
		stdout => \$out, stderr => \$err, extra_params => ['-U', $login]);
	return ($status, $err);
}

WfeNode::logins($node,
	root_admin => 'wfe_admin',
	nobody => '',
	a_worker => 'wfe_worker',
	small_operator => 'wfe_operator');
sql(q{
INSERT INTO wfe.tenant_members (role, tenant) VALUES ('small_operator', 'small');
SELECT wfe.register_worker('tap.fair@1', 'fq');});
WfeNode::workflow($node, <<'YAML');
name: fair
version: "1.0.0"
entry: a
stages:
  - { name: a, type: worker, queue: fq, worker: tap.fair@1, on_success: completed, on_failure: failed }
YAML
sql(q{
SELECT wfe.configure_queue('fq', fairness => 'tenant');
SELECT wfe.configure_tenant('big', weight => 1);
SELECT wfe.configure_tenant('small', weight => 1);});

# --- 1. bad input -----------------------------------------------------------
my ($st, $err);
for my $case (
	[ q{wfe.configure_queue('fq', fairness => 'round_robin')}, qr/22023.*fairness must be none or tenant/s,
		'a fairness of round_robin' ],
	[ q{wfe.configure_queue('fq', fairness => '')}, qr/22023.*fairness must be/s, 'an empty fairness' ],
	[ q{wfe.configure_tenant('big', weight => 0)}, qr/22023.*weight must be an integer between 1 and 10000/s,
		'a weight of 0' ],
	[ q{wfe.configure_tenant('big', weight => -3)}, qr/22023.*weight/s, 'a negative weight' ],
	[ q{wfe.configure_tenant('big', weight => 10001)}, qr/22023.*weight/s, 'a weight of 10001' ])
{
	($st, $err) = as_login('root_admin', "SELECT $case->[0]");
	like($err, $case->[1], "$case->[2] is refused (22023), naming it");
}
is(sql(q{SELECT fairness FROM wfe.queues WHERE queue = 'fq'}), 'tenant', "and the queue's fairness is unchanged");
is(sql(q{SELECT string_agg(tenant || '=' || weight, ',' ORDER BY tenant) FROM wfe.tenant_limits}),
	'big=1,small=1', 'and the weights are unchanged');

# --- 2. real logins ---------------------------------------------------------
for my $login ('nobody', 'a_worker', 'small_operator')
{
	for my $attack (
		[ q{SELECT wfe.configure_tenant('big', weight => 1, max_runs_in_flight => 1)}, "lower another tenant's weight" ],
		[ q{SELECT wfe.configure_tenant('small', weight => 100)}, 'raise its own weight' ],
		[ q{UPDATE wfe.tenant_limits SET weight = 100 WHERE tenant = 'small'}, 'write a weight into the table' ],
		[ q{SELECT wfe.configure_queue('fq', fairness => 'none')}, "switch the queue's fairness off" ],
		[ q{UPDATE wfe.queues SET fairness = 'none'}, "write the queue's fairness into the table" ])
	{
		($st, $err) = as_login($login, $attack->[0]);
		like($err, qr/42501|permission denied/, "$login may not $attack->[1]");
	}
}
is(sql(q{SELECT string_agg(tenant || '=' || weight || '/' || coalesce(max_runs_in_flight::text, '-'), ','
           ORDER BY tenant) FROM wfe.tenant_limits}),
	'big=1/-,small=1/-', 'nothing changed: the weights and limits are as they were');
is(sql(q{SELECT fairness FROM wfe.queues WHERE queue = 'fq'}), 'tenant', "nor the queue's fairness");

# --- 3. behaviour -------------------------------------------------------------
# queue N tasks of TENANT (at PRIORITY), in submission order
sub queue_tasks
{
	my ($tenant, $n, $priority) = @_;
	$priority //= 0;
	sql(qq{SELECT wfe.submit('fair', '{}', NULL, '{"tenant": "$tenant", "priority": $priority}')
	         FROM generate_series(1, $n)});
}
# claim N times one task (or once N tasks with BATCH): the tenants, in order
sub claims
{
	my ($n, $batch) = @_;
	return sql($batch
		? qq{SELECT string_agg(t.tenant, ',') FROM wfe.claim_task('fq', 'w', $n) AS t}
		# (correlated, so that each row claims: an uncorrelated subquery runs once)
		: qq{SELECT string_agg((SELECT t.tenant FROM wfe.claim_task('fq', 'w' || g, 1) AS t), ',' ORDER BY g)
		       FROM generate_series(1, $n) AS g});
}
sub count_of { my ($list, $t) = @_; return scalar grep { $_ eq $t } split /,/, $list; }

queue_tasks('big', 200);
queue_tasks('small', 10);
sql(q{SELECT wfe.configure_queue('fq', fairness => 'none')});
my $got = sql(q{SELECT string_agg(tenant, ',') FROM (SELECT tenant FROM wfe.run_stages
                 WHERE queue = 'fq' AND state = 'queued' ORDER BY priority DESC, ready_at LIMIT 20) AS x});
is(count_of($got, 'small'), 0, "unfair: the next 20 tasks in the ready order are all big's");
sql(q{SELECT wfe.configure_queue('fq', fairness => 'tenant')});
$got = claims(20);
is(count_of($got, 'small'), 10, "fair: small's 10 tasks are among the first 20 claims, beside big's 200");
ok($got =~ /^((big,small|small,big),?){10}$/, 'one of each in turn') or diag $got;
$got = claims(5);
is(count_of($got, 'big'), 5, 'small has nothing left: big gets every claim');

# weights 3:1 (big still has 185 queued)
sql(q{SELECT wfe.configure_tenant('big', weight => 3)});
queue_tasks('small', 60);
$got = claims(20);
is(count_of($got, 'big') . ':' . count_of($got, 'small'), '15:5', 'weights 3:1: 15 and 5 of 20 single claims')
  or diag $got;
$got = claims(8, 1);
is(count_of($got, 'big') . ':' . count_of($got, 'small'), '6:2', 'and 6 and 2 of a batch of 8') or diag $got;

# within a priority level
queue_tasks('small', 1, 5);
is(claims(1), 'small', 'a higher-priority task goes first, whoever has more claimed');

# NULL keeps
sql(q{SELECT wfe.configure_queue('fq', max_in_flight => 1000)});
is(sql(q{SELECT fairness FROM wfe.queues WHERE queue = 'fq'}), 'tenant', 'configure_queue without fairness keeps it');
sql(q{SELECT wfe.configure_tenant('big', max_runs_in_flight => 100000)});
is(sql(q{SELECT weight FROM wfe.tenant_limits WHERE tenant = 'big'}), '3', 'configure_tenant without weight keeps it');

$node->stop;
done_testing();
