# Bounded JSON Schema validation in the background worker (docs/dsl.md
# "Bounds"): a contract's schema that asks for 2^28 evaluations (28
# levels of anyOf over two $refs to the next) is validated by the worker
# when an in-database action's input is bound or its result checked.
#
#   - with the default wfe.schema_step_budget the attempt fails with the
#     budget's message, within seconds, and the worker goes on: another
#     run completes, through a retry timer;
#   - with a budget of minutes, pg_cancel_backend stops the worker's
#     validation at once: the attempt is not failed (nothing the stopped
#     validation decided is written), the worker carries on, and with the
#     budget back to its default the next round fails the attempt.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);
use WfeNode;

my $node = WfeNode::node('wfe_schema_budget', preload => 1, conf => "wfe.poll_interval_ms = 200\n");
WfeNode::worker_runs($node);

sub sql { return $node->safe_psql('postgres', $_[0]); }

# The bomb: 2 KB of schema, 2^28 evaluations for a value that is not a string.
# Here it checks the member v of an object: {"v": 1} sets it off.
my $levels = 28;
my $bomb = '{"type": "object", "properties": {"v": {"$ref": "#/$defs/d0"}}, "$defs": {'
  . join('', map { my $n = $_ + 1; qq("d$_": {"anyOf": [{"\$ref": "#/\$defs/d$n"}, {"\$ref": "#/\$defs/d$n"}]}, ) } 0 .. $levels - 1)
  . qq("d$levels": {"type": "string"}}});
cmp_ok(length($bomb), '<', 2200, 'the schema is about 2 KB');

sql(<<"SQL");
CREATE FUNCTION public.tap_echo(input jsonb) RETURNS jsonb
LANGUAGE sql AS \$\$ SELECT jsonb_build_object('v', input -> 'v') \$\$;
-- fails its first call ever, so its run waits for a retry timer
CREATE SEQUENCE public.tap_calls;
CREATE FUNCTION public.tap_flaky(input jsonb) RETURNS jsonb
LANGUAGE plpgsql AS \$\$
BEGIN
    IF nextval('public.tap_calls') = 1 THEN
        RAISE EXCEPTION 'tap_flaky: the first call fails';
    END IF;
    RETURN input;
END
\$\$;
SELECT wfe.register_action('tap.echo\@1', handler => 'public.tap_echo(jsonb)');
SELECT wfe.register_action('tap.flaky\@1', handler => 'public.tap_flaky(jsonb)');
-- its input (bound in the worker, once the echo before it completes)
SELECT wfe.register_action('tap.bomb-in\@1', handler => 'public.tap_echo(jsonb)',
                           input_schema => '$bomb');
-- its result (checked in the worker, after the handler)
SELECT wfe.register_action('tap.bomb-out\@1', handler => 'public.tap_echo(jsonb)',
                           output_schema => '$bomb');
SQL
sql(<<'SQL');
SELECT wfe.create_definition($y$
name: bomb-in
version: "1.0.0"
entry: first
stages:
  - { name: first, type: action, action: tap.echo@1, input: { v: "${context.v}" }, on_success: checked, on_failure: failed }
  - { name: checked, type: action, action: tap.bomb-in@1, input: { v: "${context.v}" }, on_success: completed, on_failure: failed }
$y$);
SELECT wfe.create_definition($y$
name: bomb-out
version: "1.0.0"
entry: checked
stages:
  - { name: checked, type: action, action: tap.bomb-out@1, input: { v: "${context.v}" }, on_success: completed, on_failure: failed }
$y$);
SELECT wfe.create_definition($y$
name: plain
version: "1.0.0"
entry: flaky
stages:
  - name: flaky
    type: action
    action: tap.flaky@1
    retry: {max_attempts: 3, initial_ms: 300, multiplier: 1, max_ms: 300, jitter: none}
    on_success: completed
    on_failure: failed
$y$);
SELECT wfe.approve(w, '1.0.0'), wfe.activate(w, '1.0.0') FROM unnest(ARRAY['bomb-in', 'bomb-out', 'plain']) AS w;
SQL
pass('contracts with the schema, and workflows over them');

# What the worker decided about each stage: state, error code, message.
sub stage_of
{
	my ($run, $stage) = @_;
	return sql("SELECT state || ' ' || coalesce(error ->> 'code', '-') || ' ' || coalesce(error ->> 'message', '-')"
		  . " FROM wfe.run_stages WHERE run_id = $run AND stage = '$stage'");
}

#
# The default budget: each attempt fails with the budget's message.
#
{
	my $t0 = time;
	my ($in, $out, $plain) = split /\n/, sql(<<'SQL');
BEGIN;
SELECT run_id FROM wfe.submit('bomb-in', '{"v": 1}');
SELECT run_id FROM wfe.submit('bomb-out', '{"v": 1}');
SELECT run_id FROM wfe.submit('plain', '{"v": 1}');
COMMIT;
SQL
	ok($node->poll_query_until('postgres',
			"SELECT bool_and(finished_at IS NOT NULL) FROM wfe.runs WHERE run_id IN ($in, $out, $plain)"),
		'the three runs finished');
	my $took = time - $t0;
	is(sql("SELECT string_agg(state, ',' ORDER BY run_id) FROM wfe.runs WHERE run_id IN ($in, $out, $plain)"),
		'failed,failed,completed', 'the two runs over the schema failed; the plain one completed');
	like(stage_of($in, 'checked'),
		qr/^failed binding\.type input\.v: validation needs more than its budget of 10000000 steps \(wfe\.schema_step_budget\)/,
		'the input binding in the worker: binding.type, naming the budget');
	like(stage_of($out, 'checked'),
		qr/^failed result\.schema .*validation needs more than its budget of 10000000 steps \(wfe\.schema_step_budget\)/,
		'the result check in the worker: result.schema, naming the budget');
	cmp_ok($took, '<', 30, sprintf('all within %.1f s (2^28 evaluations took minutes)', $took));
	is(sql("SELECT attempt FROM wfe.run_stages WHERE run_id = $plain AND stage = 'flaky'"), '2',
		'the plain run completed at its second attempt: its retry timer fired meanwhile');
}

#
# A budget of minutes: pg_cancel_backend stops the worker's validation.
#
my $offset = -s $node->logfile;
sql('ALTER SYSTEM SET wfe.schema_step_budget = 2000000000');
sql('SELECT pg_reload_conf()');
$node->wait_for_log(qr/wfe worker reloaded its configuration/, $offset);
my $run = sql(q{SELECT run_id FROM wfe.submit('bomb-out', '{"v": 2}')});
my $worker = sql('SELECT pid FROM wfe.worker_status()');
ok( $node->poll_query_until('postgres',
		"SELECT state = 'active' AND query = 'wfe worker: running an in-database action'"
		  . " AND now() - state_change > interval '1 second' FROM pg_stat_activity WHERE pid = $worker"),
	'the worker is busy validating the result for over a second');
is(stage_of($run, 'checked'), 'queued - -', 'meanwhile the attempt is as it was');
# the default budget again (read at the loop's top), then the cancel
$offset = -s $node->logfile;
sql('ALTER SYSTEM RESET wfe.schema_step_budget');
sql('SELECT pg_reload_conf()');
my $t0 = time;
is(sql("SELECT pg_cancel_backend($worker)"), 't', 'pg_cancel_backend(the worker)');
$node->wait_for_log(qr/canceling statement due to user request/, $offset);
my $stopped = time - $t0;
cmp_ok($stopped, '<', 5, sprintf('the validation stopped %.2f s after the cancel', $stopped));
is(sql('SELECT pid FROM wfe.worker_status()'), $worker, 'the same worker carries on');
ok($node->poll_query_until('postgres', "SELECT finished_at IS NOT NULL FROM wfe.runs WHERE run_id = $run"),
	'the run finishes on a later round');
like(stage_of($run, 'checked'),
	qr/^failed result\.schema .*budget of 10000000 steps/,
	'with the default budget: result.schema, naming the budget');
# retried per policy: each attempt claimed once, the cancelled claim rolled back
is(sql("SELECT count(*) = count(DISTINCT attempt) AND min(attempt) = 1 FROM wfe.events"
	  . " WHERE run_id = $run AND type = 'stage.claimed'"), 't',
	'the cancelled round wrote nothing: each attempt was claimed once');
is(sql("SELECT count(*) FROM wfe.events WHERE run_id = $run AND detail::text LIKE '%interrupted%'"), '0',
	'and no attempt was failed as "interrupted"');

$node->stop;
done_testing();
