/*
 * expr_eval.c — run-time evaluation of the CEL subset over JSON, and
 * resolution of `${...}` reference paths.
 *
 * Values are json-c objects; JSON null is the NULL pointer, as in json-c.
 * Every intermediate value is a counted reference that the evaluator owns
 * and puts, so error paths never leak.  Work is bounded by the step budget:
 * one step per node evaluated, plus one per JSON value compared by == or
 * `in`, per array element copied by +, and per 64 string bytes scanned or
 * copied — so large input documents cannot make an expression run long.
 *
 * Semantics that differ from strict CEL, by design: int and double mix in
 * arithmetic and comparisons (JSON does not say which one a number is), and
 * && / || short-circuit left to right instead of absorbing errors.
 */
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "expr_internal.h"

typedef struct eval_context
{
	const wfe_expr *expr;
	json_object *root;
	int			steps;
	int			max_steps;
	wfe_expr_error *err;
} eval_context;

typedef enum number_kind
{
	NUMBER_NONE,
	NUMBER_INT,
	NUMBER_DOUBLE
} number_kind;

/* Spend n evaluation steps; expr.eval once the budget is exhausted. */
static int
charge(eval_context *cx, long n, int offset)
{
	if (n > (long) (cx->max_steps - cx->steps))
	{
		cx->steps = cx->max_steps;
		wfe_expr_set_error(cx->err, "expr.eval", offset,
						   "evaluation step budget of %d exhausted at offset %d",
						   cx->max_steps, offset);
		return -1;
	}
	cx->steps += (int) n;
	return 0;
}

/* Name of a JSON value's type for messages. */
static const char *
type_label(json_object *v)
{
	switch (json_object_get_type(v))
	{
		case json_type_null:
			return "null";
		case json_type_boolean:
			return "bool";
		case json_type_int:
			return "int";
		case json_type_double:
			return "double";
		case json_type_string:
			return "string";
		case json_type_array:
			return "array";
		case json_type_object:
			return "object";
	}
	return "unknown";
}

/*
 * Classify a value as int, double or not a number.  json-c stores integers
 * above INT64_MAX as uint64 (and reports INT64_MAX for them as int64); those
 * are treated as doubles rather than silently clamped.
 */
static number_kind
number_of(json_object *v, int64_t *i, double *d)
{
	if (json_object_is_type(v, json_type_int))
	{
		int64_t		x = json_object_get_int64(v);

#if defined(JSON_C_VERSION_NUM) && JSON_C_VERSION_NUM >= ((0 << 16) | (14 << 8))
		if (x == INT64_MAX && json_object_get_uint64(v) > (uint64_t) INT64_MAX)
		{
			*d = (double) json_object_get_uint64(v);
			return NUMBER_DOUBLE;
		}
#endif
		*i = x;
		return NUMBER_INT;
	}
	if (json_object_is_type(v, json_type_double))
	{
		*d = json_object_get_double(v);
		return NUMBER_DOUBLE;
	}
	return NUMBER_NONE;
}

/*
 * Compare an int with a double exactly (converting the int to double could
 * round).  Returns -1, 0, 1, or 2 when unordered (NaN).
 */
static int
compare_int_double(int64_t i, double d)
{
	int64_t		whole;
	double		fraction;

	if (isnan(d))
		return 2;
	if (d >= 9223372036854775808.0)
		return -1;
	if (d < -9223372036854775808.0)
		return 1;
	whole = (int64_t) d;		/* in range: truncates toward zero */
	if (i < whole)
		return -1;
	if (i > whole)
		return 1;
	fraction = d - (double) whole;
	return fraction > 0 ? -1 : fraction < 0 ? 1 : 0;
}

/* Compare two numbers of any kind; -1, 0, 1, or 2 when unordered. */
static int
compare_numbers(number_kind lk, int64_t li, double ld,
				number_kind rk, int64_t ri, double rd)
{
	if (lk == NUMBER_INT && rk == NUMBER_INT)
		return li < ri ? -1 : li > ri ? 1 : 0;
	if (lk == NUMBER_INT)
		return compare_int_double(li, rd);
	if (rk == NUMBER_INT)
	{
		int			c = compare_int_double(ri, ld);

		return c == 2 ? 2 : -c;
	}
	if (isnan(ld) || isnan(rd))
		return 2;
	return ld < rd ? -1 : ld > rd ? 1 : 0;
}

/* Compare strings by bytes, which for UTF-8 is code point order. */
static int
compare_strings(json_object *a, json_object *b)
{
	size_t		la = (size_t) json_object_get_string_len(a);
	size_t		lb = (size_t) json_object_get_string_len(b);
	int			c = memcmp(json_object_get_string(a), json_object_get_string(b),
						   la < lb ? la : lb);

	if (c != 0)
		return c < 0 ? -1 : 1;
	return la < lb ? -1 : la > lb ? 1 : 0;
}

/* Look up an object member by a key that may come from data (may hold NUL). */
static int
object_member(json_object *obj, const char *key, size_t key_len,
			  json_object **value)
{
	*value = NULL;
	/* json-c keys are C strings: a key with an inner NUL matches nothing */
	if (memchr(key, '\0', key_len) != NULL)
		return 0;
	return json_object_object_get_ex(obj, key, value);
}

/*
 * Deep JSON equality; numbers compare numerically across int and double.
 * Sets *equal; -1 on budget exhaustion or nesting beyond the bound.
 */
static int
values_equal(eval_context *cx, json_object *a, json_object *b, int depth,
			 int offset, int *equal)
{
	int64_t		ai = 0,
				bi = 0;
	double		ad = 0,
				bd = 0;
	number_kind ak;
	number_kind bk;

	*equal = 0;
	if (charge(cx, 1, offset) < 0)
		return -1;
	if (depth > WFE_EXPR_MAX_JSON_DEPTH)
	{
		wfe_expr_set_error(cx->err, "expr.eval", offset,
						   "values compared at offset %d are nested more than %d levels deep",
						   offset, WFE_EXPR_MAX_JSON_DEPTH);
		return -1;
	}
	ak = number_of(a, &ai, &ad);
	bk = number_of(b, &bi, &bd);
	if (ak != NUMBER_NONE || bk != NUMBER_NONE)
	{
		*equal = (ak != NUMBER_NONE && bk != NUMBER_NONE &&
				  compare_numbers(ak, ai, ad, bk, bi, bd) == 0);
		return 0;
	}
	if (json_object_get_type(a) != json_object_get_type(b))
		return 0;
	switch (json_object_get_type(a))
	{
		case json_type_null:
			*equal = 1;
			return 0;
		case json_type_boolean:
			*equal = (json_object_get_boolean(a) == json_object_get_boolean(b));
			return 0;
		case json_type_string:
			*equal = (compare_strings(a, b) == 0);
			return 0;
		case json_type_array:
			{
				size_t		n = json_object_array_length(a);
				size_t		i;

				if (n != json_object_array_length(b))
					return 0;
				for (i = 0; i < n; i++)
				{
					if (values_equal(cx, json_object_array_get_idx(a, i),
									 json_object_array_get_idx(b, i),
									 depth + 1, offset, equal) < 0)
						return -1;
					if (!*equal)
						return 0;
				}
				*equal = 1;
				return 0;
			}
		case json_type_object:
			{
				struct json_object_iterator it;
				struct json_object_iterator end;

				if (json_object_object_length(a) != json_object_object_length(b))
					return 0;
				it = json_object_iter_begin(a);
				end = json_object_iter_end(a);
				while (!json_object_iter_equal(&it, &end))
				{
					json_object *other;

					if (!json_object_object_get_ex(b, json_object_iter_peek_name(&it),
												   &other))
					{
						*equal = 0;
						return 0;
					}
					if (values_equal(cx, json_object_iter_peek_value(&it), other,
									 depth + 1, offset, equal) < 0)
						return -1;
					if (!*equal)
						return 0;
					json_object_iter_next(&it);
				}
				*equal = 1;
				return 0;
			}
		default:
			return 0;
	}
}

/* Store a freshly built result, turning allocation failure into an error. */
static int
set_result(eval_context *cx, json_object *value, int offset, json_object **out)
{
	if (value == NULL)
	{
		wfe_expr_set_error(cx->err, "expr.eval", offset, "out of memory");
		return -1;
	}
	*out = value;
	return 0;
}

static int	eval_node(eval_context *cx, const expr_node *n, json_object **out);

/* Evaluate a root identifier: the matching member of the input object. */
static int
eval_root(eval_context *cx, const expr_node *n, json_object **out)
{
	const char *key = wfe_expr_root_key(n->str);
	json_object *value;

	if (!json_object_is_type(cx->root, json_type_object) ||
		!json_object_object_get_ex(cx->root, key, &value))
	{
		wfe_expr_set_error(cx->err, "expr.eval", n->offset,
						   "root '%s' at offset %d is not present in the evaluation input",
						   n->str, n->offset);
		return -1;
	}
	*out = json_object_get(value);
	return 0;
}

/* Integer value of an index: ints, and doubles that are whole numbers. */
static int
index_of(json_object *index, int64_t *out)
{
	double		d;

	switch (number_of(index, out, &d))
	{
		case NUMBER_INT:
			return 0;
		case NUMBER_DOUBLE:
			/* whole-number test without libm: the range check makes the cast defined */
			if (d >= -9223372036854775808.0 && d < 9223372036854775808.0 &&
				d == (double) (int64_t) d)
			{
				*out = (int64_t) d;
				return 0;
			}
			return -1;
		default:
			return -1;
	}
}

/*
 * Look up the field or index named by a SELECT or INDEX node in an already
 * evaluated container (and index value).  Sets *found and the borrowed
 * *value; -1 only for type errors, which has() does not excuse either.
 */
static int
lookup(eval_context *cx, const expr_node *n, json_object *container,
	   json_object *index, int *found, json_object **value)
{
	char		where[80];

	*found = 0;
	*value = NULL;
	if (n->kind == EXPR_SELECT)
	{
		if (!json_object_is_type(container, json_type_object))
		{
			wfe_expr_span_text(cx->expr, n, where, sizeof(where));
			wfe_expr_set_error(cx->err, "expr.eval", n->offset,
							   "cannot select field '%s' from %s in %s (offset %d)",
							   n->str, type_label(container), where, n->offset);
			return -1;
		}
		*found = object_member(container, n->str, n->str_len, value);
		return 0;
	}
	if (json_object_is_type(container, json_type_object))
	{
		if (!json_object_is_type(index, json_type_string))
		{
			wfe_expr_span_text(cx->expr, n, where, sizeof(where));
			wfe_expr_set_error(cx->err, "expr.eval", n->offset,
							   "object key must be a string, not %s, in %s (offset %d)",
							   type_label(index), where, n->offset);
			return -1;
		}
		*found = object_member(container, json_object_get_string(index),
							   (size_t) json_object_get_string_len(index), value);
		return 0;
	}
	if (json_object_is_type(container, json_type_array))
	{
		int64_t		i;

		if (index_of(index, &i) < 0)
		{
			wfe_expr_span_text(cx->expr, n, where, sizeof(where));
			wfe_expr_set_error(cx->err, "expr.eval", n->offset,
							   "array index must be an integer, not %s, in %s (offset %d)",
							   type_label(index), where, n->offset);
			return -1;
		}
		if (i >= 0 && (uint64_t) i < (uint64_t) json_object_array_length(container))
		{
			*found = 1;
			*value = json_object_array_get_idx(container, (size_t) i);
		}
		return 0;
	}
	wfe_expr_span_text(cx->expr, n, where, sizeof(where));
	wfe_expr_set_error(cx->err, "expr.eval", n->offset,
					   "cannot index %s in %s (offset %d)",
					   type_label(container), where, n->offset);
	return -1;
}

/*
 * Evaluate the container (and index) of a SELECT or INDEX node and look the
 * member up.  Shared by plain access and has().
 */
static int
eval_lookup(eval_context *cx, const expr_node *n, int *found,
			json_object **value, json_object **container, json_object **index)
{
	*container = NULL;
	*index = NULL;
	if (eval_node(cx, n->left, container) < 0)
		return -1;
	if (n->kind == EXPR_INDEX && eval_node(cx, n->right, index) < 0)
		return -1;
	return lookup(cx, n, *container, *index, found, value);
}

/* a.b, a["b"], a[0]: a missing member is an error (use has() to test). */
static int
eval_access(eval_context *cx, const expr_node *n, json_object **out)
{
	json_object *container;
	json_object *index;
	json_object *value;
	int			found;
	int			rc = -1;

	if (eval_lookup(cx, n, &found, &value, &container, &index) < 0)
		goto done;
	if (!found)
	{
		char		where[80];

		wfe_expr_span_text(cx->expr, n, where, sizeof(where));
		if (n->kind == EXPR_SELECT)
			wfe_expr_set_error(cx->err, "expr.eval", n->offset,
							   "no such field '%s' in %s (offset %d)",
							   n->str, where, n->offset);
		else if (json_object_is_type(index, json_type_string))
			wfe_expr_set_error(cx->err, "expr.eval", n->offset,
							   "no such key '%.60s' in %s (offset %d)",
							   json_object_get_string(index), where, n->offset);
		else
			wfe_expr_set_error(cx->err, "expr.eval", n->offset,
							   "index out of range (array length %lu) in %s (offset %d)",
							   (unsigned long) json_object_array_length(container),
							   where, n->offset);
		goto done;
	}
	*out = json_object_get(value);
	rc = 0;
done:
	json_object_put(container);
	json_object_put(index);
	return rc;
}

/* has(a.b) / has(a["b"]) / has(a[0]): whether the last member exists. */
static int
eval_has(eval_context *cx, const expr_node *n, json_object **out)
{
	json_object *container;
	json_object *index;
	json_object *value;
	int			found;
	int			rc = -1;

	if (charge(cx, 1, n->left->offset) < 0)
		return -1;
	if (eval_lookup(cx, n->left, &found, &value, &container, &index) == 0)
		rc = set_result(cx, json_object_new_boolean(found), n->offset, out);
	json_object_put(container);
	json_object_put(index);
	return rc;
}

/* size(x): code points of a string, elements of an array, members of an object. */
static int
eval_size(eval_context *cx, const expr_node *n, json_object *v, json_object **out)
{
	int64_t		size;

	if (json_object_is_type(v, json_type_string))
	{
		const unsigned char *s = (const unsigned char *) json_object_get_string(v);
		size_t		len = (size_t) json_object_get_string_len(v);
		size_t		i;

		if (charge(cx, (long) (len / 64), n->offset) < 0)
			return -1;
		size = 0;
		for (i = 0; i < len; i++)
			if ((s[i] & 0xC0) != 0x80)	/* count lead bytes, not continuations */
				size++;
	}
	else if (json_object_is_type(v, json_type_array))
		size = (int64_t) json_object_array_length(v);
	else if (json_object_is_type(v, json_type_object))
		size = json_object_object_length(v);
	else
	{
		wfe_expr_set_error(cx->err, "expr.eval", n->offset,
						   "size() at offset %d needs a string, array or object, not %s",
						   n->offset, type_label(v));
		return -1;
	}
	return set_result(cx, json_object_new_int64(size), n->offset, out);
}

/* Report an operator applied to operand types it does not take. */
static int
operand_error(eval_context *cx, const expr_node *n, json_object *l, json_object *r)
{
	wfe_expr_set_error(cx->err, "expr.eval", n->offset,
					   "operator '%s' at offset %d cannot be applied to %s and %s",
					   wfe_expr_op_name(n->op), n->offset, type_label(l),
					   type_label(r));
	return -1;
}

/* Report integer overflow at a node. */
static int
overflow_error(eval_context *cx, const expr_node *n)
{
	wfe_expr_set_error(cx->err, "expr.eval", n->offset,
					   "integer overflow in '%s' at offset %d",
					   n->kind == EXPR_NEG ? "-" : wfe_expr_op_name(n->op),
					   n->offset);
	return -1;
}

/* True if a * b does not fit in int64 (C99: no overflow builtins). */
static int
multiply_overflows(int64_t a, int64_t b)
{
	if (a == 0 || b == 0)
		return 0;
	if (a > 0)
		return b > 0 ? a > INT64_MAX / b : b < INT64_MIN / a;
	return b > 0 ? a < INT64_MIN / b : a < INT64_MAX / b;
}

/* + - * / % on numbers: int op int stays int (checked), else double. */
static int
eval_arithmetic(eval_context *cx, const expr_node *n, json_object *l,
				json_object *r, json_object **out)
{
	int64_t		li = 0,
				ri = 0;
	double		ld = 0,
				rd = 0,
				result;
	number_kind lk = number_of(l, &li, &ld);
	number_kind rk = number_of(r, &ri, &rd);

	if (lk == NUMBER_NONE || rk == NUMBER_NONE)
		return operand_error(cx, n, l, r);

	if (lk == NUMBER_INT && rk == NUMBER_INT)
	{
		int64_t		v;

		switch (n->op)
		{
			case EXPR_OP_ADD:
				if ((ri > 0 && li > INT64_MAX - ri) || (ri < 0 && li < INT64_MIN - ri))
					return overflow_error(cx, n);
				v = li + ri;
				break;
			case EXPR_OP_SUB:
				if ((ri < 0 && li > INT64_MAX + ri) || (ri > 0 && li < INT64_MIN + ri))
					return overflow_error(cx, n);
				v = li - ri;
				break;
			case EXPR_OP_MUL:
				if (multiply_overflows(li, ri))
					return overflow_error(cx, n);
				v = li * ri;
				break;
			case EXPR_OP_DIV:
			case EXPR_OP_MOD:
				if (ri == 0)
				{
					wfe_expr_set_error(cx->err, "expr.eval", n->offset,
									   "%s by zero at offset %d",
									   n->op == EXPR_OP_DIV ? "division" : "modulo",
									   n->offset);
					return -1;
				}
				/* INT64_MIN / -1 overflows; C leaves INT64_MIN % -1 undefined */
				if (li == INT64_MIN && ri == -1)
					return overflow_error(cx, n);
				v = n->op == EXPR_OP_DIV ? li / ri : li % ri;
				break;
			default:
				return operand_error(cx, n, l, r);
		}
		return set_result(cx, json_object_new_int64(v), n->offset, out);
	}

	if (lk == NUMBER_INT)
		ld = (double) li;
	if (rk == NUMBER_INT)
		rd = (double) ri;
	switch (n->op)
	{
		case EXPR_OP_ADD:
			result = ld + rd;
			break;
		case EXPR_OP_SUB:
			result = ld - rd;
			break;
		case EXPR_OP_MUL:
			result = ld * rd;
			break;
		case EXPR_OP_DIV:
			if (rd == 0)
			{
				wfe_expr_set_error(cx->err, "expr.eval", n->offset,
								   "division by zero at offset %d", n->offset);
				return -1;
			}
			result = ld / rd;
			break;
		case EXPR_OP_MOD:
			wfe_expr_set_error(cx->err, "expr.eval", n->offset,
							   "operator '%%' at offset %d needs integers, not %s and %s",
							   n->offset, type_label(l), type_label(r));
			return -1;
		default:
			return operand_error(cx, n, l, r);
	}
	/* JSON has no infinities or NaN */
	if (!isfinite(result))
	{
		wfe_expr_set_error(cx->err, "expr.eval", n->offset,
						   "'%s' at offset %d does not give a finite number",
						   wfe_expr_op_name(n->op), n->offset);
		return -1;
	}
	return set_result(cx, json_object_new_double(result), n->offset, out);
}

/* '+': numbers add, strings and arrays concatenate. */
static int
eval_add(eval_context *cx, const expr_node *n, json_object *l, json_object *r,
		 json_object **out)
{
	if (json_object_is_type(l, json_type_string) &&
		json_object_is_type(r, json_type_string))
	{
		size_t		la = (size_t) json_object_get_string_len(l);
		size_t		lb = (size_t) json_object_get_string_len(r);
		char	   *buf;
		json_object *s;

		if (la + lb > (size_t) INT_MAX / 2)
		{
			wfe_expr_set_error(cx->err, "expr.eval", n->offset,
							   "string too long at offset %d", n->offset);
			return -1;
		}
		if (charge(cx, (long) ((la + lb) / 64), n->offset) < 0)
			return -1;
		if ((buf = malloc(la + lb + 1)) == NULL)
			return set_result(cx, NULL, n->offset, out);
		memcpy(buf, json_object_get_string(l), la);
		memcpy(buf + la, json_object_get_string(r), lb);
		buf[la + lb] = '\0';
		s = json_object_new_string_len(buf, (int) (la + lb));
		free(buf);
		return set_result(cx, s, n->offset, out);
	}
	if (json_object_is_type(l, json_type_array) &&
		json_object_is_type(r, json_type_array))
	{
		size_t		la = json_object_array_length(l);
		size_t		lb = json_object_array_length(r);
		size_t		i;
		json_object *a;

		if (charge(cx, (long) (la + lb), n->offset) < 0)
			return -1;
		if ((a = json_object_new_array()) == NULL)
			return set_result(cx, NULL, n->offset, out);
		for (i = 0; i < la + lb; i++)
		{
			json_object *elem = i < la ? json_object_array_get_idx(l, i) :
				json_object_array_get_idx(r, i - la);

			/* elements are shared with the operands, hence the extra ref */
			if (json_object_array_add(a, json_object_get(elem)) != 0)
			{
				json_object_put(elem);
				json_object_put(a);
				return set_result(cx, NULL, n->offset, out);
			}
		}
		*out = a;
		return 0;
	}
	return eval_arithmetic(cx, n, l, r, out);
}

/* x in array (deep equality) or key in object. */
static int
eval_in(eval_context *cx, const expr_node *n, json_object *l, json_object *r,
		int *result)
{
	*result = 0;
	if (json_object_is_type(r, json_type_array))
	{
		size_t		len = json_object_array_length(r);
		size_t		i;

		for (i = 0; i < len && !*result; i++)
			if (values_equal(cx, l, json_object_array_get_idx(r, i), 0,
							 n->offset, result) < 0)
				return -1;
		return 0;
	}
	if (json_object_is_type(r, json_type_object))
	{
		json_object *ignored;

		if (!json_object_is_type(l, json_type_string))
		{
			wfe_expr_set_error(cx->err, "expr.eval", n->offset,
							   "left operand of 'in' at offset %d must be a string to test object keys, not %s",
							   n->offset, type_label(l));
			return -1;
		}
		*result = object_member(r, json_object_get_string(l),
								(size_t) json_object_get_string_len(l), &ignored);
		return 0;
	}
	wfe_expr_set_error(cx->err, "expr.eval", n->offset,
					   "right operand of 'in' at offset %d must be an array or object, not %s",
					   n->offset, type_label(r));
	return -1;
}

/* Apply a binary operator to two evaluated operands. */
static int
eval_binary(eval_context *cx, const expr_node *n, json_object *l,
			json_object *r, json_object **out)
{
	int			b;

	switch (n->op)
	{
		case EXPR_OP_EQ:
		case EXPR_OP_NE:
			if (values_equal(cx, l, r, 0, n->offset, &b) < 0)
				return -1;
			return set_result(cx, json_object_new_boolean(n->op == EXPR_OP_EQ ? b : !b),
							  n->offset, out);

		case EXPR_OP_IN:
			if (eval_in(cx, n, l, r, &b) < 0)
				return -1;
			return set_result(cx, json_object_new_boolean(b), n->offset, out);

		case EXPR_OP_LT:
		case EXPR_OP_LE:
		case EXPR_OP_GT:
		case EXPR_OP_GE:
			{
				int64_t		li = 0,
							ri = 0;
				double		ld = 0,
							rd = 0;
				number_kind lk = number_of(l, &li, &ld);
				number_kind rk = number_of(r, &ri, &rd);
				int			c;

				if (lk != NUMBER_NONE && rk != NUMBER_NONE)
					c = compare_numbers(lk, li, ld, rk, ri, rd);
				else if (json_object_is_type(l, json_type_string) &&
						 json_object_is_type(r, json_type_string))
				{
					size_t		len = (size_t) json_object_get_string_len(l);

					if (charge(cx, (long) (len / 64), n->offset) < 0)
						return -1;
					c = compare_strings(l, r);
				}
				else
					return operand_error(cx, n, l, r);

				/* unordered (NaN) compares false under every operator */
				if (c == 2)
					b = 0;
				else if (n->op == EXPR_OP_LT)
					b = c < 0;
				else if (n->op == EXPR_OP_LE)
					b = c <= 0;
				else if (n->op == EXPR_OP_GT)
					b = c > 0;
				else
					b = c >= 0;
				return set_result(cx, json_object_new_boolean(b), n->offset, out);
			}

		case EXPR_OP_ADD:
			return eval_add(cx, n, l, r, out);

		default:
			return eval_arithmetic(cx, n, l, r, out);
	}
}

/* Evaluate a node that must give a bool; *b receives it. */
static int
eval_bool_operand(eval_context *cx, const expr_node *n, const char *what,
				  int offset, int *b)
{
	json_object *v;

	if (eval_node(cx, n, &v) < 0)
		return -1;
	if (!json_object_is_type(v, json_type_boolean))
	{
		wfe_expr_set_error(cx->err, "expr.eval", offset,
						   "%s at offset %d must be bool, not %s",
						   what, offset, type_label(v));
		json_object_put(v);
		return -1;
	}
	*b = json_object_get_boolean(v);
	json_object_put(v);
	return 0;
}

/* Evaluate one node; *out is a new reference (NULL for JSON null). */
static int
eval_node(eval_context *cx, const expr_node *n, json_object **out)
{
	json_object *l = NULL;
	json_object *r = NULL;
	int			b;
	int			rc = -1;

	*out = NULL;
	if (charge(cx, 1, n->offset) < 0)
		return -1;
	switch (n->kind)
	{
		case EXPR_NULL:
			return 0;
		case EXPR_BOOL:
		case EXPR_INT:
		case EXPR_DOUBLE:
		case EXPR_STRING:
			*out = json_object_get(n->literal);
			return 0;
		case EXPR_ROOT:
			return eval_root(cx, n, out);
		case EXPR_SELECT:
		case EXPR_INDEX:
			return eval_access(cx, n, out);
		case EXPR_HAS:
			return eval_has(cx, n, out);

		case EXPR_SIZE:
			if (eval_node(cx, n->left, &l) == 0)
				rc = eval_size(cx, n, l, out);
			break;

		case EXPR_NOT:
			if (eval_bool_operand(cx, n->left, "operand of '!'", n->offset, &b) < 0)
				return -1;
			return set_result(cx, json_object_new_boolean(!b), n->offset, out);

		case EXPR_NEG:
			{
				int64_t		i = 0;
				double		d = 0;

				if (eval_node(cx, n->left, &l) < 0)
					return -1;
				switch (number_of(l, &i, &d))
				{
					case NUMBER_INT:
						if (i == INT64_MIN)
							rc = overflow_error(cx, n);
						else
							rc = set_result(cx, json_object_new_int64(-i), n->offset, out);
						break;
					case NUMBER_DOUBLE:
						rc = set_result(cx, json_object_new_double(-d), n->offset, out);
						break;
					default:
						wfe_expr_set_error(cx->err, "expr.eval", n->offset,
										   "operand of unary '-' at offset %d must be a number, not %s",
										   n->offset, type_label(l));
						break;
				}
				break;
			}

		case EXPR_BINARY:
			if (eval_node(cx, n->left, &l) == 0 &&
				eval_node(cx, n->right, &r) == 0)
				rc = eval_binary(cx, n, l, r, out);
			break;

		case EXPR_AND:
		case EXPR_OR:
			{
				int			is_and = (n->kind == EXPR_AND);

				if (eval_bool_operand(cx, n->left, is_and ?
									  "left operand of '&&'" : "left operand of '||'",
									  n->offset, &b) < 0)
					return -1;
				/* short circuit: false && _ and true || _ skip the right side */
				if (b == is_and &&
					eval_bool_operand(cx, n->right, is_and ?
									  "right operand of '&&'" : "right operand of '||'",
									  n->offset, &b) < 0)
					return -1;
				return set_result(cx, json_object_new_boolean(b), n->offset, out);
			}

		case EXPR_TERNARY:
			if (eval_bool_operand(cx, n->left, "condition of '?:'", n->offset, &b) < 0)
				return -1;
			return eval_node(cx, b ? n->right : n->third, out);
	}
	json_object_put(l);
	json_object_put(r);
	return rc;
}

/* Evaluate over the root object; see expr.h. */
int
wfe_expr_eval(const wfe_expr *e, json_object *root,
			  const wfe_expr_limits *limits, json_object **out,
			  wfe_expr_error *err)
{
	wfe_expr_limits lim;
	eval_context cx;

	*out = NULL;
	if (e == NULL || e->top == NULL)
	{
		wfe_expr_set_error(err, "expr.eval", 0, "no expression to evaluate");
		return -1;
	}
	wfe_expr_limits_resolve(limits, &lim);
	cx.expr = e;
	cx.root = root;
	cx.steps = 0;
	cx.max_steps = lim.max_steps;
	cx.err = err;
	if (eval_node(&cx, e->top, out) < 0)
	{
		/* eval_node leaves *out NULL on failure */
		return -1;
	}
	return 0;
}

/* Evaluate and require a bool: 1 true, 0 false, -1 error. */
int
wfe_expr_eval_bool(const wfe_expr *e, json_object *root,
				   const wfe_expr_limits *limits, wfe_expr_error *err)
{
	json_object *v;
	int			b;

	if (wfe_expr_eval(e, root, limits, &v, err) < 0)
		return -1;
	if (!json_object_is_type(v, json_type_boolean))
	{
		wfe_expr_set_error(err, "expr.eval", e->top->start,
						   "when expression must evaluate to bool, not %s",
						   type_label(v));
		json_object_put(v);
		return -1;
	}
	b = json_object_get_boolean(v);
	json_object_put(v);
	return b ? 1 : 0;
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
