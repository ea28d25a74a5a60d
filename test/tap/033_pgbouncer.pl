# Poll workers through a connection pooler in transaction mode (operations.md
# "Scaling out", docs/operations.md "Behind a connection pooler"): Debian's
# pgbouncer on loopback, pool_mode = transaction, a pool of 10 server
# connections; 70 wfe-worker processes (--no-listen, one connection each)
# and 15 Python workers (Worker(pooled=True), concurrency 2: two client
# connections each): 100 worker connections serve one poll queue through
# it, 400 runs.
#
# Each execution of a task appends "run stage fence" to one file (one
# O_APPEND write, so lines never mix).  Asserted: the pooler holds the 100
# worker connections (its admin console's SHOW CLIENTS), every run
# completes, no (run, stage, fence) ran twice, the pooler never had more
# than 10 server connections (sampled from pg_stat_activity while the runs
# go), both
# kinds of worker did work, and pgbouncer logged no client error (a LISTEN or
# a server-side prepared statement carried across transactions would show as
# one; psycopg prepares a statement after its 5th execution unless pooled).
use strict;
use warnings;

use Time::HiRes qw(time usleep);
use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use WfeRabbit;
use WfeNode;

my $top = WfeRabbit::top_dir();
my $worker_bin = "$top/build/wfe-worker";
plan skip_all => "$worker_bin is not built" unless -x $worker_bin;
my $pgbouncer = '/usr/sbin/pgbouncer';
plan skip_all => 'pgbouncer is not installed (test/harness/deps.sh)' unless -x $pgbouncer;

my $RUNS = 400;
my $POOL = 10;
my $WFE_WORKERS = 70;
my $PY_WORKERS = 15;
my $CLIENTS = $WFE_WORKERS + 2 * $PY_WORKERS;    # 100

my $node = WfeNode::node('wfe_pgbouncer', preload => 1, conf => "max_connections = 50\n");

sub sql { return $node->safe_psql('postgres', $_[0]); }

my $queue = 'tap-pooled';
WfeNode::logins($node, wk => 'wfe_worker');
sql(qq{
SELECT wfe.register_worker('tap.pooled\@1', '$queue');
SELECT wfe.grant_queue('wk', '$queue');});
WfeNode::workflow($node, <<"YAML");
name: tap-pooled
version: "1.0.0"
entry: work
stages:
  - name: work
    type: worker
    queue: $queue
    worker: tap.pooled\@1
    on_success: completed
    on_failure: failed
YAML

# pgbouncer, on loopback, in front of the node's Unix socket.
my $dir = $PostgreSQL::Test::Utils::tmp_check;
my $port = PostgreSQL::Test::Cluster::get_free_port();
my ($host, $pgport) = ($node->host, $node->port);
open my $ul, '>', "$dir/userlist.txt" or die $!;
print $ul qq{"wk" ""\n};
close $ul;
open my $ini, '>', "$dir/pgbouncer.ini" or die $!;
print $ini <<"INI";
[databases]
postgres = host=$host port=$pgport dbname=postgres

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $port
unix_socket_dir =
auth_type = trust
auth_file = $dir/userlist.txt
pool_mode = transaction
default_pool_size = $POOL
min_pool_size = 0
reserve_pool_size = 0
max_client_conn = 200
max_db_connections = $POOL
server_reset_query =
admin_users = wk
logfile = $dir/pgbouncer.log
pidfile = $dir/pgbouncer.pid
INI
close $ini;
my $bouncer = IPC::Run::start([ $pgbouncer, "$dir/pgbouncer.ini" ], '<', \undef, '>', "$dir/pgbouncer.out", '2>&1');
my $dsn = "host=127.0.0.1 port=$port dbname=postgres user=wk";
my $up = 0;
for (1 .. 100)
{
	my ($stdout, $stderr);
	IPC::Run::run([ 'psql', '-XAtq', '-d', $dsn, '-c', 'SELECT 1' ], '>', \$stdout, '2>', \$stderr);
	if (($stdout // '') =~ /^1$/m) { $up = 1; last; }
	usleep(100_000);
}
ok($up, "pgbouncer answers on 127.0.0.1:$port") or BAIL_OUT('pgbouncer did not start');

# What each execution appends to.
my $ran = "$dir/ran.txt";
open my $t, '>', $ran or die $!;
close $t;

# The workers, all connected through the pooler before the runs come.

my @workers;
my $py = "$dir/pyworker.py";
open my $pf, '>', $py or die $!;
print $pf <<'PY';
import logging, os, sys
sys.path.insert(0, sys.argv[1])
import psycopg
import wfe

dsn, queue, ran, name = sys.argv[2:6]
logging.basicConfig(level=logging.INFO, format="%(asctime)s %(threadName)s %(message)s")
w = wfe.Worker(dsn, worker_id=name, concurrency=2, poll_interval_s=0.3, pooled=True)

@w.handler("tap.pooled@1", queue=queue, mode="poll")
def work(task):
    line = f"{task.run_id} {task.stage} {task.fence} p\n".encode()
    fd = os.open(ran, os.O_WRONLY | os.O_APPEND)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)
    return {}

# through the pooler once, so the test starts the other workers once this one is up
with psycopg.connect(dsn, prepare_threshold=None) as c:
    c.execute("SELECT 1")
print("ready", flush=True)
w.run()
PY
close $pf;
for my $i (1 .. $PY_WORKERS)
{
	push @workers,
	  IPC::Run::start([ '/usr/bin/python3', $py, "$top/clients/python", $dsn, $queue, $ran, "p$i" ],
		'<', \undef, '>>', "$dir/worker-p$i.log", '2>&1');
}

for my $i (1 .. $WFE_WORKERS)
{
	push @workers,
	  IPC::Run::start(
		[
			$worker_bin, '--queue', $queue, '--dsn', $dsn, '--no-listen',
			'--poll-interval-ms', '300', '--concurrency', '2', '--worker-id', "c$i",
			'--command', qq{cat >/dev/null; sleep 0.05; echo "\$WFE_RUN_ID \$WFE_STAGE \$WFE_FENCE c" >>$ran; echo '{}'}
		],
		'<', \undef, '>>', "$dir/worker-c$i.log", '2>&1');
}
# Up: a Python worker prints "ready" once through the pooler, wfe-worker logs its connection.
my $ready = 0;
my @logs = ((map { ["$dir/worker-p$_.log", qr/^ready$/m] } 1 .. $PY_WORKERS),
	(map { ["$dir/worker-c$_.log", qr/connected to PostgreSQL/] } 1 .. $WFE_WORKERS));
for (1 .. 300)
{
	$ready = grep { -f $_->[0] && slurp_file($_->[0]) =~ $_->[1] } @logs;
	last if $ready == @logs;
	usleep(100_000);
}
is($ready, scalar(@logs), 'every worker is connected through the pooler');

# The worker connections the pooler holds: its admin console, one row per
# client connection.
sub pooled_clients
{
	my ($out, $err);
	IPC::Run::run([ 'psql', '-XAtq', '-F', '|', '-d', "host=127.0.0.1 port=$port dbname=pgbouncer user=wk",
		'-c', 'SHOW CLIENTS' ], '>', \$out, '2>', \$err);
	return scalar(grep { ((split /\|/)[2] // '') eq 'postgres' } split /\n/, ($out // ''));
}

# The runs; then wait (at most 150 s), sampling the pooler's server connections.
my $t0 = time;
sql("SELECT count(*) FROM generate_series(1, $RUNS) i, LATERAL wfe.submit('tap-pooled', jsonb_build_object('i', i))");
my $max_servers = 0;
my $max_clients = 0;
my $done = 0;
while (time - $t0 < 150)
{
	my $clients = pooled_clients();
	$max_clients = $clients if $clients > $max_clients;
	my ($servers, $completed) = split /\|/, sql(
		"SELECT (SELECT count(*) FROM pg_stat_activity WHERE usename = 'wk'),
		        (SELECT count(*) FROM wfe.runs WHERE state IN ('completed', 'failed'))");
	$max_servers = $servers if $servers > $max_servers;
	if ($completed == $RUNS) { $done = 1; last; }
	usleep(100_000);
}
my $took = time - $t0;
note sprintf('%d runs, %d worker connections through a pool of %d, in %.1f s', $RUNS, $max_clients, $POOL, $took);

$_->signal('TERM') for @workers;
$_->finish for @workers;

ok($done, "all $RUNS runs finished within 150 s");
is(sql("SELECT count(*) FROM wfe.runs WHERE state = 'completed'"), $RUNS, 'every run completed');

open my $in, '<', $ran or die $!;
my (%seen, %by);
my $dups = 0;
while (my $line = <$in>)
{
	my ($run, $stage, $fence, $kind) = split ' ', $line;
	$dups++ if $seen{"$run $stage $fence"}++;
	$by{$kind}++;
}
close $in;
is($dups, 0, 'no (run, stage, fence) ran twice');
is(scalar(keys %seen), $RUNS, 'each run ran once');
ok(($by{c} // 0) > 0 && ($by{p} // 0) > 0,
	sprintf('both wfe-worker (%d) and the Python client (%d) did work', $by{c} // 0, $by{p} // 0));
cmp_ok($max_clients, '>=', $CLIENTS, "the pooler held the $CLIENTS worker connections (max seen $max_clients)");
cmp_ok($max_servers, '<=', $POOL, "the pooler held at most $POOL server connections (max seen $max_servers)");
cmp_ok($max_servers, '>', 0, 'the sampling saw the pooled connections');

# --no-listen does not listen: a worker straight on the node that has
# claimed once and found nothing, with a poll interval of 10 minutes, takes
# a new run at once when it listens and leaves it queued when it does not.
sub lone_worker
{
	my ($name, @extra) = @_;
	my $log = "$dir/lone-$name.log";
	my $w = IPC::Run::start(
		[
			$worker_bin, '--queue', $queue, '--dsn', $node->connstr('postgres') . ' user=wk',
			'--poll-interval-ms', '600000', '--worker-id', $name, '--verbose', @extra,
			'--command', q{cat >/dev/null; echo '{}'}
		],
		'<', \undef, '>>', $log, '2>&1');
	my $t1 = time;
	usleep(100_000) until (-f $log && slurp_file($log) =~ /claimed 0 of 1/) || time - $t1 > 20;
	return $w;
}
my $lone = lone_worker('listening');
my $r1 = sql("SELECT run_id FROM wfe.submit('tap-pooled', '{}')");
ok($node->poll_query_until('postgres', "SELECT state = 'completed' FROM wfe.runs WHERE run_id = $r1"),
	'a listening worker takes a new run at once');
$lone->signal('TERM');
$lone->finish;
$lone = lone_worker('deaf', '--no-listen');
my $r2 = sql("SELECT run_id FROM wfe.submit('tap-pooled', '{}')");
usleep(2_000_000);
is(sql("SELECT state FROM wfe.run_stages WHERE run_id = $r2"), 'queued',
	'a --no-listen worker leaves it queued until its poll interval');
$lone->signal('TERM');
$lone->finish;

$bouncer->signal('INT');
$bouncer->finish;
my $blog = slurp_file("$dir/pgbouncer.log");
my @errors = grep { /ERROR|WARNING/ } split /\n/, $blog;
is(scalar(@errors), 0, 'pgbouncer logged no error') or diag join("\n", @errors[0 .. ($#errors < 9 ? $#errors : 9)]);
my $wlogs = join '', map { slurp_file($_) } glob("$dir/worker-*.log");
unlike($wlogs, qr/prepared statement|LISTEN|ERROR|Traceback/, 'no worker met an error behind the pooler');

done_testing();
