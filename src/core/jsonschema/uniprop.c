/*
 * uniprop.c — names to code point ranges for \p{...} (see uniprop.h).
 *
 * The tables are generated (uniprop_tables.h); this file only resolves a
 * name.  Lookup runs once per escape when a pattern is compiled, so a
 * linear scan of the few hundred names is cheap enough.
 */
#include "uniprop.h"

#include <string.h>

/* What kind of property a name denotes. */
enum
{
	UC_GC,						/* a General_Category value */
	UC_SC,						/* a Script value */
	UC_SCX,						/* a Script_Extensions value */
	UC_BINARY					/* a binary property (Any, ASCII, Assigned) */
};

typedef struct wfe_uc_table
{
	int			first,
				count;
} wfe_uc_table;

typedef struct wfe_uc_name
{
	const char *name;
	int			kind;
	int			table;
} wfe_uc_name;

#include "uniprop_tables.h"

/* Does the len-byte string s equal the C string name? */
static int
same(const char *s, size_t len, const char *name)
{
	return strlen(name) == len && memcmp(s, name, len) == 0;
}

/* The table of a value of one kind (kind -1: a lone name), or NULL. */
static const wfe_uc_range *
find(const char *value, size_t len, int kind, int *n)
{
	for (size_t i = 0; i < sizeof(uc_names) / sizeof(uc_names[0]); i++)
	{
		const wfe_uc_name *e = &uc_names[i];

		/* a lone name is a category, a binary property or (RE2) a script */
		if (kind < 0 ? e->kind == UC_SCX : e->kind != kind)
			continue;
		if (same(value, len, e->name))
		{
			*n = uc_tables[e->table].count;
			return &uc_ranges[uc_tables[e->table].first];
		}
	}
	return NULL;
}

const wfe_uc_range *
wfe_uniprop_lookup(const char *body, size_t len, int *n)
{
	const char *eq = memchr(body, '=', len);
	size_t		plen;
	int			kind;

	*n = 0;
	if (eq == NULL)
		return find(body, len, -1, n);
	plen = (size_t) (eq - body);
	if (same(body, plen, "General_Category") || same(body, plen, "gc"))
		kind = UC_GC;
	else if (same(body, plen, "Script") || same(body, plen, "sc"))
		kind = UC_SC;
	else if (same(body, plen, "Script_Extensions") || same(body, plen, "scx"))
		kind = UC_SCX;
	else
		return NULL;
	return find(eq + 1, len - plen - 1, kind, n);
}

const char *
wfe_uniprop_version(void)
{
	return WFE_UNICODE_VERSION;
}
