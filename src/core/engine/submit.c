/*
 * submit.c — the pure decisions of a submit.  See submit.h.
 */
#include "submit.h"

#include <string.h>

/* See submit.h. */
bool
wfe_submit_option_known(const char *key)
{
	static const char *const known[] = {"tenant", "execution_context", "run_deadline_ms", "priority",
	"not_before", "traceparent"};

	for (size_t i = 0; i < sizeof(known) / sizeof(known[0]); i++)
		if (strcmp(key, known[i]) == 0)
			return true;
	return false;
}

/* See submit.h. */
bool
wfe_tenant_name_valid(const char *s)
{
	size_t		n = 0;

	for (; *s; s++, n++)
		if (!((*s >= 'A' && *s <= 'Z') || (*s >= 'a' && *s <= 'z') || (*s >= '0' && *s <= '9') ||
			  *s == '_' || *s == '.' || *s == '-'))
			return false;
	return n >= 1 && n <= 63;
}

/* Are the n characters at s lowercase hex digits, and (zero_ok false) not all '0'? */
static bool
lower_hex(const char *s, size_t n, bool zero_ok)
{
	bool		zero = true;

	for (size_t i = 0; i < n; i++)
	{
		if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
			return false;
		zero = zero && s[i] == '0';
	}
	return zero_ok || !zero;
}

/* See submit.h.  Layout: vv-<32>-<16>-ff, 55 characters, then "-..." only past version 00. */
bool
wfe_traceparent_read(const char *s, char trace_id[33], char parent_id[17], char flags[3])
{
	size_t		len = strlen(s);
	int			f;

	if (len < 55 || !lower_hex(s, 2, true) || s[2] != '-' || !lower_hex(s + 3, 32, false) ||
		s[35] != '-' || !lower_hex(s + 36, 16, false) || s[52] != '-' || !lower_hex(s + 53, 2, true))
		return false;
	if (strncmp(s, "ff", 2) == 0)
		return false;
	if (len > 55 && (s[55] != '-' || strncmp(s, "00", 2) == 0))
		return false;
	memcpy(trace_id, s + 3, 32);
	trace_id[32] = '\0';
	memcpy(parent_id, s + 36, 16);
	parent_id[16] = '\0';
	f = s[54] >= 'a' ? s[54] - 'a' + 10 : s[54] - '0';
	strcpy(flags, (f & 1) ? "01" : "00");
	return true;
}

/* See submit.h. */
wfe_idempotency
wfe_idempotency_outcome(bool found, bool same_context)
{
	if (!found)
		return WFE_IDEMPOTENT_NEW;
	return same_context ? WFE_IDEMPOTENT_EXISTING : WFE_IDEMPOTENT_CONFLICT;
}

/* See submit.h. */
bool
wfe_run_admitted(int64_t live, int limit)
{
	return limit < 1 || live < limit;
}
