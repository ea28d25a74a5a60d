# Backends that live through DROP EXTENSION wfe; CREATE EXTENSION wfe
# (docs/architecture.md "The engine", the caches), and in-database attempts
# that carry a clock (operations.md "What the worker does"):
#
#   1. one psql session (a pooled connection) and the background worker use
#      wfe, the extension is dropped and created again from another session,
#      and definitions with the same ids but other stages are created: the
#      same session's submit releases the new entry stage and its reports
#      move the run; the worker's in-database actions complete and its
#      deadline expiries fire -- none applies the old extension's plans;
#   2. an in-database attempt is running with its execution deadline;
#   3. kill -9 of the worker in the middle of an in-database action: the
#      action runs again after the restart and the run completes; an attempt
#      committed as running by a runner that stopped (0.2.0's stale caches
#      left such) is timed out by the new worker's repair and retried.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use WfeNode;

my $node = WfeNode::node('wfe_recreate', preload => 1, extension => 0,
	conf => "wfe.poll_interval_ms = 100\n"
	  # a killed worker must make the postmaster reinitialise, not stop
	  . "restart_after_crash = on\n"
	  . "log_statement = none\n");

sub sql { return $node->safe_psql('postgres', $_[0]); }

# a workflow from its YAML stages, approved and activated
sub workflow
{
	my ($name, $stages) = @_;
	return <<"SQL";
SELECT wfe.create_definition(\$y\$
name: $name
version: "1.0.0"
entry: ${\ ($stages =~ /name: (\S+)/)[0] }
stages:
$stages
\$y\$);
SELECT wfe.approve('$name', '1.0.0');
SELECT wfe.activate('$name', '1.0.0');
SQL
}

# What the extension is set up with, before and after it is created again.
my $setup = <<'SQL';
CREATE EXTENSION wfe;
SELECT wfe.register_worker('rc.work@1', 'rc-q');
SELECT wfe.register_action('rc.act@1', handler => 'public.rc_act(jsonb)');
SQL
sql(<<'SQL');
CREATE SEQUENCE public.rc_calls;
CREATE TABLE public.rc_sleep_on (call bigint);
-- the call numbered in rc_sleep_on sleeps (the worker is killed meanwhile);
-- every call says whether its attempt is running with a deadline
CREATE FUNCTION public.rc_act(input jsonb) RETURNS jsonb LANGUAGE plpgsql AS $$
DECLARE
    n bigint := nextval('public.rc_calls');
BEGIN
    IF EXISTS (SELECT 1 FROM public.rc_sleep_on AS s WHERE s.call = n) THEN
        PERFORM pg_sleep(60);
    END IF;
    RETURN jsonb_build_object('clock', (SELECT bool_and(st.deadline_at IS NOT NULL) FROM wfe.run_stages AS st
                                         WHERE st.state = 'running' AND st.handler IS NOT NULL));
END $$;
SQL
sql($setup);
# definition 1: an action; definition 2: a worker stage with a queue deadline
sql(workflow('pre-act', <<'YAML'));
  - name: act
    type: action
    action: rc.act@1
    on_success: completed
    on_failure: failed
YAML
sql(workflow('pre-work', <<'YAML'));
  - name: work
    type: worker
    queue: rc-q
    worker: rc.work@1
    queue_deadline_ms: 500
    on_success: completed
    on_failure: failed
YAML
is(sql(q{SELECT string_agg(definition_id || '=' || workflow, ',' ORDER BY definition_id) FROM wfe.definitions}),
	'1=pre-act,2=pre-work', 'before: definitions 1 and 2');
ok($node->poll_query_until('postgres', 'SELECT rounds > 0 FROM wfe.worker_status()'), 'the worker runs');

# ---------------------------------------------------------------------
# 1. Before: one session and the worker use both definitions
# ---------------------------------------------------------------------
my $session = $node->background_psql('postgres');
my $pid = $session->query_safe('SELECT pg_backend_pid()');
my $r_act = $session->query_safe(q{SELECT run_id FROM wfe.submit('pre-act', '{}')});
my $r_work = $session->query_safe(q{SELECT run_id FROM wfe.submit('pre-work', '{}')});
my $r_late = $session->query_safe(q{SELECT run_id FROM wfe.submit('pre-work', '{}')});
is($session->query_safe(<<"SQL"), 'accepted', 'before: the session claims and completes a task');
SELECT wfe.complete_task(t.run_id, t.stage, t.attempt, t.fence, '{}')
  FROM wfe.claim_task('rc-q', 'w1') AS t WHERE t.run_id = $r_work
SQL
ok($node->poll_query_until('postgres',
		"SELECT string_agg(state, ',' ORDER BY run_id) = 'completed,completed,failed' FROM wfe.runs"),
	'before: the worker ran the action and timed out the unclaimed task');
is(sql("SELECT state FROM wfe.run_stages WHERE run_id = $r_late"), 'timed_out', 'before: ... by its queue deadline');

# ---------------------------------------------------------------------
# Dropped and created again, from another session; ids start again
# ---------------------------------------------------------------------
sql("DROP EXTENSION wfe; $setup");
sql(q{SELECT wfe.register_worker('rc.other@1', 'rc-q2')});
# definition 1 is now worker stages, definition 2 two actions
sql(workflow('post-work', <<'YAML'));
  - name: first
    type: worker
    queue: rc-q2
    worker: rc.other@1
    queue_deadline_ms: 500
    on_success: second
    on_failure: failed
  - name: second
    type: worker
    queue: rc-q2
    worker: rc.other@1
    on_success: completed
    on_failure: failed
YAML
sql(workflow('post-act', <<'YAML'));
  - name: one
    type: action
    action: rc.act@1
    retry: {max_attempts: 3, initial_ms: 100, multiplier: 1, max_ms: 100, jitter: none}
    on_success: two
    on_failure: failed
  - name: two
    type: action
    action: rc.act@1
    on_success: completed
    on_failure: failed
YAML
is(sql(q{SELECT string_agg(definition_id || '=' || workflow, ',' ORDER BY definition_id) FROM wfe.definitions}),
	'1=post-work,2=post-act', 'after: definitions 1 and 2 again, of other workflows');

# the same session: its submit releases the new entry stage
is($session->query_safe('SELECT pg_backend_pid()'), $pid, 'after: the same session (backend)');
my $r1 = $session->query_safe(q{SELECT run_id FROM wfe.submit('post-work', '{}')});
# (asked in the session: a new psql's start could take the stage's 500 ms queue deadline under load)
is($session->query_safe("SELECT string_agg(stage || ':' || state, ',' ORDER BY stage) FROM wfe.run_stages WHERE run_id = $r1"),
	'first:queued,second:waiting', 'after: the session\'s submit released the new plan\'s entry stage');
for my $stage ('first', 'second')
{
	is($session->query_safe(<<"SQL"), 'accepted', "after: the session completes stage $stage");
SELECT wfe.complete_task(t.run_id, t.stage, t.attempt, t.fence, '{}')
  FROM wfe.claim_task('rc-q2', 'w1') AS t WHERE t.run_id = $r1
SQL
}
is(sql("SELECT state FROM wfe.runs WHERE run_id = $r1"), 'completed', 'after: the session\'s run completed');

# the worker: in-database actions complete, deadlines expire
my $r2 = sql(q{SELECT run_id FROM wfe.submit('post-act', '{}')});
ok($node->poll_query_until('postgres', "SELECT state = 'completed' FROM wfe.runs WHERE run_id = $r2"),
	'after: the worker ran both actions of the new definition 2 to completion');
is(sql("SELECT string_agg(stage || ':' || state, ',' ORDER BY stage) FROM wfe.run_stages WHERE run_id = $r2"),
	'one:completed,two:completed', 'after: ... each stage completed');
my $r3 = sql(q{SELECT run_id FROM wfe.submit('post-work', '{}')});
ok($node->poll_query_until('postgres', "SELECT state = 'failed' FROM wfe.runs WHERE run_id = $r3"),
	'after: the worker timed out the new definition 1\'s unclaimed stage');
is(sql("SELECT state FROM wfe.run_stages WHERE run_id = $r3 AND stage = 'first'"), 'timed_out',
	'after: ... by its queue deadline');

# ---------------------------------------------------------------------
# 2. An in-database attempt runs with its execution deadline
# ---------------------------------------------------------------------
is(sql("SELECT string_agg(result ->> 'clock', ',') FROM wfe.run_stages WHERE run_id = $r2"), 'true,true',
	'2: each in-database attempt was running with a deadline');
$session->quit;

# ---------------------------------------------------------------------
# 3. kill -9 of the worker mid-action; repair of an attempt left running
# ---------------------------------------------------------------------
# an attempt committed as running, with no clock, as 0.2.0's stale caches
# left them: its run submitted and its stage marked in one transaction
my $orphan = sql(<<'SQL');
BEGIN;
SELECT run_id FROM wfe.submit('post-act', '{}', 'orphan') \gset
UPDATE wfe.run_stages SET state = 'running', claimed_by = 'wfe worker', started_at = now(),
                          heartbeat_at = now(), deadline_at = NULL
 WHERE run_id = :run_id AND stage = 'one';
COMMIT;
SELECT :run_id;
SQL
sleep 1;
is(sql("SELECT state || ' ' || coalesce(deadline_at::text, 'no clock') FROM wfe.run_stages WHERE run_id = $orphan AND stage = 'one'"),
	'running no clock', '3: an attempt left running without a clock stays so while the worker lives');

my $calls = sql(q{SELECT last_value FROM public.rc_calls});
sql('INSERT INTO public.rc_sleep_on VALUES (' . ($calls + 1) . ')');
my $sleeper = sql(q{SELECT run_id FROM wfe.submit('post-act', '{}')});
ok($node->poll_query_until('postgres',
		"SELECT count(*) = 1 FROM pg_stat_activity WHERE backend_type = 'wfe worker' AND wait_event = 'PgSleep'"),
	'3: the worker is inside the sleeping action');
my $worker_pid = sql(q{SELECT pid FROM wfe.worker_status()});
is(kill('KILL', $worker_pid), 1, '3: kill -9 of the worker');
ok($node->poll_query_until('postgres',
		"SELECT pid IS NOT NULL AND pid <> $worker_pid AND rounds > 0 FROM wfe.worker_status()"),
	'3: the worker is back');
ok($node->poll_query_until('postgres', "SELECT state = 'completed' FROM wfe.runs WHERE run_id = $sleeper"),
	'3: the interrupted action ran again and its run completed');
is(sql("SELECT string_agg(stage || ':' || attempt, ',' ORDER BY stage) FROM wfe.run_stages WHERE run_id = $sleeper"),
	'one:1,two:1', '3: ... in its first attempts (the killed one never committed)');
ok($node->poll_query_until('postgres', "SELECT state = 'completed' FROM wfe.runs WHERE run_id = $orphan"),
	'3: the attempt left running was repaired and retried, and its run completed');
is(sql("SELECT string_agg(type, ',' ORDER BY event_id) FROM wfe.events WHERE run_id = $orphan AND stage = 'one' AND attempt = 1"),
	'stage.released,stage.interrupted,stage.timed_out,stage.retry_scheduled',
	'3: ... its first attempt interrupted by the repair, timed out and retried');
is(sql("SELECT attempt || ' ' || state FROM wfe.run_stages WHERE run_id = $orphan AND stage = 'one'"), '2 completed',
	'3: ... and its second attempt completed');
like(slurp_file($node->logfile), qr/wfe worker repaired [1-9]\d* rows left by a previous run/, '3: the repair is logged');

done_testing();
