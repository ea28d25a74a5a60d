# Schedules (docs/delivery.md "Schedules", operations.md "Schedules";
# issue 23) with a real background worker:
#
# - the worker, woken when a tick is planned, fires it: one run, tenant A,
#   key schedule:NAME:<tick>, the report naming schedule and scheduled_for;
#   the fire latency (tick due -> run submitted) is measured and printed;
# - catch-up after "downtime" (a schedule whose ticks passed unfired):
#   latest fires the last, all the last wfe.max_schedule_catch_up, none none;
# - overlap while the previous run is live: skip, allow, buffer_one (the
#   kept tick fires once the run ended; a second is skipped),
#   cancel_previous;
# - one run per tick across a crash: kill -9 of the backend that submitted
#   a tick's run but had not committed it nor the schedule's update: after
#   the restart the tick fires once; a tick whose run committed while the
#   schedule's update was lost (a backfill ran it) is not run again;
# - attacks as real logins: another tenant's submitter cannot create a
#   schedule for a tenant it does not act for, nor alter, drop, pause,
#   trigger or backfill one (each answered as for a schedule that does not
#   exist), and nothing changed; another tenant's reader sees none of its
#   rows in the views; the operator of the tenant pauses, resumes,
#   triggers;
# - an owner that lost its tenant membership: the next tick pauses the
#   schedule (schedule.failed) and submits nothing.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);
use WfeLogin;
use WfeNode;

my $node = WfeNode::node('wfe_schedules', preload => 1,
	conf => "wfe.poll_interval_ms = 500\n"
	  . "restart_after_crash = on\n"
	  . "log_statement = none\n");

sub sql { return $node->safe_psql('postgres', $_[0]); }

# login(ROLE, SQL): run SQL as login ROLE in a connection of its own;
# (SQLSTATE or '', stdout)
sub login
{
	my $r = WfeLogin::as_login($node, @_);
	return ($r->{state}, $r->{out});
}

sql(q{SELECT wfe.register_worker('sch.step@1', 'sch-work')});
WfeNode::workflow($node, <<'YAML');
name: sch
version: "1.0.0"
entry: step
stages:
  - name: step
    type: worker
    queue: sch-work
    worker: sch.step@1
    on_success: completed
    on_failure: failed
YAML
WfeNode::logins($node,
	sub_a => 'wfe_submitter A',
	sub_b => 'wfe_submitter B',
	read_a => 'wfe_reader A',
	read_b => 'wfe_reader B',
	op_a => 'wfe_operator A',
	op_b => 'wfe_operator B');
ok($node->poll_query_until('postgres', 'SELECT rounds > 0 FROM wfe.worker_status()'), 'the worker runs');

# The schedules the tests below plan by hand start in 2100 ($LATER): none
# has a tick of its own that could fire between its creation and the plan.
my $LATER = '"start_at": "2100-01-01T00:00:00Z"';

# due(NAME, TICK_SQL, END): make one tick of NAME due now -- TICK_SQL, and
# nothing after it (end_at) -- and wake the worker, as create_schedule does.
sub due
{
	my ($name, $tick) = @_;
	sql(    "UPDATE wfe.schedule_defs SET next_tick = ($tick), end_at = ($tick), next_fire_at = now() "
		  . "WHERE name = '$name'; SELECT wfe._wake(now());");
}

# fired(NAME): wait until NAME's due tick was taken.
sub fired
{
	my ($name) = @_;
	return $node->poll_query_until('postgres',
		"SELECT next_fire_at IS NULL AND buffered_tick IS NULL FROM wfe.schedule_defs WHERE name = '$name'");
}

# taken(NAME): wait until NAME's due tick was taken (fired, skipped or kept back).
sub taken
{
	my ($name) = @_;
	return $node->poll_query_until('postgres',
		"SELECT next_fire_at IS NULL FROM wfe.schedule_defs WHERE name = '$name'");
}

sub runs_of
{
	my ($name) = @_;
	return sql("SELECT count(*) FROM wfe.schedule_runs WHERE schedule = '$name'");
}

#
# 1. The worker fires a tick due now, as the owner, in tenant A.
#
my ($state, $out) = login('sub_a',
	"SELECT wfe.create_schedule('a-min', 'sch', '* * * * *', '{\"from\": \"a\"}', "
	  . "'{\"tenant\": \"A\", \"overlap\": \"allow\"}')");
is($state, '', 'sub_a creates a schedule for tenant A');
is(sql("SELECT owner::text || ' ' || tenant || ' ' || (next_fire_at > now()) FROM wfe.schedules"),
	'sub_a A true', 'owned by its creator, its next tick planned');

# the fire latency: a tick due a moment from now, the worker woken for it
my @lat;
for my $i (1 .. 10)
{
	my $tick = sql("SELECT date_trunc('second', clock_timestamp()) + interval '1 second'");
	sql(    "UPDATE wfe.schedule_defs SET next_tick = '$tick', next_fire_at = '$tick', end_at = '$tick' "
		  . "WHERE name = 'a-min'; SELECT wfe._wake('$tick');");
	$node->poll_query_until('postgres',
		"SELECT count(*) = 1 FROM wfe.schedule_runs WHERE schedule = 'a-min' AND scheduled_for = '$tick'")
	  or last;
	push @lat, sql(
		"SELECT round(extract(epoch FROM r.submitted_at - '$tick'::timestamptz) * 1000, 1) "
		  . "FROM wfe.schedule_runs AS s JOIN wfe.runs AS r USING (run_id) WHERE s.scheduled_for = '$tick'");
}
is(scalar(@lat), 10, 'ten ticks fired by the worker');
my @sorted = sort { $a <=> $b } @lat;
diag("fire latency (tick due -> run submitted), ms: p50 $sorted[4], max $sorted[-1] (of 10)");
cmp_ok($sorted[-1], '<', 1000, 'every tick fired within a second');
is( sql(
		"SELECT r.tenant || ' ' || (r.idempotency_key ~ '^schedule:a-min:\\d{4}-\\d\\d-\\d\\dT\\d\\d:\\d\\d:\\d\\dZ\$') "
		  . "|| ' ' || (wfe.report(r.run_id) ->> 'schedule') || ' ' "
		  . "|| ((wfe.report(r.run_id) ->> 'scheduled_for')::timestamptz = s.scheduled_for) || ' ' || r.context "
		  . "FROM wfe.schedule_runs AS s JOIN wfe.runs AS r USING (run_id) ORDER BY run_id LIMIT 1"),
	'A true a-min true {"from": "a"}',
	'the run: tenant A, the tick\'s key, the context; its report names the schedule and the tick');

#
# 2. Attacks as real logins, and the views under the tenant rules.
#
sub snapshot
{
	return sql("SELECT string_agg(s::text, ';' ORDER BY name) FROM wfe.schedule_defs AS s") . '|'
	  . sql('SELECT count(*) FROM wfe.runs');
}
my $before = snapshot();
($state) = login('sub_b', "SELECT wfe.create_schedule('evil', 'sch', '* * * * *', '{}', '{\"tenant\": \"A\"}')");
is($state, '42501', 'sub_b cannot create a schedule for tenant A');
($state) = login('sub_b', "SELECT wfe.create_schedule('evil', 'sch', '* * * * *')");
is($state, '42501', 'nor for the default tenant it does not act for');
($state) = login('read_a', "SELECT wfe.create_schedule('evil', 'sch', '* * * * *', '{}', '{\"tenant\": \"A\"}')");
is($state, '42501', 'a reader cannot create one');
for my $call ("alter_schedule('a-min', '\@daily')", "alter_schedule('a-min', options => '{\"tenant\": \"B\"}')",
	"drop_schedule('a-min')", "pause_schedule('a-min')", "resume_schedule('a-min')",
	"trigger_schedule('a-min')", "backfill_schedule('a-min', now() - interval '5 minutes', now())")
{
	($state) = login('sub_b', "SELECT wfe.$call");
	is($state, '42704', "sub_b: $call answers as for a schedule that does not exist");
}
($state) = login('op_b', "SELECT wfe.pause_schedule('a-min')");
is($state, '42704', "op_b cannot pause A's schedule");
($state) = login('read_a', "SELECT wfe.pause_schedule('a-min')");
is($state, '42501', 'a reader cannot pause one');
is(snapshot(), $before, 'nothing changed: no schedule, no run, a-min as it was');
for my $view (qw(schedules dashboard_schedules schedule_defs schedule_runs))
{
	(undef, $out) = login('read_b', "SELECT count(*) FROM wfe.$view");
	is($out, '0', "read_b sees none of A's rows in wfe.$view");
	(undef, $out) = login('read_a', "SELECT count(*) > 0 FROM wfe.$view");
	is($out, 't', "read_a sees them in wfe.$view");
}
($state) = login('op_a', "SELECT wfe.pause_schedule('a-min')");
is($state . sql("SELECT paused FROM wfe.schedules WHERE name = 'a-min'"), 't', "op_a pauses A's schedule");
($state) = login('op_a', "SELECT wfe.resume_schedule('a-min')");
is($state . sql("SELECT paused FROM wfe.schedules WHERE name = 'a-min'"), 'f', 'and resumes it');
my $n = runs_of('a-min');
($state, $out) = login('op_a', "SELECT wfe.trigger_schedule('a-min') > 0");
is("$state$out", 't', 'and triggers it');
is(runs_of('a-min'), $n + 1, 'one run more');

#
# 3. Catch-up after downtime: ten minutely ticks passed unfired (the last
#    a minute ago), wfe.max_schedule_catch_up = 5.
#
sql("ALTER SYSTEM SET wfe.max_schedule_catch_up = 5; SELECT pg_reload_conf();");
sleep 1;
for my $policy (qw(latest all none))
{
	sql("SELECT wfe.create_schedule('cu-$policy', 'sch', '* * * * *', '{}', "
		  . "'{\"catch_up\": \"$policy\", \"overlap\": \"allow\", $LATER}')");
}
my $T = sql("SELECT date_trunc('minute', now())");
sql(    "UPDATE wfe.schedule_defs SET next_tick = '$T'::timestamptz - interval '11 minutes', "
	  . "end_at = '$T'::timestamptz - interval '2 minutes', next_fire_at = now() "
	  . "WHERE name LIKE 'cu-%'; SELECT wfe._wake(now());");
ok(fired("cu-$_"), "cu-$_ fired") for qw(latest all none);
is( sql(
		"SELECT count(*) || ' ' || bool_and(scheduled_for = '$T'::timestamptz - interval '2 minutes') "
		  . "FROM wfe.schedule_runs WHERE schedule = 'cu-latest'"),
	'1 true', 'latest: one run, for the last missed tick');
is( sql(
		"SELECT count(*) || ' ' || (min(scheduled_for) = '$T'::timestamptz - interval '6 minutes') "
		  . "FROM wfe.schedule_runs WHERE schedule = 'cu-all'"),
	'5 true', 'all: the last five (wfe.max_schedule_catch_up)');
is(runs_of('cu-none'), 0, 'none: no run');
is( sql(
		"SELECT string_agg(e.detail ->> 'schedule' || '=' || (e.detail ->> 'missed'), ' ' ORDER BY e.detail ->> 'schedule') "
		  . "FROM wfe.events AS e WHERE e.type = 'schedule.skipped' AND e.detail ->> 'reason' = 'catch_up'"),
	'cu-all=5 cu-latest=9 cu-none=10', 'the ticks not run are counted as skipped');
sql("ALTER SYSTEM RESET wfe.max_schedule_catch_up; SELECT pg_reload_conf();");

#
# 4. Overlap while the previous run is live (nobody works the queue, so
#    runs stay running).
#
$T = sql("SELECT date_trunc('minute', now())");
for my $policy (qw(skip allow buffer_one cancel_previous))
{
	sql("SELECT wfe.create_schedule('ov-$policy', 'sch', '* * * * *', '{}', '{\"overlap\": \"$policy\", $LATER}')");
	due("ov-$policy", "'$T'::timestamptz - interval '30 minutes'");
	ok(fired("ov-$policy"), "ov-$policy: the first tick fired");
	due("ov-$policy", "'$T'::timestamptz - interval '29 minutes'");
	ok(taken("ov-$policy"), "ov-$policy: the second tick was taken");
}
is(runs_of('ov-skip'), 1, 'skip: no second run while the first is live');
is( sql(
		"SELECT count(*) FROM wfe.events WHERE type = 'schedule.skipped' AND detail ->> 'schedule' = 'ov-skip' "
		  . "AND detail ->> 'reason' = 'overlap'"),
	1, 'skip: the tick is recorded as skipped');
is(sql("SELECT count(*) FROM wfe.schedule_runs JOIN wfe.runs USING (run_id) WHERE schedule = 'ov-allow' AND state = 'running'"),
	2, 'allow: two runs live at once');
is( sql(
		"SELECT string_agg(r.state, ' ' ORDER BY s.scheduled_for) FROM wfe.schedule_runs AS s "
		  . "JOIN wfe.runs AS r USING (run_id) WHERE s.schedule = 'ov-cancel_previous'"),
	'cancelled running', 'cancel_previous: the first run cancelled, the second running');
is(runs_of('ov-buffer_one'), 1, 'buffer_one: the second tick waits');
is( sql(
		"SELECT buffered_tick = '$T'::timestamptz - interval '29 minutes' FROM wfe.schedule_defs "
		  . "WHERE name = 'ov-buffer_one'"),
	't', 'buffer_one: it is kept');
sql(    "UPDATE wfe.schedule_defs SET next_tick = '$T'::timestamptz - interval '28 minutes', "
	  . "end_at = '$T'::timestamptz - interval '28 minutes', next_fire_at = now() "
	  . "WHERE name = 'ov-buffer_one'; SELECT wfe._wake(now());");
ok( $node->poll_query_until(
		'postgres',
		"SELECT count(*) = 1 FROM wfe.events WHERE type = 'schedule.skipped' "
		  . "AND detail ->> 'schedule' = 'ov-buffer_one'"),
	'buffer_one: a third tick while one waits is skipped');
is(runs_of('ov-buffer_one'), 1, 'and starts nothing');
sql("SELECT wfe.cancel_run(run_id) FROM wfe.schedule_runs WHERE schedule = 'ov-buffer_one'");
ok(fired('ov-buffer_one'), 'buffer_one: once the first run ended, the kept tick fires');
is( sql(
		"SELECT string_agg((scheduled_for - '$T'::timestamptz)::text, ' ' ORDER BY scheduled_for) "
		  . "FROM wfe.schedule_runs WHERE schedule = 'ov-buffer_one'"),
	'-00:30:00 -00:29:00', 'for its own tick');

#
# 5. One run per tick across a crash.
#
sql("SELECT wfe.create_schedule('crash', 'sch', '* * * * *', '{}', '{\"overlap\": \"allow\", $LATER}')");
my $x1 = sql("SELECT date_trunc('minute', now()) - interval '40 minutes'");
sql("UPDATE wfe.schedule_defs SET next_tick = '$x1', end_at = '$x1', next_fire_at = now() + interval '1 hour' "
	  . "WHERE name = 'crash'");
my $bg = $node->background_psql('postgres', on_error_stop => 0);
my $doomed = $bg->query_safe('SELECT pg_backend_pid()');
is( $bg->query_safe(
		"BEGIN;\nUPDATE wfe.schedule_defs SET next_fire_at = now() WHERE name = 'crash';\n"
		  . "SELECT wfe._fire_schedules(10);"),
	'1', 'a session fired the tick (run submitted, schedule moved on), not committed');
is(sql("SELECT count(*) FROM wfe.runs WHERE idempotency_key = 'schedule:crash:' || "
	  . "to_char('$x1'::timestamptz AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"')"),
	0, 'others do not see its run');
my $offset = -s $node->logfile;
is(kill('KILL', $doomed), 1, 'kill -9 of that backend');
$node->wait_for_log(qr/all server processes terminated; reinitializing/, $offset);
eval { $bg->quit; };
ok($node->poll_query_until('postgres', 'SELECT true'), 'the server accepts connections again');
ok( $node->poll_query_until(
		'postgres', "SELECT count(*) = 1 FROM pg_stat_activity WHERE backend_type = 'wfe worker'"),
	'the wfe worker is back');
is(sql("SELECT next_tick = '$x1' FROM wfe.schedule_defs WHERE name = 'crash'") . runs_of('crash'),
	't0', 'the tick is still due, no run of it');
sql("UPDATE wfe.schedule_defs SET next_fire_at = now() WHERE name = 'crash'; SELECT wfe._wake(now());");
ok(fired('crash'), 'after the restart the worker fires it');
is(runs_of('crash'), 1, 'once');
# the run committed, the schedule's update lost: a backfill runs a tick the schedule still has due
my $x2 = sql("SELECT date_trunc('minute', now()) - interval '39 minutes'");
is(sql("SELECT wfe.backfill_schedule('crash', '$x2', '$x2')"), 1, 'a backfill ran the next tick');
due('crash', "'$x2'::timestamptz");
ok(fired('crash'), 'the worker takes the same tick');
is(runs_of('crash') . ' ' . sql("SELECT count(*) FROM wfe.runs WHERE workflow = 'sch' AND idempotency_key LIKE 'schedule:crash:%'"),
	'2 2', 'and runs it no second time');
is( sql(
		"SELECT last_run_id = (SELECT run_id FROM wfe.schedule_runs WHERE scheduled_for = '$x2' AND schedule = 'crash') "
		  . "FROM wfe.schedule_defs WHERE name = 'crash'"),
	't', 'it records the run the backfill made');

#
# 6. The owner lost its membership: the next tick pauses the schedule.
#
sql("SELECT wfe.remove_tenant_member('sub_a', 'A')");
$n = runs_of('a-min');
due('a-min', "date_trunc('minute', now()) - interval '50 minutes'");
ok( $node->poll_query_until('postgres', "SELECT paused FROM wfe.schedule_defs WHERE name = 'a-min'"),
	'a schedule whose owner left the tenant is paused at its next tick');
is(runs_of('a-min'), $n, 'and submits nothing');
like(
	sql("SELECT detail ->> 'error' FROM wfe.events WHERE type = 'schedule.failed' AND detail ->> 'schedule' = 'a-min'"),
	qr/no longer acts for the tenant/,
	'event schedule.failed says why');
like(sql("SELECT paused_reason FROM wfe.schedules WHERE name = 'a-min'"),
	qr/owner sub_a no longer acts for tenant A/, 'and so does the view');

$node->stop;
done_testing();
