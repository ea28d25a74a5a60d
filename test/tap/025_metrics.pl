# wfe.metrics (docs/operations.md "Monitoring"): the series of a known
# workload in two tenants, A and B, read as real logins.  A's reader sees
# A's work and never B's (not even the name of B's queue; a configured
# queue, which is no tenant's, is there at 0), B's reader the reverse, a superuser the sum; a reader cannot
# write the counters, and a login without wfe_reader reads nothing.  The
# counters stay exact when their rows are folded.  The series of rate
# limits, buffered signals and schedules are per tenant the same way; a
# circuit is configuration every reader sees, as wfe.circuits (but the
# probe's task, which names a run); a reader configures and resets nothing.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Cwd qw(abs_path);
use File::Basename qw(dirname);
use HTTP::Tiny;
use IPC::Run;
use WfeLogin;
use WfeNode;

my $top = abs_path(dirname(__FILE__) . '/../..');
my $node = WfeNode::node('wfe_metrics');
sub sql { return $node->safe_psql('postgres', $_[0]); }

# login(ROLE, SQL): (SQLSTATE or '', stdout), connected as ROLE itself
sub login
{
	my $r = WfeLogin::as_login($node, lc $_[0], $_[1], strict => 1);
	return ($r->{state}, $r->{out});
}

# series(ROLE, METRIC): {labels-as-text => value} of one metric as ROLE sees it
sub series
{
	my ($role, $metric) = @_;
	my ($st, $out) = login($role,
		"SELECT labels::text || '=' || value FROM wfe.metrics WHERE metric = '$metric' ORDER BY 1");
	die "$role: $st" if $st;
	return { map { split /=(?=[^=]*$)/ } grep { length } split /\n/, $out };
}

WfeNode::tenant_logins($node, [qw(A B)], qw(reader submitter worker));
WfeNode::tenant_flows($node, [qw(A B)],
	"    retry: {max_attempts: 3, initial_ms: 600000, multiplier: 1, max_ms: 600000, jitter: none}\n");
WfeNode::logins($node, nobody => '');
# a configured queue has its series at 0 while idle (KEDA scales to zero on it)
sql(q{SELECT wfe.configure_queue('qidle')});

# A: three keyed runs and one submit deduplicated; one run completes, one
# attempt fails (its retry is 10 minutes away), one task stays queued
sub ok_login
{
	my ($role, $q) = @_;
	my ($st, $out) = login($role, $q);
	is($st, '', "$role: $q") or diag($out);
	return $out;
}
for my $k (1 .. 3)
{
	ok_login('submitter_A', qq{SELECT run_id FROM wfe.submit('flow-a', '{}', 'a-$k', '{"tenant": "A"}')});
}
ok_login('submitter_A', q{SELECT run_id FROM wfe.submit('flow-a', '{}', 'a-1', '{"tenant": "A"}')});
for my $how (qw(complete fail))
{
	my ($r, $a, $f) = split /\|/, ok_login('worker_A', q{SELECT run_id, attempt, fence FROM wfe.claim_task('qa', 'wa')});
	ok_login('worker_A', $how eq 'complete'
		? "SELECT wfe.complete_task($r, 'work', $a, $f, '{}')"
		: "SELECT wfe.fail_task($r, 'work', $a, $f, '{\"code\": \"try.again\"}')");
}
# B: two runs, one claimed (in flight), one queued
ok_login('submitter_B', q{SELECT run_id FROM wfe.submit('flow-b', '{}', NULL, '{"tenant": "B"}')}) for 1 .. 2;
ok_login('worker_B', q{SELECT run_id FROM wfe.claim_task('qb', 'wb')});

my %want_a = (
	wfe_runs => { '{"state": "running", "workflow": "flow-a"}' => 2 },
	wfe_runs_finished_total => { '{"state": "completed", "workflow": "flow-a"}' => 1 },
	wfe_stage_attempts_total => {
		'{"stage": "work", "outcome": "failed", "workflow": "flow-a"}' => 1,
		'{"stage": "work", "outcome": "completed", "workflow": "flow-a"}' => 1 },
	wfe_idempotent_submits_total => { '{"result": "created"}' => 3, '{"result": "deduplicated"}' => 1 },
	wfe_queue_depth => { '{"queue": "qa", "track": "poll"}' => 1, '{"queue": "qidle", "track": "poll"}' => 0 },
	wfe_tasks_in_flight => { '{"queue": "qa"}' => 0, '{"queue": "qidle"}' => 0 },
	wfe_outbox_pending => { '{}' => 0 },
	wfe_timers_due => { '{}' => 0 },
	wfe_dead_letters => { '{"queue": "qa"}' => 0, '{"queue": "qidle"}' => 0 },
	wfe_cache_hits_total => { '{}' => 0 });
my %want_b = (
	wfe_runs => { '{"state": "running", "workflow": "flow-b"}' => 2 },
	wfe_runs_finished_total => {},
	wfe_stage_attempts_total => {},
	wfe_idempotent_submits_total => {},
	wfe_queue_depth => { '{"queue": "qb", "track": "poll"}' => 1, '{"queue": "qidle", "track": "poll"}' => 0 },
	wfe_tasks_in_flight => { '{"queue": "qb"}' => 1, '{"queue": "qidle"}' => 0 });
for my $m (sort keys %want_a)
{
	is_deeply(series('reader_A', $m), $want_a{$m}, "reader_A (a login): $m is A's alone");
}
for my $m (sort keys %want_b)
{
	is_deeply(series('reader_B', $m), $want_b{$m}, "reader_B (a login): $m is B's alone");
}
is_deeply(series('postgres', 'wfe_runs'),
	{ %{ $want_a{wfe_runs} }, %{ $want_b{wfe_runs} } }, 'a superuser sees both tenants');
is_deeply(series('postgres', 'wfe_queue_depth'),
	{ '{"queue": "qa", "track": "poll"}' => 1, '{"queue": "qb", "track": "poll"}' => 1,
	  '{"queue": "qidle", "track": "poll"}' => 0 }, '... and their queues');

my $age = series('reader_A', 'wfe_queue_oldest_ready_seconds');
cmp_ok($age->{'{"queue": "qa"}'}, '>', 0, 'the oldest ready task of qa has an age');
ok(!exists $age->{'{"queue": "qb"}'}, "... and reader_A sees no series of B's queue qb, which only B's work names");
is($age->{'{"queue": "qidle"}'}, 0, '... and an idle queue is 0 seconds');
my ($st, $out) = login('reader_A', q{SELECT count(*) FROM wfe.metrics WHERE labels::text LIKE '%flow-b%' OR labels ->> 'tenant' = 'B'});
is("$st|$out", '|0', 'no row of wfe.metrics names anything of B for reader_A');
($st, $out) = login('reader_A', q{SELECT DISTINCT kind FROM wfe.metrics ORDER BY 1});
is($out, "counter\ngauge", 'kinds are counter and gauge');
($st, $out) = login('reader_A', q{SELECT count(*) FROM wfe.metrics WHERE help IS NULL OR metric !~ '^wfe_[a-z_]+$'});
is($out, '0', 'every series has a Prometheus name and a help text');

# the attacks: a reader writes the counters, reads B's rows, a stranger reads at all
my $counters = 'SELECT tenant, metric, labels, sum(value) FROM wfe.metric_counters GROUP BY 1, 2, 3 ORDER BY 1, 2, 3';
my $before = sql($counters);
for my $w ("INSERT INTO wfe.metric_counters (tenant, metric, labels, value) VALUES ('A', 'wfe_runs_finished_total', '{}', 1000)",
	"UPDATE wfe.metric_counters SET value = 1000",
	"DELETE FROM wfe.metric_counters")
{
	($st) = login('reader_A', $w);
	is($st, '42501', "reader_A cannot write the counters: " . (split / /, $w)[0]);
}
is(sql($counters), $before, '... and they are unchanged');
($st, $out) = login('reader_A', q{SELECT count(*) FROM wfe.metric_counters WHERE tenant <> 'A'});
is("$st|$out", '|0', "reader_A reads no counter row of B's");
($st) = login('nobody', 'SELECT count(*) FROM wfe.metrics');
is($st, '42501', 'a login without wfe_reader reads no metric');

# --- flow control, signals and schedules ------------------------------------
# A rate limit of one token (unkeyed: every tenant's) on queue qr, two runs
# each of A and B claimed at once: A's first takes the token, the other
# three are held.  A signal buffered for one run of A and two of B (their
# waits are behind a worker stage).  A schedule each.  Circuits on qidle
# (half open) and qr (closed): configuration, like a configured queue.
sql(q{
SELECT wfe.register_worker('t.qr@1', 'qr');
SELECT wfe.register_worker('t.qs@1', 'qs');
SELECT wfe.register_signal('sig.go@1');
SELECT wfe.configure_rate_limit('rl', 0.001, 1);
SELECT wfe.create_definition($y$
name: held
version: "1.0.0"
entry: work
stages:
  - name: work
    type: worker
    queue: qr
    worker: t.qr@1
    rate_limit: rl
    on_success: completed
    on_failure: failed
$y$);
SELECT wfe.approve('held', '1.0.0');
SELECT wfe.activate('held', '1.0.0');
SELECT wfe.create_definition($y$
name: waits
version: "1.0.0"
entry: first
stages:
  - name: first
    type: worker
    queue: qs
    worker: t.qs@1
    on_success: go
    on_failure: failed
  - name: go
    type: wait
    signal: sig.go@1
    timeout_ms: 86400000
    on_success: completed
    on_failure: failed
$y$);
SELECT wfe.approve('waits', '1.0.0');
SELECT wfe.activate('waits', '1.0.0');
SELECT wfe.submit('held', '{}', NULL, jsonb_build_object('tenant', t)) FROM unnest(ARRAY['A', 'A', 'B', 'B']) AS t;
SELECT count(*) FROM wfe.claim_task('qr', 'wr', 4);
SELECT wfe.signal(r.run_id, 'sig.go@1')
  FROM (SELECT (wfe.submit('waits', '{}', NULL, jsonb_build_object('tenant', t))).run_id
          FROM unnest(ARRAY['A', 'B', 'B']) AS t) AS r;
SELECT wfe.create_schedule('nightly-' || lower(t), 'waits', '0 3 * * *', '{}', jsonb_build_object('tenant', t))
  FROM unnest(ARRAY['A', 'B']) AS t;
SELECT wfe.configure_circuit(q, 0.5) FROM unnest(ARRAY['qidle', 'qr']) AS q;
UPDATE wfe.circuits SET state = 'half_open', since = now() WHERE queue = 'qidle';});
my $circuits = { '{"queue": "qr"}' => 0, '{"queue": "qidle"}' => 0.5 };
for my $r (['reader_A', 1, 1, 'nightly-a'], ['reader_B', 2, 2, 'nightly-b'], ['postgres', 3, 3, 'nightly-a nightly-b'])
{
	my ($who, $held, $buffered, $schedules) = @$r;
	is_deeply(series($who, 'wfe_rate_limited'), { '{"bucket": "rl"}' => $held },
		"$who: wfe_rate_limited counts its own attempts held for a token: $held");
	is_deeply(series($who, 'wfe_signals_buffered'), { '{"signal": "sig.go@1"}' => $buffered },
		"$who: wfe_signals_buffered counts its own buffered signals: $buffered");
	my $next = series($who, 'wfe_schedule_next_fire_seconds');
	is(join(' ', map { /"schedule": "([^"]+)"/ } sort keys %$next), $schedules,
		"$who: wfe_schedule_next_fire_seconds has its own schedules only");
	ok(!grep({ $_ <= 0 || $_ > 86400 } values %$next), "... each fires within a day");
	is_deeply(series($who, 'wfe_circuit_open'), $circuits,
		"$who: wfe_circuit_open: qidle half open (0.5), qr closed (0)");
}
($st, $out) = login('reader_A', q{SELECT queue || ' ' || state FROM wfe.dashboard_queues WHERE queue IN ('qidle', 'qb') ORDER BY 1});
is("$st|$out", '|qidle half_open', "reader_A's dashboard_queues: qidle's circuit is half_open, and B's queue qb is not there");
($st, $out) = login('reader_A', q{SELECT count(*) FROM wfe.metrics WHERE labels::text ~ 'nightly-b|flow-b|"qb"'});
is("$st|$out", '|0', 'no new series names anything of B for reader_A');
# the circuits' doors: the probe's task names a run of any tenant, and only admins configure
my $circuit_rows = 'SELECT c::text FROM wfe.circuits AS c ORDER BY queue';
$before = sql($circuit_rows);
for my $q (q{SELECT probe_run_id FROM wfe.circuits}, q{SELECT * FROM wfe.circuits},
	q{UPDATE wfe.circuits SET state = 'closed'}, q{SELECT wfe.reset_circuit('qidle')},
	q{SELECT wfe.configure_circuit('qidle', NULL)}, q{SELECT wfe.configure_rate_limit('rl', NULL)})
{
	($st) = login('reader_A', $q);
	is($st, '42501', "reader_A is refused: $q");
}
($st, $out) = login('reader_A', q{SELECT queue || ' ' || state || ' ' || probe_out FROM wfe.circuits ORDER BY 1});
is("$st|$out", "|qidle half_open false\nqr closed false", '... but reads the circuits without the probe columns');
is(sql($circuit_rows), $before, '... and the circuits are unchanged');
is(sql(q{SELECT count(*) FROM wfe.rate_limits}), '1', '... and so is the rate limit');

# folding: 600 more keyed runs of A; the counter stays exact, its rows few
sql(q{SELECT wfe.submit('flow-a', '{}', 'bulk-' || i, '{"tenant": "A"}') FROM generate_series(1, 600) AS i});
is(series('reader_A', 'wfe_idempotent_submits_total')->{'{"result": "created"}'}, 603, 'the counter counts 603 keyed runs');
cmp_ok(sql(q{SELECT count(*) FROM wfe.metric_counters WHERE metric = 'wfe_idempotent_submits_total'}), '<', 300,
	'... in fewer rows than it counted (folded)');

# Prometheus for real: Debian's prometheus-postgres-exporter with the
# shipped query file, on loopback, as a login with wfe_reader mapped to
# both tenants, then as one without wfe_reader.
my $exporter = '/usr/bin/prometheus-postgres-exporter';
ok(-x $exporter, "$exporter is installed (test/harness/deps.sh)");
my $queries = "$top/packaging/prometheus/wfe-queries.yaml";
sql(q{CREATE ROLE exporter LOGIN IN ROLE wfe_reader;
      SELECT wfe.add_tenant_member('exporter', 'A'); SELECT wfe.add_tenant_member('exporter', 'B');});

# export(ROLE): the exporter's /metrics body as ROLE, and its log
sub export
{
	my ($role) = @_;
	my $port = PostgreSQL::Test::Cluster::get_free_port();
	my $log = "$PostgreSQL::Test::Utils::tmp_check/exporter_$role.log";
	local $ENV{DATA_SOURCE_NAME} =
	  'host=' . $node->host . ' port=' . $node->port . " user=$role dbname=postgres sslmode=disable";
	my $h = IPC::Run::start([ $exporter, "--web.listen-address=127.0.0.1:$port",
		"--extend.query-path=$queries", '--disable-default-metrics', '--disable-settings-metrics' ],
		'<', \undef, '>&', $log);
	my ($body, $http) = ('', HTTP::Tiny->new(timeout => 10));
	for (1 .. 100)
	{
		my $r = $http->get("http://127.0.0.1:$port/metrics");
		if ($r->{success}) { $body = $r->{content}; last; }
		select(undef, undef, undef, 0.1);
	}
	$h->kill_kill;
	return ($body, slurp_file($log));
}

my ($body, $log) = export('exporter');
my %scraped;
for my $line (grep { /^wfe_/ } split /\n/, $body)
{
	my ($name, $labels, $value) = $line =~ /^(\w+)(?:\{(.*)\})?\s+(\S+)$/ or next;
	my %l = ($labels // '') =~ /(\w+)="([^"]*)"/g;
	delete $l{server};    # the exporter's own label
	$scraped{ $name . '{' . join(',', map { "$_=$l{$_}" } sort keys %l) . '}' } = $value;
}
my $want = sql(q{SELECT string_agg(metric || '{' || coalesce((SELECT string_agg(k || '=' || v, ',' ORDER BY k)
                                                         FROM jsonb_each_text(labels) AS e(k, v)), '') || '}=' || value, E'\n')
                   FROM wfe.metrics});
my %want = map { split /=(?=[^=]*$)/ } split /\n/, $want;
# ages grow between the scrape and the query after it: within 60 s, not
# above; the seconds to a schedule's next firing shrink: within 60 s, not below
for my $k (grep { /^wfe_schedule_next_fire_seconds\{/ } keys %want)
{
	my $left = delete $scraped{$k};
	ok(defined $left && $left >= $want{$k} && $left < $want{$k} + 60, "$k: $want{$k} s, scraped ${\($left // 'nothing')}");
	delete $want{$k};
}
for my $k (grep { /_seconds\{/ } keys %want)
{
	my $age = delete $scraped{$k};
	ok(defined $age && $age <= $want{$k} && $age > $want{$k} - 60, "$k: $want{$k} s, scraped ${\($age // 'nothing')}");
	delete $want{$k};
}
is_deeply(\%scraped, \%want, 'the exporter serves every other series of wfe.metrics, by name, labels and value')
  or diag("scraped:\n$body\nexporter log:\n$log");
is($scraped{'wfe_runs{state=running,workflow=flow-a}'}, 602, 'e.g. wfe_runs of flow-a: 602 running');
is($scraped{'wfe_queue_depth{queue=qb,track=poll}'}, 1, "... and B's queue: 1 queued, through the exporter's tenants");
like($body, qr/^# TYPE wfe_runs_finished_total counter$/m, 'counters are typed counter');
like($body, qr/^# TYPE wfe_queue_depth gauge$/m, 'gauges are typed gauge');

# without wfe_reader: no wfe series, and the exporter's log says why
($body, $log) = export('nobody');
unlike($body, qr/^wfe_/m, 'a role without wfe_reader exports no wfe series');
like($log, qr/permission denied for schema wfe/, '... and the exporter logs "permission denied for schema wfe"');

# the Grafana dashboard and the alert rules name only series the exporter serves
my %names = map { /^(\w+)/ ? ($1 => 1) : () } grep { /^wfe_/ } split /\n/, (export('exporter'))[0];
for my $file ('packaging/grafana/wfe-dashboard.json', 'packaging/prometheus/wfe-alerts.yaml')
{
	my $text = slurp_file("$top/$file");
	my %used = map { $_ => 1 } $text =~ /\b(wfe_[a-z_]+)\b/g;
	my @unknown = grep { !$names{$_} } sort keys %used;
	ok(%used && !@unknown, "$file names " . scalar(keys %used) . ' series, all served') or diag("unknown: @unknown");
}

# the KEDA scaler's query (docs/operations.md "Monitoring"), as the exporter's role
my ($keda) = slurp_file("$top/docs/operations.md") =~ /<!-- keda -->\s*```sql\n(.*?)```/s;
ok($keda, 'docs/operations.md has the KEDA query');
($st, $out) = login('exporter', $keda =~ s/'payments'/'qb'/r);
is("$st|$out", '|2', "the KEDA query: qb's work (1 queued, 1 in flight) is 2");

done_testing();
