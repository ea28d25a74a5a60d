/*
 * regex_search.c — the regex engine's search (see regex.h): Pike's VM
 * without captures runs the compiled program over the subject with one
 * list of threads per position, so no input makes it backtrack; every
 * thread step is paid from the caller's budget.
 */
#include <stdlib.h>
#include <string.h>

#include "regex_internal.h"

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
