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
		free(n->args);
		expr_regex_release(n->regex);
		free(n);
		n = next;
	}
	free(e->source);
	free(e);
}
