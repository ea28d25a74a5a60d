/*
 * regex_class.c — the character classes of the regex engine (regex.h):
 * bracket classes and the escapes \d \w \s \p{...} as sorted, merged
 * code-point ranges, bounded by RX_MAX_RANGES per pattern.  Membership is
 * tested by the search (regex_search.c).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "regex_internal.h"

/* Append a range to a class (normalised later). */
void
rx_cls_add(rx_parser *ps, rx_class *cl, uint32_t lo, uint32_t hi)
{
	if (++ps->nranges > RX_MAX_RANGES)
	{
		char		b[16];

		snprintf(b, sizeof(b), "%d", RX_MAX_RANGES);
		rx_fail(ps, ps->p, "character classes too large (more than %s ranges)", b);
		return;
	}
	if (cl->n == cl->cap)
	{
		int			cap = cl->cap ? cl->cap * 2 : 8;
		rx_range   *r = realloc(cl->r, (size_t) cap * sizeof(rx_range));

		if (!r)
		{
			rx_fail(ps, ps->p, "out of memory%s", NULL);
			return;
		}
		cl->r = r;
		cl->cap = cap;
	}
	cl->r[cl->n].lo = lo;
	cl->r[cl->n].hi = hi;
	cl->n++;
}

/* qsort order of ranges. */
static int
range_cmp(const void *a, const void *b)
{
	const rx_range *x = a,
			   *y = b;

	return x->lo < y->lo ? -1 : x->lo > y->lo ? 1 : 0;
}

/* Sort and merge a class's ranges, so matching can binary-search them. */
void
rx_cls_normalize(rx_class *cl)
{
	int			i,
				j = 0;

	if (cl->n == 0)
		return;
	qsort(cl->r, (size_t) cl->n, sizeof(rx_range), range_cmp);
	for (i = 1; i < cl->n; i++)
	{
		if (cl->r[i].lo <= cl->r[j].hi + 1)
		{
			if (cl->r[i].hi > cl->r[j].hi)
				cl->r[j].hi = cl->r[i].hi;
		}
		else
			cl->r[++j] = cl->r[i];
	}
	cl->n = j + 1;
}

/* The ranges of \d, \w, \s (ECMA-262's WhiteSpace and LineTerminator). */
static const rx_range RX_DIGIT[] = {{'0', '9'}};
static const rx_range RX_WORD[] = {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}};
static const rx_range RX_SPACE[] = {
	{0x09, 0x0D}, {0x20, 0x20}, {0xA0, 0xA0}, {0x1680, 0x1680}, {0x2000, 0x200A},
	{0x2028, 0x2029}, {0x202F, 0x202F}, {0x205F, 0x205F}, {0x3000, 0x3000},
	{0xFEFF, 0xFEFF}
};

/*
 * Add the ranges of \d \w \s \p{...} (letter lower case) or their
 * complement (upper); for p/P, the table parse_escape last read.
 */
void
rx_cls_add_escape(rx_parser *ps, rx_class *cl, char letter)
{
	const rx_range *r;
	int			n,
				i;
	uint32_t	next = 0;
	char		l = (char) (letter | 0x20);

	if (l == 'p')
		r = ps->prop, n = ps->nprop;
	else if (l == 'd')
		r = RX_DIGIT, n = 1;
	else if (l == 'w')
		r = RX_WORD, n = 4;
	else
		r = RX_SPACE, n = (int) (sizeof(RX_SPACE) / sizeof(RX_SPACE[0]));
	if (letter == l)
	{
		for (i = 0; i < n; i++)
			rx_cls_add(ps, cl, r[i].lo, r[i].hi);
		return;
	}
	/* complement: the gaps between the sorted ranges */
	for (i = 0; i < n; i++)
	{
		if (r[i].lo > next)
			rx_cls_add(ps, cl, next, r[i].lo - 1);
		next = r[i].hi + 1;
	}
	if (next <= RX_MAX_CP)
		rx_cls_add(ps, cl, next, RX_MAX_CP);
}

/* A new empty class; returns its index, or -1. */
int
rx_cls_new(rx_parser *ps)
{
	if (ps->nclasses == ps->capclasses)
	{
		int			cap = ps->capclasses ? ps->capclasses * 2 : 4;
		rx_class   *c = realloc(ps->classes, (size_t) cap * sizeof(rx_class));

		if (!c)
		{
			rx_fail(ps, ps->p, "out of memory%s", NULL);
			return -1;
		}
		ps->classes = c;
		ps->capclasses = cap;
	}
	memset(&ps->classes[ps->nclasses], 0, sizeof(rx_class));
	return ps->nclasses++;
}
