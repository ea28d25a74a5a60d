# Starting runs (docs/starting-runs.md; issue 23): the page's examples, run
# as the page writes them -- each is read from the page (the fenced block
# after "<!-- example: NAME -->"), never copied here -- with a real
# background worker and a real RabbitMQ node:
#
# 1. the table trigger (an AFTER INSERT trigger calling wfe.submit): a
#    committed row has its run, as the inserting role; a rolled-back one
#    has none; a row whose run is refused (context_schema) or whose
#    inserter may not submit is not inserted either;
# 2. the pika producer: its command becomes a run of the envelope's
#    tenant, answered on its reply queue with accepted true, then, sent
#    again, with the same run and accepted false;
# 3. the HTTP gateway: 201 with the run, 200 with the same run for the
#    same Idempotency-Key, 422 / 404 / 400 for a refused context, an
#    unknown workflow, a body that is not JSON;
# 4. the ingress refusals of the page's table that 039_ingress.pl does not
#    send (not UTF-8, over wfe.max_payload_bytes, a workflow outside the
#    ingress's allow-list, a role that lost wfe_submitter, the tenant's
#    max_runs_in_flight): each in wfe.dlq with its x-wfe-error, nothing
#    submitted;
# 5. retention removes wfe.put_payload's payloads older than wfe.retention,
#    used or not, and keeps the younger; a command naming a removed one is
#    refused (42704).
use strict;
use warnings;

use HTTP::Tiny;
use IPC::Run;
use JSON::PP;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);
use WfeRabbit;
use WfeLogin;
use WfeNode;

my $rabbit = WfeRabbit->new('starting');
$rabbit->start;
my $node = WfeRabbit::wfe_node('wfe_starting', $rabbit, "wfe.consume_dlq = off\n");
my $json = JSON::PP->new->utf8->canonical;
my $page = slurp_file(WfeRabbit::top_dir() . '/docs/starting-runs.md');
my $tmp = PostgreSQL::Test::Utils::tempdir('starting');

sub sql { return $node->safe_psql('postgres', $_[0]); }

# example(NAME): the fenced block after <!-- example: NAME --> in the page.
sub example
{
	my ($name) = @_;
	$page =~ /^<!-- example: \Q$name\E -->\n```\w*\n(.*?)^```$/ms
	  or BAIL_OUT("docs/starting-runs.md has no example $name");
	return $1;
}

# login(ROLE, SQL): (SQLSTATE or '', stdout) of SQL run by login ROLE.
sub login
{
	my $r = WfeLogin::as_login($node, @_);
	return ($r->{state}, $r->{out});
}

sql(q{SELECT wfe.register_worker('orders.intake@1', 'orders')});
WfeNode::workflow($node, <<'YAML');
name: order-intake
version: "1.0.0"
context_schema:
  type: object
  required: [order]
  properties:
    order: { type: integer }
    customer: { type: string }
    amount: { type: number, minimum: 0 }
entry: take
stages:
  - name: take
    type: worker
    queue: orders
    worker: orders.intake@1
    on_success: completed
    on_failure: failed
YAML
WfeNode::logins($node, app_writer => 'wfe_submitter,wfe_reader default', app_nosubmit => '');

#
# 1. The table trigger.
#
sql(example('trigger'));
sql('GRANT SELECT, INSERT ON orders TO app_writer, app_nosubmit');
my ($state, $out) = login('app_writer', example('trigger-use'));
is($state, '', "the page's INSERT and SELECT run as app_writer");
my ($id, $run, $rstate, $ctx) = split /\n|\|/, $out;
is($id, 1, 'the order is inserted');
ok($run > 0, 'its run is found by the key order:1');
is($rstate, 'running', 'and is running');
is_deeply($json->decode($ctx), { order => 1, customer => 'ann', amount => 120 }, "with the row's values");
is(sql("SELECT tenant FROM wfe.runs WHERE run_id = $run"), 'default', "in the inserting role's tenant");

($state) = login('app_writer', "BEGIN;\nINSERT INTO orders (customer, amount) VALUES ('bob', 5);\nROLLBACK;");
is($state, '', 'an INSERT rolled back');
is(sql("SELECT count(*) FROM wfe.runs WHERE idempotency_key = 'order:2'"), 0, 'leaves no run');

($state) = login('app_writer', "INSERT INTO orders (customer, amount) VALUES ('cy', -5)");
is($state, '22023', "a row whose run breaks the workflow's context_schema: the INSERT fails (22023)");
($state) = login('app_nosubmit', "INSERT INTO orders (customer, amount) VALUES ('dee', 5)");
is($state, '42501', 'an inserter that may not submit runs: the INSERT fails (42501)');
is(sql('SELECT count(*) FROM orders') . ' ' . sql("SELECT count(*) FROM wfe.runs WHERE workflow = 'order-intake'"),
	'1 1', 'neither row is there, nor a run of it');

($state) = login('app_writer', "INSERT INTO orders (customer, amount) VALUES ('eve', 7), ('fay', 8)");
is($state, '', 'an INSERT of two rows');
is( sql(
		"SELECT string_agg(r.context ->> 'customer', ' ' ORDER BY o.id) FROM orders AS o "
		  . "JOIN wfe.runs AS r ON r.run_id = wfe.find_run('order-intake', 'order:' || o.id)"),
	'ann eve fay', 'every row has its own run');

#
# 2. The pika producer.
#
sql(<<'SQL');
CREATE ROLE orders_ingress IN ROLE wfe_submitter;
SELECT wfe.add_tenant_member('orders_ingress', 'acme');
SELECT wfe.configure_ingress('orders', 'orders_ingress');
SQL
ok( eval {
		for (1 .. 300)
		{
			return 1 if defined $rabbit->queue_messages('wfe.ingress.orders');
			usleep(100_000);
		}
		0;
	},
	'the background worker declared wfe.ingress.orders');
my $producer = "$tmp/start_run.py";
PostgreSQL::Test::Utils::append_to_file($producer, example('producer'));

# producer(ARGS...): (exit status, stdout + stderr) of the page's producer.
sub producer
{
	my ($out, $err) = ('', '');
	IPC::Run::run([ '/usr/bin/python3', $producer, '--url', $rabbit->uri . '%2f', @_ ],
		'<', \undef, '>', \$out, '2>', \$err, IPC::Run::timeout(60));
	return ($? >> 8, $out . $err);
}
my ($status, $said) = producer('order-intake', 'order-8812', '{"order": 8812, "customer": "gus", "amount": 12.5}');
is($status, 0, 'the producer exits 0');
my ($run_p) = $said =~ /^order-8812: run (\d+), accepted true$/m;
ok($run_p, "it prints wfe's answer: the run, accepted true") or diag $said;
is( sql("SELECT tenant || ' ' || (context ->> 'customer') || ' ' || idempotency_key FROM wfe.runs WHERE run_id = $run_p"),
	'acme gus order-8812', "the run: the envelope's tenant, the context, the key");
($status, $said) = producer('order-intake', 'order-8812', '{"order": 8812, "customer": "gus", "amount": 12.5}');
like($said, qr/^order-8812: run $run_p, accepted false$/m, 'the same key again: the same run, accepted false');
is(sql("SELECT count(*) FROM wfe.runs WHERE idempotency_key = 'order-8812'"), 1, 'one run');
($status, $said) = producer('--ingress', 'nowhere', 'order-intake', 'order-1', '{"order": 1}');
isnt($status, 0, 'to an ingress that does not exist: the producer fails (unroutable, mandatory)');

#
# 3. The HTTP gateway.
#
my $gateway = "$tmp/gateway.py";
PostgreSQL::Test::Utils::append_to_file($gateway, example('gateway'));
my $port = PostgreSQL::Test::Cluster::get_free_port();
my $dsn = 'host=' . $node->host . ' port=' . $node->port . ' dbname=postgres user=app_writer';
my $gw = IPC::Run::start([ '/usr/bin/python3', $gateway ], '<', \undef, '>', "$tmp/gateway.log", '2>&1',
	init => sub { $ENV{PORT} = $port; $ENV{WFE_DSN} = $dsn; });
my $http = HTTP::Tiny->new(timeout => 30);

# post(PATH, BODY, KEY): (status, decoded body) of a POST to the gateway.
sub post
{
	my ($path, $body, $key) = @_;
	my $r;
	for (1 .. 100)
	{
		$r = $http->post("http://127.0.0.1:$port$path",
			{ content => $body, headers => { 'Content-Type' => 'application/json', ($key ? ('Idempotency-Key' => $key) : ()) } });
		last unless $r->{status} == 599 && $r->{content} =~ /refused/i;    # not listening yet
		usleep(100_000);
	}
	return ($r->{status}, eval { $json->decode($r->{content}) } // $r->{content});
}
my ($code, $answer) = post('/runs/order-intake', '{"order": 77, "customer": "hal", "amount": 3}', 'http-77');
is($code, 201, 'the gateway: 201 for a new run');
ok($answer->{accepted} && $answer->{run_id} > 0, 'with its run_id, accepted') or diag explain $answer;
my ($code2, $answer2) = post('/runs/order-intake', '{"order": 77, "customer": "hal", "amount": 3}', 'http-77');
is("$code2 $answer2->{run_id} " . ($answer2->{accepted} ? 'true' : 'false'), "200 $answer->{run_id} false",
	'the same Idempotency-Key again: 200, the same run, accepted false');
($code, $answer) = post('/runs/order-intake', '{"order": "seventy"}', 'http-bad');
is("$code $answer->{sqlstate}", '422 22023', "a context the schema refuses: 422 with the SQLSTATE");
($code, $answer) = post('/runs/no-such-flow', '{}', 'http-none');
is("$code $answer->{sqlstate}", '404 42704', 'an unknown workflow: 404');
($code) = post('/runs/order-intake', 'not json', 'http-nojson');
is($code, 400, 'a body that is not JSON: 400');
is(sql("SELECT count(*) FROM wfe.runs WHERE idempotency_key LIKE 'http-%'"), 1, 'one run from all of it');
$gw->kill_kill;

#
# 4. The ingress refusals 039 does not send.
#
my $tools_uri = $rabbit->uri . '%2f';

sub publish
{
	my ($body) = @_;
	my ($out, $err) = ('', '');
	IPC::Run::run([ 'amqp-publish', '-u', $tools_uri, '-e', 'wfe.commands', '-r', 'submit.orders',
			'-C', 'application/json', '-p', '-b', $body ],
		'<', \undef, '>', \$out, '2>', \$err)
	  or die "amqp-publish failed: $err";
	return;
}

sub envelope
{
	my ($mid, %over) = @_;
	my %e = (
		message_id => $mid, correlation_id => "corr-$mid", workflow_name => 'order-intake', track => 'small',
		headers => { content_type => 'application/json', source => 'tap', tenant => 'acme' },
		idempotency_key => "key-$mid", payload_inline => { order => 1 }, payload_ref => undef,
		created_at => '2026-06-02T10:00:00Z', %over);
	return $json->encode(\%e);
}

# rejected(WHAT, BODY, CODE): BODY goes to wfe.dlq with x-wfe-error CODE, no run.
sub rejected
{
	my ($what, $body, $code) = @_;
	my $runs = sql('SELECT count(*) FROM wfe.runs');
	publish($body);
	# decoded as characters: a body that is not UTF-8 comes back as it went
	my ($dead) = map { JSON::PP->new->decode($_) } grep { /\S/ } split /\n/,
	  $rabbit->probe_ok('consume', 'wfe.dlq', 1, 30);
	is($dead && $dead->{headers}{'x-wfe-error'}, $code, "$what: in wfe.dlq with x-wfe-error $code")
	  or diag explain $dead;
	is(sql('SELECT count(*) FROM wfe.runs'), $runs, "$what: no run");
	return;
}

rejected('a body that is not UTF-8', "{\"message_id\": \"\xff\xfe\"}", '22021');
sql('ALTER SYSTEM SET wfe.max_payload_bytes = 2048; SELECT pg_reload_conf()');
sleep 1;
rejected('a command over wfe.max_payload_bytes', envelope('big', payload_inline => { order => 2, pad => 'x' x 4000 }),
	'54000');
sql('ALTER SYSTEM RESET wfe.max_payload_bytes; SELECT pg_reload_conf()');
sleep 1;
sql(q{SELECT wfe.configure_ingress('orders', 'orders_ingress', '{"workflows": ["something-else"]}')});
rejected("a workflow outside the ingress's workflows", envelope('allow'), '42501');
sql(q{SELECT wfe.configure_ingress('orders', 'orders_ingress')});
sql('REVOKE wfe_submitter FROM orders_ingress');
rejected('a role that lost wfe_submitter', envelope('revoked'), '42501');
sql('GRANT wfe_submitter TO orders_ingress');
sql(q{SELECT wfe.configure_tenant('acme', max_runs_in_flight => 1)});
rejected("the tenant's max_runs_in_flight reached", envelope('full'), '53400');
sql(q{SELECT wfe.configure_tenant('acme', max_runs_in_flight => 1000)});
is_deeply(
	$json->decode(sql(q{SELECT rejected_by_reason FROM wfe.dashboard_ingress WHERE ingress = 'orders'})),
	{ '22021' => 1, '54000' => 1, '42501' => 2, '53400' => 1 },
	'the dashboard counts each by its reason');

#
# 5. Retention of the stored payloads.
#
my ($old_used, $old_unused, $young) = map {
	sql("SET ROLE orders_ingress; SELECT wfe.put_payload('{\"order\": $_}')")
} (501, 502, 503);
publish(envelope('ref-501', track => 'large', payload_inline => undef,
		payload_ref => { key => $old_used, sha256 => sql(q{SELECT wfe.payload_sha256('{"order": 501}')}) }));
ok($node->poll_query_until('postgres', q{SELECT count(*) = 1 FROM wfe.runs WHERE idempotency_key = 'key-ref-501'}),
	'a command used one payload');
sql("UPDATE wfe.ingress_payloads SET created_at = now() - interval '8 days' WHERE key IN ('$old_used', '$old_unused')");
sql('SELECT wfe._retention(7 * 86400, 100)');
is( sql("SELECT string_agg(key, ' ' ORDER BY key) FROM wfe.ingress_payloads"),
	$young, "retention (wfe.retention = 7 days) removed the two payloads older than that, used or not, kept the young one");
is(sql(q{SELECT context ->> 'order' FROM wfe.runs WHERE idempotency_key = 'key-ref-501'}), '501',
	'the run that used one keeps its context');
rejected('a command naming a payload retention removed',
	envelope('ref-502', track => 'large', payload_inline => undef,
		payload_ref => { key => $old_unused, sha256 => sql(q{SELECT wfe.payload_sha256('{"order": 502}')}) }),
	'42704');

$node->stop;
$rabbit->stop;
done_testing();
