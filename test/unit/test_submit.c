/*
 * test_submit.c — unit tests of a submit's pure decisions
 * (src/core/engine/submit.c): option names, tenant names, the W3C
 * traceparent reading, the idempotency outcome and the run limit.  The
 * server's side (SQLSTATEs, messages) is test/regress/sql/runtime_submit.sql.
 *
 * A standalone TAP program, built with ASan/UBSan by the Makefile.
 */
#include <stdlib.h>
#include <string.h>

#include "core/engine/submit.h"

#include "tap.h"

/* Read a heap copy (ASan sees overreads); true when it reads, with its parts. */
static bool
read_tp(const char *s, char *trace, char *parent, char *flags)
{
	char	   *copy = strdup(s);
	bool		r = wfe_traceparent_read(copy, trace, parent, flags);

	free(copy);
	return r;
}

int
main(void)
{
	char		t[33],
				p[17],
				f[3];
	char		long_name[65];

	/* option names: exactly the six */
	ok(wfe_submit_option_known("tenant") && wfe_submit_option_known("traceparent") &&
	   wfe_submit_option_known("not_before") && wfe_submit_option_known("priority") &&
	   wfe_submit_option_known("run_deadline_ms") && wfe_submit_option_known("execution_context"),
	   "the six options are known");
	ok(!wfe_submit_option_known("Tenant") && !wfe_submit_option_known("") &&
	   !wfe_submit_option_known("tenants"), "a near miss is not");

	/* tenant names: ^[A-Za-z0-9_.-]{1,63}$ */
	memset(long_name, 'a', 64);
	long_name[64] = '\0';
	ok(!wfe_tenant_name_valid(long_name), "64 characters: not a tenant");
	long_name[63] = '\0';
	ok(wfe_tenant_name_valid(long_name), "63 characters: a tenant");
	ok(wfe_tenant_name_valid("Acme_1.eu-west"), "letters, digits, _ . -");
	ok(!wfe_tenant_name_valid(""), "empty: not a tenant");
	ok(!wfe_tenant_name_valid("a b") && !wfe_tenant_name_valid("a/b") && !wfe_tenant_name_valid("\xc3\xa9"),
	   "space, slash, non-ASCII: not a tenant");
	ok(!wfe_tenant_name_valid("a\n"), "a trailing newline: not a tenant");

	/* traceparent */
	ok(read_tp("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", t, p, f) &&
	   strcmp(t, "4bf92f3577b34da6a3ce929d0e0e4736") == 0 && strcmp(p, "00f067aa0ba902b7") == 0 &&
	   strcmp(f, "01") == 0, "version 00: trace id, parent id, sampled");
	ok(read_tp("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-fe", t, p, f) && strcmp(f, "00") == 0,
	   "only the sampled flag is passed on (fe: not sampled)");
	ok(read_tp("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-03", t, p, f) && strcmp(f, "01") == 0,
	   "03: sampled, the reserved bit dropped");
	ok(!read_tp("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x", t, p, f),
	   "version 00 carries nothing more");
	ok(read_tp("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-what\never", t, p, f),
	   "a later version may carry more after a '-'");
	ok(!read_tp("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x", t, p, f),
	   "... but only after a '-'");
	ok(!read_tp("ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", t, p, f), "version ff is invalid");
	ok(!read_tp("00-00000000000000000000000000000000-00f067aa0ba902b7-01", t, p, f), "an all-zero trace id");
	ok(!read_tp("00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01", t, p, f), "an all-zero parent id");
	ok(!read_tp("00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01", t, p, f), "uppercase hex");
	ok(!read_tp("00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01", t, p, f), "a short trace id");
	ok(!read_tp("", t, p, f) && !read_tp("00", t, p, f), "empty, truncated");
	ok(!read_tp("00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", t, p, f), "a wrong separator");

	/* idempotency and the run limit */
	ok(wfe_idempotency_outcome(false, false) == WFE_IDEMPOTENT_NEW, "no run keeps the key: a new run");
	ok(wfe_idempotency_outcome(true, true) == WFE_IDEMPOTENT_EXISTING, "the same context: the earlier run");
	ok(wfe_idempotency_outcome(true, false) == WFE_IDEMPOTENT_CONFLICT, "another context: refused");
	ok(wfe_run_admitted(2, 3) && !wfe_run_admitted(3, 3) && !wfe_run_admitted(4, 3),
	   "a run is admitted below the limit only");
	ok(wfe_run_admitted(1000000, 0), "no limit: admitted");
	return tap_done();
}
