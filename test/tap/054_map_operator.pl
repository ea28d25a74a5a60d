# An operator's fail_stage and redispatch of one map element, and the
# cancel messages to broker workers holding elements (issue 22 item 6;
# docs/operations.md "Operator actions on one element"), with real logins
# and a real RabbitMQ:
# - tenant B's operator acting on A's element is answered exactly as for a
#   run that does not exist (42704, the same message), and names that are
#   not elements (past the end, a leading zero, not a number) are 42704,
#   the map's own name 42809 -- with nothing of the run changed (its rows,
#   counter row, events, timers and outbox);
# - fail_stage of an element a worker is running: failed at once (no
#   retry), counted against tolerated_failures, the worker asked to stop
#   on cancel.<queue> with the fence it holds, its later report stale,
#   its ack_cancel of that fence accepted;
# - redispatch of a dispatched element: a new message with a new fence,
#   the old message's accept stale, the new one's taken;
# - a map failing past tolerated_failures, and a run cancelled, ask each
#   worker holding an element to stop; its ack_cancel is accepted, a
#   stale one (another fence) is stale; the cancelled elements free their
#   queue's max_in_flight room in the same transaction.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use WfeRabbit;
use WfeLogin;
use WfeNode;

my $rabbit = WfeRabbit->new('mapops');
$rabbit->start;
my $node = WfeRabbit::wfe_node('wfe_mapops', $rabbit);

sub sql { return $node->safe_psql('postgres', $_[0]); }

# login(ROLE, SQL): run SQL as login ROLE; (SQLSTATE or '', stdout, message)
sub login
{
	my $r = WfeLogin::as_login($node, @_);
	return ($r->{state}, $r->{out}, $r->{msg});
}

WfeNode::logins($node,
	worker_a => 'wfe_worker A',
	operator_a => 'wfe_operator A',
	operator_b => 'wfe_operator B');
sql(q{SELECT wfe.register_worker('lod@1', 'lods', '{"type": "object"}', '{"type": "object"}');
SELECT wfe.configure_queue('lods', 'broker');
SELECT wfe.grant_queue('worker_a', 'lods');});
WfeNode::workflow($node, <<'YAML');
name: lods
version: "1.0.0"
entry: render
stages:
  - name: render
    type: map
    items: "${context.lods}"
    tolerated_failures: 1
    item:
      worker: lod@1
      queue: lods
      input: { lod: "${item}" }
      retry: { max_attempts: 3, initial_ms: 100 }
    on_success: completed
    on_failure: failed
YAML
WfeRabbit::wait_connected($node, 'start');
# the cancel requests of queue lods, as a broker worker's control consumer binds them
$rabbit->probe_ok('declare-queue', 'tap.cancel');
$rabbit->probe_ok('bind', 'tap.cancel', 'wfe.commands', 'cancel.lods');

sub submit
{
	my ($lods) = @_;
	return sql(qq{SELECT run_id FROM wfe.submit('lods', '{"lods": $lods}', NULL, '{"tenant": "A"}')});
}

# The dispatch messages of N elements, by stage name (the envelope: run_id, stage, attempt, fence).
sub dispatches
{
	my ($n) = @_;
	WfeRabbit::wait_published($node, "$n dispatches");
	my %by = map { ($_->{body}{stage} => $_->{body}) } $rabbit->probe_json('consume', 'wfe.lods.small', $n, 60);
	return \%by;
}

# The cancel messages of N elements, by stage name.
sub cancels
{
	my ($n) = @_;
	WfeRabbit::wait_published($node, "$n cancel messages");
	my %by = map { ($_->{body}{stage} => $_) } $rabbit->probe_json('consume', 'tap.cancel', $n, 60);
	return \%by;
}

# A worker's call as worker_a: its outcome word (or the SQLSTATE).
sub worker
{
	my ($call) = @_;
	my ($s, $o) = login('worker_a', "SELECT $call");
	chomp $o;
	return $s ne '' ? $s : $o;
}

# --- 1. refusals: another tenant, names that are not elements -------------
my $run = submit('["a", "b", "c", "d"]');
my $d = dispatches(4);
is(join(',', sort keys %$d), 'render[0],render[1],render[2],render[3]', 'every element dispatched');
is(worker("wfe.accept_task($run, 'render[0]', 1, $d->{'render[0]'}{fence}, 'worker_a')"), 'accepted',
	'render[0] accepted by its broker worker');
is(worker("wfe.accept_task($run, 'render[2]', 1, $d->{'render[2]'}{fence}, 'worker_a')"), 'accepted',
	'render[2] accepted by its broker worker');

my $snapshot = join(" || '#' || ",
	(map { "coalesce((SELECT string_agg(x::text, ',' ORDER BY x::text) FROM wfe.$_ AS x WHERE x.run_id = $run), '')" }
		  qw(runs run_stages run_maps timers)),
	"(SELECT count(*)::text FROM wfe.events WHERE run_id = $run)",
	"(SELECT count(*)::text FROM wfe.outbox WHERE run_id = $run)");
my $before = sql("SELECT $snapshot");
my $missing = $run + 1000;
for my $call ("wfe.fail_stage(%s, 'render[0]', 'not yours')", "wfe.redispatch(%s, 'render[1]', 'not yours')")
{
	my ($s, undef, $m) = login('operator_b', sprintf("SELECT $call", $run));
	my ($s2, undef, $m2) = login('operator_b', sprintf("SELECT $call", $missing));
	$m =~ s/\b$run\b/N/g;
	$m2 =~ s/\b$missing\b/N/g;
	is("$s|$m", "$s2|$m2", sprintf("tenant B's operator: $call on A's element is answered as for no run ($s)", 'A'));
	is($s, '42704', '... 42704');
}
for my $name ('render[99]', 'render[01]', 'render[x]', 'render[-1]', 'nosuch[0]')
{
	for my $call ("wfe.fail_stage($run, '$name', 'x')", "wfe.redispatch($run, '$name')")
	{
		my ($s) = login('operator_a', "SELECT $call");
		is($s, '42704', "$call: no such element (42704)");
	}
}
for my $call ("wfe.fail_stage($run, 'render', 'x')", "wfe.redispatch($run, 'render')")
{
	my ($s, undef, $m) = login('operator_a', "SELECT $call");
	is($s, '42809', "$call: the map's own name, where an element is meant (42809: $m)");
}
is(sql("SELECT $snapshot"), $before, 'after every refusal, nothing of the run changed (rows, counter row, timers, events, outbox)');

# --- 2. fail_stage of an element a worker runs ----------------------------
my ($s) = login('operator_a', "SELECT wfe.fail_stage($run, 'render[0]', 'the GPU box is gone')");
is($s, '', "operator_a fails A's render[0]");
is(sql("SELECT state || ' ' || attempt || ' ' || (error ->> 'code') FROM wfe.run_stages WHERE run_id = $run AND stage = 'render[0]'"),
	'failed 1 operator.failed', 'render[0] failed at once: attempt 1 of 3, not retried, operator.failed');
is(sql("SELECT failed || ' ' || (SELECT state FROM wfe.run_stages WHERE run_id = $run AND stage = 'render')"
	  . " FROM wfe.run_maps WHERE run_id = $run"), '1 running', 'one failure counted, tolerated: the map goes on');
my $c = cancels(1);
ok($c->{'render[0]'}, 'the worker holding render[0] gets a cancel message');
is($c->{'render[0]'}{routing_key}, 'cancel.lods', '... on cancel.lods');
is($c->{'render[0]'}{body}{fence}, $d->{'render[0]'}{fence}, '... naming the fence it holds');
is(worker("wfe.complete_task($run, 'render[0]', 1, $d->{'render[0]'}{fence}, '{}')"), 'stale',
	'its late completion: stale');
is(sql("SELECT state FROM wfe.run_stages WHERE run_id = $run AND stage = 'render[0]'"), 'failed', '... nothing changed');
is(worker("wfe.ack_cancel($run, 'render[0]', 1, $d->{'render[0]'}{fence})"), 'accepted',
	'its ack_cancel of the fence it held: accepted, as after a cancel');
is(worker("wfe.ack_cancel($run, 'render[0]', 1, $d->{'render[1]'}{fence})"), 'stale', '... another fence: stale');

# --- 3. redispatch of a dispatched element --------------------------------
($s) = login('operator_a', "SELECT wfe.redispatch($run, 'render[1]', 'message lost')");
is($s, '', "operator_a redispatches A's render[1]");
my $d2 = dispatches(1);
ok($d2->{'render[1]'} && $d2->{'render[1]'}{attempt} == 1 && $d2->{'render[1]'}{fence} != $d->{'render[1]'}{fence},
	'a new dispatch message: the same attempt, a new fence');
is(worker("wfe.accept_task($run, 'render[1]', 1, $d->{'render[1]'}{fence}, 'worker_a')"), 'stale',
	"the old message's accept: stale");
is(worker("wfe.accept_task($run, 'render[1]', 1, $d2->{'render[1]'}{fence}, 'worker_a')"), 'accepted',
	"the new message's accept: accepted");
is(worker("wfe.complete_task($run, 'render[1]', 1, $d2->{'render[1]'}{fence}, '{\"url\": \"b\"}')"), 'accepted',
	'... and its completion');

# --- 4. the map fails past tolerated_failures: its running element's worker is asked to stop
is(worker("wfe.accept_task($run, 'render[3]', 1, $d->{'render[3]'}{fence}, 'worker_a')"), 'accepted',
	'render[3] accepted');
is(worker("wfe.fail_task($run, 'render[3]', 1, $d->{'render[3]'}{fence}, '{\"code\": \"bad.lod\"}', false)"),
	'accepted', 'render[3] fails for good: a second failure');
is(sql("SELECT state FROM wfe.runs WHERE run_id = $run"), 'failed', 'the map failed, and the run');
$c = cancels(1);
ok($c->{'render[2]'}, 'the worker running render[2] gets a cancel message');
is($c->{'render[2]'}{body}{fence}, $d->{'render[2]'}{fence}, '... naming the fence it holds');
is(worker("wfe.ack_cancel($run, 'render[2]', 1, $d->{'render[2]'}{fence})"), 'accepted', 'its ack_cancel: accepted');
is(worker("wfe.ack_cancel($run, 'render[2]', 1, $d2->{'render[1]'}{fence})"), 'stale', 'an ack with another fence: stale');
is(worker("wfe.ack_cancel($run, 'render[1]', 1, $d2->{'render[1]'}{fence})"), 'stale',
	'an ack for an element that completed: stale');
is(sql("SELECT count(*) FROM wfe.events WHERE run_id = $run AND stage = 'render[2]' AND type = 'stage.cancel_acknowledged'"),
	'1', 'the accepted ack is recorded');

# --- 5. a run cancelled: each worker holding an element is asked to stop ----
$run = submit('["e", "f", "g"]');
$d = dispatches(3);
is(worker("wfe.accept_task($run, 'render[1]', 1, $d->{'render[1]'}{fence}, 'worker_a')"), 'accepted',
	'render[1] of a new run accepted');
($s, my $o) = login('operator_a', "SELECT wfe.cancel_run($run, 'not needed')");
is("$s|$o", "|accepted", 'operator_a cancels the run');
$c = cancels(3);
is(join(',', sort keys %$c), 'render[0],render[1],render[2]',
	'a cancel message for each element dispatched or running');
is($c->{'render[1]'}{body}{fence}, $d->{'render[1]'}{fence}, "render[1]'s names the fence its worker holds");
is(worker("wfe.ack_cancel($run, 'render[1]', 1, $d->{'render[1]'}{fence})"), 'accepted', 'its ack_cancel: accepted');
is(worker("wfe.ack_cancel($run, 'render[0]', 1, $d->{'render[0]'}{fence})"), 'accepted',
	'a dispatched element\'s worker acknowledges too');
is(worker("wfe.ack_cancel($run, 'render[1]', 2, $d->{'render[1]'}{fence})"), 'stale', 'an ack of another attempt: stale');
is(sql("SELECT string_agg(state, ',' ORDER BY element) FROM wfe.run_stages WHERE run_id = $run AND element IS NOT NULL"),
	'cancelled,cancelled,cancelled', 'every element cancelled');

# --- 6. the elements a map's end cancels free their queue's room at once ----
sql("SELECT wfe.configure_queue('lods', 'broker', 2)");
my $r1 = submit('["h", "i", "j"]');
my $r2 = submit('["k", "l"]');
my $dispatched = "SELECT count(*) FROM wfe.outbox WHERE kind = 'dispatch' AND run_id = %s";
is(sql(sprintf($dispatched, $r1)) . '/' . sql(sprintf($dispatched, $r2)), '2/0',
	'max_in_flight 2: two elements of the first run dispatched, the second run\'s held');
($s) = login('operator_a', "SELECT wfe.cancel_run($r1, 'make room')");
is(sql(sprintf($dispatched, $r2)), '2', "cancelling the first run frees its elements' room: the second run's go");

done_testing();
