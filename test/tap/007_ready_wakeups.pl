# Wakeups only for claimers that may wait (src/bgw/ready.c): with shared memory
# (shared_preload_libraries = 'wfe'), a release of a task to a poll queue
# sends NOTIFY wfe_task_ready (payload: the queue) at commit only if some
# claimer of that queue may be waiting, that is, one started a claim since
# the last notifying commit and did not get a full batch.  Real sessions:
# a listener L that never claims, a poller P that LISTENs and claims, and a
# submitter S; notifications are what psql prints after a query.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);

my $node = PostgreSQL::Test::Cluster->new('wfe_ready');
$node->init;
$node->append_conf('postgresql.conf',
	"shared_preload_libraries = 'wfe'\n" . "wfe.database = 'postgres'\n");
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION wfe');
ok( $node->poll_query_until(
		'postgres', 'SELECT pid IS NOT NULL AND rounds > 0 FROM wfe.worker_status()'),
	'the worker runs (the library is preloaded: shared memory exists)');

sub sql { return $node->safe_psql('postgres', $_[0]); }

# One queue, one workflow whose first stage is a worker on it.  No other
# queue is ever used, so no other queue's claimers share its slot.
my $queue = 'tap-ready-q';
sql("SELECT wfe.register_worker('tap.ready\@1', '$queue')");
sql(<<"SQL");
SELECT wfe.create_definition(\$y\$
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
\$y\$);
SELECT wfe.approve('tap-ready', '1.0.0');
SELECT wfe.activate('tap-ready', '1.0.0');
SQL
my $submit = "SELECT run_id FROM wfe.submit('tap-ready', '{}')";

# Sessions, each with the wfe_task_ready payloads it has heard and not yet
# been asked about.
my %s;
my %notes;
for my $name (qw(L P S))
{
	$s{$name} = $node->background_psql('postgres');
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
is(await_note('P', $queue), $queue, 'short claim: a release notifies P with the queue as payload, once');
is(await_note('L', $queue), $queue, 'short claim: L hears it too');
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
is(await_note('P', $queue), $queue, 'one transaction: P hears exactly one notification after COMMIT');
is(await_note('L', $queue), $queue, 'one transaction: so does L');

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
is(await_note('P', $queue), $queue, 'wfe.notify on again: P, still waiting, is notified');
is(await_note('L', $queue), $queue, 'wfe.notify on again: so is L');
is(p_claim(10), "$r6a,$r6b", 'P claims both tasks; the rolled-back one never existed');

$s{$_}->quit for qw(L P S);
$node->stop;
done_testing();
