# The stage result cache (dsl.md "Result cache"), on a node whose
# background worker fires the cache_ready timers by itself:
#
#  1. miss then hit: the key is the documented one (recomputed here from its
#     material); a hit completes the stage at release with no attempt, no
#     claimable task and no dispatch (a broker queue: no outbox row), and
#     the run goes on (a decision reads the cached result);
#  2. expiry: past ttl_ms the entry is a miss and a new attempt runs;
#  3. corruption: a tampered result (digest left) is stage.cache_corrupt,
#     then a miss whose accepted result overwrites the entry;
#  4. invalid: a result whose digest holds but which the output contract
#     refuses, and a new workflow version whose task `produces` a key the
#     cached result lacks, are stage.cache_invalid, then a miss;
#  5. tenants: A's entry never serves B (same input; a forged tenant column);
#     B's reader cannot see A's entries; B's operator cannot invalidate them;
#  6. coalescing: 40 concurrent runs of one key from 4 connections dispatch
#     one attempt; the rest wait and complete from its result; when the
#     leader fails for good every waiter runs itself (no lost waiter); a
#     cancelled leader wakes its waiter too, a retried one does not; a
#     cancelled waiter is never woken; twin tasks under one key run once;
#     a stage released by its own run's ended attempt under its key runs
#     itself; dashboard_stuck tells a live waiter from a lost one;
#  7. a late report of a fenced attempt and an operator's skip_stage write
#     nothing into the cache;
#  8. cache_invalidate by key, contract and tenant; retention removes
#     expired entries;
#  9. a cached in-database action hits too.
use strict;
use warnings;

use Digest::SHA qw(sha256_hex);
use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use WfeNode;

my $node = WfeNode::node('wfe_cache', preload => 1,
	conf => "wfe.poll_interval_ms = 200\n"
	  . "max_connections = 50\n");
WfeNode::worker_runs($node);

sub sql { return $node->safe_psql('postgres', $_[0]); }

# as(ROLE, SQL): (SQLSTATE or '', stdout)
sub as
{
	my ($role, $q) = @_;
	my ($out, $err) = ('', '');
	$node->psql('postgres', "\\set VERBOSITY verbose\nSET ROLE $role;\n$q",
		stdout => \$out, stderr => \$err, on_error_stop => 1);
	my ($state) = $err =~ /ERROR:\s+([0-9A-Z]{5}):/;
	return ($state // '', $out);
}

# "sha256:" and the hex SHA-256 of a text (the C canonical JSON is given as text).
sub digest { return 'sha256:' . sha256_hex($_[0]); }

# The documented key of the embed@1 contract's stage for {"text": TEXT} in TENANT.
my $schemas = digest('{"input":{"type":"object"},"output":{"required":["vec"],"type":"object"}}');
sub key_of
{
	my ($text, $tenant) = @_;
	$tenant //= 'default';
	return digest(qq({"contract":"embed\@1","implementation":"queue:embed","input":{"text":"$text"},)
		  . qq("schemas":"$schemas","tenant":"$tenant","v":1}));
}

sql(q{SELECT wfe.register_worker('embed@1', 'embed', '{"type": "object"}',
                                 '{"type": "object", "required": ["vec"]}')});

# A workflow NAME whose stage embed (cached for TTL ms) is followed by a
# decision that reads its result.
sub define
{
	my ($name, $ttl, $extra) = @_;
	$extra //= "    retry: { max_attempts: 1 }\n";
	WfeNode::workflow($node, <<"YAML");
name: $name
version: "1.0.0"
entry: embed
stages:
  - name: embed
    type: worker
    queue: embed
    worker: embed\@1
    input: { text: "\${context.text}" }
    cache: { ttl_ms: $ttl }
$extra    on_success: check
    on_failure: failed
  - name: check
    type: decision
    on_evaluation_error: failed
    branches:
      - when: 'stages.embed.result.tag == "good"'
        next: completed
      - when: "true"
        next: failed
YAML
}
define('cached', 600000);
define('brief',  1500);
define('timed', 600000,
	"    execution_deadline_ms: 400\n"
	  . "    retry: { max_attempts: 2, initial_ms: 100, multiplier: 1, max_ms: 100, jitter: none }\n");

sub submit
{
	my ($wf, $text, $tenant) = @_;
	my $opts = $tenant ? qq{, NULL, '{"tenant": "$tenant"}'} : '';
	return sql(qq{SELECT run_id FROM wfe.submit('$wf', '{"text": "$text"}'$opts)});
}

# Claim up to N tasks of a queue: [run_id, stage, attempt, fence] each.
sub claim
{
	my ($queue, $n) = @_;
	$n //= 1;
	my $out = sql("SELECT run_id || ' ' || stage || ' ' || attempt || ' ' || fence"
		  . " FROM wfe.claim_task('$queue', 'tap', $n)");
	return map { [ split / / ] } grep { length } split /\n/, $out;
}

sub complete
{
	my ($t, $result) = @_;
	return sql("SELECT wfe.complete_task($t->[0], '$t->[1]', $t->[2], $t->[3], '$result')");
}

sub stage_row
{
	my ($run, $stage) = @_;
	$stage //= 'embed';
	return sql("SELECT state || ' ' || coalesce(cache, '-') || ' ' || attempt FROM wfe.run_stages"
		  . " WHERE run_id = $run AND stage = '$stage'");
}
sub run_state { return sql("SELECT state FROM wfe.runs WHERE run_id = $_[0]"); }
sub events
{
	my ($run, $type) = @_;
	return sql("SELECT count(*) FROM wfe.events WHERE run_id = $run AND type = '$type'");
}
sub entry
{
	return sql("SELECT run_id || ' ' || attempt || ' ' || result::text || ' ' || result_digest"
		  . " FROM wfe.cache_entries WHERE key = '$_[0]'");
}

my $good = '{"vec": [1, 2], "tag": "good"}';
my $good_canon = '{"tag":"good","vec":[1,2]}';

#
# 1. Miss, then hit.
#
my $k1 = key_of('hello');
my $r1 = submit('cached', 'hello');
is(stage_row($r1), 'queued miss 1', 'miss: the stage is queued, cache miss, attempt 1');
is(sql("SELECT cache_key FROM wfe.run_stages WHERE run_id = $r1 AND stage = 'embed'"), $k1,
	'miss: the stage runs under the documented key (recomputed from its material)');
is(sql("SELECT detail ->> 'cache_key' FROM wfe.events WHERE run_id = $r1 AND type = 'stage.released'"), $k1,
	'miss: stage.released names the key');
is(events($r1, 'stage.cache_waiting'), '0', 'miss: nothing to wait on');
my @t = claim('embed');
is(scalar(@t), 1, 'miss: one task to claim');
is(complete($t[0], $good), 'accepted', 'miss: the result is accepted');
is(run_state($r1), 'completed', 'miss: the run completed');
is(entry($k1), "$r1 1 {\"tag\": \"good\", \"vec\": [1, 2]} " . digest($good_canon),
	'the entry: origin run and attempt, the result, the digest of its canonical JSON');
is(sql("SELECT tenant || ' ' || contract || ' ' || (expires_at - created_at)::text FROM wfe.cache_entries WHERE key = '$k1'"),
	'default embed@1 00:10:00', 'the entry: tenant, contract, expiry ttl_ms after creation');

my $outbox0 = sql('SELECT count(*) FROM wfe.outbox');
my $r2 = submit('cached', 'hello');
is(run_state($r2), 'completed', 'hit: the run completed in the submit itself');
is(stage_row($r2), 'completed hit 0', 'hit: the stage completed from the cache with no attempt');
is(sql("SELECT result::text FROM wfe.run_stages WHERE run_id = $r2 AND stage = 'embed'"),
	'{"tag": "good", "vec": [1, 2]}', 'hit: the stage has the cached result');
is(sql("SELECT state || ' ' || (result ->> 'next') FROM wfe.run_stages WHERE run_id = $r2 AND stage = 'check'"),
	'completed completed', 'hit: the decision read the cached result and routed on');
is( sql("SELECT detail ->> 'key', detail -> 'origin' ->> 'run_id', detail -> 'origin' ->> 'stage',"
		  . " detail -> 'origin' ->> 'attempt', detail ->> 'coalesced',"
		  . " (detail -> 'origin' ->> 'expires_at')::timestamptz = (SELECT expires_at FROM wfe.cache_entries WHERE key = '$k1')"
		  . " FROM wfe.events WHERE run_id = $r2 AND type = 'stage.cache_hit'"),
	"$k1|$r1|embed|1|false|t", 'hit: stage.cache_hit with the key and the origin');
is(sql("SELECT detail::text FROM wfe.events WHERE run_id = $r2 AND stage = 'embed' AND type = 'stage.completed'"),
	'{"cache": "hit"}', 'hit: stage.completed says cache hit');
is(sql("SELECT count(*) FROM wfe.events WHERE run_id = $r2 AND type IN ('stage.released', 'stage.claimed', 'stage.cache_waiting')"),
	'0', 'hit: no release, no claim, no wait');
is(scalar(claim('embed', 10)), 0, 'hit: nothing to claim');
is(sql('SELECT count(*) FROM wfe.outbox') - $outbox0, 0, 'hit: no outbox row');
is(entry($k1), "$r1 1 {\"tag\": \"good\", \"vec\": [1, 2]} " . digest($good_canon), 'hit: the entry is unchanged');

# a broker queue: a miss writes a dispatch to the outbox, a hit none.  The
# entry is made by hand under the documented key (so the key is the one a
# release looks up).
sql(q{SELECT wfe.register_worker('embedb@1', 'embedb', '{"type": "object"}', '{"type": "object", "required": ["vec"]}')});
sql(q{SELECT wfe.configure_queue('embedb', 'broker')});
WfeNode::workflow($node, <<'YAML');
name: brokered
version: "1.0.0"
entry: embed
stages:
  - name: embed
    type: worker
    queue: embedb
    worker: embedb@1
    input: { text: "${context.text}" }
    cache: { ttl_ms: 600000 }
    on_success: completed
    on_failure: failed
YAML
my $kbk = digest(qq({"contract":"embedb\@1","implementation":"queue:embedb","input":{"text":"seeded"},)
	  . qq("schemas":"$schemas","tenant":"default","v":1}));
sql(qq{INSERT INTO wfe.cache_entries (key, tenant, contract, result, result_digest, run_id, stage, attempt, expires_at)
       VALUES ('$kbk', 'default', 'embedb\@1', '$good', '} . digest($good_canon) . qq{', 0, 'seed', 1, now() + interval '1 hour')});
my $rbk = submit('brokered', 'seeded');
is(stage_row($rbk) . ' ' . run_state($rbk), 'completed hit 0 completed', 'broker queue: an entry under the documented key is a hit');
is(sql("SELECT count(*) FROM wfe.outbox WHERE run_id = $rbk"), '0', 'broker queue: a hit writes no dispatch');
my $rbm = submit('brokered', 'not seeded');
is(stage_row($rbm) . ' ' . sql("SELECT count(*) FROM wfe.outbox WHERE run_id = $rbm AND kind = 'dispatch'"), 'queued miss 1 1',
	'broker queue: a miss writes its dispatch');
sql("SELECT wfe.cancel_run($rbm, 'tap')");

# a different input is a different key: a miss
my $r3 = submit('cached', 'other');
is(stage_row($r3), 'queued miss 1', 'another input: a miss');
is(sql("SELECT cache_key FROM wfe.run_stages WHERE run_id = $r3 AND stage = 'embed'"), key_of('other'),
	'... under its own key');
@t = claim('embed');
is(complete($t[0], '{"vec": [0], "tag": "good"}'), 'accepted', '... and it runs');

#
# 2. Expiry.
#
my $kb = key_of('brief');
my $rb1 = submit('brief', 'brief');
@t = claim('embed');
is(complete($t[0], $good), 'accepted', 'expiry: the first run stores an entry for 1.5 s');
my $rb2 = submit('brief', 'brief');
is(stage_row($rb2), 'completed hit 0', 'expiry: before ttl_ms it is a hit');
ok($node->poll_query_until('postgres', "SELECT expires_at < now() FROM wfe.cache_entries WHERE key = '$kb'"),
	'expiry: the entry expires');
my $rb3 = submit('brief', 'brief');
is(stage_row($rb3), 'queued miss 1', 'expiry: past ttl_ms it is a miss: a new attempt');
is(events($rb3, 'stage.cache_hit') + events($rb3, 'stage.cache_corrupt') + events($rb3, 'stage.cache_invalid'),
	0, 'expiry: an expired entry is not read (a clean miss)');
@t = claim('embed');
is($t[0][0], $rb3, 'expiry: the new attempt is claimable');
is(complete($t[0], '{"vec": [3], "tag": "good"}'), 'accepted', '... and completes');
is(sql("SELECT run_id || ' ' || (expires_at > now()) FROM wfe.cache_entries WHERE key = '$kb'"), "$rb3 true",
	'expiry: the new result replaced the entry');

#
# 3. Corruption: the result changed behind the digest's back.
#
sql(qq{UPDATE wfe.cache_entries SET result = '{"vec": [6, 6, 6], "tag": "good"}' WHERE key = '$k1'});
my $rc = submit('cached', 'hello');
is(events($rc, 'stage.cache_corrupt'), '1', 'corrupt: stage.cache_corrupt');
like(sql("SELECT detail ->> 'key' || ' ' || (detail -> 'origin' ->> 'run_id') || ' ' || (detail ->> 'error') FROM wfe.events"
		  . " WHERE run_id = $rc AND type = 'stage.cache_corrupt'"),
	qr/^\Q$k1\E $r1 the stored result does not match its digest$/, '... with the key, the origin and why');
is(events($rc, 'stage.cache_hit'), '0', 'corrupt: no hit');
is(stage_row($rc), 'queued miss 1', 'corrupt: then a miss: an attempt is queued');
@t = claim('embed');
is($t[0][0], $rc, 'corrupt: the attempt is claimable');
is(complete($t[0], '{"vec": [4, 5], "tag": "good"}'), 'accepted', '... and completes');
is(entry($k1), "$rc 1 {\"tag\": \"good\", \"vec\": [4, 5]} " . digest('{"tag":"good","vec":[4,5]}'),
	'corrupt: the new accepted result overwrote the entry (and its digest)');
my $rc2 = submit('cached', 'hello');
is(stage_row($rc2) . ' ' . sql("SELECT detail -> 'origin' ->> 'run_id' FROM wfe.events WHERE run_id = $rc2 AND type = 'stage.cache_hit'"),
	"completed hit 0 $rc", 'corrupt: the next run hits the new entry');

#
# 4. Invalid: the digest holds, the output contract refuses it.
#
my $bad_digest = sql(q{SELECT 'sha256:' || encode(sha256(convert_to('{"tag":"good"}', 'UTF8')), 'hex')});
is($bad_digest, digest('{"tag":"good"}'), 'invalid: the SQL digest of the canonical text is the one the engine uses');
sql(qq{UPDATE wfe.cache_entries SET result = '{"tag": "good"}', result_digest = '$bad_digest' WHERE key = '$k1'});
my $ri = submit('cached', 'hello');
is(events($ri, 'stage.cache_corrupt') . ' ' . events($ri, 'stage.cache_invalid') . ' ' . events($ri, 'stage.cache_hit'),
	'0 1 0', 'invalid: stage.cache_invalid, not corrupt, not a hit');
like(sql("SELECT detail ->> 'error' FROM wfe.events WHERE run_id = $ri AND type = 'stage.cache_invalid'"),
	qr/vec/, '... saying what the contract refuses');
is(stage_row($ri), 'queued miss 1', 'invalid: then a miss');
@t = claim('embed');
is(complete($t[0], $good), 'accepted', 'invalid: the attempt completes');
is(entry($k1), "$ri 1 {\"tag\": \"good\", \"vec\": [1, 2]} " . digest($good_canon), 'invalid: its result replaced the entry');

# the tasks form: a new version whose task produces a key the cached result lacks
sub tasks_version
{
	my ($version, $produces) = @_;
	WfeNode::workflow($node, <<"YAML");
name: produced
version: "$version"
tasks:
  - id: embed
    worker: embed\@1
    queue: embed
    input: { text: "\${context.text}" }
    cache: { ttl_ms: 60000 }
    produces: [$produces]
YAML
}
tasks_version('1.0.0', '{key: vec, type: array}');
my $kp = key_of('tasks');
my $rp1 = submit('produced', 'tasks');
@t = claim('embed');
is(complete($t[0], '{"vec": [8], "tag": "t"}'), 'accepted', 'produces: the first version stores an entry');
my $rp2 = submit('produced', 'tasks');
is(stage_row($rp2) . ' ' . run_state($rp2), 'completed hit 0 completed', 'produces: the same version hits');
is(sql("SELECT string_agg(key || '=' || value::text, ',') FROM wfe.outputs WHERE run_id = $rp2"), 'vec=[8]',
	'produces: a hit writes the task outputs from the cached result');
tasks_version('2.0.0', '{key: vec, type: array}, {key: label, type: string}');
my $rp3 = submit('produced', 'tasks');
is(events($rp3, 'stage.cache_invalid') . ' ' . events($rp3, 'stage.cache_hit'), '1 0',
	'produces: the new version finds the cached result invalid (no label)');
like(sql("SELECT detail ->> 'error' FROM wfe.events WHERE run_id = $rp3 AND type = 'stage.cache_invalid'"),
	qr/label/, '... and says which output is missing');
is(stage_row($rp3), 'queued miss 1', 'produces: then a miss');
@t = claim('embed');
is(complete($t[0], '{"vec": [8], "label": "l", "tag": "t"}'), 'accepted', 'produces: the attempt completes');
is(sql("SELECT run_id FROM wfe.cache_entries WHERE key = '$kp'"), $rp3, '... and its result replaced the entry');

#
# 5. Tenants.
#
my %role = (submitter => 'wfe_submitter', reader => 'wfe_reader', operator => 'wfe_operator');
for my $tn (qw(A B))
{
	sql(join("\n",
		map { "CREATE ROLE ${_}_$tn LOGIN IN ROLE $role{$_}; SELECT wfe.add_tenant_member('${_}_$tn', '$tn');" }
		  sort keys %role));
}
my ($ka, $kB) = (key_of('shared', 'A'), key_of('shared', 'B'));
my $ra1 = submit('cached', 'shared', 'A');
@t = claim('embed');
is(complete($t[0], '{"vec": [1], "tag": "good"}'), 'accepted', "tenants: A's run stores A's entry");
is(sql("SELECT tenant FROM wfe.cache_entries WHERE key = '$ka'"), 'A', "... under A's key and tenant");
# a forged row: A's entry with B's tenant
sql("UPDATE wfe.cache_entries SET tenant = 'B' WHERE key = '$ka'");
my $rb_1 = submit('cached', 'shared', 'B');
is(stage_row($rb_1), 'queued miss 1', "tenants: B misses with the same input, even with A's entry forged into B");
is(sql("SELECT cache_key FROM wfe.run_stages WHERE run_id = $rb_1 AND stage = 'embed'"), $kB,
	'... B computes its own key');
is(events($rb_1, 'stage.cache_hit') . events($rb_1, 'stage.cache_waiting'), '00', '... no hit, no wait on A');
sql("UPDATE wfe.cache_entries SET tenant = 'A' WHERE key = '$ka'");
@t = claim('embed');
is(complete($t[0], '{"vec": [2], "tag": "good"}'), 'accepted', "tenants: B's own attempt completes");
my $ra2 = submit('cached', 'shared', 'A');
my $rb_2 = submit('cached', 'shared', 'B');
is(sql("SELECT string_agg(st.cache || ' ' || st.result::text, ' / ' ORDER BY st.tenant) FROM wfe.run_stages AS st"
		  . " WHERE st.run_id IN ($ra2, $rb_2) AND st.stage = 'embed'"),
	'hit {"tag": "good", "vec": [1]} / hit {"tag": "good", "vec": [2]}', 'tenants: each tenant hits its own entry');
my ($st, $o) = as('reader_B', "SELECT count(*) || ' ' || count(*) FILTER (WHERE tenant <> 'B') FROM wfe.cache_entries");
is("$st|$o", '|1 0', "tenants: B's reader sees B's entry and none of A's (RLS)");
($st, $o) = as('reader_B', "SELECT count(*) FROM wfe.cache_entries WHERE key = '$ka'");
is($o, '0', "... cannot find A's entry by its key");
($st, $o) = as('reader_B', "SELECT count(*) FILTER (WHERE tenant <> 'B') FROM wfe.dashboard_cache");
is($o, '0', '... nor in wfe.dashboard_cache');
my $entries_before = sql('SELECT string_agg(key || result::text, \',\' ORDER BY key) FROM wfe.cache_entries');
# poisoning: nobody but the engine writes entries
for my $r (qw(reader_B operator_B submitter_B))
{
	($st) = as($r, "INSERT INTO wfe.cache_entries (key, tenant, contract, result, result_digest, run_id, stage, attempt, expires_at)"
		  . " VALUES ('" . key_of('poison', 'B') . "', 'B', 'embed\@1', '{\"vec\": [666]}', 'x', 0, 'x', 1, now() + interval '1 hour')");
	is($st, '42501', "poisoning: $r cannot insert an entry");
	($st) = as($r, qq{UPDATE wfe.cache_entries SET result = '{"vec": [666]}' WHERE key = '$kB'});
	is($st, '42501', "poisoning: $r cannot update its own tenant's entry");
}
is(sql('SELECT string_agg(key || result::text, \',\' ORDER BY key) FROM wfe.cache_entries'), $entries_before,
	'poisoning: no entry changed');
($st) = as('operator_B', "SELECT wfe.cache_invalidate(tenant => 'A')");
is($st, '42501', "tenants: B's operator cannot invalidate tenant A");
($st, $o) = as('operator_B', "SELECT wfe.cache_invalidate(key => '$ka')");
is("$st|$o", '|0', "... nor A's entry by its key (0 removed)");
($st, $o) = as('operator_B', "SELECT wfe.cache_invalidate(contract => 'embed\@1')");
is("$st|$o", '|1', "... by contract it removes B's entry only");
$entries_before =~ s/\Q$kB\E\{[^}]*\},?//;
$entries_before =~ s/,$//;
is(sql('SELECT string_agg(key || result::text, \',\' ORDER BY key) FROM wfe.cache_entries'), $entries_before,
	'tenants: nothing of A changed');
($st) = as('operator_B', 'SELECT wfe.cache_invalidate()');
is($st, '22004', 'cache_invalidate with no argument is 22004');

#
# 6. Coalescing under concurrency.
#
# Submit N runs of workflow WF for TEXT from C connections at once.
sub concurrent_submits
{
	my ($wf, $text, $n, $c) = @_;
	my @h;
	for my $j (1 .. $c)
	{
		my $script = join('', map { "SELECT run_id FROM wfe.submit('$wf', '{\"text\": \"$text\"}');\n" } 1 .. $n / $c);
		my ($out, $err) = ('', '');
		push @h, [ IPC::Run::start([ 'psql', '-X', '-At', '-v', 'ON_ERROR_STOP=1', '-d', $node->connstr('postgres') ],
				'<', \$script, '>', \$out, '2>', \$err), \$out, \$err ];
	}
	my @runs;
	for my $h (@h)
	{
		$h->[0]->finish;
		diag(${ $h->[2] }) if ${ $h->[2] } ne '';
		push @runs, grep { /^\d+$/ } split /\n/, ${ $h->[1] };
	}
	return @runs;
}
my $kh = key_of('hot');
my @hot = concurrent_submits('cached', 'hot', 40, 4);
is(scalar(@hot), 40, 'coalescing: 40 runs submitted from 4 connections at once');
my $in = join(',', @hot);
is(sql("SELECT count(*) FROM wfe.events WHERE type = 'stage.released' AND detail ->> 'cache_key' = '$kh'"), '1',
	'coalescing: one release dispatched an attempt for the key');
is(sql("SELECT count(*) FROM wfe.events WHERE run_id IN ($in) AND type = 'stage.cache_waiting'"
		  . " AND detail ->> 'key' = '$kh'"), '39', '... the 39 others wait on it (stage.cache_waiting)');
is(sql("SELECT count(*) FILTER (WHERE cache = 'waiting' AND state = 'waiting') || ' '"
		  . " || count(*) FILTER (WHERE cache = 'miss' AND state = 'queued') FROM wfe.run_stages"
		  . " WHERE run_id IN ($in) AND stage = 'embed'"), '39 1', '... run_stages: 39 waiting, 1 queued');
my $leader = sql("SELECT run_id FROM wfe.run_stages WHERE run_id IN ($in) AND stage = 'embed' AND cache = 'miss'");
is(sql("SELECT count(DISTINCT detail -> 'leader' ->> 'run_id') || ' ' || min(detail -> 'leader' ->> 'run_id')"
		  . " FROM wfe.events WHERE run_id IN ($in) AND type = 'stage.cache_waiting'"), "1 $leader",
	'... each names the one leader');
@t = claim('embed', 50);
is(scalar(@t), 1, 'coalescing: exactly one task to claim');
is(complete($t[0], '{"vec": [42], "tag": "good"}'), 'accepted', 'coalescing: the leader completes');
ok($node->poll_query_until('postgres', "SELECT count(*) = 40 FROM wfe.runs WHERE run_id IN ($in) AND state = 'completed'"),
	'coalescing: all 40 runs complete (the worker fired the cache_ready timers)');
is(sql("SELECT count(*) FILTER (WHERE cache = 'coalesced' AND attempt = 0) || ' '"
		  . " || count(*) FILTER (WHERE result = '{\"vec\": [42], \"tag\": \"good\"}') FROM wfe.run_stages"
		  . " WHERE run_id IN ($in) AND stage = 'embed'"), '39 40',
	'coalescing: 39 coalesced with no attempt; all 40 have the result');
is(sql("SELECT count(*) FROM wfe.events WHERE run_id IN ($in) AND type = 'stage.cache_hit' AND (detail ->> 'coalesced')::boolean"
		  . " AND detail -> 'origin' ->> 'run_id' = '$leader'"), '39', '... stage.cache_hit coalesced, from the leader');
is(sql("SELECT count(*) || ' ' || count(fired_at) FROM wfe.timers WHERE run_id IN ($in) AND kind = 'cache_ready'"), '39 39',
	'... one cache_ready timer per waiter, all fired');
is(sql("SELECT count(*) FROM wfe.events WHERE type IN ('stage.released', 'stage.claimed') AND run_id IN ($in)"), '2',
	'coalescing: one release and one claim in all');

# the leader fails for good: every waiter runs itself
my @cold = concurrent_submits('cached', 'cold', 40, 4);
$in = join(',', @cold);
is(sql("SELECT count(*) FROM wfe.events WHERE run_id IN ($in) AND type = 'stage.cache_waiting'"), '39',
	'failure: 39 wait on the leader');
@t = claim('embed', 50);
is(scalar(@t), 1, 'failure: one task to claim');
is(sql("SELECT wfe.fail_task($t[0][0], 'embed', $t[0][2], $t[0][3], '{\"code\": \"boom\"}', false)"), 'accepted',
	'failure: the leader fails for good');
ok( $node->poll_query_until('postgres',
		"SELECT count(*) = 39 FROM wfe.run_stages WHERE run_id IN ($in) AND stage = 'embed' AND state = 'queued' AND cache = 'miss'"),
	'failure: every waiter was woken and queued an attempt of its own');
is(sql("SELECT count(*) FROM wfe.events WHERE run_id IN ($in) AND type = 'stage.cache_waiting'"), '39',
	'failure: woken waiters do not wait again');
my @all;
while (my @more = claim('embed', 50)) { push @all, @more; }
is(scalar(@all), 39, 'failure: 39 tasks to claim');
is(join(',', sort map { complete($_, '{"vec": [7], "tag": "good"}') } @all), join(',', ('accepted') x 39),
	'failure: they all complete');
is(sql("SELECT count(*) FILTER (WHERE state = 'completed') || ' ' || count(*) FILTER (WHERE state = 'failed')"
		  . " FROM wfe.runs WHERE run_id IN ($in)"), '39 1', 'failure: no lost waiter: 39 runs completed, the leader\'s failed');
is(sql("SELECT count(*) FROM wfe.cache_entries WHERE key = '" . key_of('cold') . "'"), '1',
	'failure: an entry stored once a waiter\'s own attempt succeeded');

# a cancelled leader wakes its waiter, which runs itself
my $rl = submit('cached', 'cancel');
my $rw = submit('cached', 'cancel');
is(stage_row($rw), 'waiting waiting 0', 'cancel: the second run waits on the first');
is(sql("SELECT count(*) FROM wfe.dashboard_stuck WHERE run_id IN ($rl, $rw)"), '0',
	'dashboard_stuck: a run waiting on a live attempt under its key is not stuck');
# a waiter whose key has no attempt in flight (and no timer due) would be a lost one: it shows
sql("UPDATE wfe.run_stages SET cache_key = '" . key_of('nobody') . "' WHERE run_id = $rw AND stage = 'embed'");
is(sql("SELECT problem FROM wfe.dashboard_stuck WHERE run_id = $rw"), 'no live attempt',
	'dashboard_stuck: a waiter with nothing to wait on is stuck');
sql("UPDATE wfe.run_stages SET cache_key = '" . key_of('cancel') . "' WHERE run_id = $rw AND stage = 'embed'");
sql("SELECT wfe.cancel_run($rl, 'tap')");
ok($node->poll_query_until('postgres', "SELECT state = 'queued' FROM wfe.run_stages WHERE run_id = $rw AND stage = 'embed'"),
	'cancel: the cancelled leader\'s waiter runs itself');
@t = claim('embed');
is($t[0][0], $rw, '... its attempt is claimed');
complete($t[0], $good);
is(run_state($rw), 'completed', '... and its run completes');

# a waiter whose own run is cancelled is skipped: it waits no more and is never woken
my $wl = submit('cached', 'wcancel');
my $ww = submit('cached', 'wcancel');
my $dash_waiting = "SELECT waiting FROM wfe.dashboard_cache WHERE tenant = 'default' AND contract = 'embed\@1'";
is(stage_row($ww) . ' ' . sql($dash_waiting), 'waiting waiting 0 1', 'cancelled waiter: it waits, and dashboard_cache counts it');
sql("SELECT wfe.cancel_run($ww, 'tap')");
is(sql("SELECT state FROM wfe.run_stages WHERE run_id = $ww AND stage = 'embed'") . ' ' . run_state($ww), 'skipped cancelled',
	'cancelled waiter: its stage is skipped with its run');
is(sql($dash_waiting), '0', '... and dashboard_cache no longer counts it as waiting');
@t = claim('embed');
is($t[0][0], $wl, 'cancelled waiter: the leader is claimed');
complete($t[0], $good);
is(sql("SELECT count(*) FROM wfe.timers WHERE run_id = $ww"), '0', '... its end wakes no cancelled waiter');

# two stages of one run with one key, released in one step: one attempt, the other waits on it
WfeNode::workflow($node, <<'YAML');
name: twin
version: "1.0.0"
tasks:
  - id: a
    worker: embed@1
    queue: embed
    input: { text: "${context.text}" }
    cache: { ttl_ms: 600000 }
  - id: b
    worker: embed@1
    queue: embed
    input: { text: "${context.text}" }
    cache: { ttl_ms: 600000 }
YAML
my $rtw2 = submit('twin', 'twin');
is(stage_row($rtw2, 'a') . ' / ' . stage_row($rtw2, 'b'), 'queued miss 1 / waiting waiting 0',
	'twins: of two tasks released together under one key, one runs and the other waits on it');
is(sql("SELECT detail -> 'leader' ->> 'run_id' || ' ' || (detail -> 'leader' ->> 'stage') FROM wfe.events"
		  . " WHERE run_id = $rtw2 AND type = 'stage.cache_waiting'"), "$rtw2 a", '... on its own run\'s task a');
@t = claim('embed', 10);
is(scalar(@t), 1, 'twins: one task to claim');
complete($t[0], $good);
ok($node->poll_query_until('postgres', "SELECT state = 'completed' FROM wfe.runs WHERE run_id = $rtw2"),
	'twins: the run completes');
is(stage_row($rtw2, 'b'), 'completed coalesced 0', '... b from a\'s result');

# a stage released by the end of its own run's attempt under the same key
# (s1 -> s2, one input): that attempt is over, so s2 must not wait on it
WfeNode::workflow($node, <<'YAML');
name: twice
version: "1.0.0"
entry: s1
stages:
  - name: s1
    type: worker
    queue: embed
    worker: embed@1
    input: { text: "${context.text}" }
    cache: { ttl_ms: 600000 }
    retry: { max_attempts: 1 }
    on_success: s2
    on_failure: s2
  - name: s2
    type: worker
    queue: embed
    worker: embed@1
    input: { text: "${context.text}" }
    cache: { ttl_ms: 600000 }
    on_success: completed
    on_failure: failed
YAML
for my $how (qw(completes fails))
{
	my $r = submit('twice', "twice-$how");
	@t = claim('embed');
	if ($how eq 'completes') { complete($t[0], $good); }
	else { sql("SELECT wfe.fail_task($r, 's1', $t[0][2], $t[0][3], '{\"code\": \"x\"}', false)"); }
	if ($how eq 'completes')
	{
		# the step that stored s1's result serves s2 from it at once
		is(stage_row($r, 's2') . ' ' . events($r, 'stage.cache_waiting'), 'completed hit 0 0',
			"same run, same key: when s1 completes, s2 released in that step hits on s1's result (it does not wait on s1's ended attempt)");
		is(scalar(claim('embed')), 0, '... nothing is dispatched for it');
	}
	else
	{
		is(stage_row($r, 's2') . ' ' . events($r, 'stage.cache_waiting'), 'queued miss 1 0',
			"same run, same key: when s1 fails, s2 released in that step runs itself (it does not wait on s1's ended attempt)");
		@t = claim('embed');
		is($t[0][0] . ' ' . $t[0][1], "$r s2", '... its attempt is claimable');
		complete($t[0], $good);
	}
	is(run_state($r), 'completed', '... and the run completes');
}

#
# 7. Late reports and operators write nothing.
#
my $kl = key_of('late');
my $rlate = submit('cached', 'late');
my $rlw = submit('cached', 'late');
is(stage_row($rlw), 'waiting waiting 0', 'late: a second run waits on the attempt');
my @old = claim('embed');
sql("SELECT wfe.fail_stage($rlate, 'embed', 'tap fences it')");
is(complete($old[0], $good), 'late', 'late: the fenced attempt\'s report is late (its run failed)');
is(sql("SELECT count(*) FROM wfe.cache_entries WHERE key = '$kl'"), '0', 'late: and it wrote no entry');
ok($node->poll_query_until('postgres', "SELECT state = 'queued' FROM wfe.run_stages WHERE run_id = $rlw AND stage = 'embed'"),
	'late: the waiter of the failed-by-hand leader runs itself');
sql("SELECT wfe.skip_stage($rlate, 'embed', '$good', 'tap skips it')");
is(stage_row($rlate) . ' ' . run_state($rlate), 'completed miss 1 completed', 'skip: the operator completed the stage and the run');
is(sql("SELECT count(*) FROM wfe.cache_entries WHERE key = '$kl'"), '0', 'skip: the operator\'s result is not stored');
@t = claim('embed');
is($t[0][0], $rlw, 'late: the waiter\'s own attempt');
is(complete($t[0], '{"vec": [9], "tag": "good"}'), 'accepted', '... completes');
is(sql("SELECT run_id FROM wfe.cache_entries WHERE key = '$kl'"), $rlw, '... and only its accepted result is stored');
is(complete($old[0], '{"vec": [10], "tag": "good"}'), 'late', 'late: a second late report (the run completed by hand) is late too');
is(sql("SELECT run_id || ' ' || result::text FROM wfe.cache_entries WHERE key = '$kl'"), "$rlw {\"tag\": \"good\", \"vec\": [9]}",
	'... and changes nothing');
# a timed-out attempt is fenced: its report is stale, stores nothing, and the
# retry (still in flight under the key) keeps the waiter waiting
my $kt = key_of('timed');
my $rt = submit('timed', 'timed');
my $rtw = submit('timed', 'timed');
is(stage_row($rtw), 'waiting waiting 0', 'timeout: a second run waits on the attempt');
@old = claim('embed');
ok($node->poll_query_until('postgres', "SELECT state = 'queued' AND attempt = 2 FROM wfe.run_stages WHERE run_id = $rt AND stage = 'embed'"),
	'timeout: the attempt timed out and its retry is queued');
is(complete($old[0], $good), 'stale', 'timeout: the timed-out attempt\'s report is stale');
is(sql("SELECT count(*) FROM wfe.cache_entries WHERE key = '$kt'"), '0', '... and wrote no entry');
is(stage_row($rtw), 'waiting waiting 0', 'timeout: a retryable failure does not wake the waiter');
@t = claim('embed');
is("$t[0][0] $t[0][2]", "$rt 2", 'timeout: the retry is claimed');
is(complete($t[0], '{"vec": [11], "tag": "good"}'), 'accepted', '... and completes');
is(sql("SELECT run_id || ' ' || attempt FROM wfe.cache_entries WHERE key = '$kt'"), "$rt 2", '... its result is stored');
ok($node->poll_query_until('postgres', "SELECT state = 'completed' FROM wfe.runs WHERE run_id = $rtw"),
	'timeout: the waiter completes from it');
is(stage_row($rtw), 'completed coalesced 0', '... coalesced');

# an invalid result is not stored either
my $kv = key_of('invalid');
my $rv = submit('cached', 'invalid');
@t = claim('embed');
isnt(complete($t[0], '{"tag": "no vec"}'), 'accepted', 'an invalid result is refused');
is(sql("SELECT count(*) FROM wfe.cache_entries WHERE key = '$kv'"), '0', '... and not stored');

#
# 8. cache_invalidate and retention.
#
sql("SELECT wfe.cache_invalidate(key => '$kb')");    # expired: retention may have taken it already
my $n_default = sql("SELECT count(*) FROM wfe.cache_entries WHERE tenant = 'default' AND contract = 'embed\@1'");
is(sql("SELECT wfe.cache_invalidate(key => '$k1')"), '1', 'invalidate by key: 1');
is(sql("SELECT count(*) FROM wfe.cache_entries WHERE key = '$k1'"), '0', '... gone');
my $r4 = submit('cached', 'hello');
is(stage_row($r4), 'queued miss 1', '... the next release misses');
@t = claim('embed');
complete($t[0], $good);
is(sql("SELECT wfe.cache_invalidate(contract => 'nobody\@1')"), '0', 'invalidate by an unknown contract: 0');
is(sql("SELECT wfe.cache_invalidate(tenant => 'A')"), '1', 'invalidate by tenant A: 1');
is(sql("SELECT wfe.cache_invalidate(contract => 'embed\@1', tenant => 'default')"), $n_default,
	"invalidate by contract and tenant: every entry of embed\@1 in the default tenant ($n_default)");
is(sql("SELECT wfe.cache_invalidate(contract => 'embedb\@1')"), '1', 'invalidate by contract: 1');
is(sql('SELECT count(*) FROM wfe.cache_entries'), '0', 'nothing is left');

my $ke = key_of('expire');
submit('brief', 'expire');
@t = claim('embed');
complete($t[0], $good);
submit('cached', 'keep');
@t = claim('embed');
complete($t[0], $good);
ok($node->poll_query_until('postgres', "SELECT coalesce(bool_and(expires_at < now()), true) FROM wfe.cache_entries WHERE key = '$ke'"),
	'retention: the short entry expired');
sql('SELECT wfe._retention(604800, 1000)');
is(sql("SELECT count(*) FROM wfe.cache_entries WHERE key = '$ke'"), '0', 'retention: removes the expired entry');
is(sql("SELECT count(*) FROM wfe.cache_entries WHERE key = '" . key_of('keep') . "'"), '1', 'retention: keeps the live one');
is(sql("SELECT entries || ' ' || hits || ' ' || misses FROM wfe.dashboard_cache WHERE tenant = 'default' AND contract = 'embed\@1'"),
	sql("SELECT (SELECT count(*) FROM wfe.cache_entries WHERE tenant = 'default' AND contract = 'embed\@1' AND expires_at > now()) || ' '"
		  . " || count(*) FILTER (WHERE cache = 'hit') || ' ' || count(*) FILTER (WHERE cache = 'miss') FROM wfe.run_stages"
		  . " WHERE tenant = 'default' AND worker = 'embed\@1' AND cache_key IS NOT NULL"),
	'dashboard_cache counts the entries, hits and misses');

#
# 9. A cached in-database action.
#
sql(<<'SQL');
CREATE SEQUENCE public.tap_calls;
CREATE FUNCTION public.tap_square(input jsonb) RETURNS jsonb
LANGUAGE sql AS $$ SELECT jsonb_build_object('sq', (input ->> 'v')::int * (input ->> 'v')::int,
                                             'call', nextval('public.tap_calls')) $$;
SELECT wfe.register_action('square@1', handler => 'public.tap_square(jsonb)', output_schema => '{"required": ["sq"]}');
SQL
WfeNode::workflow($node, <<'YAML');
name: squared
version: "1.0.0"
entry: square
stages:
  - name: square
    type: action
    action: square@1
    input: { v: "${context.v}" }
    cache: { ttl_ms: 60000 }
    on_success: completed
    on_failure: failed
YAML
my $ra_1 = sql(q{SELECT run_id FROM wfe.submit('squared', '{"v": 7}')});
ok($node->poll_query_until('postgres', "SELECT state = 'completed' FROM wfe.runs WHERE run_id = $ra_1"),
	'action: the first run completes (the worker ran the handler)');
is(sql("SELECT cache || ' ' || attempt || ' ' || result::text FROM wfe.run_stages WHERE run_id = $ra_1"),
	'miss 1 {"sq": 49, "call": 1}', 'action: a miss ran the handler');
like(sql("SELECT cache_key FROM wfe.run_stages WHERE run_id = $ra_1"), qr/^sha256:[0-9a-f]{64}$/, '... under a key');
is( sql("SELECT cache_key FROM wfe.run_stages WHERE run_id = $ra_1"),
	digest('{"contract":"square@1","implementation":"handler:public.tap_square(input jsonb)","input":{"v":7},"schemas":"'
		  . digest('{"input":{},"output":{"required":["sq"]}}') . '","tenant":"default","v":1}'),
	'... the documented key of a handler (its identity with its arguments)');
my $ra_2 = sql(q{SELECT run_id FROM wfe.submit('squared', '{"v": 7}')});
is(run_state($ra_2), 'completed', 'action: the second run completed in its submit');
is(sql("SELECT cache || ' ' || attempt || ' ' || result::text FROM wfe.run_stages WHERE run_id = $ra_2"),
	'hit 0 {"sq": 49, "call": 1}', 'action: a hit, with the first call\'s result');
sql('SELECT wfe.tick()');
is(sql("SELECT last_value FROM public.tap_calls"), '1', 'action: the handler ran once');

done_testing();
