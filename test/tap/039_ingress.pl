# Run commands from RabbitMQ (delivery.md "Run commands from RabbitMQ"):
# seed 004's envelope published to wfe.commands with key submit.NAME, taken
# from wfe.ingress.NAME by the background worker and submitted as the
# ingress's role.
#
# 1. configure_ingress refuses what would make an ingress unsafe: a role
#    acting for every tenant, a role that cannot submit, a bad name.
# 2. A valid command is one run of the envelope's tenant, its run.submitted
#    event saying how it came; published twice (or redelivered), still one
#    run; reply_to is answered with {"run_id", "accepted"} after the commit.
# 3. Each bad command reaches wfe.dlq with x-wfe-error (its SQLSTATE) and
#    x-wfe-error-message, and nothing is submitted: not JSON, not an
#    envelope, both payloads, an unknown workflow, context_schema, and the
#    attacks -- a command naming a tenant its ingress's role does not act
#    for, a payload_ref naming another tenant's wfe.put_payload key, or one
#    with a wrong hash.  A large-track command by a key of its own tenant
#    runs with the stored payload.
# 4. wfe.dashboard_ingress counts it all.
# 5. kill -9 of the postmaster while a flood of commands is being taken:
#    after the restart every command has exactly one run.
use strict;
use warnings;

use JSON::PP;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);
use WfeRabbit;
use WfeNode;

my $rabbit = WfeRabbit->new('ingress');
$rabbit->start;
# wfe.consume_dlq off: the rejected commands stay in wfe.dlq for this test to read
my $node = WfeRabbit::wfe_node('wfe_ingress', $rabbit, "wfe.consume_dlq = off\nrestart_after_crash = on\n");
my $json = JSON::PP->new->utf8->canonical;

sub sql { return $node->safe_psql('postgres', $_[0]); }

# as(ROLE, SQL): (SQLSTATE or '', stdout)
sub as
{
	my ($role, $q) = @_;
	my ($out, $err) = ('', '');
	$node->psql('postgres', "\\set VERBOSITY verbose\nSET ROLE $role;\n$q", stdout => \$out, stderr => \$err,
		on_error_stop => 1);
	my ($state) = $err =~ /ERROR:\s+([0-9A-Z]{5}):/;
	return ($state // '', $out);
}

# amqp-tools take "amqp://host:port/" to name the vhost "": name "/" instead.
my $tools_uri = $rabbit->uri . '%2f';

# Publish BODY to wfe.commands with key submit.NAME (amqp-tools' amqp-publish).
sub publish
{
	my ($name, $body, @opts) = @_;
	my ($out, $err) = ('', '');
	IPC::Run::run([ 'amqp-publish', '-u', $tools_uri, '-e', 'wfe.commands', '-r', "submit.$name",
			'-C', 'application/json', '-p', @opts, '-b', $body ],
		'<', \undef, '>', \$out, '2>', \$err)
	  or die "amqp-publish failed: $err";
	return;
}

# A valid envelope for tenant A (fields overridden by %over; undef deletes one).
sub envelope
{
	my ($mid, %over) = @_;
	my %e = (
		message_id => $mid,
		correlation_id => "corr-$mid",
		workflow_name => 'ingest',
		track => 'small',
		headers => { content_type => 'application/json', source => 'tap', tenant => 'A' },
		idempotency_key => "key-$mid",
		payload_inline => { n => 1 },
		payload_ref => undef,
		created_at => '2026-06-02T10:00:00Z');
	for my $k (keys %over)
	{
		if (defined $over{$k}) { $e{$k} = $over{$k}; }
		else { delete $e{$k}; }
	}
	return $json->encode(\%e);
}

# The next message of wfe.dlq (waits up to 30 s).
sub next_dead
{
	my ($dead) = $rabbit->probe_json('consume', 'wfe.dlq', 1, 30);
	return $dead;
}

WfeNode::logins($node,
	ingress_a => 'wfe_submitter A',
	submitter_b => 'wfe_submitter B',
	nobody_ => '',
	admin_x => 'wfe_admin');
sql(q{SELECT wfe.register_worker('tap.ing@1', 'ing');});
WfeNode::workflow($node, <<'YAML');
name: ingest
version: "1.0.0"
context_schema:
  type: object
  required: [n]
  properties:
    n: { type: integer }
entry: a
stages:
  - name: a
    type: worker
    queue: ing
    worker: tap.ing@1
    input: { n: "${context.n}" }
    on_success: completed
    on_failure: failed
YAML
WfeRabbit::wait_connected($node, 'start');

#
# 1. configure_ingress's refusals.
#
is((as('admin_x', q{SELECT wfe.configure_ingress('orders', 'admin_x')}))[0], '42501',
	'an ingress acting as a role that acts for every tenant (wfe_admin): 42501');
is((as('admin_x', q{SELECT wfe.configure_ingress('orders', 'nobody_')}))[0], '42501',
	'an ingress acting as a role without wfe_submitter: 42501');
is((as('admin_x', q{SELECT wfe.configure_ingress('Orders!', 'ingress_a')}))[0], '22023',
	'an ingress name that is not a queue name part: 22023');
is((as('admin_x', q{SELECT wfe.configure_ingress('orders', 'ingress_a', '{"bogus": 1}')}))[0], '22023',
	'an unknown ingress option: 22023');
is((as('ingress_a', q{SELECT wfe.configure_ingress('orders', 'ingress_a')}))[0], '42501',
	'a submitter cannot configure an ingress: 42501');
is(sql('SELECT count(*) FROM wfe.ingresses'), '0', 'no ingress was made by the refused calls');
is((as('admin_x', q{SELECT wfe.configure_ingress('orders', 'ingress_a')}))[0], '', 'wfe_admin configures ingress orders');
ok(
	$node->poll_query_until('postgres', 'SELECT true')
	  && eval {
		for (1 .. 300)
		{
			return 1 if defined $rabbit->queue_messages('wfe.ingress.orders');
			usleep(100_000);
		}
		0;
	  },
	'the background worker declared wfe.ingress.orders');

#
# 2. A valid command: one run; twice: still one; reply_to answered.
#
publish('orders', envelope('m1'));
ok($node->poll_query_until('postgres', q{SELECT count(*) = 1 FROM wfe.runs WHERE idempotency_key = 'key-m1'}),
	'a valid command starts a run');
my ($run1, $tenant1, $ctx1) = split /\|/,
  sql(q{SELECT run_id, tenant, context FROM wfe.runs WHERE idempotency_key = 'key-m1'});
is($tenant1, 'A', "the run is the envelope's tenant's");
is($ctx1, '{"n": 1}', 'its context is payload_inline');
is_deeply($json->decode(sql("SELECT detail FROM wfe.events WHERE run_id = $run1 AND type = 'run.submitted'")),
	{
		via => 'amqp', ingress => 'orders', message_id => 'm1', correlation_id => 'corr-m1',
		workflow => 'ingest', version => '1.0.0', idempotency_key => 'key-m1',
		digest => sql("SELECT definition_digest FROM wfe.runs WHERE run_id = $run1")
	},
	'run.submitted says it came over AMQP, by which ingress, with the message and correlation ids');

publish('orders', envelope('m1'));
publish('orders', envelope('m1'));
ok($node->poll_query_until('postgres', q{SELECT duplicates = 2 FROM wfe.dashboard_ingress WHERE ingress = 'orders'}),
	'the same command published twice more: two duplicates');
is(sql(q{SELECT count(*) FROM wfe.runs WHERE idempotency_key = 'key-m1'}), '1', 'and still one run');
is($rabbit->queue_messages('wfe.ingress.orders'), 0, 'every command was acked');

# reply_to: a queue of the caller's, answered after the commit
system('amqp-declare-queue', '-u', $tools_uri, '-d', '-q', 'tap.replies') == 0 or die 'cannot declare tap.replies';
publish('orders', envelope('m2'), '-t', 'tap.replies');
my ($reply) = $rabbit->probe_json('consume', 'tap.replies', 1, 30);
my $run2 = sql(q{SELECT run_id FROM wfe.runs WHERE idempotency_key = 'key-m2'});
is_deeply($reply->{body}, { run_id => $run2, accepted => JSON::PP::true }, 'reply_to gets {"run_id", "accepted": true}');
is($reply->{properties}{correlation_id}, 'corr-m2', "with the envelope's correlation_id");
publish('orders', envelope('m2'), '-t', 'tap.replies');
($reply) = $rabbit->probe_json('consume', 'tap.replies', 1, 30);
is_deeply($reply->{body}, { run_id => $run2, accepted => JSON::PP::false },
	'the same command again: the same run, accepted = false');

#
# 3. Bad commands: to wfe.dlq with x-wfe-error, nothing submitted.
#
my $runs = sql('SELECT count(*) FROM wfe.runs');
my $events = sql('SELECT count(*) FROM wfe.events');

# A command that should be rejected with SQLSTATE $code; returns the dead copy.
sub rejected
{
	my ($what, $body, $code) = @_;
	publish('orders', $body);
	my $dead = next_dead();
	ok($dead, "$what: reaches wfe.dlq") or return;
	is($dead->{headers}{'x-wfe-error'}, $code, "$what: x-wfe-error $code");
	like($dead->{headers}{'x-wfe-error-message'} // '', qr/\S/, "$what: x-wfe-error-message says why");
	is($dead->{headers}{'x-wfe-ingress'}, 'orders', "$what: x-wfe-ingress names the ingress");
	is($dead->{body_is_json} ? $json->encode($dead->{body}) : $dead->{body},
		$dead->{body_is_json} ? $json->encode($json->decode($body)) : $body, "$what: the command unchanged");
	return $dead;
}

rejected('not JSON', 'this is not json', '22P02');
rejected('a JSON array', '[1, 2]', '22023');
rejected('no workflow_name', envelope('b1', workflow_name => undef), '22023');
rejected('both payloads', envelope('b2', payload_ref => { key => 'x', sha256 => 'y' }), '22023');
rejected('neither payload', envelope('b3', payload_inline => undef), '22023');
rejected('an unknown field', envelope('b4', extra => 1), '22023');
rejected('an unknown option', envelope('b5', options => { tenant => 'B' }), '22023');
rejected('an unknown workflow', envelope('b6', workflow_name => 'no-such-flow'), '42704');
rejected('context_schema broken', envelope('b7', payload_inline => { n => 'one' }), '22023');
my $attack = rejected('a command naming tenant B, which ingress_a does not act for',
	envelope('b8', headers => { content_type => 'application/json', source => 'tap', tenant => 'B' }), '42501');
like($attack->{headers}{'x-wfe-error-message'}, qr/does not act for tenant "B"/, 'the message names the tenant');

# payload_ref: another tenant's key, a wrong hash, then its own
my ($st, $key_b) = as('submitter_b', q{SELECT wfe.put_payload('{"n": 7}')});
is($st, '', 'submitter_b stores a payload for tenant B');
my $sha_b = sql(q{SELECT wfe.payload_sha256('{"n": 7}')});
rejected("a payload_ref to tenant B's key from a tenant A command",
	envelope('b9', track => 'large', payload_inline => undef, payload_ref => { key => $key_b, sha256 => $sha_b }),
	'42704');
my (undef, $key_a) = as('ingress_a', q{SELECT wfe.put_payload('{"n": 8}')});
rejected('a payload_ref with a wrong sha256',
	envelope('b10', track => 'large', payload_inline => undef, payload_ref => { key => $key_a, sha256 => $sha_b }),
	'XX001');
rejected('track large with payload_inline', envelope('b11', track => 'large'), '22023');
is(sql('SELECT count(*) FROM wfe.runs'), $runs, 'no bad command started a run');
is(sql(q{SELECT count(*) FROM wfe.runs WHERE tenant = 'B'}), '0', 'tenant B has no run at all');
is(sql('SELECT count(*) FROM wfe.events'), $events, 'nor wrote an event');
is($rabbit->queue_messages('wfe.ingress.orders'), 0, 'each was acked (rejected without requeue)');

publish('orders',
	envelope('m3', track => 'large', payload_inline => undef,
		payload_ref => { bucket => 'wfe', key => $key_a, sha256 => sql(q{SELECT wfe.payload_sha256('{"n": 8}')}) }));
ok($node->poll_query_until('postgres', q{SELECT context = '{"n": 8}' FROM wfe.runs WHERE idempotency_key = 'key-m3'}),
	'a large-track command by its own tenant\'s key runs with the stored payload');

#
# 4. The dashboard.
#
my $dash = $json->decode(sql(q{SELECT row_to_json(d) FROM wfe.dashboard_ingress AS d WHERE ingress = 'orders'}));
is_deeply([ @$dash{qw(role received submitted duplicates rejected)} ], [ 'ingress_a', 19, 3, 3, 13 ],
	'dashboard_ingress: 19 received, 3 submitted, 3 duplicates, 13 rejected');
is_deeply($dash->{rejected_by_reason}, { '22P02' => 1, '22023' => 8, '42704' => 2, '42501' => 1, 'XX001' => 1 } ,
	'rejected by reason (SQLSTATE)') or diag explain $dash;
is((as('nobody_', 'SELECT * FROM wfe.dashboard_ingress'))[0], '42501', 'the dashboard is not for anyone');

#
# 5. kill -9 of the postmaster while commands are being taken.
#
my $flood = 200;
{
	my ($out, $err) = ('', '');
	my $in = join('', map { envelope("f$_") . "\n" } 1 .. $flood);
	IPC::Run::run([ 'amqp-publish', '-u', $tools_uri, '-e', 'wfe.commands', '-r', 'submit.orders',
			'-C', 'application/json', '-p', '-l' ],
		'<', \$in, '>', \$out, '2>', \$err)
	  or die "amqp-publish failed: $err";
}
ok($node->poll_query_until('postgres', q{SELECT count(*) >= 20 FROM wfe.runs WHERE idempotency_key LIKE 'key-f%'}),
	'the flood is being taken');
$node->kill9;
note 'postmaster killed with '
  . ($rabbit->queue_messages('wfe.ingress.orders') // '?') . ' commands still in the queue (unacked ones return)';
# the killed postmaster's children leave within seconds (they watch for its death)
my $started = 0;
for (1 .. 60)
{
	last if ($started = $node->start(fail_ok => 1));
	$node->{_pid} = undef;    # the stale postmaster.pid of the killed one
	sleep 1;
}
ok($started, 'the node starts again once the old processes are gone');
ok($node->poll_query_until('postgres',
		qq{SELECT count(DISTINCT idempotency_key) = $flood FROM wfe.runs WHERE idempotency_key LIKE 'key-f%'}),
	'after the restart every command of the flood has its run');
is(sql(q{SELECT count(*) FROM wfe.runs WHERE idempotency_key LIKE 'key-f%'}), $flood, 'exactly one run each');
ok(
	eval {
		for (1 .. 300)
		{
			return 1 if ($rabbit->queue_messages('wfe.ingress.orders') // 1) == 0;
			usleep(100_000);
		}
		0;
	},
	'and the queue is empty');
note 'duplicates after the crash: '
  . sql(q{SELECT duplicates - 3 FROM wfe.dashboard_ingress WHERE ingress = 'orders'});

# with wfe.consume_dlq on, the worker takes a rejected command back off
# wfe.dlq as one already handled (no warning about a foreign message)
$node->append_conf('postgresql.conf', "wfe.consume_dlq = on\n");
$node->reload;
my $log_at = -s $node->logfile;
publish('orders', envelope('b12', workflow_name => undef));
ok($node->poll_query_until('postgres', q{SELECT rejected = 14 FROM wfe.dashboard_ingress WHERE ingress = 'orders'}),
	'a bad command is rejected with wfe.consume_dlq on');
ok(
	eval {
		for (1 .. 300)
		{
			return 1 if ($rabbit->queue_messages('wfe.dlq') // 1) == 0;
			usleep(100_000);
		}
		0;
	},
	'the worker read it back from wfe.dlq');
unlike(substr(slurp_file($node->logfile), $log_at), qr/names no wfe attempt/,
	'as a rejected command, not a foreign message');

# dropping the ingress stops the consumer
is((as('admin_x', q{SELECT wfe.configure_ingress('orders', NULL)}))[0], '', 'role NULL drops the ingress');
is(sql('SELECT count(*) FROM wfe.ingresses'), '0', 'it is gone');

$node->stop;
$rabbit->stop;
done_testing();
