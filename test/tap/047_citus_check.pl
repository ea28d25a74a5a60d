# The path past one primary, checked on one machine (docs/scaling.md "Past
# one primary"): scripts/citus-check.sql applies Citus's distribution rules
# to wfe's catalog (every table with a run_id distributed by it, the others
# reference tables).  Citus itself is no Debian package, so the rules run
# as SQL over the catalog.
#
# Asserted: on a fresh install the script runs, and its failures and
# warnings are exactly those scaling.md lists (a schema change that breaks
# a rule, or mends one, fails here until the page says so); and the check
# can fail: a table with a run_id whose primary key leaves it out, and a
# table without one whose foreign key points at wfe.runs, are each
# reported as a failure of their rule.
use strict;
use warnings;
use File::Basename qw(dirname);
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use WfeNode;

my $top = dirname(__FILE__) . '/../..';
my $script = slurp_file("$top/scripts/citus-check.sql");
my $page = slurp_file("$top/docs/scaling.md");

my $node = WfeNode::node('wfe_citus');

# check(): the script's FAIL and warn lines, as "table|rule|verdict", sorted
sub check
{
	my ($out, $err) = ('', '');
	my $rc = $node->psql('postgres',
		"$script\n\\pset format unaligned\n\\pset tuples_only on\n"
		  . "SELECT 'line|' || \"table\" || '|' || rule || '|' || verdict FROM citus_check"
		  . " WHERE verdict <> 'ok' ORDER BY 1;\n",
		stdout => \$out, stderr => \$err, on_error_stop => 1);
	is($rc, 0, 'scripts/citus-check.sql runs') or diag($err);
	return join("\n", sort map { s/^line\|//r } grep { /^line\|/ } split /\n/, $out);
}

# what the page says: the lines of its example output that FAIL or warn
my ($block) = $page =~ /\$ psql -X -f scripts\/citus-check\.sql[^\n]*\n(.*?)```/s;
ok(defined $block, 'scaling.md shows the check\'s output');
my @documented;
for my $line (split /\n/, $block // '')
{
	my @f = map { s/^\s+|\s+$//gr } split /\|/, $line;
	push @documented, "$f[0]|$f[2]|$f[3]" if @f >= 4 && $f[3] =~ /^(FAIL|warn)$/;
}
cmp_ok(scalar(@documented), '>', 0, 'the page lists failures and warnings');
is(check(), join("\n", sort @documented),
	'the failures and warnings are those docs/scaling.md lists');

# the check is not vacuous: two tables that break a rule each
$node->safe_psql('postgres', q{
CREATE TABLE wfe.zz_by_id (id bigint PRIMARY KEY, run_id bigint NOT NULL REFERENCES wfe.runs (run_id));
CREATE TABLE wfe.zz_ref (x int PRIMARY KEY, r bigint REFERENCES wfe.runs (run_id));
});
my $broken = check();
like($broken, qr/^zz_by_id\|unique\|FAIL$/m, 'a distributed table whose primary key leaves out run_id fails "unique"');
like($broken, qr/^zz_ref\|fk-ref\|FAIL$/m, 'a reference table with a foreign key to a distributed one fails "fk-ref"');
unlike($broken, qr/^zz_by_id\|fk\|/m, 'a foreign key on run_id to wfe.runs passes "fk"');

$node->stop;
done_testing();
