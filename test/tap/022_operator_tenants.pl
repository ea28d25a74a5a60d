# Operators act for their tenants only, within the admission limits
# (docs/operations.md "Security model", "Tenants"; issue 20 items 1, 10, 12).
#
# Two tenants, A and B, each with an operator (a real login, a member of
# wfe_operator mapped to its tenant).  A has runs in every state an
# operator acts on: failed with an open dead letter, running, queued on a
# poll queue, and failed on a queue both tenants share.  Then:
#
# - B's operator attacks A's runs with every operator function that takes
#   a run: each answers exactly as for a run that does not exist (SQLSTATE
#   and message, the run id aside), names neither A's queue nor A, does not
#   wait on A's run while another transaction holds it, and nothing of A
#   changed (runs, stages, events, dead letters, outbox, timers, outputs);
#   redrive_dead_letters on A's queue and on the shared one redrives none
#   of A's dead letters (but B's own, on the shared queue);
# - the admission limits hold for every operator argument: a 65 MB result
#   (wfe.max_payload_bytes is 64 MB), a 20 MB reason, reasons holding ESC or
#   a newline are refused (54000, 22023, with a hint) and nothing is stored;
# - reopening a failed run counts against max_runs_in_flight: at the limit
#   redrive and skip_stage are refused with 53400 and redrive_dead_letters
#   passes the stage over (its dead letter stays open); with room, redrive
#   reopens the run.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use WfeLogin;
use WfeNode;

my $node = WfeNode::node('wfe_operator_tenants');
sub sql { return $node->safe_psql('postgres', $_[0]); }

# login(ROLE, SQL): run SQL in a connection of its own as login ROLE;
# (SQLSTATE or '', stdout, the error's message, all of stderr)
sub login
{
	my $r = WfeLogin::as_login($node, @_);
	return ($r->{state}, $r->{out}, $r->{msg}, $r->{err});
}

WfeNode::tenant_logins($node, [qw(A B)], 'operator');
# one definition per queue: work, then next, on the same queue; no retries
for my $q (qw(qa qb qs))
{
	sql(qq{SELECT wfe.register_worker('t.$q\@1', '$q');});
	WfeNode::workflow($node, <<"YAML");
name: flow-$q
version: "1.0.0"
entry: work
stages:
  - name: work
    type: worker
    queue: $q
    worker: t.$q\@1
    retry: {max_attempts: 1}
    on_success: next
    on_failure: failed
  - name: next
    type: worker
    queue: $q
    worker: t.$q\@1
    on_success: completed
    on_failure: failed
YAML
}

# submit(TENANT, QUEUE): a run of flow-QUEUE for TENANT (as a superuser)
sub submit
{
	my ($t, $q) = @_;
	return sql(qq{SELECT run_id FROM wfe.submit('flow-$q', '{"secret": "$t"}', NULL, '{"tenant": "$t"}')});
}
# claim(QUEUE): claim the oldest task of QUEUE: (run, attempt, fence)
sub claim
{
	return split /\|/, sql("SELECT run_id, attempt, fence FROM wfe.claim_task('$_[0]', 'w')");
}
# fail_one(QUEUE): claim the oldest task of QUEUE and fail it (retryable, no attempt left: a dead letter); its run
sub fail_one
{
	my ($run, $att, $fence) = claim($_[0]);
	is(sql("SELECT wfe.fail_task($run, 'work', $att, $fence, '{\"code\": \"boom\"}', true)"),
		'accepted', "run $run fails at work");
	return $run;
}

submit('A', 'qa');
my $a_failed = fail_one('qa');
submit('A', 'qa');
my ($a_running) = claim('qa');
my $a_queued = submit('A', 'qa');
submit('A', 'qs');
my $a_shared = fail_one('qs');
submit('B', 'qs');
my $b_shared = fail_one('qs');
is(sql("SELECT string_agg(state, ' ' ORDER BY run_id) FROM wfe.runs"),
	'failed running running failed failed', "A's runs: failed, running, queued, failed on the shared queue; B's failed");
is(sql(q{SELECT count(*) FROM wfe.dead_letters WHERE resolved_at IS NULL}), '3', 'three open dead letters');
my $missing = 987654321;

# Everything of tenant A, as text: rows of every table that holds run data.
my $snapshot = join(" || '#' || ",
	map { "coalesce((SELECT string_agg(x::text, ',' ORDER BY x::text) FROM wfe.$_ AS x WHERE x.tenant = 'A'), '')" }
	  qw(runs run_stages events dead_letters outbox timers outputs));
my $before = sql("SELECT $snapshot");

#
# B's operator attacks A's runs with every operator function that takes one.
#
my @attacks = (
	[ 'redrive', q{SELECT wfe.redrive(%s, 'work', 'by B')}, $a_failed ],
	[ 'redrive, a stage that does not exist', q{SELECT wfe.redrive(%s, 'nope')}, $a_failed ],
	[ 'skip_stage with a forged result', q{SELECT wfe.skip_stage(%s, 'work', '{"forged": true}', 'by B')}, $a_failed ],
	[ 'fail_stage', q{SELECT wfe.fail_stage(%s, 'work', 'by B')}, $a_running ],
	[ 'redispatch of a poll task', q{SELECT wfe.redispatch(%s, 'work', 'by B')}, $a_queued ],
	[ 'redispatch of a running task', q{SELECT wfe.redispatch(%s, 'work')}, $a_running ],
	[ 'replay', q{SELECT wfe.replay(%s, 'by B')}, $a_failed ],
	[ 'cancel_run', q{SELECT wfe.cancel_run(%s, 'by B')}, $a_running ],
	[ 'report', q{SELECT wfe.report(%s)}, $a_failed ],
	[ 'run_timeline', q{SELECT count(*) FROM wfe.run_timeline(%s)}, $a_failed ],
	[ 'run_mermaid', q{SELECT wfe.run_mermaid(%s)}, $a_failed ]);
for my $attack (@attacks)
{
	my ($name, $q, $run) = @$attack;
	my @a = login('operator_b', sprintf($q, $run));
	my @m = login('operator_b', sprintf($q, $missing));
	(my $am = "$a[0]|$a[1]|$a[2]") =~ s/\b$run\b/N/g;
	(my $mm = "$m[0]|$m[1]|$m[2]") =~ s/\b$missing\b/N/g;
	is($am, $mm, "operator_b: $name of A's run answers as for no run ($a[0]$a[1] $a[2])");
	unlike($a[3], qr/\bq[as]\b|"A"|secret/, "... and names neither A's queue nor A");
}
my ($st, $o, $msg) = login('operator_b', "SELECT wfe.redrive($a_failed, 'work')");
is($st, '42704', 'the answer is 42704 (undefined_object)');

# no lock wait either: B is answered at once while A's run is locked
my $holder = $node->background_psql('postgres');
$holder->query_safe("BEGIN;\nSELECT 1 FROM wfe.runs WHERE run_id IN ($a_failed, $a_running, $a_queued) FOR UPDATE;");
for my $call ("wfe.redrive($a_failed, 'work')", "wfe.fail_stage($a_running, 'work', 'x')",
	"wfe.redispatch($a_queued, 'work')", "wfe.skip_stage($a_failed, 'work')")
{
	($st) = login('operator_b', "SET lock_timeout = '2s';\nSELECT $call");
	is($st, '42704', "operator_b: $call while A's run is locked: 42704 at once, no lock wait");
}
$holder->query_safe('ROLLBACK;');
$holder->quit;

# the bulk redrive sees B's dead letters only
($st, $o) = login('operator_b', q{SELECT wfe.redrive_dead_letters('qa', reason => 'by B')});
is("$st|$o", '|0', "operator_b: redrive_dead_letters('qa') (A's queue) redrives nothing");
($st, $o) = login('operator_b', q{SELECT wfe.redrive_dead_letters('qs', reason => 'by B')});
is("$st|$o", '|1', "operator_b: redrive_dead_letters('qs') (shared) redrives B's one stage");
is(sql("SELECT state FROM wfe.runs WHERE run_id = $b_shared"), 'running', "... B's run is reopened");
is(sql("SELECT resolved_at IS NULL FROM wfe.dead_letters WHERE run_id = $a_shared"), 't',
	"... and A's dead letter on the shared queue is still open");

# cache_invalidate names a tenant itself: refused as a tenant the caller does not act for
($st, undef, $msg) = login('operator_b', q{SELECT wfe.cache_invalidate(tenant => 'A')});
is($st, '42501', "operator_b: cache_invalidate(tenant => 'A') is refused (42501)");

is(sql("SELECT $snapshot"), $before, "nothing B's operator did changed a row of A (runs, stages, events, dead letters, outbox, timers, outputs)");
is(sql(q{SELECT count(*) FROM wfe.events WHERE detail ->> 'by' = 'operator_b' AND tenant = 'A'}), '0',
	'no event of A names B\'s operator');

# A's own operator may do all of it: the refusals above were about the tenant
($st, $o, $msg) = login('operator_a', "SELECT wfe.redispatch($a_queued, 'work')");
is($st, '55000', "operator_a: redispatch of its own poll task is answered why not (55000)");
like($msg, qr/queue "qa" is a poll queue/, '... naming its own queue');

#
# The admission limits, for every operator argument.  Nothing is stored.
#
$before = sql("SELECT $snapshot");
my @limits = (
	[ 'skip_stage: a 65 MB result', "SELECT wfe.skip_stage($a_failed, 'work', jsonb_build_object('size', 1, 'pad', repeat('x', 65 * 1024 * 1024)))",
		'54000', qr/the result is \d+ bytes, more than wfe\.max_payload_bytes/ ],
	[ 'redrive: a 20 MB reason with ESC and a newline', "SELECT wfe.redrive($a_failed, 'work', repeat('x', 20 * 1024 * 1024) || E'\\x1b[2J\\n')",
		'54000', qr/reason is 20971525 bytes long, more than wfe\.max_name_bytes/ ],
	[ 'redrive: a reason with ESC', "SELECT wfe.redrive($a_failed, 'work', E'\\x1b[31mred')",
		'22023', qr/reason must not contain control characters \(byte 1 is 0x1b\)/ ],
	[ 'skip_stage: a reason with a newline', "SELECT wfe.skip_stage($a_failed, 'work', '{}', E'a\\nb')",
		'22023', qr/reason must not contain control characters/ ],
	[ 'fail_stage: a reason with a newline', "SELECT wfe.fail_stage($a_running, 'work', E'gone\\n')",
		'22023', qr/reason must not contain control characters/ ],
	[ 'redispatch: a long stage name', "SELECT wfe.redispatch($a_queued, repeat('s', 1000))",
		'54000', qr/stage is 1000 bytes long/ ],
	[ 'replay: a long reason', "SELECT wfe.replay($a_failed, repeat('r', 1000))",
		'54000', qr/reason is 1000 bytes long/ ],
	[ 'cancel_run: a reason with ESC', "SELECT wfe.cancel_run($a_running, E'\\x1b')",
		'22023', qr/reason must not contain control characters/ ],
	[ 'redrive_dead_letters: a queue with a newline', "SELECT wfe.redrive_dead_letters(E'qa\\n')",
		'22023', qr/queue must not contain control characters/ ],
	[ 'cache_invalidate: a long key', "SELECT wfe.cache_invalidate(repeat('k', 1000))",
		'54000', qr/key is 1000 bytes long/ ]);
for my $l (@limits)
{
	my ($name, $q, $want, $re) = @$l;
	my @r = login('operator_a', $q);
	is($r[0], $want, "operator_a: $name: $want");
	like($r[2], $re, '... naming the limit');
	like($r[3], qr/HINT:/, '... with a hint');
}
is(sql("SELECT $snapshot"), $before, 'nothing of the refused calls was stored');
is(sql(q{SELECT count(*) FROM wfe.events WHERE detail::text ~ '\\\\u001b|\\\\n'}), '0',
	'no event holds an escape or a newline');

#
# Reopening a run counts against max_runs_in_flight, as a submit does.
#
my $live = sql(q{SELECT count(*) FROM wfe.runs WHERE tenant = 'A' AND finished_at IS NULL});
sql("SELECT wfe.configure_tenant('A', max_runs_in_flight => $live)");
$before = sql("SELECT $snapshot");
($st, undef, $msg, my $err) = login('operator_a', "SELECT wfe.redrive($a_failed, 'work')");
is($st, '53400', "at the limit ($live runs in flight) redrive of a failed run is refused: 53400");
like($msg, qr/tenant "A" has $live runs in flight, its max_runs_in_flight/, '... naming the limit');
like($err, qr/HINT:\s+Redrive again when a run has finished/, '... with a hint');
($st) = login('operator_a', "SELECT wfe.skip_stage($a_failed, 'work', '{}')");
is($st, '53400', '... and so is skip_stage, which would reopen it too');
($st, $o, undef, $err) = login('operator_a', q{SELECT wfe.redrive_dead_letters('qa')});
is("$st|$o", '|0', '... redrive_dead_letters passes the stage over');
like($err, qr/NOTICE:.*passed over 1 stage\(s\).*max_runs_in_flight/, '... and says so');
is(sql("SELECT $snapshot"), $before, '... and nothing of A changed: the run stays failed, its dead letter open');
($st, $o) = login('operator_a', "SELECT wfe.redrive($a_running, 'work')");
is($st, '55000', 'a redrive that reopens nothing is not counted (the core answers: the stage is running)');

# room again: the redrive reopens the run
($st, $o) = login('operator_a', "SELECT wfe.cancel_run($a_queued, 'make room')");
is("$st|$o", '|accepted', 'operator_a cancels a run: room for one');
($st) = login('operator_a', "SELECT wfe.redrive($a_failed, 'work', 'room again')");
is($st, '', 'with room the redrive reopens the run');
is(sql("SELECT state FROM wfe.runs WHERE run_id = $a_failed"), 'running', '... which is running');
is(sql(q{SELECT count(*) FROM wfe.runs WHERE tenant = 'A' AND finished_at IS NULL}), $live, '... at the limit again');
($st) = login('operator_a', "SELECT wfe.replay($a_shared)");
is($st, '53400', 'replay is a submit and is counted too');

done_testing();
