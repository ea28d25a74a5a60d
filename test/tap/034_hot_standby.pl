# Reading wfe on a streaming hot standby (operations.md "Scaling out",
# docs/operations.md "On a hot standby"): a primary with the library
# preloaded and a workload in tenant A (completed, failed-and-retrying,
# claimed and queued runs), a standby made with pg_basebackup -R and
# started, its replay caught up; then a login with wfe_reader, a member of
# A, reads every dashboard view (and wfe.schedules, wfe.idempotency),
# wfe.metrics, report, run_timeline, run_mermaid, run_spans, plan_mermaid,
# the transition tables, worker_status, bar and human_ms on the standby.
# None may fail (a write there fails with 25006,
# read_only_sql_transaction); each answers as it does on the primary where
# its answer does not depend on the clock.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use WfeLogin;
use WfeNode;

my $primary = WfeNode::node('wfe_primary', preload => 1, init => [ allows_streaming => 1 ]);
sub sql { return $primary->safe_psql('postgres', $_[0]); }

# login(NODE, ROLE, SQL): (SQLSTATE or '', stdout), connected as ROLE itself
sub login
{
	my $r = WfeLogin::as_login($_[0], @_[1, 2], strict => 1);
	return ($r->{state}, $r->{out});
}

WfeNode::logins($primary,
	submitter => 'wfe_submitter A',
	worker => 'wfe_worker A',
	reader => 'wfe_reader A',
	operator => 'wfe_operator');
sql(q{
SELECT wfe.register_worker('t.qa@1', 'qa');
SELECT wfe.grant_queue('worker', 'qa');});
WfeNode::workflow($primary, <<'YAML');
name: flow-a
version: "1.0.0"
entry: first
stages:
  - name: first
    type: worker
    queue: qa
    worker: t.qa@1
    retry: {max_attempts: 3, initial_ms: 600000, multiplier: 1, max_ms: 600000, jitter: none}
    on_success: completed
    on_failure: failed
YAML

# The workload, as the logins that do it: four runs; four claims, which
# complete, fail (its retry is 10 minutes away), complete, and stay running.
sub as_ok
{
	my ($role, $q) = @_;
	my ($st, $out) = login($primary, $role, $q);
	die "$role: $q: $st" if $st;
	return $out;
}
my @runs = map { as_ok('submitter', qq{SELECT run_id FROM wfe.submit('flow-a', '{"n": $_}', NULL, '{"tenant": "A"}')}) } 1 .. 4;
for my $how (qw(complete fail complete none))
{
	my ($r, $s, $a, $f) = split /\|/, as_ok('worker', q{SELECT run_id, stage, attempt, fence FROM wfe.claim_task('qa', 'w1')});
	as_ok('worker', "SELECT wfe.complete_task($r, '$s', $a, $f, '{\"ok\": true}')") if $how eq 'complete';
	as_ok('worker', "SELECT wfe.fail_task($r, '$s', $a, $f, '{\"code\": \"try.again\"}')") if $how eq 'fail';
}
cmp_ok(sql("SELECT count(*) FROM wfe.runs WHERE state = 'completed'"), '>=', 1, 'the primary has a completed run');

# The standby: pg_basebackup -R (standby.signal and primary_conninfo), started, caught up.
$primary->backup('b', backup_options => ['-R']);
my $standby = PostgreSQL::Test::Cluster->new('wfe_standby');
$standby->init_from_backup($primary, 'b');
$standby->start;
sql("SELECT wfe.tick()");    # something written after the backup, to be replayed
# (-R's primary_conninfo names no application_name, so wait on the standby's own replay position)
my $lsn = $primary->lsn('insert');
ok($standby->poll_query_until('postgres', "SELECT pg_last_wal_replay_lsn() >= '$lsn'::pg_lsn"),
	'the standby replayed the primary');
is($standby->safe_psql('postgres', 'SELECT pg_is_in_recovery()'), 't', 'the standby is in recovery (read only)');
is($standby->safe_psql('postgres', 'SELECT count(*) FROM wfe.runs'), 4, 'the standby has the runs');

# What the reader reads (or the role named third); CLOCK: its answer depends on now(), so only its row count is compared.
my $run = $runs[0];
my @reads = (
	[ 'SELECT * FROM wfe.dashboard_runs', 'clock' ],
	[ 'SELECT * FROM wfe.dashboard_stages', 'clock' ],
	[ 'SELECT * FROM wfe.dashboard_queues', 'clock' ],
	[ 'SELECT * FROM wfe.dashboard_stuck', 'clock' ],
	[ 'SELECT * FROM wfe.dashboard_outbox', 'clock' ],
	[ 'SELECT * FROM wfe.dashboard_cache', 'clock' ],
	[ 'SELECT * FROM wfe.dashboard_tenants', 'clock' ],
	[ 'SELECT * FROM wfe.dashboard_waits', 'clock' ],
	[ 'SELECT * FROM wfe.dashboard_schedules', 'clock' ],
	[ 'SELECT * FROM wfe.dashboard_ingress', 'clock', 'operator' ],    # an operator's view
	[ 'SELECT * FROM wfe.schedules', 'clock' ],
	[ 'SELECT * FROM wfe.idempotency', 'clock' ],
	[ 'SELECT metric, labels, value FROM wfe.metrics ORDER BY 1, 2::text', 'exact' ],
	map({ ([ "SELECT * FROM wfe.report($_)", 'clock' ],
		   [ "SELECT * FROM wfe.run_timeline($_)", 'exact' ],
		   [ "SELECT wfe.run_mermaid($_)", 'exact' ],
		   [ "SELECT wfe.run_spans($_)", 'clock' ]) } @runs),
	[ q{SELECT wfe.plan_mermaid('flow-a')}, 'exact' ],
	[ 'SELECT * FROM wfe.stage_transitions()', 'exact' ],
	[ 'SELECT * FROM wfe.run_transitions()', 'exact' ],
	[ 'SELECT count(*) FROM wfe.worker_status()', 'exact' ],
	[ 'SELECT wfe.bar(0.5), wfe.human_ms(123456)', 'exact' ]);
for my $read (@reads)
{
	my ($q, $how, $role) = @$read;
	$role //= 'reader';
	my ($st, $out) = login($standby, $role, $q);
	my ($pst, $pout) = login($primary, $role, $q);
	is($st, '', "on the standby: $q") or next;
	is($pst, '', "on the primary: $q") or next;
	my @lines = grep { length } split /\n/, $out;
	my @plines = grep { length } split /\n/, $pout;
	if ($how eq 'exact')
	{
		is($out, $pout, "  the same answer on both");
	}
	else
	{
		is(scalar(@lines), scalar(@plines), "  the same number of rows on both");
	}
}
# the reads are not vacuous: the reader sees its tenant's runs there
my ($st, $out) = login($standby, 'reader', 'SELECT count(*) FROM wfe.runs');
is("$st|$out", '|4', 'the reader sees the 4 runs of tenant A on the standby');
($st, $out) = login($standby, 'reader', "SELECT count(*) FROM wfe.run_timeline($run)");
cmp_ok($out, '>', 0, 'a timeline on the standby has rows');
# and a write there is refused as such, so the reads above really ran read only
($st) = login($standby, 'submitter', q{SELECT wfe.submit('flow-a', '{}', NULL, '{"tenant": "A"}')});
is($st, '25006', 'a submit on the standby fails with 25006 (read-only transaction)');

$standby->stop;
$primary->stop;
done_testing();
