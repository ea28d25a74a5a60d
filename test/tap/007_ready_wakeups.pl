# Wakeups only for claimers that may wait (src/bgw/ready.c): with shared memory
# (shared_preload_libraries = 'wfe'), a release of a task to a poll queue
# sends NOTIFY wfe_task_ready (payload: the queue's keyed tag, never its
# name: src/pg/ready_tag.c) at commit only if some claimer of that queue
# may be waiting, that is, one started a claim since the last notifying
# commit and did not get a full batch.  Real sessions: a listener L, a
# login with no wfe role at all (anyone may LISTEN), a poller P, a login
# with wfe_worker and the queue's grant, that LISTENs and claims, and a
# submitter S; notifications are what psql prints after a query.  Last,
# L attacks: it cannot obtain the tag, nor the key.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);
use Digest::SHA qw(sha256 hmac_sha256_hex);
use WfeNode;

my $node = WfeNode::node('wfe_ready', preload => 1);
WfeNode::worker_runs($node, what => 'the worker runs (the library is preloaded: shared memory exists)');

sub sql { return $node->safe_psql('postgres', $_[0]); }

# One queue, one workflow whose first stage is a worker on it.  No other
# queue is ever used, so no other queue's claimers share its slot.
my $queue = 'tap-ready-q';
sql("SELECT wfe.register_worker('tap.ready\@1', '$queue')");
WfeNode::workflow($node, <<"YAML");
name: tap-ready
version: "1.0.0"
entry: work
stages:
  - name: work
    type: worker
    queue: $queue
    worker: tap.ready\@1
    on_success: completed
    on_failure: failed
YAML
my $submit = "SELECT run_id FROM wfe.submit('tap-ready', '{}')";
WfeNode::logins($node, outsider => '', poller => 'wfe_worker');
sql(<<"SQL");
SELECT wfe.grant_queue('poller', '$queue');
SQL

# Sessions, each with the wfe_task_ready payloads it has heard and not yet
# been asked about.
my %s;
my %notes;
my %login = (L => 'outsider', P => 'poller');
for my $name (qw(L P S))
{
	$s{$name} = $node->background_psql('postgres',
		$login{$name} ? (extra_params => [ '-U', $login{$name} ]) : ());
	$notes{$name} = [];
}
$s{$_}->query_safe('LISTEN wfe_task_ready') for qw(L P);

my $note_re =
  qr/^Asynchronous notification "wfe_task_ready" with payload "([^"]*)" received from server process with PID \d+\.\r?$/m;

# Run SQL in session NAME; returns its output without the notification
# lines psql printed, which are kept in %notes.
sub ask
{
	my ($name, $query) = @_;
	my $out = $s{$name}->query_safe($query);
	push @{ $notes{$name} }, $1 while $out =~ /$note_re/g;
	$out =~ s/$note_re\n?//g;
	$out =~ s/\n+\z//;
	return $out;
}

# The payloads session NAME heard since the last call (a round trip first).
sub heard
{
	my ($name) = @_;
	ask($name, 'SELECT 1');
	my @got = @{ $notes{$name} };
	$notes{$name} = [];
	return join(',', @got);
}

# Nothing for L and P within a second: returns "L=...; P=...".
sub quiet
{
	sleep(1);
	return join('; ', map { "$_=" . heard($_) } qw(L P));
}

# Wait (up to the default timeout) until NAME heard PAYLOAD; then one more
# second for duplicates.  Returns all it heard.
sub await_note
{
	my ($name, $payload) = @_;
	my @got;
	my $deadline = time() + $PostgreSQL::Test::Utils::timeout_default;
	while (time() < $deadline)
	{
		my $h = heard($name);
		push @got, split(/,/, $h) if $h ne '';
		last if grep { $_ eq $payload } @got;
		usleep(50_000);
	}
	sleep(1);
	my $h = heard($name);
	push @got, split(/,/, $h) if $h ne '';
	return join(',', @got);
}

# P claims up to MAX tasks; returns their run ids, comma-separated.
sub p_claim
{
	my ($max) = @_;
	my $out = ask('P',
		"SELECT coalesce(string_agg(run_id::text, ',' ORDER BY run_id), '') "
		  . "FROM wfe.claim_task('$queue', 'p', $max)");
	return $out;
}

#
# 0. The probe: what psql prints for a notification is what we look for,
#    and two notifying transactions are heard as two.
#
sql("NOTIFY wfe_task_ready, 'probe'");
sql("NOTIFY wfe_task_ready, 'probe'");
is(await_note('L', 'probe'), 'probe,probe', 'probe: L hears two plain NOTIFYs in two transactions');
is(await_note('P', 'probe'), 'probe,probe', 'probe: so does P');

# The payload P waits for: its queue's tag, which it may ask for.
my $tag = ask('P', "SELECT wfe.ready_tag('$queue')");
like($tag, qr/^[0-9a-f]{64}\z/, "the queue's tag: 64 hex digits (HMAC-SHA256)");
isnt($tag, sql("SELECT encode(sha256(convert_to('$queue', 'UTF8')), 'hex')"),
	'the tag is keyed: not the bare SHA-256 of the name');
is(sql("SELECT wfe._ready_tag('$queue')"), $tag, 'the engine computes the same tag');

#
# 1. Nobody has ever claimed the queue: a release notifies nobody.
#
my $r1 = ask('S', $submit);
like($r1, qr/^\d+$/, 'no claimer yet: a run is submitted to the empty queue');
is(quiet(), 'L=; P=', 'no claimer yet: nothing is notified');

#
# 2. P came up short, so it may wait: a release notifies it.
#
my $d = $node->background_psql('postgres');
is( $d->query_safe("SELECT run_id FROM wfe.claim_task('$queue', 'd', 1)"),
	$r1, 'short claim: another session drains the queue with a full batch of one');
$d->quit;
is(p_claim(1), '', 'short claim: P (listening) finds the queue empty');
is(quiet(), 'L=; P=', 'short claim: still nothing notified');
my $r2 = ask('S', $submit);
is(await_note('P', $tag), $tag, "short claim: a release notifies P with the queue's tag as payload, once");
is(await_note('L', $tag), $tag, 'short claim: L (no wfe role) hears the tag, not the name');
is(p_claim(1), $r2, "short claim: P's next claim returns the released task");

#
# 3. P's last claim was a full batch: it is not waiting, and a release
#    does not notify.
#
my $r3 = ask('S', $submit);
is(quiet(), 'L=; P=', 'full batch: a release after it notifies nobody');

#
# 4. Two releases in one transaction while P waits: one notification, and
#    only after COMMIT.
#
is(p_claim(10), $r3, 'one transaction: P claims the one task left, a short batch of 10');
ask('S', 'BEGIN');
my $r4a = ask('S', $submit);
my $r4b = ask('S', $submit);
is(quiet(), 'L=; P=', 'one transaction: nothing before COMMIT');
ask('S', 'COMMIT');
is(await_note('P', $tag), $tag, 'one transaction: P hears exactly one notification after COMMIT');
is(await_note('L', $tag), $tag, 'one transaction: so does L');

#
# 5. A rolled-back release while P waits notifies nobody.
#
is(p_claim(10), "$r4a,$r4b", 'rollback: P claims both tasks, a short batch: it may wait');
ask('S', 'BEGIN');
ask('S', $submit);
ask('S', 'ROLLBACK');
is(quiet(), 'L=; P=', 'rollback: nothing notified');

#
# 6. wfe.notify = off in the releasing session: nothing, though P waits.
#
ask('S', 'SET wfe.notify = off');
my $r6a = ask('S', $submit);
is(quiet(), 'L=; P=', 'wfe.notify off: a release notifies nobody');
ask('S', 'RESET wfe.notify');
my $r6b = ask('S', $submit);
is(await_note('P', $tag), $tag, 'wfe.notify on again: P, still waiting, is notified');
is(await_note('L', $tag), $tag, 'wfe.notify on again: so is L');
is(p_claim(10), "$r6a,$r6b", 'P claims both tasks; the rolled-back one never existed');

#
# 7. The outsider L, who heard the tags, tries to learn which queue they
#    stand for: every way to the tag or the key is refused, and nothing
#    changed (the key, and the tag P is told).
#
my $key = sql('SELECT encode(key, \'hex\') FROM wfe.ready_key');
my ($rc, $out, $err);
for my $attack (
	[ "SELECT wfe.ready_tag('$queue')", 'wfe.ready_tag' ],
	[ "SELECT wfe._ready_tag('$queue')", 'wfe._ready_tag' ],
	[ 'SELECT key FROM wfe.ready_key', 'the key table' ])
{
	($rc, $out, $err) = $node->psql('postgres', $attack->[0], extra_params => [ '-U', 'outsider' ]);
	ok($rc != 0 && $err =~ /permission denied/ && $out eq '',
		"outsider: $attack->[1] is refused (permission denied), nothing returned")
	  or diag("rc=$rc out=$out err=$err");
}
# as a worker granted wfe_worker but not this queue: refused like claim_task
sql("CREATE ROLE other_worker LOGIN IN ROLE wfe_worker");
($rc, $out, $err) = $node->psql('postgres', "SELECT wfe.ready_tag('$queue')",
	extra_params => [ '-U', 'other_worker' ]);
like($err, qr/role "other_worker" may not listen on queue "tap-ready-q"/,
	'a worker without the grant is refused the tag (42501, as claim_task)');
is($out, '', 'and is told nothing');
is(sql('SELECT encode(key, \'hex\') FROM wfe.ready_key'), $key, 'the attacks changed nothing: the key is the same');
is(ask('P', "SELECT wfe.ready_tag('$queue')"), $tag, "and P's tag is the same");

#
# 8. A new key: every backend uses it from its next transaction, S too,
#    which cached the old one (the table's trigger invalidates the copies).
#
sql("UPDATE wfe.ready_key SET key = sha256('tap-rotated'::bytea)");
my $tag2 = ask('P', "SELECT wfe.ready_tag('$queue')");
isnt($tag2, $tag, 'new key: the tag is another');
is($tag2, hmac_sha256_hex($queue, sha256('tap-rotated')), 'the tag is HMAC-SHA256(key, queue name)');
is(p_claim(10), '', 'new key: P finds the queue empty, it may wait');
my $r8 = ask('S', $submit);
is(await_note('P', $tag2), $tag2, 'new key: the release from S carries the new tag');
is(await_note('L', $tag2), $tag2, 'and L hears the new tag');
is(p_claim(10), $r8, 'P claims the task');

$s{$_}->quit for qw(L P S);
$node->stop;
done_testing();
