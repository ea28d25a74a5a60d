# Relays, workers and readers of two tenants attack each other (issue 20,
# items 2, 6, 7, 8 and 11; docs/operations.md "Security model").  Each
# attack is made by a real login, and asserts the refusal and that nothing
# of the victim changed:
#
# - an external relay (wfe_operator of B) claims and acknowledges only B's
#   outbox rows: A's dispatches (inputs, fences) never reach it, and its
#   outbox_ack cannot mark A's rows published (A's stage would then wait
#   for a message no broker saw);
# - a worker with no grant of A's queue, reporting about A's task in an
#   open transaction, takes no lock: A's worker completes at once;
# - fences: no reader or operator can select one (run_stages.fence,
#   events.fence, timers.fence, the outbox's fence, headers and body), no
#   event's detail carries one, and the dashboards still work for them;
# - accept_task cannot start a poll queue's tasks (55000): four accepts on
#   a max_in_flight = 1 queue take nothing, and a claim still takes one;
# - fetch_payload: a worker granted only queue qb cannot fetch A's large
#   payload of queue qa, however it builds the reference (a hash of a
#   guessed document, A's real attempt and fence): it is answered as for a
#   payload that does not exist; A's worker fetches it; the payload goes
#   with its run's retention;
# - an unsigned callback about A's run is recorded apart from A's events
#   (wfe.unauthenticated_callbacks, for operators): A's reader sees nothing
#   of it; an unauthorised report is recorded under no tenant.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);
use WfeNode;

my $node = WfeNode::node('wfe_relay_tenants');
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
	return ($state // '', $out, $msg // '');
}

# inputs over 1 KiB go on the large track (by reference, wfe.payloads)
sql('ALTER DATABASE postgres SET wfe.track_threshold_bytes = 1024');
WfeNode::logins($node, nobody => '');
WfeNode::tenant_logins($node, [qw(A B)], qw(operator reader submitter worker));
WfeNode::tenant_flows($node, [qw(A B)], "    input: { doc: \"\${context.doc}\" }\n", broker => 1);

# A's document: a large input, dispatched by reference
my $doc = 'contract-of-A ' . ('x' x 2000);
my (undef, $ra) = as('submitter_A', qq{SELECT run_id FROM wfe.submit('flow-a', '{"doc": "$doc"}', NULL, '{"tenant": "A"}')});
my (undef, $rb) = as('submitter_B', q{SELECT run_id FROM wfe.submit('flow-b', '{"doc": "b"}', NULL, '{"tenant": "B"}')});
like($ra, qr/^\d+$/, "A's run is submitted ($ra)");
is(sql("SELECT count(*) FROM wfe.payloads WHERE run_id = $ra"), '1', "A's input is a large-track payload");

# A's state as a string: its runs, stages, outbox rows, payloads, and the
# events A's tenant sees
my $snapshot = "SELECT (SELECT string_agg(r::text, ',') FROM wfe.runs AS r WHERE tenant = 'A') || '|'"
  . " || (SELECT string_agg(st::text, ',' ORDER BY stage) FROM wfe.run_stages AS st WHERE tenant = 'A') || '|'"
  . " || (SELECT string_agg(o.id || ':' || o.state || ':' || coalesce(o.claimed_by, '-'), ',' ORDER BY o.id)"
  . "       FROM wfe.outbox AS o WHERE tenant = 'A') || '|'"
  . " || (SELECT count(*) FROM wfe.payloads WHERE tenant = 'A') || '|'"
  . " || (SELECT string_agg(e.type, ',' ORDER BY e.event_id) FROM wfe.events AS e WHERE tenant = 'A')";
my $before = sql($snapshot);

#
# Item 2: a relay of B claims and acknowledges B's rows only.
#
my ($st, $o) = as('operator_B', q{SELECT string_agg(DISTINCT tenant, ',') || ' ' || count(*) FROM wfe.outbox_claim(100, 'relay-b')});
is($st, '', "B's relay claims");
like($o, qr/^B \d+$/, "B's relay claims B's rows and none of A's ($o)");
my $a_ids = sql("SELECT string_agg(id::text, ',') FROM wfe.outbox WHERE tenant = 'A'");
($st, $o) = as('operator_B', "SELECT wfe.outbox_ack(ARRAY[$a_ids]::bigint[], 'relay-b')");
is($o, '0', "B's relay cannot mark A's pending rows published");
is(sql($snapshot), $before, '... and nothing of A changed');
# A's relay claims its rows; B, naming A's relay, still marks nothing
($st, $o) = as('operator_A', q{SELECT string_agg(DISTINCT tenant, ',') || ' ' || count(*) FROM wfe.outbox_claim(100, 'relay-a')});
like($o, qr/^A \d+$/, "A's relay claims A's rows ($o)");
my $claimed = sql($snapshot);
($st, $o) = as('operator_B', "SELECT wfe.outbox_ack(ARRAY[$a_ids]::bigint[], 'relay-a')");
is($o, '0', "B's relay, naming A's relay, cannot acknowledge A's claimed rows");
is(sql($snapshot), $claimed, "... A's rows stay claimed by A's relay and its stage queued");
is(sql("SELECT state FROM wfe.run_stages WHERE run_id = $ra"), 'queued', "A's stage is still queued");
($st, $o) = as('operator_A', "SELECT wfe.outbox_ack(ARRAY[$a_ids]::bigint[], 'relay-a')");
ok($o > 0, "A's relay acknowledges its rows ($o)");
is(sql("SELECT state FROM wfe.run_stages WHERE run_id = $ra"), 'dispatched', "... and A's stage is dispatched");
$before = sql($snapshot);

#
# Item 7: fences are kept from readers and operators.
#
for my $r (qw(reader_A operator_A))
{
	for my $q ('SELECT fence FROM wfe.run_stages', 'SELECT fence FROM wfe.events', 'SELECT fence FROM wfe.timers',
		'SELECT fence FROM wfe.outbox', 'SELECT body FROM wfe.outbox', 'SELECT headers FROM wfe.outbox',
		'SELECT * FROM wfe.run_stages')
	{
		($st) = as($r, $q);
		is($st, '42501', "$r: $q is refused");
	}
	($st, $o) = as($r, "SELECT count(*) FROM wfe.run_stages WHERE run_id = $ra AND state = 'dispatched'");
	is("$st $o", ' 1', "$r still reads the other columns of its tenant's stages");
	($st, $o) = as($r, "SELECT count(*) > 0 FROM wfe.events WHERE run_id = $ra AND type = 'stage.released'");
	is("$st $o", ' t', "$r still reads its tenant's events");
	($st, $o) = as($r, 'SELECT (SELECT count(*) FROM wfe.dashboard_stuck) + (SELECT count(*) FROM wfe.dashboard_queues) >= 0');
	is("$st $o", ' t', "$r still reads the dashboards");
}
is(sql(q{SELECT count(*) FROM wfe.events WHERE detail::text LIKE '%fence%'}), '0', 'no event detail carries a fence');
is(sql("SELECT e.fence = s.fence FROM wfe.events AS e JOIN wfe.run_stages AS s USING (run_id, stage)"
	  . " WHERE e.run_id = $ra AND e.type = 'stage.released'"),
	't', "stage.released names its fence in the events' fence column");
($st) = as('reader_A', 'SELECT count(*) FROM wfe.unauthenticated_callbacks');
is($st, '42501', 'a reader cannot read the unauthenticated callbacks');

# accept_task on a poll queue: refused, nothing taken past max_in_flight = 1
sql(q{SELECT wfe.configure_queue('qp', 'poll', 1); SELECT wfe.register_worker('t.qp@1', 'qp');
SELECT wfe.grant_queue('worker_A', 'qp');
SELECT wfe.create_definition($y$
name: flow-p
version: "1.0.0"
entry: work
stages:
  - name: work
    type: worker
    queue: qp
    worker: t.qp@1
    on_success: completed
    on_failure: failed
$y$);
SELECT wfe.approve('flow-p', '1.0.0'); SELECT wfe.activate('flow-p', '1.0.0');});
my @rp = map { (as('submitter_A', q{SELECT run_id FROM wfe.submit('flow-p', '{}', NULL, '{"tenant": "A"}')}))[1] } 1 .. 4;
my $poll_state = "SELECT string_agg(state || ':' || coalesce(claimed_by, '-'), ',' ORDER BY run_id) FROM wfe.run_stages WHERE queue = 'qp'";
my $poll_before = sql($poll_state);
for my $r (@rp)
{
	my $f = sql("SELECT attempt || ', ' || fence FROM wfe.run_stages WHERE run_id = $r");
	($st, undef, my $msg) = as('worker_A', "SELECT wfe.accept_task($r, 'work', $f, 'pushy')");
	is($st, '55000', "accept_task of a queued task of poll queue qp (run $r) is refused: $msg");
}
is(sql($poll_state), $poll_before, '... and no task was taken');
($st, $o) = as('worker_A', q{SELECT count(*) FROM wfe.claim_task('qp', 'w', 10)});
is($o, '1', 'claim_task takes one: the queue is at its max_in_flight of 1');

#
# Item 8: fetch_payload is bound to an attempt the caller holds.
#
$before = sql($snapshot);
my $ref = sql("SELECT body -> 'payload_ref' FROM wfe.outbox WHERE run_id = $ra AND kind = 'dispatch'");
my $hash = sql(qq{SELECT encode(sha256(convert_to('{"doc": "$doc"}', 'UTF8')), 'hex')});
like($ref, qr/"sha256": "$hash"/, "the attacker's hash of the guessed document is the key of A's payload");
my @guesses = (
	[ 'a reference of its own making (key only)', qq{{"key": "sha256:$hash", "sha256": "$hash"}} ],
	[ "A's real reference (attempt and fence)", $ref ],
	[ "A's reference with a guessed fence", sql("SELECT jsonb_set('$ref'::jsonb, '{fence}', '1')") ]);
my ($ms) = as('worker_B', "SELECT wfe.fetch_payload('" . sql("SELECT jsonb_set('$ref'::jsonb, '{run_id}', '987654321')") . "')");
for my $g (@guesses)
{
	my ($name, $r) = @$g;
	my ($gst, $gout, $gmsg) = as('worker_B', "SELECT wfe.fetch_payload('$r')");
	isnt($gst, '', "worker_B (granted qb only), $name: refused ($gst $gmsg)");
	unlike($gout, qr/contract-of-A/, '... and gets nothing of the document');
}
($st) = as('worker_B', "SELECT wfe.fetch_payload('$ref')");
is($st, $ms, "worker_B: A's real reference answers as a run that does not exist ($st)");
($st) = as('nobody', "SELECT wfe.fetch_payload('$ref')");
is($st, '42501', 'a login with no wfe role cannot call fetch_payload at all');
($st, $o) = as('worker_A', "SELECT wfe.fetch_payload('$ref') ->> 'doc' = '$doc'");
is("$st $o", ' t', "A's worker, holding the attempt, fetches the payload");
is(sql($snapshot), $before, "nothing B's worker did changed A's run or payload");

#
# Item 6: a report without a grant takes no lock (the isolation spec
# grant-before-lock.spec has the interleavings).
#
my $fa = sql("SELECT attempt || ', ' || fence FROM wfe.run_stages WHERE run_id = $ra");
my $stranger = $node->background_psql('postgres');
$stranger->query_safe("SET ROLE worker_B; BEGIN;");
is($stranger->query_safe("SELECT wfe.heartbeat($ra, 'work', $fa)"), 'unknown',
	"worker_B's heartbeat about A's task, in an open transaction: unknown");
is($stranger->query_safe("SELECT wfe.accept_task($ra, 'work', $fa, 'thief')"), 'unknown',
	'... and its accept_task: unknown');
my $t0 = time();
($st, $o) = as('worker_A', "SET lock_timeout = '2s'; SELECT wfe.accept_task($ra, 'work', $fa, 'wa')");
my $waited = time() - $t0;
is("$st $o", ' accepted', "A's worker accepts its task while the stranger's transaction is open");
cmp_ok($waited, '<', 1.5, sprintf("... without waiting for it (%.2f s)", $waited));
($st, $o) = as('worker_A', "SET lock_timeout = '2s'; SELECT wfe.complete_task($ra, 'work', $fa, '{}')");
is("$st $o", ' accepted', "... and completes it");
$stranger->query_safe('COMMIT;');
$stranger->quit;
is(sql("SELECT state FROM wfe.runs WHERE run_id = $ra"), 'completed', "A's run completed");
is(sql("SELECT count(*) FROM wfe.events WHERE run_id = $ra AND tenant = 'A' AND type = 'callback.unknown'"),
	'0', "the stranger's reports are not among A's events");
is(sql("SELECT count(*) FROM wfe.events WHERE run_id = $ra AND tenant = '' AND type = 'callback.unknown'"),
	'2', '... they are recorded under no tenant');

# the payload goes with its run (retention)
sql("UPDATE wfe.runs SET finished_at = now() - interval '2 days' WHERE run_id = $ra");
sql('SELECT wfe._retention(86400, 100)');
is(sql("SELECT count(*) FROM wfe.payloads WHERE run_id = $ra"), '0', "retention removed A's run with its payload");

#
# Item 11: an unsigned callback about B's run is kept from B's events.
#
$before = sql("SELECT count(*) FROM wfe.events WHERE run_id = $rb");
my $body = qq({"call": "complete", "run_id": $rb, "stage": "work", "attempt": 1, "fence": 1, "callback_id": "junk-1", "timestamp": 1, "result": {"x": "\\u001b[31mpwned by a stranger"}});
($st, $o) = as('worker_A', "SELECT wfe.callback('$body', 'key_id=nokey,v1=" . ('0' x 64) . "')");
is("$st $o", ' unauthenticated', 'an unsigned callback about B\'s run is unauthenticated');
is(sql("SELECT count(*) FROM wfe.events WHERE run_id = $rb"), $before, "... it wrote nothing into B's events");
($st, $o) = as('reader_B', "SELECT count(*) FROM wfe.events WHERE run_id = $rb AND type LIKE 'callback.%'");
is("$st $o", ' 0', "B's reader sees no callback event of its run");
($st, $o) = as('operator_B', "SELECT caller || ' ' || run_id || ' ' || (detail ->> 'reason') FROM wfe.unauthenticated_callbacks");
is("$st $o", " worker_a $rb unknown key", 'an operator reads it in wfe.unauthenticated_callbacks, with the login that sent it');
is(sql(q{SELECT count(*) FROM wfe.unauthenticated_callbacks WHERE detail::text LIKE '%pwned%'}), '0',
	'... the body itself (the attacker\'s text) is not kept');

done_testing();
