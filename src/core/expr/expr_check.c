/*
 * expr_check.c — the compile-time type checker of CEL expressions.
 *
 * CEL is gradually typed (langdef "Gradual Type Checking"): every data root
 * is map(string, dyn), so most of a `when` is `dyn` and checked at run time;
 * what the checker proves is what no data can fix — an operator or function
 * given operands of kinds it has no overload for (`"a" - 1`, `!3`,
 * `size(true)`, `1 + 1u`, `[1].all(x, x)`), an unknown root, a `when` that is
 * never bool.  Types here are shallow (a kind, and for lists and maps the
 * element and key kinds), which is what literals and macros produce.
 *
 * Also reports every stage reference (stages["x"] / stages.x) to a callback
 * so the compiler can check lineage.
 */
#include <string.h>

#include "expr_internal.h"

typedef struct check_scope
{
	const expr_node *binder;
	cel_type	type;
} check_scope;

typedef struct check_context
{
	const wfe_expr *expr;
	wfe_expr_form form;
	wfe_stage_ref_cb on_stage_ref;
	void	   *arg;
	wfe_expr_error *err;
	check_scope scopes[WFE_EXPR_MAX_NESTING];
	int			nscopes;
} check_context;

/* A type of one kind with dyn parameters. */
static cel_type
T(cel_kind k)
{
	cel_type	t;

	t.kind = k;
	t.elem = CEL_DYN;
	t.key = CEL_DYN;
	return t;
}

/* True if the kind is known. */
static int
known(cel_kind k)
{
	return k != CEL_DYN;
}

/* The join of two kinds: the kind if equal, else dyn. */
static cel_kind
join(cel_kind a, cel_kind b)
{
	return a == b ? a : CEL_DYN;
}

/* Check a root identifier is legal in the form; -1 with expr.unknown_root. */
static int
check_root(check_context *cx, const expr_node *n)
{
	const char *name = n->str;
	const char *expected = cx->form == WFE_FORM_STAGES ?
		"context, payload, stages or run" :
		"context, payload, outputs or run";

	if (strcmp(name, "context") == 0 || strcmp(name, "payload") == 0 ||
		strcmp(name, "run") == 0)
		return 0;
	if (cx->form == WFE_FORM_STAGES && strcmp(name, "stages") == 0)
		return 0;
	if (cx->form == WFE_FORM_TASKS && strcmp(name, "outputs") == 0)
		return 0;
	if (strcmp(name, "stages") == 0 || strcmp(name, "outputs") == 0)
		wfe_expr_set_error(cx->err, "expr.unknown_root", n->offset,
						   "root '%s' is not available in the %s form at offset %d; expected %s",
						   name,
						   cx->form == WFE_FORM_STAGES ? "stages" : "tasks",
						   n->offset, expected);
	else
		wfe_expr_set_error(cx->err, "expr.unknown_root", n->offset,
						   "unknown root '%s' at offset %d; expected %s",
						   name, n->offset, expected);
	return -1;
}

/* True if n is the `stages` root identifier. */
static int
is_stages_root(const expr_node *n)
{
	return n->kind == EXPR_IDENT && n->ident == IDENT_ROOT &&
		strcmp(n->str, "stages") == 0;
}

static int	check_node(check_context *cx, const expr_node *n, cel_type *type);

/*
 * Check a field selection or index (also inside has()).  `stages` must be
 * followed by a literal stage name, which is reported to the callback so
 * the compiler can check lineage; a dynamic stages[...] would let an
 * expression read a stage the compiler never saw.
 */
static int
check_access(check_context *cx, const expr_node *n, cel_type *type)
{
	cel_type	operand;

	*type = T(CEL_DYN);
	if (is_stages_root(n->left))
	{
		if (check_root(cx, n->left) < 0)
			return -1;
		if (n->kind == EXPR_SELECT)
		{
			if (cx->on_stage_ref)
				cx->on_stage_ref(cx->arg, n->str, n->offset);
			return 0;
		}
		if (n->right->kind != EXPR_STRING)
		{
			wfe_expr_set_error(cx->err, "expr.type", n->right->offset,
							   "stage reference at offset %d must be a string literal, e.g. stages[\"name\"]",
							   n->right->offset);
			return -1;
		}
		if (cx->on_stage_ref)
			cx->on_stage_ref(cx->arg, n->right->str, n->right->offset);
		return 0;
	}

	if (check_node(cx, n->left, &operand) < 0)
		return -1;
	if (n->kind == EXPR_SELECT)
	{
		if (operand.kind == CEL_MAP)
		{
			if (known(operand.key) && operand.key != CEL_STRING)
			{
				wfe_expr_set_error(cx->err, "expr.type", n->offset,
								   "cannot select field '%s' at offset %d from a map with %s keys",
								   n->str, n->offset, cel_kind_name(operand.key));
				return -1;
			}
			*type = T(operand.elem);
			return 0;
		}
		if (known(operand.kind))
		{
			wfe_expr_set_error(cx->err, "expr.type", n->offset,
							   "cannot select field '%s' from a %s at offset %d",
							   n->str, cel_kind_name(operand.kind), n->offset);
			return -1;
		}
		return 0;
	}
	else
	{
		cel_type	index;

		if (check_node(cx, n->right, &index) < 0)
			return -1;
		if (operand.kind == CEL_LIST)
		{
			if (known(index.kind) && !cel_is_number(index.kind))
			{
				wfe_expr_set_error(cx->err, "expr.type", n->right->offset,
								   "list index at offset %d must be an int, not %s",
								   n->right->offset, cel_kind_name(index.kind));
				return -1;
			}
			*type = T(operand.elem);
			return 0;
		}
		if (operand.kind == CEL_MAP || !known(operand.kind))
		{
			if (known(index.kind) && index.kind != CEL_STRING &&
				index.kind != CEL_BOOL && !cel_is_number(index.kind))
			{
				wfe_expr_set_error(cx->err, "expr.type", n->right->offset,
								   "index at offset %d must be a string or an integer, not %s",
								   n->right->offset, cel_kind_name(index.kind));
				return -1;
			}
			if (operand.kind == CEL_MAP)
				*type = T(operand.elem);
			return 0;
		}
		wfe_expr_set_error(cx->err, "expr.type", n->offset,
						   "cannot index a %s at offset %d",
						   cel_kind_name(operand.kind), n->offset);
		return -1;
	}
}

/* Require a known type to be bool for a logical operand. */
static int
check_bool_operand(check_context *cx, int offset, cel_type t, const char *what)
{
	if (!known(t.kind) || t.kind == CEL_BOOL)
		return 0;
	wfe_expr_set_error(cx->err, "expr.type", offset,
					   "%s at offset %d must be bool, not %s",
					   what, offset, cel_kind_name(t.kind));
	return -1;
}

/* True if values of kind k can be ordered with < (against their own kind). */
static int
orderable(cel_kind k)
{
	return cel_is_number(k) || k == CEL_STRING || k == CEL_BOOL ||
		k == CEL_TIMESTAMP || k == CEL_DURATION;
}

/* Report operands of a binary operator that no overload takes. */
static int
no_overload(check_context *cx, const expr_node *n, cel_kind l, cel_kind r)
{
	wfe_expr_set_error(cx->err, "expr.type", n->offset,
					   "operator '%s' at offset %d cannot be applied to %s and %s",
					   wfe_expr_op_name(n->op), n->offset, cel_kind_name(l),
					   cel_kind_name(r));
	return -1;
}

/* Arithmetic: the result type given known operand kinds, or an error. */
static int
check_arithmetic(check_context *cx, const expr_node *n, cel_type l,
				 cel_type r, cel_type *type)
{
	cel_kind	a = l.kind;
	cel_kind	b = r.kind;

	*type = T(CEL_DYN);
	if (n->op == EXPR_OP_MOD && (a == CEL_DOUBLE || b == CEL_DOUBLE))
	{
		wfe_expr_set_error(cx->err, "expr.type", n->offset,
						   "operator '%%' at offset %d needs integers, not %s and %s",
						   n->offset, cel_kind_name(a), cel_kind_name(b));
		return -1;
	}
	if (known(a) && known(b))
	{
		if (a == b && (a == CEL_INT || a == CEL_UINT ||
					   (a == CEL_DOUBLE && n->op != EXPR_OP_MOD) ||
					   (n->op == EXPR_OP_ADD && (a == CEL_STRING || a == CEL_LIST))))
		{
			*type = a == CEL_LIST ? l : T(a);
			if (a == CEL_LIST)
				type->elem = join(l.elem, r.elem);
			return 0;
		}
		if (n->op == EXPR_OP_ADD && a == CEL_DURATION && b == CEL_DURATION)
			return *type = T(CEL_DURATION), 0;
		if (n->op == EXPR_OP_ADD &&
			((a == CEL_TIMESTAMP && b == CEL_DURATION) ||
			 (a == CEL_DURATION && b == CEL_TIMESTAMP)))
			return *type = T(CEL_TIMESTAMP), 0;
		if (n->op == EXPR_OP_SUB && a == CEL_TIMESTAMP)
		{
			if (b == CEL_TIMESTAMP)
				return *type = T(CEL_DURATION), 0;
			if (b == CEL_DURATION)
				return *type = T(CEL_TIMESTAMP), 0;
		}
		if (n->op == EXPR_OP_SUB && a == CEL_DURATION && b == CEL_DURATION)
			return *type = T(CEL_DURATION), 0;
		return no_overload(cx, n, a, b);
	}
	/* one side known: it must be a kind this operator has an overload for */
	{
		cel_kind	k = known(a) ? a : b;
		int			ok;

		if (!known(k))
			return 0;
		switch (n->op)
		{
			case EXPR_OP_ADD:
				ok = k == CEL_INT || k == CEL_UINT || k == CEL_DOUBLE ||
					k == CEL_STRING || k == CEL_LIST || k == CEL_TIMESTAMP ||
					k == CEL_DURATION;
				break;
			case EXPR_OP_SUB:
				ok = k == CEL_INT || k == CEL_UINT || k == CEL_DOUBLE ||
					k == CEL_TIMESTAMP || k == CEL_DURATION;
				break;
			case EXPR_OP_MOD:
				ok = k == CEL_INT || k == CEL_UINT;
				break;
			default:
				ok = cel_is_number(k);
				break;
		}
		if (!ok)
			return no_overload(cx, n, a, b);
		if (k == CEL_INT || k == CEL_UINT || k == CEL_DOUBLE || k == CEL_STRING)
			*type = T(k);
		return 0;
	}
}

/* Check a binary operator node given its operands' types. */
static int
check_binary(check_context *cx, const expr_node *n, cel_type l, cel_type r,
			 cel_type *type)
{
	*type = T(CEL_BOOL);
	switch (n->op)
	{
		case EXPR_OP_EQ:
		case EXPR_OP_NE:
			/* equality is defined for all types: different kinds are unequal */
			return 0;

		case EXPR_OP_IN:
			if (known(r.kind) && r.kind != CEL_LIST && r.kind != CEL_MAP)
			{
				wfe_expr_set_error(cx->err, "expr.type", n->offset,
								   "right operand of 'in' at offset %d must be a list or map, not %s",
								   n->offset, cel_kind_name(r.kind));
				return -1;
			}
			return 0;

		case EXPR_OP_LT:
		case EXPR_OP_LE:
		case EXPR_OP_GT:
		case EXPR_OP_GE:
			if ((known(l.kind) && !orderable(l.kind)) ||
				(known(r.kind) && !orderable(r.kind)) ||
				(known(l.kind) && known(r.kind) && l.kind != r.kind &&
				 !(cel_is_number(l.kind) && cel_is_number(r.kind))))
				return no_overload(cx, n, l.kind, r.kind);
			return 0;

		default:
			return check_arithmetic(cx, n, l, r, type);
	}
}

/* Require a known argument kind to be one of a list of kinds. */
static int
check_arg_kind(check_context *cx, const expr_node *call, const expr_node *arg,
			   cel_kind k, const cel_kind *allowed, int nallowed, const char *what)
{
	int			i;

	if (!known(k))
		return 0;
	for (i = 0; i < nallowed; i++)
		if (allowed[i] == k)
			return 0;
	wfe_expr_set_error(cx->err, "expr.type", arg ? arg->start : call->offset,
					   "%s() at offset %d has no overload for %s %s",
					   wfe_expr_fn_name(call->fn), call->offset, what,
					   cel_kind_name(k));
	return -1;
}

#define KINDS(...) (const cel_kind[]){__VA_ARGS__}, (int) (sizeof((const cel_kind[]){__VA_ARGS__}) / sizeof(cel_kind))

/* Check a function call; sets its result type. */
static int
check_call(check_context *cx, const expr_node *n, cel_type *type)
{
	cel_type	target = T(CEL_DYN);
	cel_type	a[2] = {T(CEL_DYN), T(CEL_DYN)};
	const expr_node *first;
	cel_kind	k0;
	int			i;

	if (n->left != NULL && check_node(cx, n->left, &target) < 0)
		return -1;
	for (i = 0; i < n->nargs; i++)
	{
		cel_type	t;

		if (check_node(cx, n->args[i], &t) < 0)
			return -1;
		if (i < 2)
			a[i] = t;
	}
	/* the value the function is about: the receiver, or the first argument */
	first = n->left != NULL ? n->left : n->args[0];
	k0 = n->left != NULL ? target.kind : a[0].kind;

	switch (n->fn)
	{
		case FN_SIZE:
			*type = T(CEL_INT);
			return check_arg_kind(cx, n, first, k0, KINDS(CEL_STRING, CEL_LIST, CEL_MAP), "argument");

		case FN_CONTAINS:
		case FN_STARTS_WITH:
		case FN_ENDS_WITH:
		case FN_MATCHES:
			{
				const expr_node *second = n->left != NULL ? n->args[0] : n->args[1];
				cel_kind	k1 = n->left != NULL ? a[0].kind : a[1].kind;

				*type = T(CEL_BOOL);
				if (check_arg_kind(cx, n, first, k0, KINDS(CEL_STRING), n->left ? "receiver" : "argument") < 0 ||
					check_arg_kind(cx, n, second, k1, KINDS(CEL_STRING), "argument") < 0)
					return -1;
				return 0;
			}

		case FN_INT:
			*type = T(CEL_INT);
			return check_arg_kind(cx, n, first, k0, KINDS(CEL_INT, CEL_UINT, CEL_DOUBLE, CEL_STRING, CEL_TIMESTAMP), "argument");
		case FN_UINT:
			*type = T(CEL_UINT);
			return check_arg_kind(cx, n, first, k0, KINDS(CEL_INT, CEL_UINT, CEL_DOUBLE, CEL_STRING), "argument");
		case FN_DOUBLE:
			*type = T(CEL_DOUBLE);
			return check_arg_kind(cx, n, first, k0, KINDS(CEL_INT, CEL_UINT, CEL_DOUBLE, CEL_STRING), "argument");
		case FN_STRING:
			*type = T(CEL_STRING);
			return check_arg_kind(cx, n, first, k0, KINDS(CEL_INT, CEL_UINT, CEL_DOUBLE, CEL_STRING, CEL_BOOL, CEL_TIMESTAMP, CEL_DURATION), "argument");
		case FN_BOOL:
			*type = T(CEL_BOOL);
			return check_arg_kind(cx, n, first, k0, KINDS(CEL_BOOL, CEL_STRING), "argument");
		case FN_DYN:
			*type = T(CEL_DYN);
			return 0;
		case FN_TYPE:
			*type = T(CEL_TYPE);
			return 0;
		case FN_TIMESTAMP:
			*type = T(CEL_TIMESTAMP);
			return check_arg_kind(cx, n, first, k0, KINDS(CEL_STRING, CEL_TIMESTAMP, CEL_INT), "argument");
		case FN_DURATION:
			*type = T(CEL_DURATION);
			return check_arg_kind(cx, n, first, k0, KINDS(CEL_STRING, CEL_DURATION), "argument");

		case FN_GET_HOURS:
		case FN_GET_MINUTES:
		case FN_GET_SECONDS:
		case FN_GET_MILLISECONDS:
			*type = T(CEL_INT);
			if (n->nargs == 0)
				return check_arg_kind(cx, n, first, k0, KINDS(CEL_TIMESTAMP, CEL_DURATION), "receiver");
			/* FALLTHROUGH */
		default:
			*type = T(CEL_INT);
			if (check_arg_kind(cx, n, first, k0, KINDS(CEL_TIMESTAMP), "receiver") < 0)
				return -1;
			if (n->nargs == 1)
				return check_arg_kind(cx, n, n->args[0], a[0].kind, KINDS(CEL_STRING), "time zone");
			return 0;
	}
}

/* Check a macro: its range, then its body with the variable in scope. */
static int
check_macro(check_context *cx, const expr_node *n, cel_type *type)
{
	const char *name = wfe_expr_macro_name(n->macro);
	cel_type	range;
	cel_type	var = T(CEL_DYN);
	cel_type	body;
	cel_type	transform;

	if (check_node(cx, n->left, &range) < 0)
		return -1;
	if (range.kind == CEL_LIST)
		var = T(range.elem);
	else if (range.kind == CEL_MAP)
		var = T(range.key);
	else if (known(range.kind))
	{
		wfe_expr_set_error(cx->err, "expr.type", n->offset,
						   "%s() at offset %d needs a list or a map, not %s",
						   name, n->offset, cel_kind_name(range.kind));
		return -1;
	}
	if (cx->nscopes >= WFE_EXPR_MAX_NESTING)
	{
		wfe_expr_set_error(cx->err, "expr.too_large", n->offset,
						   "macros nested too deeply at offset %d", n->offset);
		return -1;
	}
	cx->scopes[cx->nscopes].binder = n;
	cx->scopes[cx->nscopes].type = var;
	cx->nscopes++;
	if (check_node(cx, n->right, &body) < 0)
		return -1;
	if ((n->macro != MACRO_MAP || n->third != NULL) &&
		check_bool_operand(cx, n->right->start, body,
						   n->macro == MACRO_MAP ? "the filter of map()" : "the predicate of a macro") < 0)
		return -1;
	transform = body;
	if (n->third != NULL && check_node(cx, n->third, &transform) < 0)
		return -1;
	cx->nscopes--;

	switch (n->macro)
	{
		case MACRO_MAP:
			*type = T(CEL_LIST);
			type->elem = transform.kind;
			break;
		case MACRO_FILTER:
			*type = T(CEL_LIST);
			type->elem = var.kind;
			break;
		default:
			*type = T(CEL_BOOL);
			break;
	}
	return 0;
}

/* Check a list or map literal; element kinds join to the parameter. */
static int
check_aggregate(check_context *cx, const expr_node *n, cel_type *type)
{
	int			i;
	int			is_map = n->kind == EXPR_MAP;
	cel_kind	elem = CEL_DYN;
	cel_kind	key = CEL_DYN;

	for (i = 0; i < n->nargs; i++)
	{
		cel_type	t;
		int			is_key = is_map && i % 2 == 0;
		cel_kind   *into = is_key ? &key : &elem;
		int			first = is_map ? i < 2 : i == 0;

		if (check_node(cx, n->args[i], &t) < 0)
			return -1;
		if (is_key && known(t.kind) && t.kind != CEL_STRING && t.kind != CEL_INT &&
			t.kind != CEL_UINT && t.kind != CEL_BOOL)
		{
			wfe_expr_set_error(cx->err, "expr.type", n->args[i]->start,
							   "map key at offset %d must be int, uint, bool or string, not %s",
							   n->args[i]->start, cel_kind_name(t.kind));
			return -1;
		}
		*into = first ? t.kind : join(*into, t.kind);
	}
	*type = T(is_map ? CEL_MAP : CEL_LIST);
	type->elem = elem;
	type->key = key;
	return 0;
}

/* Check one node (children first, left to right); sets its type. */
static int
check_node(check_context *cx, const expr_node *n, cel_type *type)
{
	cel_type	l = T(CEL_DYN);
	cel_type	r = T(CEL_DYN);
	cel_type	t = T(CEL_DYN);
	int			i;

	*type = T(CEL_DYN);
	switch (n->kind)
	{
		case EXPR_NULL:
			*type = T(CEL_NULL);
			return 0;
		case EXPR_BOOL:
			*type = T(CEL_BOOL);
			return 0;
		case EXPR_INT:
			*type = T(CEL_INT);
			return 0;
		case EXPR_UINT:
			*type = T(CEL_UINT);
			return 0;
		case EXPR_DOUBLE:
			*type = T(CEL_DOUBLE);
			return 0;
		case EXPR_STRING:
			*type = T(CEL_STRING);
			return 0;

		case EXPR_IDENT:
			if (n->ident == IDENT_TYPE)
			{
				*type = T(CEL_TYPE);
				return 0;
			}
			if (n->ident == IDENT_VAR)
			{
				for (i = cx->nscopes - 1; i >= 0; i--)
					if (cx->scopes[i].binder == n->binder)
					{
						*type = cx->scopes[i].type;
						return 0;
					}
				/* a variable used in its own macro's range: not in scope */
				wfe_expr_set_error(cx->err, "expr.unknown_root", n->offset,
								   "variable '%s' at offset %d is used outside its macro",
								   n->str, n->offset);
				return -1;
			}
			if (check_root(cx, n) < 0)
				return -1;
			if (is_stages_root(n))
			{
				wfe_expr_set_error(cx->err, "expr.type", n->offset,
								   "'stages' at offset %d must be followed by a stage name, e.g. stages[\"name\"].result",
								   n->offset);
				return -1;
			}
			*type = T(CEL_MAP);
			type->key = CEL_STRING;
			return 0;

		case EXPR_SELECT:
		case EXPR_INDEX:
			return check_access(cx, n, type);

		case EXPR_HAS:
			if (check_access(cx, n->left, &l) < 0)
				return -1;
			*type = T(CEL_BOOL);
			return 0;

		case EXPR_CALL:
			return check_call(cx, n, type);

		case EXPR_LIST:
		case EXPR_MAP:
			return check_aggregate(cx, n, type);

		case EXPR_MACRO:
			return check_macro(cx, n, type);

		case EXPR_NOT:
			if (check_node(cx, n->left, &l) < 0 ||
				check_bool_operand(cx, n->offset, l, "operand of '!'") < 0)
				return -1;
			*type = T(CEL_BOOL);
			return 0;

		case EXPR_NEG:
			if (check_node(cx, n->left, &l) < 0)
				return -1;
			if (known(l.kind) && l.kind != CEL_INT && l.kind != CEL_DOUBLE)
			{
				wfe_expr_set_error(cx->err, "expr.type", n->offset,
								   "operand of unary '-' at offset %d must be an int or a double, not %s",
								   n->offset, cel_kind_name(l.kind));
				return -1;
			}
			*type = T(l.kind);
			return 0;

		case EXPR_BINARY:
			if (check_node(cx, n->left, &l) < 0 ||
				check_node(cx, n->right, &r) < 0)
				return -1;
			return check_binary(cx, n, l, r, type);

		case EXPR_AND:
		case EXPR_OR:
			if (check_node(cx, n->left, &l) < 0 ||
				check_bool_operand(cx, n->offset, l, n->kind == EXPR_AND ?
								   "left operand of '&&'" :
								   "left operand of '||'") < 0 ||
				check_node(cx, n->right, &r) < 0 ||
				check_bool_operand(cx, n->offset, r, n->kind == EXPR_AND ?
								   "right operand of '&&'" :
								   "right operand of '||'") < 0)
				return -1;
			*type = T(CEL_BOOL);
			return 0;

		case EXPR_TERNARY:
			if (check_node(cx, n->left, &l) < 0 ||
				check_bool_operand(cx, n->offset, l, "condition of '?:'") < 0 ||
				check_node(cx, n->right, &r) < 0 ||
				check_node(cx, n->third, &t) < 0)
				return -1;
			*type = T(join(r.kind, t.kind));
			if (r.kind == t.kind)
			{
				type->elem = join(r.elem, t.elem);
				type->key = join(r.key, t.key);
			}
			return 0;
	}
	return 0;
}

/* Check an expression and give its type; see wfe_expr_check. */
int
wfe_expr_check_types(const wfe_expr *e, wfe_expr_form form,
					 wfe_stage_ref_cb on_stage_ref, void *arg,
					 wfe_expr_error *err, cel_type *result)
{
	check_context cx;

	if (e == NULL || e->top == NULL)
	{
		wfe_expr_set_error(err, "expr.syntax", 0, "no expression to check");
		return -1;
	}
	memset(&cx, 0, sizeof(cx));
	cx.expr = e;
	cx.form = form;
	cx.on_stage_ref = on_stage_ref;
	cx.arg = arg;
	cx.err = err;
	return check_node(&cx, e->top, result);
}

/*
 * Static check of a parsed `when` expression for a form: legal roots, type
 * errors provable without data, stage references reported to the callback,
 * and a whole expression whose type is provably not bool.
 */
int
wfe_expr_check(const wfe_expr *e, wfe_expr_form form,
			   wfe_stage_ref_cb on_stage_ref, void *arg, wfe_expr_error *err)
{
	cel_type	type;

	if (wfe_expr_check_types(e, form, on_stage_ref, arg, err, &type) < 0)
		return -1;
	if (known(type.kind) && type.kind != CEL_BOOL)
	{
		wfe_expr_set_error(err, "expr.type", e->top->start,
						   "when expression must be bool, but it is always %s",
						   cel_kind_name(type.kind));
		return -1;
	}
	return 0;
}
