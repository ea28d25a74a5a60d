/*
 * regex.c — the linear-time regular-expression engine (see regex.h).
 *
 * Three stages: a recursive-descent parser builds a small syntax tree
 * (children in linked lists, so a long pattern does not make the tree deep);
 * the compiler flattens it into a Thompson-NFA program (counted repetition
 * is expanded, bounded by WFE_REGEX_MAX_PROGRAM); the search runs the
 * program over the subject with one list of threads per position (Pike's
 * VM without captures), so no input makes it backtrack.
 *
 * The stages are files of their own: regex_parse.c (with the character
 * classes of regex_class.c), this file (the compiler and the entry points)
 * and regex_search.c; regex_internal.h holds the forms they share.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "regex_internal.h"

/* Record the first error (later ones are consequences). */
void
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

	root = rx_parse_alt(&ps);
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
