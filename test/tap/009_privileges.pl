# The privilege matrix (docs/operations.md "Security model", "Privilege
# matrix") is what a fresh CREATE EXTENSION wfe grants, and the calls
# themselves agree with it.
#
# On a private cluster with the extension: one login role per wfe group
# role (a member of it, nothing else) and one login role that is a member
# of none.  Then:
#
# - the doc: the three tables of the "Privilege matrix" subsection are parsed
#   out of docs/operations.md (found from this file's path).  Their columns
#   are the seven roles and "none"; a cell is ✓ or blank;
# - functions: every public function of schema wfe (a name not starting
#   with "_") has exactly one row, every row names a function that exists,
#   and has_function_privilege(login, function, 'EXECUTE') of each login
#   role is its cell.  A new function without a row fails the test; the
#   failure prints the rows the catalog has, ready to paste.  No login role
#   may execute an internal function (wfe._*);
# - tables and views: the same with has_any_column_privilege(..., 'SELECT')
#   (SELECT on the table or some of its columns); and the third table,
#   "column", lists every column withheld from a role that may select
#   others of its table, its cells has_column_privilege; no
#   login role may INSERT, UPDATE, DELETE or TRUNCATE any of them (but
#   wfe_admin INSERT, UPDATE and DELETE wfe.callback_keys), or use a
#   sequence, or CREATE in the schema;
# - the calls: as each login role (a connection of its own), one call the
#   matrix permits works and one it refuses raises 42501, and the refused
#   one changed nothing.  Among them: wfe_reader cannot submit or cancel, a
#   role with no membership cannot report, wfe_submitter cannot claim,
#   wfe_worker cannot register a worker, wfe_operator pauses and resumes a
#   queue (its mode and limit kept; a paused queue gives a granted worker
#   nothing) but cannot configure or grant it, and wfe_worker with no grant of the
#   queue gets 42501 from claim_task, and its task once wfe.grant_queue
#   granted the queue (and 42501 again after wfe.revoke_queue).
#
# Run it alone: WFE_TAP_ONLY='009_*' test/harness/run-tap.sh WORKDIR.
use strict;
use warnings;
use utf8;

use Cwd qw(abs_path);
use Encode qw(decode encode);
use File::Basename qw(dirname);
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use WfeNode;

my $CHECK = "\x{2713}";    # ✓
my @ROLES = qw(wfe_admin wfe_author wfe_approver wfe_submitter wfe_worker wfe_operator wfe_reader);
my @COLUMNS = (@ROLES, 'none');
my %LOGIN = map { $_ => ($_ eq 'none' ? 'tap_none' : "tap_" . substr($_, 4)) } @COLUMNS;

my $top = abs_path(dirname(__FILE__) . '/../..');
my $doc_path = "$top/docs/operations.md";

#
# The three tables of the "Privilege matrix" subsection.
#

# parse_matrix(TEXT): { function => { row => [cells], dup => [...] }, table => ... }
sub parse_matrix
{
	my ($text) = @_;
	my ($section) = $text =~ /^### Privilege matrix\n(.*?)(?=^##? |^### |\z)/ms;
	die "$doc_path has no \"### Privilege matrix\" subsection\n" unless defined $section;
	my (%tables, @block);
	for my $line (split(/\n/, $section, -1), "")
	{
		if ($line =~ /^\|/)
		{
			push @block, $line;
			next;
		}
		next unless @block;
		my @rows = map {
			my $l = $_;
			$l =~ s/^\|\s*//;
			$l =~ s/\s*\|\s*$//;
			[ map { s/^\s+|\s+$//gr } split /\s*\|\s*/, $l, -1 ]
		} @block;
		@block = ();
		my $header = shift @rows;
		shift @rows;    # |---|:-:|...
		my $kind = $header->[0];
		die "a table in the privilege matrix starts with \"$kind\", not function, table or column\n"
		  unless $kind eq 'function' || $kind eq 'table' || $kind eq 'column';
		my @cols = map { s/`//gr } @{$header}[ 1 .. $#$header ];
		die "the $kind table's columns are (@cols), not (@COLUMNS)\n"
		  unless "@cols" eq "@COLUMNS";
		my %t = (rows => {}, dup => [], bad => []);
		for my $r (@rows)
		{
			my ($name) = $r->[0] =~ /^`([^`]+)`$/;
			push(@{ $t{bad} }, $r->[0]), next unless defined $name;
			my @cells = @{$r}[ 1 .. $#$r ];
			push(@{ $t{bad} }, $name), next
			  if @cells != @COLUMNS || grep { $_ ne '' && $_ ne $CHECK } @cells;
			push @{ $t{dup} }, $name if exists $t{rows}{$name};
			$t{rows}{$name} = join('', map { $_ eq $CHECK ? 'x' : '.' } @cells);
		}
		$tables{$kind} = \%t;
	}
	die "the privilege matrix has no $_ table\n" for grep { !$tables{$_} } qw(function table column);
	return \%tables;
}

my $matrix = parse_matrix(decode('UTF-8', slurp_file($doc_path), Encode::FB_CROAK));

#
# A cluster with the extension and the login roles.
#
my $node = WfeNode::node('wfe_privileges');

my $logins = join("\n",
	map { $_ eq 'none' ? "CREATE ROLE $LOGIN{$_} LOGIN;" : "CREATE ROLE $LOGIN{$_} LOGIN IN ROLE $_;" }
	  @COLUMNS);
$node->safe_psql('postgres', $logins);
# every login acts for the default tenant (operations.md "Tenants"): this
# test is about privileges, 018_tenants.pl about tenants
$node->safe_psql('postgres', join("\n", map { "SELECT wfe.add_tenant_member('$LOGIN{$_}', 'default');" } @COLUMNS));

# a VALUES list of the login roles in column order: (ord, login)
my $login_values = join(', ', map { "($_, '$LOGIN{$COLUMNS[$_]}')" } 0 .. $#COLUMNS);

# catalog_rows(KIND): { name => 'x..x...' } from has_*_privilege of the logins
sub catalog_rows
{
	my ($kind) = @_;
	my $sql =
	  $kind eq 'function'
	  ? qq{SELECT p.oid::regprocedure::text,
	              string_agg(CASE WHEN has_function_privilege(l.login, p.oid, 'EXECUTE') THEN 'x' ELSE '.' END, '' ORDER BY l.ord)
	         FROM pg_proc AS p CROSS JOIN (VALUES $login_values) AS l(ord, login)
	        WHERE p.pronamespace = 'wfe'::regnamespace AND p.proname !~ '^_'
	        GROUP BY p.oid ORDER BY 1}
	  : $kind eq 'table'
	  # SELECT on the table, or on some of its columns (the column table
	  # then names the columns withheld)
	  ? qq{SELECT c.oid::regclass::text,
	              string_agg(CASE WHEN has_any_column_privilege(l.login, c.oid, 'SELECT') THEN 'x' ELSE '.' END, '' ORDER BY l.ord)
	         FROM pg_class AS c CROSS JOIN (VALUES $login_values) AS l(ord, login)
	        WHERE c.relnamespace = 'wfe'::regnamespace AND c.relkind IN ('r', 'p', 'v', 'm', 'f')
	          AND c.relname !~ '^events_p[0-9]{8}\$'    -- day partitions: data, read through wfe.events
	        GROUP BY c.oid ORDER BY 1}
	  # every column withheld from a role that may select others of its table
	  : qq{SELECT c.oid::regclass::text || '.' || quote_ident(a.attname),
	              string_agg(CASE WHEN has_column_privilege(l.login, c.oid, a.attnum, 'SELECT') THEN 'x' ELSE '.' END, '' ORDER BY l.ord)
	         FROM pg_class AS c
	         JOIN pg_attribute AS a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
	        CROSS JOIN (VALUES $login_values) AS l(ord, login)
	        WHERE c.relnamespace = 'wfe'::regnamespace AND c.relkind IN ('r', 'p', 'v', 'm', 'f')
	          AND c.relname !~ '^events_p[0-9]{8}\$'
	        GROUP BY c.oid, a.attname
	       HAVING bool_or(has_any_column_privilege(l.login, c.oid, 'SELECT')
	                      AND NOT has_column_privilege(l.login, c.oid, a.attnum, 'SELECT'))
	        ORDER BY 1};
	# search_path without wfe, so that every name comes out qualified
	my $out = $node->safe_psql('postgres', "SET search_path = pg_catalog;\n$sql");
	return { map { split /\|/ } split /\n/, $out };
}

# as_doc_row(NAME, MARKS): the markdown row of a catalog row
sub as_doc_row
{
	my ($name, $marks) = @_;
	return "| `$name` |" . join('|', map { $_ eq 'x' ? " $CHECK " : ' ' } split //, $marks) . "|";
}

# who(MARKS): the columns marked, e.g. "wfe_operator wfe_reader", or "nobody"
sub who
{
	my @m = split //, $_[0];
	my @cols = map { $COLUMNS[$_] } grep { $m[$_] eq 'x' } 0 .. $#m;
	return @cols ? "@cols" : 'nobody';
}

# check_kind(KIND, WHAT): the doc's rows of KIND against the catalog's
sub check_kind
{
	my ($kind, $what) = @_;
	my $doc = $matrix->{$kind};
	my $cat = catalog_rows($kind);
	ok(scalar(keys %$cat) > 0, "the catalog has ${kind}s in schema wfe");
	is_deeply($doc->{dup}, [], "no $kind has two rows in the privilege matrix");
	is_deeply($doc->{bad}, [], "every $kind row is a `name` and one check mark or blank per column");
	my @missing = grep { !exists $doc->{rows}{$_} } sort keys %$cat;
	my @extra = grep { !exists $cat->{$_} } sort keys %{ $doc->{rows} };
	is_deeply(\@missing, [], "every $kind of schema wfe has a row in the privilege matrix");
	is_deeply(\@extra, [], "every $kind row of the privilege matrix exists in schema wfe");
	my $differ = 0;
	for my $name (sort keys %$cat)
	{
		next unless exists $doc->{rows}{$name};
		is(who($cat->{$name}), who($doc->{rows}{$name}),
			"$what on $name: the catalog's roles (got) are the privilege matrix's (expected)")
		  or $differ++;
	}
	if (@missing || @extra || $differ)
	{
		diag(encode('UTF-8', "the $kind rows the catalog has, for docs/operations.md:\n"
			  . join("\n", map { as_doc_row($_, $cat->{$_}) } sort keys %$cat)));
	}
}

check_kind('function', 'EXECUTE');
check_kind('table', 'SELECT');
check_kind('column', 'SELECT');

my $logins_in = join(', ', map { "'$LOGIN{$_}'" } @COLUMNS);
is( $node->safe_psql(
		'postgres', qq{SET search_path = pg_catalog;
SELECT string_agg(l.login || ' ' || p.oid::regprocedure::text, ', ' ORDER BY 1)
  FROM pg_proc AS p CROSS JOIN (VALUES $login_values) AS l(ord, login)
 WHERE p.pronamespace = 'wfe'::regnamespace AND p.proname ~ '^_'
   AND has_function_privilege(l.login, p.oid, 'EXECUTE')}),
	'',
	'no login role may execute an internal function (wfe._*)');
is( $node->safe_psql(
		'postgres', qq{SET search_path = pg_catalog;
SELECT string_agg(l.login || ' ' || pr.p || ' ' || c.oid::regclass::text, ', ' ORDER BY 1)
  FROM pg_class AS c CROSS JOIN (VALUES $login_values) AS l(ord, login)
       CROSS JOIN (VALUES ('INSERT'), ('UPDATE'), ('DELETE'), ('TRUNCATE'), ('REFERENCES'), ('TRIGGER')) AS pr(p)
 WHERE c.relnamespace = 'wfe'::regnamespace AND c.relkind IN ('r', 'p', 'v', 'm', 'f')
   AND has_table_privilege(l.login, c.oid, pr.p)
   AND NOT (l.login = 'tap_admin' AND c.oid = 'wfe.callback_keys'::regclass AND pr.p IN ('INSERT', 'UPDATE', 'DELETE'))}),
	'',
	'no login role may write (or reference, or trigger on) a table of schema wfe, but wfe_admin the callback keys');
is( $node->safe_psql(
		'postgres', qq{SELECT string_agg(pr.p, ' ' ORDER BY pr.p)
  FROM (VALUES ('INSERT'), ('UPDATE'), ('DELETE'), ('TRUNCATE')) AS pr(p)
 WHERE has_table_privilege('tap_admin', 'wfe.callback_keys', pr.p)}),
	'DELETE INSERT UPDATE',
	'wfe_admin may insert, update and delete wfe.callback_keys (not truncate)');
is( $node->safe_psql(
		'postgres', qq{SET search_path = pg_catalog;
SELECT string_agg(l.login || ' ' || c.oid::regclass::text, ', ' ORDER BY 1)
  FROM pg_class AS c CROSS JOIN (VALUES $login_values) AS l(ord, login)
 WHERE c.relnamespace = 'wfe'::regnamespace AND c.relkind = 'S'
   AND (has_sequence_privilege(l.login, c.oid, 'USAGE') OR has_sequence_privilege(l.login, c.oid, 'UPDATE'))}),
	'',
	'no login role may use a sequence of schema wfe');
is( $node->safe_psql(
		'postgres', qq{SELECT string_agg(l.login || ':' || has_schema_privilege(l.login, 'wfe', 'USAGE')
                                 || ':' || has_schema_privilege(l.login, 'wfe', 'CREATE'), ' ' ORDER BY l.ord)
  FROM (VALUES $login_values) AS l(ord, login)}),
	join(' ', map { "$LOGIN{$_}:" . ($_ eq 'none' ? 'false' : 'true') . ':false' } @COLUMNS),
	'the seven roles have USAGE on schema wfe, the role with no membership not; nobody may CREATE in it');

#
# The calls, each as a login role on a connection of its own.
#

# as_role(ROLE, SQL): (exit status, stdout, stderr) of psql connected as ROLE
sub as_role
{
	my ($role, $sql) = @_;
	my ($out, $err) = ('', '');
	my $rc = $node->psql(
		'postgres', "\\set VERBOSITY verbose\n$sql",
		stdout => \$out,
		stderr => \$err,
		on_error_stop => 1,
		connstr => $node->connstr('postgres') . " user=$role",
		timeout => $PostgreSQL::Test::Utils::timeout_default);
	return ($rc, $out, $err);
}

# permitted(COLUMN, SQL, EXPECTED, NAME): the call works and returns EXPECTED
sub permitted
{
	my ($col, $sql, $expected, $name) = @_;
	my ($rc, $out, $err) = as_role($LOGIN{$col}, $sql);
	is($rc, 0, "$col may $name") or diag($err);
	is($out, $expected, "$col: $name returns what it should");
	return $out;
}

# refused(COLUMN, SQL, MESSAGE, NAME): the call raises 42501 with MESSAGE
sub refused
{
	my ($col, $sql, $message, $name) = @_;
	my ($rc, $out, $err) = as_role($LOGIN{$col}, $sql);
	ok($rc != 0 && $err =~ /\bERROR:  42501: \Q$message\E/, "$col may not $name: 42501 $message")
	  or diag("exit status $rc, stdout:\n$out\nstderr:\n$err");
}

# state(SQL): what the superuser sees, to show that a refusal changed nothing
sub state
{
	return $node->safe_psql('postgres', $_[0]);
}

my $flow = q{
name: tap-priv-flow
version: "1.0.0"
entry: a
stages:
  - { name: a, type: worker, queue: tap-priv-jobs, worker: tap-priv.step@1, input: { v: "${context.v}" }, on_success: completed, on_failure: failed }
};
my $contracts = q{SELECT string_agg(ref, ',' ORDER BY ref) FROM wfe.contracts};

# wfe_admin registers a worker contract; it may not submit, nor claim.
permitted('wfe_admin', q{SELECT wfe.register_worker('tap-priv.step@1', 'tap-priv-jobs')},
	'', 'register a worker contract');
my $contracts_before = state($contracts);
like($contracts_before, qr/tap-priv\.step\@1/, 'the contract is registered');
refused('wfe_admin', q{SELECT * FROM wfe.submit('tap-priv-flow', '{"v": 1}')},
	'permission denied for function submit', 'submit');
refused('wfe_admin', q{SELECT * FROM wfe.claim_task('tap-priv-jobs', 'admin-1')},
	'permission denied for function claim_task', 'claim a task');

# wfe_worker may not register a worker contract; the registry is unchanged.
refused('wfe_worker', q{SELECT wfe.register_worker('tap-priv.evil@1', 'tap-priv-jobs')},
	'permission denied for function register_worker', 'register a worker contract');
is(state($contracts), $contracts_before, 'the refused registration added no contract');

# wfe_author creates the definition; it may not approve it.
permitted('wfe_author', "SELECT wfe.create_definition(\$y\$$flow\$y\$) LIKE 'sha256:%'", 't',
	'create a definition (its digest is returned)');
my $def_state = q{SELECT string_agg(state, ',') FROM wfe.definitions WHERE workflow = 'tap-priv-flow'};
refused('wfe_author', q{SELECT wfe.approve('tap-priv-flow', '1.0.0')},
	'permission denied for function approve', 'approve');
is(state($def_state), 'draft', 'the refused approval left the definition a draft');

# wfe_approver approves and activates; it may not create a definition.
my $defs = q{SELECT count(*) FROM wfe.definitions};
my $defs_before = state($defs);
refused('wfe_approver', "SELECT wfe.create_definition(\$y\$"
	  . ($flow =~ s/1\.0\.0/1.0.1/r) . "\$y\$)",
	'permission denied for function create_definition', 'create a definition');
is(state($defs), $defs_before, 'the refused create_definition stored nothing');
permitted('wfe_approver',
	q{SELECT wfe.approve('tap-priv-flow', '1.0.0'); SELECT wfe.activate('tap-priv-flow', '1.0.0');},
	"\n", 'approve and activate');
is(state($def_state), 'active', 'the definition is active');

# wfe_submitter submits; it may not claim the task.
my $run_id;
{
	my ($rc, $out, $err) = as_role($LOGIN{wfe_submitter},
		q{SELECT run_id FROM wfe.submit('tap-priv-flow', '{"v": 1}') WHERE accepted});
	is($rc, 0, 'wfe_submitter may submit') or diag($err);
	like($out, qr/^\d+$/, 'wfe_submitter: submit returns a run id');
	$run_id = $out;
}
my $stage_state = "SELECT state || ' ' || coalesce(claimed_by, '-') FROM wfe.run_stages WHERE run_id = $run_id AND stage = 'a'";
is(state($stage_state), 'queued -', 'the task is queued');
refused('wfe_submitter', q{SELECT * FROM wfe.claim_task('tap-priv-jobs', 'submitter-1')},
	'permission denied for function claim_task', 'claim a task');
is(state($stage_state), 'queued -', 'the refused claim left the task queued and unclaimed');

# wfe_reader reads the report and the tables; it may not submit or cancel.
my $runs = q{SELECT count(*) || ' ' || string_agg(state, ',' ORDER BY run_id) FROM wfe.runs};
my $runs_before = state($runs);
permitted('wfe_reader', "SELECT wfe.report($run_id)->>'state'", 'running', 'read a report');
permitted('wfe_reader', "SELECT count(*) FROM wfe.runs WHERE run_id = $run_id", '1', 'read wfe.runs');
refused('wfe_reader', q{SELECT * FROM wfe.submit('tap-priv-flow', '{"v": 2}')},
	'permission denied for function submit', 'submit');
refused('wfe_reader', "SELECT wfe.cancel_run($run_id, 'reader was here')",
	'permission denied for function cancel_run', 'cancel a run');
is(state($runs), $runs_before, 'the refused submit and cancel changed no run');

# A login role with no wfe membership can do nothing, not even read.
refused('none', "SELECT wfe.report($run_id)", 'permission denied for schema wfe', 'read a report');
refused('none', q{SELECT count(*) FROM wfe.runs}, 'permission denied for schema wfe', 'read wfe.runs');
refused('none', q{SELECT * FROM wfe.submit('tap-priv-flow', '{"v": 3}')},
	'permission denied for schema wfe', 'submit');
is(state($runs), $runs_before, 'the role with no membership changed no run');

# wfe_operator pauses and resumes the queue; it may not configure it, nor grant it.
my $queue = q{SELECT coalesce((SELECT delivery || ' ' || coalesce(max_in_flight::text, '-') || ' ' || paused
                                 FROM wfe.queues WHERE queue = 'tap-priv-jobs'), 'unconfigured')};
permitted('wfe_operator', q{SELECT wfe.pause_queue('tap-priv-jobs')}, '', 'pause a queue');
is(state($queue), 'poll - true', 'the queue is paused, a poll queue');
refused('wfe_operator', q{SELECT wfe.configure_queue('tap-priv-jobs', 'broker', 5, false)},
	'permission denied for function configure_queue', 'configure a queue');
is(state($queue), 'poll - true', 'the refused configure_queue changed nothing');
permitted('wfe_operator', q{SELECT wfe.resume_queue('tap-priv-jobs')}, '', 'resume a queue');
is(state($queue), 'poll - false', 'the queue is resumed');
# Pausing keeps the mode and the limit wfe_admin set.
my $other = $queue =~ s/tap-priv-jobs/tap-priv-other/r;
permitted('wfe_admin', q{SELECT wfe.configure_queue('tap-priv-other', 'broker', 5, false)}, '',
	'configure a queue');
permitted('wfe_operator', q{SELECT wfe.pause_queue('tap-priv-other')}, '', 'pause a broker queue');
is(state($other), 'broker 5 true', 'the paused queue is still a broker queue with its limit');
permitted('wfe_operator', q{SELECT wfe.resume_queue('tap-priv-other')}, '', 'resume a broker queue');
is(state($other), 'broker 5 false', 'the resumed queue is still a broker queue with its limit');
my $grants = q{SELECT coalesce(string_agg(queue || ' ' || role::text, ',' ORDER BY queue, role::text), 'none') FROM wfe.queue_grants};
refused('wfe_operator', q{SELECT wfe.grant_queue('tap_operator', 'tap-priv-jobs')},
	'permission denied for function grant_queue', 'grant a queue');
is(state($grants), 'none', 'the refused grant_queue granted nothing');

# wfe_worker without a grant of the queue: EXECUTE passes, the queue check refuses.
my $claim = q{SELECT run_id || ' ' || stage || ' ' || attempt || ' ' || fence FROM wfe.claim_task('tap-priv-jobs', 'worker-1')};
refused('wfe_worker', $claim, 'role "tap_worker" may not claim from queue "tap-priv-jobs"',
	'claim from a queue not granted to it');
is(state($stage_state), 'queued -', 'the refused claim left the task queued and unclaimed');

# wfe_admin grants the queue to the worker's login; the claim gets the task.
permitted('wfe_admin', q{SELECT wfe.grant_queue('tap_worker', 'tap-priv-jobs')}, '', 'grant a queue');
is(state($grants), 'tap-priv-jobs tap_worker', 'the queue is granted to tap_worker');
# A paused queue gives its granted worker nothing; resumed, the task.
permitted('wfe_operator', q{SELECT wfe.pause_queue('tap-priv-jobs')}, '', 'pause the queue again');
permitted('wfe_worker', $claim, '', 'claim from the paused queue (nothing)');
is(state($stage_state), 'queued -', 'the paused queue kept the task queued');
permitted('wfe_operator', q{SELECT wfe.resume_queue('tap-priv-jobs')}, '', 'resume the queue again');
my ($rc, $task, $err) = as_role($LOGIN{wfe_worker}, $claim);
is($rc, 0, 'wfe_worker may claim from a queue granted to it') or diag($err);
like($task, qr/^$run_id a 1 \d+$/, 'the claim returns the submitted run\'s task');
is(state($stage_state), 'running worker-1', 'the task is claimed by worker-1');
my (undef, undef, undef, $fence) = split / /, $task;
permitted('wfe_worker', "SELECT wfe.complete_task($run_id, 'a', 1, $fence, '{\"done\": true}')",
	'accepted', 'complete its task');
is(state("SELECT state FROM wfe.runs WHERE run_id = $run_id"), 'completed', 'the run completed');

# wfe_admin revokes the grant; the worker is refused again.
permitted('wfe_admin', q{SELECT wfe.revoke_queue('tap_worker', 'tap-priv-jobs')}, '', 'revoke a queue');
is(state($grants), 'none', 'the grant is gone');
refused('wfe_worker', $claim, 'role "tap_worker" may not claim from queue "tap-priv-jobs"',
	'claim from the queue once it is revoked');

$node->stop;
done_testing();
