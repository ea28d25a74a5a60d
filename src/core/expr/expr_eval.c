/*
 * expr_eval.c — run-time evaluation of CEL expressions over JSON, with
 * CEL's semantics (cel-spec langdef "Evaluation"):
 *
 *  - `&&` and `||` are commutative: an error on one side is absorbed when the
 *    other side decides the result (false for &&, true for ||); `?:`
 *    evaluates only the branch it takes;
 *  - all() and exists() absorb errors the same way; exists_one(), map() and
 *    filter() are strict;
 *  - int and uint arithmetic that overflows is an error; doubles follow
 *    IEEE 754 (1.0 / 0.0 is +inf); numbers compare and are equal across
 *    int, uint and double by value; there is no mixed-kind arithmetic.
 *
 * Values (expr_internal.h) are small structs passed by value; strings,
 * lists and maps the expression builds live in an arena owned by the
 * evaluation (its first 4 KiB inside the context, so small expressions
 * never call malloc).  Work is bounded by the step budget: one step per
 * node evaluated and per macro iteration, one per value compared by == or
 * `in`, per element copied by +, per 64 string bytes scanned or copied, and
 * the regular expression engine's own steps.  Running out of budget or
 * memory is fatal: no operator absorbs it.
 */
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "expr_internal.h"

struct eval_chunk
{
	eval_chunk *next;
	size_t		size;
	size_t		used;
	max_align_t data[];
};

#define EVAL_CHUNK_SIZE 16384

/* Spend n evaluation steps; a fatal expr.eval once the budget is exhausted. */
int
eval_charge(eval_context *cx, long n, int offset)
{
	if (n > cx->max_steps - cx->steps)
	{
		cx->steps = cx->max_steps;
		cx->fatal = 1;
		wfe_expr_set_error(cx->err, "expr.eval", offset,
						   "evaluation step budget of %ld exhausted at offset %d",
						   cx->max_steps, offset);
		return -1;
	}
	cx->steps += n;
	return 0;
}

/* Report a run-time error (expr.eval) at an offset; returns -1. */
int
eval_error(eval_context *cx, int offset, const char *fmt,...)
{
	va_list		ap;
	char		msg[256];

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	wfe_expr_set_error(cx->err, "expr.eval", offset, "%s", msg);
	return -1;
}

/* Zeroed memory from the evaluation's arena; NULL (fatal error) past the cap. */
void *
eval_alloc(eval_context *cx, size_t size, int offset)
{
	size_t		a = (size + sizeof(max_align_t) - 1) & ~(sizeof(max_align_t) - 1);
	char	   *p;
	eval_chunk *c = cx->chunks;

	if (a == 0)
		a = sizeof(max_align_t);
	if (a <= cx->inline_left)
	{
		p = cx->inline_next;
		cx->inline_next += a;
		cx->inline_left -= a;
		memset(p, 0, size);
		return p;
	}
	if (size > WFE_EXPR_MAX_EVAL_BYTES || cx->arena_bytes + a > WFE_EXPR_MAX_EVAL_BYTES)
	{
		cx->fatal = 1;
		eval_error(cx, offset, "expression at offset %d builds more than %d bytes of values",
				   offset, WFE_EXPR_MAX_EVAL_BYTES);
		return NULL;
	}
	if (c == NULL || c->size - c->used < a)
	{
		size_t		csize = a > EVAL_CHUNK_SIZE ? a : EVAL_CHUNK_SIZE;

		c = malloc(sizeof(eval_chunk) + csize);
		if (c == NULL)
		{
			cx->fatal = 1;
			eval_error(cx, offset, "out of memory");
			return NULL;
		}
		c->size = csize;
		c->used = 0;
		c->next = cx->chunks;
		cx->chunks = c;
	}
	p = (char *) c->data + c->used;
	c->used += a;
	cx->arena_bytes += a;
	memset(p, 0, size);
	return p;
}

/* A string value holding a NUL-terminated arena copy of s. */
int
eval_string(eval_context *cx, const char *s, size_t len, int offset,
			cel_value *out)
{
	char	   *copy = eval_alloc(cx, len + 1, offset);

	if (copy == NULL)
		return -1;
	memcpy(copy, s, len);
	copy[len] = '\0';
	memset(out, 0, sizeof(*out));
	out->kind = CEL_STRING;
	out->v.s.ptr = copy;
	out->v.s.len = len;
	return 0;
}

/* Report that no overload of an operator or function takes these values. */
int
eval_no_overload(eval_context *cx, int offset, const char *what,
				 const cel_value *a, const cel_value *b)
{
	if (b == NULL)
		return eval_error(cx, offset, "%s at offset %d cannot be applied to %s",
						  what, offset, cel_kind_name(a->kind));
	return eval_error(cx, offset, "%s at offset %d cannot be applied to %s and %s",
					  what, offset, cel_kind_name(a->kind), cel_kind_name(b->kind));
}

/* Value constructors. */
static cel_value
make_bool(int b)
{
	cel_value	v;

	memset(&v, 0, sizeof(v));
	v.kind = CEL_BOOL;
	v.v.b = b ? 1 : 0;
	return v;
}

static cel_value
make_kind(cel_kind k)
{
	cel_value	v;

	memset(&v, 0, sizeof(v));
	v.kind = k;
	return v;
}


/* An identifier: a macro variable, a type denotation, or a root. */
static int
eval_ident(eval_context *cx, const expr_node *n, cel_value *out)
{
	int			i;

	if (n->ident == IDENT_VAR)
	{
		for (i = cx->nframes - 1; i >= 0; i--)
			if (cx->frames[i].binder == n->binder)
			{
				*out = cx->frames[i].value;
				return 0;
			}
		return eval_error(cx, n->offset, "variable '%s' at offset %d is not bound",
						  n->str, n->offset);
	}
	if (n->ident == IDENT_TYPE)
	{
		*out = make_kind(CEL_TYPE);
		out->v.type = n->type_denoted;
		return 0;
	}
	{
		const char *key = wfe_expr_root_key(n->str);
		json_object *value;

		if (!json_object_is_type(cx->root, json_type_object) ||
			!json_object_object_get_ex(cx->root, key, &value))
			return eval_error(cx, n->offset,
							  "root '%s' at offset %d is not present in the evaluation input",
							  n->str, n->offset);
		*out = cel_from_json(value);
		return 0;
	}
}

/* Integer value of a list index: int, uint, or a double with no fraction. */
static int
index_of(const cel_value *index, int64_t *out)
{
	switch (index->kind)
	{
		case CEL_INT:
			*out = index->v.i;
			return 0;
		case CEL_UINT:
			*out = index->v.u > (uint64_t) INT64_MAX ? INT64_MAX : (int64_t) index->v.u;
			return 0;
		case CEL_DOUBLE:
			if (index->v.d >= -9223372036854775808.0 && index->v.d < 9223372036854775808.0 &&
				index->v.d == trunc(index->v.d))
			{
				*out = (int64_t) index->v.d;
				return 0;
			}
			return -1;
		default:
			return -1;
	}
}

/* True for the kinds a map key may have. */
static int
is_key_kind(cel_kind k)
{
	return k == CEL_STRING || k == CEL_INT || k == CEL_UINT || k == CEL_BOOL;
}

/*
 * Look up the member a SELECT or INDEX node names in an evaluated container
 * (and index).  Sets *found and *value; -1 only for type errors, which has()
 * does not excuse either.
 */
static int
lookup(eval_context *cx, const expr_node *n, const cel_value *container,
	   const cel_value *index, int *found, cel_value *value)
{
	char		where[80];

	*found = 0;
	if (n->kind == EXPR_SELECT)
	{
		cel_value	key;

		if (container->kind != CEL_MAP)
		{
			wfe_expr_span_text(cx->expr, n, where, sizeof(where));
			return eval_error(cx, n->offset,
							  "cannot select field '%s' from %s in %s (offset %d)",
							  n->str, cel_kind_name(container->kind), where, n->offset);
		}
		key = make_kind(CEL_STRING);
		key.v.s.ptr = n->str;
		key.v.s.len = n->str_len;
		*found = cel_map_find(container, &key, value);
		return 0;
	}
	if (container->kind == CEL_MAP)
	{
		if (!is_key_kind(index->kind) && index->kind != CEL_DOUBLE)
		{
			wfe_expr_span_text(cx->expr, n, where, sizeof(where));
			return eval_error(cx, n->offset,
							  "map key must be a string, int, uint or bool, not %s, in %s (offset %d)",
							  cel_kind_name(index->kind), where, n->offset);
		}
		*found = cel_map_find(container, index, value);
		return 0;
	}
	if (container->kind == CEL_LIST)
	{
		int64_t		i;

		if (index_of(index, &i) < 0)
		{
			wfe_expr_span_text(cx->expr, n, where, sizeof(where));
			return eval_error(cx, n->offset,
							  "list index must be an integer, not %s, in %s (offset %d)",
							  cel_kind_name(index->kind), where, n->offset);
		}
		if (i >= 0 && (uint64_t) i < (uint64_t) cel_list_size(container))
		{
			*found = 1;
			*value = cel_list_get(container, (size_t) i);
		}
		return 0;
	}
	wfe_expr_span_text(cx->expr, n, where, sizeof(where));
	return eval_error(cx, n->offset, "cannot index %s in %s (offset %d)",
					  cel_kind_name(container->kind), where, n->offset);
}

/* Evaluate the container (and index) of a SELECT or INDEX and look up. */
static int
eval_lookup(eval_context *cx, const expr_node *n, int *found, cel_value *value,
			cel_value *container, cel_value *index)
{
	*index = make_kind(CEL_NULL);
	if (eval_node(cx, n->left, container) < 0)
		return -1;
	if (n->kind == EXPR_INDEX && eval_node(cx, n->right, index) < 0)
		return -1;
	return lookup(cx, n, container, index, found, value);
}

/* a.b, a["b"], a[0]: a missing member is an error (use has() to test). */
static int
eval_access(eval_context *cx, const expr_node *n, cel_value *out)
{
	cel_value	container;
	cel_value	index;
	int			found;
	char		where[80];

	if (eval_lookup(cx, n, &found, out, &container, &index) < 0)
		return -1;
	if (found)
		return 0;
	wfe_expr_span_text(cx->expr, n, where, sizeof(where));
	if (n->kind == EXPR_SELECT)
		return eval_error(cx, n->offset, "no such field '%s' in %s (offset %d)",
						  n->str, where, n->offset);
	if (container.kind == CEL_MAP)
	{
		char		key[80];

		if (cel_format(&index, key, sizeof(key), 0) < 0)
			snprintf(key, sizeof(key), "(long key)");
		return eval_error(cx, n->offset, "no such key %s in %s (offset %d)",
						  key, where, n->offset);
	}
	return eval_error(cx, n->offset,
					  "index out of range (list length %lu) in %s (offset %d)",
					  (unsigned long) cel_list_size(&container), where, n->offset);
}

/* has(a.b) / has(a["b"]) / has(a[0]): whether the last member exists. */
static int
eval_has(eval_context *cx, const expr_node *n, cel_value *out)
{
	cel_value	container;
	cel_value	index;
	cel_value	value;
	int			found;

	if (eval_charge(cx, 1, n->left->offset) < 0 ||
		eval_lookup(cx, n->left, &found, &value, &container, &index) < 0)
		return -1;
	*out = make_bool(found);
	return 0;
}

/* [a, b, ...] */
static int
eval_list(eval_context *cx, const expr_node *n, cel_value *out)
{
	cel_list   *l = eval_alloc(cx, sizeof(cel_list), n->offset);
	int			i;

	if (l == NULL ||
		(n->nargs > 0 &&
		 (l->items = eval_alloc(cx, (size_t) n->nargs * sizeof(cel_value), n->offset)) == NULL))
		return -1;
	for (i = 0; i < n->nargs; i++)
		if (eval_node(cx, n->args[i], &l->items[i]) < 0)
			return -1;
	l->n = (size_t) n->nargs;
	*out = make_kind(CEL_LIST);
	out->v.c.list = l;
	return 0;
}

/* {k: v, ...}: keys must be string, int, uint or bool, and distinct. */
static int
eval_map(eval_context *cx, const expr_node *n, cel_value *out)
{
	cel_map    *m = eval_alloc(cx, sizeof(cel_map), n->offset);
	int			count = n->nargs / 2;
	int			i;

	if (m == NULL ||
		(count > 0 &&
		 ((m->keys = eval_alloc(cx, (size_t) count * sizeof(cel_value), n->offset)) == NULL ||
		  (m->values = eval_alloc(cx, (size_t) count * sizeof(cel_value), n->offset)) == NULL)))
		return -1;
	*out = make_kind(CEL_MAP);
	out->v.c.map = m;
	for (i = 0; i < count; i++)
	{
		cel_value	k;
		cel_value	v;
		cel_value	ignored;

		if (eval_node(cx, n->args[2 * i], &k) < 0)
			return -1;
		if (!is_key_kind(k.kind))
			return eval_error(cx, n->args[2 * i]->start,
							  "map key at offset %d must be a string, int, uint or bool, not %s",
							  n->args[2 * i]->start, cel_kind_name(k.kind));
		if (eval_charge(cx, (long) m->n, n->args[2 * i]->start) < 0)
			return -1;
		if (cel_map_find(out, &k, &ignored))
			return eval_error(cx, n->args[2 * i]->start,
							  "duplicate map key at offset %d", n->args[2 * i]->start);
		if (eval_node(cx, n->args[2 * i + 1], &v) < 0)
			return -1;
		m->keys[m->n] = k;
		m->values[m->n] = v;
		m->n++;
	}
	return 0;
}

/* Evaluate a node that must give a bool; *b receives it. */
static int
eval_bool_operand(eval_context *cx, const expr_node *n, const char *what,
				  int offset, int *b)
{
	cel_value	v;

	if (eval_node(cx, n, &v) < 0)
		return -1;
	if (v.kind != CEL_BOOL)
		return eval_error(cx, offset, "%s at offset %d must be bool, not %s",
						  what, offset, cel_kind_name(v.kind));
	*b = v.v.b;
	return 0;
}

/*
 * && and ||, commutatively: if either side decides the result (false for
 * &&, true for ||), that is the result even when the other side fails; if
 * neither decides and one failed, the first failure is the result.
 */
static int
eval_logical(eval_context *cx, const expr_node *n, cel_value *out)
{
	int			is_and = (n->kind == EXPR_AND);
	int			lb = 0;
	int			rb = 0;
	int			left_failed;
	wfe_expr_error saved;

	left_failed = eval_bool_operand(cx, n->left, is_and ? "left operand of '&&'" :
									"left operand of '||'", n->offset, &lb) < 0;
	if (left_failed)
	{
		if (cx->fatal)
			return -1;
		saved = *cx->err;
	}
	else if (lb != is_and)
	{
		*out = make_bool(lb);
		return 0;
	}
	if (eval_bool_operand(cx, n->right, is_and ? "right operand of '&&'" :
						  "right operand of '||'", n->offset, &rb) < 0)
	{
		if (left_failed && !cx->fatal)
			*cx->err = saved;
		return -1;
	}
	if (rb != is_and)
	{
		*out = make_bool(rb);
		return 0;
	}
	if (left_failed)
	{
		*cx->err = saved;
		return -1;
	}
	*out = make_bool(rb);
	return 0;
}

/* Append to a list being built by map() or filter(). */
static int
list_push(eval_context *cx, cel_list *l, size_t cap, const cel_value *v)
{
	(void) cx;
	if (l->n >= cap)
		return -1;				/* cannot happen: cap is the range's size */
	l->items[l->n++] = *v;
	return 0;
}

/*
 * The macros over a list's elements or a map's keys.  all() and exists()
 * absorb errors like && and ||; exists_one(), map() and filter() stop at
 * the first error.
 */
static int
eval_macro(eval_context *cx, const expr_node *n, cel_value *out)
{
	const char *name = wfe_expr_macro_name(n->macro);
	cel_value	range;
	size_t		count;
	size_t		i;
	cel_list   *built = NULL;
	int			is_list;
	int			decided = 0;
	int			failed = 0;
	long		ones = 0;
	wfe_expr_error saved;
	void	   *iter = NULL;
	eval_frame *frame;
	int			rc = -1;

	if (eval_node(cx, n->left, &range) < 0)
		return -1;
	if (range.kind != CEL_LIST && range.kind != CEL_MAP)
		return eval_error(cx, n->offset, "%s() at offset %d needs a list or a map, not %s",
						  name, n->offset, cel_kind_name(range.kind));
	is_list = range.kind == CEL_LIST;
	count = is_list ? cel_list_size(&range) : cel_map_size(&range);
	if (n->macro == MACRO_MAP || n->macro == MACRO_FILTER)
	{
		if ((built = eval_alloc(cx, sizeof(cel_list), n->offset)) == NULL ||
			(count > 0 &&
			 (built->items = eval_alloc(cx, count * sizeof(cel_value), n->offset)) == NULL))
			return -1;
	}
	if (cx->nframes >= WFE_EXPR_MAX_NESTING)
	{
		cx->fatal = 1;
		return eval_error(cx, n->offset, "macros nested too deeply at offset %d", n->offset);
	}
	frame = &cx->frames[cx->nframes++];
	frame->binder = n;

	for (i = 0; i < count && !decided; i++)
	{
		cel_value	r;

		if (eval_charge(cx, 1, n->offset) < 0)
			goto done;
		frame->value = is_list ? cel_list_get(&range, i) : cel_map_key_at(&range, i, &iter);
		switch (n->macro)
		{
			case MACRO_ALL:
			case MACRO_EXISTS:
				{
					int			b;
					int			decisive = n->macro == MACRO_EXISTS;

					if (eval_bool_operand(cx, n->right, "the predicate", n->right->start, &b) < 0)
					{
						if (cx->fatal)
							goto done;
						if (!failed)
							saved = *cx->err;
						failed = 1;
						continue;
					}
					if (b == decisive)
						decided = 1;
					break;
				}
			case MACRO_EXISTS_ONE:
				{
					int			b;

					if (eval_bool_operand(cx, n->right, "the predicate", n->right->start, &b) < 0)
						goto done;
					ones += b;
					break;
				}
			case MACRO_MAP:
				if (n->third != NULL)
				{
					int			b;

					if (eval_bool_operand(cx, n->right, "the filter", n->right->start, &b) < 0)
						goto done;
					if (!b)
						break;
				}
				if (eval_node(cx, n->third != NULL ? n->third : n->right, &r) < 0 ||
					list_push(cx, built, count, &r) < 0)
					goto done;
				break;
			case MACRO_FILTER:
				{
					int			b;

					if (eval_bool_operand(cx, n->right, "the predicate", n->right->start, &b) < 0)
						goto done;
					if (b && list_push(cx, built, count, &frame->value) < 0)
						goto done;
					break;
				}
		}
	}

	switch (n->macro)
	{
		case MACRO_ALL:
		case MACRO_EXISTS:
			if (!decided && failed)
			{
				*cx->err = saved;
				goto done;
			}
			/* all(): true unless decided (a false); exists(): decided is a true */
			*out = make_bool(n->macro == MACRO_ALL ? !decided : decided);
			break;
		case MACRO_EXISTS_ONE:
			*out = make_bool(ones == 1);
			break;
		default:
			*out = make_kind(CEL_LIST);
			out->v.c.list = built;
			break;
	}
	rc = 0;
done:
	cx->nframes--;
	return rc;
}

/* Report integer overflow at a node. */
static int
overflow_error(eval_context *cx, const expr_node *n)
{
	return eval_error(cx, n->offset, "integer overflow in '%s' at offset %d",
					  n->kind == EXPR_NEG ? "-" : wfe_expr_op_name(n->op),
					  n->offset);
}

/* int arithmetic, checked (C99: no overflow builtins needed). */
static int
int_arith(eval_context *cx, const expr_node *n, int64_t a, int64_t b,
		  cel_value *out)
{
	int64_t		v = 0;

	switch (n->op)
	{
		case EXPR_OP_ADD:
			if ((b > 0 && a > INT64_MAX - b) || (b < 0 && a < INT64_MIN - b))
				return overflow_error(cx, n);
			v = a + b;
			break;
		case EXPR_OP_SUB:
			if ((b < 0 && a > INT64_MAX + b) || (b > 0 && a < INT64_MIN + b))
				return overflow_error(cx, n);
			v = a - b;
			break;
		case EXPR_OP_MUL:
			if (a != 0 && b != 0 &&
				(a > 0 ? (b > 0 ? a > INT64_MAX / b : b < INT64_MIN / a)
				 : (b > 0 ? a < INT64_MIN / b : a < INT64_MAX / b)))
				return overflow_error(cx, n);
			v = a * b;
			break;
		case EXPR_OP_DIV:
		case EXPR_OP_MOD:
			if (b == 0)
				return eval_error(cx, n->offset, "%s by zero at offset %d",
								  n->op == EXPR_OP_DIV ? "division" : "modulo", n->offset);
			/* INT64_MIN / -1 overflows; C leaves INT64_MIN % -1 undefined */
			if (a == INT64_MIN && b == -1)
				return overflow_error(cx, n);
			v = n->op == EXPR_OP_DIV ? a / b : a % b;
			break;
		default:
			break;
	}
	*out = make_kind(CEL_INT);
	out->v.i = v;
	return 0;
}

/* uint arithmetic, checked. */
static int
uint_arith(eval_context *cx, const expr_node *n, uint64_t a, uint64_t b,
		   cel_value *out)
{
	uint64_t	v = 0;

	switch (n->op)
	{
		case EXPR_OP_ADD:
			if (a > UINT64_MAX - b)
				return overflow_error(cx, n);
			v = a + b;
			break;
		case EXPR_OP_SUB:
			if (b > a)
				return overflow_error(cx, n);
			v = a - b;
			break;
		case EXPR_OP_MUL:
			if (a != 0 && b > UINT64_MAX / a)
				return overflow_error(cx, n);
			v = a * b;
			break;
		case EXPR_OP_DIV:
		case EXPR_OP_MOD:
			if (b == 0)
				return eval_error(cx, n->offset, "%s by zero at offset %d",
								  n->op == EXPR_OP_DIV ? "division" : "modulo", n->offset);
			v = n->op == EXPR_OP_DIV ? a / b : a % b;
			break;
		default:
			break;
	}
	*out = make_kind(CEL_UINT);
	out->v.u = v;
	return 0;
}

/* '+' on strings and lists: concatenation. */
static int
concat(eval_context *cx, const expr_node *n, const cel_value *l,
	   const cel_value *r, cel_value *out)
{
	if (l->kind == CEL_STRING)
	{
		size_t		la = l->v.s.len;
		size_t		lb = r->v.s.len;
		char	   *buf;

		if (eval_charge(cx, (long) ((la + lb) / 64), n->offset) < 0 ||
			(buf = eval_alloc(cx, la + lb + 1, n->offset)) == NULL)
			return -1;
		memcpy(buf, l->v.s.ptr, la);
		memcpy(buf + la, r->v.s.ptr, lb);
		buf[la + lb] = '\0';
		*out = make_kind(CEL_STRING);
		out->v.s.ptr = buf;
		out->v.s.len = la + lb;
		return 0;
	}
	else
	{
		size_t		la = cel_list_size(l);
		size_t		lb = cel_list_size(r);
		size_t		i;
		cel_list   *list;

		if (eval_charge(cx, (long) (la + lb), n->offset) < 0 ||
			(list = eval_alloc(cx, sizeof(cel_list), n->offset)) == NULL ||
			(la + lb > 0 &&
			 (list->items = eval_alloc(cx, (la + lb) * sizeof(cel_value), n->offset)) == NULL))
			return -1;
		for (i = 0; i < la + lb; i++)
			list->items[i] = i < la ? cel_list_get(l, i) : cel_list_get(r, i - la);
		list->n = la + lb;
		*out = make_kind(CEL_LIST);
		out->v.c.list = list;
		return 0;
	}
}

/* No overload of a binary operator takes these operands. */
static int
operator_no_overload(eval_context *cx, const expr_node *n, const cel_value *l,
					 const cel_value *r)
{
	char		what[32];

	snprintf(what, sizeof(what), "operator '%s'", wfe_expr_op_name(n->op));
	return eval_no_overload(cx, n->offset, what, l, r);
}

/* Apply a binary operator to two evaluated operands. */
static int
eval_binary(eval_context *cx, const expr_node *n, const cel_value *l,
			const cel_value *r, cel_value *out)
{
	int			b;
	int			c;

	switch (n->op)
	{
		case EXPR_OP_EQ:
		case EXPR_OP_NE:
			if (cel_equal(cx, l, r, 0, n->offset, &b) < 0)
				return -1;
			*out = make_bool(n->op == EXPR_OP_EQ ? b : !b);
			return 0;

		case EXPR_OP_IN:
			b = 0;
			if (r->kind == CEL_LIST)
			{
				size_t		len = cel_list_size(r);
				size_t		i;

				for (i = 0; i < len && !b; i++)
				{
					cel_value	e = cel_list_get(r, i);

					if (cel_equal(cx, l, &e, 0, n->offset, &b) < 0)
						return -1;
				}
			}
			else if (r->kind == CEL_MAP)
			{
				cel_value	ignored;

				if (eval_charge(cx, 1, n->offset) < 0)
					return -1;
				b = cel_map_find(r, l, &ignored);
			}
			else
				return eval_error(cx, n->offset,
								  "right operand of 'in' at offset %d must be a list or map, not %s",
								  n->offset, cel_kind_name(r->kind));
			*out = make_bool(b);
			return 0;

		case EXPR_OP_LT:
		case EXPR_OP_LE:
		case EXPR_OP_GT:
		case EXPR_OP_GE:
			if (l->kind == CEL_STRING && r->kind == CEL_STRING &&
				eval_charge(cx, (long) (l->v.s.len / 64), n->offset) < 0)
				return -1;
			switch (cel_compare(l, r, &c))
			{
				case -1:
					return operator_no_overload(cx, n, l, r);
				case 1:
					/* unordered (NaN) compares false under every operator */
					*out = make_bool(0);
					return 0;
			}
			b = n->op == EXPR_OP_LT ? c < 0 : n->op == EXPR_OP_LE ? c <= 0 :
				n->op == EXPR_OP_GT ? c > 0 : c >= 0;
			*out = make_bool(b);
			return 0;

		default:
			break;
	}

	/* arithmetic: same kind on both sides, or timestamps with durations */
	if (l->kind == r->kind)
	{
		switch (l->kind)
		{
			case CEL_INT:
				return int_arith(cx, n, l->v.i, r->v.i, out);
			case CEL_UINT:
				return uint_arith(cx, n, l->v.u, r->v.u, out);
			case CEL_DOUBLE:
				{
					double		x = l->v.d;
					double		y = r->v.d;
					double		v;

					switch (n->op)
					{
						case EXPR_OP_ADD:
							v = x + y;
							break;
						case EXPR_OP_SUB:
							v = x - y;
							break;
						case EXPR_OP_MUL:
							v = x * y;
							break;
						case EXPR_OP_DIV:
							/* IEEE 754: x / 0.0 is ±inf, 0.0 / 0.0 is NaN */
							v = x / y;
							break;
						default:
							return eval_error(cx, n->offset,
											  "operator '%%' at offset %d needs integers, not double and double",
											  n->offset);
					}
					*out = make_kind(CEL_DOUBLE);
					out->v.d = v;
					return 0;
				}
			case CEL_STRING:
			case CEL_LIST:
				if (n->op == EXPR_OP_ADD)
					return concat(cx, n, l, r, out);
				break;
			default:
				break;
		}
	}
	if ((l->kind == CEL_TIMESTAMP || l->kind == CEL_DURATION) &&
		(r->kind == CEL_TIMESTAMP || r->kind == CEL_DURATION) &&
		(n->op == EXPR_OP_ADD || n->op == EXPR_OP_SUB))
		return eval_time_arith(cx, n, l, r, out);
	return operator_no_overload(cx, n, l, r);
}

/* Evaluate one node into *out. */
int
eval_node(eval_context *cx, const expr_node *n, cel_value *out)
{
	cel_value	l;
	cel_value	r;
	int			b;

	if (eval_charge(cx, 1, n->offset) < 0)
		return -1;
	memset(out, 0, sizeof(*out));
	switch (n->kind)
	{
		case EXPR_NULL:
			out->kind = CEL_NULL;
			return 0;
		case EXPR_BOOL:
			*out = make_bool(n->bool_value);
			return 0;
		case EXPR_INT:
			out->kind = CEL_INT;
			out->v.i = n->int_value;
			return 0;
		case EXPR_UINT:
			out->kind = CEL_UINT;
			out->v.u = n->uint_value;
			return 0;
		case EXPR_DOUBLE:
			out->kind = CEL_DOUBLE;
			out->v.d = n->double_value;
			return 0;
		case EXPR_STRING:
			out->kind = CEL_STRING;
			out->v.s.ptr = n->str;
			out->v.s.len = n->str_len;
			return 0;
		case EXPR_IDENT:
			return eval_ident(cx, n, out);
		case EXPR_SELECT:
		case EXPR_INDEX:
			return eval_access(cx, n, out);
		case EXPR_HAS:
			return eval_has(cx, n, out);
		case EXPR_CALL:
			return eval_call(cx, n, out);
		case EXPR_LIST:
			return eval_list(cx, n, out);
		case EXPR_MAP:
			return eval_map(cx, n, out);
		case EXPR_MACRO:
			return eval_macro(cx, n, out);

		case EXPR_NOT:
			if (eval_bool_operand(cx, n->left, "operand of '!'", n->offset, &b) < 0)
				return -1;
			*out = make_bool(!b);
			return 0;

		case EXPR_NEG:
			if (eval_node(cx, n->left, &l) < 0)
				return -1;
			if (l.kind == CEL_INT)
			{
				if (l.v.i == INT64_MIN)
					return overflow_error(cx, n);
				out->kind = CEL_INT;
				out->v.i = -l.v.i;
				return 0;
			}
			if (l.kind == CEL_DOUBLE)
			{
				out->kind = CEL_DOUBLE;
				out->v.d = -l.v.d;
				return 0;
			}
			return eval_error(cx, n->offset,
							  "operand of unary '-' at offset %d must be an int or a double, not %s",
							  n->offset, cel_kind_name(l.kind));

		case EXPR_BINARY:
			if (eval_node(cx, n->left, &l) < 0 || eval_node(cx, n->right, &r) < 0)
				return -1;
			return eval_binary(cx, n, &l, &r, out);

		case EXPR_AND:
		case EXPR_OR:
			return eval_logical(cx, n, out);

		case EXPR_TERNARY:
			if (eval_bool_operand(cx, n->left, "condition of '?:'", n->offset, &b) < 0)
				return -1;
			return eval_node(cx, b ? n->right : n->third, out);
	}
	return eval_error(cx, n->offset, "cannot evaluate node at offset %d", n->offset);
}

/* Set up an evaluation context. */
static void
context_init(eval_context *cx, const wfe_expr *e, json_object *root,
			 const wfe_expr_limits *limits, wfe_expr_error *err)
{
	wfe_expr_limits lim;

	wfe_expr_limits_resolve(limits, &lim);
	cx->expr = e;
	cx->root = root;
	cx->steps = 0;
	cx->max_steps = lim.max_steps;
	cx->err = err;
	cx->fatal = 0;
	cx->nframes = 0;
	cx->chunks = NULL;
	cx->arena_bytes = 0;
	cx->inline_next = (char *) cx->inline_buf;
	cx->inline_left = sizeof(cx->inline_buf);
}

/* Free what an evaluation built. */
static void
context_free(eval_context *cx)
{
	while (cx->chunks != NULL)
	{
		eval_chunk *next = cx->chunks->next;

		free(cx->chunks);
		cx->chunks = next;
	}
}

/* Evaluate to a value inside cx (which then owns what it points at). */
static int
eval_top(eval_context *cx, const wfe_expr *e, cel_value *v)
{
	if (e == NULL || e->top == NULL)
		return eval_error(cx, 0, "no expression to evaluate");
	return eval_node(cx, e->top, v);
}

/* Evaluate over the root object; see expr.h. */
int
wfe_expr_eval(const wfe_expr *e, json_object *root,
			  const wfe_expr_limits *limits, json_object **out,
			  wfe_expr_error *err)
{
	eval_context cx;
	wfe_expr_error local;
	cel_value	v;
	int			rc = -1;

	*out = NULL;
	context_init(&cx, e, root, limits, err ? err : &local);
	if (eval_top(&cx, e, &v) == 0)
	{
		*out = cel_to_json(&v, 0);
		if (*out == NULL && v.kind != CEL_NULL)
			eval_error(&cx, 0, "out of memory, or a result nested too deeply for JSON");
		else
			rc = 0;
	}
	context_free(&cx);
	return rc;
}

/* Evaluate and require a bool: 1 true, 0 false, -1 error. */
int
wfe_expr_eval_bool(const wfe_expr *e, json_object *root,
				   const wfe_expr_limits *limits, wfe_expr_error *err)
{
	eval_context cx;
	wfe_expr_error local;
	cel_value	v;
	int			rc = -1;

	context_init(&cx, e, root, limits, err ? err : &local);
	if (eval_top(&cx, e, &v) == 0)
	{
		if (v.kind == CEL_BOOL)
			rc = v.v.b ? 1 : 0;
		else
			eval_error(&cx, e->top->start,
					   "when expression must evaluate to bool, not %s",
					   cel_kind_name(v.kind));
	}
	context_free(&cx);
	return rc;
}

/* Evaluate and format the value as CEL-like text (the conformance tests). */
int
wfe_expr_eval_format(const wfe_expr *e, json_object *root,
					 const wfe_expr_limits *limits, char *buf, size_t size,
					 const char **type_name, wfe_expr_error *err)
{
	eval_context cx;
	wfe_expr_error local;
	cel_value	v;
	int			rc = -1;

	context_init(&cx, e, root, limits, err ? err : &local);
	if (eval_top(&cx, e, &v) == 0)
	{
		if (type_name != NULL)
			*type_name = cel_kind_name(v.kind);
		if (cel_format(&v, buf, size, 0) >= 0)
			rc = 0;
		else
			eval_error(&cx, 0, "result does not fit the buffer");
	}
	context_free(&cx);
	return rc;
}

/* Resolve a reference path against the evaluation root; *out is borrowed. */
wfe_path_status
wfe_path_resolve(const wfe_path *p, json_object *root, json_object **out)
{
	json_object *cur;
	int			i;

	if (out != NULL)
		*out = NULL;
	if (p == NULL || p->root == NULL ||
		!json_object_is_type(root, json_type_object) ||
		!json_object_object_get_ex(root, wfe_expr_root_key(p->root), &cur))
		return WFE_PATH_MISSING;
	for (i = 0; i < p->nsegments; i++)
	{
		const wfe_path_segment *s = &p->segments[i];

		if (s->is_index)
		{
			if (!json_object_is_type(cur, json_type_array) || s->index < 0 ||
				(size_t) s->index >= json_object_array_length(cur))
				return WFE_PATH_MISSING;
			cur = json_object_array_get_idx(cur, (size_t) s->index);
		}
		else if (!json_object_is_type(cur, json_type_object) ||
				 !json_object_object_get_ex(cur, s->key, &cur))
			return WFE_PATH_MISSING;
	}
	if (cur == NULL)
		return WFE_PATH_NULL;
	if (out != NULL)
		*out = cur;
	return WFE_PATH_FOUND;
}
