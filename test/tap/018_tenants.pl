# Tenants that cannot see each other (docs/operations.md "Tenants"): two
# tenants, A and B, each with a submitter, a reader, an operator and a
# worker (its own queue).  Through every public function and table, B sees
# and changes 0 rows of A, cannot tell whether a run or key of A exists
# (its answers for A's run are exactly those for a run that does not
# exist), and is never blocked by A's keys.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use WfeNode;

my $node = WfeNode::node('wfe_tenants');
sub sql { return $node->safe_psql('postgres', $_[0]); }

# as(ROLE, SQL): (SQLSTATE or '', stdout, the error's message)
sub as
{
	my ($role, $q) = @_;
	my ($out, $err) = ('', '');
	$node->psql('postgres', "\\set VERBOSITY verbose\nSET ROLE $role;\n$q", stdout => \$out, stderr => \$err,
		on_error_stop => 1);
	my ($state) = $err =~ /ERROR:\s+([0-9A-Z]{5}):/;
	my ($msg) = $err =~ /ERROR:\s+[0-9A-Z]{5}:\s+(.*)/;
	return ($state // '', $out, $msg // '', $err);
}

my @kinds = qw(operator reader submitter worker);
WfeNode::tenant_logins($node, [qw(A B)], @kinds);
WfeNode::tenant_flows($node, [qw(A B)],
	"    retry: {max_attempts: 3, initial_ms: 60000, multiplier: 1, max_ms: 60000, jitter: none}\n");
my ($s, $o) = as('submitter_A', 'SELECT wfe.my_tenants()');
is($o, '{A}', "my_tenants: A's submitter acts for A");
($s, $o) = as('reader_B', 'SELECT wfe.my_tenants()');
is($o, '{B}', "my_tenants: B's reader acts for B");
is(sql('SELECT wfe.my_tenants() IS NULL'), 't', 'my_tenants: a superuser acts for every tenant');

# A's run: submitted, claimed (so it has events, a timer, an output of sorts)
my ($st, $ra) = as('submitter_A', q{SELECT run_id FROM wfe.submit('flow-a', '{"secret": "a-only"}', 'order-1001', '{"tenant": "A"}')});
like($ra, qr/^\d+$/, "A's submitter submits for A");
my ($task) = (as('worker_A', q{SELECT attempt || ' ' || fence FROM wfe.claim_task('qa', 'wa')}))[1];
my ($att, $fence) = split / /, $task;
($st, $o) = as('worker_A', "SELECT wfe.fail_task($ra, 'work', $att, $fence, '{\"code\": \"try.again\"}')");
is($o, 'accepted', "A's worker fails the attempt: a retry timer is pending");
my $ra_fence = sql("SELECT fence FROM wfe.run_stages WHERE run_id = $ra");
my $snapshot = "SELECT (SELECT string_agg(r::text, ',') FROM wfe.runs AS r WHERE run_id = $ra) || '|'"
  . " || (SELECT string_agg(st::text, ',') FROM wfe.run_stages AS st WHERE run_id = $ra) || '|'"
  . " || (SELECT count(*) FROM wfe.events WHERE run_id = $ra AND type NOT LIKE 'callback.%')"
  . " || '|' || (SELECT string_agg(t::text, ',') FROM wfe.timers AS t WHERE run_id = $ra)";
my $before = sql($snapshot);
my $missing = 987654321;

# B acts for its own tenant only
($st, undef, my $msg) = as('submitter_B', q{SELECT wfe.submit('flow-a', '{}', 'x', '{"tenant": "A"}')});
is($st, '42501', "B's submitter cannot submit for A");
like($msg, qr/does not act for tenant "A"/, '... and is told why (it named A itself)');
($st) = as('submitter_B', q{SELECT wfe.submit('flow-b', '{}')});
is($st, '42501', 'the default tenant is no exception: B\'s submitter is not mapped to it');

# A's key does not block B, and B's answer does not reveal it
my ($st1, $rb) = as('submitter_B', q{SELECT run_id FROM wfe.submit('flow-b', '{"secret": "b"}', 'order-1001', '{"tenant": "B"}')});
is($st1, '', "A's idempotency key order-1001 does not block B");
isnt($rb, $ra, '... B gets a run of its own');
($st1, my $rb2) = as('submitter_B', q{SELECT run_id FROM wfe.submit('flow-b', '{"secret": "b"}', 'order-1001', '{"tenant": "B"}')});
is($rb2, $rb, "... and B's key names B's run");
my @conflict = as('submitter_B', q{SELECT run_id FROM wfe.submit('flow-b', '{"secret": "a-only"}', 'order-1001', '{"tenant": "B"}')});
like($conflict[3], qr/DETAIL:\s+Run $rb was submitted with this key/, "a conflicting reuse of B's key names B's own run");
unlike($conflict[3], qr/\b$ra\b/, "... and never A's");

# the functions that take a run: A's run answers as a run that does not exist
for my $r (map { "${_}_B" } @kinds)
{
	for my $call (
		[ 'report', 'SELECT wfe.report(%s)' ],
		[ 'run_timeline', 'SELECT count(*) FROM wfe.run_timeline(%s)' ],
		[ 'cancel_run', q{SELECT wfe.cancel_run(%s, 'by B')} ])
	{
		my ($name, $sql) = @$call;
		my @a = as($r, sprintf($sql, $ra));
		my @m = as($r, sprintf($sql, $missing));
		$a[2] =~ s/$ra/N/g;
		$m[2] =~ s/$missing/N/g;
		is("$a[0]|$a[1]|$a[2]", "$m[0]|$m[1]|$m[2]", "$r: $name of A's run answers as for a run that does not exist ($a[0]$a[1])");
	}
}

# B's worker: A's queue is refused as a queue (no run named); A's run is unknown
($st, undef, $msg) = as('worker_B', q{SELECT * FROM wfe.claim_task('qa', 'wb')});
is($st, '42501', "B's worker cannot claim from A's queue");
for my $call (
	[ 'complete_task', "SELECT wfe.complete_task(%s, 'work', $att, %s, '{}')" ],
	[ 'fail_task', "SELECT wfe.fail_task(%s, 'work', $att, %s, '{}')" ],
	[ 'heartbeat', "SELECT wfe.heartbeat(%s, 'work', $att, %s)" ],
	[ 'accept_task', "SELECT wfe.accept_task(%s, 'work', $att, %s, 'wb')" ],
	[ 'ack_cancel', "SELECT wfe.ack_cancel(%s, 'work', $att, %s)" ],
	[ 'complete_tasks', qq{SELECT outcome FROM wfe.complete_tasks(jsonb_build_array(jsonb_build_object('run_id', %s, 'stage', 'work', 'attempt', $att, 'fence', %s)))} ])
{
	my ($name, $sql) = @$call;
	my @a = as('worker_B', sprintf($sql, $ra, $ra_fence));
	my @m = as('worker_B', sprintf($sql, $missing, $ra_fence));
	is("$a[0]|$a[1]", "$m[0]|$m[1]", "worker_B: $name for A's run answers as for a run that does not exist ($a[0]$a[1])");
}
is(sql($snapshot), $before, "nothing B did changed A's run");

# the tables: B's reader and operator see B's rows and none of A's; A's see A's
# (wfe.payloads is readable by no role at all, and under the same policy)
my @tables = qw(runs run_stages events outputs timers outbox dead_letters);
for my $r (qw(reader_B operator_B reader_A))
{
	my $own = $r =~ /_A$/ ? 'A' : 'B';
	my $other = $own eq 'A' ? 'B' : 'A';
	my $q = join(' || \' \' || ', map { "(SELECT count(*) FILTER (WHERE tenant <> '$own') FROM wfe.$_)" } @tables);
	my ($sst, $seen) = as($r, "SELECT $q");
	is($seen, join(' ', ('0') x @tables), "$r sees no row of another tenant in " . join(', ', @tables));
	my ($sst2, $runs) = as($r, 'SELECT count(*) FROM wfe.runs');
	ok($runs > 0, "$r sees its own tenant's runs ($runs)");
	($sst2, my $none) = as($r, "SELECT count(*) FROM wfe.runs WHERE context ->> 'secret' = 'a-only' AND tenant = '$other'");
	is($none, '0', "$r cannot find the other tenant's run by its context");
}
# the dashboards are security_invoker views: they read through the same policies
sql(q{SELECT wfe.configure_tenant('A', 5, 5), wfe.configure_tenant('B', 5, 5)});
for my $r (qw(reader_B operator_B))
{
	my ($sst, $seen) = as($r, q{SELECT (SELECT count(*) FROM wfe.tenant_limits WHERE tenant <> 'B') || ' '
	  || (SELECT count(*) FROM wfe.dashboard_tenants WHERE tenant <> 'B') || ' '
	  || (SELECT count(*) FROM wfe.dashboard_stuck WHERE run_id = } . $ra . q{) || ' '
	  || (SELECT count(*) FROM wfe.idempotency WHERE tenant <> 'B')});
	is($seen, '0 0 0 0', "$r sees nothing of A in tenant_limits, dashboard_tenants, dashboard_stuck, idempotency");
}
($st) = as('reader_B', 'SELECT count(*) FROM wfe.tenant_members');
is($st, '42501', "the membership map is wfe_admin's to read");

# a superuser (and wfe_admin) sees both
is(sql("SELECT count(DISTINCT tenant) FROM wfe.runs"), '2', 'a superuser sees both tenants');
sql('CREATE ROLE admin_X LOGIN IN ROLE wfe_admin');
($st, $o) = as('admin_X', 'SELECT wfe.my_tenants() IS NULL');
is($o, 't', 'wfe_admin acts for every tenant');

# taking a member out takes its rights away at once
sql(q{SELECT wfe.remove_tenant_member('reader_A', 'A')});
($st, $o) = as('reader_A', 'SELECT count(*) FROM wfe.runs');
is($o, '0', 'after remove_tenant_member the reader sees nothing');
($st) = as('reader_A', "SELECT wfe.report($ra)");
is($st, '42704', '... and its report of the run is 42704');

done_testing();
