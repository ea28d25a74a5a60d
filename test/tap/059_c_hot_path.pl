# No PL/pgSQL (nor SQL-language) function on the path of a submit, a claim
# or a report (issue 24 item 1; architecture.md "What runs on a step").
#
# With track_functions = all, a real login with the roles of a submitter
# and a worker runs, in one session and each in a transaction of its own:
# submits, a claim and its completion (which releases the next stage), a
# batch claim, a failure that is retried, complete_tasks, a broker dispatch
# under a queue's max_in_flight and its release, the same under a tenant's
# max_tasks_in_flight, a rate-limited stage, a keyed-concurrency stage, a
# fair queue's batch claim, a signal to a waiting run.  Before each commit
# it reads pg_stat_xact_user_functions: the functions the transaction
# called, with their language.  Nothing but C may be listed, except a
# PL/pgSQL control function the first transaction calls on purpose (so
# this test can fail: if the view stopped listing PL/pgSQL calls, the
# control would be missing), and, a known TODO, the signal's.
#
# Twice: with wfe.publish_events off, then on (the event projection's
# trigger, C too, is then listed, and every event of the session is in
# the outbox).  No background worker: nothing runs but the session.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use WfeLogin;
use WfeNode;

my $node = WfeNode::node('wfe_c_hot_path', conf => "track_functions = all\n");

sub sql { return $node->safe_psql('postgres', $_[0]); }

# the workflows: one worker stage on QUEUE (then a second on hp), with LINES
sub flow
{
	my ($queue, $lines, $then) = @_;
	sql(qq{SELECT wfe.register_worker('hot.$queue\@1', '$queue');});
	my $next = $then ? 'b' : 'completed';
	my $yaml = "name: $queue\nversion: \"1.0.0\"\nentry: a\nstages:\n"
	  . "  - name: a\n    type: worker\n    queue: $queue\n    worker: hot.$queue\@1\n$lines"
	  . "    on_success: $next\n    on_failure: failed\n";
	$yaml .= "  - name: b\n    type: worker\n    queue: $queue\n    worker: hot.$queue\@1\n"
	  . "    on_success: completed\n    on_failure: failed\n" if $then;
	WfeNode::workflow($node, $yaml);
	return;
}
flow('hp', "    retry: { max_attempts: 3, initial_ms: 60000 }\n", 1);
flow('hb', '');
flow('ht', '');
flow('hr', "    rate_limit: hot-rl\n");
flow('hk', "    concurrency: { key: \"\${context.k}\", max: 1 }\n");
flow('hf', '');
sql(q{SELECT wfe.register_signal('sig.hot@1');});
WfeNode::workflow($node, <<'YAML');
name: hw
version: "1.0.0"
entry: w
stages:
  - { name: w, type: wait, signal: sig.hot@1, timeout_ms: 86400000, on_success: completed, on_failure: failed }
YAML
sql(q{
SELECT wfe.configure_queue('hb', 'broker', max_in_flight => 1);
SELECT wfe.configure_queue('ht', 'broker');
SELECT wfe.configure_tenant('T', max_tasks_in_flight => 1);
SELECT wfe.configure_rate_limit('hot-rl', 1000000, 1000000);
SELECT wfe.configure_queue('hf', fairness => 'tenant');
});

# two logins, the same roles: hot_on publishes events
for my $login ('hot_off', 'hot_on')
{
	WfeNode::logins($node, $login => 'wfe_submitter,wfe_worker default T A B');
	sql(join "\n", map { "SELECT wfe.grant_queue('$login', '$_');" } qw(hp hb ht hr hk hf));
	sql(qq{SELECT wfe.grant_signal('$login', 'sig.hot\@1');});
}
sql(q{ALTER ROLE hot_on SET wfe.publish_events = on;});

# The scaffolding, owned by the superuser: the control function; what the
# transaction called, by language (a view: reading it calls no function);
# the broker attempts with a dispatch message, which a worker learns from
# the envelope (no broker here).
sql(q{
CREATE FUNCTION public.control_plpgsql() RETURNS int LANGUAGE plpgsql AS $$ BEGIN RETURN 1; END $$;
CREATE VIEW public.xact_calls AS
SELECT coalesce(string_agg(p.oid::regprocedure::text, ',' ORDER BY p.oid::regprocedure::text)
                  FILTER (WHERE l.lanname <> 'c'), '') AS not_c,
       coalesce(string_agg(p.oid::regprocedure::text, ',' ORDER BY p.oid::regprocedure::text)
                  FILTER (WHERE l.lanname = 'c'), '') AS c
  FROM pg_stat_xact_user_functions AS f
  JOIN pg_proc AS p ON p.oid = f.funcid
  JOIN pg_language AS l ON l.oid = p.prolang;
CREATE VIEW public.dispatched AS
SELECT s.run_id, s.stage, s.attempt, s.fence, s.queue
  FROM wfe.run_stages AS s
 WHERE s.state IN ('queued', 'dispatched')
   AND EXISTS (SELECT 1 FROM wfe.outbox AS o
                WHERE o.kind = 'dispatch' AND o.run_id = s.run_id AND o.stage = s.stage
                  AND o.attempt = s.attempt AND o.fence = s.fence);
GRANT EXECUTE ON FUNCTION public.control_plpgsql() TO PUBLIC;
GRANT SELECT ON public.xact_calls, public.dispatched TO PUBLIC;
GRANT EXECUTE ON FUNCTION pg_stat_force_next_flush() TO PUBLIC;
});

# the SQL that accepts the first dispatched attempt of broker QUEUE and completes it
sub accept_and_complete
{
	my ($queue) = @_;
	return qq{SELECT run_id AS b_run, stage AS b_stage, attempt AS b_attempt, fence AS b_fence
  FROM public.dispatched WHERE queue = '$queue' ORDER BY run_id LIMIT 1 \\gset
SELECT wfe.accept_task(:b_run, :'b_stage', :b_attempt, :b_fence, 'bw') || ' '
       || wfe.complete_task(:b_run, :'b_stage', :b_attempt, :b_fence) AS answers \\gset};
}

# STEP => SQL: each step a transaction (NB: a submit per row needs an
# argument from the row, else it is called once); its last line prints
# "STEP|answers|not C|C".  :'answers' is what the step's calls answered.
# NB: pg_stat_xact_user_functions shows what the backend has not yet sent
# to the cumulative statistics, which it sends at most once a second: each
# step asks for them to be sent once it commits, so that what the next
# step reads is its own.
my @steps = (
	[ submit => q{SELECT public.control_plpgsql() AS control \gset
SELECT string_agg(s.accepted::text, ' ') AS answers
  FROM generate_series(1, 4) AS i, wfe.submit('hp', jsonb_build_object('i', i)) AS s \gset} ],
	[ claim => q{SELECT run_id AS c_run, stage AS c_stage, attempt AS c_attempt, fence AS c_fence,
       'claimed' AS answers FROM wfe.claim_task('hp', 'w', 1) \gset} ],
	[ complete => q{SELECT wfe.complete_task(:c_run, :'c_stage', :c_attempt, :c_fence, '{"ok": 1}') AS answers \gset} ],
	[ claim_batch => q{CREATE TEMP TABLE batch ON COMMIT DROP AS SELECT run_id, stage, attempt, fence FROM wfe.claim_task('hp', 'w', 3);
SELECT string_agg(format('%s:%s', run_id, stage), ' ') AS batch, count(*) AS answers FROM batch \gset
SELECT min(run_id) AS f_run FROM batch \gset
SELECT stage AS f_stage, attempt AS f_attempt, fence AS f_fence FROM batch WHERE run_id = :f_run \gset
SELECT jsonb_agg(jsonb_build_object('run_id', run_id, 'stage', stage, 'attempt', attempt, 'fence', fence,
                                    'result', '{}'::jsonb)) AS reports
  FROM batch WHERE run_id <> :f_run \gset} ],
	[ fail_retry => q{SELECT wfe.fail_task(:f_run, :'f_stage', :f_attempt, :f_fence, '{"e": "retry me"}', true) AS answers \gset} ],
	[ complete_tasks => q{SELECT string_agg(outcome, ' ') AS answers FROM wfe.complete_tasks(:'reports') \gset} ],
	[ broker_submit => q{SELECT string_agg(s.accepted::text, ' ') AS answers
  FROM generate_series(1, 2) AS i, wfe.submit('hb', jsonb_build_object('i', i)) AS s \gset} ],
	[ broker_release => accept_and_complete('hb') ],
	[ broker_second => accept_and_complete('hb') ],
	[ tenant_submit => q{SELECT string_agg(s.accepted::text, ' ') AS answers
  FROM generate_series(1, 2) AS i, wfe.submit('ht', jsonb_build_object('i', i), NULL, '{"tenant": "T"}') AS s \gset} ],
	[ tenant_release => accept_and_complete('ht') ],
	[ tenant_second => accept_and_complete('ht') ],
	[ rate_limited => q{SELECT count(*) FROM wfe.submit('hr', '{}') \gset
SELECT string_agg(wfe.complete_task(t.run_id, t.stage, t.attempt, t.fence), ' ') AS answers
  FROM wfe.claim_task('hr', 'w', 1) AS t \gset} ],
	[ keyed_submit => q{SELECT string_agg(s.accepted::text, ' ') AS answers
  FROM generate_series(1, 2) AS i, wfe.submit('hk', jsonb_build_object('k', 'x', 'i', i)) AS s \gset} ],
	[ keyed_first => q{SELECT string_agg(wfe.complete_task(t.run_id, t.stage, t.attempt, t.fence), ' ') AS answers
  FROM wfe.claim_task('hk', 'w', 2) AS t \gset} ],
	[ keyed_second => q{SELECT string_agg(wfe.complete_task(t.run_id, t.stage, t.attempt, t.fence), ' ') AS answers
  FROM wfe.claim_task('hk', 'w', 2) AS t \gset} ],
	[ fair_submit => q{SELECT string_agg(s.accepted::text, ' ') AS answers
  FROM unnest(ARRAY['A', 'B', 'A', 'B']) AS t, wfe.submit('hf', '{}', NULL, jsonb_build_object('tenant', t)) AS s \gset} ],
	[ fair_claim => q{SELECT string_agg(outcome, ' ') AS answers
  FROM wfe.complete_tasks((SELECT jsonb_agg(jsonb_build_object('run_id', t.run_id, 'stage', t.stage,
                                                               'attempt', t.attempt, 'fence', t.fence,
                                                               'result', '{}'::jsonb))
                             FROM wfe.claim_task('hf', 'w', 4) AS t)) \gset} ],
	[ signal => q{SELECT run_id AS w_run FROM wfe.submit('hw', '{}') \gset
SELECT wfe.signal(:w_run, 'sig.hot@1')::text AS answers \gset} ],
);

# what each step must have answered
my %answers = (
	submit => 'true true true true', claim => 'claimed', complete => 'accepted', claim_batch => '3',
	fail_retry => 'accepted', complete_tasks => 'accepted accepted', broker_submit => 'true true',
	broker_release => 'accepted accepted', broker_second => 'accepted accepted',
	tenant_submit => 'true true', tenant_release => 'accepted accepted',
	tenant_second => 'accepted accepted', rate_limited => 'accepted', keyed_submit => 'true true',
	keyed_first => 'accepted', keyed_second => 'accepted', fair_submit => 'true true true true',
	fair_claim => 'accepted accepted accepted accepted');

# what may be called that is not C: the control, and (TODO, issue 24 item
# 1) wfe.signal, PL/pgSQL still, with its grant check wfe._may_signal
my %not_c_expected = (
	submit => 'control_plpgsql()',
	signal => 'wfe._may_signal(text),wfe.signal(bigint,text,jsonb,text)');

my $script = join "\n", map {
	my ($name, $q) = @$_;
	"BEGIN;\n$q\nSELECT '$name', :'answers', x.not_c, x.c FROM public.xact_calls AS x;\n"
	  . "SELECT pg_stat_force_next_flush() AS flushed \\gset\nCOMMIT;"
} @steps;

for my $mode ('off', 'on')
{
	my $login = "hot_$mode";
	my $events0 = sql(q{SELECT count(*) FROM wfe.events});
	my $projected0 = sql(q{SELECT count(*) FROM wfe.outbox WHERE kind = 'event'});
	my $r = WfeLogin::as_login($node, $login, $script, strict => 1);
	is($r->{state}, '', "publish_events $mode: every step ran as login $login")
	  or diag($r->{err}, "\nthe broker queues' stages:\n",
		sql(q{SELECT s.queue, s.run_id, s.state, s.attempt, s.fence,
		             (SELECT string_agg(o.kind || ':' || o.fence, ' ') FROM wfe.outbox AS o WHERE o.run_id = s.run_id)
		        FROM wfe.run_stages AS s WHERE s.queue IN ('hb', 'ht') ORDER BY 1, 2}),
		"\nrechecks: ", sql(q{SELECT string_agg(queue || '/' || tenant, ' ') FROM wfe.admission_recheck}));
	my %seen = map { my ($s, $a, $not_c, $c) = split /\|/, $_, 4; ($s => [ $a, $not_c, $c ]) } split /\n/, $r->{out};
	is(scalar(keys %seen), scalar(@steps), "publish_events $mode: every step reported");

	for my $step (map { $_->[0] } @steps)
	{
		my ($answer, $not_c, $c) = @{ $seen{$step} // [ '', 'missing', '' ] };
		# (a signal's answer is not checked: that it ran is enough)
		is($answer, $answers{$step}, "publish_events $mode, $step: answered $answers{$step}")
		  if exists $answers{$step};
		is($not_c, $not_c_expected{$step} // '',
			"publish_events $mode, $step: no function but C called"
			  . (exists $not_c_expected{$step} ? " (but $not_c_expected{$step})" : ''))
		  or diag("C: $c");
	}
	like($seen{submit}[2], qr/\bwfe\.submit\(/, "publish_events $mode: the C calls are listed too (wfe.submit)");

	my $events = sql(q{SELECT count(*) FROM wfe.events}) - $events0;
	my $projected = sql(q{SELECT count(*) FROM wfe.outbox WHERE kind = 'event'}) - $projected0;
	if ($mode eq 'on')
	{
		is($projected, $events, "publish_events on: each of the session's $events events is in the outbox");
		like($seen{complete}[2], qr/wfe\._project_event\(\)/,
			'publish_events on: the projection trigger is called, and it is C');
	}
	else
	{
		is($projected, 0, "publish_events off: none of the session's $events events is in the outbox");
		unlike(join(',', map { $_->[2] } values %seen), qr/_project_event/,
			'publish_events off: the projection trigger is never called');
	}
}

#
# The two trigger functions of this change are doors too: a login (worker
# and submitter) can neither call them nor delete a run to set one off,
# and nothing changes.
#
{
	my $before = sql(q{SELECT (SELECT count(*) FROM wfe.runs) || '/' || (SELECT count(*) FROM wfe.run_stages)
	                      || '/' || (SELECT count(*) FROM wfe.outbox) || '/' || (SELECT count(*) FROM wfe.events)});
	for my $attack (
		[ 'SELECT wfe._project_event()', 'calling the event projection' ],
		[ 'SELECT wfe._runs_deleted()', 'calling the stage rows\' deletion' ],
		[ 'DELETE FROM wfe.runs', 'deleting runs (and so their stage rows)' ],
		[ 'TRUNCATE wfe.runs', 'truncating the runs' ])
	{
		my $r = WfeLogin::as_login($node, 'hot_on', $attack->[0]);
		is($r->{state}, '42501', "login hot_on: $attack->[1] is refused 42501") or diag($r->{err});
	}
	is( sql(q{SELECT (SELECT count(*) FROM wfe.runs) || '/' || (SELECT count(*) FROM wfe.run_stages)
	           || '/' || (SELECT count(*) FROM wfe.outbox) || '/' || (SELECT count(*) FROM wfe.events)}),
		$before, 'and runs, stage rows, outbox and events are as they were');
}

done_testing();
