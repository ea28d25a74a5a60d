# Who may signal a run, and what a refused signal leaves behind (runtime.md
# "Signals"; issue 21).
#
# Tenants A and B.  A run of tenant A waits for sig.approval@1.  Real
# logins attack it:
#
# - a member of A without grant_signal: 42501, nothing changed;
# - a member of B holding the grant: `unknown`, exactly the answer for a run
#   that does not exist, and nothing changed;
# - a member of A holding the grant, with a payload its schema refuses, a
#   payload over wfe.max_payload_bytes, one deeper than wfe.max_json_depth,
#   and a signal the plan never waits for: 22023 / 54000, nothing kept;
# - then its valid signal is accepted and the run moves on; after
#   revoke_signal the same login is refused again (42501).
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Digest::SHA qw(hmac_sha256_hex);
use WfeLogin;
use WfeNode;

my $node = WfeNode::node('wfe_signals');
sub sql { return $node->safe_psql('postgres', $_[0]); }

# login(ROLE, SQL): run SQL as login ROLE; (SQLSTATE or '', stdout, message)
sub login
{
	my $r = WfeLogin::as_login($node, @_);
	return ($r->{state}, $r->{out}, $r->{msg});
}

sql(q{SELECT wfe.register_signal('sig.approval@1',
  '{"type": "object", "required": ["approved"], "properties": {"approved": {"type": "boolean"}}}')});
sql(q{SELECT wfe.register_signal('sig.other@1')});
WfeNode::workflow($node, <<'YAML');
name: review
version: "1.0.0"
entry: approve
stages:
  - name: approve
    type: wait
    signal: sig.approval@1
    timeout_ms: 86400000
    on_success: completed
    on_failure: failed
YAML
WfeNode::logins($node,
	nogrant_a => 'wfe_submitter A',
	sender_a => 'wfe_submitter A',
	sender_b => 'wfe_submitter B');
sql(q{
SELECT wfe.grant_signal('sender_a', 'sig.approval@1');
SELECT wfe.grant_signal('sender_a', 'sig.other@1');
SELECT wfe.grant_signal('sender_b', 'sig.approval@1');});

my $run = sql(q{SELECT run_id FROM wfe.submit('review', '{}', 'order-1', '{"tenant": "A"}')});
is(sql("SELECT state FROM wfe.run_stages WHERE run_id = $run"), 'running', 'the wait is released');
my $missing = 987654321;

# Everything of tenant A, as text.
my $snapshot = join(" || '#' || ",
	map { "coalesce((SELECT string_agg(x::text, ',' ORDER BY x::text) FROM wfe.$_ AS x WHERE x.tenant = 'A'), '')" }
	  qw(runs run_stages events timers signals));
my $before = sql("SELECT $snapshot");
my $valid = q{'{"approved": true}'};

my ($st, $o, $msg) = login('nogrant_a', "SELECT wfe.signal($run, 'sig.approval\@1', $valid)");
is($st, '42501', 'a member of A without grant_signal: 42501');
like($msg, qr/permission denied to send signal "sig.approval\@1"/, '... naming the signal');
is(sql("SELECT $snapshot"), $before, '... and nothing of A changed');

my @a = login('sender_b', "SELECT wfe.signal($run, 'sig.approval\@1', $valid)");
my @m = login('sender_b', "SELECT wfe.signal($missing, 'sig.approval\@1', $valid)");
is("$a[0]|$a[1]", '|unknown', "a granted member of B signalling A's run: unknown");
is("$a[0]|$a[1]|$a[2]", "$m[0]|$m[1]|$m[2]", '... exactly as for a run that does not exist');
is(sql("SELECT $snapshot"), $before, '... and nothing of A changed');

sql(q{ALTER ROLE sender_a SET wfe.max_payload_bytes = 1024});
my @bad = (
	[ 'a payload its schema refuses', q{'{"approved": "yes"}'}, '22023', qr/\$\.approved: expected boolean/ ],
	[ 'a payload over wfe.max_payload_bytes', q{jsonb_build_object('approved', true, 'pad', repeat('x', 4000))},
		'54000', qr/more than wfe\.max_payload_bytes/ ],
	[ 'a payload deeper than wfe.max_json_depth', q{(repeat('[', 90) || repeat(']', 90))::jsonb},
		'54000', qr/wfe\.max_json_depth/ ],
	[ 'a signal the plan never waits for', q{'{}'}, '22023', qr/does not wait for signal "sig\.other\@1"/, 'sig.other@1' ]);
for my $b (@bad)
{
	my ($name, $payload, $want, $re, $sig) = @$b;
	$sig //= 'sig.approval@1';
	($st, $o, $msg) = login('sender_a', "SELECT wfe.signal($run, '$sig', $payload)");
	is($st, $want, "sender_a, $name: $want");
	like($msg, $re, '... saying why');
	is(sql("SELECT $snapshot"), $before, '... and nothing of A changed (nothing kept)');
}

($st, $o) = login('sender_a', "SELECT wfe.signal($run, 'sig.approval\@1', $valid, 'k1')");
is("$st|$o", '|accepted', 'sender_a, a valid signal: accepted');
is(sql("SELECT state FROM wfe.runs WHERE run_id = $run"), 'completed', '... and the run completed');
is(sql("SELECT sent_by || ' ' || stage FROM wfe.signals WHERE run_id = $run"), 'sender_a approve',
	'... the signal is kept, taken by the wait, with its sender');
($st, $o) = login('sender_a', "SELECT wfe.signal($run, 'sig.approval\@1', $valid, 'k1')");
is("$st|$o", '|duplicate', 'the same again: duplicate');

# A signed signal through a gateway (wfe.callback's "call": "signal" body):
# the gateway's login needs the grant and the tenant like any sender.
my $secret = 'aa' x 32;
sql(qq{CREATE ROLE gw LOGIN IN ROLE wfe_worker;
SELECT wfe.add_tenant_member('gw', 'A');
SELECT wfe.grant_signal('gw', 'sig.approval\@1');
INSERT INTO wfe.callback_keys (key_id, secret, valid_from) VALUES ('gw1', '\\x$secret', now() - interval '1 hour');});
my $run2 = sql(q{SELECT run_id FROM wfe.submit('review', '{}', 'order-2', '{"tenant": "A"}')});
my $ts = int(sql('SELECT floor(extract(epoch FROM now()))::bigint'));
my $body = qq({"call": "signal", "run_id": $run2, "signal": "sig.approval\@1", "payload": {"approved": true}, "idempotency_key": "hook-1", "callback_id": "cb-1", "timestamp": $ts});
my $sig = 'key_id=gw1,v1=' . hmac_sha256_hex("cb-1.$ts.$body", pack('H*', $secret));
my $call = sub { return login($_[0], 'SELECT wfe.callback($b$' . $_[1] . '$b$, $s$' . $_[2] . '$s$)'); };
($st, $o) = $call->('gw', $body, 'key_id=gw1,v1=' . ('0' x 64));
is("$st|$o", '|unauthenticated', 'a signed signal with a bad signature: unauthenticated');
is(sql("SELECT state FROM wfe.run_stages WHERE run_id = $run2"), 'running', '... the wait still waits');
($st, $o) = $call->('gw', $body, $sig);
is("$st|$o", '|accepted', 'a signed signal: accepted');
is(sql("SELECT state FROM wfe.runs WHERE run_id = $run2"), 'completed', '... and the run completed');
($st, $o) = $call->('gw', $body, $sig);
is("$st|$o", '|replayed', 'the same body again: replayed');
sql(q{SELECT wfe.revoke_signal('gw', 'sig.approval@1')});
my $run3 = sql(q{SELECT run_id FROM wfe.submit('review', '{}', 'order-3', '{"tenant": "A"}')});
$body = qq({"call": "signal", "run_id": $run3, "signal": "sig.approval\@1", "payload": {"approved": true}, "callback_id": "cb-2", "timestamp": $ts});
$sig = 'key_id=gw1,v1=' . hmac_sha256_hex("cb-2.$ts.$body", pack('H*', $secret));
($st) = $call->('gw', $body, $sig);
is($st, '42501', 'a signed signal from a gateway without the grant: 42501');
is(sql("SELECT state FROM wfe.run_stages WHERE run_id = $run3"), 'running', '... and the wait still waits');

sql(q{SELECT wfe.revoke_signal('sender_a', 'sig.approval@1')});
($st) = login('sender_a', "SELECT wfe.signal($run, 'sig.approval\@1', $valid, 'k2')");
is($st, '42501', 'after revoke_signal: 42501');
($st, undef, $msg) = login('sender_a', q{SELECT wfe.grant_signal('sender_a', 'sig.approval@1')});
is($st, '42501', 'a sender cannot grant itself a signal');

done_testing();
