/*
 * regex_parse.c — the regex engine's parser (see regex.h for the syntax):
 * a recursive descent from the pattern's UTF-8 to a small syntax tree
 * (children in linked lists, so a long pattern does not make the tree
 * deep), refusing what a linear-time engine cannot run with a message
 * that names it and its offset.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/base/hex.h"
#include "regex_internal.h"

/* A new node; returns its index, or -1. */
static int
node_new(rx_parser *ps, int type)
{
	rx_node    *n;

	if (ps->failed)
		return -1;
	if (ps->nnodes == ps->capnodes)
	{
		int			cap = ps->capnodes ? ps->capnodes * 2 : 16;
		rx_node    *nn = realloc(ps->nodes, (size_t) cap * sizeof(rx_node));

		if (!nn)
		{
			rx_fail(ps, ps->p, "out of memory%s", NULL);
			return -1;
		}
		ps->nodes = nn;
		ps->capnodes = cap;
	}
	n = &ps->nodes[ps->nnodes];
	memset(n, 0, sizeof(*n));
	n->type = type;
	n->first = -1;
	n->next = -1;
	return ps->nnodes++;
}

/* Read exactly n hex digits at ps->p; returns the value or -1 (nothing consumed). */
static long
read_hex(rx_parser *ps, int n)
{
	long		v = 0;
	int			i;

	if (ps->end - ps->p < n)
		return -1;
	for (i = 0; i < n; i++)
	{
		int			h = wfe_hex_value(ps->p[i]);

		if (h < 0)
			return -1;
		v = v * 16 + h;
	}
	ps->p += n;
	return v;
}

/*
 * Read the rest of \u (ps->p after the 'u'): HHHH, a surrogate pair
 * \uHHHH\uHHHH, or {H...}.  Returns the code point, or -1 when none follows
 * (ECMA-262 Annex B: then \u is a literal 'u').
 */
static long
read_unicode_escape(rx_parser *ps)
{
	long		v,
				lo;

	if (ps->p < ps->end && *ps->p == '{')
	{
		const unsigned char *q = ps->p + 1;

		v = 0;
		while (q < ps->end && wfe_hex_value(*q) >= 0 && v <= 0x10FFFF)
			v = v * 16 + wfe_hex_value(*q++);
		if (q < ps->end && *q == '}' && q > ps->p + 1 && v <= 0x10FFFF)
		{
			ps->p = q + 1;
			return v;
		}
		return -1;
	}
	v = read_hex(ps, 4);
	if (v >= 0xD800 && v <= 0xDBFF && ps->end - ps->p >= 6 &&
		ps->p[0] == '\\' && ps->p[1] == 'u')
	{
		const unsigned char *save = ps->p;

		ps->p += 2;
		lo = read_hex(ps, 4);
		if (lo >= 0xDC00 && lo <= 0xDFFF)
			return 0x10000 + ((v - 0xD800) << 10) + (lo - 0xDC00);
		ps->p = save;
	}
	return v;
}

/*
 * Parse the escape after a backslash (ps->p just past it).  Returns a code
 * point, or sets *cls_letter to d/D/w/W/s/S, or to p/P with the property's
 * table in ps->prop, or *assertion to 'b'/'B' (outside classes only),
 * returning RX_NONE.
 */
static uint32_t
parse_escape(rx_parser *ps, int in_class, char *cls_letter, char *assertion)
{
	const unsigned char *at = ps->p - 1;
	uint32_t	c;
	int			k;
	long		v;

	*cls_letter = 0;
	*assertion = 0;
	if (ps->p >= ps->end)
	{
		rx_fail(ps, at, "\\ at end of pattern%s", NULL);
		return RX_NONE;
	}
	c = rx_decode(ps->p, (size_t) (ps->end - ps->p), &k);
	ps->p += k;
	switch (c)
	{
		case 'd':
		case 'D':
		case 'w':
		case 'W':
		case 's':
		case 'S':
			*cls_letter = (char) c;
			return RX_NONE;
		case 'b':
			if (in_class)
				return 0x08;
			*assertion = 'b';
			return RX_NONE;
		case 'B':
			if (in_class)
			{
				rx_fail(ps, at, "\\B inside a character class%s", NULL);
				return RX_NONE;
			}
			*assertion = 'B';
			return RX_NONE;
		case 't':
			return '\t';
		case 'n':
			return '\n';
		case 'r':
			return '\r';
		case 'v':
			return '\v';
		case 'f':
			return '\f';
		case '0':
			if (ps->p < ps->end && *ps->p >= '0' && *ps->p <= '9')
			{
				rx_fail(ps, at, "octal escapes are not supported%s", NULL);
				return RX_NONE;
			}
			return 0;
		case 'c':
			if (ps->p < ps->end &&
				((*ps->p >= 'a' && *ps->p <= 'z') || (*ps->p >= 'A' && *ps->p <= 'Z')))
				return (uint32_t) (*ps->p++ % 32);
			return '\\';		/* Annex B: "\c" not followed by a letter is "\\c" */
		case 'x':
			v = read_hex(ps, 2);
			return v >= 0 ? (uint32_t) v : 'x';
		case 'u':
			v = read_unicode_escape(ps);
			return v >= 0 ? (uint32_t) v : 'u';
		case 'k':
			if (ps->p < ps->end && *ps->p == '<')
			{
				rx_fail(ps, at, "backreference \\k<...> is not supported "
						"(patterns run in linear time, without backtracking)%s", NULL);
				return RX_NONE;
			}
			return 'k';
		case 'p':
		case 'P':
			if (ps->p < ps->end && *ps->p == '{')
			{
				const unsigned char *name = ps->p + 1,
						   *close = memchr(name, '}', (size_t) (ps->end - name));
				char		shown[64];

				if (close == NULL)
				{
					rx_fail(ps, at, "unterminated \\%s{...} property escape", c == 'p' ? "p" : "P");
					return RX_NONE;
				}
				ps->prop = wfe_uniprop_lookup((const char *) name, (size_t) (close - name),
											  &ps->nprop);
				if (ps->prop == NULL)
				{
					snprintf(shown, sizeof(shown), "%.*s",
							 (int) (close - name < 40 ? close - name : 40), (const char *) name);
					rx_fail(ps, at, "unknown Unicode property \"%s\" (general categories "
							"such as L, Lu, Nd or Letter, scripts as Script=Greek, "
							"and Any, ASCII, Assigned are supported)", shown);
					return RX_NONE;
				}
				ps->p = close + 1;
				*cls_letter = (char) c;
				return RX_NONE;
			}
			return c;
		default:
			if (c >= '1' && c <= '9')
			{
				char		d[2] = {(char) c, 0};

				if (in_class)
				{
					rx_fail(ps, at, "octal escapes are not supported (\\%s)", d);
					return RX_NONE;
				}
				rx_fail(ps, at, "backreference \\%s is not supported "
						"(patterns run in linear time, without backtracking)", d);
				return RX_NONE;
			}
			return c;			/* identity escape: \. \* \/ \- ... */
	}
}

/* Parse a bracket class; ps->p is just past '['.  Returns a N_CLASS node. */
static int
parse_class(rx_parser *ps)
{
	const unsigned char *open = ps->p - 1;
	int			ci = rx_cls_new(ps),
				node;
	rx_class   *cl;

	if (ci < 0)
		return -1;
	if (ps->p < ps->end && *ps->p == '^')
	{
		ps->classes[ci].negated = 1;
		ps->p++;
	}
	for (;;)
	{
		uint32_t	lo,
					hi;
		char		letter,
					assertion;
		int			k;

		if (ps->failed)
			return -1;
		if (ps->p >= ps->end)
		{
			rx_fail(ps, open, "unterminated character class%s", NULL);
			return -1;
		}
		if (*ps->p == ']')
		{
			ps->p++;
			break;
		}
		/* one class atom: a character or a class escape */
		if (*ps->p == '\\')
		{
			ps->p++;
			lo = parse_escape(ps, 1, &letter, &assertion);
			if (ps->failed)
				return -1;
			if (letter)
			{
				rx_cls_add_escape(ps, &ps->classes[ci], letter);
				continue;		/* \d-x: the '-' is literal (Annex B) */
			}
		}
		else
		{
			lo = rx_decode(ps->p, (size_t) (ps->end - ps->p), &k);
			if (lo >= RX_BAD_BYTE)
			{
				rx_fail(ps, ps->p, "pattern is not valid UTF-8%s", NULL);
				return -1;
			}
			ps->p += k;
		}
		hi = lo;
		if (ps->end - ps->p >= 2 && ps->p[0] == '-' && ps->p[1] != ']')
		{
			const unsigned char *dash = ps->p;

			ps->p++;
			if (*ps->p == '\\')
			{
				ps->p++;
				hi = parse_escape(ps, 1, &letter, &assertion);
				if (ps->failed)
					return -1;
				if (letter)
				{
					/* x-\d: both literal, plus the escape's set (Annex B) */
					rx_cls_add(ps, &ps->classes[ci], lo, lo);
					rx_cls_add(ps, &ps->classes[ci], '-', '-');
					rx_cls_add_escape(ps, &ps->classes[ci], letter);
					continue;
				}
			}
			else
			{
				hi = rx_decode(ps->p, (size_t) (ps->end - ps->p), &k);
				if (hi >= RX_BAD_BYTE)
				{
					rx_fail(ps, ps->p, "pattern is not valid UTF-8%s", NULL);
					return -1;
				}
				ps->p += k;
			}
			if (hi < lo)
			{
				rx_fail(ps, dash, "character class range out of order%s", NULL);
				return -1;
			}
		}
		rx_cls_add(ps, &ps->classes[ci], lo, hi);
	}
	cl = &ps->classes[ci];
	rx_cls_normalize(cl);
	node = node_new(ps, N_CLASS);
	if (node >= 0)
		ps->nodes[node].c = (uint32_t) ci;
	return node;
}

/*
 * A class node for a top-level \d \D \w \W \s \S, or \p{...} \P{...}
 * (which borrows its property's table: no copy, however many there are).
 */
static int
escape_class_node(rx_parser *ps, char letter)
{
	int			ci = rx_cls_new(ps),
				node;

	if (ci < 0)
		return -1;
	if ((letter | 0x20) == 'p')
	{
		ps->classes[ci].table = ps->prop;
		ps->classes[ci].n = ps->nprop;
	}
	else
	{
		rx_cls_add_escape(ps, &ps->classes[ci], (char) (letter | 0x20));
		rx_cls_normalize(&ps->classes[ci]);
	}
	ps->classes[ci].negated = (letter & 0x20) == 0;
	node = node_new(ps, N_CLASS);
	if (node >= 0)
		ps->nodes[node].c = (uint32_t) ci;
	return node;
}

/* Parse a decimal number at ps->p (at most 9 digits); -1 if none. */
static long
read_decimal(const unsigned char **pp, const unsigned char *end)
{
	long		v = 0;
	int			n = 0;

	while (*pp < end && **pp >= '0' && **pp <= '9')
	{
		if (n < 9)
			v = v * 10 + (**pp - '0');
		else
			v = WFE_REGEX_MAX_REPEAT + 1L;	/* too big either way */
		(*pp)++;
		n++;
	}
	return n ? v : -1;
}

/*
 * Try to read a {n}, {n,} or {n,m} quantifier at ps->p ('{').  Returns 1
 * and the bounds, or 0 when the brace is not a quantifier (then it is a
 * literal, Annex B), or -1 on error.
 */
static int
read_braces(rx_parser *ps, int *min, int *max)
{
	const unsigned char *q = ps->p + 1;
	long		lo,
				hi;

	lo = read_decimal(&q, ps->end);
	if (lo < 0)
		return 0;
	hi = lo;
	if (q < ps->end && *q == ',')
	{
		q++;
		hi = read_decimal(&q, ps->end);	/* -1: unbounded */
	}
	if (q >= ps->end || *q != '}')
		return 0;
	if (lo > WFE_REGEX_MAX_REPEAT || hi > WFE_REGEX_MAX_REPEAT)
	{
		char		b[16];

		snprintf(b, sizeof(b), "%d", WFE_REGEX_MAX_REPEAT);
		rx_fail(ps, ps->p, "repetition bound above %s", b);
		return -1;
	}
	if (hi >= 0 && hi < lo)
	{
		rx_fail(ps, ps->p, "numbers out of order in {} quantifier%s", NULL);
		return -1;
	}
	*min = (int) lo;
	*max = (int) hi;
	ps->p = q + 1;
	return 1;
}

/* Parse one atom; returns a node, or -2 at '|' / ')' / end (nothing to parse). */
static int
parse_atom(rx_parser *ps, int *quantifiable)
{
	const unsigned char *at = ps->p;
	uint32_t	c;
	int			k,
				node;

	*quantifiable = 1;
	if (ps->p >= ps->end || *ps->p == '|' || *ps->p == ')')
		return -2;
	c = rx_decode(ps->p, (size_t) (ps->end - ps->p), &k);
	if (c >= RX_BAD_BYTE)
	{
		rx_fail(ps, ps->p, "pattern is not valid UTF-8%s", NULL);
		return -1;
	}
	ps->p += k;
	switch (c)
	{
		case '(':
			if (ps->p < ps->end && *ps->p == '?')
			{
				const unsigned char *q = ps->p + 1;

				if (q < ps->end && *q == ':')
					ps->p = q + 1;
				else if (q < ps->end && (*q == '=' || *q == '!'))
				{
					rx_fail(ps, at, "lookahead (?%s...) is not supported "
							"(patterns run in linear time, without backtracking)",
							*q == '=' ? "=" : "!");
					return -1;
				}
				else if (q + 1 < ps->end && *q == '<' && (q[1] == '=' || q[1] == '!'))
				{
					rx_fail(ps, at, "lookbehind (?<%s...) is not supported "
							"(patterns run in linear time, without backtracking)",
							q[1] == '=' ? "=" : "!");
					return -1;
				}
				else if (q < ps->end && *q == '<')
				{
					/* named group: skip the name, nothing is captured */
					while (q < ps->end && *q != '>' && *q != ')')
						q++;
					if (q >= ps->end || *q != '>' || q == ps->p + 2)
					{
						rx_fail(ps, at, "malformed group name%s", NULL);
						return -1;
					}
					ps->p = q + 1;
				}
				else
				{
					rx_fail(ps, at, "unsupported group syntax (?%s", NULL);
					return -1;
				}
			}
			if (++ps->depth > RX_MAX_NESTING)
			{
				rx_fail(ps, at, "groups nested too deeply%s", NULL);
				return -1;
			}
			node = rx_parse_alt(ps);
			ps->depth--;
			if (ps->failed)
				return -1;
			if (ps->p >= ps->end || *ps->p != ')')
			{
				rx_fail(ps, at, "unterminated group%s", NULL);
				return -1;
			}
			ps->p++;
			return node;
		case '[':
			return parse_class(ps);
		case '.':
			return node_new(ps, N_ANY);
		case '^':
			*quantifiable = 0;
			return node_new(ps, N_BOL);
		case '$':
			*quantifiable = 0;
			return node_new(ps, N_EOL);
		case '*':
		case '+':
		case '?':
			rx_fail(ps, at, "nothing to repeat%s", NULL);
			return -1;
		case '{':
			{
				int			mn,
							mx,
							r;

				ps->p = at;
				r = read_braces(ps, &mn, &mx);
				if (r != 0)
				{
					if (r > 0)
						rx_fail(ps, at, "nothing to repeat%s", NULL);
					return -1;
				}
				ps->p = at + 1;
				break;			/* a literal '{' */
			}
		case '\\':
			{
				char		letter,
							assertion;

				c = parse_escape(ps, 0, &letter, &assertion);
				if (ps->failed)
					return -1;
				if (letter)
					return escape_class_node(ps, letter);
				if (assertion)
				{
					*quantifiable = 0;
					return node_new(ps, assertion == 'b' ? N_WORDB : N_NWORDB);
				}
				break;
			}
		default:
			break;
	}
	node = node_new(ps, N_CHAR);
	if (node >= 0)
		ps->nodes[node].c = c;
	return node;
}

/* Parse a concatenation of quantified atoms up to '|' or ')' or the end. */
static int
parse_cat(rx_parser *ps)
{
	int			cat = node_new(ps, N_CAT),
				last = -1;

	while (!ps->failed)
	{
		int			quantifiable,
					atom,
					min = -1,
					max = -1;
		const unsigned char *qat;

		atom = parse_atom(ps, &quantifiable);
		if (atom == -2)
			break;
		if (atom < 0)
			return -1;
		qat = ps->p;
		if (ps->p < ps->end)
		{
			switch (*ps->p)
			{
				case '*':
					min = 0, max = -1, ps->p++;
					break;
				case '+':
					min = 1, max = -1, ps->p++;
					break;
				case '?':
					min = 0, max = 1, ps->p++;
					break;
				case '{':
					if (read_braces(ps, &min, &max) <= 0)
					{
						if (ps->failed)
							return -1;
						min = -1;
					}
					break;
			}
		}
		if (min >= 0)
		{
			int			rep;

			if (!quantifiable)
			{
				rx_fail(ps, qat, "nothing to repeat (quantifier after an assertion)%s", NULL);
				return -1;
			}
			if (ps->p < ps->end && *ps->p == '?')
				ps->p++;		/* lazy: the same set of matches */
			if (ps->p < ps->end && (*ps->p == '*' || *ps->p == '+' || *ps->p == '?' ||
									(*ps->p == '{' && read_braces(ps, &(int) {0}, &(int) {0}) != 0)))
			{
				rx_fail(ps, ps->p, "nothing to repeat%s", NULL);
				return -1;
			}
			rep = node_new(ps, N_REP);
			if (rep < 0)
				return -1;
			ps->nodes[rep].first = atom;
			ps->nodes[rep].min = min;
			ps->nodes[rep].max = max;
			atom = rep;
		}
		if (cat < 0)
			return -1;
		if (last < 0)
			ps->nodes[cat].first = atom;
		else
			ps->nodes[last].next = atom;
		last = atom;
	}
	return ps->failed ? -1 : cat;
}

/* Parse alternatives separated by '|'. */
int
rx_parse_alt(rx_parser *ps)
{
	int			alt = node_new(ps, N_ALT),
				last = -1;

	for (;;)
	{
		int			cat = parse_cat(ps);

		if (cat < 0 || alt < 0)
			return -1;
		if (last < 0)
			ps->nodes[alt].first = cat;
		else
			ps->nodes[last].next = cat;
		last = cat;
		if (ps->p < ps->end && *ps->p == '|')
		{
			ps->p++;
			continue;
		}
		return alt;
	}
}
