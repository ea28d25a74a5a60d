# The upgrade from 0.1.0 to this release, through every release between
# (0.1.0 -> 0.2.0 -> 0.3.0; docs/operations.md "Upgrading"; the header of
# sql/wfe--0.1.0--0.2.0.sql says how these scripts are kept).  One cluster, running the current wfe.so
# (preloaded):
#
# - the frozen install script sql/wfe--0.1.0.sql is the one released, and
#   so is sql/wfe--0.2.0.sql, 0.2.0's, and PostgreSQL has an update path
#   0.1.0 -> 0.2.0 -> current;
# - database "upgraded": CREATE EXTENSION wfe VERSION '0.1.0', the example
#   contracts and workflows as 0.1.0 stored them (test/tap/upgrade/0.1.0/:
#   examples/ as released, and the plans 0.1.0's compiler made of them,
#   stored the way 0.1.0's create_definition stored them, since this
#   wfe.so compiles with its own compiler version), then runs left in the
#   states a worker can leave them in: completed and failed runs; a task
#   queued, never claimed; tasks claimed and running (an action whose result
#   a decision waits for, the second branch of a fork whose first branch has
#   joined, a tasks-form task beside a completed one whose output is
#   written); a retry scheduled, its timer pending; a delayed start; a run
#   deadline due; a cancelled run finalising; an idempotency key; a
#   tasks-form run not started.  Then ALTER EXTENSION wfe UPDATE TO '0.2.0':
#   - nothing that was there changed: reports, stages, events, outputs,
#     timers, definitions and plans;
#   - the catalog check: test/tap/catalog.sql (functions with their bodies
#     and attributes, tables and their columns in order, indexes,
#     constraints, triggers, types, sequences, comments, privileges,
#     extension membership and pg_dump's configuration tables, the wfe_*
#     roles, the rows the install script writes) prints the same text for
#     the upgraded database as for a fresh CREATE EXTENSION wfe.  If not,
#     the failure shows the diff: what the upgrade script misses.  The check
#     is shown to notice a changed function, comment, grant, column, index,
#     trigger, extension member and row;
#   - every run is finished through the public API: the claimed tasks
#     report with their 0.1.0 fences (heartbeat, complete_task), then
#     claim_task, complete_task, fail_task, and wfe.tick() for the timers;
#     reports of attempts that ended before the upgrade get the answers
#     they got then (late for the cancelled run's, duplicate and conflict
#     for the retried stage's failed attempt); an
#     idempotency key still finds its run; a new definition version
#     compiles with the new compiler version and runs next to the old ones.
#     Each run ends in the expected state, stage by stage, and what its
#     report said before the upgrade is still in it;
# - database "postgres", served by the background worker: the worker goes
#   on across ALTER EXTENSION UPDATE (same process, no crash restart) and
#   fires timers after it.
#
# The library is the current one throughout: the test shows that it serves
# a database made by 0.1.0's SQL, and updates it; not how 0.1.0's own
# library behaved.  Hence the plans from test/tap/upgrade/0.1.0/.
#
# Run it alone: WFE_TAP_ONLY='005_*' test/harness/run-all.sh tap.
# At the next release (0.3.0): freeze sql/wfe--0.2.0.sql and
# test/tap/upgrade/0.2.0/, and move this test to upgrade from 0.2.0
# ($from, $from_sha256 and the fixtures below).
use strict;
use warnings;

use Cwd qw(abs_path);
use Digest::SHA qw(sha256_hex);
use File::Basename qw(dirname);
use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(sleep time);
use WfeNode;

my $top = abs_path(dirname(__FILE__) . '/../..');

# The previous release: its install script as released (commit 52c2cd5) and
# what its databases were made of.
my $from        = '0.1.0';
my $from_sha256 = '361c3101092ccef42e6984e148165347689ee64f9287300650702724718cf4b5';
# Every release since, with its install script as released: 0.2.0 at 669fd53.
my %released    = ('0.2.0' => '5cdb0c74016dab025d7426fdee56b81196cccf7e3c47a35d77b806b4eef97a40');
my $fixtures    = "$top/test/tap/upgrade/$from";
my ($to)        = slurp_file("$top/wfe.control") =~ /^default_version\s*=\s*'([^']+)'/m;

my $node = WfeNode::node('wfe_upgrade', preload => 1, extension => 0, conf => "wfe.poll_interval_ms = 200\n");

# SQL in database DB (default "upgraded"); the output, chomped.
sub sql
{
	my ($sql, $db) = @_;
	return $node->safe_psql($db // 'upgraded', $sql);
}

# A $$-quoted SQL literal.
sub lit { return "\$q\$$_[0]\$q\$"; }

#
# The scripts.
#
my $sharedir = sql("SELECT setting FROM pg_config WHERE name = 'SHAREDIR'", 'postgres');
is(sha256_hex(slurp_file("$top/sql/wfe--$from.sql")),
	$from_sha256, "sql/wfe--$from.sql is $from\'s install script as released");
is(sha256_hex(slurp_file("$sharedir/extension/wfe--$from.sql")),
	$from_sha256, "the installed wfe--$from.sql is that script");
for my $v (sort keys %released)
{
	is(sha256_hex(slurp_file("$top/sql/wfe--$v.sql")),
		$released{$v}, "sql/wfe--$v.sql is $v\'s install script as released");
}
is( sql("SELECT path FROM pg_extension_update_paths('wfe') WHERE source = '$from' AND target = '$to'",
		'postgres'),
	join('--', $from, sort(keys %released), $to),
	"an update path from $from through every release to $to");

#
# A 0.1.0 database.
#
sql('CREATE DATABASE upgraded', 'postgres');
sql("CREATE EXTENSION wfe VERSION '$from'");
is(sql("SELECT extversion FROM pg_extension WHERE extname = 'wfe'"),
	$from, "CREATE EXTENSION wfe VERSION '$from' with the current library");
sql(slurp_file("$fixtures/contracts.sql"));

# Each definition as 0.1.0's wfe.create_definition stored it (the same
# INSERT and wfe._store_plan), with the plan 0.1.0 compiled; then approved
# and activated through the API.  The digest is the SHA-256 of the plan.
my %digest;
for my $wf ('model-ingest', 'payment-routing', 'system-initialization')
{
	my $source = slurp_file("$fixtures/$wf.yaml");
	my $plan   = slurp_file("$fixtures/$wf.plan.json");
	chomp $plan;
	$digest{$wf} = 'sha256:' . sha256_hex($plan);
	my ($version) = $plan =~ /"version":"([^"]+)"}$/;
	sql(<<"SQL");
INSERT INTO wfe.definitions AS d (workflow, version, digest, state, source, plan, dsl_version,
                                  compiler_version, created_at, created_by)
SELECT p ->> 'name', p ->> 'version', '$digest{$wf}', 'draft', @{[lit($source)]}, p,
       p ->> 'dsl_version', p ->> 'compiler_version', now(), session_user
  FROM (SELECT @{[lit($plan)]}::jsonb AS p) AS x
RETURNING d.definition_id AS id \\gset
SELECT wfe._store_plan(:id, plan) FROM wfe.definitions WHERE definition_id = :id;
SELECT wfe.approve('$wf', '$version');
SELECT wfe.activate('$wf', '$version');
SQL
}
is( sql("SELECT string_agg(workflow || ' ' || version || ' ' || state || ' ' || compiler_version || ' '"
		  . " || (digest = (SELECT wfe.compile(source) ->> 'digest'))::text, ', ' ORDER BY workflow) "
		  . "FROM wfe.definitions"),
	"model-ingest 2.3.0 active $from false, payment-routing 1.0.0 active $from false, "
	  . "system-initialization 1.0.0 active $from false",
	"the examples are active, compiled by $from (this library compiles them to other digests)");

my %label;    # run_id => label, for the messages

sub submit
{
	my ($label, $workflow, $context, $key, $options) = @_;
	$key = defined $key ? "'$key'" : 'NULL';
	$options //= "'{}'";
	my $run = sql("SELECT run_id FROM wfe.submit('$workflow', '$context', $key, $options)");
	$label{$run} = $label;
	return $run;
}

# Claim one task of QUEUE, which must be RUN's STAGE; returns (attempt, fence).
sub claim
{
	my ($queue, $run, $stage) = @_;
	my ($r, $s, $attempt, $fence) =
	  split /\|/, sql("SELECT run_id, stage, attempt, fence FROM wfe.claim_task('$queue', 'w-$from')");
	is(($r // '-') . ' ' . ($s // '-'), "$run $stage", "$label{$run}: $stage claimed from $queue");
	return ($attempt, $fence);
}

sub complete
{
	my ($run, $stage, $attempt, $fence, $result) = @_;
	$result //= '{}';
	return sql("SELECT wfe.complete_task($run, '$stage', $attempt, $fence, '$result')");
}

sub fail_task
{
	my ($run, $stage, $attempt, $fence, $error, $retryable) = @_;
	return sql("SELECT wfe.fail_task($run, '$stage', $attempt, $fence, '$error', $retryable)");
}

# Claim RUN's STAGE from QUEUE and complete it.
sub work
{
	my ($queue, $run, $stage, $result) = @_;
	my @claimed = claim($queue, $run, $stage);
	is(complete($run, $stage, @claimed, $result), 'accepted', "$label{$run}: $stage completed");
}

sub stage_state
{
	my ($run, $stage) = @_;
	return sql("SELECT state FROM wfe.run_stages WHERE run_id = $run AND stage = '$stage'");
}

#
# Runs in every state, under 0.1.0.
#
my $hit  = '{"hit": true}';
my $miss = '{"hit": false}';

# Finished: completed along the cache hit, with its finaliser.
my $r_done = submit('done', 'model-ingest', '{"modelId": "m-done"}');
work('actions', $r_done, 'cache-lookup', $hit);
work('actions', $r_done, 'publish');
work('actions', $r_done, 'finaliser.1');

# Finished: failed, not retryable.
my $r_failed = submit('failed', 'payment-routing', '{"amount": 100, "account": "a-1"}');
my @failed_std = claim('payments', $r_failed, 'standard');
is(fail_task($r_failed, 'standard', @failed_std, '{"code": "card.declined"}', 'false'), 'accepted', 'failed: standard failed');

# A fork half joined: semantic-analysis completed, technical-metadata running.
my $r_fork = submit('fork', 'model-ingest', '{"modelId": "m-fork"}');
work('actions',   $r_fork, 'cache-lookup', $miss);
work('rendering', $r_fork, 'render-thumbnail');
work('analysis',  $r_fork, 'semantic-analysis');
my @fork_tm = claim('metadata', $r_fork, 'technical-metadata');

# A decision waiting for the result of its action, which is running.
my $r_decision = submit('decision', 'model-ingest', '{"modelId": "m-decision"}');
my @decision_cl = claim('actions', $r_decision, 'cache-lookup');

# Cancelled while its action ran: finalising, its finaliser queued; the
# action's late report is refused.
my $r_cancel = submit('cancel', 'model-ingest', '{"modelId": "m-cancel"}');
my @cancel_cl = claim('actions', $r_cancel, 'cache-lookup');
is(sql("SELECT wfe.cancel_run($r_cancel, 'cancelled before the upgrade')"), 'accepted', 'cancel: cancel_run');
my $cancel_answer = complete($r_cancel, 'cache-lookup', @cancel_cl, $hit);
isnt($cancel_answer, 'accepted', "cancel: the cancelled attempt's report is refused ($cancel_answer)");

# Queued, never claimed.
my $r_queued = submit('queued', 'model-ingest', '{"modelId": "m-queued"}');

# A retry scheduled: attempt 1 failed, its retry timer pending.
my $r_retry = submit('retry', 'payment-routing', '{"amount": 50000, "account": "a-2"}');
my @retry_1 = claim('payments-review', $r_retry, 'high-value');
is(fail_task($r_retry, 'high-value', @retry_1, '{"code": "review.busy"}', 'true'), 'accepted', 'retry: attempt 1 failed');

# A delayed start, due soon, with a run deadline far away.
my $r_timer = submit('timer', 'payment-routing', '{"amount": 200, "account": "a-3"}', undef,
	q{jsonb_build_object('not_before', now() + interval '2 seconds', 'run_deadline_ms', 3600000)});

# A run deadline, due before its delayed start.
my $r_deadline = submit('deadline', 'payment-routing', '{"amount": 300, "account": "a-4"}', undef,
	q{jsonb_build_object('not_before', now() + interval '1 hour', 'run_deadline_ms', 1500)});

# An idempotency key.
my $r_idem = submit('idem', 'payment-routing', '{"amount": 400, "account": "a-5"}', 'upgrade-idem-1');

# Tasks form: verify_storage completed; fetch_configuration and
# restore_session claimed; restore_session completed with its output, so
# hydrate_user_profile is queued; fetch_configuration still running.
my $r_tasks = submit('tasks', 'system-initialization', '{}');
work('init', $r_tasks, 'verify_storage');
my %tasks_claim;
for my $row (split /\n/, sql("SELECT stage, attempt, fence FROM wfe.claim_task('init', 'w-$from', 2)"))
{
	my ($s, @af) = split /\|/, $row;
	$tasks_claim{$s} = \@af;
}
is(join(' ', sort keys %tasks_claim), 'fetch_configuration restore_session', 'tasks: two tasks claimed');
is( complete($r_tasks, 'restore_session', @{ $tasks_claim{restore_session} },
		'{"user_session": {"user": "u-1", "token": "t-1"}}'),
	'accepted', 'tasks: restore_session completed');

# Tasks form, not started: verify_storage queued.
my $r_tasks2 = submit('tasks2', 'system-initialization', '{}');

my @before = sort { $a <=> $b } keys %label;
is( sql("SELECT string_agg(run_id || ' ' || state, ', ' ORDER BY run_id) FROM wfe.runs"),
	join(', ',
		map { "$_ " . ({ $r_done => 'completed', $r_failed => 'failed', $r_cancel => 'finalising' }->{$_} // 'running') }
		  @before),
	'before the upgrade: two runs finished, one finalising, the others running');
is( join(' ',
		map { stage_state(@$_) } [ $r_fork, 'technical-metadata' ], [ $r_fork, 'derive-join' ],
		[ $r_decision, 'cache-lookup' ], [ $r_decision, 'cache-route' ], [ $r_cancel, 'finaliser.1' ],
		[ $r_queued, 'cache-lookup' ], [ $r_retry, 'high-value' ], [ $r_timer, 'route' ],
		[ $r_deadline, 'route' ], [ $r_tasks, 'fetch_configuration' ], [ $r_tasks, 'hydrate_user_profile' ],
		[ $r_tasks2, 'verify_storage' ]),
	'running waiting running waiting queued queued retry_scheduled waiting waiting running queued queued',
	'before the upgrade: the stages in flight');
is( sql("SELECT string_agg(kind, ' ' ORDER BY kind) FROM wfe.timers WHERE fired_at IS NULL"),
	'not_before not_before retry run_deadline run_deadline',
	'before the upgrade: the timers pending');

# What must not change: every table's rows but the definitions' lifecycle
# columns, and each run's report (for a run in flight, without its running
# duration).
my %table_order = (
	runs        => 'run_id',
	run_stages  => 'run_id, ordinal',
	events      => 'event_id',
	outputs     => 'run_id, task, key',
	timers      => 'timer_id',
	definitions => 'definition_id',
	plan_stages => 'definition_id, ordinal',
	plan_edges  => 'definition_id, from_stage, kind, ordinal, to_stage',
	contracts   => 'ref',
	outbox      => 'id',
	dead_letters => 'dead_letter_id',
	queues      => 'queue');

# the columns each table has before the upgrade: a column the upgrade adds
# (NULL in the rows that exist) is not a change of their data
my %old_columns = map {
	$_ => sql("SELECT string_agg('t.' || quote_ident(a.attname), ', ' ORDER BY a.attnum) FROM pg_attribute AS a"
		  . " WHERE a.attrelid = 'wfe.$_'::regclass AND a.attnum > 0 AND NOT a.attisdropped")
} keys %table_order;

# 0.3.0 moves the fences out of the events' details into their fence
# column (the readers' roles read detail, not fence), and the
# unauthenticated callbacks into a table of their own: an event row of
# before, in the form the upgrade gives it, against the row after it
my %events_as = (
	before => "t.event_id, t.run_id, t.tenant, t.stage, t.attempt, t.type, t.at,"
	  . " t.detail - 'fence' - 'cancelled_fence' - 'current_fence',"
	  . " CASE WHEN t.type = 'stage.cancelled'"
	  . "      THEN coalesce((t.detail ->> 'cancelled_fence')::bigint, (t.detail ->> 'fence')::bigint - 1)"
	  . "      ELSE (t.detail ->> 'fence')::bigint END",
	after => "t.event_id, t.run_id, t.tenant, t.stage, t.attempt, t.type, t.at, t.detail, t.fence");

# table_rows(TABLE[, PHASE]): the rows, in the columns of before the upgrade
sub table_rows
{
	my ($table, $phase) = @_;
	my $cols = $old_columns{$table};
	my $where = '';
	if ($table eq 'events')
	{
		$cols = $events_as{ $phase // 'before' };
		$where = " WHERE t.type <> 'callback.unauthenticated'";
	}
	return sql("SELECT coalesce(string_agg(ROW($cols)::text, E'\\n' ORDER BY $table_order{$table}), '')"
		  . " FROM wfe.$table AS t$where");
}

# (less the keys 0.2.0 adds to every report: replay_of, replays, redriven;
# and 0.3.0's: schedule, scheduled_for, output, parent, children)
sub report
{
	my ($run) = @_;
	return sql("SELECT CASE WHEN r ->> 'finished_at' IS NULL THEN r - 'duration_ms' ELSE r END "
		  . "FROM (SELECT wfe.report($run) - ARRAY['replay_of', 'replays', 'redriven', 'schedule', 'scheduled_for', 'output', 'parent', 'children'] AS r) AS x");
}
# history of earlier days (of no run: no report shows it), for the day
# partitions 0.3.0 moves it into
sql("INSERT INTO wfe.events (run_id, tenant, type, at, detail) "
	  . "SELECT NULL, 'default', 'test.history', now() - d * interval '1 day', jsonb_build_object('days_ago', d) "
	  . "FROM generate_series(1, 3) AS d");
my %rows_before   = map { $_ => table_rows($_) } keys %table_order;
my %report_before = map { $_ => report($_) } @before;
my $last_event    = sql('SELECT max(event_id) FROM wfe.events');

#
# The upgrade.
#
sql("ALTER EXTENSION wfe UPDATE TO '$to'");
is(sql("SELECT extversion FROM pg_extension WHERE extname = 'wfe'"), $to, "ALTER EXTENSION wfe UPDATE TO '$to'");
for my $table (sort keys %table_order)
{
	is(table_rows($table, 'after'), $rows_before{$table}, "after the upgrade: wfe.$table is unchanged");
}
for my $run (@before)
{
	is(report($run), $report_before{$run}, "after the upgrade: the report of $label{$run} is unchanged");
}
# 0.3.0 partitions the event log by day (docs/scaling.md "History
# partitions"): the upgrade moves every row into the partitioned table (its
# default partition, the rows being unchanged as checked above), and the
# worker's pass moves them into day partitions, a day a pass; the catalog
# below is compared with the day partitions made.
my $events_after = sql("SELECT count(*) FROM wfe.events");
is( sql("SELECT c.relkind::text || ' ' || (SELECT count(*) FROM wfe.events_default) "
		  . "FROM pg_class AS c WHERE c.oid = 'wfe.events'::regclass"),
	"p $events_after",
	'after the upgrade: wfe.events is partitioned, every event in its default partition');
my $history_days = sql("SELECT count(DISTINCT (at AT TIME ZONE 'UTC')::date) FROM wfe.events");
for (0 .. $history_days)
{
	sql("SELECT wfe._history_maintain(now() - interval '7 days')");
}
is( sql("SELECT count(*) FILTER (WHERE tableoid = 'wfe.events_default'::regclass) || ' ' || "
		  . "count(*) FILTER (WHERE e.tableoid::regclass::text = 'wfe.events_p' || to_char(e.at AT TIME ZONE 'UTC', 'YYYYMMDD')) "
		  . "FROM wfe.events AS e"),
	"0 $events_after",
	'after the worker\'s passes: every event moved into the partition of its day');
is(table_rows('events', 'after'), $rows_before{events}, 'after the worker\'s passes: wfe.events is unchanged');
is(sql("SELECT count(*) FROM wfe._history_days() AS d WHERE d.day >= (now() AT TIME ZONE 'UTC')::date"),
	'3', 'after the worker\'s passes: today\'s partition and the next two days\' are made');

is(sql("SELECT count(*) FROM wfe.contracts WHERE handler IS NOT NULL AND run_as IS DISTINCT FROM created_by::regrole"),
	'0', 'after the upgrade: each handler runs as the role that registered it');
is(sql("SELECT string_agg(DISTINCT g.role::text, ',') || ' ' || count(*) FILTER (WHERE g.role IS NULL) "
	  . "FROM (SELECT queue FROM wfe.contracts WHERE queue IS NOT NULL UNION SELECT queue FROM wfe.queues) AS q "
	  . "LEFT JOIN wfe.queue_grants AS g ON g.queue = q.queue"),
	'wfe_worker 0', 'after the upgrade: every queue known to 0.1.0 is granted to wfe_worker, so its workers go on');

#
# The catalog: the upgraded database against a fresh one.
#
my $catalog_sql = slurp_file("$top/test/tap/catalog.sql");

sub catalog
{
	my ($db, $before, $after) = @_;
	return sql(($before // '') . "\n" . $catalog_sql . "\n" . ($after // ''), $db);
}

# A unified diff of two texts (empty when they are equal).
sub diff
{
	my ($text_a, $text_b, $name_a, $name_b) = @_;
	return '' if $text_a eq $text_b;
	my $dir = PostgreSQL::Test::Utils::tempdir();
	PostgreSQL::Test::Utils::append_to_file("$dir/$name_a", "$text_a\n");
	PostgreSQL::Test::Utils::append_to_file("$dir/$name_b", "$text_b\n");
	my $out = '';
	IPC::Run::run([ 'diff', '-u', '-F', '^[0-9] [a-z]', "$dir/$name_a", "$dir/$name_b" ], '>', \$out);
	$out =~ s{\Q$dir/\E}{}g;
	return $out;
}

# The objects whose blocks differ, for the start of the failure message:
# those a fresh database has and the upgraded one lacks (+), those only the
# upgraded one has (-), those both have, differently (~).
sub catalog_blocks
{
	my %block;
	my $key = '';
	for my $line (split /\n/, $_[0])
	{
		$key = $line if $line =~ /^[0-9] [a-z]/;
		$block{$key} .= "$line\n";
	}
	return \%block;
}

sub catalog_summary
{
	my ($upgraded, $fresh) = map { catalog_blocks($_) } @_;
	my @lines;
	for my $key (sort keys %{ { %$upgraded, %$fresh } })
	{
		my $mark =
			!exists $upgraded->{$key}             ? '+'
		  : !exists $fresh->{$key}                ? '-'
		  : $upgraded->{$key} ne $fresh->{$key}   ? '~'
		  :                                         next;
		# a function is also listed as a member: once is enough
		next if $key =~ /^1 member function (.*)/
		  && (exists $upgraded->{"7 function $1"} xor exists $fresh->{"7 function $1"});
		push @lines, "  $mark $key";
	}
	return join("\n", @lines);
}

my $upgraded_catalog = catalog('upgraded');
sql('CREATE DATABASE fresh', 'postgres');
sql('CREATE EXTENSION wfe', 'fresh');
is(sql("SELECT extversion FROM pg_extension WHERE extname = 'wfe'", 'fresh'), $to, "a fresh CREATE EXTENSION wfe is $to");
my $fresh_catalog = catalog('fresh');

# Rows are compared only where a fresh install writes some: rows of any
# other table that pg_dump leaves out are the runs' (the upgrade script may
# well fill such a table from the runs in flight).
sub without_rows_of
{
	my ($text, @tables) = @_;
	my ($out, $skip) = ('', 0);
	for my $line (split /\n/, $text)
	{
		$skip = grep { $line eq "9 rows of $_" } @tables if $line =~ /^[0-9] [a-z]/;
		$out .= "$line\n" unless $skip;
	}
	chomp $out;
	return $out;
}
my @no_seed_rows = $fresh_catalog =~ /^9 rows of (\S+)\n(?=[0-9] [a-z]|\z)/mg;
push @no_seed_rows, $1 if $fresh_catalog =~ /^9 rows of (\S+)\z/m;
$upgraded_catalog = without_rows_of($upgraded_catalog, @no_seed_rows);
$fresh_catalog    = without_rows_of($fresh_catalog,    @no_seed_rows);
like($fresh_catalog, qr/^7 function wfe\.submit\(text,jsonb,text,jsonb\)$/m,
	'the catalog lists the functions');
my $catalog_diff = diff($upgraded_catalog, $fresh_catalog, "upgraded-from-$from", "fresh-$to");
ok($catalog_diff eq '', "the upgraded database's catalog is a fresh $to database's")
  or diag("The upgraded database's objects (-) against a fresh one's (+), ~ where both have it, differently:\n"
	  . catalog_summary($upgraded_catalog, $fresh_catalog)
	  . "\n\ncatalog.sql of the upgraded database (-) and of a fresh one (+):\n$catalog_diff");

# The check notices each kind of difference (each tried in a transaction
# that is rolled back): it names the object that changed.
my @changes = (
	[ 'ALTER FUNCTION wfe.report(bigint) VOLATILE',            qr/^- STABLE STRICT SECURITY DEFINER$/m ],
	[ 'COMMENT ON TABLE wfe.timers IS NULL',                   qr/^[-+]kind r, .*, comment NULL$/m ],
	[ 'GRANT SELECT ON wfe.runs TO wfe_worker',                qr/^[-+]kind r, .*wfe_worker=r/m ],
	[ 'ALTER TABLE wfe.runs ADD COLUMN probe int',             qr/^[-+]  column probe integer/m ],
	[ 'DROP INDEX wfe.runs_finished_at',                       qr/^[-+]3 relation runs_finished_at$/m ],
	[ 'ALTER TABLE wfe.runs DISABLE TRIGGER runs_state_guard', qr/^[-+]CREATE TRIGGER runs_state_guard .* enabled D/m ],
	[ 'ALTER EXTENSION wfe DROP TABLE wfe.queues',             qr/^[-+]1 member table wfe\.queues$/m ],
	[ 'UPDATE wfe.publisher_lease SET token = 7',              qr/^[-+]\(t,,7,/m ],
	[ 'CREATE OR REPLACE FUNCTION wfe._wake(due timestamptz DEFAULT now()) RETURNS void '
		  . "LANGUAGE sql AS 'SELECT NULL::void'",                qr/^\+ LANGUAGE sql$/m ]);
for my $change (@changes)
{
	my ($ddl, $expect) = @$change;
	my $d = diff($fresh_catalog, without_rows_of(catalog('fresh', "BEGIN;\n$ddl;", 'ROLLBACK;'), @no_seed_rows),
		'fresh', 'changed');
	like($d, $expect, "the catalog check notices: $ddl");
}

#
# Finish every run, under 0.2.0.
#

# The tasks claimed before the upgrade report with their 0.1.0 fences,
# small numbers (0.2.0's have a generation in the high 32 bits).
ok($fork_tm[1] >= 1 && $fork_tm[1] < 2**32 && $retry_1[1] >= 1 && $retry_1[1] < 2**32,
	"the fences 0.1.0 gave are small numbers ($fork_tm[1], $retry_1[1])");
is(sql("SELECT wfe.heartbeat($r_fork, 'technical-metadata', $fork_tm[0], $fork_tm[1])"),
	'accepted', 'fork: heartbeat of the attempt claimed before the upgrade');
is(complete($r_fork, 'technical-metadata', @fork_tm), 'accepted', 'fork: the second branch completes');
is(stage_state($r_fork, 'derive-join'), 'completed', 'fork: the join is satisfied');
is(complete($r_decision, 'cache-lookup', @decision_cl, $miss), 'accepted', 'decision: the action completes');
is( sql("SELECT string_agg(stage || ' ' || state, ', ' ORDER BY ordinal) FROM wfe.run_stages "
		  . "WHERE run_id = $r_decision AND stage IN ('cache-route', 'publish', 'render-thumbnail')"),
	'cache-route completed, render-thumbnail queued, publish waiting',
	'decision: the decision took the miss branch');
is( complete($r_tasks, 'fetch_configuration', @{ $tasks_claim{fetch_configuration} }, '{"app_config": {"theme": "dark"}}'),
	'accepted', 'tasks: fetch_configuration completes');

# Fenced attempts stay fenced.
is(complete($r_cancel, 'cache-lookup', @cancel_cl, $hit), $cancel_answer,
	"cancel: the cancelled attempt's report is still refused ($cancel_answer)");
is(fail_task($r_retry, 'high-value', @retry_1, '{"code": "review.busy"}', 'true'),
	'duplicate', 'retry: attempt 1 reporting its failure again is a duplicate');
is(complete($r_retry, 'high-value', @retry_1), 'conflict', 'retry: attempt 1 reporting success is a conflict');
# A cancellation made by 0.1.0 is acknowledged with the fence of the
# attempt it stopped (0.1.0's stage.cancelled names only the new fence).
is(sql("SELECT wfe.ack_cancel($r_cancel, 'cache-lookup', $cancel_cl[0], $cancel_cl[1] + 1)"),
	'stale', "cancel: ack_cancel with the cancelled stage's own fence is stale");
is(sql("SELECT wfe.ack_cancel($r_cancel, 'cache-lookup', $cancel_cl[0], $cancel_cl[1])"),
	'accepted', 'cancel: ack_cancel with the 0.1.0 fence of the attempt cancelled before the upgrade');

# An idempotency key finds the run submitted before the upgrade.
is( sql("SELECT run_id || ' ' || accepted FROM wfe.submit('payment-routing', '{\"amount\": 400, \"account\": \"a-5\"}', "
		  . "'upgrade-idem-1')"),
	"$r_idem false", 'idem: the key finds the run submitted before the upgrade');

# New runs: of a 0.1.0 definition, and of a version created after the
# upgrade, compiled by the new compiler.
my $r_new = submit('new', 'model-ingest', '{"modelId": "m-new"}');
(my $v11 = slurp_file("$fixtures/payment-routing.yaml")) =~ s/^version: "1\.0\.0"$/version: "1.1.0"/m;
sql("SELECT wfe.create_definition(" . lit($v11) . ")");
sql("SELECT wfe.approve('payment-routing', '1.1.0')");
sql("SELECT wfe.activate('payment-routing', '1.1.0')");
is( sql("SELECT state || ' ' || compiler_version FROM wfe.definitions WHERE workflow = 'payment-routing' ORDER BY version"),
	"retired $from\nactive $to", "payment-routing 1.1.0, compiled by $to, is active");
my $r_v11 = submit('v11', 'payment-routing', '{"amount": 60000, "account": "a-6"}');
is( sql("SELECT string_agg(version || ' ' || compiler_version || ' ' || engine_version, ', ' ORDER BY run_id) "
		  . "FROM wfe.runs WHERE run_id IN ($r_idem, $r_new, $r_v11)"),
	"1.0.0 $from $from, 2.3.0 $from $to, 1.1.0 $to $to",
	'runs record the compiler and the engine they ran with');

# Then workers and the tick do the rest: every task claimed is completed,
# except these, which fail.
my %failures = (
	"tasks2 verify_storage 1" => [ '{"code": "storage.unavailable"}', 'false' ],
	"v11 high-value 1"        => [ '{"code": "review.busy"}',         'true' ],
	"v11 high-value 2"        => [ '{"code": "review.rejected"}',     'false' ]);
my %results = ('cache-lookup' => $hit);
my @queues  = qw(actions rendering analysis metadata init payments payments-review);
my @refused;
my $deadline = time + 60;
while (time < $deadline)
{
	sql('SELECT wfe.tick()');
	my $worked = 0;
	for my $queue (@queues)
	{
		for my $row (split /\n/,
			sql("SELECT run_id, stage, attempt, fence FROM wfe.claim_task('$queue', 'w-$to', 10)"))
		{
			my ($run, $stage, $attempt, $fence) = split /\|/, $row;
			my $failure = $failures{"$label{$run} $stage $attempt"};
			my $answer =
			  $failure
			  ? fail_task($run, $stage, $attempt, $fence, @$failure)
			  : complete($run, $stage, $attempt, $fence, $results{$stage});
			push @refused, "$label{$run} $stage $attempt: $answer" if $answer ne 'accepted';
			$worked++;
		}
	}
	last if sql('SELECT count(*) FROM wfe.runs WHERE finished_at IS NULL') == 0;
	sleep 0.1 unless $worked;
}
is(sql('SELECT count(*) FROM wfe.runs WHERE finished_at IS NULL'), 0, 'every run finished');
is(join('; ', @refused), '', 'every report after the upgrade was accepted');
is(sql('SELECT count(*) FROM wfe.timers WHERE fired_at IS NULL'), 0, 'no timer is left pending');
# The retry fired after the upgrade: attempt 2's fence is the next
# generation after its 0.1.0 fence, (fence >> 32) + 1 = 1, so above it.
is( sql("SELECT attempt || ' ' || (fence >> 32) || ' ' || (fence > $retry_1[1]) FROM wfe.run_stages "
		  . "WHERE run_id = $r_retry AND stage = 'high-value'"),
	'2 1 true', 'retry: attempt 2, queued after the upgrade, has a fence of generation 1, above its 0.1.0 fence');

# How each run ended: its state and reason, then each stage's status and
# attempts, from its report.
sub summary
{
	my ($run) = @_;
	return sql(<<"SQL");
SELECT (r ->> 'state') || ': ' || coalesce(r ->> 'reason', '-') || ': '
       || string_agg((s ->> 'stage') || ' ' || (s ->> 'status') || ' ' || (s ->> 'attempts'), ', ' ORDER BY n)
  FROM wfe.report($run) AS r, jsonb_array_elements(r -> 'stages') WITH ORDINALITY AS x(s, n)
 GROUP BY r
SQL
}
my $mi_hit = 'cache-lookup completed 1, cache-route completed 1, render-thumbnail skipped 0, derive-fork skipped 0, '
  . 'semantic-analysis skipped 0, technical-metadata skipped 0, derive-join skipped 0, publish completed 1, '
  . 'finaliser.1 completed 1';
my $mi_miss = 'cache-lookup completed 1, cache-route completed 1, render-thumbnail completed 1, '
  . 'derive-fork completed 1, semantic-analysis completed 1, technical-metadata completed 1, '
  . 'derive-join completed 1, publish completed 1, finaliser.1 completed 1';
my %expected = (
	$r_done     => "completed: stage publish routed to completed: $mi_hit",
	$r_failed   => 'failed: stage standard routed to failed: route completed 1, high-value skipped 0, standard failed 1',
	$r_fork     => "completed: stage publish routed to completed: $mi_miss",
	$r_decision => "completed: stage publish routed to completed: $mi_miss",
	$r_cancel   => 'cancelled: cancelled before the upgrade: cache-lookup cancelled 1, cache-route skipped 0, '
	  . 'render-thumbnail skipped 0, derive-fork skipped 0, semantic-analysis skipped 0, technical-metadata skipped 0, '
	  . 'derive-join skipped 0, publish skipped 0, finaliser.1 completed 1',
	$r_queued   => "completed: stage publish routed to completed: $mi_hit",
	$r_retry    => 'completed: stage high-value routed to completed: route completed 1, high-value completed 2, standard skipped 0',
	$r_timer    => 'completed: stage standard routed to completed: route completed 1, high-value skipped 0, standard completed 1',
	$r_deadline => 'failed: run deadline passed: route skipped 0, high-value skipped 0, standard skipped 0',
	$r_idem     => 'completed: stage standard routed to completed: route completed 1, high-value skipped 0, standard completed 1',
	$r_tasks    => 'completed: every awaited task finished: verify_storage completed 1, fetch_configuration completed 1, '
	  . 'restore_session completed 1, hydrate_user_profile completed 1',
	$r_tasks2   => 'failed: critical task verify_storage failed: verify_storage failed 1, fetch_configuration skipped 0, '
	  . 'restore_session skipped 0, hydrate_user_profile skipped 0',
	$r_new      => "completed: stage publish routed to completed: $mi_hit",
	$r_v11      => 'failed: stage high-value routed to failed: route completed 1, high-value failed 2, standard skipped 0');
for my $run (sort { $a <=> $b } keys %expected)
{
	is(summary($run), $expected{$run}, "$label{$run}: how the run ended");
}

# What the reports said before the upgrade is still in them: every field of
# a finished run; of a run in flight, its identity and every stage that was
# final then, as it was.
for my $run (@before)
{
	is( sql(<<"SQL"),
WITH b AS (SELECT @{[lit($report_before{$run})]}::jsonb AS r),
     a AS (SELECT wfe.report($run) - ARRAY['replay_of', 'replays', 'redriven', 'schedule', 'scheduled_for', 'output', 'parent', 'children'] AS r)
SELECT coalesce(string_agg(x.what, ', '), 'intact') FROM (
    SELECT k AS what FROM b, a, jsonb_object_keys(b.r) AS k
     WHERE k NOT IN ('stages', 'outputs', 'state', 'intent', 'reason', 'finished_at', 'late_callbacks')
       AND b.r -> k IS DISTINCT FROM a.r -> k
    UNION ALL
    SELECT 'stage ' || (s ->> 'stage') FROM b, a, jsonb_array_elements(b.r -> 'stages') AS s
     WHERE s ->> 'status' IN ('completed', 'failed', 'timed_out', 'skipped', 'cancelled')
       AND NOT (a.r -> 'stages') \@> jsonb_build_array(s)
    UNION ALL
    SELECT 'output ' || o.key FROM b, a, jsonb_each(b.r -> 'outputs') AS o
     WHERE a.r -> 'outputs' -> o.key IS DISTINCT FROM o.value
    UNION ALL
    SELECT 'finished run' FROM b, a WHERE b.r ->> 'finished_at' IS NOT NULL AND b.r <> a.r) AS x
SQL
		'intact', "$label{$run}: its report before the upgrade is intact");
}
is( sql("SELECT jsonb_pretty(wfe.report($r_tasks) -> 'outputs')"),
	qq({\n    "restore_session.user_session": {\n        "user": "u-1",\n        "token": "t-1"\n    },\n)
	  . qq(    "fetch_configuration.app_config": {\n        "theme": "dark"\n    }\n}),
	'tasks: the outputs written before and after the upgrade');
is(sql("SELECT md5(string_agg(ROW($events_as{after})::text, E'\\n' ORDER BY event_id)) FROM wfe.events AS t"
	  . " WHERE event_id <= $last_event AND t.type <> 'callback.unauthenticated'"),
	sql("SELECT md5(\$q\$$rows_before{events}\$q\$)"),
	'the events of before the upgrade are unchanged');

#
# The background worker across the upgrade, in the database it serves.
#
sql("CREATE EXTENSION wfe VERSION '$from'", 'postgres');
ok($node->poll_query_until('postgres', 'SELECT pid IS NOT NULL AND rounds > 0 FROM wfe.worker_status()'),
	"worker: the background worker serves the $from database");
sql(<<'SQL', 'postgres');
SELECT wfe.register_worker('upg.step@1', 'upg-bgw');
SELECT wfe.create_definition($y$
name: upg-bgw
version: "1.0.0"
entry: step
stages:
  - name: step
    type: worker
    queue: upg-bgw
    worker: upg.step@1
    retry: {max_attempts: 2, initial_ms: 200, multiplier: 1, max_ms: 200, jitter: none}
    on_success: completed
    on_failure: failed
$y$);
SELECT wfe.approve('upg-bgw', '1.0.0');
SELECT wfe.activate('upg-bgw', '1.0.0');
SQL
my $pid = sql('SELECT pid FROM wfe.worker_status()', 'postgres');
my $b1 = sql("SELECT run_id FROM wfe.submit('upg-bgw', '{}', NULL, "
	  . "jsonb_build_object('not_before', now() + interval '1 second'))", 'postgres');
sql("ALTER EXTENSION wfe UPDATE TO '$to'", 'postgres');
my $rounds = sql('SELECT rounds FROM wfe.worker_status()', 'postgres');
ok( $node->poll_query_until(
		'postgres', "SELECT state = 'queued' FROM wfe.run_stages WHERE run_id = $b1 AND stage = 'step'"),
	'worker: a delayed start submitted before the update starts on its own');
my ($b_run, $b_attempt, $b_fence) =
  split /\|/, sql("SELECT run_id, attempt, fence FROM wfe.claim_task('upg-bgw', 'w-bgw')", 'postgres');
is(sql("SELECT wfe.fail_task($b1, 'step', $b_attempt, $b_fence, '{}', true)", 'postgres'),
	'accepted', 'worker: attempt 1 fails, a retry is scheduled');
ok( $node->poll_query_until(
		'postgres',
		"SELECT state = 'queued' AND attempt = 2 FROM wfe.run_stages WHERE run_id = $b1 AND stage = 'step'"),
	'worker: the retry timer fires after the update');
($b_run, $b_attempt, $b_fence) =
  split /\|/, sql("SELECT run_id, attempt, fence FROM wfe.claim_task('upg-bgw', 'w-bgw')", 'postgres');
is(sql("SELECT wfe.complete_task($b1, 'step', $b_attempt, $b_fence)", 'postgres'), 'accepted', 'worker: attempt 2 completes');
is(sql("SELECT state || ' ' || engine_version FROM wfe.runs WHERE run_id = $b1", 'postgres'),
	"completed $from", 'worker: the run completed');
is( sql("SELECT (pid = $pid)::text || ' ' || (rounds > $rounds)::text FROM wfe.worker_status()", 'postgres'),
	'true true', 'worker: the same worker process, still going round');

$node->stop;
done_testing();
