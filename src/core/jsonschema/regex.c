/*
 * regex.c — the linear-time regular-expression engine (see regex.h).
 *
 * Three stages: a recursive-descent parser builds a small syntax tree
 * (children in linked lists, so a long pattern does not make the tree deep);
 * the compiler flattens it into a Thompson-NFA program (counted repetition
 * is expanded, bounded by WFE_REGEX_MAX_PROGRAM); the search runs the
 * program over the subject with one list of threads per position (Pike's
 * VM without captures), so no input makes it backtrack.
 */
#include "regex.h"
#include "uniprop.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/base/hex.h"
#include "core/base/utf8.h"

/* Group nesting bound: the parser and the compiler recurse per group. */
#define RX_MAX_NESTING	128

/*
 * Bound on the ranges all bracket classes of one pattern copy: a \p{...}
 * inside brackets copies its table (hundreds of ranges), so this bounds the
 * memory a long pattern of them takes.  A \p{...} alone borrows its table.
 */
#define RX_MAX_RANGES	100000

/* Code points above Unicode stand for bytes that are not UTF-8 (0x110000+b). */
#define RX_BAD_BYTE		0x110000u
#define RX_MAX_CP		(RX_BAD_BYTE + 0xFFu)
#define RX_NONE			UINT32_MAX	/* "no character": before the start, after the end */

typedef wfe_uc_range rx_range;

typedef struct rx_class
{
	rx_range   *r;				/* owned ranges (NULL when borrowing a table) */
	const rx_range *table;		/* or a Unicode property table, not owned */
	int			n,
				cap;
	int			negated;
} rx_class;

/* Syntax tree. */
enum
{
	N_EMPTY, N_CHAR, N_ANY, N_CLASS, N_BOL, N_EOL, N_WORDB, N_NWORDB,
	N_CAT, N_ALT, N_REP
};

typedef struct rx_node
{
	int			type;
	int			first;			/* N_CAT, N_ALT: first child; N_REP: the child */
	int			next;			/* next sibling, -1 at the end */
	int			min,
				max;			/* N_REP: bounds, max -1 = unbounded */
	uint32_t	c;				/* N_CHAR: code point; N_CLASS: class index */
} rx_node;

/* Program. */
enum
{
	I_CHAR, I_ANY, I_CLASS, I_BOL, I_EOL, I_WORDB, I_NWORDB, I_SPLIT, I_JMP, I_MATCH
};

typedef struct rx_inst
{
	uint8_t		op;
	int			x,
				y;				/* I_SPLIT: both targets; I_JMP: x */
	uint32_t	c;				/* I_CHAR: code point; I_CLASS: class index */
} rx_inst;

struct wfe_regex
{
	rx_inst    *prog;
	int			nprog;
	rx_class   *classes;
	int			nclasses;
	int			anchored;		/* starts with ^: threads start only at offset 0 */
};

typedef struct rx_parser
{
	const unsigned char *start,
			   *p,
			   *end;
	rx_node    *nodes;
	int			nnodes,
				capnodes;
	rx_class   *classes;
	int			nclasses,
				capclasses;
	char	   *err;
	size_t		errlen;
	int			failed;
	int			depth;
	long		nranges;		/* ranges copied into classes so far */
	/* the table of the last \p{...} / \P{...} parse_escape read */
	const rx_range *prop;
	int			nprop;
	/* compiler */
	rx_inst    *prog;
	int			nprog,
				capprog;
} rx_parser;

/* Record the first error (later ones are consequences). */
static void
rx_fail(rx_parser *ps, const unsigned char *at, const char *fmt, const char *arg)
{
	char		what[200];

	if (ps->failed)
		return;
	ps->failed = 1;
	snprintf(what, sizeof(what), fmt, arg ? arg : "");
	if (ps->err && ps->errlen > 0)
		snprintf(ps->err, ps->errlen, "invalid pattern at offset %ld: %s",
				 (long) (at - ps->start), what);
}

/*
 * Decode one UTF-8 character at s (n > 0 bytes left); *k gets its length.
 * A byte that does not start a well-formed character decodes to
 * RX_BAD_BYTE + byte, length 1.
 */
static uint32_t
rx_decode(const unsigned char *s, size_t n, int *k)
{
	uint32_t	c;

	/* ASCII without a call: patterns and subjects are mostly ASCII */
	if (s[0] < 0x80)
	{
		*k = 1;
		return s[0];
	}
	*k = wfe_utf8_decode(s, n, &c);
	if (*k == 0)
	{
		*k = 1;
		return RX_BAD_BYTE + s[0];
	}
	return c;
}

/* ---- classes ---------------------------------------------------------- */

/* Append a range to a class (normalised later). */
static void
cls_add(rx_parser *ps, rx_class *cl, uint32_t lo, uint32_t hi)
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
static void
cls_normalize(rx_class *cl)
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

/* Is code point c in the class? */
static int
cls_match(const rx_class *cl, uint32_t c)
{
	const rx_range *r = cl->table ? cl->table : cl->r;
	int			lo = 0,
				hi = cl->n - 1,
				in = 0;

	while (lo <= hi)
	{
		int			mid = (lo + hi) / 2;

		if (c < r[mid].lo)
			hi = mid - 1;
		else if (c > r[mid].hi)
			lo = mid + 1;
		else
		{
			in = 1;
			break;
		}
	}
	return in != cl->negated;
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
static void
cls_add_escape(rx_parser *ps, rx_class *cl, char letter)
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
			cls_add(ps, cl, r[i].lo, r[i].hi);
		return;
	}
	/* complement: the gaps between the sorted ranges */
	for (i = 0; i < n; i++)
	{
		if (r[i].lo > next)
			cls_add(ps, cl, next, r[i].lo - 1);
		next = r[i].hi + 1;
	}
	if (next <= RX_MAX_CP)
		cls_add(ps, cl, next, RX_MAX_CP);
}

/* A new empty class; returns its index, or -1. */
static int
cls_new(rx_parser *ps)
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

/* ---- parser ----------------------------------------------------------- */

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
	int			ci = cls_new(ps),
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
				cls_add_escape(ps, &ps->classes[ci], letter);
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
					cls_add(ps, &ps->classes[ci], lo, lo);
					cls_add(ps, &ps->classes[ci], '-', '-');
					cls_add_escape(ps, &ps->classes[ci], letter);
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
		cls_add(ps, &ps->classes[ci], lo, hi);
	}
	cl = &ps->classes[ci];
	cls_normalize(cl);
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
	int			ci = cls_new(ps),
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
		cls_add_escape(ps, &ps->classes[ci], (char) (letter | 0x20));
		cls_normalize(&ps->classes[ci]);
	}
	ps->classes[ci].negated = (letter & 0x20) == 0;
	node = node_new(ps, N_CLASS);
	if (node >= 0)
		ps->nodes[node].c = (uint32_t) ci;
	return node;
}

static int	parse_alt(rx_parser *ps);

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
			node = parse_alt(ps);
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
static int
parse_alt(rx_parser *ps)
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

/* ---- compiler --------------------------------------------------------- */

/* Append an instruction; returns its index, or -1 (program too large). */
static int
emit(rx_parser *ps, int op, int x, int y, uint32_t c)
{
	if (ps->failed)
		return -1;
	if (ps->nprog >= WFE_REGEX_MAX_PROGRAM)
	{
		char		b[16];

		snprintf(b, sizeof(b), "%d", WFE_REGEX_MAX_PROGRAM);
		rx_fail(ps, ps->start, "pattern too large once repetitions are expanded (more than %s states)", b);
		return -1;
	}
	if (ps->nprog == ps->capprog)
	{
		int			cap = ps->capprog ? ps->capprog * 2 : 32;
		rx_inst    *p = realloc(ps->prog, (size_t) cap * sizeof(rx_inst));

		if (!p)
		{
			rx_fail(ps, ps->start, "out of memory%s", NULL);
			return -1;
		}
		ps->prog = p;
		ps->capprog = cap;
	}
	ps->prog[ps->nprog].op = (uint8_t) op;
	ps->prog[ps->nprog].x = x;
	ps->prog[ps->nprog].y = y;
	ps->prog[ps->nprog].c = c;
	return ps->nprog++;
}

/* Emit the program of a node. */
static void
compile_node(rx_parser *ps, int ni)
{
	const rx_node *n;
	int			i,
				child;

	if (ps->failed || ni < 0)
		return;
	n = &ps->nodes[ni];
	switch (n->type)
	{
		case N_EMPTY:
			break;
		case N_CHAR:
			emit(ps, I_CHAR, 0, 0, n->c);
			break;
		case N_ANY:
			emit(ps, I_ANY, 0, 0, 0);
			break;
		case N_CLASS:
			emit(ps, I_CLASS, 0, 0, n->c);
			break;
		case N_BOL:
			emit(ps, I_BOL, 0, 0, 0);
			break;
		case N_EOL:
			emit(ps, I_EOL, 0, 0, 0);
			break;
		case N_WORDB:
			emit(ps, I_WORDB, 0, 0, 0);
			break;
		case N_NWORDB:
			emit(ps, I_NWORDB, 0, 0, 0);
			break;
		case N_CAT:
			for (child = n->first; child >= 0 && !ps->failed; child = ps->nodes[child].next)
				compile_node(ps, child);
			break;
		case N_ALT:
			{
				/* split L1, next; L1: a; jmp end; next: split ... ; last alternative */
				int			jumps_head = -1;

				for (child = n->first; child >= 0 && !ps->failed; child = ps->nodes[child].next)
				{
					int			split = -1,
								j;

					if (ps->nodes[child].next >= 0)
						split = emit(ps, I_SPLIT, 0, 0, 0);
					if (split >= 0)
						ps->prog[split].x = ps->nprog;
					compile_node(ps, child);
					if (split < 0)
						break;
					/* chain the pending jumps through their y field */
					j = emit(ps, I_JMP, 0, jumps_head, 0);
					if (j < 0)
						return;
					jumps_head = j;
					ps->prog[split].y = ps->nprog;
				}
				while (jumps_head >= 0 && !ps->failed)
				{
					int			prev = ps->prog[jumps_head].y;

					ps->prog[jumps_head].x = ps->nprog;
					ps->prog[jumps_head].y = 0;
					jumps_head = prev;
				}
				break;
			}
		case N_REP:
			{
				int			body = n->first,
							splits_head = -1;

				for (i = 0; i < n->min && !ps->failed; i++)
					compile_node(ps, body);
				if (n->max < 0)
				{
					/* L: split L1, end; L1: body; jmp L; end: */
					int			loop = emit(ps, I_SPLIT, 0, 0, 0);

					if (loop < 0)
						return;
					ps->prog[loop].x = ps->nprog;
					compile_node(ps, body);
					emit(ps, I_JMP, loop, 0, 0);
					if (!ps->failed)
						ps->prog[loop].y = ps->nprog;
					break;
				}
				/* (max - min) optional copies, each one able to skip to the end */
				for (i = n->min; i < n->max && !ps->failed; i++)
				{
					int			s = emit(ps, I_SPLIT, 0, splits_head, 0);

					if (s < 0)
						return;
					ps->prog[s].x = ps->nprog;
					splits_head = s;
					compile_node(ps, body);
				}
				while (splits_head >= 0 && !ps->failed)
				{
					int			prev = ps->prog[splits_head].y;

					ps->prog[splits_head].y = ps->nprog;
					splits_head = prev;
				}
				break;
			}
	}
}

/* Does the tree start with ^ on every path we can cheaply see?  (CAT's first.) */
static int
starts_anchored(const rx_parser *ps, int ni)
{
	while (ni >= 0)
	{
		const rx_node *n = &ps->nodes[ni];

		if (n->type == N_BOL)
			return 1;
		if (n->type == N_CAT || (n->type == N_ALT && n->first >= 0 &&
								 ps->nodes[n->first].next < 0))
			ni = n->first;
		else
			return 0;
	}
	return 0;
}

wfe_regex *
wfe_regex_compile(const char *pat, size_t len, char *err, size_t errlen)
{
	rx_parser	ps;
	int			root,
				i;
	wfe_regex  *re;

	memset(&ps, 0, sizeof(ps));
	ps.start = ps.p = (const unsigned char *) pat;
	ps.end = ps.start + len;
	ps.err = err;
	ps.errlen = errlen;
	if (err && errlen)
		err[0] = '\0';

	root = parse_alt(&ps);
	if (!ps.failed && ps.p < ps.end)
		rx_fail(&ps, ps.p, "unmatched )%s", NULL);
	if (!ps.failed)
	{
		compile_node(&ps, root);
		emit(&ps, I_MATCH, 0, 0, 0);
	}
	re = ps.failed ? NULL : calloc(1, sizeof(wfe_regex));
	if (!re)
	{
		if (!ps.failed)
			rx_fail(&ps, ps.start, "out of memory%s", NULL);
		for (i = 0; i < ps.nclasses; i++)
			free(ps.classes[i].r);
		free(ps.classes);
		free(ps.prog);
		free(ps.nodes);
		return NULL;
	}
	re->anchored = starts_anchored(&ps, root);
	re->prog = ps.prog;
	re->nprog = ps.nprog;
	re->classes = ps.classes;
	re->nclasses = ps.nclasses;
	free(ps.nodes);
	return re;
}

void
wfe_regex_free(wfe_regex *re)
{
	int			i;

	if (!re)
		return;
	for (i = 0; i < re->nclasses; i++)
		free(re->classes[i].r);
	free(re->classes);
	free(re->prog);
	free(re);
}

/* ---- search ----------------------------------------------------------- */

/* A set of threads (program counters), deduplicated by a generation stamp. */
typedef struct rx_list
{
	int		   *pc;
	int			n;
	unsigned   *stamp;
	unsigned	gen;
} rx_list;

/* Search state shared by the thread-adding loop. */
typedef struct rx_vm
{
	const wfe_regex *re;
	int		   *stack;
	long		steps;			/* budget left; LONG_MAX-ish when unbounded */
	int			bounded;
} rx_vm;

/* Is c a word character (\w)? */
static int
is_word(uint32_t c)
{
	return (c >= '0' && c <= '9') || (c >= 'A' && c <= 'Z') ||
		(c >= 'a' && c <= 'z') || c == '_';
}

/* Is c a line terminator ('.' does not match one)? */
static int
is_line_terminator(uint32_t c)
{
	return c == '\n' || c == '\r' || c == 0x2028 || c == 0x2029;
}

/*
 * Add pc and everything reachable from it without consuming a character to
 * the list, at a position between characters prev and next (RX_NONE at the
 * ends).  Returns 1 if MATCH is reachable, -1 if the budget ran out, else 0.
 */
static int
add_thread(rx_vm *vm, rx_list *l, int pc, uint32_t prev, uint32_t next)
{
	int			sp = 0;

	vm->stack[sp++] = pc;
	while (sp > 0)
	{
		const rx_inst *in;

		pc = vm->stack[--sp];
		if (l->stamp[pc] == l->gen)
			continue;
		l->stamp[pc] = l->gen;
		if (vm->bounded && --vm->steps < 0)
			return -1;
		in = &vm->re->prog[pc];
		switch (in->op)
		{
			case I_MATCH:
				return 1;
			case I_JMP:
				vm->stack[sp++] = in->x;
				break;
			case I_SPLIT:
				vm->stack[sp++] = in->y;
				vm->stack[sp++] = in->x;
				break;
			case I_BOL:
				if (prev == RX_NONE)
					vm->stack[sp++] = pc + 1;
				break;
			case I_EOL:
				if (next == RX_NONE)
					vm->stack[sp++] = pc + 1;
				break;
			case I_WORDB:
			case I_NWORDB:
				{
					int			b = (prev != RX_NONE && is_word(prev)) !=
						(next != RX_NONE && is_word(next));

					if (b == (in->op == I_WORDB))
						vm->stack[sp++] = pc + 1;
					break;
				}
			default:
				l->pc[l->n++] = pc;
				break;
		}
	}
	return 0;
}

/* Does instruction `in` consume character c? */
static int
step_matches(const wfe_regex *re, const rx_inst *in, uint32_t c)
{
	switch (in->op)
	{
		case I_CHAR:
			return in->c == c;
		case I_ANY:
			return !is_line_terminator(c);
		case I_CLASS:
			return cls_match(&re->classes[in->c], c);
		default:
			return 0;
	}
}

int
wfe_regex_search(const wfe_regex *re, const char *s, size_t len, long *budget)
{
	const unsigned char *u = (const unsigned char *) s;
	rx_vm		vm;
	rx_list		lists[2],
			   *cl = &lists[0],
			   *nl = &lists[1];
	size_t		pos = 0;
	uint32_t	prev = RX_NONE,
				cur;
	int			k = 0,
				rc = 0,
				n = re->nprog;
	void	   *mem;
	int			small[1200];

	if (budget && *budget <= 0)
		return -1;
	/*
	 * One block: two lists (pcs and stamps) and the epsilon stack.  Each pc
	 * is expanded once per list and pushes at most two, so 2n + 1 entries.
	 */
	if ((size_t) n * 6 + 2 <= sizeof(small) / sizeof(small[0]))
	{
		/* small programs (most patterns) need no allocation */
		memset(small, 0, ((size_t) n * 6 + 2) * sizeof(int));
		mem = small;
	}
	else if ((mem = calloc((size_t) n * 6 + 2, sizeof(int))) == NULL)
		return -1;
	lists[0].pc = mem;
	lists[1].pc = lists[0].pc + n;
	vm.stack = lists[1].pc + n;
	lists[0].stamp = (unsigned *) (vm.stack + 2 * n + 2);
	lists[1].stamp = lists[0].stamp + n;
	lists[0].gen = lists[1].gen = 1;
	lists[0].n = lists[1].n = 0;
	vm.re = re;
	vm.bounded = budget != NULL;
	vm.steps = budget ? *budget : 0;

	cur = len > 0 ? rx_decode(u, len, &k) : RX_NONE;
	for (;;)
	{
		size_t		npos;
		uint32_t	next;
		int			kn = 0,
					i;

		if (!re->anchored || pos == 0)
		{
			rc = add_thread(&vm, cl, 0, prev, cur);
			if (rc != 0)
				break;
		}
		if (cur == RX_NONE)
			break;
		npos = pos + (size_t) k;
		next = npos < len ? rx_decode(u + npos, len - npos, &kn) : RX_NONE;
		if (cl->n == 0 && re->anchored)
			break;
		for (i = 0; i < cl->n; i++)
		{
			const rx_inst *in = &re->prog[cl->pc[i]];

			if (vm.bounded && --vm.steps < 0)
			{
				rc = -1;
				break;
			}
			if (step_matches(re, in, cur))
			{
				rc = add_thread(&vm, nl, cl->pc[i] + 1, cur, next);
				if (rc != 0)
					break;
			}
		}
		if (rc != 0)
			break;
		/* swap lists; clear the new next list */
		{
			rx_list    *t = cl;

			cl = nl;
			nl = t;
			nl->n = 0;
			nl->gen++;
		}
		prev = cur;
		cur = next;
		pos = npos;
		k = kn;
	}
	if (budget)
		*budget = vm.steps < 0 ? 0 : vm.steps;
	if (mem != small)
		free(mem);
	return rc;
}
