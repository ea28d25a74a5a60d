/*
 * utf8.c — well-formed UTF-8: decode, encode, count, cut and sanitize.
 * See utf8.h.
 */
#include "utf8.h"

#include <string.h>

/* See utf8.h. */
int
wfe_utf8_decode(const unsigned char *s, size_t avail, uint32_t *cp)
{
	int			need;
	uint32_t	c;

	if (s[0] < 0x80)
	{
		if (cp)
			*cp = s[0];
		return 1;
	}
	/* 0xC0, 0xC1 and 0xF5.. can only start overlong or out-of-range forms */
	if (s[0] >= 0xC2 && s[0] <= 0xDF)
		need = 1, c = s[0] & 0x1F;
	else if (s[0] >= 0xE0 && s[0] <= 0xEF)
		need = 2, c = s[0] & 0x0F;
	else if (s[0] >= 0xF0 && s[0] <= 0xF4)
		need = 3, c = s[0] & 0x07;
	else
		return 0;
	if ((size_t) need >= avail)
		return 0;
	/* stops at a NUL too: it is not a continuation byte */
	for (int i = 1; i <= need; i++)
	{
		if ((s[i] & 0xC0) != 0x80)
			return 0;
		c = (c << 6) | (s[i] & 0x3F);
	}
	/* overlong three- and four-byte forms, surrogates, beyond U+10FFFF */
	if ((need == 2 && (c < 0x800 || (c >= 0xD800 && c <= 0xDFFF))) ||
		(need == 3 && (c < 0x10000 || c > 0x10FFFF)))
		return 0;
	if (cp)
		*cp = c;
	return need + 1;
}

/* See utf8.h. */
int
wfe_utf8_encode(uint32_t cp, char *buf)
{
	if (cp < 0x80)
	{
		buf[0] = (char) cp;
		return 1;
	}
	if (cp < 0x800)
	{
		buf[0] = (char) (0xC0 | (cp >> 6));
		buf[1] = (char) (0x80 | (cp & 0x3F));
		return 2;
	}
	if (cp < 0x10000)
	{
		buf[0] = (char) (0xE0 | (cp >> 12));
		buf[1] = (char) (0x80 | ((cp >> 6) & 0x3F));
		buf[2] = (char) (0x80 | (cp & 0x3F));
		return 3;
	}
	buf[0] = (char) (0xF0 | (cp >> 18));
	buf[1] = (char) (0x80 | ((cp >> 12) & 0x3F));
	buf[2] = (char) (0x80 | ((cp >> 6) & 0x3F));
	buf[3] = (char) (0x80 | (cp & 0x3F));
	return 4;
}

/* See utf8.h. */
size_t
wfe_utf8_chars(const char *s, size_t n)
{
	size_t		count = 0;

	/* every byte but a continuation byte starts a character */
	for (size_t i = 0; i < n; i++)
		if (((unsigned char) s[i] & 0xC0) != 0x80)
			count++;
	return count;
}

/* See utf8.h. */
size_t
wfe_utf8_cut(const char *s, size_t n)
{
	while (n > 0 && ((unsigned char) s[n] & 0xC0) == 0x80)
		n--;
	return n;
}

/* See utf8.h. */
void
wfe_utf8_sanitize(char *s)
{
	unsigned char *p = (unsigned char *) s;

	while (*p)
	{
		/* a character is at most 4 bytes; the NUL ends what there is */
		int			n = wfe_utf8_decode(p, strnlen((const char *) p, 4), NULL);

		if (n == 0)
			*p++ = '?';
		else
			p += n;
	}
}
