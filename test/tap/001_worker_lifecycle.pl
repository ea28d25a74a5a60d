# The wfe background worker's life (delivery.md "The background worker"):
# it starts under shared_preload_libraries and shows as backend_type
# 'wfe worker'; it waits while the extension is absent (or dropped) and
# starts working once it exists; SIGHUP reloads its configuration; SIGTERM
# stops it cleanly for good (exit 0 unregisters it) until the next server
# start; kill -9 of it is a crash the postmaster recovers from, after which
# it is back; and on start it repairs what a crash left half done (outbox
# rows left claimed go back to pending).
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);
use WfeNode;

my $node = WfeNode::node('wfe_lifecycle', preload => 1, extension => 0,
	conf => "wfe.poll_interval_ms = 200\n"
	  # PostgreSQL::Test::Cluster turns this off; the crash test needs it
	  . "restart_after_crash = on\n");

# The worker's pid as pg_stat_activity shows it ('' when there is none).
sub worker_pid
{
	return $node->safe_psql('postgres',
		"SELECT coalesce(string_agg(pid::text, ','), '') FROM pg_stat_activity "
		  . "WHERE backend_type = 'wfe worker'");
}

# Wait until exactly one worker runs; return its pid.
sub wait_for_worker
{
	my ($what) = @_;
	ok( $node->poll_query_until(
			'postgres',
			"SELECT count(*) = 1 FROM pg_stat_activity WHERE backend_type = 'wfe worker'"),
		"$what: the worker shows in pg_stat_activity as backend_type 'wfe worker'");
	return worker_pid();
}

#
# Start, without the extension: the worker waits for it.
#
my $pid = wait_for_worker('start');
like($pid, qr/^\d+$/, 'exactly one wfe worker runs');
is( $node->safe_psql(
		'postgres',
		"SELECT datname || ' ' || application_name FROM pg_stat_activity WHERE pid = $pid"),
	'postgres wfe worker',
	'the worker serves the database named by wfe.database');
$node->wait_for_log(qr/wfe worker started for database "postgres"/);
ok($node->poll_query_until('postgres',
		"SELECT query LIKE 'wfe worker: %' FROM pg_stat_activity WHERE pid = $pid"),
	"its activity reads 'wfe worker: ...'");

# several poll intervals without the extension: still the same process
usleep(1_000_000);
is(worker_pid(), $pid, 'without the extension the worker waits instead of exiting');
unlike(slurp_file($node->logfile), qr/"wfe worker".*exited/,
	'the worker has not exited while the extension was absent');

#
# The extension is created: the worker finds it and works.
#
$node->safe_psql('postgres', 'CREATE EXTENSION wfe');
is($node->safe_psql('postgres', 'SELECT pid FROM wfe.worker_status()'),
	$pid, 'wfe.worker_status() shows the worker\'s pid');
ok($node->poll_query_until('postgres', 'SELECT rounds > 0 FROM wfe.worker_status()'),
	'once the extension exists the worker runs rounds');

# Dropped and created again: it waits, then works again.
$node->safe_psql('postgres', 'DROP EXTENSION wfe');
usleep(600_000);
is(worker_pid(), $pid, 'the worker survives DROP EXTENSION');
$node->safe_psql('postgres', 'CREATE EXTENSION wfe');
my $rounds = $node->safe_psql('postgres', 'SELECT rounds FROM wfe.worker_status()');
ok( $node->poll_query_until(
		'postgres', "SELECT rounds > $rounds FROM wfe.worker_status()"),
	'after CREATE EXTENSION again the worker works again');

#
# SIGHUP: the worker reloads its configuration.
#
my $offset = -s $node->logfile;
$node->safe_psql('postgres', 'ALTER SYSTEM SET wfe.poll_interval_ms = 300');
$node->safe_psql('postgres', 'SELECT pg_reload_conf()');
$node->wait_for_log(qr/wfe worker reloaded its configuration/, $offset);
pass('SIGHUP: the worker logs that it reloaded its configuration');
is($node->safe_psql('postgres', 'SHOW wfe.poll_interval_ms'), '300ms',
	'the new poll interval is in force');
is(worker_pid(), $pid, 'a reload does not restart the worker');

#
# SIGTERM: the worker stops cleanly and is not restarted.
#
$offset = -s $node->logfile;
is($node->safe_psql('postgres', "SELECT pg_terminate_backend($pid)"),
	't', 'pg_terminate_backend() signals the worker');
$node->wait_for_log(qr/wfe worker stopping/, $offset);
pass('SIGTERM: the worker logs that it is stopping');
ok( $node->poll_query_until(
		'postgres',
		"SELECT count(*) = 0 FROM pg_stat_activity WHERE backend_type = 'wfe worker'"),
	'the stopped worker is gone from pg_stat_activity');
is($node->safe_psql('postgres', 'SELECT pid IS NULL FROM wfe.worker_status()'),
	't', 'wfe.worker_status() shows no pid once it stopped');
# longer than bgw_restart_time (5 s): a clean exit is not restarted
usleep(6_500_000);
is(worker_pid(), '', 'a worker stopped by SIGTERM is not restarted');
my $log = slurp_file($node->logfile, $offset);
unlike($log, qr/wfe worker started/, 'no new worker started after SIGTERM');
unlike($log, qr/terminated by signal|exited with exit code [1-9]/,
	'the worker exited cleanly (exit 0)');

#
# A server restart brings it back.
#
$offset = -s $node->logfile;
$node->restart;
my $pid2 = wait_for_worker('after a restart');
isnt($pid2, $pid, 'a new worker process after the restart');
$node->wait_for_log(qr/wfe worker started/, $offset);
pass('the restarted worker logs that it started');
ok( $node->poll_query_until(
		'postgres', "SELECT pid = $pid2 FROM wfe.worker_status()"),
	'wfe.worker_status() shows the new pid');

#
# kill -9 of the worker: the postmaster treats it as a crash, reinitialises,
# and the worker comes back.
#
$offset = -s $node->logfile;
is(kill('KILL', $pid2), 1, 'kill -9 sent to the worker');
$node->wait_for_log(qr/all server processes terminated; reinitializing/, $offset);
pass('the postmaster reinitialises after the worker was killed');
like(slurp_file($node->logfile, $offset),
	qr/\(PID $pid2\) was terminated by signal 9/,
	'the log records the worker killed by signal 9');
my $pid3 = wait_for_worker('after kill -9');
isnt($pid3, $pid2, 'the worker is back as a new process');
$node->wait_for_log(qr/wfe worker started/, $offset);
pass('the worker logs that it started again');
ok( $node->poll_query_until(
		'postgres', "SELECT pid = $pid3 AND rounds > 0 FROM wfe.worker_status()"),
	'the new worker is in the shared state and runs rounds');

#
# Repair on start: an outbox row left claimed by a previous worker's
# publisher goes back to pending when the worker starts (rows an external
# relay claimed are the relay's business).
#
$node->safe_psql(
	'postgres', q{
INSERT INTO wfe.outbox (tenant, kind, exchange, routing_key, message_id, body, state, claimed_by, attempts)
VALUES ('default', 'event', 'wfe.events', 'tap.repair', gen_random_uuid(), '{}', 'claimed', 'wfe worker 99999', 1),
       ('default', 'event', 'wfe.events', 'tap.relay', gen_random_uuid(), '{}', 'claimed', 'relay-1', 1),
       ('default', 'event', 'wfe.events', 'tap.keep', gen_random_uuid(), '{}', 'pending', NULL, 0)});
$offset = -s $node->logfile;
$node->restart;
wait_for_worker('after the repair restart');
$node->wait_for_log(qr/wfe worker repaired 1 rows left by a previous run/, $offset);
pass('the worker logs that it repaired the claimed row');
is( $node->safe_psql(
		'postgres',
		"SELECT string_agg(routing_key || '=' || state || '/' || coalesce(claimed_by, '-'), ' ' ORDER BY id) "
		  . 'FROM wfe.outbox'),
	'tap.repair=pending/- tap.relay=claimed/relay-1 tap.keep=pending/-',
	'the row a dead worker claimed is pending again; a relay\'s claim and a pending row are untouched');

# a later restart has nothing left to repair
$offset = -s $node->logfile;
$node->restart;
wait_for_worker('after another restart');
ok($node->poll_query_until('postgres', 'SELECT rounds > 0 FROM wfe.worker_status()'),
	'the worker runs after another restart');
unlike(slurp_file($node->logfile, $offset), qr/wfe worker repaired/,
	'nothing to repair when nothing was left claimed');

$node->stop;
done_testing();
