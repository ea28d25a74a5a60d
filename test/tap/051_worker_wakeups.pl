# The background worker is woken for work due sooner than it would look,
# and only then (docs/benchmarks.md "The write path"): every claim asks
# for the worker by its execution deadline, mostly an hour away, and a
# commit that asks while the worker is in a round no longer sets its latch
# for that -- under a steady claim load the worker went round after round
# for nothing (18 rounds a second in the batch-1 benchmark).  It still
# sleeps no later than the earliest deadline a commit asked for: a short
# lease claimed during the load times out on time.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);
use WfeNode;

my $node = WfeNode::node('wfe_wakeups', preload => 1, conf => "wfe.poll_interval_ms = 1000\n");
WfeNode::worker_runs($node);

sub sql { return $node->safe_psql('postgres', $_[0]); }

# a chain of 400 worker stages on queue tw
my $src = "name: tw-chain\nversion: \"1.0.0\"\nentry: s001\nstages:\n";
for my $i (1 .. 400)
{
	my $next = $i == 400 ? 'completed' : sprintf('s%03d', $i + 1);
	$src .= sprintf("  - name: s%03d\n    type: worker\n    queue: tw\n    worker: tw.step\@1\n"
		  . "    on_success: %s\n    on_failure: failed\n", $i, $next);
}
sql("SELECT wfe.register_worker('tw.step\@1', 'tw')");
WfeNode::workflow($node, $src);
sql("SELECT wfe.submit('tw-chain', '{}') FROM generate_series(1, 20)");

# Steps back to back, each claim and each completion its own transaction.
my $rounds = sql('SELECT rounds FROM wfe.worker_status()');
my $t0 = time;
my $done = sql(<<'SQL');
DO $$
DECLARE
    t record;
    n int := 0;
BEGIN
    FOR i IN 1 .. 600 LOOP
        SELECT * INTO t FROM wfe.claim_task('tw', 'w1', 1);
        EXIT WHEN t.run_id IS NULL;
        COMMIT;
        PERFORM wfe.complete_task(t.run_id, t.stage, t.attempt, t.fence);
        COMMIT;
        n := n + 1;
    END LOOP;
    RAISE NOTICE 'steps %', n;
END
$$;
SELECT count(*) FROM wfe.events WHERE type = 'stage.completed';
SQL
my $secs = time - $t0;
is($done, 600, 'the steps ran');
my $went = sql("SELECT rounds - $rounds FROM wfe.worker_status()");
# a round a second (the poll interval), a few more for what the steps'
# commits asked for now; before, a round for every claim committed in one
cmp_ok($went, '<=', int($secs) * 2 + 6,
	sprintf('600 steps in %.1f s: the worker went %d rounds, not one per claim', $secs, $went));

# A short lease claimed while claims come and go: its deadline still
# wakes the worker on time, and the attempt ends.
my $bg = $node->background_psql('postgres');
$bg->query_until(qr/looping/, <<'SQL');
\echo looping
DO $$
DECLARE
    t record;
BEGIN
    FOR i IN 1 .. 800 LOOP
        SELECT * INTO t FROM wfe.claim_task('tw', 'w2', 1);
        EXIT WHEN t.run_id IS NULL;
        COMMIT;
        PERFORM wfe.complete_task(t.run_id, t.stage, t.attempt, t.fence);
        COMMIT;
    END LOOP;
END
$$;
SQL
# (twenty runs each have a task queued at any time but the one the loop
# holds; a claim that finds none, a race with the loop, is tried again)
my $leased = '';
for (1 .. 20)
{
	$leased = sql("SELECT run_id || ':' || stage || ':' || attempt "
		  . "FROM wfe.claim_task('tw', 'w3', 1, lease_ms => 300)");
	last if $leased ne '';
}
BAIL_OUT('no task to claim with a lease') if $leased eq '';
my ($run, $stage, $attempt) = split /:/, $leased;
my $t1 = time;
ok( $node->poll_query_until(
		'postgres',
		"SELECT state <> 'running' OR attempt > $attempt FROM wfe.run_stages WHERE run_id = $run AND stage = '$stage'"),
	'a 300 ms lease claimed during the load ends');
cmp_ok(time - $t1, '<', 5, 'and its deadline was kept within seconds, not at the next idle poll');
$bg->quit;

done_testing();
