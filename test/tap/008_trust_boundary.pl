# The trust boundary (docs/operations.md "Security model"), attacked as the
# findings of 0.1.0 were reproduced: each attack is performed as written,
# and each test asserts the refusal AND that nothing changed -- no role
# gained a right, no run changed state, the log holds no forged line.
#
#   1. handlers run as their registrant: a pg_temp handler, a handler of
#      another owner, a body swapped after registration, an escalating body;
#   2. the background worker's SQL cannot be captured by a hostile
#      database-level search_path (domains, operators, aggregates);
#   3. one poisoned run does not stop the others' timers, deadlines and
#      delayed starts (each item of a round is isolated);
#   4. workers cannot forge results: unclaimed attempts, queues not
#      granted, in-database actions, guessed fences;
#   5. CREATE EXTENSION refuses a schema someone else prepared;
#   6. admission limits at the door;
#   7. pg_dump carries the runtime tables, as the docs say;
#   8. a handler acts as its registrant for wfe too: stripped of wfe_admin
#      and mapped to one tenant, it cannot read another tenant's runs,
#      submit into it, or approve its registrant's own version under
#      four eyes (the background worker's superuser identity is not lent);
#   9. no login can freeze the worker or a tenant's admissions: a login
#      with no wfe role and a reader hold the advisory keys wfe's locks used
#      to have, and cannot take wfe's own; timers still fire and submits go
#      through; a transaction holding a run keeps only that run waiting.
use strict;
use warnings;

use File::Basename qw(dirname);
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);

use WfeNode;
use WfeRabbit;

my $rabbit = WfeRabbit->new('trust');
$rabbit->start;
my $node = WfeRabbit::wfe_node('wfe_trust', $rabbit, "wfe.poll_interval_ms = 100\n");
WfeNode::worker_runs($node);

# While the hostile search_path is set (part 2), every session of ours
# names its own path when it connects (PGOPTIONS).
my $db = 'postgres';
sub sql { return $node->safe_psql($db, $_[0]); }

# attempt(SQL, ROLE): run SQL (as ROLE if given); (SQLSTATE or '', stdout, stderr).
sub attempt
{
	my ($q, $role) = @_;
	my ($out, $err) = ('', '');
	$node->psql($db, "\\set VERBOSITY verbose\n" . ($role ? "SET ROLE $role;\n" : '') . $q,
		stdout => \$out, stderr => \$err, on_error_stop => 1);
	my ($state) = $err =~ /ERROR:\s+([0-9A-Z]{5}):/;
	return ($state // '', $out, $err);
}

# refused(SQL, ROLE, SQLSTATE, PATTERN, WHAT): the call raises SQLSTATE with a message matching PATTERN.
sub refused
{
	my ($q, $role, $want, $pattern, $what) = @_;
	my ($state, undef, $err) = attempt($q, $role);
	is($state, $want, "$what: refused with $want") or diag($err);
	like($err, $pattern, "$what: the message says why");
	return;
}

sub superusers { return sql("SELECT string_agg(rolname, ',' ORDER BY rolname) FROM pg_roles WHERE rolsuper"); }
my $superusers = superusers();

# w_a and w_b are workers of the default tenant; w_c of none
WfeNode::logins($node,
	adm => 'wfe_admin',
	mallory => '',
	w_a => 'wfe_worker default',
	w_b => 'wfe_worker default',
	w_c => 'wfe_worker');
sql(<<'SQL');
CREATE SCHEMA adm_s AUTHORIZATION adm;
CREATE SCHEMA mal_s AUTHORIZATION mallory;
CREATE TABLE public.side_effects (what text);
GRANT INSERT, SELECT ON public.side_effects TO PUBLIC;
SQL

# ---------------------------------------------------------------------
# 1. Handlers run as their registrant
# ---------------------------------------------------------------------
my $contracts = sql('SELECT count(*) FROM wfe.contracts');

# (a) a wfe_admin with no CREATE right anywhere registers a pg_temp function
refused(<<'SQL', 'adm', '42501', qr/handler pg_temp_\d+\.evil\(jsonb\) lives in a temporary schema/,
CREATE FUNCTION pg_temp.evil(input jsonb) RETURNS jsonb LANGUAGE plpgsql AS $$
BEGIN EXECUTE 'ALTER ROLE adm SUPERUSER'; RETURN '{}'; END $$;
SELECT wfe.register_action('tb.temp@1', handler => 'pg_temp.evil(jsonb)');
SQL
	'1a: a pg_temp handler');

# (b) a handler owned by a role outside wfe
sql(q{SET ROLE mallory; CREATE FUNCTION mal_s.h(input jsonb) RETURNS jsonb LANGUAGE sql AS $$ SELECT '{}'::jsonb $$;
GRANT USAGE ON SCHEMA mal_s TO PUBLIC;});
refused(q{SELECT wfe.register_action('tb.mal@1', handler => 'mal_s.h(jsonb)');}, 'adm', '42501',
	qr/owned by role "mallory", not by its registrant "adm"/, '1b: a handler another role owns');
is(sql('SELECT count(*) FROM wfe.contracts'), $contracts, '1: the refused registrations stored nothing');

# What a registrant may do: register its own function.  Its body tries to
# make adm a superuser, and records whose rights it ran with.
sql(<<'SQL');
SET ROLE adm;
CREATE FUNCTION adm_s.grab(input jsonb) RETURNS jsonb LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO public.side_effects VALUES ('grab ran as ' || current_user);
    EXECUTE 'ALTER ROLE adm SUPERUSER';
    RETURN '{}';
END $$;
CREATE FUNCTION adm_s.ok(input jsonb) RETURNS jsonb LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO public.side_effects VALUES ('ok ran as ' || current_user);
    RETURN jsonb_build_object('ran_as', current_user);
END $$;
SELECT wfe.register_action('tb.grab@1', handler => 'adm_s.grab(jsonb)');
SELECT wfe.register_action('tb.ok@1', handler => 'adm_s.ok(jsonb)');
SQL
is(sql(q{SELECT string_agg(ref || '=' || run_as::text, ',' ORDER BY ref) FROM wfe.contracts WHERE ref IN ('tb.grab@1', 'tb.ok@1')}),
	'tb.grab@1=adm,tb.ok@1=adm', '1: each contract records the role its handler runs as');

sub action_workflow
{
	my ($name, $action) = @_;
	WfeNode::workflow($node, <<"YAML");
name: $name
version: "1.0.0"
entry: act
stages:
  - name: act
    type: action
    action: $action
    on_success: completed
    on_failure: failed
YAML
	return;
}
action_workflow('tb-grab', 'tb.grab@1');
action_workflow('tb-ok', 'tb.ok@1');

sub run_to_end
{
	my ($workflow, $what) = @_;
	my $run = sql("SELECT run_id FROM wfe.submit('$workflow', '{}')");
	ok($node->poll_query_until($db, "SELECT state IN ('completed', 'failed') FROM wfe.runs WHERE run_id = $run"),
		"$what: the run ended");
	return $run;
}

my $r_ok = run_to_end('tb-ok', '1');
is(sql("SELECT state || ' ' || (SELECT result ->> 'ran_as' FROM wfe.run_stages WHERE run_id = $r_ok) FROM wfe.runs WHERE run_id = $r_ok"),
	'completed adm', '1: a handler runs as its registrant, not as the extension owner');

my $r_grab = run_to_end('tb-grab', '1 (escalation)');
is(sql("SELECT state FROM wfe.runs WHERE run_id = $r_grab"), 'failed', '1: the escalating handler fails its run');
like(sql("SELECT error ->> 'sqlstate' || ' ' || (error ->> 'message') FROM wfe.run_stages WHERE run_id = $r_grab"),
	qr/^42501 /, '1: ... because as adm it may not ALTER ROLE');
is(sql("SELECT count(*) FROM public.side_effects WHERE what = 'grab ran as adm'"), '0',
	'1: and its writes were rolled back');

# (b, 0.1.0's takeover) the handler later belongs to someone else, who
# swaps its body (same OID): the next run refuses to call it
sql('ALTER FUNCTION adm_s.ok(jsonb) SET SCHEMA mal_s; ALTER FUNCTION mal_s.ok(jsonb) OWNER TO mallory');
sql(<<'SQL');
SET ROLE mallory;
CREATE OR REPLACE FUNCTION mal_s.ok(input jsonb) RETURNS jsonb LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO public.side_effects VALUES ('swapped body ran as ' || current_user);
    EXECUTE 'ALTER ROLE mallory SUPERUSER';
    RETURN '{}';
END $$;
SQL
my $r_swap = run_to_end('tb-ok', '1b (swapped body)');
is(sql("SELECT state FROM wfe.runs WHERE run_id = $r_swap"), 'failed', '1b: the run whose handler changed owner fails');
like(sql("SELECT error ->> 'message' FROM wfe.run_stages WHERE run_id = $r_swap"),
	qr/owned by role "mallory", not by its registrant "adm"/, '1b: the attempt names the reason');
is(sql(q{SELECT count(*) FROM public.side_effects WHERE what LIKE 'swapped%'}), '0', '1b: the swapped body never ran');
is(superusers(), $superusers, '1: nobody became a superuser');

# ---------------------------------------------------------------------
# 8. A handler acts as its registrant for wfe too
# ---------------------------------------------------------------------
# reg5 logs in for real: an admin (to register its handler), an author, an
# approver, a submitter and a reader, mapped to tenant tE.  Its handler
# tries, from inside the background worker: to read tenant tA's runs, to
# submit into tA, to approve the version reg5 created (four eyes on); and
# what reg5 may do: read and submit in tE, create a version (as reg5).
sql(<<'SQL');
CREATE ROLE reg5 LOGIN IN ROLE wfe_admin, wfe_author, wfe_approver, wfe_submitter, wfe_reader;
SELECT wfe.add_tenant_member('reg5', 'tE');
CREATE SCHEMA reg5_s AUTHORIZATION reg5;
SQL
# as_login(ROLE, SQL): run SQL logged in as ROLE; (psql's exit code, stdout, stderr).
sub as_login
{
	my ($role, $q) = @_;
	my ($out, $err) = ('', '');
	my $rc = $node->psql($db, "\\set VERBOSITY verbose\n$q", stdout => \$out, stderr => \$err, on_error_stop => 1,
		connstr => $node->connstr($db) . " user=$role");
	return ($rc, $out, $err);
}
my ($rc5, $out5, $err5) = as_login('reg5', <<'SQL');
-- each try in a block of its own: a refusal is recorded, not raised
CREATE FUNCTION reg5_s.h5(input jsonb) RETURNS jsonb LANGUAGE plpgsql AS $$
DECLARE
    out jsonb := '{}';
    v text;
    n bigint;
BEGIN
    out := out || jsonb_build_object('tenants', wfe.my_tenants());
    SELECT count(*) INTO n FROM wfe.runs AS r WHERE r.tenant = 'tA';
    out := out || jsonb_build_object('read_tA', n);
    SELECT count(*) INTO n FROM wfe.runs AS r WHERE r.tenant = 'tE';
    out := out || jsonb_build_object('read_tE', n > 0);
    BEGIN
        PERFORM wfe.submit('h5-target', '{}', NULL, '{"tenant": "tA"}');
        out := out || '{"submit_tA": "done"}';
    EXCEPTION WHEN OTHERS THEN
        GET STACKED DIAGNOSTICS v = RETURNED_SQLSTATE;
        out := out || jsonb_build_object('submit_tA', v);
    END;
    BEGIN
        PERFORM wfe.submit('h5-target', '{}', 'h5-tE', '{"tenant": "tE"}');
        out := out || '{"submit_tE": "done"}';
    EXCEPTION WHEN OTHERS THEN
        GET STACKED DIAGNOSTICS v = RETURNED_SQLSTATE;
        out := out || jsonb_build_object('submit_tE', v);
    END;
    BEGIN
        PERFORM wfe.approve('h5-own', '1.0.0');
        out := out || '{"approve_own": "done"}';
    EXCEPTION WHEN OTHERS THEN
        GET STACKED DIAGNOSTICS v = MESSAGE_TEXT;
        out := out || jsonb_build_object('approve_own', v);
    END;
    BEGIN
        PERFORM wfe.create_definition($y$
name: h5-made
version: "1.0.0"
entry: act
stages:
  - name: act
    type: action
    action: tb.h5@1
    on_success: completed
    on_failure: failed
$y$);
        out := out || '{"create": "done"}';
    EXCEPTION WHEN OTHERS THEN
        GET STACKED DIAGNOSTICS v = RETURNED_SQLSTATE;
        out := out || jsonb_build_object('create', v);
    END;
    RETURN out;
END $$;
SELECT wfe.register_action('tb.h5@1', handler => 'reg5_s.h5(jsonb)');
SELECT wfe.create_definition($y$
name: h5-own
version: "1.0.0"
entry: act
stages:
  - name: act
    type: action
    action: tb.h5@1
    on_success: completed
    on_failure: failed
$y$);
SQL
is($rc5, 0, '8: reg5 registers its handler and creates a version, logged in as itself') or diag($err5);
sql(<<'SQL');
SELECT wfe.register_worker('tb.sit@1', 'tb-sit');
SELECT wfe.create_definition($y$
name: h5-target
version: "1.0.0"
entry: sit
stages:
  - name: sit
    type: worker
    queue: tb-sit
    worker: tb.sit@1
    on_success: completed
    on_failure: failed
$y$);
SELECT wfe.approve('h5-target', '1.0.0'), wfe.activate('h5-target', '1.0.0');
-- the workflow that runs reg5's handler, approved by someone else
SELECT wfe.create_definition($y$
name: h5-flow
version: "1.0.0"
entry: act
stages:
  - name: act
    type: action
    action: tb.h5@1
    on_success: completed
    on_failure: failed
$y$);
SELECT wfe.approve('h5-flow', '1.0.0'), wfe.activate('h5-flow', '1.0.0');
SELECT wfe.submit('h5-target', '{}', 'in-tA', '{"tenant": "tA"}');
SELECT wfe.submit('h5-target', '{}', 'in-tE', '{"tenant": "tE"}');
SQL
is(sql(q{SELECT string_agg(tenant, ',' ORDER BY tenant) FROM wfe.runs WHERE workflow = 'h5-target'}), 'tA,tE',
	'8: one run in tenant tA, one in tE');
# stripped of wfe_admin (which acts for every tenant), four eyes on (the
# worker takes the setting in at its next round), then its handler runs
sql('REVOKE wfe_admin FROM reg5; ALTER SYSTEM SET wfe.four_eyes = on; SELECT pg_reload_conf()');
sleep 1;
my $h5_before = sql(q{SELECT string_agg(tenant || ':' || workflow, ',' ORDER BY run_id) FROM wfe.runs WHERE tenant = 'tA'});
my ($rc_run, $r_h5) = as_login('reg5', q{SELECT run_id FROM wfe.submit('h5-flow', '{}', NULL, '{"tenant": "tE"}')});
is($rc_run, 0, '8: reg5 submits the run of its handler in its tenant');
ok($node->poll_query_until($db, "SELECT state = 'completed' FROM wfe.runs WHERE run_id = $r_h5"), '8: the handler ran');
my $res = sql("SELECT result FROM wfe.run_stages WHERE run_id = $r_h5");
note("8: the handler saw $res");
is(sql("SELECT result ->> 'tenants' FROM wfe.run_stages WHERE run_id = $r_h5"), '["tE"]',
	'8: inside its handler, reg5 acts for its own tenant only (wfe.my_tenants)');
is(sql("SELECT result ->> 'read_tA' FROM wfe.run_stages WHERE run_id = $r_h5"), '0', '8: tenant tA\'s runs are not readable');
is(sql("SELECT result ->> 'read_tE' FROM wfe.run_stages WHERE run_id = $r_h5"), 'true', '8: ... its own tenant\'s are');
is(sql("SELECT result ->> 'submit_tA' FROM wfe.run_stages WHERE run_id = $r_h5"), '42501', '8: a submit into tA is refused (42501)');
is(sql("SELECT result ->> 'submit_tE' FROM wfe.run_stages WHERE run_id = $r_h5"), 'done', '8: ... into tE goes through');
like(sql("SELECT result ->> 'approve_own' FROM wfe.run_stages WHERE run_id = $r_h5"),
	qr/^role "reg5" created workflow definition "h5-own\@1\.0\.0" and may not approve it$/,
	'8: approving reg5\'s own version under four eyes is refused, naming reg5');
is(sql("SELECT result ->> 'create' FROM wfe.run_stages WHERE run_id = $r_h5"), 'done', '8: creating a version goes through');
is(sql(q{SELECT state || ' ' || coalesce(approved_by, '-') FROM wfe.definitions WHERE workflow = 'h5-own'}), 'draft -',
	'8: nothing changed: reg5\'s own version is still a draft, approved by nobody');
is(sql(q{SELECT string_agg(tenant || ':' || workflow, ',' ORDER BY run_id) FROM wfe.runs WHERE tenant = 'tA'}), $h5_before,
	'8: nothing changed: tenant tA has the same runs');
is(sql(q{SELECT created_by FROM wfe.definitions WHERE workflow = 'h5-made'}), 'reg5',
	'8: the version the handler created is recorded as created by reg5, not by the worker\'s superuser');
is(sql(q{SELECT count(*) FROM wfe.runs WHERE tenant = 'tE' AND idempotency_key = 'h5-tE'}), '1',
	'8: the run the handler submitted is in tE');
sql('ALTER SYSTEM RESET wfe.four_eyes; SELECT pg_reload_conf()');

# ---------------------------------------------------------------------
# 4. Workers cannot forge results
# ---------------------------------------------------------------------
sql(<<'SQL');
SELECT wfe.register_worker('tb.step@1', 'tb-q');
SELECT wfe.grant_queue('w_a', 'tb-q');
CREATE FUNCTION public.tb_check(input jsonb) RETURNS jsonb LANGUAGE sql AS $$ SELECT '{"approved": false}'::jsonb $$;
SELECT wfe.register_action('tb.check@1', handler => 'public.tb_check(jsonb)');
SQL
WfeNode::workflow($node, <<'YAML');
name: tb-forge
version: "1.0.0"
entry: work
stages:
  - name: work
    type: worker
    queue: tb-q
    worker: tb.step@1
    on_success: check
    on_failure: failed
  - name: check
    type: action
    action: tb.check@1
    on_success: completed
    on_failure: failed
YAML
my $r = sql(q{SELECT run_id FROM wfe.submit('tb-forge', '{}')});
my ($att, $fence) = split /\|/, sql("SELECT attempt, fence FROM wfe.run_stages WHERE run_id = $r AND stage = 'work'");
my $snapshot = "SELECT string_agg(stage || ':' || state || ':' || attempt || ':' || fence, ',' ORDER BY stage) FROM wfe.run_stages WHERE run_id = $r";
my $before = sql($snapshot);
my $events = sql("SELECT count(*) FROM wfe.events WHERE run_id = $r");

my ($state, $out) = attempt("SELECT wfe.complete_task($r, 'work', $att, $fence, '{}')", 'w_a');
is($out, 'stale', '4: the right attempt and fence of a queued stage nobody claimed: stale');
is(sql($snapshot), $before, '4: ... and the stage is still queued');

refused("SELECT * FROM wfe.claim_task('tb-q', 'w_b')", 'w_b', '42501', qr/role "w_b" may not claim from queue "tb-q"/,
	'4: a claim from a queue not granted');
refused("SELECT wfe.complete_task($r, 'work', $att, $fence, '{}')", 'w_b', '42501',
	qr/role "w_b" may not report for queue "tb-q"/, '4: a report for a queue not granted');
refused("SELECT * FROM wfe.claim_task('no-such-queue', 'w_b')", 'w_b', '42501', qr/may not claim from queue/,
	'4: a queue not granted, whether or not it exists');
($state, $out) = attempt("SELECT wfe.complete_task($r, 'work', $att, $fence, '{}')", 'w_c');
is($out, 'unknown', '4: to a role that may neither serve the queue nor see the tenant, the run does not exist');
is(sql($snapshot), $before, '4: the refused calls changed nothing');
is(sql("SELECT count(*) FROM wfe.events WHERE run_id = $r"), $events + 2, '4: only the stale and the unknown report left their events');

# guessing: the current generation with any other low half is stale
my $gen = sql("SELECT $fence >> 32");
($state, $out) = attempt(<<"SQL", 'w_a');
SELECT count(*) FILTER (WHERE o <> 'stale')
  FROM generate_series(1, 500) AS k,
       LATERAL (SELECT wfe.complete_task($r, 'work', $att, ($gen << 32) | ((($fence & 4294967295) + k * 7919) % 4294967296), '{}') AS o) AS x
SQL
is($out, '0', '4: 500 guessed fences of the right generation: all stale');
is(sql($snapshot), $before, '4: the guesses changed nothing');

# the holder of the claim reports
my $task = sql(q{SET ROLE w_a; SELECT run_id || '|' || attempt || '|' || fence FROM wfe.claim_task('tb-q', 'w_a')});
my (undef, $ta, $tf) = split /\|/, $task;
is($tf, $fence, '4: the claim hands out the fence of the attempt');

# a forged result for the in-database action, while it waits and once queued
refused("SELECT wfe.complete_task($r, 'check', 1, 4294967297, '{\"approved\": true}')", 'w_a', '42501',
	qr/stage "check" of run $r is an in-database action: workers cannot report it/, '4: a forged action result');
($state, $out) = attempt("SELECT wfe.complete_task($r, 'work', $ta, $tf, '{}')", 'w_a');
is($out, 'accepted', '4: the claimed attempt is reported by its holder');
my $fc = sql("SELECT fence FROM wfe.run_stages WHERE run_id = $r AND stage = 'check'");
refused("SELECT wfe.complete_task($r, 'check', 1, $fc, '{\"approved\": true}')", 'w_a', '42501',
	qr/in-database action/, '4: a forged action result with its real fence');
ok($node->poll_query_until($db, "SELECT state = 'completed' FROM wfe.runs WHERE run_id = $r"),
	'4: the run completes with the handler\'s own result');
is(sql("SELECT result FROM wfe.run_stages WHERE run_id = $r AND stage = 'check'"), '{"approved": false}',
	'4: ... not the forged one');

# fences are unpredictable: fifty releases, fifty different low halves
sql(q{SELECT wfe.submit('tb-forge', '{}') FROM generate_series(1, 50)});
is(sql(q{SELECT count(DISTINCT fence & 4294967295) FROM wfe.run_stages WHERE stage = 'work' AND state = 'queued'}), '50',
	'4: every released attempt has its own random low half');

# revoking takes the queue back
sql(q{SELECT wfe.revoke_queue('w_a', 'tb-q')});
refused("SELECT * FROM wfe.claim_task('tb-q', 'w_a')", 'w_a', '42501', qr/may not claim/, '4: after revoke_queue');

# ---------------------------------------------------------------------
# 6. Admission limits at the door
# ---------------------------------------------------------------------
my $runs = sql('SELECT count(*) FROM wfe.runs');
my $all_events = sql('SELECT count(*) FROM wfe.events');
sub deep { my ($n) = @_; return ('{"a":' x $n) . '1' . ('}' x $n); }

refused("SET wfe.max_payload_bytes = '1MB'; SELECT wfe.submit('tb-forge', jsonb_build_object('blob', repeat('x', 2 * 1024 * 1024)))",
	undef, '54000', qr/context is \d+ bytes, more than wfe\.max_payload_bytes \(1048576\)/, '6: a context over the size limit');
refused("SELECT wfe.submit('tb-forge', jsonb_build_object('blob', repeat('x', 100 * 1024 * 1024)))",
	undef, '54000', qr/context is \d+ bytes, more than wfe\.max_payload_bytes \(67108864\)/, '6: a 100 MB context, at the default limit');
refused("SELECT wfe.submit('tb-forge', '" . deep(65) . "')", undef, '54000',
	qr/context is nested more than wfe\.max_json_depth \(64\) levels deep/, '6: a context 65 deep');
refused("SELECT wfe.submit('tb-forge', '{}', repeat('k', 1000))", undef, '54000',
	qr/idempotency_key is 1000 bytes long, more than wfe\.max_name_bytes/, '6: a long idempotency key, early and named');
refused(qq{SELECT wfe.submit('tb-forge', '{}', NULL, jsonb_build_object(E'x\\nLOG:  forged line', 1))}, undef, '22023',
	qr/submit option key must not contain control characters/, '6: a newline in an option key');
refused("SELECT wfe.complete_task(987654, repeat('s', 50 * 1024 * 1024), 1, 1)", undef, '54000',
	qr/stage is 52428800 bytes long, more than wfe\.max_name_bytes/, '6: a 50 MB stage name for an unknown run');
refused(qq{SELECT * FROM wfe.claim_task('tb-q', repeat(E'w\\n', 5 * 1024 * 1024))}, undef, '54000',
	qr/worker_id is 10485760 bytes long/, '6: a 10 MB worker id');
refused(qq{SELECT * FROM wfe.claim_task('tb-q', E'w1\\nLOG:  forged')}, undef, '22023',
	qr/worker_id must not contain control characters/, '6: a newline in a worker id');
is(sql('SELECT count(*) FROM wfe.runs'), $runs, '6: no run was created by the refused submits');
is(sql('SELECT count(*) FROM wfe.events'), $all_events, '6: nothing was written to the event log');
unlike(slurp_file($node->logfile), qr/^LOG:  forged/m, '6: the server log holds no forged line');

# data as deep as the limit goes all the way through; deeper is refused at the door
sql(q{SELECT wfe.grant_queue('w_a', 'tb-q')});
my $r64 = sql("SELECT run_id FROM wfe.submit('tb-forge', '" . deep(64) . "', 'deep-64')");
$task = sql(q{SET ROLE w_a; SELECT run_id || '|' || attempt || '|' || fence FROM wfe.claim_task('tb-q', 'w_a', 100)});
my %held = map { my ($rr, $a, $f) = split /\|/; ($rr => [ $a, $f ]) } split /\n/, $task;
($state, $out, my $err) = attempt("SELECT wfe.complete_task($r64, 'work', $held{$r64}[0], $held{$r64}[1], '" . deep(70) . "')", 'w_a');
is($state, '54000', '6: a result 70 deep is refused at the door (not 22023 from deeper in)') or diag($err);
is(sql("SELECT state FROM wfe.run_stages WHERE run_id = $r64 AND stage = 'work'"), 'running', '6: ... and the attempt is unchanged');
($state, $out) = attempt("SELECT wfe.complete_task($r64, 'work', $held{$r64}[0], $held{$r64}[1], '" . deep(63) . "')", 'w_a');
is($out, 'accepted', '6: a context and a result at the depth limit go through binding and validation');

# ---------------------------------------------------------------------
# 3. One poisoned run does not stop the others' clocks
# ---------------------------------------------------------------------
# A bug simulated with triggers: releasing any stage of run P raises; every
# event of run Q raises (so not even its failure can be recorded).
sql(q{SELECT wfe.register_worker('tb.slow@1', 'tb-slow')});
WfeNode::workflow($node, <<'YAML');
name: tb-clock
version: "1.0.0"
entry: work
stages:
  - name: work
    type: worker
    queue: tb-slow
    worker: tb.slow@1
    queue_deadline_ms: 1500
    on_success: completed
    on_failure: failed
YAML
sql(<<'SQL');
CREATE TABLE public.poisoned (run_id bigint, what text);
CREATE FUNCTION public.poison_release() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.state = 'queued' AND EXISTS (SELECT 1 FROM public.poisoned AS p
                                         WHERE p.run_id = NEW.run_id AND p.what = 'release') THEN
        RAISE EXCEPTION 'poisoned run %', NEW.run_id;
    END IF;
    RETURN NEW;
END $$;
CREATE FUNCTION public.poison_events() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM public.poisoned AS p WHERE p.run_id = NEW.run_id AND p.what = 'events') THEN
        RAISE EXCEPTION 'poisoned run %', NEW.run_id;
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER poison BEFORE UPDATE ON wfe.run_stages FOR EACH ROW EXECUTE FUNCTION public.poison_release();
CREATE TRIGGER poison BEFORE INSERT ON wfe.events FOR EACH ROW EXECUTE FUNCTION public.poison_events();
SQL
my $start = "jsonb_build_object('not_before', now() + interval '1 second')";
# Each run is poisoned in the transaction that submits it: on a loaded
# machine a second statement could come after its start timer fired.
my $p = sql("WITH s AS (SELECT run_id FROM wfe.submit('tb-clock', '{}', 'p', $start)) "
	  . "INSERT INTO public.poisoned SELECT run_id, 'release' FROM s RETURNING run_id");
my $q = sql("WITH s AS (SELECT run_id FROM wfe.submit('tb-clock', '{}', 'q', $start)) "
	  . "INSERT INTO public.poisoned SELECT run_id, 'events' FROM s RETURNING run_id");
my $g_start = sql("SELECT run_id FROM wfe.submit('tb-clock', '{}', 'g-start', $start || jsonb_build_object('tenant', 'other'))");
my $g_deadline = sql("SELECT run_id FROM wfe.submit('tb-clock', '{}', 'g-deadline', jsonb_build_object('tenant', 'other', 'run_deadline_ms', 2000))");
my $g_queue = sql("SELECT run_id FROM wfe.submit('tb-clock', '{}', 'g-queue', jsonb_build_object('tenant', 'other'))");

ok($node->poll_query_until($db, "SELECT state = 'failed' FROM wfe.runs WHERE run_id = $p"),
	'3: the poisoned run fails');
is(sql("SELECT detail -> 'error' ->> 'sqlstate' || ' ' || (detail -> 'error' ->> 'what') FROM wfe.events WHERE run_id = $p AND type = 'run.engine_error'"),
	'P0001 not_before timer', '3: its error is recorded (run.engine_error: what raised, with its SQLSTATE)');
ok($node->poll_query_until($db,
		"SELECT EXISTS (SELECT 1 FROM wfe.events WHERE run_id = $g_start AND type = 'run.started')"),
	"3: another tenant's delayed start fires");
ok($node->poll_query_until($db,
		"SELECT state = 'timed_out' OR state = 'failed' FROM wfe.run_stages WHERE run_id = $g_queue"),
	"3: another tenant's queue deadline fires");
ok($node->poll_query_until($db, "SELECT state = 'failed' FROM wfe.runs WHERE run_id = $g_deadline"),
	"3: another tenant's run deadline fires");
is(sql("SELECT (SELECT count(*) FROM wfe.events WHERE run_id = $q) || ' ' || (SELECT fired_at IS NOT NULL FROM wfe.timers WHERE run_id = $q AND kind = 'not_before')"),
	'1 true', '3: the run nothing can be written for is left alone, its timer spent (one submit event)');
my $log = slurp_file($node->logfile);
my @p_lines = $log =~ /^.*not_before timer of run $p raised.*$/mg;
is(scalar @p_lines, 1, '3: the poisoned run is named in the log once');
like($log, qr/the error of run $q cannot be recorded/, '3: and so is the one whose failure cannot be written');
sql('DROP TRIGGER poison ON wfe.run_stages; DROP TRIGGER poison ON wfe.events');

# 0.1.0's poison itself, a delayed start with a context 200 deep, is refused at the door
refused("SELECT wfe.submit('tb-clock', '" . deep(200) . "', 'p200', $start)", undef, '54000',
	qr/wfe\.max_json_depth/, '3: the 0.1.0 poison (not_before, a context 200 deep)');

# wfe.tick() by hand, in a database the worker does not serve: the same isolation
sql('CREATE DATABASE ticking');
my $tick = sub { return $node->safe_psql('ticking', $_[0]); };
$tick->(<<'SQL');
CREATE EXTENSION wfe;
SELECT wfe.register_worker('tb.slow@1', 'tb-slow');
SELECT wfe.create_definition($y$
name: tb-tick
version: "1.0.0"
entry: work
stages:
  - name: work
    type: worker
    queue: tb-slow
    worker: tb.slow@1
    on_success: completed
    on_failure: failed
$y$);
SELECT wfe.approve('tb-tick', '1.0.0');
SELECT wfe.activate('tb-tick', '1.0.0');
CREATE TABLE public.poisoned (run_id bigint);
CREATE FUNCTION public.poison_release() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.state = 'queued' AND EXISTS (SELECT 1 FROM public.poisoned AS p WHERE p.run_id = NEW.run_id) THEN
        RAISE EXCEPTION 'poisoned run %', NEW.run_id;
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER poison BEFORE UPDATE ON wfe.run_stages FOR EACH ROW EXECUTE FUNCTION public.poison_release();
SQL
my $tp = $tick->(q{SELECT run_id FROM wfe.submit('tb-tick', '{}', 'p', jsonb_build_object('not_before', now() + interval '1 second'))});
my $tg = $tick->(q{SELECT run_id FROM wfe.submit('tb-tick', '{}', 'g', jsonb_build_object('not_before', now() + interval '1 second', 'tenant', 'other'))});
$tick->("INSERT INTO public.poisoned VALUES ($tp)");
usleep(1_500_000);    # both delayed starts are due
my ($tick_out, $tick_err) = ('', '');
my $tick_rc = $node->psql('ticking', 'SELECT wfe.tick()', stdout => \$tick_out, stderr => \$tick_err);
is("$tick_rc $tick_out", '0 2', '3: wfe.tick() with a poisoned item handles both items and does not fail');
like($tick_err, qr/WARNING:  wfe: not_before timer of run $tp raised P0001/, '3: ... and warns, naming the run');
is($tick->("SELECT string_agg(run_id || ':' || state, ',' ORDER BY run_id) FROM wfe.run_stages WHERE run_id IN ($tp, $tg)"),
	"$tp:skipped,$tg:queued", "3: the other tenant's delayed start was released; the poisoned run was failed");

# retention removes callbacks about runs that never existed
$tick->(q{INSERT INTO wfe.events (run_id, tenant, stage, attempt, type, at, detail)
          VALUES (424242, '', 'x', 1, 'callback.unknown', now() - interval '30 days', '{}')});
$tick->('SELECT wfe._retention(86400, 100)');
is($tick->(q{SELECT count(*) FROM wfe.events WHERE run_id = 424242}), '0',
	'6: retention removes an old callback about a run that does not exist');

# ---------------------------------------------------------------------
# 2. The worker's SQL cannot be captured by a database-level search_path
# ---------------------------------------------------------------------
# The database's owner is not a superuser; its traps record who ran them.
sql(<<'SQL');
CREATE ROLE dbo LOGIN;
ALTER DATABASE postgres OWNER TO dbo;
GRANT CREATE ON DATABASE postgres TO dbo;
SET ROLE dbo;
CREATE SCHEMA trap;
CREATE TABLE trap.fired (what text, who text);
GRANT INSERT ON trap.fired TO PUBLIC;
GRANT USAGE ON SCHEMA trap TO PUBLIC;
CREATE FUNCTION trap.fire(what text) RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN INSERT INTO trap.fired VALUES (what, current_user); RETURN true; END $$;
CREATE DOMAIN trap.int8 AS pg_catalog.int8 CHECK (trap.fire('domain int8'));
CREATE DOMAIN trap.int4 AS pg_catalog.int4 CHECK (trap.fire('domain int4'));
CREATE DOMAIN trap.text AS pg_catalog.text CHECK (trap.fire('domain text'));
CREATE FUNCTION trap.eq(pg_catalog.text, pg_catalog.text) RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN PERFORM trap.fire('operator ='); RETURN $1 OPERATOR(pg_catalog.=) $2; END $$;
CREATE OPERATOR trap.= (LEFTARG = pg_catalog.text, RIGHTARG = pg_catalog.text, FUNCTION = trap.eq);
CREATE FUNCTION trap.cnt_step(pg_catalog.int8) RETURNS pg_catalog.int8 LANGUAGE plpgsql AS $$
BEGIN PERFORM trap.fire('aggregate count'); RETURN $1 OPERATOR(pg_catalog.+) 1; END $$;
CREATE AGGREGATE trap.count(*) (SFUNC = trap.cnt_step, STYPE = pg_catalog.int8, INITCOND = '0');
ALTER DATABASE postgres SET search_path = trap, pg_catalog;
SQL
$ENV{PGOPTIONS} = '-c search_path=pg_catalog,public';
$node->restart;
ok($node->poll_query_until($db, "SELECT pid IS NOT NULL AND rounds > 0 FROM wfe.worker_status()"),
	'2: the worker runs again under the hostile database setting');
{
	local $ENV{PGOPTIONS};
	is($node->safe_psql('postgres', 'SHOW search_path'), 'trap, pg_catalog', '2: new sessions get the hostile search_path');
}

# timers, an action, and a publication, all by the worker
WfeRabbit::linear_workflow($node, 'tb-pub', 'tbpub', 'a');
WfeRabbit::wait_connected($node, '2');
my $r_pub = sql(q{SELECT run_id FROM wfe.submit('tb-pub', '{"data": "x", "n": 1}', NULL, jsonb_build_object('not_before', now() + interval '300 milliseconds'))});
my $r_act = sql(q{SELECT run_id FROM wfe.submit('tb-grab', '{}')});
ok($node->poll_query_until($db, "SELECT state = 'dispatched' FROM wfe.run_stages WHERE run_id = $r_pub"),
	'2: a delayed start fired and its dispatch was published');
ok($node->poll_query_until($db, "SELECT state = 'failed' FROM wfe.runs WHERE run_id = $r_act"),
	'2: an action ran');
is(sql('SELECT count(*) FROM trap.fired'), '0', '2: no trap fired: the worker ran none of the hostile objects');
is(superusers(), $superusers, '2: nobody became a superuser');
sql('ALTER DATABASE postgres RESET search_path');
delete $ENV{PGOPTIONS};

# ---------------------------------------------------------------------
# 5. CREATE EXTENSION refuses a schema someone else prepared
# ---------------------------------------------------------------------
sql(<<'SQL');
CREATE ROLE evil LOGIN;
CREATE DATABASE hostile;
GRANT CREATE ON DATABASE hostile TO evil;
SQL
$node->safe_psql('hostile', <<'SQL');
SET ROLE evil;
CREATE SCHEMA wfe;
CREATE FUNCTION wfe.mul(numeric, integer) RETURNS numeric LANGUAGE sql AS $$ SELECT 0::numeric $$;
CREATE OPERATOR wfe.* (LEFTARG = numeric, RIGHTARG = integer, FUNCTION = wfe.mul);
SQL
my ($out5, $err5) = ('', '');
$node->psql('hostile', "\\set VERBOSITY verbose\nCREATE EXTENSION wfe", stdout => \$out5, stderr => \$err5);
like($err5, qr/ERROR:\s+42501: schema wfe already exists and is owned by role "evil"/,
	'5: CREATE EXTENSION refuses a wfe schema owned by another role');
like($err5, qr/HINT:\s+Drop or rename that schema/, '5: with a hint');
is($node->safe_psql('hostile', q{SELECT count(*) FROM pg_extension WHERE extname = 'wfe'}), '0', '5: nothing was installed');
is($node->safe_psql('hostile', q{SELECT count(*) FROM pg_operator WHERE oprnamespace = 'wfe'::regnamespace}), '1',
	'5: the schema is as it was');

# the same schema owned by the installer, with an object of another role planted in it
$node->safe_psql('hostile', <<'SQL');
ALTER SCHEMA wfe OWNER TO postgres;
SQL
($out5, $err5) = ('', '');
$node->psql('hostile', "\\set VERBOSITY verbose\nCREATE EXTENSION wfe", stdout => \$out5, stderr => \$err5);
like($err5, qr/ERROR:\s+42501: schema wfe holds objects of other roles: .*function (wfe\.)?mul\(numeric,integer\)/,
	'5: ... or one holding another role\'s objects');

# ---------------------------------------------------------------------
# 7. pg_dump carries the runtime tables, as the docs say
# ---------------------------------------------------------------------
sql(q{SELECT wfe.submit('tb-forge', '{"marker": "dump-me-7"}')});
my $dump = `pg_dump -h '${\$node->host}' -p ${\$node->port} -U postgres -d postgres 2>&1`;
like($dump, qr/^COPY wfe\.runs .*dump-me-7/ms, '7: a dump carries run contexts');
like($dump, qr/^COPY wfe\.queue_grants /m, '7: and the queue grants');
my $ops = slurp_file(dirname(__FILE__) . '/../../docs/operations.md');
like($ops, qr/a dump carries run contexts and results/, '7: docs/operations.md says so plainly');

# ---------------------------------------------------------------------
# 9. No login can freeze the worker or a tenant's admissions
# ---------------------------------------------------------------------
sql(<<'SQL');
CREATE ROLE nobody9 LOGIN;
CREATE ROLE reader9 LOGIN IN ROLE wfe_reader;
SELECT wfe.add_tenant_member('reader9', 't9');
SELECT wfe.configure_tenant('t9', 1000, 1000);
CREATE FUNCTION public.tb_cached(input jsonb) RETURNS jsonb LANGUAGE sql AS $$ SELECT '{"v": 1}'::jsonb $$;
SELECT wfe.register_action('tb.cached@1', handler => 'public.tb_cached(jsonb)');
SELECT wfe.create_definition($y$
name: tb-cached
version: "1.0.0"
entry: act
stages:
  - name: act
    type: action
    action: tb.cached@1
    cache: {ttl_ms: 600000}
    on_success: completed
    on_failure: failed
$y$);
SELECT wfe.approve('tb-cached', '1.0.0'), wfe.activate('tb-cached', '1.0.0');
SQL
my $r9 = sql(q{SELECT run_id FROM wfe.submit('tb-cached', '{}', NULL, '{"tenant": "t9"}')});
ok($node->poll_query_until($db, "SELECT state = 'completed' FROM wfe.runs WHERE run_id = $r9"), '9: a cached action ran');

# the attackers log in for real; the reader reads the cache key
my $reader9 = $node->background_psql($db, extra_params => [ '-U', 'reader9' ]);
my $nobody9 = $node->background_psql($db, extra_params => [ '-U', 'nobody9' ]);
my $key9 = $reader9->query_safe("SELECT cache_key FROM wfe.run_stages WHERE run_id = $r9");
like($key9, qr/^sha256:[0-9a-f]{64}$/, '9: a reader of tenant t9 reads its cache key');
$reader9->query_safe("SELECT pg_advisory_lock(hashtext('wfe.cache'), hashtext('$key9'))");
$nobody9->query_safe(q{SELECT pg_advisory_lock(hashtext('wfe.max_runs_in_flight'), hashtext('t9')),
                              pg_advisory_lock(hashtext('wfe.max_tasks_in_flight'), hashtext('t9'))});
is(sql(q{SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 2 AND granted}), '3',
	'9: they hold the advisory keys wfe\'s locks were taken with');
# wfe's own locks: not for them
my ($rc9, $out9, $err9) = as_login('reader9', qq{SELECT wfe._lock('wfe.cache', '$key9', false)});
like($err9, qr/ERROR:\s+42501: permission denied for function _lock/, '9: a reader may not take wfe\'s lock (42501)');
($rc9, $out9, $err9) = as_login('nobody9', q{SELECT wfe._lock('wfe.max_runs_in_flight', 't9', false)});
like($err9, qr/ERROR:\s+42501: permission denied for schema wfe/, '9: nor may a login with no wfe role');
($rc9, $out9, $err9) = as_login('reader9', q{SELECT 1 FROM wfe.tenant_limits FOR UPDATE});
like($err9, qr/ERROR:\s+42501: permission denied for table tenant_limits/, '9: a reader may not lock wfe\'s rows either');

# with those held: timers fire (a delayed start whose stage reads the
# cache, another tenant's delayed start), submits of t9 go through
my $t0 = time();
my $r9a = sql(q{SELECT run_id FROM wfe.submit('tb-cached', '{}', NULL, jsonb_build_object('tenant', 't9', 'not_before', now() + interval '500 milliseconds'))});
my $r9b = sql(q{SELECT run_id FROM wfe.submit('tb-cached', '{}', NULL, jsonb_build_object('tenant', 'o9', 'not_before', now() + interval '500 milliseconds'))});
ok($node->poll_query_until($db, "SELECT count(*) = 2 FROM wfe.runs WHERE run_id IN ($r9a, $r9b) AND state = 'completed'"),
	'9: both delayed starts fired and their runs completed');
cmp_ok(time() - $t0, '<', 15, '9: ... promptly, with the old keys held');
is(sql("SELECT cache FROM wfe.run_stages WHERE run_id = $r9a"), 'hit', '9: ... t9\'s from the cache, under the key the reader holds');
($rc9, $out9, $err9) = as_login('postgres', q{SET statement_timeout = '5s'; SELECT count(*) FROM wfe.submit('tb-forge', '{}', NULL, '{"tenant": "t9"}')});
is("$rc9 $out9", '0 1', '9: a submit of tenant t9 is not blocked by a login holding its old key') or diag($err9);

# a transaction holding a run keeps only that run waiting: the worker's
# lock waits end after lock_timeout, and the item is tried again
my $holder = $node->background_psql($db);
my $r9c = $holder->query_safe(q{SELECT run_id FROM wfe.submit('tb-cached', '{}', NULL, jsonb_build_object('tenant', 't9', 'not_before', now() + interval '1 second'))});
$holder->query_safe("BEGIN; SELECT 1 FROM wfe.runs WHERE run_id = $r9c FOR UPDATE");
my $r9d = sql(q{SELECT run_id FROM wfe.submit('tb-cached', '{}', NULL, jsonb_build_object('tenant', 'o9', 'not_before', now() + interval '2 seconds'))});
$t0 = time();
ok($node->poll_query_until($db, "SELECT state = 'completed' FROM wfe.runs WHERE run_id = $r9d"),
	'9: another run\'s delayed start fires while a transaction holds a run whose timer is due');
cmp_ok(time() - $t0, '<', 15, '9: ... promptly');
is(sql("SELECT state || ' ' || (SELECT fired_at IS NULL FROM wfe.timers WHERE run_id = $r9c) FROM wfe.run_stages WHERE run_id = $r9c"),
	'waiting true', '9: the held run, its timer due, waits unharmed');
$holder->query_safe('COMMIT');
ok($node->poll_query_until($db, "SELECT state = 'completed' FROM wfe.runs WHERE run_id = $r9c"),
	'9: once released, its delayed start fires and it completes');
like(slurp_file($node->logfile), qr/wfe: not_before timer of run $r9c raised 55P03 .*tried again in a second/,
	'9: the worker put its timer off (55P03), it did not fail the run');
$holder->quit;
$reader9->quit;
$nobody9->quit;

$rabbit->stop;
done_testing();
