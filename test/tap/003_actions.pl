# In-database actions run by the background worker (delivery.md "The
# background worker", 2. In-database actions): a run made only of actions
# whose contracts have a handler completes on its own, one transaction per
# attempt; a handler that raises fails its attempt, which is retried per
# policy (its writes undone), and the run still completes; a handler that
# always fails fails its own run without disturbing the others; an action
# whose run another transaction holds locked is skipped until the lock is
# gone.  With an hour's poll interval, the commit that queues an action
# wakes the worker.  Retention removes runs finished long ago.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use WfeNode;

my $node = WfeNode::node('wfe_actions', preload => 1, conf => "wfe.poll_interval_ms = 200\n");
WfeNode::worker_runs($node);

sub sql { return $node->safe_psql('postgres', $_[0]); }

# The handlers.  Handlers run with search_path = pg_catalog, so they name
# their objects with their schema.  tap_flaky fails on the first call it
# ever gets: the sequence, unlike a table, keeps counting across the
# rolled-back attempt; tap_log shows which writes survived.
sql(<<'SQL');
CREATE TABLE public.tap_log (id serial PRIMARY KEY, what text NOT NULL);
CREATE SEQUENCE public.tap_flaky_calls;
CREATE FUNCTION public.tap_double(input jsonb) RETURNS jsonb
LANGUAGE sql AS $$ SELECT jsonb_build_object('v', (input ->> 'v')::int * 2) $$;
CREATE FUNCTION public.tap_flaky(input jsonb) RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
    n bigint := nextval('public.tap_flaky_calls');
BEGIN
    INSERT INTO public.tap_log (what) VALUES ('flaky call ' || n);
    IF n = 1 THEN
        RAISE EXCEPTION 'tap_flaky: the first call fails';
    END IF;
    RETURN jsonb_build_object('call', n);
END
$$;
CREATE FUNCTION public.tap_broken(input jsonb) RETURNS jsonb
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO public.tap_log (what) VALUES ('broken call');
    RETURN jsonb_build_object('never', 1 / 0);
END
$$;
SELECT wfe.register_action('tap.double@1', handler => 'public.tap_double(jsonb)');
SELECT wfe.register_action('tap.flaky@1', handler => 'public.tap_flaky(jsonb)');
SELECT wfe.register_action('tap.broken@1', handler => 'public.tap_broken(jsonb)');
SQL
WfeNode::workflow($node, <<'YAML');
name: tap-act
version: "1.0.0"
entry: double
stages:
  - name: double
    type: action
    action: tap.double@1
    input: { v: "${context.v}" }
    on_success: flaky
    on_failure: failed
  - name: flaky
    type: action
    action: tap.flaky@1
    retry: {max_attempts: 3, initial_ms: 100, multiplier: 1, max_ms: 100, jitter: none}
    on_success: completed
    on_failure: failed
YAML
WfeNode::workflow($node, <<'YAML');
name: tap-bad
version: "1.0.0"
entry: broken
stages:
  - name: broken
    type: action
    action: tap.broken@1
    retry: {max_attempts: 2, initial_ms: 100, multiplier: 1, max_ms: 100, jitter: none}
    on_success: completed
    on_failure: failed
YAML
pass('handlers, contracts and workflows set up');

#
# Five runs of actions and one doomed run, submitted together.
#
my @runs = split /\n/, sql(<<'SQL');
BEGIN;
SELECT run_id FROM wfe.submit('tap-act', jsonb_build_object('v', 1));
SELECT run_id FROM wfe.submit('tap-bad');
SELECT run_id FROM wfe.submit('tap-act', jsonb_build_object('v', 2));
SELECT run_id FROM wfe.submit('tap-act', jsonb_build_object('v', 3));
SELECT run_id FROM wfe.submit('tap-act', jsonb_build_object('v', 4));
SELECT run_id FROM wfe.submit('tap-act', jsonb_build_object('v', 5));
COMMIT;
SQL
is(scalar(@runs), 6, 'six runs submitted');
my $bad  = $runs[1];
my @good = @runs[ 0, 2 .. 5 ];
my $good = join(',', @good);
my $all  = join(',', @runs);

ok( $node->poll_query_until(
		'postgres', "SELECT bool_and(finished_at IS NOT NULL) FROM wfe.runs WHERE run_id IN ($all)"),
	'every run finished without wfe.tick()');
is( sql("SELECT string_agg(state, ',' ORDER BY run_id) FROM wfe.runs WHERE run_id IN ($good)"),
	'completed,completed,completed,completed,completed',
	'the five runs of handler actions completed');
is( sql("SELECT string_agg((s.result ->> 'v') || '<-' || (r.context ->> 'v'), ',' ORDER BY r.run_id) "
		  . "FROM wfe.runs AS r JOIN wfe.run_stages AS s ON s.run_id = r.run_id AND s.stage = 'double' "
		  . "WHERE r.run_id IN ($good)"),
	'2<-1,4<-2,6<-3,8<-4,10<-5',
	'each action\'s result is its handler\'s answer to its bound input');

# exactly one flaky attempt failed (the first call), and was retried
is( sql("SELECT string_agg(e.run_id || '/' || e.attempt || '/' || (e.detail ->> 'error'), ',') "
		  . "FROM wfe.events AS e WHERE e.run_id IN ($good) AND e.type = 'stage.retry_scheduled'"),
	"$runs[0]/1/handler.error",
	'the failing first call scheduled one retry of its attempt');
is( sql("SELECT state || ' ' || attempt || ' ' || ((result ->> 'call')::int > 1) FROM wfe.run_stages "
		  . "WHERE run_id = $runs[0] AND stage = 'flaky'"),
	'completed 2 true', 'the retried action completed on attempt 2, with a later call\'s result');
is( sql("SELECT count(*) FROM wfe.events WHERE run_id IN ($good) AND type = 'stage.completed'"),
	10, 'one stage.completed per action of each run');
is( sql("SELECT count(*) FROM wfe.events WHERE run_id IN ($good) AND type = 'stage.claimed'"),
	11, 'one claim per attempt (ten actions, one retry)');
is(sql("SELECT count(*) FROM public.tap_log WHERE what = 'flaky call 1'"),
	0, 'the failed attempt\'s own writes were rolled back');
is(sql("SELECT count(*) FROM public.tap_log WHERE what LIKE 'flaky call %'"),
	5, 'the successful attempts\' writes were kept');

# the doomed run failed on its own
is(sql("SELECT state FROM wfe.runs WHERE run_id = $bad"), 'failed', 'the run whose handler always fails failed');
is( sql("SELECT state || ' ' || attempt || ' ' || (error ->> 'code') || ' ' || (error ->> 'sqlstate') "
		  . "|| ' ' || (error ->> 'message') FROM wfe.run_stages WHERE run_id = $bad"),
	'failed 2 handler.error 22012 division by zero',
	'its action failed after its two attempts, with the handler\'s error');
is( sql("SELECT string_agg(type || '/' || attempt, ',' ORDER BY event_id) FROM wfe.events "
		  . "WHERE run_id = $bad AND stage = 'broken' AND type IN ('stage.retry_scheduled', 'stage.failed')"),
	'stage.retry_scheduled/1,stage.failed/2', 'a retry, then the stage failed');
is( sql("SELECT stage || ' ' || attempt || ' ' || reason FROM wfe.dead_letters WHERE run_id = $bad"),
	'broken 2 retries exhausted', 'a dead letter for the exhausted action');
is(sql("SELECT count(*) FROM public.tap_log WHERE what = 'broken call'"),
	0, 'the failing handler left no writes');
ok(sql('SELECT actions_run >= 13 FROM wfe.worker_status()') eq 't',
	'wfe.worker_status() counts the actions the worker ran');
unlike(slurp_file($node->logfile), qr/ERROR:.*(?:wfe worker|_run_next_handler)/,
	'no worker unit failed: handler errors stay inside their attempt');

#
# A queued action whose run another transaction holds locked is skipped,
# not waited for, and run once the lock is gone; meanwhile the worker should
# not spin.  Three slow actions go first, so the lock is taken before the
# worker reaches the fourth run.
#
sql(<<'SQL');
CREATE FUNCTION public.tap_slow(input jsonb) RETURNS jsonb
LANGUAGE plpgsql AS $$ BEGIN PERFORM pg_sleep(0.2); RETURN input; END $$;
SELECT wfe.register_action('tap.slow@1', handler => 'public.tap_slow(jsonb)');
SQL
WfeNode::workflow($node, <<'YAML');
name: tap-slow
version: "1.0.0"
entry: slow
stages:
  - name: slow
    type: action
    action: tap.slow@1
    on_success: completed
    on_failure: failed
YAML
# (LATERAL, with i in its arguments: a submit per row, not one for all three)
# (the holder's session starts first: on a loaded machine its start took
# longer than the 0.6 s of slow actions ahead of the locked run)
my $holder = $node->background_psql('postgres');
my $slow = sql("SELECT string_agg(s.run_id::text, ',') FROM generate_series(1, 3) AS i, LATERAL wfe.submit('tap-slow', jsonb_build_object('i', i)) AS s");
# submitted and locked from the holder's session, one statement after the
# other: a psql started in between (a loaded machine's second or more) let
# the worker run the action before the lock was taken
my $locked = $holder->query_safe("SELECT run_id FROM wfe.submit('tap-act', '{\"v\": 7}');");
chomp $locked;
$holder->query_safe("BEGIN;\nSELECT 1 FROM wfe.runs WHERE run_id = $locked FOR UPDATE;");
ok( $node->poll_query_until(
		'postgres', "SELECT bool_and(state = 'completed') FROM wfe.runs WHERE run_id IN ($slow)"),
	'locked run: the actions queued before it ran');
my $rounds = sql('SELECT rounds FROM wfe.worker_status()');
sleep(2);
is(sql("SELECT state FROM wfe.run_stages WHERE run_id = $locked AND stage = 'double'"),
	'queued', 'locked run: its action waits while another transaction holds the run');
# at most a round per 100 ms while something due cannot be taken: about twenty
cmp_ok(sql("SELECT rounds - $rounds FROM wfe.worker_status()"),
	'<', 100, 'locked run: the worker does not spin meanwhile');
$holder->query_safe('COMMIT;');
$holder->quit;
ok($node->poll_query_until('postgres', "SELECT state = 'completed' FROM wfe.runs WHERE run_id = $locked"),
	'locked run: once the lock is gone its actions run and the run completes');

#
# Wakeups, not polling: with an hour's poll interval the commit that
# queues an action wakes the worker, and the retry timer it sets while
# running one is what it sleeps until.
#
my $offset = -s $node->logfile;
sql("ALTER SYSTEM SET wfe.poll_interval_ms = '1h'");
sql('SELECT pg_reload_conf()');
$node->wait_for_log(qr/wfe worker reloaded its configuration/, $offset);
# let the worker settle into its long sleep
ok( $node->poll_query_until(
		'postgres', "SELECT sleeping_until > now() + interval '10 minutes' FROM wfe.worker_status()"),
	'long poll: the idle worker sleeps for the poll interval');
my $wakeups = sql('SELECT wakeups FROM wfe.worker_status()');
sql('ALTER SEQUENCE public.tap_flaky_calls RESTART');
my $r = sql("SELECT run_id FROM wfe.submit('tap-act', '{\"v\": 21}')");
ok($node->poll_query_until('postgres', "SELECT state = 'completed' FROM wfe.runs WHERE run_id = $r"),
	'long poll: the run of actions completes');
is( sql("SELECT string_agg(stage || '=' || attempt, ',' ORDER BY ordinal) FROM wfe.run_stages "
		  . "WHERE run_id = $r"),
	'double=1,flaky=2', 'long poll: including the retry of the failing first call');
ok(sql("SELECT wakeups > $wakeups FROM wfe.worker_status()") eq 't',
	'long poll: the submitting commit woke the worker');

#
# Retention: the worker removes runs finished longer than wfe.retention
# (7 days) ago, with their history; it looks when it starts.
#
my $total = sql('SELECT count(*) FROM wfe.runs');
sql("UPDATE wfe.runs SET finished_at = now() - interval '8 days' WHERE run_id IN ($runs[0], $bad)");
$node->restart;
ok( $node->poll_query_until(
		'postgres', "SELECT count(*) = 0 FROM wfe.runs WHERE run_id IN ($runs[0], $bad)"),
	'retention: the expired runs are removed');
# their events are in today's partition of wfe.events: they go when that
# day's partition is dropped whole (docs/scaling.md "History partitions");
# none may be left in the default partition, which retention empties row by row
is( sql("SELECT (SELECT count(*) FROM wfe.events_default WHERE run_id IN ($runs[0], $bad)) || ' ' || "
		  . "(SELECT count(*) FROM wfe.run_stages WHERE run_id IN ($runs[0], $bad)) || ' ' || "
		  . "(SELECT count(*) FROM wfe.timers WHERE run_id IN ($runs[0], $bad)) || ' ' || "
		  . "(SELECT count(*) FROM wfe.dead_letters WHERE run_id IN ($runs[0], $bad))"),
	'0 0 0 0', 'retention: with their stages, timers and dead letters (and no event in the default partition)');
is(sql('SELECT count(*) FROM wfe.runs'), $total - 2, 'retention: the other runs are kept');

$node->stop;
done_testing();
