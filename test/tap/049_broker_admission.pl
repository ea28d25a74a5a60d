# Broker dispatches take the flow controls poll claims take (issue 24,
# item 2; operations.md "Flow control"): keyed concurrency on a broker queue,
# through a real RabbitMQ and real wfe-worker processes.
#
# 1. Three runs of key x and one of key y, max 1, submitted with no worker:
#    x's first and y's are dispatched at once; x's other two are held
#    (queued, no dispatch message, out of the count) and dashboard_stuck
#    says why.
# 2. A broker worker starts: each end of an x attempt dispatches the next x
#    (the slot's release, no polling), in submit order; key x never has two
#    in flight (a trigger logs every change, in its transaction); all four
#    runs complete.
# 3. The admission's SQL faces stay closed: a worker login and a tenant's
#    operator calling wfe._lock_tenant, wfe._release_held and
#    wfe._recheck_admission are refused (42501), and nothing changed.
use strict;
use warnings;

use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use WfeRabbit;
use WfeLogin;

my $worker_bin = WfeRabbit::top_dir() . '/build/wfe-worker';
plan skip_all => "$worker_bin is not built" unless -x $worker_bin;

my $rabbit = WfeRabbit->new('brokeradmit');
$rabbit->start;
my $node = WfeRabbit::wfe_node('wfe_brokeradmit', $rabbit);

sub sql { return $node->safe_psql('postgres', $_[0]); }

# login(ROLE, SQL): run SQL as a real login; returns (SQLSTATE or '', stderr).
sub login
{
	my $r = WfeLogin::as_login($node, @_);
	return ($r->{state}, $r->{err});
}

WfeRabbit::linear_workflow($node, 'tkc', 'tkc',
	[ 'a', 'concurrency: { key: "${context.data.k}", max: 1 }' ]);
WfeRabbit::wait_connected($node, 'start');

# key x's attempts in flight, logged at every change of its rows and dispatches
sql(q{
CREATE TABLE public.key_log (n int, at timestamptz DEFAULT clock_timestamp());
CREATE FUNCTION public.log_key() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO public.key_log (n)
    SELECT count(*) FROM wfe.run_stages AS s
     WHERE s.queue = 'tkc' AND s.concurrency_key = 'x'
       AND (s.state IN ('dispatched', 'running')
            OR (s.state = 'queued'
                AND EXISTS (SELECT 1 FROM wfe.outbox AS o
                             WHERE o.run_id = s.run_id AND o.stage = s.stage AND o.attempt = s.attempt
                               AND o.fence = s.fence AND o.kind = 'dispatch' AND o.state <> 'published')));
    RETURN NULL;
END
$$;
CREATE TRIGGER log_key AFTER INSERT OR UPDATE ON wfe.run_stages
    FOR EACH ROW EXECUTE FUNCTION public.log_key();
CREATE TRIGGER log_key AFTER INSERT ON wfe.outbox
    FOR EACH ROW EXECUTE FUNCTION public.log_key();
});

#
# 1. Held at the dispatch.
#
my @x = map { sql(qq{SELECT run_id FROM wfe.submit('tkc', '{"n": $_, "data": {"k": "x"}}')}) } 1 .. 3;
my $y = sql(q{SELECT run_id FROM wfe.submit('tkc', '{"n": 4, "data": {"k": "y"}}')});
is(sql("SELECT string_agg(run_id::text, ' ' ORDER BY id) FROM wfe.outbox WHERE kind = 'dispatch'"),
	"$x[0] $y", "x's first and y's are dispatched at submit");
is( sql(q{SELECT string_agg(s.run_id::text, ' ' ORDER BY s.run_id) FROM wfe.run_stages AS s
           WHERE s.state = 'queued' AND s.held_until = 'infinity'
             AND NOT EXISTS (SELECT 1 FROM wfe.outbox AS o WHERE o.run_id = s.run_id)}),
	"$x[1] $x[2]", "x's other two are held: queued, held, no dispatch message");
is( sql(q{SELECT count(*) || ' ' || min(problem) || ' ' || min(detail) FROM wfe.dashboard_stuck
           WHERE problem = 'concurrency limited'}),
	'2 concurrency limited key full: 1 in flight', 'dashboard_stuck lists them: concurrency limited');
WfeRabbit::wait_published($node, 'held');
is($rabbit->queue_messages('wfe.tkc.small'), 2, 'RabbitMQ holds the two dispatched, not the held ones');

#
# 2. A worker: each end releases the next of its key.
#
my $log = $PostgreSQL::Test::Utils::tmp_check . '/worker-tkc.log';
my $worker = IPC::Run::start(
	[
		$worker_bin, '--queue', 'tkc', '--dsn', $node->connstr('postgres'),
		'--command', q{cat >/dev/null; sleep 0.3; echo '{}'},
		'--concurrency', '4', '--worker-id', 'tap-tkc', '--mode', 'broker', '--amqp-uri', $rabbit->uri
	],
	'<', \undef, '>>', $log, '2>&1');
ok($node->poll_query_until('postgres', "SELECT count(*) = 4 FROM wfe.runs WHERE state = 'completed'"),
	'all four runs complete');
is(sql('SELECT max(n) FROM public.key_log'), 1, 'key x never had two attempts in flight (and had one)');
is(sql("SELECT string_agg(run_id::text, ' ' ORDER BY id) FROM wfe.outbox WHERE kind = 'dispatch'
         AND run_id <> $y"),
	"$x[0] $x[1] $x[2]", "x's were dispatched one after the other, in submit order");
is(sql(q{SELECT count(*) FROM wfe.run_stages WHERE held_until IS NOT NULL}), 0, 'nothing is left held');
is(sql(q{SELECT count(*) FROM wfe.dashboard_stuck}), 0, 'dashboard_stuck is empty');
$worker->signal('TERM');
$worker->finish;

#
# 3. The admission's functions are no door.
#
sql(q{CREATE ROLE mallory_worker LOGIN IN ROLE wfe_worker;
SELECT wfe.grant_queue('mallory_worker', 'tkc');
CREATE ROLE mallory_operator LOGIN IN ROLE wfe_operator;
SELECT wfe.add_tenant_member('mallory_operator', 'default');
SELECT wfe.configure_tenant('default', max_tasks_in_flight => 1);});
my $held = sql(q{SELECT run_id FROM wfe.submit('tkc', '{"n": 5, "data": {"k": "z"}}')});
my $held2 = sql(q{SELECT run_id FROM wfe.submit('tkc', '{"n": 6, "data": {"k": "w"}}')});
my $state = q{SELECT (SELECT count(*) FROM wfe.outbox WHERE kind = 'dispatch') || ' '
                  || (SELECT count(*) FROM wfe.admission_recheck)};
my $before = sql($state);
for my $role (qw(mallory_worker mallory_operator))
{
	for my $call ("SELECT wfe._lock_tenant('default')", "SELECT * FROM wfe._release_held('tkc', 'default')",
		"SELECT wfe._release_held(NULL, 'default')", 'SELECT wfe._recheck_admission()')
	{
		my ($st, $err) = login($role, $call);
		is($st, '42501', "$role: $call is refused (42501)") or diag($err);
	}
}
is(sql($state), $before, 'and nothing changed: no dispatch, no recheck');
is(sql("SELECT count(*) FROM wfe.outbox WHERE run_id = $held2"), 0,
	"the tenant's second task stays held at its max_tasks_in_flight 1");

$node->stop;
$rabbit->stop;
done_testing();
