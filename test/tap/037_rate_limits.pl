# Rate limits (operations.md "Flow control", dsl.md "Flow-control keys").
#
# 1. Bad input, as a real login of wfe_admin: a rate of 0 or below, a
#    burst below 1 (22023, naming the parameter), for a new limit and for
#    one already configured -- nothing is made or changed; a role that is
#    not wfe_admin is refused (42501) and nothing changes.
# 2. The compiler: ratelimit.unknown is a warning, a malformed rate_limit
#    an error.
# 3. The window property, shortened: with ample work, a claimer that
#    claims every 20 ms for 10 s starts at most rate x 10 + burst attempts
#    of a stage with rate_limit, and at least 95% of that.  Held attempts
#    stay queued, show in dashboard_stuck, and the background worker's
#    timer makes them ready again -- its poll interval is an hour, so
#    nothing polls.
# 4. A stage naming a rate limit that is not configured waits (shown in
#    dashboard_stuck); configuring it releases the attempt.  So does an
#    attempt already queued when its limit is dropped (per_second NULL).
# 5. The attack: keyed buckets come from a run's data: at
#    wfe.max_rate_keys buckets per limit and tenant, more keys share the
#    overflow bucket (the table stays bounded); no wfe role reads the
#    buckets (a real login is refused, nothing changes).
# 6. Shared memory (under the preload, buckets live there, not in rows):
#    two claims racing for the last token -- the second does not wait for
#    the first's commit, holds its task, and never two run; a claim that
#    rolls back gives its token back; a restart at most refills a bucket.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use WfeNode;
use WfeLogin;

my $node = WfeNode::node('wfe_rate_limits', preload => 1,
	conf => "wfe.poll_interval_ms = 3600000\n"
	  . "wfe.max_rate_keys = 3\n");
WfeNode::worker_runs($node, rounds => 0);

sub sql { return $node->safe_psql('postgres', $_[0]); }

# psql as ROLE: (exit status, stderr)
sub as_role
{
	my ($role, $query) = @_;
	my ($out, $err) = ('', '');
	my $status = $node->psql('postgres', "SET ROLE $role; $query", stdout => \$out, stderr => \$err);
	return ($status, $err);
}

# A workflow NAME of one worker stage on QUEUE whose rate_limit is RL (YAML).
sub workflow
{
	my ($name, $queue, $rl) = @_;
	sql(qq{SELECT wfe.register_worker('tap.$name\@1', '$queue');});
	WfeNode::workflow($node, <<"YAML");
name: $name
version: "1.0.0"
entry: a
stages:
  - name: a
    type: worker
    queue: $queue
    worker: tap.$name\@1
    rate_limit: $rl
    on_success: completed
    on_failure: failed
YAML
	return;
}

# --- 1. bad input -----------------------------------------------------------
sql(q{CREATE ROLE alice LOGIN IN ROLE wfe_operator; CREATE ROLE root_admin IN ROLE wfe_admin;
CREATE ROLE admin_login LOGIN IN ROLE wfe_admin;});
# everything configure_rate_limit may touch
sub limits_now
{
	return sql(q{SELECT coalesce(string_agg(name || ' ' || per_second || ' ' || burst || ' ' || updated_at, ',' ORDER BY name), '-')
	                  || ' / ' || (SELECT count(*) FROM wfe.rate_buckets) FROM wfe.rate_limits});
}
my $before = limits_now();
my ($st, $err);
for my $case ([ q{'api', 0}, qr/per_second must be positive, not 0/, 'a rate of 0' ],
	[ q{'api', -2.5}, qr/per_second must be positive, not -2\.5/, 'a negative rate' ],
	[ q{'api', 5, 0}, qr/burst must be at least 1, not 0/, 'a burst of 0' ],
	[ q{'api', 5, -3}, qr/burst must be at least 1, not -3/, 'a negative burst' ])
{
	my $r = WfeLogin::as_login($node, 'admin_login', "SELECT wfe.configure_rate_limit($case->[0])", strict => 1);
	is($r->{state}, '22023', "$case->[2] is refused (22023)");
	like($r->{msg}, $case->[1], '... naming the parameter');
}
is(limits_now(), $before, 'and nothing was configured');
# the same for a limit already configured: it stays as it was
is(WfeLogin::as_login($node, 'admin_login', q{SELECT wfe.configure_rate_limit('kept', 2, 3)})->{state}, '',
	'an admin login configures a limit');
$before = limits_now();
for my $args (q{'kept', 0}, q{'kept', -1, 3}, q{'kept', 2, 0})
{
	is(WfeLogin::as_login($node, 'admin_login', "SELECT wfe.configure_rate_limit($args)")->{state}, '22023',
		"changing it to ($args) is refused (22023)");
}
is(limits_now(), $before, 'and the limit and its bucket are as they were');
sql(q{SELECT wfe.configure_rate_limit('kept', NULL)});
($st, $err) = as_role('alice', q{SELECT wfe.configure_rate_limit('api', 5, 5)});
like($err, qr/permission denied/, 'an operator may not configure a rate limit');
is(sql('SELECT count(*) FROM wfe.rate_limits'), '0', 'and nothing was configured');

# --- 2. the compiler --------------------------------------------------------
sql(q{SELECT wfe.register_worker('tap.c@1', 'q')});
my $compiled = sql(q{
SELECT string_agg(d ->> 'code' || ':' || (d ->> 'severity'), ',')
  FROM jsonb_array_elements(wfe.compile($y$
name: c
version: "1.0.0"
entry: a
stages:
  - name: a
    type: worker
    queue: q
    worker: tap.c@1
    rate_limit: nosuch
    on_success: completed
    on_failure: failed
$y$) -> 'diagnostics') AS d WHERE d ->> 'code' LIKE 'ratelimit%'});
is($compiled, 'ratelimit.unknown:warning', 'a rate limit not configured is a warning at compile time');
like(sql(q{SELECT wfe.compile($y$
name: c
version: "1.0.0"
entry: a
stages:
  - name: a
    type: worker
    queue: q
    worker: w@1
    rate_limit: {key: "${context.k}"}
    on_success: completed
    on_failure: failed
$y$) -> 'diagnostics'}), qr/schema.required/, 'a rate_limit without a name is an error');

# --- 3. the window property -------------------------------------------------
my ($rate, $burst, $secs) = (5, 5, 10);
sql(qq{SET ROLE root_admin; SELECT wfe.configure_rate_limit('api', $rate, $burst)});
workflow('rl', 'rlq', 'api');
sql(q{SELECT wfe.submit('rl', '{}') FROM generate_series(1, 200)});
# a claimer: claims up to 20 tasks every 20 ms, completes them, logs when
sql(q{
CREATE TABLE public.started (run_id bigint, at timestamptz);
CREATE TABLE public.stuck_seen (problem text);
CREATE PROCEDURE public.claimer(p_secs float8) LANGUAGE plpgsql AS $$
DECLARE
    t wfe.task;
    v_end timestamptz := clock_timestamp() + make_interval(secs => p_secs);
BEGIN
    WHILE clock_timestamp() < v_end LOOP
        FOR t IN SELECT * FROM wfe.claim_task('rlq', 'w1', 20) LOOP
            INSERT INTO public.started VALUES (t.run_id, clock_timestamp());
            PERFORM wfe.complete_task(t.run_id, t.stage, t.attempt, t.fence, '{}');
        END LOOP;
        INSERT INTO public.stuck_seen SELECT DISTINCT problem FROM wfe.dashboard_stuck;
        COMMIT;
        PERFORM pg_sleep(0.02);
    END LOOP;
END
$$;});
sql("CALL public.claimer($secs)");
my $bound = $rate * $secs + $burst;
my $started = sql("SELECT count(*) FROM public.started");
cmp_ok($started, '<=', $bound, "in $secs s at $rate/s burst $burst: $started started, at most $bound");
cmp_ok($started, '>=', 0.95 * $bound, "and at least 95% of $bound");
is(sql(q{SELECT count(*) FROM public.stuck_seen WHERE problem = 'rate limited'}) > 0 ? 1 : 0, 1,
	'held attempts showed in dashboard_stuck as rate limited');
is(sql(q{SELECT count(*) FROM wfe.run_stages WHERE stage = 'a' AND state NOT IN ('queued', 'completed')}),
	'0', 'every attempt not started is still queued');
# the timer: held attempts become ready when their token is due, with nobody claiming
ok( $node->poll_query_until(
		'postgres', q{SELECT count(*) = 0 FROM wfe.run_stages WHERE held_until IS NOT NULL AND held_until < now() - interval '1 second'}),
	'the worker timer makes due held attempts ready (its poll interval is an hour)');

# --- 4. a rate limit that is not configured --------------------------------
workflow('rl2', 'rlq2', 'later');
my $run = sql(q{SELECT run_id FROM wfe.submit('rl2', '{}')});
is(sql(q{SELECT count(*) FROM wfe.claim_task('rlq2', 'w2', 5)}), '0', 'an attempt naming no configured rate limit is not claimed');
is(sql(qq{SELECT problem || ': ' || detail FROM wfe.dashboard_stuck WHERE run_id = $run}),
	'rate limit unknown: later is not configured', 'dashboard_stuck says why');
sql(q{SET ROLE root_admin; SELECT wfe.configure_rate_limit('later', 100)});
is(sql(q{SELECT count(*) FROM wfe.claim_task('rlq2', 'w2', 5)}), '1', 'configuring it releases the attempt');
# an attempt queued (ready) when its limit is dropped waits too, until it is configured again
$run = sql(q{SELECT run_id FROM wfe.submit('rl2', '{}')});
sql(q{SET ROLE root_admin; SELECT wfe.configure_rate_limit('later', NULL)});
is(sql(q{SELECT count(*) FROM wfe.claim_task('rlq2', 'w2', 5)}), '0', 'a queued attempt whose limit was dropped is not claimed');
is(sql(qq{SELECT problem || ': ' || detail FROM wfe.dashboard_stuck WHERE run_id = $run}),
	'rate limit unknown: later is not configured', 'dashboard_stuck says why');
sql(q{SET ROLE root_admin; SELECT wfe.configure_rate_limit('later', 100)});
is(sql(q{SELECT count(*) FROM wfe.claim_task('rlq2', 'w2', 5)}), '1', 'configuring it again releases the attempt');

# --- 5. keyed buckets: bounded, and invisible ------------------------------
sql(q{SET ROLE root_admin; SELECT wfe.configure_rate_limit('per_customer', 1000)});
workflow('rl3', 'rlq3', '{name: per_customer, key: "${context.customer}"}');
sql(q{SELECT wfe.submit('rl3', jsonb_build_object('customer', 'c' || g)) FROM generate_series(1, 20) AS g});
is(sql(q{SELECT count(*) FROM wfe.claim_task('rlq3', 'w3', 50)}), '20', 'keyed attempts with tokens are claimed');
my $tenant = sql(q{SELECT tenant FROM wfe.runs WHERE workflow = 'rl3' LIMIT 1});
my $rows = sql(qq{SELECT wfe._rate_buckets_count('per_customer', '$tenant')});
cmp_ok($rows, '<=', 4, "20 key values made $rows buckets: at most wfe.max_rate_keys (3) and the overflow bucket");
cmp_ok($rows, '>=', 1, 'and the buckets live in shared memory');
is(sql(q{SELECT rate_key FROM wfe.run_stages WHERE run_id = (SELECT min(run_id) FROM wfe.runs WHERE workflow = 'rl3')}),
	'c1', 'the key is bound from the run');
for my $role ('alice', 'wfe_reader', 'wfe_operator')
{
	($st, $err) = as_role($role, q{SELECT * FROM wfe.rate_buckets});
	like($err, qr/permission denied/, "$role cannot read the buckets");
	($st, $err) = as_role($role, q{UPDATE wfe.rate_buckets SET tokens = 1e9});
	like($err, qr/permission denied/, "$role cannot refill them");
}
is(sql(q{SELECT count(*) FROM wfe.rate_buckets WHERE tokens > 1e6}), '0', 'and no bucket changed');
for my $role ('alice', 'wfe_admin')
{
	($st, $err) = as_role($role, q{SELECT wfe._rate_buckets_reset('per_customer', true)});
	like($err, qr/permission denied/, "$role cannot drop the buckets in shared memory");
	($st, $err) = as_role($role, q{SELECT wfe._rate_buckets_count('per_customer', NULL)});
	like($err, qr/permission denied/, "$role cannot count them");
}
is(sql(qq{SELECT wfe._rate_buckets_count('per_customer', '$tenant')}), $rows, 'and they are all still there');

# --- 6. shared memory: the race, a rollback, a restart -----------------------
sql(q{SET ROLE root_admin; SELECT wfe.configure_rate_limit('one', 0.00001, 1)});
workflow('rl4', 'rlq4', 'one');
workflow('rl5', 'rlq5', 'one');
sql(q{SELECT wfe.submit('rl4', '{}') FROM generate_series(1, 2)});
sql(q{SELECT wfe.submit('rl5', '{}')});
my $first = $node->background_psql('postgres');
is($first->query_safe("BEGIN;\nSELECT count(*) FROM wfe.claim_task('rlq4', 'w4', 1);"), '1',
	'the first claim takes the last token, and has not committed');
# the second would wait for the first's commit if buckets were locked rows: 2 s and it fails
is(sql(q{SET statement_timeout = '2s'; SELECT count(*) FROM wfe.claim_task('rlq5', 'w5', 1)}), '0',
	'the second claim does not wait for it, and finds no token');
is(sql(q{SELECT count(*) FROM wfe.run_stages WHERE queue = 'rlq5' AND state = 'queued' AND held_until IS NOT NULL}),
	'1', 'its task stays queued, held');
$first->query_safe('ROLLBACK;');
is(sql(q{SELECT count(*) FROM wfe.claim_task('rlq4', 'w4', 1)}), '1',
	'the first rolled back: its token was given back, and a claim takes it');
is(sql(q{SELECT count(*) FROM wfe.run_stages WHERE rate_limit = 'one' AND state = 'running'}), '1',
	'never two running');
$first->quit;
# a restart forgets the buckets: at most a refill
$node->restart;
is(sql(q{SELECT count(*) FROM wfe.run_stages WHERE rate_limit = 'one' AND state = 'queued' AND held_until IS NOT NULL}),
	'1', 'after a restart the held task is still held');
sql(q{SET ROLE root_admin; SELECT wfe.configure_rate_limit('one', 0.00001, 1)});
is(sql(q{SELECT count(*) FROM wfe.claim_task('rlq4', 'w4', 5)}) + sql(q{SELECT count(*) FROM wfe.claim_task('rlq5', 'w5', 5)}),
	1, 'and the refilled bucket gives one burst (1), no more');

done_testing();
