# Keyed concurrency of map elements on a broker queue (issue 22: elements
# "each with ... flow-control keys of their own"; operations.md "Keyed
# concurrency"), through a real RabbitMQ, as real logins.
#
# 1. Two maps of tenant A whose six elements share the key value c1 (max 2)
#    on a broker queue: two are dispatched at once, four are held at the
#    dispatch (queued, held_until infinity, no dispatch message, in
#    dashboard_stuck), and each map still counts its three as released.
#    RabbitMQ holds the two.
# 2. A worker login takes each message from RabbitMQ and ends its element:
#    that transaction dispatches exactly one held element of c1 (with its own
#    attempt and fence); c1 never has more than two dispatched or running (a
#    trigger logs every change, in its transaction), nor RabbitMQ more than
#    two messages; both maps complete.
# 3. A map failing past tolerated_failures cancels its elements: their key
#    (c5) is free for the other map's held element, dispatched in that
#    transaction.
# 4. Tenant B's elements with the same key value c1 have their own slots
#    beside A's full c1; B's reader sees none of A's keys.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use WfeNode;
use WfeRabbit;
use WfeLogin;

my $rabbit = WfeRabbit->new('brokermapkeys');
$rabbit->start;
my $node = WfeRabbit::wfe_node('wfe_brokermapkeys', $rabbit);
my $mq = 'wfe.bk.small';

sub sql { return $node->safe_psql('postgres', $_[0]); }

# psql as a login: (SQLSTATE or '', stdout, stderr)
sub login
{
	my $r = WfeLogin::as_login($node, @_, strict => 1);
	return ($r->{state}, $r->{out}, $r->{err});
}

# ok_login(ROLE, SQL): WfeLogin::ok_login on this node
sub ok_login { return WfeLogin::ok_login($node, @_); }

WfeNode::tenant_logins($node, [qw(A B)], qw(submitter reader));
WfeNode::logins($node, worker => 'wfe_worker');
sql(q{
SELECT wfe.register_worker('tap.bk@1', 'bk');
SELECT wfe.configure_queue('bk', 'broker');
SELECT wfe.grant_queue('worker', 'bk');});
WfeNode::workflow($node, <<'YAML');
name: per-customer
version: "1.0.0"
entry: m
stages:
  - name: m
    type: map
    items: "${context.parts}"
    item:
      worker: tap.bk@1
      queue: bk
      input: { part: "${item}" }
      retry: { max_attempts: 1 }
      concurrency: { key: "${item.customer}", max: 2 }
    on_success: completed
    on_failure: failed
YAML
WfeRabbit::wait_connected($node, 'start');

# tenant A's elements of key c1 dispatched or running, logged at every change of their rows and dispatches
sql(q{
CREATE TABLE public.key_log (n int);
CREATE FUNCTION public.log_key() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO public.key_log (n)
    SELECT count(*) FROM wfe.run_stages AS s
     WHERE s.queue = 'bk' AND s.tenant = 'A' AND s.concurrency_key = 'c1' AND s.element IS NOT NULL
       AND (s.state IN ('dispatched', 'running')
            OR (s.state = 'queued'
                AND EXISTS (SELECT 1 FROM wfe.outbox AS o
                             WHERE o.run_id = s.run_id AND o.stage = s.stage AND o.attempt = s.attempt
                               AND o.fence = s.fence AND o.kind = 'dispatch')));
    RETURN NULL;
END
$$;
CREATE TRIGGER log_key AFTER INSERT OR UPDATE ON wfe.run_stages
    FOR EACH ROW EXECUTE FUNCTION public.log_key();
CREATE TRIGGER log_key AFTER INSERT ON wfe.outbox
    FOR EACH ROW EXECUTE FUNCTION public.log_key();
});

# tenant T's elements of key K: "dispatched held" (dispatched: a dispatch message of its attempt and fence)
sub key_state
{
	my ($t, $k) = @_;
	return sql(qq{SELECT count(*) FILTER (WHERE s.state IN ('dispatched', 'running')
	                                         OR (s.state = 'queued' AND EXISTS (SELECT 1 FROM wfe.outbox AS o
	                                              WHERE o.run_id = s.run_id AND o.stage = s.stage AND o.attempt = s.attempt
	                                                AND o.fence = s.fence AND o.kind = 'dispatch'))) || ' '
	  || count(*) FILTER (WHERE s.state = 'queued' AND s.held_until = 'infinity'
	                        AND NOT EXISTS (SELECT 1 FROM wfe.outbox AS o WHERE o.run_id = s.run_id AND o.stage = s.stage))
	  FROM wfe.run_stages AS s WHERE s.queue = 'bk' AND s.tenant = '$t' AND s.concurrency_key = '$k'});
}

# the dispatch messages written so far
sub dispatches { return sql(q{SELECT count(*) FROM wfe.outbox WHERE kind = 'dispatch'}); }

# take one dispatch message off RabbitMQ: its envelope
sub consume_one
{
	my @m = $rabbit->probe_json('consume', $mq, 1, 60);
	return @m ? $m[0]{body} : undef;
}

# a worker login accepts the envelope's attempt and ends it (complete, or fail for good)
sub finish
{
	my ($env, $fail) = @_;
	my $call = $fail
	  ? "wfe.fail_task($env->{run_id}, '$env->{stage}', $env->{attempt}, $env->{fence}, '{\"code\": \"bad\"}', false)"
	  : "wfe.complete_task($env->{run_id}, '$env->{stage}', $env->{attempt}, $env->{fence}, '{}')";
	is(ok_login('worker', "SELECT wfe.accept_task($env->{run_id}, '$env->{stage}', $env->{attempt}, $env->{fence}, 'tap-w')"),
		'accepted', "$env->{stage} of run $env->{run_id} is accepted with its envelope's fence");
	return ok_login('worker', "SELECT $call");
}

# --- 1. held at the dispatch ---------------------------------------------------
my $c1x3 = '{"parts": [{"customer": "c1", "n": 0}, {"customer": "c1", "n": 1}, {"customer": "c1", "n": 2}]}';
my @runs = map {
	ok_login('submitter_a', qq{SELECT run_id FROM wfe.submit('per-customer', '$c1x3', NULL, '{"tenant": "A"}')})
} 1 .. 2;
is(key_state('A', 'c1'), '2 4', "max 2: two of c1's six elements are dispatched, four held at the dispatch");
is(dispatches(), 2, 'two dispatch messages in the outbox, none for the held ones');
is(sql("SELECT string_agg(released::text, ' ' ORDER BY run_id) FROM wfe.run_maps WHERE run_id IN ($runs[0], $runs[1])"),
	'3 3', 'each map counts its three elements released (under way), held or not');
my $stuck = ok_login('reader_a',
	q{SELECT stage || ': ' || detail FROM wfe.dashboard_stuck WHERE problem = 'concurrency limited' ORDER BY run_id, stage});
is(scalar(grep { /^m\[\d\]: key full: 2 in flight$/ } split /\n/, $stuck), 4,
	'dashboard_stuck lists the four held elements, and why') or diag($stuck);
WfeRabbit::wait_published($node, 'the first two');
is($rabbit->queue_messages($mq), 2, 'RabbitMQ holds the two dispatched elements, not the held ones');

# --- 2. each end dispatches the next held one ----------------------------------
my $max_queue = 0;
for my $k (1 .. 6)
{
	my $env = consume_one();
	ok($env, "a dispatch message arrived ($k)") or last;
	my $before = dispatches();
	is(finish($env), 'accepted', "$env->{stage} of run $env->{run_id} completes");
	my $next = $k <= 4 ? 1 : 0;
	is(dispatches() - $before, $next, "its transaction dispatched $next held element(s) of c1 ($k)");
	is(key_state('A', 'c1'), ($k <= 4 ? 2 : 6 - $k) . ' ' . ($k <= 4 ? 4 - $k : 0), "c1: dispatched, held ($k)");
	if ($next)
	{
		is(sql(q{SELECT count(*) FROM wfe.outbox AS o JOIN wfe.run_stages AS s
		           ON s.run_id = o.run_id AND s.stage = o.stage AND s.attempt = o.attempt AND s.fence = o.fence
		          WHERE o.kind = 'dispatch' AND o.id = (SELECT max(id) FROM wfe.outbox WHERE kind = 'dispatch')
		            AND s.element IS NOT NULL AND s.held_until IS NULL}),
			1, "... an element's message, with its row's own attempt and fence, no longer held");
	}
	WfeRabbit::wait_published($node, "end $k");
	my $in_queue = $rabbit->queue_messages($mq);
	$max_queue = $in_queue if $in_queue > $max_queue;
}
is(sql('SELECT max(n) FROM public.key_log'), 2, "c1 never had more than two elements dispatched or running (and had two)");
ok($max_queue <= 2, "RabbitMQ never held more than two of c1 ($max_queue)");
is(sql("SELECT string_agg(state, ' ' ORDER BY run_id) FROM wfe.runs WHERE run_id IN ($runs[0], $runs[1])"),
	'completed completed', 'both maps and their runs complete');
is(sql(q{SELECT count(*) FROM wfe.run_stages WHERE held_until IS NOT NULL AND state = 'queued'}), 0, 'nothing is left held');

# --- 3. a map failing past tolerated_failures frees its keys --------------------
my $f1 = ok_login('submitter_a',
	q{SELECT run_id FROM wfe.submit('per-customer', '{"parts": [{"customer": "c5"}, {"customer": "c5"}]}', NULL, '{"tenant": "A"}')});
my $f2 = ok_login('submitter_a',
	q{SELECT run_id FROM wfe.submit('per-customer', '{"parts": [{"customer": "c5"}]}', NULL, '{"tenant": "A"}')});
is(key_state('A', 'c5'), '2 1', "the first map's two elements take c5's two slots; the second map's is held");
is(sql("SELECT count(*) FROM wfe.outbox WHERE run_id = $f2"), 0, '... no message for it');
WfeRabbit::wait_published($node, 'c5');
my $env = consume_one();
$env = consume_one() if $env && $env->{stage} ne 'm[0]';
is("$env->{run_id} $env->{stage}", "$f1 m[0]", "the first map's m[0] arrives");
is(finish($env, 1), 'accepted', 'm[0] fails for good: past tolerated_failures (0)');
is(sql("SELECT state FROM wfe.runs WHERE run_id = $f1") . ' '
	  . sql("SELECT state FROM wfe.run_stages WHERE run_id = $f1 AND stage = 'm[1]'"),
	'failed cancelled', 'the map failed and cancelled its other element');
is(sql("SELECT count(*) FROM wfe.outbox WHERE run_id = $f1 AND stage = 'm[1]' AND kind = 'cancel'"), 1,
	'... with a cancel message to the worker holding it');
is(sql("SELECT count(*) FROM wfe.outbox WHERE run_id = $f2 AND kind = 'dispatch'") . ' ' . key_state('A', 'c5'),
	'1 1 0', "that transaction freed c5 and dispatched the other map's held element");
WfeRabbit::wait_published($node, 'c5 freed');
$env = consume_one();
$env = consume_one() if $env && $env->{run_id} != $f2;
is("$env->{run_id} $env->{stage}", "$f2 m[0]", "the other map's element arrives");
finish($env);
is(sql("SELECT state FROM wfe.runs WHERE run_id = $f2"), 'completed', 'and its run completes');

# --- 4. tenant B's same key value has its own slots -----------------------------
my $a1 = ok_login('submitter_a', qq{SELECT run_id FROM wfe.submit('per-customer', '$c1x3', NULL, '{"tenant": "A"}')});
is(key_state('A', 'c1'), '2 1', "A's c1 is full: two dispatched, one held");
my $b1 = ok_login('submitter_b',
	q{SELECT run_id FROM wfe.submit('per-customer', '{"parts": [{"customer": "c1"}, {"customer": "c1"}]}', NULL, '{"tenant": "B"}')});
is(sql("SELECT count(*) FROM wfe.outbox WHERE run_id = $b1 AND kind = 'dispatch'"), 2,
	"tenant B's two elements of c1 are dispatched beside A's full c1");
is(key_state('A', 'c1') . ' / ' . key_state('B', 'c1'), '2 1 / 2 0', "A's c1 unchanged; B's has its own two slots");
is(ok_login('reader_b', q{SELECT count(*) FROM wfe.run_stages WHERE concurrency_key IS NOT NULL AND tenant = 'A'}),
	'0', "B's reader sees none of A's element keys");

$node->stop;
$rabbit->stop;
done_testing();
