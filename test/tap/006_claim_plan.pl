# The claim's plans never scan a big table: wfe.claim_task stays an index
# walk whatever the size of the backlog and whatever max_tasks, with the
# generic plan as well as the custom ones.
#
# wfe.claim_task is a black box here.  On a private cluster, a one-stage poll
# workflow gets a large backlog (20,000 queued runs) and some finished
# history (3,000 runs completed), then VACUUM ANALYZE.  Each claim session
# loads auto_explain (nested statements on, no ANALYZE, JSON, verbose so
# that every relation is schema-qualified, plans sent back as NOTICEs) and
# calls claim_task several times with max_tasks 1, 10 or 1000: a fresh
# session per max_tasks, so that both the first (custom) plans and the
# generic plan after five executions are seen at every size, and one more
# session with plan_cache_mode = force_generic_plan.
#
# Every plan of every statement the claims ran, whatever its text, is
# checked: a scan of a wfe table with more than BIG_ROWS rows must be an
# Index Scan or Index Only Scan with an Index Cond, or a Tid Scan (so also
# not a Seq Scan, a Bitmap Heap Scan, or an index walked end to end, as a
# merge join input would be), and must not be hashed whole.  An offending
# plan is printed.  The claims must return the tasks asked for and each
# must complete ('accepted'), so that the test cannot pass vacuously.
#
# The same again with each flow control on (operations.md "Flow control"):
# a second queue whose stage takes a token of a rate limit far above the
# load and which has a circuit, closed (RL_BACKLOG queued runs beside the
# first backlog), claimed the same way, so the pick, the bucket, the
# circuit's row and the claim by tuple id are checked too; 200 runs of the
# first backlog raised by set_priority, so its claims walk the ready index
# across priorities;
# a third queue with fairness => 'tenant' (FAIR_BACKLOG queued runs of
# five tenants, one of them with half), so the skip scan over the tenants
# and each tenant's claim are checked, and no claim walks run_stages_ready
# filtering on the tenant (which would read the other tenants' backlog);
# and a fourth queue whose stage has keyed concurrency (KC_BACKLOG queued
# runs over 20 key values, max far above the load), so the keys' locks,
# their in-flight counts and the claim by tuple id are checked with it.
#
# And the release of held broker tasks on a fair queue (max_in_flight 5,
# FB_BACKLOG held runs of five tenants, one of them with half): the queue's
# limit is raised by 1 or 10 and wfe._release_held releases that many, by
# weight; the same checks, and no release walks run_stages_ready (the
# queue's held backlog in dispatch order) instead of each tenant's next.
#
# And the release of held broker tasks on a queue that is not fair
# (max_in_flight 5, NB_BACKLOG held runs, half of them of a tenant with a
# task limit): the queue's limit is raised by 1 and wfe._release_held
# releases one; the same checks, and the in-flight counts (the queue's and
# the limited tenant's, after their locks) read run_stages only through
# their tasks in flight and the outbox's messages, never the queued tasks,
# and the candidates are a walk of the ready index from the queue's first
# (no sort of the held backlog).
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use WfeNode;

my $BACKLOG  = 20_000;    # queued runs left when the claims start
my $RL_BACKLOG = 20_000;  # queued runs of the rate-limited queue (with a circuit)
my $FAIR_BACKLOG = 20_000; # queued runs of the fair queue, over five tenants
my $KC_BACKLOG = 20_000;  # queued runs of the queue with keyed concurrency
my $FB_BACKLOG = 2_000;   # held runs of the fair broker queue, over five tenants
my $NB_BACKLOG = 20_000;  # held runs of the broker queue that is not fair, over two tenants
my $HISTORY  = 3_000;     # runs claimed and completed before that
my $BIG_ROWS = 500;       # a wfe table with more rows is a big one
my @SIZES    = (1, 10, 1000);
my $CALLS    = 7;         # per size and session: past the 5 custom plans

my $node = WfeNode::node('wfe_claim_plan');

# psql that dies on error and returns (stdout, stderr); notices go to stderr
sub run_sql
{
	my ($sql, $what) = @_;
	my ($out, $err) = ('', '');
	my $status = $node->psql(
		'postgres', $sql,
		stdout => \$out,
		stderr => \$err,
		on_error_stop => 1,
		timeout => $PostgreSQL::Test::Utils::timeout_default);
	die "$what failed (psql exit status $status):\n$err" if $status != 0;
	return ($out, $err);
}

#
# A one-stage poll workflow, a backlog and some history.
#
$node->safe_psql(
	'postgres', q{
SELECT wfe.register_worker('tap-plan.step@1', 'tap-plan-jobs');
SELECT wfe.create_definition($y$
name: tap-plan-flow
version: "1.0.0"
entry: a
stages:
  - { name: a, type: worker, queue: tap-plan-jobs, worker: tap-plan.step@1, input: { v: "${context.v}" }, on_success: completed, on_failure: failed }
$y$);
SELECT wfe.approve('tap-plan-flow', '1.0.0');
SELECT wfe.activate('tap-plan-flow', '1.0.0');
SELECT wfe.configure_rate_limit('tap-plan-fast', 1000000, 1000000);
CREATE TABLE public.tap_claimed (session text, call int, max_tasks int,
    run_id bigint, stage text, attempt int, fence bigint);
});

# one_stage(QUEUE, KEYS): the active one-stage poll workflow QUEUE on queue
# QUEUE, its worker contract tap-plan.X@1 (QUEUE tap-plan-X), with the
# stage's further KEYS ("key: value, " each).
sub one_stage
{
	my ($queue, $keys) = @_;
	$keys //= '';
	(my $worker = $queue) =~ s/^tap-plan-/tap-plan./;
	$node->safe_psql('postgres', "SELECT wfe.register_worker('$worker\@1', '$queue');");
	WfeNode::workflow($node,
		"name: $queue\nversion: \"1.0.0\"\nentry: a\nstages:\n"
		  . "  - { name: a, type: worker, queue: $queue, worker: $worker\@1, $keys"
		  . "on_success: completed, on_failure: failed }\n");
}
one_stage('tap-plan-rl', 'rate_limit: tap-plan-fast, ');
one_stage('tap-plan-fair');
one_stage('tap-plan-kc', 'concurrency: { key: "${context.k}", max: 10000 }, ');
one_stage('tap-plan-fb');
one_stage('tap-plan-nb');
$node->safe_psql(
	'postgres', q{
SELECT wfe.configure_circuit('tap-plan-rl', 1.0, 1000000);
SELECT wfe.configure_queue('tap-plan-fair', fairness => 'tenant');
SELECT wfe.configure_tenant('fair-t2', weight => 2);
SELECT wfe.configure_queue('tap-plan-fb', 'broker', 5, fairness => 'tenant');
SELECT wfe.configure_queue('tap-plan-nb', 'broker', 5);
});

my $t0 = time;
is( $node->safe_psql(
		'postgres',
		'SELECT count(*) FROM generate_series(1, '
		  . ($BACKLOG + $HISTORY)
		  . ") AS i, LATERAL wfe.submit('tap-plan-flow', jsonb_build_object('v', i)) AS s "
		  . 'WHERE s.accepted'),
	$BACKLOG + $HISTORY,
	'the runs are submitted');
is( $node->safe_psql(
		'postgres',
		"SELECT count(*) FROM generate_series(1, $RL_BACKLOG) AS i, "
		  . "LATERAL wfe.submit('tap-plan-rl', jsonb_build_object('v', i)) AS s WHERE s.accepted"),
	$RL_BACKLOG,
	'the rate-limited runs are submitted');
# half of the fair backlog is tenant fair-t1's, submitted first; the rest, four tenants'
is( $node->safe_psql(
		'postgres',
		"SELECT count(*) FROM generate_series(1, $FAIR_BACKLOG) AS i, "
		  . "LATERAL wfe.submit('tap-plan-fair', jsonb_build_object('v', i), NULL, "
		  . "jsonb_build_object('tenant', 'fair-t' || CASE WHEN i <= $FAIR_BACKLOG / 2 THEN 1 ELSE 2 + i % 4 END)) AS s "
		  . "WHERE s.accepted"),
	$FAIR_BACKLOG,
	'the fair queue\'s runs are submitted');
is( $node->safe_psql(
		'postgres',
		"SELECT count(*) FROM generate_series(1, $KC_BACKLOG) AS i, "
		  . "LATERAL wfe.submit('tap-plan-kc', jsonb_build_object('k', 'key-' || i % 20)) AS s WHERE s.accepted"),
	$KC_BACKLOG,
	'the runs with keyed concurrency are submitted');
# the fair broker queue: five dispatched, the rest held; half of them fb-t1's, submitted first
is( $node->safe_psql(
		'postgres',
		"SELECT count(*) FROM generate_series(1, $FB_BACKLOG) AS i, "
		  . "LATERAL wfe.submit('tap-plan-fb', jsonb_build_object('v', i), NULL, "
		  . "jsonb_build_object('tenant', 'fb-t' || CASE WHEN i <= $FB_BACKLOG / 2 THEN 1 ELSE 2 + i % 4 END)) AS s "
		  . "WHERE s.accepted"),
	$FB_BACKLOG,
	'the fair broker queue\'s runs are submitted');
# the broker queue that is not fair: five dispatched, the rest held (nb-lim is limited later)
is( $node->safe_psql(
		'postgres',
		"SELECT count(*) FROM generate_series(1, $NB_BACKLOG) AS i, "
		  . "LATERAL wfe.submit('tap-plan-nb', jsonb_build_object('v', i), NULL, "
		  . "jsonb_build_object('tenant', CASE WHEN i % 2 = 0 THEN 'nb-lim' ELSE 'nb-free' END)) AS s "
		  . "WHERE s.accepted"),
	$NB_BACKLOG,
	'the runs of the broker queue that is not fair are submitted');

# history: claimed and completed a thousand at a time
$node->safe_psql(
	'postgres', qq{
DO \$\$
DECLARE
    t record;
    n int := 0;
BEGIN
    FOR b IN 1 .. $HISTORY / 1000 LOOP
        FOR t IN SELECT * FROM wfe.claim_task('tap-plan-jobs', 'tap-history', 1000) LOOP
            IF wfe.complete_task(t.run_id, t.stage, t.attempt, t.fence, '{}') = 'accepted' THEN
                n := n + 1;
            END IF;
        END LOOP;
    END LOOP;
    IF n <> $HISTORY THEN
        RAISE EXCEPTION 'history: % of $HISTORY tasks completed', n;
    END IF;
END
\$\$;
});
is( $node->safe_psql(
		'postgres',
		"SELECT count(*) FILTER (WHERE state = 'queued') || '/' || count(*) "
		  . "FROM wfe.run_stages WHERE queue = 'tap-plan-jobs'"),
	"$BACKLOG/" . ($BACKLOG + $HISTORY),
	"$BACKLOG tasks queued, $HISTORY done");
is($node->safe_psql('postgres', "SELECT count(*) FROM wfe.run_stages WHERE queue = 'tap-plan-rl' AND state = 'queued'"),
	$RL_BACKLOG, "$RL_BACKLOG rate-limited tasks queued");
is($node->safe_psql('postgres', "SELECT count(DISTINCT tenant) || ' ' || count(*) FROM wfe.run_stages WHERE queue = 'tap-plan-fair' AND state = 'queued'"),
	"5 $FAIR_BACKLOG", "$FAIR_BACKLOG tasks of five tenants queued on the fair queue");
is($node->safe_psql('postgres', "SELECT count(*) FROM wfe.run_stages WHERE queue = 'tap-plan-kc' AND state = 'queued' AND concurrency_key IS NOT NULL"),
	$KC_BACKLOG, "$KC_BACKLOG tasks with keyed concurrency queued");
# some of the backlog moved ahead: the claims walk the ready index across priority levels
is( $node->safe_psql(
		'postgres',
		"SELECT count(*) FROM (SELECT wfe.set_priority(r.run_id, 5) FROM wfe.runs AS r "
		  . "WHERE r.workflow = 'tap-plan-flow' AND r.finished_at IS NULL ORDER BY r.run_id DESC LIMIT 200) AS p"),
	200,
	'200 runs of the backlog raised by set_priority');
$node->safe_psql('postgres', 'VACUUM ANALYZE');
note sprintf('set-up took %d s', time - $t0);

# The size of every wfe table, exactly.
my %rows;
for my $line (
	split /\n/,
	$node->safe_psql(
		'postgres', q{
SELECT c.relname || '=' ||
       (xpath('/row/n/text()',
              query_to_xml(format('SELECT count(*) AS n FROM wfe.%I', c.relname), false, true, '')))[1]::text
  FROM pg_class AS c JOIN pg_namespace AS n ON n.oid = c.relnamespace
 WHERE n.nspname = 'wfe' AND c.relkind IN ('r', 'p', 'm')}))
{
	my ($rel, $n) = split /=/, $line;
	$rows{$rel} = $n;
}
my @big = sort grep { $rows{$_} > $BIG_ROWS } keys %rows;
note 'big wfe tables: ' . join(', ', map { "$_ ($rows{$_} rows)" } @big);
ok(scalar(grep { $_ eq 'run_stages' } @big), 'wfe.run_stages is one of the big tables');

#
# Reading the plans.
#

# "Node Type on wfe.rel alias" and the like, as EXPLAIN's text would say it
sub node_title
{
	my ($n) = @_;
	my $t = $n->{'Node Type'};
	$t = $n->{'Operation'} if $t eq 'ModifyTable' && $n->{'Operation'};
	$t = "$n->{'Strategy'} $t" if $t eq 'Aggregate' && $n->{'Strategy'};
	$t .= " ($n->{'Join Type'})"
	  if defined $n->{'Join Type'} && $n->{'Join Type'} ne 'Inner';
	$t .= ' Backward' if ($n->{'Scan Direction'} // '') eq 'Backward';
	$t .= " using $n->{'Index Name'}" if defined $n->{'Index Name'};
	if (defined $n->{'Relation Name'})
	{
		my $rel = ($n->{'Schema'} ? "$n->{'Schema'}." : '') . $n->{'Relation Name'};
		$t .= " on $rel";
		$t .= " $n->{'Alias'}"
		  if defined $n->{'Alias'} && $n->{'Alias'} ne $n->{'Relation Name'};
	}
	$t .= " on $n->{'CTE Name'}"      if defined $n->{'CTE Name'};
	$t .= " on $n->{'Function Name'}" if defined $n->{'Function Name'};
	$t .= "  (rows=$n->{'Plan Rows'})" if defined $n->{'Plan Rows'};
	return $t;
}

my @CONDS = ('Index Cond', 'TID Cond', 'Recheck Cond', 'Hash Cond', 'Merge Cond',
	'Join Filter', 'Filter', 'One-Time Filter', 'Sort Key');

# the plan as an indented tree, the offending nodes marked
sub render
{
	my ($n, $bad, $depth) = @_;
	$depth //= 0;
	my $pad = '  ' x $depth;
	my $s = '';
	$s .= "$pad$n->{'Subplan Name'}\n" if defined $n->{'Subplan Name'};
	$s .= $pad . ($depth ? '->  ' : '') . node_title($n);
	$s .= "    <== $bad->{$n}" if $bad->{$n};
	$s .= "\n";
	for my $k (@CONDS)
	{
		next unless defined $n->{$k};
		my $v = ref $n->{$k} eq 'ARRAY' ? join(', ', @{ $n->{$k} }) : $n->{$k};
		$s .= "$pad      $k: $v\n";
	}
	$s .= render($_, $bad, $depth + 1) for @{ $n->{'Plans'} // [] };
	return $s;
}

# the wfe table a node reads, if it is a big one (ModifyTable nodes only
# write: their children read)
sub big_table_read
{
	my ($n) = @_;
	return undef
	  unless defined $n->{'Relation Name'}
	  && ($n->{'Schema'} // '') eq 'wfe'
	  && $n->{'Node Type'} ne 'ModifyTable';
	my $rel = $n->{'Relation Name'};
	return ($rows{$rel} // 0) > $BIG_ROWS ? $rel : undef;
}

# the sessions checked now are releases of held broker tasks
my $releases = 0;

# the offending nodes of a plan tree: { node => why }
sub offences
{
	my ($n, $bad) = @_;
	$bad //= {};
	if (my $rel = big_table_read($n))
	{
		# a fair queue's release must not walk the queue's held backlog in dispatch order
		if ($releases && ($n->{'Index Name'} // '') eq 'run_stages_ready')
		{
			$bad->{$n} = "a release walked run_stages_ready (the queue's held backlog); wfe.$rel has $rows{$rel} rows";
		}
		my $type = $n->{'Node Type'};
		my $size = "wfe.$rel has $rows{$rel} rows";
		if ($type eq 'Index Scan' || $type eq 'Index Only Scan')
		{
			$bad->{$n} = "an index walked end to end (no Index Cond); $size"
			  unless defined $n->{'Index Cond'};
		}
		elsif ($type ne 'Tid Scan')
		{
			$bad->{$n} = "$type; $size";
		}
		# a fair queue's claim of one tenant must not filter the queue's whole ready list
		if (($n->{'Index Name'} // '') eq 'run_stages_ready' && ($n->{'Filter'} // '') =~ /tenant/)
		{
			$bad->{$n} = "run_stages_ready filtered on the tenant (the other tenants' backlog is read); $size";
		}
	}
	if ($n->{'Node Type'} eq 'Hash')
	{
		for my $c (@{ $n->{'Plans'} // [] })
		{
			my $rel = big_table_read($c) or next;
			$bad->{$c} //= "hashed whole into a Hash Join; wfe.$rel has $rows{$rel} rows";
		}
	}
	offences($_, $bad) for @{ $n->{'Plans'} // [] };
	return $bad;
}

# does the plan read a big wfe table at all?
sub reads_big
{
	my ($n) = @_;
	return 1 if big_table_read($n);
	for (@{ $n->{'Plans'} // [] }) { return 1 if reads_big($_) }
	return 0;
}

# a session's set-up: auto_explain sends every plan, nested ones too, as JSON NOTICEs
my $AUTO_EXPLAIN = $WfeNode::AUTO_EXPLAIN;

# the plans on psql's stderr ERR, grouped by call (a plan whose text matches
# MARKER ends one), and the offending ones, each shown once: (calls,
# offending, how many plans)
sub calls_and_offences
{
	my ($err, $marker) = @_;
	my (@calls, @current, %seen, @offending);
	my @plans = WfeNode::plans_from($err);
	for my $p (@plans)
	{
		if ($p->{text} =~ $marker)
		{
			push @calls, [@current];
			@current = ();
			next;
		}
		push @current, $p;
		my $bad = offences($p->{plan});
		next unless %$bad;
		my $shown = render($p->{plan}, $bad);
		push @offending, "Query Text: $p->{text}\n$shown" unless $seen{ $p->{text} . $shown }++;
	}
	return (\@calls, \@offending, scalar(@plans));
}

#
# The claims.
#
my @sessions;
for my $queue ('tap-plan-jobs', 'tap-plan-rl', 'tap-plan-fair', 'tap-plan-kc')
{
	my $tag = $queue eq 'tap-plan-rl' ? 'rate limit and circuit, '
	  : $queue eq 'tap-plan-fair' ? 'fairness, '
	  : $queue eq 'tap-plan-kc' ? 'keyed concurrency, '
	  : '';
	push @sessions, map { { name => "${tag}max_tasks=$_", queue => $queue, sizes => [$_], mode => undef } } @SIZES;
	push @sessions, { name => "${tag}force_generic_plan", queue => $queue, sizes => [@SIZES], mode => 'force_generic_plan' };
}

my $total = 0;
for my $s (@sessions)
{
	my $sql = $AUTO_EXPLAIN;
	$sql .= "SET plan_cache_mode = $s->{mode};\n" if $s->{mode};
	my ($call, $expected) = (0, 0);
	for my $size (@{ $s->{sizes} })
	{
		my $calls = $s->{mode} ? 2 : $CALLS;
		for (1 .. $calls)
		{
			$call++;
			$expected += $size;
			$sql .=
			    "INSERT INTO public.tap_claimed SELECT '$s->{name}', $call, $size, "
			  . 't.run_id, t.stage, t.attempt, t.fence '
			  . "FROM wfe.claim_task('$s->{queue}', 'tap-w-$call', $size) AS t;\n";
		}
	}
	$total += $expected;
	my (undef, $err) = run_sql($sql, "the claims ($s->{name})");
	# what auto_explain said, kept for a closer look
	(my $file = "claims-$s->{name}.log") =~ s/[=, ]+/-/g;
	PostgreSQL::Test::Utils::append_to_file("$PostgreSQL::Test::Utils::tmp_check/$file", $err);

	is( $node->safe_psql(
			'postgres',
			"SELECT count(*) FILTER (WHERE n = max_tasks) || '/' || count(*) || ' ' || sum(n) "
			  . "FROM (SELECT call, max_tasks, count(*) AS n FROM public.tap_claimed "
			  . "WHERE session = '$s->{name}' GROUP BY call, max_tasks) AS c"),
		"$call/$call $expected",
		"$s->{name}: each of the $call claims returned max_tasks tasks");

	# the plans, attributed to the claim whose top-level INSERT ends them
	my ($calls, $offending, $nplans) = calls_and_offences($err, qr/tap_claimed/);
	my @offending = @$offending;
	my $covered = grep { grep { reads_big($_->{plan}) } @$_ } @$calls;
	is( scalar(@$calls) . ' ' . $covered,
		"$call $call",
		"$s->{name}: auto_explain showed, for each of the $call claims, "
		  . 'nested plans that read a big wfe table ('
		  . $nplans
		  . ' plans in all)')
	  or diag "psql's stderr (first 4000 characters):\n" . substr($err, 0, 4000);
	ok(!@offending, "$s->{name}: no plan scans a big wfe table")
	  or diag(scalar(@offending)
		  . " offending plan(s) (every plan: tmp_check/$file):\n\n"
		  . join("\n", @offending));
}

#
# The releases of the fair broker queue's held tasks: the limit raised by
# SIZE, then wfe._release_held as configure_queue calls it, CALLS times per
# size, each session fresh (custom and generic plans).
#
$releases = 1;
my $released = 5;
for my $size (1, 10)
{
	my $name = "fair release of $size";
	my $sql = $AUTO_EXPLAIN;
	for my $call (1 .. $CALLS)
	{
		$sql .= "UPDATE wfe.queues SET max_in_flight = max_in_flight + $size WHERE queue = 'tap-plan-fb';\n"
		  . "SELECT count(*) AS tap_released FROM wfe._release_held('tap-plan-fb', NULL);\n";
	}
	$released += $size * $CALLS;
	my (undef, $err) = run_sql($sql, "the releases ($name)");
	(my $file = "releases-$size.log") =~ s/[=, ]+/-/g;
	PostgreSQL::Test::Utils::append_to_file("$PostgreSQL::Test::Utils::tmp_check/$file", $err);
	is( $node->safe_psql('postgres',
			"SELECT count(*) FROM wfe.outbox AS o JOIN wfe.run_stages AS st USING (run_id, stage)
			  WHERE st.queue = 'tap-plan-fb' AND o.kind = 'dispatch'"),
		$released, "$name: each release dispatched $size");
	my ($calls, $offending) = calls_and_offences($err, qr/tap_released/);
	my @offending = @$offending;
	my $covered = grep { grep { ($_->{text} =~ /p\.fair/) && reads_big($_->{plan}) } @$_ } @$calls;
	is(scalar(@$calls) . ' ' . $covered, "$CALLS $CALLS",
		"$name: auto_explain showed, for each release, the fair walk reading run_stages");
	ok(!@offending, "$name: no plan scans a big wfe table, nor the held backlog in order")
	  or diag(scalar(@offending) . " offending plan(s) (every plan: tmp_check/$file):\n\n" . join("\n", @offending));
}
# weights 1: the 77 released went to the five tenants in turn (7 and 70, each
# session's passes from 0), whatever fb-t1's backlog
is( $node->safe_psql('postgres',
		"SELECT string_agg(n::text, ' ' ORDER BY tenant) FROM (SELECT st.tenant, count(*) AS n
		   FROM wfe.outbox AS o JOIN wfe.run_stages AS st USING (run_id, stage)
		  WHERE st.queue = 'tap-plan-fb' AND o.kind = 'dispatch' GROUP BY st.tenant) AS x"),
	'21 16 15 15 15', 'the releases shared by tenant (fb-t1 had the 5 dispatched at submit too)');
$releases = 0;

#
# The releases of the held tasks of the broker queue that is not fair: its
# limit raised by 1, then wfe._release_held, CALLS times, in a fresh
# session (custom and generic plans).  The in-flight counts are the
# statements that start with two counts.
#
{
	my $name = 'release of 1 on a queue that is not fair';
	# nb-lim's limit only now: with a limited tenant, every claim above
	# would peek for its tasks (claim.c), a walk of run_stages_ready this
	# test does not check yet
	$node->safe_psql('postgres', "SELECT wfe.configure_tenant('nb-lim', max_tasks_in_flight => 2)");
	my $sql = $AUTO_EXPLAIN;
	for my $call (1 .. $CALLS)
	{
		$sql .= "UPDATE wfe.queues SET max_in_flight = max_in_flight + 1 WHERE queue = 'tap-plan-nb';\n"
		  . "SELECT count(*) AS tap_released FROM wfe._release_held('tap-plan-nb', NULL);\n";
	}
	my (undef, $err) = run_sql($sql, "the releases ($name)");
	PostgreSQL::Test::Utils::append_to_file("$PostgreSQL::Test::Utils::tmp_check/releases-nb.log", $err);
	is( $node->safe_psql('postgres',
			"SELECT count(*) FROM wfe.outbox AS o JOIN wfe.run_stages AS st USING (run_id, stage)
			  WHERE st.queue = 'tap-plan-nb' AND o.kind = 'dispatch'"),
		5 + $CALLS, "$name: each release dispatched one");
	my ($calls) = calls_and_offences($err, qr/tap_released/);
	my (@counts, @offending, @candidates);
	for my $p (map { @$_ } @$calls)
	{
		my $bad = offences($p->{plan});
		my $counting = $p->{text} =~ /^SELECT \(\(SELECT count|WITH RECURSIVE qs/;
		push @counts, $p if $counting;
		# a count reads run_stages by its tasks in flight, the outbox's messages, the queues: never the queued tasks
		if ($counting)
		{
			my @walk = ($p->{plan});
			while (my $n = shift @walk)
			{
				push @walk, @{ $n->{'Plans'} // [] };
				next unless ($n->{'Relation Name'} // '') eq 'run_stages';
				my $cond = $n->{'Index Cond'} // '';
				$bad->{$n} = 'a count read the queued tasks'
				  if !defined $n->{'Index Name'} || $cond =~ /queued/ || $cond eq '';
			}
		}
		# the candidates: a walk of the queue's held tasks from its first, in the ready index's order, no sort
		if ($p->{text} =~ /ORDER BY st\.priority DESC, st\.ready_at$/)
		{
			push @candidates, $p;
			my @walk = ($p->{plan});
			while (my $n = shift @walk)
			{
				push @walk, @{ $n->{'Plans'} // [] };
				$bad->{$n} = 'the candidates sorted' if $n->{'Node Type'} =~ /Sort/;
				$bad->{$n} = 'the candidates read run_stages other than by the ready index'
				  if ($n->{'Relation Name'} // '') eq 'run_stages' && ($n->{'Index Name'} // '') ne 'run_stages_ready';
			}
		}
		next unless %$bad;
		push @offending, "Query Text: $p->{text}\n" . render($p->{plan}, $bad);
	}
	# each release counts the queue and the limited tenant, after their locks
	cmp_ok(scalar(@counts), '>=', 2 * $CALLS, "$name: auto_explain showed the in-flight counts (" . scalar(@counts) . ')');
	is(scalar(@candidates), $CALLS, "$name: auto_explain showed the candidates of each release");
	ok(!@offending, "$name: no plan scans a big wfe table, no count reads the queued tasks, "
		  . 'and the candidates are a walk of the ready index from the queue\'s first, without a sort')
	  or diag(scalar(@offending) . " offending plan(s) (every plan: tmp_check/releases-nb.log):\n\n" . join("\n", @offending));
}

#
# Each claimed task completes.
#
is( $node->safe_psql(
		'postgres',
		q{SELECT string_agg(r || '=' || n, ' ' ORDER BY r)
		    FROM (SELECT r, count(*) AS n
		            FROM (SELECT wfe.complete_task(run_id, stage, attempt, fence, '{}') AS r
		                    FROM public.tap_claimed ORDER BY run_id) AS x
		           GROUP BY r) AS y}),
	"accepted=$total",
	"complete_task accepts each of the $total claimed tasks");
is( $node->safe_psql(
		'postgres',
		"SELECT count(*) FROM wfe.runs WHERE workflow IN ('tap-plan-flow', 'tap-plan-rl', 'tap-plan-fair', 'tap-plan-kc') AND state = 'completed'"),
	$HISTORY + $total,
	'their runs completed');

note sprintf('took %d s', time - $t0);
$node->stop;
done_testing();
