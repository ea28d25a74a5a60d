# A fair queue's walks stay walks of run_stages_fair when the statistics
# see one tenant only (docs/benchmarks.md "The fair claim's tail").
#
# bench/fairness's case: tenant big's backlog is all the stage table holds
# when ANALYZE runs, so to the planner every row is big's.  A claim (and a
# broker queue's release) of one tenant's tasks that wrote the tenant as an
# equality then walked run_stages_ready, filtering on the tenant: another
# tenant's one task was found after reading all of big's (70 ms and 3,000
# buffers a claim beside 100,000).  The walks now name the tenant as a range
# (WFE_SQL_FAIR_TENANT, src/pg/wfe.h), whose order only run_stages_fair gives.
#
# A fair poll queue with BACKLOG of big's runs and a fair broker queue
# (max_in_flight 1) with HELD of big's held, VACUUM ANALYZE, then one run of
# tenant small on each.  A claim, and a release after the limit is raised
# by one, each in a session with auto_explain (nested statements, JSON,
# plans sent back as NOTICEs): each takes small's task (equal passes: the
# newer task goes first), and no plan walks run_stages_ready filtering on
# the tenant; the fair walk reads run_stages_fair.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use WfeNode;

my $BACKLOG = 20_000;   # big's queued runs on the fair poll queue
my $HELD    = 2_000;    # big's runs on the fair broker queue (one dispatched, the rest held)
# big's name is long: run_stages_fair's entries grow with it, run_stages_ready's
# do not, so at this size the old equality already walked run_stages_ready
# (with a three-letter name it took 100,000 tasks, bench/fairness's backlog)
my $BIG = 'big-tenant-whose-name-is-long-enough-to-widen-each-index-entry';

my $node = WfeNode::node('wfe_fair_one_tenant');

# a one-stage workflow on each queue, of the same name
for my $q ('ot-fair', 'ot-fb')
{
	$node->safe_psql('postgres', "SELECT wfe.register_worker('$q\@1', '$q')");
	WfeNode::workflow($node, "name: $q\nversion: \"1.0.0\"\nentry: a\nstages:\n"
		  . "  - { name: a, type: worker, queue: $q, worker: $q\@1, on_success: completed, on_failure: failed }\n");
}
$node->safe_psql(
	'postgres', q{
SELECT wfe.configure_queue('ot-fair', fairness => 'tenant');
SELECT wfe.configure_queue('ot-fb', 'broker', 1, fairness => 'tenant');
});
is( $node->safe_psql(
		'postgres',
		"SELECT count(*) FROM generate_series(1, $BACKLOG) AS i, "
		  . "LATERAL wfe.submit('ot-fair', jsonb_build_object('v', i), NULL, '{\"tenant\": \"$BIG\"}') AS s WHERE s.accepted"),
	$BACKLOG, "big's backlog on the fair queue");
is( $node->safe_psql(
		'postgres',
		"SELECT count(*) FROM generate_series(1, $HELD) AS i, "
		  . "LATERAL wfe.submit('ot-fb', jsonb_build_object('v', i), NULL, '{\"tenant\": \"$BIG\"}') AS s WHERE s.accepted"),
	$HELD, "big's held runs on the fair broker queue");
$node->safe_psql('postgres', 'VACUUM ANALYZE wfe.run_stages');
is( $node->safe_psql(
		'postgres', "SELECT most_common_vals::text || ' ' || most_common_freqs::text FROM pg_stats
		  WHERE schemaname = 'wfe' AND tablename = 'run_stages' AND attname = 'tenant'"),
	"{$BIG} {1}", 'the statistics see one tenant');
$node->safe_psql(
	'postgres', q{
SELECT wfe.submit('ot-fair', '{}', NULL, '{"tenant": "small"}');
SELECT wfe.submit('ot-fb', '{}', NULL, '{"tenant": "small"}');
});

# how a plan tree reads wfe.run_stages: each scan as its index's name, or
# its node type without one, marked when it filters on the tenant
sub walks
{
	my ($n) = @_;
	my @w;
	push @w, ($n->{'Index Name'} // $n->{'Node Type'}) . (($n->{'Filter'} // '') =~ /tenant/ ? ' (filter on the tenant)' : '')
	  if ($n->{'Relation Name'} // '') eq 'run_stages' && $n->{'Node Type'} ne 'ModifyTable';
	push @w, walks($_) for @{ $n->{'Plans'} // [] };
	return @w;
}

# run SQL after auto_explain's set-up: (stdout, the fair walks' indexes, every walk on the tenant filter)
sub explained
{
	my ($sql, $what) = @_;
	my ($out, $err) = ('', '');
	my $status = $node->psql(
		'postgres', $WfeNode::AUTO_EXPLAIN . $sql,
		stdout => \$out,
		stderr => \$err,
		on_error_stop => 1);
	die "$what failed (psql exit status $status):\n$err" if $status != 0;
	# what auto_explain said, kept for a closer look
	PostgreSQL::Test::Utils::append_to_file("$PostgreSQL::Test::Utils::tmp_check/plans.log", $err);
	my (@fair, @filtered);
	for my $p (WfeNode::plans_from($err))
	{
		my @w = walks($p->{plan});
		# the fair walks (the skip scan's too), but the claim's update by tuple id
		push @fair, grep { $_ ne 'Tid Scan' } @w if $p->{text} =~ /p\.fair/;
		push @filtered, grep { /filter on the tenant/ } @w;
	}
	return ($out, join(', ', @fair), join(', ', @filtered));
}

my ($claimed, $fair, $filtered) =
  explained("SELECT t.tenant FROM wfe.claim_task('ot-fair', 'ot-w', 1) AS t;", 'the claim');
is($claimed, 'small', "the claim takes small's task beside big's backlog");
like($fair, qr/^run_stages_fair(, run_stages_fair)*$/, "the claim's walks (the tenants, small's tasks) are run_stages_fair");
is($filtered, '', 'no walk filters on the tenant');

my $released;
($released, $fair, $filtered) = explained(
	"UPDATE wfe.queues SET max_in_flight = max_in_flight + 1 WHERE queue = 'ot-fb';
	 SELECT count(*) FROM wfe._release_held('ot-fb', NULL);", 'the release');
is( $node->safe_psql(
		'postgres', "SELECT string_agg(st.tenant, ' ' ORDER BY st.tenant COLLATE \"C\") FROM wfe.outbox AS o
		  JOIN wfe.run_stages AS st USING (run_id, stage) WHERE st.queue = 'ot-fb' AND o.kind = 'dispatch'"),
	"$BIG small", "the release dispatches small's held task (big's first went at submit)");
like($fair, qr/^run_stages_fair(, run_stages_fair)*$/, "the release's walks of a tenant's held tasks are run_stages_fair");
is($filtered, '', 'no walk filters on the tenant');

done_testing();
