# WfeNode.pm: the set-up the TAP tests share -- a started node with wfe,
# the logins that act on it, and workflows defined from their YAML.
#
#   my $node = WfeNode::node('wfe_timers', preload => 1, conf => "wfe.poll_interval_ms = 200\n");
#   WfeNode::worker_runs($node);
#   WfeNode::logins($node, nobody => '', worker => 'wfe_worker', sub_a => 'wfe_submitter A');
#   WfeNode::tenant_logins($node, [qw(A B)], qw(submitter reader));   # submitter_a ... reader_b
#   WfeNode::workflow($node, $yaml);    # created, approved and activated
#   WfeNode::tenant_flows($node, [qw(A B)], "    retry: {max_attempts: 1}\n");   # flow-a, flow-b
#   $node->psql('postgres', $WfeNode::AUTO_EXPLAIN . $sql, stderr => \$err);
#   for my $p (WfeNode::plans_from($err)) { ... $p->{text}, $p->{plan} ... }
#
# Everything happens in database postgres.  The broker tests start their
# node through WfeRabbit::wfe_node, which adds the broker's settings.
package WfeNode;

use strict;
use warnings;

use JSON::PP;
use PostgreSQL::Test::Cluster;
use Test::More;

# node(NAME, %opt): a started PostgreSQL node, with CREATE EXTENSION wfe
# done.  preload => 1: wfe is preloaded and its background worker serves
# database postgres; conf => TEXT: more postgresql.conf lines, after wfe's
# (so that they win); extension => 0: the extension is not created;
# init => [ARGS]: the arguments of PostgreSQL::Test::Cluster's init.
sub node
{
	my ($name, %opt) = @_;
	my $node = PostgreSQL::Test::Cluster->new($name);
	$node->init(@{ $opt{init} // [] });
	my $conf = ($opt{preload} ? "shared_preload_libraries = 'wfe'\nwfe.database = 'postgres'\n" : '')
	  . ($opt{conf} // '');
	$node->append_conf('postgresql.conf', $conf) if $conf ne '';
	$node->start;
	$node->safe_psql('postgres', 'CREATE EXTENSION wfe') if $opt{extension} // 1;
	return $node;
}

# worker_runs(NODE, %opt): one assertion: the background worker runs (it
# has a pid, and has run a round).  rounds => 0: a pid is enough (with an
# hour's poll interval the first round may not come soon); what => the
# assertion's name.
sub worker_runs
{
	my ($node, %opt) = @_;
	my $cond = ($opt{rounds} // 1) ? 'pid IS NOT NULL AND rounds > 0' : 'pid IS NOT NULL';
	return ok($node->poll_query_until('postgres', "SELECT $cond FROM wfe.worker_status()"),
		$opt{what} // 'the worker runs');
}

# logins(NODE, LOGIN => 'GROUPS TENANTS', ...): create each LOGIN role, a
# member of GROUPS (wfe_worker, say, or wfe_submitter,wfe_reader) if
# given, acting for each of TENANTS (space-separated) if given; '' for a
# login with neither.  In the order given, in one transaction.
sub logins
{
	my ($node, @spec) = @_;
	my $sql = '';
	while (my ($login, $as) = splice(@spec, 0, 2))
	{
		my ($groups, @tenants) = split ' ', $as;
		$sql .= "CREATE ROLE $login LOGIN" . ($groups ? " IN ROLE $groups" : '') . ";\n";
		$sql .= "SELECT wfe.add_tenant_member('$login', '$_');\n" for @tenants;
	}
	$node->safe_psql('postgres', $sql);
	return;
}

# tenant_logins(NODE, [TENANTS], KINDS...): for each tenant T and each kind
# K (submitter, reader, operator, worker), the login K_t (t: T in lower
# case) in role wfe_K, acting for T.
sub tenant_logins
{
	my ($node, $tenants, @kinds) = @_;
	logins($node, map { my $t = $_; map { ("${_}_\L$t", "wfe_$_ $t") } @kinds } @$tenants);
	return;
}

# workflow(NODE, YAML): create the definition YAML, approve and activate it
# (the name and version are read from the YAML); returns the name.
sub workflow
{
	my ($node, $yaml) = @_;
	my ($name) = $yaml =~ /^name:\s*(\S+)/m or die "workflow: no name in the YAML:\n$yaml";
	my ($version) = $yaml =~ /^version:\s*"?([^"\s]+)/m or die "workflow: no version in the YAML:\n$yaml";
	$node->safe_psql('postgres', qq{SELECT wfe.create_definition(\$y\$$yaml\$y\$);
SELECT wfe.approve('$name', '$version');
SELECT wfe.activate('$name', '$version');});
	return $name;
}

# tenant_flows(NODE, [TENANTS], STAGE_LINES, %opt): for each tenant T (t:
# T in lower case), the queue qt, its worker contract t.qt@1 granted to the
# login worker_t, and the active workflow flow-t of one worker stage, work,
# on qt, with STAGE_LINES (YAML lines of the stage's keys).  broker => 1:
# qt is a broker-mode queue.
sub tenant_flows
{
	my ($node, $tenants, $lines, %opt) = @_;
	for my $t (map { lc } @$tenants)
	{
		$node->safe_psql('postgres',
			"SELECT wfe.register_worker('t.q$t\@1', 'q$t');\nSELECT wfe.grant_queue('worker_$t', 'q$t');\n"
			  . ($opt{broker} ? "SELECT wfe.configure_queue('q$t', 'broker');\n" : ''));
		workflow($node, "name: flow-$t\nversion: \"1.0.0\"\nentry: work\nstages:\n"
			  . "  - name: work\n    type: worker\n    queue: q$t\n    worker: t.q$t\@1\n"
			  . $lines
			  . "    on_success: completed\n    on_failure: failed\n");
	}
	return;
}

# A session's set-up: auto_explain sends every plan, nested ones too, as
# JSON NOTICEs (no ANALYZE; verbose, so that every relation is
# schema-qualified).
our $AUTO_EXPLAIN = q{
LOAD 'auto_explain';
SET auto_explain.log_min_duration = 0;
SET auto_explain.log_nested_statements = on;
SET auto_explain.log_analyze = off;
SET auto_explain.log_verbose = on;
SET auto_explain.log_format = json;
SET auto_explain.log_level = notice;
SET client_min_messages = notice;
};

# plans_from(ERR): auto_explain's NOTICEs on psql's stderr ERR: [{ text, plan }] in order
sub plans_from
{
	my ($err) = @_;
	my @plans;
	while ($err =~ /NOTICE:\s+duration: [0-9.]+ ms\s+plan:\n(\{.*?\n\})(?:\n|\z)/sg)
	{
		my $j = JSON::PP::decode_json($1);
		push @plans, { text => $j->{'Query Text'} // '', plan => $j->{'Plan'} };
	}
	return @plans;
}

1;
