/*
 * names.c — the shape of a queue name.  See names.h.
 */
#include "names.h"

/* See names.h. */
bool
wfe_queue_name_valid(const char *s)
{
	int			n = 0;

	if (!(*s >= 'a' && *s <= 'z'))
		return false;
	for (s++; *s; s++, n++)
		if (!((*s >= 'a' && *s <= 'z') || (*s >= '0' && *s <= '9') ||
			  *s == '_' || *s == '.' || *s == '-'))
			return false;
	return n <= 62;
}
