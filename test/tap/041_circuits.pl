# Circuit breakers (operations.md "Flow control"; seed 003: when it stops trying).
#
# 1. Bad input: a failure_ratio outside (0, 1], a non-positive min_calls,
#    window_ms or open_ms, an unknown queue: 22023 naming the parameter.
# 2. Real logins: a login with no wfe role, a worker, and an operator may
#    not configure a circuit; no role and a worker may not reset one;
#    refused (42501), and nothing changed.
# 3. The breaker: min_calls attempts failing open the circuit
#    (circuit.opened); queued work stays queued, is not claimed, and shows
#    in dashboard_stuck; the background worker's timer (its poll interval is
#    an hour) half opens it after open_ms (circuit.half_open); exactly one
#    probe is claimed; its failure opens it again, and after open_ms the
#    next probe's success closes it (circuit.closed) and the rest go.
# 3b. Only the probe's own end decides a half-open circuit: attempts
#    released before it opened end meanwhile, count in the window and
#    neither close it nor open it again; a cancelled probe is given back
#    and the next claim takes another (poll claims; broker dispatches:
#    056_broker_rate_circuit.pl).
# 4. reset_circuit closes an open circuit at once; failure_ratio NULL drops it.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use WfeNode;

my $node = WfeNode::node('wfe_circuits', preload => 1, conf => "wfe.poll_interval_ms = 3600000\n");
WfeNode::worker_runs($node, rounds => 0);

sub sql { return $node->safe_psql('postgres', $_[0]); }

# psql logged in as LOGIN: (exit status, stderr)
sub as_login
{
	my ($login, $query) = @_;
	my ($out, $err) = ('', '');
	my $status = $node->psql('postgres', "\\set VERBOSITY verbose\n$query",
		stdout => \$out, stderr => \$err, extra_params => ['-U', $login]);
	return ($status, $err);
}

WfeNode::logins($node,
	root_admin => 'wfe_admin',
	nobody => '',
	a_worker => 'wfe_worker',
	an_operator => 'wfe_operator');
sql(q{SELECT wfe.register_worker('tap.cb@1', 'cbq');});
WfeNode::workflow($node, <<'YAML');
name: cb
version: "1.0.0"
entry: a
stages:
  - name: a
    type: worker
    queue: cbq
    worker: tap.cb@1
    on_success: completed
    on_failure: failed
YAML

# --- 1. bad input -----------------------------------------------------------
my ($st, $err);
for my $case (
	[ q{'cbq', 0},                 qr/22023.*failure_ratio must be in \(0, 1\]/s, 'a failure_ratio of 0' ],
	[ q{'cbq', 1.5},               qr/22023.*failure_ratio must be in \(0, 1\]/s, 'a failure_ratio of 1.5' ],
	[ q{'cbq', -0.1},              qr/22023.*failure_ratio/s,                    'a negative failure_ratio' ],
	[ q{'cbq', 0.5, 0},            qr/22023.*min_calls must be a positive/s,     'a min_calls of 0' ],
	[ q{'cbq', 0.5, 5, -1},        qr/22023.*window_ms must be a positive/s,     'a negative window_ms' ],
	[ q{'cbq', 0.5, 5, 1000, 0},   qr/22023.*open_ms must be a positive/s,       'an open_ms of 0' ],
	[ q{'nosuchq', 0.5},           qr/22023.*queue "nosuchq" is not known/s,     'an unknown queue' ])
{
	($st, $err) = as_login('root_admin', "SELECT wfe.configure_circuit($case->[0])");
	like($err, $case->[1], "$case->[2] is refused (22023), naming it");
}
($st, $err) = as_login('root_admin', q{SELECT wfe.reset_circuit('cbq')});
like($err, qr/22023.*has no circuit/s, 'resetting a queue without a circuit is refused (22023)');
is(sql('SELECT count(*) FROM wfe.circuits'), '0', 'and nothing was configured');

# --- 2. real logins ---------------------------------------------------------
for my $login ('nobody', 'a_worker', 'an_operator')
{
	($st, $err) = as_login($login, q{SELECT wfe.configure_circuit('cbq', 0.5)});
	like($err, qr/42501|permission denied/, "$login may not configure a circuit");
}
is(sql('SELECT count(*) FROM wfe.circuits'), '0', 'and no circuit was made');
($st, $err) = as_login('root_admin', q{SELECT wfe.configure_circuit('cbq', 0.5, 4, 60000, 8000)});
is($st, 0, 'an admin configures a circuit') or diag $err;
sql(q{UPDATE wfe.circuits SET state = 'open', since = now() + interval '1 hour'});
for my $login ('nobody', 'a_worker')
{
	($st, $err) = as_login($login, q{SELECT wfe.reset_circuit('cbq')});
	like($err, qr/42501|permission denied/, "$login may not reset a circuit");
	($st, $err) = as_login($login, q{UPDATE wfe.circuits SET state = 'closed'});
	like($err, qr/42501|permission denied/, "$login may not write the circuit's row");
}
($st, $err) = as_login('an_operator', q{UPDATE wfe.circuits SET state = 'closed'});
like($err, qr/42501|permission denied/, 'an operator may not write the row either');
is(sql(q{SELECT state FROM wfe.circuits WHERE queue = 'cbq'}), 'open', 'and the circuit is still open');
($st, $err) = as_login('an_operator', q{SELECT wfe.reset_circuit('cbq')});
is($st, 0, 'an operator resets it') or diag $err;
is(sql(q{SELECT state FROM wfe.circuits WHERE queue = 'cbq'}), 'closed', 'closed');
is(sql(q{SELECT count(*) FROM wfe.events WHERE type = 'circuit.closed' AND detail ->> 'queue' = 'cbq'}),
	'1', 'circuit.closed was logged');

# --- 3. the breaker ---------------------------------------------------------
sql(q{SELECT wfe.submit('cb', '{}') FROM generate_series(1, 10)});

# claim up to N tasks and end each with OUTCOME (complete | fail); the count
sub claim_end
{
	my ($n, $outcome) = @_;
	my $end = $outcome eq 'fail'
	  ? q{wfe.fail_task(t.run_id, t.stage, t.attempt, t.fence, '{"error": "down"}', false)}
	  : q{wfe.complete_task(t.run_id, t.stage, t.attempt, t.fence, '{}')};
	return sql(qq{
DO \$\$
DECLARE t wfe.task; n int := 0;
BEGIN
    FOR t IN SELECT * FROM wfe.claim_task('cbq', 'w', $n) LOOP
        PERFORM $end;
        n := n + 1;
    END LOOP;
    RAISE NOTICE 'claimed %', n;
END
\$\$; SELECT count(*) FROM wfe.run_stages WHERE queue = 'cbq' AND state IN ('completed', 'failed')});
}
is(claim_end(4, 'fail'), '4', 'four attempts claimed and failed');
is(sql(q{SELECT state FROM wfe.circuits WHERE queue = 'cbq'}), 'open', '4 of 4 failed at ratio 0.5, min_calls 4: open');
is(sql(q{SELECT count(*) FROM wfe.events WHERE type = 'circuit.opened'}), '1', 'circuit.opened was logged');
is(sql(q{SELECT count(*) FROM wfe.claim_task('cbq', 'w', 5)}), '0', 'an open circuit releases nothing');
is(sql(q{SELECT count(*) FROM wfe.run_stages WHERE queue = 'cbq' AND state = 'queued'}), '6',
	'its work stays queued');
is(sql(q{SELECT count(*) FROM wfe.dashboard_stuck WHERE problem = 'circuit open'}), '6',
	'and shows in dashboard_stuck as circuit open');
ok($node->poll_query_until('postgres', q{SELECT state = 'half_open' FROM wfe.circuits WHERE queue = 'cbq'}),
	"the worker's timer half opens it after open_ms (its poll interval is an hour)");
is(sql(q{SELECT count(*) FROM wfe.events WHERE type = 'circuit.half_open'}), '1', 'circuit.half_open was logged');
is(sql(q{SELECT count(*) FROM wfe.claim_task('cbq', 'w', 5)}), '1', 'half open: one probe of 5 asked is claimed');
is(sql(q{SELECT count(*) FROM wfe.claim_task('cbq', 'w', 5)}), '0', 'a second claim gets none');
# the probe fails: open again
sql(q{SELECT wfe.fail_task(st.run_id, st.stage, st.attempt, st.fence, '{}', false)
        FROM wfe.run_stages AS st WHERE st.queue = 'cbq' AND st.state IN ('dispatched', 'running')});
is(sql(q{SELECT state FROM wfe.circuits WHERE queue = 'cbq'}), 'open', "the probe's failure opens it again");
is(sql(q{SELECT count(*) FROM wfe.events WHERE type = 'circuit.opened'}), '2', 'circuit.opened logged again');
ok($node->poll_query_until('postgres', q{SELECT state = 'half_open' FROM wfe.circuits WHERE queue = 'cbq'}),
	'half open again after open_ms');
is(claim_end(5, 'complete'), '6', "the next probe is claimed and succeeds");
is(sql(q{SELECT state FROM wfe.circuits WHERE queue = 'cbq'}), 'closed', "the probe's success closes it");
is(sql(q{SELECT count(*) FROM wfe.events WHERE type = 'circuit.closed'}), '2', 'circuit.closed was logged');
is(sql(q{SELECT count(*) FROM wfe.claim_task('cbq', 'w', 10)}), '4', 'closed: the rest go');

# --- 3b. only the probe's own end decides -------------------------------------
# The four just claimed are out, released while the circuit was closed; it
# opens and half opens meanwhile (by hand: the cool-down is tested above).
sub circuit { return sql(q{SELECT state || ' ' || probe_out FROM wfe.circuits WHERE queue = 'cbq'}); }

# end the oldest running attempt claimed by WORKER: complete | fail
sub end_one
{
	my ($worker, $outcome) = @_;
	my $end = $outcome eq 'fail'
	  ? q{wfe.fail_task(t.run_id, t.stage, t.attempt, t.fence, '{"error": "down"}', false)}
	  : q{wfe.complete_task(t.run_id, t.stage, t.attempt, t.fence, '{}')};
	return sql(qq{SELECT $end FROM wfe.run_stages AS t
                   WHERE t.queue = 'cbq' AND t.state = 'running' AND t.claimed_by = '$worker'
                   ORDER BY t.run_id LIMIT 1});
}
sql(q{UPDATE wfe.circuits SET state = 'half_open', since = now() WHERE queue = 'cbq'});
sql(q{SELECT wfe.submit('cb', '{}') FROM generate_series(1, 3)});
my $probe = sql(q{SELECT run_id FROM wfe.claim_task('cbq', 'probe1', 5)});
like($probe, qr/^\d+$/, 'half open: one probe is claimed');
is(sql(q{SELECT probe_run_id || ' ' || probe_stage FROM wfe.circuits WHERE queue = 'cbq'}), "$probe a",
	"the circuit keeps the probe's task");
is(end_one('w', 'complete'), 'accepted', 'an attempt released before the circuit opened completes');
is(circuit(), 'half_open true', '... and does not close it: it is not the probe');
end_one('w', 'fail') for 1 .. 3;
is(circuit(), 'half_open true', 'three more fail (over min_calls 4 and the ratio): it does not open again');
is(sql(q{SELECT calls || ' ' || failures FROM wfe.circuits WHERE queue = 'cbq'}), '4 3', '... they count in the window');
is(sql(q{SELECT count(*) FROM wfe.claim_task('cbq', 'w', 5)}), '0', '... and no second probe goes');
sql("SELECT wfe.cancel_run($probe)");
is(circuit(), 'half_open false', 'the probe cancelled: given back, still half open');
my $probe2 = sql(q{SELECT run_id FROM wfe.claim_task('cbq', 'probe2', 5)});
ok($probe2 =~ /^\d+$/ && $probe2 != $probe, 'the next claim takes another probe');
is(end_one('probe2', 'complete'), 'accepted', 'it completes');
is(circuit(), 'closed false', "the probe's own success closes it");
is(sql(q{SELECT count(*) FROM wfe.claim_task('cbq', 'w', 5)}), '1', 'closed: the last one goes');
end_one('w', 'complete');

# --- 4. reset and drop --------------------------------------------------------
sql(q{UPDATE wfe.circuits SET state = 'open', since = now()});
sql(q{SELECT wfe.submit('cb', '{}')});
is(sql(q{SELECT count(*) FROM wfe.claim_task('cbq', 'w', 5)}), '0', 'open again (set by hand): nothing claimed');
sql(q{SET ROLE root_admin; SELECT wfe.configure_circuit('cbq', NULL)});
is(sql('SELECT count(*) FROM wfe.circuits'), '0', 'failure_ratio NULL drops the circuit');
is(sql(q{SELECT count(*) FROM wfe.claim_task('cbq', 'w', 5)}), '1', 'and its held work goes');

$node->stop;
done_testing();
