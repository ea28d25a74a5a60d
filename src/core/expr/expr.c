/*
 * expr.c — shared pieces of the CEL expression language: error reporting,
 * limits, names for messages, freeing the AST.
 *
 * The other parts (lexer, parser, checker, evaluator, functions, time,
 * paths) and the AST they share are listed in expr_internal.h.  Plain C99
 * over json-c.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/base/utf8.h"
#include "expr_internal.h"

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
	wfe_utf8_sanitize(err->message);
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
	len = wfe_utf8_cut(e->source + n->start, len);
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
		free(n->args);
		expr_regex_release(n->regex);
		free(n);
		n = next;
	}
	free(e->source);
	free(e);
}
