/*
 * expr.c — shared pieces of the CEL-subset expression language: error
 * reporting, limits, freeing the AST, and the static check run at compile
 * time (legal roots per form, type errors provable without data, stage
 * references).
 *
 * The lexer lives in expr_lex.c, the parser in expr_parse.c, the path parser in expr_path.c, evaluation in expr_eval.c; the
 * AST they share is described in expr_internal.h.  Plain C99 over json-c.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "expr_internal.h"

/*
 * Replace every byte that is not part of a well-formed UTF-8 sequence with
 * '?'.  Messages quote source text and are cut at a fixed size; the cut can
 * split a character, and PostgreSQL rejects invalid UTF-8 in messages.
 */
static void
sanitize_utf8(char *s)
{
	unsigned char *p = (unsigned char *) s;

	while (*p)
	{
		int			need;
		int			i;
		unsigned int cp;

		if (p[0] < 0x80)
		{
			p++;
			continue;
		}
		if (p[0] >= 0xC2 && p[0] <= 0xDF)
			need = 1, cp = p[0] & 0x1F;
		else if (p[0] >= 0xE0 && p[0] <= 0xEF)
			need = 2, cp = p[0] & 0x0F;
		else if (p[0] >= 0xF0 && p[0] <= 0xF4)
			need = 3, cp = p[0] & 0x07;
		else
		{
			*p++ = '?';
			continue;
		}
		for (i = 1; i <= need; i++)
		{
			if ((p[i] & 0xC0) != 0x80)
				break;
			cp = (cp << 6) | (p[i] & 0x3F);
		}
		if (i <= need ||
			(need == 2 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) ||
			(need == 3 && (cp < 0x10000 || cp > 0x10FFFF)))
		{
			*p++ = '?';
			continue;
		}
		p += need + 1;
	}
}

/* Fill *err (if given) with a code, an offset and a formatted message. */
void
wfe_expr_set_error(wfe_expr_error *err, const char *code, int offset,
				   const char *fmt,...)
{
	va_list		ap;

	if (err == NULL)
		return;
	err->code = code;
	err->offset = offset < 0 ? 0 : offset;
	va_start(ap, fmt);
	vsnprintf(err->message, sizeof(err->message), fmt, ap);
	va_end(ap);
	sanitize_utf8(err->message);
}

/* Copy caller limits, substituting the documented default for unset (<= 0). */
void
wfe_expr_limits_resolve(const wfe_expr_limits *limits, wfe_expr_limits *out)
{
	out->max_bytes = WFE_EXPR_DEFAULT_MAX_BYTES;
	out->max_nodes = WFE_EXPR_DEFAULT_MAX_NODES;
	out->max_steps = WFE_EXPR_DEFAULT_MAX_STEPS;
	if (limits == NULL)
		return;
	if (limits->max_bytes > 0)
		out->max_bytes = limits->max_bytes;
	if (limits->max_nodes > 0)
		out->max_nodes = limits->max_nodes;
	if (limits->max_steps > 0)
		out->max_steps = limits->max_steps;
}

/* The source spelling of a binary operator, for messages. */
const char *
wfe_expr_op_name(expr_binop op)
{
	switch (op)
	{
		case EXPR_OP_MUL:
			return "*";
		case EXPR_OP_DIV:
			return "/";
		case EXPR_OP_MOD:
			return "%";
		case EXPR_OP_ADD:
			return "+";
		case EXPR_OP_SUB:
			return "-";
		case EXPR_OP_LT:
			return "<";
		case EXPR_OP_LE:
			return "<=";
		case EXPR_OP_GT:
			return ">";
		case EXPR_OP_GE:
			return ">=";
		case EXPR_OP_EQ:
			return "==";
		case EXPR_OP_NE:
			return "!=";
		case EXPR_OP_IN:
			return "in";
	}
	return "?";
}

/* The member of the evaluation root a root identifier reads. */
const char *
wfe_expr_root_key(const char *root_name)
{
	/* payload is the spec's alias of context */
	if (strcmp(root_name, "payload") == 0)
		return "context";
	return root_name;
}

/*
 * Copy the source text of a node into buf for a message, cut to fit with
 * "..." appended.  Returns the length written.
 */
int
wfe_expr_span_text(const wfe_expr *e, const expr_node *n, char *buf,
				   size_t bufsize)
{
	size_t		len;

	if (bufsize == 0)
		return 0;
	buf[0] = '\0';
	if (e == NULL || e->source == NULL || n->end <= n->start ||
		(size_t) n->end > e->source_len)
		return 0;
	len = (size_t) (n->end - n->start);
	if (len < bufsize)
	{
		memcpy(buf, e->source + n->start, len);
		buf[len] = '\0';
		return (int) len;
	}
	if (bufsize < 4)
		return 0;
	len = bufsize - 4;
	/* don't cut inside a UTF-8 sequence */
	while (len > 0 && ((unsigned char) e->source[n->start + len] & 0xC0) == 0x80)
		len--;
	memcpy(buf, e->source + n->start, len);
	memcpy(buf + len, "...", 4);
	return (int) len + 3;
}

/* Free an AST: every node is on one list, so no recursion is needed. */
void
wfe_expr_free(wfe_expr *e)
{
	expr_node  *n;

	if (e == NULL)
		return;
	n = e->all_nodes;
	while (n != NULL)
	{
		expr_node  *next = n->next_allocated;

		free(n->str);
		if (n->literal != NULL)
			json_object_put(n->literal);
		free(n);
		n = next;
	}
	free(e->source);
	free(e);
}

/* ------------------------------------------------------------------------
 * Static check
 * ------------------------------------------------------------------------ */

/*
 * What the checker knows about a value without data.  STATIC_DYN means "not
 * provable"; the others are the type the node has whenever it evaluates
 * successfully, so a mismatch between two known types is a certain error.
 */
typedef enum static_type
{
	STATIC_DYN,
	STATIC_NULL,
	STATIC_BOOL,
	STATIC_INT,
	STATIC_DOUBLE,
	STATIC_STRING
} static_type;

typedef struct check_context
{
	const wfe_expr *expr;
	wfe_expr_form form;
	wfe_stage_ref_cb on_stage_ref;
	void	   *arg;
	wfe_expr_error *err;
} check_context;

/* Name of a static type for messages. */
static const char *
static_type_name(static_type t)
{
	switch (t)
	{
		case STATIC_NULL:
			return "null";
		case STATIC_BOOL:
			return "bool";
		case STATIC_INT:
			return "int";
		case STATIC_DOUBLE:
			return "double";
		case STATIC_STRING:
			return "string";
		case STATIC_DYN:
			break;
	}
	return "dyn";
}

/* True if t is known to be a number. */
static int
static_is_number(static_type t)
{
	return t == STATIC_INT || t == STATIC_DOUBLE;
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
	return n->kind == EXPR_ROOT && strcmp(n->str, "stages") == 0;
}

static int	check_node(check_context *cx, const expr_node *n, static_type *type);

/*
 * Check the operand of a field selection or index (also inside has()).
 * `stages` is special: it must be followed by a literal stage name, which is
 * reported to the callback so the compiler can check lineage; a dynamic
 * stages[...] would let an expression read a stage the compiler never saw.
 */
static int
check_access(check_context *cx, const expr_node *n)
{
	static_type operand_type;

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

	if (check_node(cx, n->left, &operand_type) < 0)
		return -1;
	if (operand_type != STATIC_DYN)
	{
		if (n->kind == EXPR_SELECT)
			wfe_expr_set_error(cx->err, "expr.type", n->offset,
							   "cannot select field '%s' from a %s at offset %d",
							   n->str, static_type_name(operand_type), n->offset);
		else
			wfe_expr_set_error(cx->err, "expr.type", n->offset,
							   "cannot index a %s at offset %d",
							   static_type_name(operand_type), n->offset);
		return -1;
	}
	if (n->kind == EXPR_INDEX)
	{
		static_type index_type;

		if (check_node(cx, n->right, &index_type) < 0)
			return -1;
		if (index_type == STATIC_NULL || index_type == STATIC_BOOL)
		{
			wfe_expr_set_error(cx->err, "expr.type", n->right->offset,
							   "index at offset %d must be a string or an integer, not %s",
							   n->right->offset, static_type_name(index_type));
			return -1;
		}
	}
	return 0;
}

/* Check a binary operator node given its operands' static types. */
static int
check_binary(check_context *cx, const expr_node *n, static_type l,
			 static_type r, static_type *type)
{
	const char *op = wfe_expr_op_name(n->op);

	switch (n->op)
	{
		case EXPR_OP_EQ:
		case EXPR_OP_NE:
			/* heterogeneous equality is simply false, never an error */
			*type = STATIC_BOOL;
			return 0;

		case EXPR_OP_IN:
			/* no list or map literals exist, so any known type is wrong */
			if (r != STATIC_DYN)
			{
				wfe_expr_set_error(cx->err, "expr.type", n->offset,
								   "right operand of 'in' at offset %d must be an array or object, not %s",
								   n->offset, static_type_name(r));
				return -1;
			}
			*type = STATIC_BOOL;
			return 0;

		case EXPR_OP_LT:
		case EXPR_OP_LE:
		case EXPR_OP_GT:
		case EXPR_OP_GE:
			if ((l != STATIC_DYN && !static_is_number(l) && l != STATIC_STRING) ||
				(r != STATIC_DYN && !static_is_number(r) && r != STATIC_STRING) ||
				(l != STATIC_DYN && r != STATIC_DYN &&
				 static_is_number(l) != static_is_number(r)))
				goto mismatch;
			*type = STATIC_BOOL;
			return 0;

		case EXPR_OP_ADD:
			if (l == STATIC_NULL || l == STATIC_BOOL ||
				r == STATIC_NULL || r == STATIC_BOOL ||
				(l != STATIC_DYN && r != STATIC_DYN &&
				 static_is_number(l) != static_is_number(r)))
				goto mismatch;
			if (l == STATIC_STRING || r == STATIC_STRING)
				*type = STATIC_STRING;
			else if (l == STATIC_INT && r == STATIC_INT)
				*type = STATIC_INT;
			else if (static_is_number(l) && static_is_number(r))
				*type = STATIC_DOUBLE;
			else
				*type = STATIC_DYN;
			return 0;

		case EXPR_OP_SUB:
		case EXPR_OP_MUL:
		case EXPR_OP_DIV:
		case EXPR_OP_MOD:
			if ((l != STATIC_DYN && !static_is_number(l)) ||
				(r != STATIC_DYN && !static_is_number(r)))
				goto mismatch;
			if (n->op == EXPR_OP_MOD &&
				(l == STATIC_DOUBLE || r == STATIC_DOUBLE))
			{
				wfe_expr_set_error(cx->err, "expr.type", n->offset,
								   "operator '%%' at offset %d needs integers, not %s and %s",
								   n->offset, static_type_name(l),
								   static_type_name(r));
				return -1;
			}
			if (l == STATIC_INT && r == STATIC_INT)
				*type = STATIC_INT;
			else if (static_is_number(l) && static_is_number(r))
				*type = STATIC_DOUBLE;
			else
				*type = STATIC_DYN;
			return 0;
	}

mismatch:
	wfe_expr_set_error(cx->err, "expr.type", n->offset,
					   "operator '%s' at offset %d cannot be applied to %s and %s",
					   op, n->offset, static_type_name(l), static_type_name(r));
	return -1;
}

/* Require a known operand type to be bool for a logical operator. */
static int
check_bool_operand(check_context *cx, const expr_node *n, static_type t,
				   const char *what)
{
	if (t == STATIC_DYN || t == STATIC_BOOL)
		return 0;
	wfe_expr_set_error(cx->err, "expr.type", n->offset,
					   "%s at offset %d must be bool, not %s",
					   what, n->offset, static_type_name(t));
	return -1;
}

/* Check one node (children first, left to right); sets its static type. */
static int
check_node(check_context *cx, const expr_node *n, static_type *type)
{
	static_type l = STATIC_DYN;
	static_type r = STATIC_DYN;
	static_type t = STATIC_DYN;

	*type = STATIC_DYN;
	switch (n->kind)
	{
		case EXPR_NULL:
			*type = STATIC_NULL;
			return 0;
		case EXPR_BOOL:
			*type = STATIC_BOOL;
			return 0;
		case EXPR_INT:
			*type = STATIC_INT;
			return 0;
		case EXPR_DOUBLE:
			*type = STATIC_DOUBLE;
			return 0;
		case EXPR_STRING:
			*type = STATIC_STRING;
			return 0;

		case EXPR_ROOT:
			if (check_root(cx, n) < 0)
				return -1;
			if (is_stages_root(n))
			{
				wfe_expr_set_error(cx->err, "expr.type", n->offset,
								   "'stages' at offset %d must be followed by a stage name, e.g. stages[\"name\"].result",
								   n->offset);
				return -1;
			}
			return 0;

		case EXPR_SELECT:
		case EXPR_INDEX:
			return check_access(cx, n);

		case EXPR_HAS:
			if (check_access(cx, n->left) < 0)
				return -1;
			*type = STATIC_BOOL;
			return 0;

		case EXPR_SIZE:
			if (check_node(cx, n->left, &l) < 0)
				return -1;
			if (l != STATIC_DYN && l != STATIC_STRING)
			{
				wfe_expr_set_error(cx->err, "expr.type", n->offset,
								   "size() at offset %d needs a string, array or object, not %s",
								   n->offset, static_type_name(l));
				return -1;
			}
			*type = STATIC_INT;
			return 0;

		case EXPR_NOT:
			if (check_node(cx, n->left, &l) < 0 ||
				check_bool_operand(cx, n, l, "operand of '!'") < 0)
				return -1;
			*type = STATIC_BOOL;
			return 0;

		case EXPR_NEG:
			if (check_node(cx, n->left, &l) < 0)
				return -1;
			if (l != STATIC_DYN && !static_is_number(l))
			{
				wfe_expr_set_error(cx->err, "expr.type", n->offset,
								   "operand of unary '-' at offset %d must be a number, not %s",
								   n->offset, static_type_name(l));
				return -1;
			}
			*type = l;
			return 0;

		case EXPR_BINARY:
			if (check_node(cx, n->left, &l) < 0 ||
				check_node(cx, n->right, &r) < 0)
				return -1;
			return check_binary(cx, n, l, r, type);

		case EXPR_AND:
		case EXPR_OR:
			if (check_node(cx, n->left, &l) < 0 ||
				check_bool_operand(cx, n, l, n->kind == EXPR_AND ?
								   "left operand of '&&'" :
								   "left operand of '||'") < 0 ||
				check_node(cx, n->right, &r) < 0 ||
				check_bool_operand(cx, n, r, n->kind == EXPR_AND ?
								   "right operand of '&&'" :
								   "right operand of '||'") < 0)
				return -1;
			*type = STATIC_BOOL;
			return 0;

		case EXPR_TERNARY:
			if (check_node(cx, n->left, &l) < 0 ||
				check_bool_operand(cx, n, l, "condition of '?:'") < 0 ||
				check_node(cx, n->right, &r) < 0 ||
				check_node(cx, n->third, &t) < 0)
				return -1;
			*type = (r == t) ? r : STATIC_DYN;
			return 0;
	}
	return 0;
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
	check_context cx;
	static_type type;

	if (e == NULL || e->top == NULL)
	{
		wfe_expr_set_error(err, "expr.syntax", 0, "no expression to check");
		return -1;
	}
	cx.expr = e;
	cx.form = form;
	cx.on_stage_ref = on_stage_ref;
	cx.arg = arg;
	cx.err = err;
	if (check_node(&cx, e->top, &type) < 0)
		return -1;
	if (type != STATIC_DYN && type != STATIC_BOOL)
	{
		wfe_expr_set_error(err, "expr.type", e->top->start,
						   "when expression must be bool, but it is always %s",
						   static_type_name(type));
		return -1;
	}
	return 0;
}
