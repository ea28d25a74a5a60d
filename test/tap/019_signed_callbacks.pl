# Signed callbacks (docs/operations.md "Signed callbacks"): a gateway's
# login reports a worker's result with wfe.callback(body, signature).
#
# Each attack is performed as written, and each refusal is asserted with
# its answer, its record (an event of the run; an unauthenticated body in
# wfe.unauthenticated_callbacks, never among the events) and "nothing
# changed" (the stage row, the remembered callback_ids):
#
#   - authentic bodies: a heartbeat, then a completion, signed by
#     scripts/wfe-sign-callback, are accepted and the run moves on; a fail
#     body fails the next stage and the run;
#   - unauthenticated: a bad signature, an unknown key, a key past its
#     validity, a key not yet valid, a malformed signature header;
#   - expired: a timestamp older and one newer than wfe.callback_tolerance_s;
#   - replayed: the same body again, and a new body reusing a callback_id;
#   - the window's edge: at tolerance 3 s, the same body 2.7 s after its
#     timestamp is replayed and 3.3 s after it expired (exact times on
#     both sides: when expiry compared whole seconds it was accepted again);
#   - the body bound to one attempt: a wrong fence is the gate's stale;
#   - rotation: two secrets of one key_id, two v1= values; either secret
#     alone is accepted while both are valid, the retired one not after;
#   - privileges: a role without wfe_worker cannot call it (42501); a
#     gateway role not granted the queue gets 42501 and burns no
#     callback_id; only wfe_admin may read or write wfe.callback_keys;
#     nobody else may raise the tolerance;
#   - malformed bodies are errors (22P02, 22023) that write nothing.
#
# Run it alone: WFE_TAP_ONLY='017_*' test/harness/run-tap.sh WORKDIR.
use strict;
use warnings;

use Cwd qw(abs_path);
use Digest::SHA qw(hmac_sha256_hex);
use File::Basename qw(dirname);
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);
use WfeNode;

my $top = abs_path(dirname(__FILE__) . '/../..');
my $signer = "$top/scripts/wfe-sign-callback";

# preloaded, so the wfe.* settings are defined before any session sets them
my $node = WfeNode::node('wfe_signed', preload => 1);

sub sql { return $node->safe_psql('postgres', $_[0]); }

# as_role(ROLE, SQL): (SQLSTATE or '', stdout, stderr) of SQL run by login ROLE
sub as_role
{
	my ($role, $q) = @_;
	my ($out, $err) = ('', '');
	$node->psql('postgres', "\\set VERBOSITY verbose\n$q",
		stdout => \$out, stderr => \$err, on_error_stop => 1,
		connstr => $node->connstr('postgres') . " user=$role");
	my ($state) = $err =~ /ERROR:\s+([0-9A-Z]{5}):/;
	return ($state // '', $out, $err);
}

WfeNode::logins($node,
	adm => 'wfe_admin',
	gw => 'wfe_worker',                 # the gateway, granted the queue
	# another gateway, not granted it; it acts for the run's tenant, so it
	# is told why (operations.md "Tenants")
	gw_other => 'wfe_worker default',
	sub => 'wfe_submitter default',
	rdr => 'wfe_reader',
	opr => 'wfe_operator');
sql(<<'SQL');
SELECT wfe.register_worker('sig.step@1', 'sig-jobs');
SELECT wfe.grant_queue('gw', 'sig-jobs');
SQL
WfeNode::workflow($node, <<'YAML');
name: sig-flow
version: "1.0.0"
entry: a
stages:
  - { name: a, type: worker, queue: sig-jobs, worker: sig.step@1, input: { v: "${context.v}" }, on_success: b, on_failure: failed }
  - { name: b, type: worker, queue: sig-jobs, worker: sig.step@1, input: { v: "${context.v}" }, on_success: completed, on_failure: failed }
YAML

# The secrets, in hex: gw1's current one, a wrong one, and rotation's next one.
my %secret = (
	gw1 => '6b1e0c5a9f3d4e7a8b2c1d0e9f8a7b6c5d4e3f2a1b0c9d8e7f6a5b4c3d2e1f00',
	wrong => '00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff',
	next => 'a1a2a3a4a5a6a7a8a9aaabacadaeafb0b1b2b3b4b5b6b7b8b9babbbcbdbebfc0',
	old => 'deadbeefdeadbeefdeadbeefdeadbeefdeadbeefdeadbeefdeadbeefdeadbeef',
	future => 'feedfacefeedfacefeedfacefeedfacefeedfacefeedfacefeedfacefeedface');

# wfe_admin writes the keys directly; a key past its validity and one not yet valid.
{
	my ($state, undef, $err) = as_role('adm', qq{
INSERT INTO wfe.callback_keys (key_id, secret, valid_from)
     VALUES ('gw1', '\\x$secret{gw1}', now() - interval '1 hour');
INSERT INTO wfe.callback_keys VALUES
    ('gw-old', '\\x$secret{old}', now() - interval '2 days', now() - interval '1 day'),
    ('gw-future', '\\x$secret{future}', now() + interval '1 day', NULL);});
	is($state, '', 'wfe_admin writes wfe.callback_keys') or diag($err);
}
is(sql('SELECT count(*) FROM wfe.callback_keys'), '3', 'three keys stored');

# Nobody else may read the secrets, nor write a key.
for my $r (qw(gw sub rdr opr))
{
	my ($state, undef, $err) = as_role($r, 'SELECT secret FROM wfe.callback_keys');
	is($state, '42501', "$r cannot read wfe.callback_keys") or diag($err);
	like($err, qr/permission denied for table callback_keys/, "$r: permission denied for the table");
}
{
	my ($state) = as_role('gw', qq{INSERT INTO wfe.callback_keys VALUES ('evil', '\\x$secret{wrong}', now(), NULL)});
	is($state, '42501', 'a gateway role cannot add a key');
	($state) = as_role('gw', q{UPDATE wfe.callback_keys SET valid_until = NULL});
	is($state, '42501', 'a gateway role cannot extend a key');
}
is(sql('SELECT count(*) FROM wfe.callback_keys'), '3', 'the refused writes added no key');
# The table refuses weak keys, even from wfe_admin.
{
	my ($state) = as_role('adm', q{INSERT INTO wfe.callback_keys VALUES ('short', '\x0102', now(), NULL)});
	is($state, '23514', 'a secret of 2 bytes is refused');
	($state) = as_role('adm', qq{INSERT INTO wfe.callback_keys VALUES ('a,b', '\\x$secret{wrong}', now(), NULL)});
	is($state, '23514', 'a key_id with a comma is refused');
}

# Secret files for the signer (never on its command line).
my %secret_file;
for my $k (keys %secret)
{
	$secret_file{$k} = "$PostgreSQL::Test::Utils::tmp_check/secret-$k";
	open(my $fh, '>', $secret_file{$k}) or die "$secret_file{$k}: $!";
	print $fh "$secret{$k}\n";
	close $fh;
}

# signed_by_script(KEY_ID, BODY, SECRETS...): the signature wfe-sign-callback prints
sub signed_by_script
{
	my ($key_id, $body, @secrets) = @_;
	my ($out, $err) = ('', '');
	IPC::Run::run([ '/usr/bin/python3', $signer, '--key-id', $key_id,
			map { ('--secret-file', $secret_file{$_}) } @secrets ],
		'<', \$body, '>', \$out, '2>', \$err)
	  or die "wfe-sign-callback failed: $err";
	chomp $out;
	return $out;
}

# sign(KEY_ID, CALLBACK_ID, TIMESTAMP, BODY, SECRETS...): the header, computed here
sub sign
{
	my ($key_id, $cid, $ts, $body, @secrets) = @_;
	return join(',', "key_id=$key_id",
		map { 'v1=' . hmac_sha256_hex("$cid.$ts.$body", pack('H*', $secret{$_})) } @secrets);
}

my $n = 0;

# body(CALL, RUN, STAGE, ATTEMPT, FENCE, EXTRA, TIMESTAMP): (callback_id, timestamp, body text)
sub body
{
	my ($call, $run, $stage, $attempt, $fence, $extra, $ts) = @_;
	$ts //= int(sql('SELECT floor(extract(epoch FROM now()))::bigint'));
	my $cid = sprintf('cb-%04d', ++$n);
	return ($cid, $ts,
		qq({"call": "$call", "run_id": $run, "stage": "$stage", "attempt": $attempt, "fence": "$fence", )
		  . ($extra ? "$extra, " : '')
		  . qq("callback_id": "$cid", "timestamp": $ts}));
}

# callback(ROLE, BODY, SIGNATURE): (SQLSTATE or '', answer, stderr)
sub callback
{
	my ($role, $body, $sig) = @_;
	my $q = 'SELECT wfe.callback($b$' . $body . '$b$, $s$' . $sig . '$s$)';
	return as_role($role, $q);
}

my $stage_q = sub {
	my ($run, $stage) = @_;
	return "SELECT state || ' ' || attempt || ' ' || fence || ' ' || coalesce(result::text, '-') || ' ' || coalesce(heartbeat_at::text, '-')"
	  . " FROM wfe.run_stages WHERE run_id = $run AND stage = '$stage'";
};
my $ids_q = 'SELECT count(*) || coalesce(string_agg(callback_id, \',\' ORDER BY callback_id), \'\') FROM wfe.callback_ids';
# the newest refusal: an event, or an unauthenticated callback (kept apart
# from the tenants' events, in wfe.unauthenticated_callbacks)
my $last_event = sub {
	return sql(q{SELECT x.t FROM (
	               SELECT e.at, e.event_id AS id, 0 AS k,
	                      e.type || ' ' || coalesce(e.run_id::text, '-') || ' ' || coalesce(e.detail->>'reason', '-') AS t
	                 FROM wfe.events AS e
	               UNION ALL
	               SELECT u.at, u.id, 1, 'callback.unauthenticated ' || coalesce(u.run_id::text, '-') || ' '
	                      || coalesce(u.detail->>'reason', '-')
	                 FROM wfe.unauthenticated_callbacks AS u) AS x
	              ORDER BY x.at DESC, x.k DESC, x.id DESC LIMIT 1});
};

# A run, its first task claimed by the gateway's worker (through its own login).
my $run = sql(q{SET ROLE sub; SELECT run_id FROM wfe.submit('sig-flow', '{"v": 1}') WHERE accepted});
like($run, qr/^\d+$/, 'a run is submitted');
my ($state, $task, $err) = as_role('gw',
	q{SELECT run_id || ' ' || attempt || ' ' || fence FROM wfe.claim_task('sig-jobs', 'gw-worker-1')});
is($state, '', 'the gateway role claims the task') or diag($err);
my (undef, $attempt, $fence) = split / /, $task;
like($fence, qr/^\d+$/, 'the claim returns a fence');

# refused(WHAT, ROLE, BODY, SIG, ANSWER, EVENT): the answer, the event, nothing changed
sub refused
{
	my ($what, $role, $body, $sig, $answer, $event, $stage) = @_;
	$stage //= 'a';
	my $before = sql($stage_q->($run, $stage));
	my $ids = sql($ids_q);
	my ($st, $out, $e) = callback($role, $body, $sig);
	is($st, '', "$what: an answer, not an error") or diag($e);
	is($out, $answer, "$what: answered $answer");
	if (ref $event)
	{
		like($last_event->(), $event, "$what: recorded as $event");
	}
	else
	{
		is($last_event->(), $event, "$what: recorded as $event");
	}
	is(sql($stage_q->($run, $stage)), $before, "$what: the stage did not change");
	is(sql($ids_q), $ids, "$what: no callback_id remembered");
	return;
}

# -- Unauthenticated ------------------------------------------------------
my @body = body('complete', $run, 'a', $attempt, $fence, '"result": {"forged": true}');
refused('a bad signature', 'gw', $body[2], sign('gw1', @body, 'wrong'),
	'unauthenticated', "callback.unauthenticated $run bad signature");
refused('a signature of another body', 'gw', $body[2] =~ s/"forged": true/"forged": false/r,
	sign('gw1', @body, 'gw1'), 'unauthenticated', "callback.unauthenticated $run bad signature");
refused('an unknown key', 'gw', $body[2], sign('gw9', @body, 'gw1'),
	'unauthenticated', "callback.unauthenticated $run unknown key");
refused('a key past its validity', 'gw', $body[2], sign('gw-old', @body, 'old'),
	'unauthenticated', "callback.unauthenticated $run key not valid now");
refused('a key not yet valid', 'gw', $body[2], sign('gw-future', @body, 'future'),
	'unauthenticated', "callback.unauthenticated $run key not valid now");
refused('a malformed signature', 'gw', $body[2], 'key_id=gw1,v1=xyz',
	'unauthenticated', "callback.unauthenticated $run malformed signature");
refused('a signature header with no v1', 'gw', $body[2], 'key_id=gw1',
	'unauthenticated', "callback.unauthenticated $run malformed signature");
is(sql(qq{SELECT detail->>'key_id' || ' ' || (detail->>'callback_id') || ' ' || caller
           FROM wfe.unauthenticated_callbacks WHERE detail->>'reason' = 'unknown key'}),
	"gw9 $body[0] gw", 'the record names the key, the callback_id and the login that sent it');
is(sql(q{SELECT count(*) FROM wfe.events WHERE type = 'callback.unauthenticated'}), '0',
	'no unauthenticated body is among the events, which the tenants\' readers see');

# -- Expired --------------------------------------------------------------
my $now = int(sql('SELECT floor(extract(epoch FROM now()))::bigint'));
@body = body('complete', $run, 'a', $attempt, $fence, '"result": {"late": true}', $now - 302);
refused('a timestamp 302 s old', 'gw', $body[2], sign('gw1', @body, 'gw1'),
	'expired', qr/^callback\.expired $run timestamp \d+ is more than wfe\.callback_tolerance_s \(300\) from now/);
@body = body('complete', $run, 'a', $attempt, $fence, '"result": {"early": true}', $now + 400);
refused('a timestamp 400 s ahead', 'gw', $body[2], sign('gw1', @body, 'gw1'),
	'expired', qr/^callback\.expired $run timestamp \d+ is more than/);

# -- The body bound to one attempt: the gate's answer ---------------------
@body = body('complete', $run, 'a', $attempt, $fence + 1, '"result": {"guessed": true}');
{
	my $before = sql($stage_q->($run, 'a'));
	my ($st, $out, $e) = callback('gw', $body[2], sign('gw1', @body, 'gw1'));
	is($out, 'stale', 'an authentic body with another fence: the gate answers stale') or diag($e);
	is(sql(q{SELECT type FROM wfe.events ORDER BY event_id DESC LIMIT 1}), 'callback.stale',
		'the gate recorded callback.stale');
	is(sql($stage_q->($run, 'a')), $before, 'the stale body changed nothing');
}
@body = body('complete', $run, 'a', $attempt + 1, $fence, '"result": {"next": true}');
{
	my ($st, $out, $e) = callback('gw', $body[2], sign('gw1', @body, 'gw1'));
	is($out, 'stale', 'an authentic body for another attempt: stale') or diag($e);
}

# -- Privileges ------------------------------------------------------------
@body = body('complete', $run, 'a', $attempt, $fence, '"result": {"other": true}');
{
	my $before = sql($stage_q->($run, 'a'));
	my $ids = sql($ids_q);
	my ($st, $out, $e) = callback('sub', $body[2], sign('gw1', @body, 'gw1'));
	is($st, '42501', 'a role without wfe_worker cannot call wfe.callback');
	like($e, qr/permission denied for function callback/, 'permission denied for the function');
	($st, $out, $e) = callback('gw_other', $body[2], sign('gw1', @body, 'gw1'));
	is($st, '42501', 'a gateway role not granted the queue: 42501') or diag($e);
	like($e, qr/role "gw_other" may not report for queue "sig-jobs"/, 'the queue grant refuses it');
	is(sql($stage_q->($run, 'a')), $before, 'neither refused call changed the stage');
	is(sql($ids_q), $ids, 'the refused call burned no callback_id');
	($st, $out, $e) = as_role('gw', 'SET wfe.callback_tolerance_s = 86400');
	is($st, '42501', 'a gateway role cannot widen the tolerance');
}

# -- Accepted: a heartbeat, then the result, signed by the script ---------
{
	my @hb = body('heartbeat', $run, 'a', $attempt, $fence);
	my $sig = signed_by_script('gw1', $hb[2], 'gw1');
	is($sig, sign('gw1', @hb, 'gw1'), 'wfe-sign-callback computes the signature the test does');
	# docs/operations.md's openssl line, as written there
	my ($mac, $oerr) = ('', '');
	IPC::Run::run([ 'sh', '-c',
			'printf \'%s.%s.%s\' "$1" "$2" "$3" | openssl dgst -sha256 -mac HMAC -macopt hexkey:"$(cat "$4")" -r | cut -d\' \' -f1',
			'sh', $hb[0], $hb[1], $hb[2], $secret_file{gw1} ],
		'>', \$mac, '2>', \$oerr)
	  or diag("openssl: $oerr");
	chomp $mac;
	is("key_id=gw1,v1=$mac", $sig, 'the documented openssl line computes the same signature');
	my ($st, $out, $e) = callback('gw', $hb[2], $sig);
	is($out, 'accepted', 'an authentic heartbeat is accepted') or diag($e);
	like(sql($stage_q->($run, 'a')), qr/^running \d+ \d+ - \d{4}-/, 'the heartbeat was recorded');
}
# --stamp sets callback_id and timestamp; the body it prints is what it signed.
{
	my ($out, $e) = ('', '');
	IPC::Run::run([ '/usr/bin/python3', $signer, '--key-id', 'gw1', '--secret-file', $secret_file{gw1}, '--stamp' ],
		'<', \qq({"call":"heartbeat","run_id":$run,"stage":"a","attempt":$attempt,"fence":"$fence"}), '>', \$out, '2>', \$e)
	  or diag("wfe-sign-callback --stamp: $e");
	my ($stamped, $sig) = split /\n/, $out;
	my ($st, $ans, $err3) = callback('gw', $stamped, $sig);
	is($ans, 'accepted', 'a body stamped and signed by wfe-sign-callback --stamp is accepted') or diag($err3);
}
my $ids_before = sql($ids_q);
@body = body('complete', $run, 'a', $attempt, $fence, '"result": {"v": 41}');
my $good_sig = signed_by_script('gw1', $body[2], 'gw1');
($state, my $answer, $err) = callback('gw', $body[2], $good_sig);
is($answer, 'accepted', 'an authentic completion is accepted') or diag($err);
like(sql($stage_q->($run, 'a')), qr/^completed 1 $fence \{"v": 41\}/, 'stage a completed with the result');
is(sql("SELECT state FROM wfe.run_stages WHERE run_id = $run AND stage = 'b'"), 'queued',
	'the run moved on: stage b is queued');
like(sql($ids_q), qr/\Q$body[0]\E/, 'its callback_id is remembered');

# -- Replayed --------------------------------------------------------------
refused('the same body again', 'gw', $body[2], $good_sig, 'replayed',
	"callback.replayed $run callback_id seen within the tolerance window");
{
	my $reuse = $body[2] =~ s/"v": 41/"v": 42/r;
	refused('a new body reusing the callback_id', 'gw', $reuse, sign('gw1', $body[0], $body[1], $reuse, 'gw1'),
		'replayed', "callback.replayed $run callback_id seen within the tolerance window");
}
is(sql("SELECT result::text FROM wfe.run_stages WHERE run_id = $run AND stage = 'a'"), '{"v": 41}',
	'the result is the first body\'s');

# -- Rotation: a second secret of gw1 ---------------------------------------
($state, undef, $err) = as_role('adm', qq{INSERT INTO wfe.callback_keys (key_id, secret) VALUES ('gw1', '\\x$secret{next}')});
is($state, '', 'wfe_admin adds the next secret of gw1') or diag($err);
($state, $task, $err) = as_role('gw',
	q{SELECT run_id || ' ' || attempt || ' ' || fence FROM wfe.claim_task('sig-jobs', 'gw-worker-1')});
my (undef, $b_attempt, $b_fence) = split / /, $task;
like($b_fence, qr/^\d+$/, 'the gateway claims stage b');
for my $case ([ 'both secrets (old, new)', [ 'gw1', 'next' ] ], [ 'both secrets (new, old)', [ 'next', 'gw1' ] ],
	[ 'the old secret alone', ['gw1'] ], [ 'the new secret alone', ['next'] ],
	[ 'the new secret and a wrong one', [ 'wrong', 'next' ] ])
{
	my ($what, $secrets) = @$case;
	my @hb = body('heartbeat', $run, 'b', $b_attempt, $b_fence);
	my $sig = signed_by_script('gw1', $hb[2], @$secrets);
	my ($st, $out, $e) = callback('gw', $hb[2], $sig);
	is($out, 'accepted', "during the rotation, a body signed with $what is accepted") or diag($e);
}
($state, undef, $err) = as_role('adm',
	qq{UPDATE wfe.callback_keys SET valid_until = now() WHERE key_id = 'gw1' AND secret = '\\x$secret{gw1}'});
is($state, '', 'wfe_admin retires the old secret') or diag($err);
@body = body('heartbeat', $run, 'b', $b_attempt, $b_fence);
refused('after the rotation, the old secret alone', 'gw', $body[2], signed_by_script('gw1', $body[2], 'gw1'),
	'unauthenticated', "callback.unauthenticated $run bad signature", 'b');
@body = body('heartbeat', $run, 'b', $b_attempt, $b_fence);
is((callback('gw', $body[2], signed_by_script('gw1', $body[2], 'gw1', 'next')))[1], 'accepted',
	'after the rotation, both v1= values still pass (the new one matches)');

# -- A fail body fails the stage and the run ---------------------------------
@body = body('fail', $run, 'b', $b_attempt, $b_fence, '"error": {"code": "E42"}, "retryable": false');
($state, $answer, $err) = callback('gw', $body[2], sign('gw1', @body, 'next'));
is($answer, 'accepted', 'an authentic fail is accepted') or diag($err);
is(sql("SELECT st.state || ' ' || (st.error->>'code') || ' ' || r.state FROM wfe.run_stages AS st JOIN wfe.runs AS r USING (run_id)"
	  . " WHERE st.run_id = $run AND st.stage = 'b'"), 'failed E42 failed', 'stage b and the run failed');

# -- Malformed bodies are errors that write nothing ----------------------------
{
	my $events = sql('SELECT count(*) FROM wfe.events');
	my $ids = sql($ids_q);
	my ($st, $out, $e) = callback('gw', 'not json', 'key_id=gw1,v1=00');
	is($st, '22P02', 'a body that is not JSON: 22P02');
	($st, $out, $e) = callback('gw', '[1, 2]', 'key_id=gw1,v1=00');
	is($st, '22023', 'a body that is not an object: 22023');
	like($e, qr/the callback body must be a JSON object/, '... says so');
	($st, $out, $e) = callback('gw', qq({"call": "complete", "run_id": $run, "stage": "a", "attempt": 1, "fence": 1, "timestamp": $now}),
		'key_id=gw1,v1=00');
	is($st, '22023', 'a body without a callback_id: 22023');
	like($e, qr/the callback body's "callback_id" must be a non-empty string/, '... names the field');
	($st, $out, $e) = callback('gw', qq({"call": "cancel", "run_id": $run, "stage": "a", "attempt": 1, "fence": 1, "callback_id": "x", "timestamp": $now}),
		'key_id=gw1,v1=00');
	is($st, '22023', 'an unknown call: 22023');
	like($e, qr/"call" must be "complete", "fail", "heartbeat" or "signal"/, '... lists the calls');
	($st, $out, $e) = callback('gw', qq({"call": "heartbeat", "run_id": $run, "stage": "a", "attempt": 1.5, "fence": 1, "callback_id": "x", "timestamp": $now}),
		'key_id=gw1,v1=00');
	is($st, '22023', 'a fractional attempt: 22023');
	($st, $out, $e) = callback('gw', qq({"call": "heartbeat", "run_id": $run, "stage": "a\\u0007", "attempt": 1, "fence": 1, "callback_id": "x", "timestamp": $now}),
		'key_id=gw1,v1=00');
	is($st, '22023', 'a stage with a control character: 22023 (the admission limits)');
	($st, $out, $e) = callback('gw', qq({"call": "heartbeat", "run_id": $run, "stage": "a", "attempt": 1, "fence": 1, "callback_id": ")
		  . ('x' x 300) . qq(", "timestamp": $now}), 'key_id=gw1,v1=00');
	is($st, '54000', 'a callback_id over wfe.max_name_bytes: 54000 (the admission limits)');
	($st, $out, $e) = as_role('gw', q{SELECT wfe.callback('{}', repeat('v1=00,', 200))});
	is($st, '54000', 'a signature header over 1024 bytes: 54000');
	is(sql('SELECT count(*) FROM wfe.events'), $events, 'the malformed bodies wrote no event');
	is(sql($ids_q), $ids, 'and remembered no callback_id');
}
# The payload limit applies to the body (set here by the superuser).
{
	my ($out, $err2) = ('', '');
	$node->psql('postgres', "SET wfe.max_payload_bytes = 1024;\nSET ROLE gw;\n\\set VERBOSITY verbose\n"
		  . "SELECT wfe.callback(repeat('x', 2000), 'key_id=gw1,v1=00');",
		stdout => \$out, stderr => \$err2);
	like($err2, qr/54000: the callback body is 2000 bytes, more than wfe\.max_payload_bytes \(1024\)/,
		'a body over wfe.max_payload_bytes: 54000');
}

# -- The window's edge: one window, exact times ---------------------------------
# At tolerance 3 s a body's callback_id is remembered until 3 s after its
# timestamp, and from then on the body answers expired: the expiry check
# and the replay memory share one window, to the microsecond.  Before, the
# expiry compared whole seconds while the memory used exact times, and the
# same body was accepted again 3.3 s after its timestamp.
sql(q{ALTER SYSTEM SET wfe.callback_tolerance_s = 3});
sql(q{SELECT pg_reload_conf()});
ok($node->poll_query_until('postgres', q{SELECT current_setting('wfe.callback_tolerance_s') = '3s'}),
	'the tolerance is 3 s for new sessions');
{
	my $edge = sql(q{SET ROLE sub; SELECT run_id FROM wfe.submit('sig-flow', '{"v": 3}') WHERE accepted});
	my ($st, $claimed, $e) = as_role('gw',
		qq{SELECT attempt || ' ' || fence FROM wfe.claim_task('sig-jobs', 'gw-worker-2') WHERE run_id = $edge});
	my ($e_attempt, $e_fence) = split / /, $claimed;
	like($e_fence // '', qr/^\d+$/, 'the gateway claims the new run\'s stage a') or diag($e);
	my $clock = sub { return sql('SELECT extract(epoch FROM clock_timestamp())'); };
	# replay(BODY, SIG, T): (answer, seconds from T to the transaction's now())
	my $replay = sub {
		my ($b, $sg, $t) = @_;
		my ($s2, $out, $e2) = as_role('gw', 'SELECT wfe.callback($b$' . $b . '$b$, $s$' . $sg . '$s$)'
			  . " || ' ' || (extract(epoch FROM now()) - $t)::text");
		diag($e2) if $s2 ne '';
		return split / /, $out;
	};
	my $conclusive = 0;
	# A replay up to 3 s after T must answer replayed, one later expired.
	# Whole seconds got (3, 4) wrong, so a try counts once a replay lands
	# there; a slow machine may need another try with a new body.
	for my $try (1 .. 4)
	{
		usleep(20_000) while ($clock->() =~ /\.(\d)/ ? $1 : 0) >= 3;	# early in a second
		my @hb = body('heartbeat', $edge, 'a', $e_attempt, $e_fence);
		my $sig = sign('gw1', @hb, 'gw1', 'next');
		my ($s1, $first, $e1) = callback('gw', $hb[2], $sig);
		is($first, 'accepted', "edge try $try: the body is accepted") or diag($e1);
		my $row = sql($stage_q->($edge, 'a'));
		my $ids = sql($ids_q);
		my $events = sql('SELECT count(*) FROM wfe.events');
		my $want;
		for my $target (2.0, 3.3)
		{
			usleep(20_000) while $clock->() < $hb[1] + $target;
			my ($answer, $at) = $replay->($hb[2], $sig, $hb[1]);
			$want = $at <= 3 ? 'replayed' : 'expired';
			is($answer, $want, sprintf('edge try %d: the same body %.2f s after its timestamp (tolerance 3 s): %s',
					$try, $at, $want));
			$conclusive = 1 if $at > 3 && $at < 4;
		}
		is(sql(q{SELECT type || ' ' || (detail->>'callback_id') FROM wfe.events ORDER BY event_id DESC LIMIT 1}),
			"callback.$want $hb[0]", "edge try $try: recorded as callback.$want");
		is(sql($stage_q->($edge, 'a')), $row, "edge try $try: neither replay changed the stage (its heartbeat included)");
		is(sql($ids_q), $ids, "edge try $try: nor the remembered callback_ids");
		is(sql('SELECT count(*) FROM wfe.events'), $events + 2, "edge try $try: only the two refusals were written");
		last if $conclusive;
	}
	ok($conclusive, 'a replay landed between tolerance + 0.3 s and tolerance + 1 s');
}
sql(q{ALTER SYSTEM RESET wfe.callback_tolerance_s});
sql(q{SELECT pg_reload_conf()});
$node->poll_query_until('postgres', q{SELECT current_setting('wfe.callback_tolerance_s') = '5min'})
  or die 'the tolerance was not reset';

# Retention removes refusals about runs that do not exist, once old; a
# refusal about a run that exists goes with its run.
{
	my @ghost = body('heartbeat', 987654, 'a', 1, 1);
	my ($st, $out, $e) = callback('gw', $ghost[2], sign('gw1', @ghost, 'wrong'));
	is($out, 'unauthenticated', 'a forged body about a run that does not exist: unauthenticated');
	is(sql(q{SELECT count(*) FROM wfe.unauthenticated_callbacks WHERE run_id = 987654}), '1',
		'recorded in wfe.unauthenticated_callbacks');
	sql(q{UPDATE wfe.events SET at = now() - interval '30 days' WHERE type = 'callback.expired'});
	sql(q{UPDATE wfe.unauthenticated_callbacks SET at = now() - interval '30 days'});
	sql('SELECT wfe._retention(86400, 100)');
	is(sql('SELECT count(*) FROM wfe.unauthenticated_callbacks'), '0',
		'retention removed the old unauthenticated callbacks');
	is(sql(qq{SELECT count(*) FROM wfe.events WHERE type = 'callback.expired' AND run_id = $run}), '2',
		'refusals about an existing run stay while the run does');
}

# pg_dump carries the keys (configuration, secrets included), not the ids seen.
{
	my ($out, $e) = ('', '');
	IPC::Run::run([ 'pg_dump', '-d', $node->connstr('postgres') ], '>', \$out, '2>', \$e)
	  or diag("pg_dump: $e");
	like($out, qr/^COPY wfe\.callback_keys /m, 'pg_dump carries wfe.callback_keys');
	unlike($out, qr/^COPY wfe\.callback_ids /m, 'pg_dump leaves wfe.callback_ids out');
}

$node->stop;
done_testing();
