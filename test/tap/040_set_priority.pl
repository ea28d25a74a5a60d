# set_priority (operations.md "Flow control"): a run's queued work follows
# its new priority.
#
# 1. Three runs of tenant A queued on one poll queue; raising the last
#    one's priority makes the next claim take it first; lowering the first
#    one's sends it last; what the run releases later carries the new
#    priority; event run.priority_set.
# 2. Bad input: a priority out of range (22023, naming priority), NULLs
#    (22004), a run that does not exist (42704), a run that has ended
#    (55000); nothing changes.
# 3. Attacks, each as a real login, refused and nothing changed: a login
#    of no wfe role, a wfe_reader, a worker (EXECUTE refused: 42501), and
#    an operator of tenant B on tenant A's run (answered as no such run).
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use WfeNode;

my $node = WfeNode::node('wfe_set_priority');

sub sql { return $node->safe_psql('postgres', $_[0]); }

# Q as login ROLE: (SQLSTATE or '', stdout)
sub as_login
{
	my ($role, $q) = @_;
	my ($out, $err) = ('', '');
	$node->psql('postgres', "\\set VERBOSITY verbose\n$q", stdout => \$out, stderr => \$err,
		on_error_stop => 1, extra_params => [ '-U', $role ]);
	my ($state) = $err =~ /ERROR:\s+([0-9A-Z]{5}):/;
	return ($state // '', $out, $err);
}

WfeNode::logins($node,
	op_a => 'wfe_operator A',
	op_b => 'wfe_operator B',
	nobody => '',
	reader => 'wfe_reader',
	worker => 'wfe_worker');
sql(q{
SELECT wfe.register_worker('tap.p@1', 'pq');
SELECT wfe.grant_queue('worker', 'pq');});
WfeNode::workflow($node, <<'YAML');
name: prio
version: "1.0.0"
entry: a
stages:
  - name: a
    type: worker
    queue: pq
    worker: tap.p@1
    on_success: b
    on_failure: failed
  - name: b
    type: worker
    queue: pq
    worker: tap.p@1
    on_success: completed
    on_failure: failed
YAML
my @run = map { sql(q{SELECT run_id FROM wfe.submit('prio', '{}', NULL, '{"tenant": "A"}')}) } 1 .. 3;

# --- 1. the order follows ---------------------------------------------------
my ($st, $out) = as_login('op_a', "SELECT wfe.set_priority($run[2], 10)");
is($st, '', 'an operator of the tenant raises the last run');
($st, $out) = as_login('op_a', "SELECT wfe.set_priority($run[0], -5)");
is($st, '', 'and lowers the first');
is(sql(q{SELECT string_agg(run_id::text, ',' ORDER BY priority DESC, ready_at)
           FROM wfe.run_stages WHERE state = 'queued'}),
	"$run[2],$run[1],$run[0]", 'the queued work is in the new order');
my $first = sql(q{SELECT run_id FROM wfe.claim_task('pq', 'w', 1)});
is($first, $run[2], 'the next claim takes the raised run first');
my ($s, $a, $f) = split /\|/, sql(qq{SELECT stage, attempt, fence FROM wfe.run_stages WHERE run_id = $run[2] AND state = 'running'});
sql("SELECT wfe.complete_task($run[2], '$s', $a, $f, '{}')");
is(sql(qq{SELECT priority FROM wfe.run_stages WHERE run_id = $run[2] AND stage = 'b'}), '10',
	'what the run releases later carries the new priority');
is(sql(q{SELECT run_id FROM wfe.claim_task('pq', 'w', 1)}), $run[2], 'and is claimed first too');
is(sql(qq{SELECT detail ->> 'from' || '->' || (detail ->> 'to') || ' by ' || (detail ->> 'by')
            FROM wfe.events WHERE run_id = $run[2] AND type = 'run.priority_set'}),
	'0->10 by op_a', 'event run.priority_set says who and what');
is(sql(qq{SELECT priority FROM wfe.runs WHERE run_id = $run[2]}), '10', 'the run row has it');

# --- 2. bad input -----------------------------------------------------------
my $snapshot = q{SELECT string_agg(run_id || ':' || stage || ':' || priority, ',' ORDER BY run_id, stage) FROM wfe.run_stages};
my $before = sql($snapshot);
my @bad = (
	[ "SELECT wfe.set_priority($run[1], 1000001)", '22023', qr/priority must be an integer between/, 'a priority above the range' ],
	[ "SELECT wfe.set_priority($run[1], -1000001)", '22023', qr/priority/, 'a priority below the range' ],
	[ "SELECT wfe.set_priority($run[1], NULL)", '22004', qr/must not be null/, 'a NULL priority' ],
	[ "SELECT wfe.set_priority(NULL, 1)", '22004', qr/must not be null/, 'a NULL run' ],
	[ "SELECT wfe.set_priority(999999, 1)", '42704', qr/run 999999 does not exist/, 'a run that does not exist' ],
);
for my $b (@bad)
{
	my ($state, undef, $err) = as_login('op_a', $b->[0]);
	is($state, $b->[1], "$b->[3]: $b->[1]");
	like($err, $b->[2], "$b->[3]: the message names it");
}
is(sql($snapshot), $before, 'bad input changed nothing');
sql("SELECT wfe.cancel_run($run[1])");
my ($state, undef, $err) = as_login('op_a', "SELECT wfe.set_priority($run[1], 3)");
is($state, '55000', 'a run that has ended: 55000');
like($err, qr/HINT:/, 'with a hint');
my $after_cancel = sql($snapshot);

# --- 3. attacks -------------------------------------------------------------
for my $who ('nobody', 'reader', 'worker')
{
	($state) = as_login($who, "SELECT wfe.set_priority($run[0], 1000000)");
	like($state, qr/^(42501)$/, "$who may not set a priority (42501)");
}
($state) = as_login('op_b', "SELECT wfe.set_priority($run[0], 1000000)");
is($state, '42704', "an operator of tenant B is answered as for a run that does not exist");
is(sql($snapshot), $after_cancel, 'and nothing changed');
is(sql(qq{SELECT priority FROM wfe.runs WHERE run_id = $run[0]}), '-5', 'the run keeps its priority');
is(sql(qq{SELECT count(*) FROM wfe.events WHERE type = 'run.priority_set'}), '2', 'and no event was written');

done_testing();
