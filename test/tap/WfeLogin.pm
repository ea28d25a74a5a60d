# WfeLogin.pm: SQL run as a real login, for the TAP tests' attacks and
# refusals.  One place for how a login's answer is read: the SQLSTATE of
# its error (psql with VERBOSITY verbose), the message after it, stdout and
# stderr.
package WfeLogin;

use strict;
use warnings;

use Test::More;

# as_login(NODE, ROLE, SQL, %opt): run SQL in database postgres as ROLE and
# return { state, out, err, msg }: state is the error's SQLSTATE or ''; with
# strict => 1, any other stderr (a login that fails with FATAL, say) is an
# answer too, as "psql: <stderr>".
sub as_login
{
	my ($node, $role, $q, %opt) = @_;
	my ($out, $err) = ('', '');
	$node->psql('postgres', "\\set VERBOSITY verbose\n$q", stdout => \$out, stderr => \$err,
		on_error_stop => 1, extra_params => [ '-U', $role ]);
	my ($state) = $err =~ /ERROR:\s+([0-9A-Z]{5}):/;
	my ($msg) = $err =~ /ERROR:\s+[0-9A-Z]{5}:\s+(.*)/;
	$state //= $opt{strict} && $err =~ /\S/ ? "psql: $err" : '';
	return { state => $state, out => $out, err => $err, msg => $msg // '' };
}

# ok_login(NODE, ROLE, SQL): one assertion, that SQL runs as login ROLE
# without an error (strict); its stdout.
sub ok_login
{
	my ($node, $role, $q) = @_;
	my $r = as_login($node, $role, $q, strict => 1);
	is($r->{state}, '', "$role: " . substr($q =~ s/\s+/ /gr, 0, 70)) or diag($r->{err});
	return $r->{out};
}

1;
