# Crashes in the middle of transitions (quality.md "TAP"): kill -9 of a
# backend holding a transition's transaction open (the postmaster restarts
# everything), then kill -9 of the postmaster while workers and the
# background worker move runs along.  After each crash: every run is in
# exactly one legal state, no stage is in an impossible state, every
# committed transition has its event rows (and, for broker queues, its
# outbox row), no attempt completed twice; and when workers finish the work,
# every run completes.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);
use WfeNode;

my $name = 'wfe_crash';
my $node = WfeNode::node($name, preload => 1,
	conf => "wfe.poll_interval_ms = 200\n"
	  # PostgreSQL::Test::Cluster turns this off; a killed backend must
	  # make the postmaster reinitialise, not stop
	  . "restart_after_crash = on\n"
	  # the background loop's statement would otherwise fill the log
	  . "log_statement = none\n");

sub sql { return $node->safe_psql('postgres', $_[0]); }

# The workflow: a poll-queue worker stage, an in-database action (run by the
# background worker), and a worker stage on a broker-mode queue (its
# dispatches are outbox rows; no publisher is configured, so a test relay
# plays the broker and its consumer).
sql(<<'SQL');
CREATE SCHEMA tap;
CREATE FUNCTION public.tap_inc(input jsonb) RETURNS jsonb
LANGUAGE sql AS $$ SELECT jsonb_build_object('n', coalesce((input ->> 'n')::int, 0) + 1) $$;
SELECT wfe.register_worker('tap.first@1', 'tap-crash-a');
SELECT wfe.register_action('tap.inc@1', handler => 'public.tap_inc(jsonb)');
SELECT wfe.register_worker('tap.last@1', 'tap-crash-b');
SELECT wfe.configure_queue('tap-crash-b', 'broker');
SQL
WfeNode::workflow($node, <<'YAML');
name: tap-crash
version: "1.0.0"
entry: first
stages:
  - name: first
    type: worker
    queue: tap-crash-a
    worker: tap.first@1
    retry: {max_attempts: 10, initial_ms: 100, multiplier: 1, max_ms: 100, jitter: none}
    on_success: inc
    on_failure: failed
  - name: inc
    type: action
    action: tap.inc@1
    input: { n: "${context.n}" }
    on_success: last
    on_failure: failed
  - name: last
    type: worker
    queue: tap-crash-b
    worker: tap.last@1
    on_success: completed
    on_failure: failed
YAML
sql(<<'SQL');
-- What a broker would deliver: the dispatch row of each attempt of a
-- broker-queue stage that is queued (or, redelivered, running).
CREATE VIEW tap.deliveries AS
SELECT o.run_id, o.stage, o.attempt, o.fence
  FROM wfe.run_stages AS st
  JOIN wfe.outbox AS o ON o.kind = 'dispatch' AND o.run_id = st.run_id AND o.stage = st.stage
                      AND o.attempt = st.attempt AND o.fence = st.fence
 WHERE st.queue = 'tap-crash-b' AND st.state IN ('queued', 'running');

-- Workers finishing the work: poll workers claim and complete, broker
-- consumers accept and complete what is delivered (again).
CREATE FUNCTION tap.work_once() RETURNS int
LANGUAGE plpgsql AS $$
DECLARE
    t wfe.task;
    d record;
    n int := 0;
BEGIN
    FOR t IN SELECT * FROM wfe.claim_task('tap-crash-a', 'w-finish', 100) LOOP
        PERFORM wfe.complete_task(t.run_id, t.stage, t.attempt, t.fence, '{}');
        n := n + 1;
    END LOOP;
    FOR d IN SELECT * FROM tap.deliveries LIMIT 100 LOOP
        PERFORM wfe.accept_task(d.run_id, d.stage, d.attempt, d.fence, 'w-finish');
        PERFORM wfe.complete_task(d.run_id, d.stage, d.attempt, d.fence, '{}');
        n := n + 1;
    END LOOP;
    RETURN n;
END
$$;

-- Workers busy while the server dies: each claim, acceptance, report and
-- submission in a transaction of its own, forever.  Poll claims take a
-- 1 s lease, so a claim whose report was lost times out and is retried.
CREATE PROCEDURE tap.work_forever()
LANGUAGE plpgsql AS $$
DECLARE
    t wfe.task;
    d record;
    i int := 0;
BEGIN
    LOOP
        i := i + 1;
        IF i % 2 = 0 THEN
            PERFORM wfe.submit('tap-crash', jsonb_build_object('n', i));
            COMMIT;
        END IF;
        SELECT * INTO t FROM wfe.claim_task('tap-crash-a', 'w-busy', 1, 1000);
        COMMIT;
        IF t.run_id IS NOT NULL THEN
            PERFORM wfe.complete_task(t.run_id, t.stage, t.attempt, t.fence, '{}');
            COMMIT;
        END IF;
        SELECT * INTO d FROM tap.deliveries WHERE stage = 'last' LIMIT 1;
        IF FOUND THEN
            PERFORM wfe.accept_task(d.run_id, d.stage, d.attempt, d.fence, 'w-busy');
            COMMIT;
            PERFORM wfe.complete_task(d.run_id, d.stage, d.attempt, d.fence, '{}');
            COMMIT;
        END IF;
        PERFORM pg_sleep(0.002);
    END LOOP;
END
$$;

-- Everything that must hold whatever moment the server died at; one row
-- per violation.
CREATE FUNCTION tap.violations() RETURNS SETOF text
LANGUAGE sql AS $$
-- a run is in exactly one legal state: running, or finalising with an
-- intent, or finished with the matching intent and finish time
SELECT format('run %s: state %s, intent %s, finished_at %s', r.run_id, r.state, r.intent, r.finished_at)
  FROM wfe.runs AS r
 WHERE NOT ((r.state = 'running' AND r.finished_at IS NULL)
            OR (r.state = 'finalising' AND r.intent IS NOT NULL AND r.finished_at IS NULL)
            OR (r.state IN ('completed', 'failed', 'cancelled') AND r.finished_at IS NOT NULL
                AND r.intent IS NOT NULL AND (r.state <> 'completed' OR r.intent = 'completed')))
UNION ALL
-- its life on the event log: submitted and started once, finished once
-- exactly when it is finished, with its final state
SELECT format('run %s (%s): %s run.submitted, %s run.started, terminal events %s', r.run_id, r.state,
              count(*) FILTER (WHERE e.type = 'run.submitted'), count(*) FILTER (WHERE e.type = 'run.started'),
              string_agg(e.type, ',') FILTER (WHERE e.type IN ('run.completed', 'run.failed', 'run.cancelled')))
  FROM wfe.runs AS r LEFT JOIN wfe.events AS e ON e.run_id = r.run_id
 GROUP BY r.run_id, r.state
HAVING count(*) FILTER (WHERE e.type = 'run.submitted') <> 1
    OR count(*) FILTER (WHERE e.type = 'run.started') <> 1
    OR count(*) FILTER (WHERE e.type IN ('run.completed', 'run.failed', 'run.cancelled'))
       <> CASE WHEN r.state IN ('completed', 'failed', 'cancelled') THEN 1 ELSE 0 END
    OR count(*) FILTER (WHERE e.type IN ('run.completed', 'run.failed', 'run.cancelled')
                          AND e.type <> 'run.' || r.state) > 0
UNION ALL
-- no stage in an impossible state
SELECT format('run %s stage %s: %s with attempt %s, fence %s, outcome %s, claimed_by %s, finished_at %s',
              s.run_id, s.stage, s.state, s.attempt, s.fence, s.outcome, s.claimed_by, s.finished_at)
  FROM wfe.run_stages AS s
 WHERE (s.state = 'waiting' AND (s.attempt <> 0 OR s.finished_at IS NOT NULL))
    OR (s.state IN ('queued', 'dispatched', 'running', 'retry_scheduled', 'completed', 'failed', 'timed_out')
        AND (s.attempt < 1 OR s.fence < 1))
    OR (s.state IN ('queued', 'dispatched', 'running', 'retry_scheduled') AND s.finished_at IS NOT NULL)
    OR (s.state = 'queued' AND (s.claimed_by IS NOT NULL OR s.ready_at IS NULL))
    OR (s.state = 'running' AND (s.claimed_by IS NULL OR s.started_at IS NULL OR s.outcome IS NOT NULL))
    OR (s.state = 'retry_scheduled' AND s.outcome IS DISTINCT FROM 'failed')
    OR (s.state = 'completed' AND (s.outcome IS DISTINCT FROM 'completed' OR s.finished_at IS NULL))
UNION ALL
-- stages run in order: a stage is under way only if the ones before it completed
SELECT format('run %s: stage %s is %s while stage %s is %s', s.run_id, s.stage, s.state, p.stage, p.state)
  FROM wfe.run_stages AS s
  JOIN wfe.run_stages AS p ON p.run_id = s.run_id AND p.ordinal < s.ordinal
 WHERE s.state <> 'waiting' AND p.state <> 'completed'
UNION ALL
-- a completed run completed every stage; a finished run has nothing in flight
SELECT format('run %s (%s): stage %s is %s', r.run_id, r.state, s.stage, s.state)
  FROM wfe.runs AS r JOIN wfe.run_stages AS s ON s.run_id = r.run_id
 WHERE (r.state = 'completed' AND s.state <> 'completed')
    OR (r.finished_at IS NOT NULL AND s.state IN ('queued', 'dispatched', 'running', 'retry_scheduled'))
UNION ALL
-- every released attempt has its release event, every running one its
-- claim (or acceptance), every completed one its stage.completed event
SELECT format('run %s stage %s: %s attempt %s lacks its %s event', s.run_id, s.stage, s.state, s.attempt, x.needs)
  FROM wfe.run_stages AS s
 CROSS JOIN LATERAL (VALUES ('release', s.attempt >= 1, ARRAY['stage.released', 'stage.retried']),
                            ('claim', s.state = 'running', ARRAY['stage.claimed', 'stage.accepted']),
                            ('completion', s.state = 'completed', ARRAY['stage.completed']),
                            ('retry', s.state = 'retry_scheduled', ARRAY['stage.retry_scheduled']))
       AS x(needs, applies, types)
 WHERE x.applies
   AND NOT EXISTS (SELECT 1 FROM wfe.events AS e
                    WHERE e.run_id = s.run_id AND e.stage = s.stage AND e.attempt = s.attempt
                      AND e.type = ANY (x.types))
UNION ALL
-- a retry waits on its timer
SELECT format('run %s stage %s: retry_scheduled attempt %s without its timer', s.run_id, s.stage, s.attempt)
  FROM wfe.run_stages AS s
 WHERE s.state = 'retry_scheduled'
   AND NOT EXISTS (SELECT 1 FROM wfe.timers AS t
                    WHERE t.run_id = s.run_id AND t.stage = s.stage AND t.kind = 'retry'
                      AND t.attempt = s.attempt AND t.fence = s.fence AND t.fired_at IS NULL)
UNION ALL
-- no attempt completed twice, no stage completed on two attempts, and no
-- completion recorded for a stage that is not completed
SELECT format('run %s stage %s: stage.completed events for attempts %s, stage is %s attempt %s',
              e.run_id, e.stage, string_agg(e.attempt::text, ',' ORDER BY e.event_id), s.state, s.attempt)
  FROM wfe.events AS e JOIN wfe.run_stages AS s ON s.run_id = e.run_id AND s.stage = e.stage
 WHERE e.type = 'stage.completed'
 GROUP BY e.run_id, e.stage, s.state, s.attempt
HAVING count(*) > 1 OR s.state <> 'completed' OR min(e.attempt) <> s.attempt
UNION ALL
-- every release onto the broker queue has exactly one dispatch row, for
-- the fence it was released with, and every dispatch row its release
SELECT format('run %s stage %s attempt %s: %s dispatch rows for one release', e.run_id, e.stage, e.attempt,
              (SELECT count(*) FROM wfe.outbox AS o
                WHERE o.kind = 'dispatch' AND o.run_id = e.run_id AND o.stage = e.stage
                  AND o.attempt = e.attempt AND o.fence = e.fence))
  FROM wfe.events AS e
 WHERE e.type IN ('stage.released', 'stage.retried') AND e.detail ->> 'queue' = 'tap-crash-b'
   AND (SELECT count(*) FROM wfe.outbox AS o
         WHERE o.kind = 'dispatch' AND o.run_id = e.run_id AND o.stage = e.stage
           AND o.attempt = e.attempt AND o.fence = e.fence) <> 1
UNION ALL
SELECT format('outbox %s: a dispatch of run %s stage %s attempt %s without its release', o.id, o.run_id,
              o.stage, o.attempt)
  FROM wfe.outbox AS o
 WHERE o.kind = 'dispatch'
   AND NOT EXISTS (SELECT 1 FROM wfe.events AS e
                    WHERE e.run_id = o.run_id AND e.stage = o.stage AND e.attempt = o.attempt
                      AND e.type IN ('stage.released', 'stage.retried'))
$$;
SQL
pass('workflow, workers and checks set up');

# Assert the invariants; show what broke.
sub check_invariants
{
	my ($when) = @_;
	my $v = sql('SELECT string_agg(v, E\'\n\') FROM tap.violations() AS v');
	is($v, '', "$when: every run and stage is in a legal, fully recorded state");
	is( sql("SELECT count(*) FROM wfe.runs WHERE state NOT IN ('running', 'finalising', 'completed', 'failed', 'cancelled')"),
		0, "$when: every run is in one of the run states");
}

# Let workers finish everything; true when every run finished.
sub finish_work
{
	my $deadline = time() + 120;
	while (time() < $deadline)
	{
		return 1 if sql('SELECT count(*) FROM wfe.runs WHERE finished_at IS NULL') == 0;
		sql('SELECT tap.work_once()');
		usleep(50_000);
	}
	return 0;
}

# Server processes of this node still alive (after its postmaster was killed).
sub leftover_processes
{
	my @left;
	opendir(my $proc, '/proc') or return ();
	for my $pid (grep { /^\d+$/ } readdir $proc)
	{
		open(my $fh, '<', "/proc/$pid/cmdline") or next;
		my $cmd = <$fh> // '';
		close $fh;
		push @left, $pid if $cmd =~ /^postgres: \Q$name\E: /;
	}
	closedir $proc;
	return @left;
}

sub wait_for_worker
{
	my ($when) = @_;
	ok( $node->poll_query_until(
			'postgres',
			"SELECT count(*) = 1 FROM pg_stat_activity WHERE backend_type = 'wfe worker'"),
		"$when: the wfe worker is back");
}

ok($node->poll_query_until('postgres', 'SELECT rounds > 0 FROM wfe.worker_status()'), 'the worker runs');

#
# Some runs, some progress.
#
sql("SELECT wfe.submit('tap-crash', jsonb_build_object('n', i)) FROM generate_series(1, 20) AS i");
sql('SELECT tap.work_once()');    # first stages done: the worker runs the actions
ok( $node->poll_query_until(
		'postgres', "SELECT count(*) = 20 FROM wfe.run_stages WHERE stage = 'last' AND state = 'queued'"),
	'twenty runs reached their broker-queue stage');
sql("SELECT wfe.submit('tap-crash', jsonb_build_object('n', i)) FROM generate_series(21, 30) AS i");

#
# 1. kill -9 of a backend in the middle of a transition: it reported a
#    result (complete_task) in a transaction it had not committed.
#
my $bg = $node->background_psql('postgres', on_error_stop => 0);
my $doomed_pid = $bg->query_safe('SELECT pg_backend_pid()');
my ($run, $stage, $attempt, $fence) = split /\|/,
  $bg->query_safe(
	"SELECT run_id, stage, attempt, fence FROM wfe.claim_task('tap-crash-a', 'w-doomed')");
is($stage, 'first', 'the doomed session claimed a task (committed)');
is( $bg->query_safe(
		"BEGIN;\nSELECT wfe.complete_task($run, '$stage', $attempt, $fence, '{\"doomed\": true}');"),
	'accepted',
	'it reported the result in a transaction still open');
is( sql("SELECT state FROM wfe.run_stages WHERE run_id = $run AND stage = 'first'"),
	'running', 'others do not see the uncommitted completion');

my $offset = -s $node->logfile;
is(kill('KILL', $doomed_pid), 1, 'kill -9 of the backend');
$node->wait_for_log(qr/all server processes terminated; reinitializing/, $offset);
like(slurp_file($node->logfile, $offset), qr/\(PID $doomed_pid\) was terminated by signal 9/,
	'the postmaster saw the backend die and reinitialised');
eval { $bg->quit; };
ok($node->poll_query_until('postgres', 'SELECT true'), 'the server accepts connections again');
wait_for_worker('after the backend crash');

is( sql("SELECT state || ' ' || attempt || ' ' || fence || ' ' || (result IS NULL) FROM wfe.run_stages "
		  . "WHERE run_id = $run AND stage = 'first'"),
	"running $attempt $fence true",
	'the claim survived, the uncommitted completion did not');
is( sql("SELECT count(*) FROM wfe.events WHERE run_id = $run AND type = 'stage.completed'"),
	0, 'no stage.completed event of the lost transaction');
is(sql("SELECT state FROM wfe.run_stages WHERE run_id = $run AND stage = 'inc'"),
	'waiting', 'its successor was not released');
check_invariants('after kill -9 of a backend');

# the worker, reconnected, reports again: accepted once, then a duplicate
is(sql("SELECT wfe.complete_task($run, '$stage', $attempt, $fence, '{\"doomed\": true}')"),
	'accepted', 'the report sent again is accepted');
is(sql("SELECT wfe.complete_task($run, '$stage', $attempt, $fence, '{\"doomed\": true}')"),
	'duplicate', 'and a second time it is a duplicate');

#
# 2. kill -9 of the postmaster while workers and the background worker
#    move runs along.
#
$bg = $node->background_psql('postgres', on_error_stop => 0);
$bg->query_until(qr/working/, "\\echo working\nCALL tap.work_forever();\n");
my $done = sql("SELECT count(*) FROM wfe.runs WHERE state = 'completed'");
ok( $node->poll_query_until(
		'postgres',
		"SELECT count(*) >= $done + 10 FROM wfe.runs WHERE state = 'completed'"),
	'the busy workers complete runs');
ok( $node->poll_query_until(
		'postgres',
		"SELECT count(*) = 1 FROM pg_stat_activity WHERE query LIKE 'CALL tap.work_forever()%' AND state = 'active'"),
	'the busy workers are still at it');
my $runs_before = sql('SELECT count(*) FROM wfe.runs');
# read before the kill: after the restart the background worker may already
# have finished them.  (The busy loop submits a run every other round, but
# can catch up with all of them for a moment: wait for one in flight.)
# The count that is checked is the one read (a poll and then a second read
# could see the loop catch up in between).
my $in_flight = 0;
for (1 .. 1200)
{
	$in_flight = sql("SELECT count(*) FROM wfe.runs WHERE finished_at IS NULL");
	last if $in_flight > 0;
	usleep(50_000);
}

$offset = -s $node->logfile;
my ($postmaster) = split /\n/, slurp_file($node->data_dir . '/postmaster.pid');
$node->kill9;
# the postmaster's children notice its death and exit; it must be gone
# (reaped, not a zombie) too, or the new one refuses to start
my $deadline = time() + 60;
usleep(100_000) while ((-e "/proc/$postmaster" || leftover_processes()) && time() < $deadline);
ok(!-e "/proc/$postmaster", 'the killed postmaster is gone');
is(join(',', leftover_processes()), '', 'the orphaned server processes exited');
eval { $bg->quit; };
$node->start;
wait_for_worker('after kill -9 of the postmaster');
like(slurp_file($node->logfile, $offset), qr/database system was interrupted|was not properly shut down/,
	'the restart recovered from a crash');
ok(sql('SELECT count(*) FROM wfe.runs') >= $runs_before, 'no committed run was lost');
check_invariants('after kill -9 of the postmaster');
cmp_ok($in_flight, '>', 0, 'runs were in flight just before the postmaster was killed');

#
# Workers finish the work: every run completes.
#
ok(finish_work(), 'workers finish every run');
is( sql("SELECT string_agg(state || '=' || n, ' ') FROM "
		  . "(SELECT state, count(*) AS n FROM wfe.runs GROUP BY state) AS x"),
	'completed=' . sql('SELECT count(*) FROM wfe.runs'),
	'every run completed');
check_invariants('at the end');
is( sql("SELECT count(*) FROM wfe.run_stages WHERE stage = 'inc' AND (result ->> 'n')::int <> "
		  . "coalesce((SELECT (r.context ->> 'n')::int FROM wfe.runs AS r WHERE r.run_id = run_stages.run_id), 0) + 1"),
	0, 'every action ran on its own input');
is( sql("SELECT count(*) FROM (SELECT run_id, stage, attempt FROM wfe.events WHERE type = 'stage.completed' "
		  . "GROUP BY 1, 2, 3 HAVING count(*) > 1) AS x"),
	0, 'no attempt completed twice');
is( sql("SELECT count(*) FROM wfe.events WHERE type = 'stage.completed'"),
	sql('SELECT count(*) * 3 FROM wfe.runs'),
	'exactly one completion per stage of every run');

$node->stop;
done_testing();
