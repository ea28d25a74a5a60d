# Runs that start themselves, under faults (issue 23 "Races and faults"),
# with a real background worker and a real RabbitMQ node:
#
# 1. the background worker killed (kill -9) between submitting a tick's
#    run and recording it (held there by a trigger on wfe.schedule_runs
#    that sleeps): after the restart the tick has exactly one run;
# 2. two databases: the worker serves wfe.database only, so it never fires
#    another database's schedules; wfe.tick() there fires them, and only
#    them;
# 3. an ingress command whose submit committed but was not acked: the
#    worker is held in its commit (synchronous_standby_names names a
#    standby that never comes, so the commit is durable here but does not
#    return) and killed there; RabbitMQ redelivers the command, and the
#    second submit answers accepted = false with the same run: one run,
#    one duplicate, the reply says accepted false;
# 4. RabbitMQ down while commands wait in the ingress queue: the worker
#    loses its connection, and once RabbitMQ is back every command has
#    exactly one run and the queue is empty;
# 5. a flood of commands does not starve the timers: a sleep due while
#    2,000 commands wait completes before half of them are taken.
use strict;
use warnings;

use JSON::PP;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);
use WfeRabbit;
use WfeNode;

my $rabbit = WfeRabbit->new('faults');
$rabbit->start;
# wal senders, so that synchronous_standby_names can hold a commit (part 3)
my $node = WfeRabbit::wfe_node('wfe_start_faults', $rabbit,
	"restart_after_crash = on\nwfe.consume_dlq = off\nwal_level = replica\nmax_wal_senders = 4\n");
my $json = JSON::PP->new->utf8->canonical;
my $tools_uri = $rabbit->uri . '%2f';

sub sql { return $node->safe_psql($_[1] // 'postgres', $_[0]); }

# The background worker's pid (waits until there is one).
sub worker_pid
{
	$node->poll_query_until('postgres', "SELECT count(*) = 1 FROM pg_stat_activity WHERE backend_type = 'wfe worker'")
	  or die 'no wfe worker';
	return sql("SELECT pid FROM pg_stat_activity WHERE backend_type = 'wfe worker'");
}

# kill -9 PID, a backend: wait for the postmaster's reinitialisation and the worker's return.
sub crash
{
	my ($pid, $offset) = @_;
	is(kill('KILL', $pid), 1, "kill -9 of the background worker ($pid)");
	$node->wait_for_log(qr/all server processes terminated; reinitializing/, $offset);
	ok($node->poll_query_until('postgres', 'SELECT true'), 'the server accepts connections again');
	ok(worker_pid() != $pid, 'a new background worker runs');
	return;
}

my $workflow = <<'SQL';
SELECT wfe.register_worker('fault.job@1', 'fault-jobs');
SELECT wfe.create_definition($y$
name: job
version: "1.0.0"
entry: step
stages:
  - name: step
    type: worker
    queue: fault-jobs
    worker: fault.job@1
    on_success: completed
    on_failure: failed
$y$);
SELECT wfe.approve('job', '1.0.0');
SELECT wfe.activate('job', '1.0.0');
SQL
sql($workflow);
WfeRabbit::wait_connected($node, 'start');

#
# 1. Killed between submitting a tick and recording it.
#
sql(<<'SQL');
CREATE TABLE public.tap_hold (held boolean);
CREATE FUNCTION public.tap_hold_tick() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT FROM public.tap_hold) THEN
        PERFORM pg_catalog.pg_sleep(120);
    END IF;
    RETURN NEW;
END
$$;
CREATE TRIGGER tap_hold_tick BEFORE INSERT ON wfe.schedule_runs FOR EACH ROW EXECUTE FUNCTION public.tap_hold_tick();
INSERT INTO public.tap_hold VALUES (true);
SELECT wfe.create_schedule('held', 'job', '* * * * *', '{}', '{"overlap": "allow"}');
SQL
my $x = sql("SELECT date_trunc('minute', now()) - interval '10 minutes'");
sql("UPDATE wfe.schedule_defs SET next_tick = '$x', end_at = '$x', next_fire_at = now() WHERE name = 'held'; "
	  . 'SELECT wfe._wake(now())');
my $pid = worker_pid();
ok( $node->poll_query_until(
		'postgres', qq{SELECT count(*) = 1 FROM pg_stat_activity AS a JOIN pg_locks AS l USING (pid)
		 WHERE a.backend_type = 'wfe worker' AND a.wait_event = 'PgSleep'
		   AND l.relation = 'wfe.runs'::regclass AND l.mode = 'RowExclusiveLock' AND l.granted}),
	"the worker submitted the tick's run and is held before recording it");
is(sql("SELECT count(*) FROM wfe.runs WHERE idempotency_key LIKE 'schedule:held:%'"), 0,
	'its run is not committed');
sql('DELETE FROM public.tap_hold');
crash($pid, -s $node->logfile);
ok( $node->poll_query_until(
		'postgres', "SELECT count(*) = 1 FROM wfe.schedule_runs WHERE schedule = 'held' AND scheduled_for = '$x'"),
	'after the restart the worker fires the tick');
is(sql("SELECT count(*) FROM wfe.runs WHERE idempotency_key LIKE 'schedule:held:%'"), 1, 'exactly one run of it');
sql('DROP TRIGGER tap_hold_tick ON wfe.schedule_runs');

#
# 2. Two databases.
#
sql('CREATE DATABASE other');
sql("CREATE EXTENSION wfe; $workflow", 'other');
for my $db (qw(postgres other))
{
	sql("SELECT wfe.create_schedule('in-$db', 'job', '* * * * *', '{}', '{\"overlap\": \"allow\"}'); "
		  . "UPDATE wfe.schedule_defs SET next_tick = '$x', end_at = '$x', next_fire_at = now() WHERE name = 'in-$db'; "
		  . 'SELECT wfe._wake(now())',
		$db);
}
ok( $node->poll_query_until(
		'postgres', "SELECT count(*) = 1 FROM wfe.schedule_runs WHERE schedule = 'in-postgres'"),
	'the worker fires the schedule of its database');
my $rounds = sql('SELECT rounds FROM wfe.worker_status()');
ok($node->poll_query_until('postgres', "SELECT rounds >= $rounds + 3 FROM wfe.worker_status()"),
	'three rounds more of the worker');
is(sql("SELECT count(*) || ' ' || (SELECT next_tick IS NOT NULL FROM wfe.schedule_defs WHERE name = 'in-other') "
	  . 'FROM wfe.runs', 'other'), '0 true', "the other database's schedule is still due, nothing fired there");
is(sql('SELECT wfe.tick() > 0', 'other'), 't', 'wfe.tick() in the other database fires it');
is( sql("SELECT string_agg(schedule, ' ') || ' ' || (SELECT count(*) FROM wfe.runs) FROM wfe.schedule_runs", 'other'),
	'in-other 1', 'its own schedule only, one run');
is(sql("SELECT count(*) FROM wfe.schedule_runs WHERE schedule = 'in-postgres'"), 1,
	"and the worker's database still has one run of its own");

#
# 3. An ingress command committed, then the worker killed before the ack.
#
sql(<<'SQL');
CREATE ROLE ingress_a IN ROLE wfe_submitter;
SELECT wfe.add_tenant_member('ingress_a', 'A');
SELECT wfe.configure_ingress('cmds', 'ingress_a');
SQL
ok( eval {
		for (1 .. 300)
		{
			return 1 if defined $rabbit->queue_messages('wfe.ingress.cmds');
			usleep(100_000);
		}
		0;
	},
	'the worker declared wfe.ingress.cmds');
system('amqp-declare-queue', '-u', $tools_uri, '-d', '-q', 'tap.replies') == 0 or die 'cannot declare tap.replies';

sub envelope
{
	my ($mid) = @_;
	return $json->encode({
		message_id => $mid, correlation_id => "corr-$mid", workflow_name => 'job', track => 'small',
		headers => { content_type => 'application/json', source => 'tap', tenant => 'A' },
		idempotency_key => "key-$mid", payload_inline => { n => 1 }, payload_ref => undef,
		created_at => '2026-06-02T10:00:00Z' });
}

sub publish
{
	my ($in, @opts) = @_;
	my ($out, $err) = ('', '');
	IPC::Run::run([ 'amqp-publish', '-u', $tools_uri, '-e', 'wfe.commands', '-r', 'submit.cmds',
			'-C', 'application/json', '-p', @opts ],
		'<', \$in, '>', \$out, '2>', \$err)
	  or die "amqp-publish failed: $err";
	return;
}

# The command waits first: while a session holds wfe.ingress_counts, the
# worker's submit of it times out on the lock (lock_timeout, transient) and
# the command is requeued, round after round.
my $holder = $node->background_psql('postgres', on_error_stop => 1);
$holder->query_safe("BEGIN;\nLOCK TABLE wfe.ingress_counts IN SHARE MODE;");
my $offset = -s $node->logfile;
publish(envelope('c1'), '-t', 'tap.replies');
$node->wait_for_log(qr/wfe ingress "cmds" requeued command/, $offset);
pass('while the counts are locked the worker requeues the command, round after round');
# Then the server's commits wait for a standby that never comes (the test
# only reads until the crash).  The worker's other writes would wait too:
# its publisher lease is renewed every 5 s, so the lock goes right after a
# renewal, once the checkpointer took the setting, and the worker's next
# try commits the submit.
my $beat = sql('SELECT heartbeat_at FROM wfe.publisher_lease');
$node->poll_query_until('postgres', "SELECT heartbeat_at > '$beat' FROM wfe.publisher_lease");
$node->append_conf('postgresql.conf', "synchronous_standby_names = 'nobody'\n");
$node->reload;
usleep(300_000);
$holder->query_safe('COMMIT');
$holder->quit;
$pid = worker_pid();
ok( $node->poll_query_until(
		'postgres', qq{SELECT count(*) = 1 FROM pg_stat_activity
		 WHERE backend_type = 'wfe worker' AND wait_event = 'SyncRep'
		   AND query = 'wfe ingress: submitting a run command'}),
	"the worker's submit of the command committed here and waits in its commit, the command not acked");
is(sql("SELECT count(*) FROM wfe.runs WHERE idempotency_key = 'key-c1'"), 0, 'the run is not visible yet');
# the standby no longer required once the server is back (read at the reload below)
$node->append_conf('postgresql.conf', "synchronous_standby_names = ''\n");
$offset = -s $node->logfile;
crash($pid, $offset);
$node->reload;
ok($node->poll_query_until('postgres', q{SELECT duplicates = 1 FROM wfe.dashboard_ingress WHERE ingress = 'cmds'}),
	'RabbitMQ redelivered the command: the second submit is a duplicate');
is(sql("SELECT count(*) FROM wfe.runs WHERE idempotency_key = 'key-c1'"), 1, 'one run: the first submit survived the crash');
is(sql(q{SELECT submitted || ' ' || duplicates || ' ' || rejected FROM wfe.dashboard_ingress WHERE ingress = 'cmds'}),
	'1 1 0', 'counted once submitted, once duplicate');
my ($reply) = $rabbit->probe_json('consume', 'tap.replies', 1, 30);
is_deeply($reply && $reply->{body},
	{ run_id => sql("SELECT run_id FROM wfe.runs WHERE idempotency_key = 'key-c1'"), accepted => JSON::PP::false },
	'the reply (after the redelivery): the same run, accepted false');
ok(
	eval {
		for (1 .. 300)
		{
			return 1 if ($rabbit->queue_messages('wfe.ingress.cmds') // 1) == 0;
			usleep(100_000);
		}
		0;
	},
	'the command was acked at last');

#
# 4. RabbitMQ down while commands wait.
#
# (the commands wait behind a locked wfe.ingress_counts, as in 3)
my $n = 300;
$holder = $node->background_psql('postgres', on_error_stop => 1);
$holder->query_safe("BEGIN;\nLOCK TABLE wfe.ingress_counts IN SHARE MODE;");
$offset = -s $node->logfile;
publish(join('', map { envelope("w$_") . "\n" } 1 .. $n), '-l');
$node->wait_for_log(qr/wfe ingress "cmds" requeued command/, $offset);
cmp_ok($rabbit->queue_messages('wfe.ingress.cmds'), '>=', $n - 1, "the $n commands wait in wfe.ingress.cmds (one may be in the worker's hands)");
$rabbit->stop_app;
ok( $node->poll_query_until(
		'postgres', q{SELECT NOT connected FROM wfe.publisher_lease}),
	'RabbitMQ stopped: the worker saw its connection go');
$holder->query_safe('COMMIT');
$holder->quit;
is(sql(q{SELECT count(*) FROM wfe.runs WHERE idempotency_key LIKE 'key-w%'}), 0, 'none of them had a run');
sleep 2;
is(sql(q{SELECT count(*) FROM wfe.runs WHERE idempotency_key LIKE 'key-w%'}), 0,
	'nothing is submitted while RabbitMQ is down');
$rabbit->start_app;
ok($node->poll_query_until('postgres', q{SELECT connected FROM wfe.publisher_lease}), 'the worker connects again');
ok( $node->poll_query_until(
		'postgres', qq{SELECT count(DISTINCT idempotency_key) = $n FROM wfe.runs WHERE idempotency_key LIKE 'key-w%'}),
	'once RabbitMQ is back, every command has its run');
is(sql(q{SELECT count(*) FROM wfe.runs WHERE idempotency_key LIKE 'key-w%'}), $n, 'exactly one each');
ok(
	eval {
		for (1 .. 300)
		{
			return 1 if ($rabbit->queue_messages('wfe.ingress.cmds') // 1) == 0;
			usleep(100_000);
		}
		0;
	},
	'and the queue is empty');
is(sql(q{SELECT rejected FROM wfe.dashboard_ingress WHERE ingress = 'cmds'}), 0, 'none was rejected');

#
# 5. A flood does not starve the timers.
#
WfeNode::workflow($node, <<'YAML');
name: nap
version: "1.0.0"
entry: nap
stages:
  - name: nap
    type: sleep
    duration_ms: 300
    on_success: completed
YAML
my $flood = 2000;
publish(join('', map { envelope("f$_") . "\n" } 1 .. $flood), '-l');
ok($node->poll_query_until('postgres', q{SELECT count(*) > 0 FROM wfe.runs WHERE idempotency_key LIKE 'key-f%'}),
	'the flood is being taken');
my $nap = sql(q{SELECT run_id FROM wfe.submit('nap')});
ok($node->poll_query_until('postgres', "SELECT state = 'completed' FROM wfe.runs WHERE run_id = $nap"),
	'a run sleeping 300 ms during the flood completes');
my $taken = sql(q{SELECT count(*) FROM wfe.runs WHERE idempotency_key LIKE 'key-f%'});
my $late = sql("SELECT round(extract(epoch FROM r.finished_at - t.due_at) * 1000) FROM wfe.runs AS r "
	  . "JOIN wfe.timers AS t USING (run_id) WHERE r.run_id = $nap AND t.kind = 'sleep'");
note "the sleep completed $late ms after it was due, with $taken of $flood commands taken";
cmp_ok($taken, '<', $flood / 2, 'before half the flood was taken: each round takes a bounded number of commands');
ok($node->poll_query_until('postgres',
		qq{SELECT count(*) = $flood FROM wfe.runs WHERE idempotency_key LIKE 'key-f%'}),
	'and the whole flood is taken after');

$node->stop;
$rabbit->stop;
done_testing();
