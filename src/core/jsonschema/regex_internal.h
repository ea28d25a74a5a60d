/*
 * regex_internal.h — the parts of the regex engine (regex.h) its files
 * share: the syntax tree the parser builds (regex_parse.c, with the
 * character classes of regex_class.c), the program the compiler makes of
 * it (regex.c) and the search runs (regex_search.c).
 */
#ifndef WFE_REGEX_INTERNAL_H
#define WFE_REGEX_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "core/base/utf8.h"
#include "regex.h"
#include "uniprop.h"

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

/* Record the first error (regex.c). */
extern void rx_fail(rx_parser *ps, const unsigned char *at, const char *fmt, const char *arg);

/* Character classes (regex_class.c). */
extern void rx_cls_add(rx_parser *ps, rx_class *cl, uint32_t lo, uint32_t hi);
extern void rx_cls_normalize(rx_class *cl);
extern void rx_cls_add_escape(rx_parser *ps, rx_class *cl, char letter);
extern int	rx_cls_new(rx_parser *ps);

/* Parse an alternation at ps->p into a tree; returns its root node (regex_parse.c). */
extern int	rx_parse_alt(rx_parser *ps);

/*
 * Decode one UTF-8 character at s (n > 0 bytes left); *k gets its length.
 * A byte that does not start a well-formed character decodes to
 * RX_BAD_BYTE + byte, length 1.  Inline: the search decodes every character
 * of the subject with it.
 */
static inline uint32_t
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

#endif							/* WFE_REGEX_INTERNAL_H */
