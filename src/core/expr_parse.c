/*
 * expr_parse.c — recursive-descent parser for the CEL subset, over the
 * lexer in expr_lex.c.  `${...}` reference paths are parsed in expr_path.c.
 *
 * Grammar, lowest precedence first:
 *
 *	expr     := or ( '?' expr ':' expr )?
 *	or       := and ( '||' and )*
 *	and      := rel ( '&&' rel )*
 *	rel      := add ( ('=='|'!='|'<'|'<='|'>'|'>='|'in') add )*
 *	add      := mul ( ('+'|'-') mul )*
 *	mul      := unary ( ('*'|'/'|'%') unary )*
 *	unary    := ('!'|'-') unary | postfix
 *	postfix  := primary ( '.' IDENT | '[' expr ']' )*
 *	primary  := literal | IDENT | IDENT '(' expr ')' | '(' expr ')'
 *
 * Every input is bounded before work is done: source bytes, AST nodes,
 * parser nesting (WFE_EXPR_MAX_NESTING) and tree height.  Tokens are lexed
 * on demand (expr_lex.c), so the first problem in source order is the one
 * reported.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "expr_lex.h"

/* ------------------------------------------------------------------------
 * Parser
 * ------------------------------------------------------------------------ */

/* Report the current token as unexpected (or the lexer's error for it). */
static void *
unexpected(parser *p, const char *expecting)
{
	token	   *t = expr_peek(p, 0);
	char		what[100];

	if (t == NULL || t->kind == TOK_ERROR)
	{
		wfe_expr_set_error(p->err, "expr.syntax", p->lex_offset,
						   "%s at offset %d", p->lex_message, p->lex_offset);
		return NULL;
	}
	expr_describe_token(p, t, what, sizeof(what));
	if (expecting)
		wfe_expr_set_error(p->err, "expr.syntax", t->offset,
						   "unexpected %s at offset %d; expected %s",
						   what, t->offset, expecting);
	else
		wfe_expr_set_error(p->err, "expr.syntax", t->offset,
						   "unexpected %s at offset %d", what, t->offset);
	return NULL;
}

/*
 * Allocate a node at token offset `offset`, enforcing the node budget.  The
 * node goes straight onto the expression's list, so error paths never need
 * to free partial trees: wfe_expr_free releases everything.
 */
static expr_node *
new_node(parser *p, expr_node_kind kind, int offset, int start)
{
	expr_node  *n;

	if (p->expr->node_count >= p->max_nodes)
	{
		wfe_expr_set_error(p->err, "expr.too_large", offset,
						   "expression has more than %d nodes (at offset %d)",
						   p->max_nodes, offset);
		return NULL;
	}
	n = calloc(1, sizeof(expr_node));
	if (n == NULL)
	{
		wfe_expr_set_error(p->err, "expr.too_large", offset, "out of memory");
		return NULL;
	}
	n->kind = kind;
	n->offset = offset;
	n->start = start;
	n->end = start;
	n->height = 1;
	n->next_allocated = p->expr->all_nodes;
	p->expr->all_nodes = n;
	p->expr->node_count++;
	return n;
}

/* Attach children, set the span end and height; fails if the tree is too tall. */
static expr_node *
link_node(parser *p, expr_node *n, expr_node *a, expr_node *b, expr_node *c)
{
	int			h = 0;

	n->left = a;
	n->right = b;
	n->third = c;
	if (a && a->height > h)
		h = a->height;
	if (b && b->height > h)
		h = b->height;
	if (c && c->height > h)
		h = c->height;
	n->height = h + 1;
	n->end = expr_previous_end(p);
	if (n->height > WFE_EXPR_MAX_HEIGHT)
	{
		wfe_expr_set_error(p->err, "expr.too_large", n->offset,
						   "expression nested too deeply at offset %d (tree height over %d)",
						   n->offset, WFE_EXPR_MAX_HEIGHT);
		return NULL;
	}
	return n;
}

/* Enter one nesting level; expr.too_large past WFE_EXPR_MAX_NESTING. */
static int
enter_nesting(parser *p)
{
	if (p->depth >= WFE_EXPR_MAX_NESTING)
	{
		int			offset = expr_peek(p, 0) ? expr_peek(p, 0)->offset : 0;

		wfe_expr_set_error(p->err, "expr.too_large", offset,
						   "expression nested too deeply at offset %d (more than %d levels)",
						   offset, WFE_EXPR_MAX_NESTING);
		return -1;
	}
	p->depth++;
	return 0;
}

/* Consume a token of the given kind or report what was found instead. */
static int
expect(parser *p, token_kind kind, const char *expecting)
{
	if (expr_current_kind(p) != kind)
	{
		unexpected(p, expecting);
		return -1;
	}
	expr_advance(p);
	return 0;
}

static expr_node *parse_ternary(parser *p);

/* Make an EXPR_INT node with its cached JSON value. */
static expr_node *
make_int_literal(parser *p, int offset, int64_t v)
{
	expr_node  *n = new_node(p, EXPR_INT, offset, offset);

	if (n == NULL)
		return NULL;
	n->int_value = v;
	n->literal = json_object_new_int64(v);
	return link_node(p, n, NULL, NULL, NULL);
}

/* Parse has(x) or size(x); the identifier is current and '(' follows. */
static expr_node *
parse_call(parser *p)
{
	token	   *name = expr_peek(p, 0);
	int			offset = name->offset;
	int			is_has = (name->length == 3 && memcmp(p->src + offset, "has", 3) == 0);
	int			is_size = (name->length == 4 && memcmp(p->src + offset, "size", 4) == 0);
	expr_node  *n;
	expr_node  *arg;

	if (!is_has && !is_size)
	{
		wfe_expr_set_error(p->err, "expr.syntax", offset,
						   "unknown function '%.*s' at offset %d; only has() and size() exist",
						   name->length > 60 ? 60 : name->length,
						   p->src + offset, offset);
		return NULL;
	}
	n = new_node(p, is_has ? EXPR_HAS : EXPR_SIZE, offset, offset);
	if (n == NULL)
		return NULL;
	expr_advance(p);					/* name */
	expr_advance(p);					/* ( */
	if (expr_current_kind(p) == TOK_RPAREN)
	{
		wfe_expr_set_error(p->err, "expr.syntax", offset,
						   "%s() at offset %d takes exactly one argument",
						   is_has ? "has" : "size", offset);
		return NULL;
	}
	if ((arg = parse_ternary(p)) == NULL)
		return NULL;
	if (expr_current_kind(p) == TOK_COMMA)
	{
		wfe_expr_set_error(p->err, "expr.syntax", offset,
						   "%s() at offset %d takes exactly one argument",
						   is_has ? "has" : "size", offset);
		return NULL;
	}
	if (expect(p, TOK_RPAREN, "')'") < 0)
		return NULL;
	if (is_has && arg->kind != EXPR_SELECT && arg->kind != EXPR_INDEX)
	{
		wfe_expr_set_error(p->err, "expr.syntax", arg->start,
						   "has() argument at offset %d must be a field selection such as has(a.b) or has(a[\"b\"])",
						   arg->start);
		return NULL;
	}
	return link_node(p, n, arg, NULL, NULL);
}

/* primary := literal | IDENT | call | '(' expr ')' */
static expr_node *
parse_primary(parser *p)
{
	token	   *t = expr_peek(p, 0);
	expr_node  *n;

	if (t == NULL)
		return unexpected(p, NULL);
	switch (t->kind)
	{
		case TOK_INT:
			if (t->int_value > (uint64_t) INT64_MAX)
			{
				wfe_expr_set_error(p->err, "expr.syntax", t->offset,
								   "integer literal out of range at offset %d",
								   t->offset);
				return NULL;
			}
			expr_advance(p);
			return make_int_literal(p, t->offset, (int64_t) t->int_value);

		case TOK_DOUBLE:
			if ((n = new_node(p, EXPR_DOUBLE, t->offset, t->offset)) == NULL)
				return NULL;
			n->double_value = t->double_value;
			n->literal = json_object_new_double(t->double_value);
			expr_advance(p);
			return link_node(p, n, NULL, NULL, NULL);

		case TOK_STRING:
			if ((n = new_node(p, EXPR_STRING, t->offset, t->offset)) == NULL)
				return NULL;
			/* take ownership of the decoded text */
			n->str = t->text;
			n->str_len = t->text_len;
			t->text = NULL;
			n->literal = json_object_new_string_len(n->str, (int) n->str_len);
			expr_advance(p);
			return link_node(p, n, NULL, NULL, NULL);

		case TOK_TRUE:
		case TOK_FALSE:
			if ((n = new_node(p, EXPR_BOOL, t->offset, t->offset)) == NULL)
				return NULL;
			n->bool_value = (t->kind == TOK_TRUE);
			n->literal = json_object_new_boolean(n->bool_value);
			expr_advance(p);
			return link_node(p, n, NULL, NULL, NULL);

		case TOK_NULL:
			if ((n = new_node(p, EXPR_NULL, t->offset, t->offset)) == NULL)
				return NULL;
			expr_advance(p);
			return link_node(p, n, NULL, NULL, NULL);

		case TOK_IDENT:
			{
				token	   *next = expr_peek(p, 1);

				/* expr_peek may have moved the token array */
				t = expr_peek(p, 0);
				if (next != NULL && next->kind == TOK_LPAREN)
					return parse_call(p);
				if ((n = new_node(p, EXPR_ROOT, t->offset, t->offset)) == NULL)
					return NULL;
				n->str = expr_copy_text(p->src + t->offset, (size_t) t->length);
				if (n->str == NULL)
				{
					wfe_expr_set_error(p->err, "expr.too_large", t->offset, "out of memory");
					return NULL;
				}
				n->str_len = (size_t) t->length;
				expr_advance(p);
				return link_node(p, n, NULL, NULL, NULL);
			}

		case TOK_LPAREN:
			expr_advance(p);
			if ((n = parse_ternary(p)) == NULL)
				return NULL;
			if (expect(p, TOK_RPAREN, "')'") < 0)
				return NULL;
			return n;

		default:
			return unexpected(p, NULL);
	}
}

/* postfix := primary ( '.' IDENT | '[' expr ']' )* */
static expr_node *
parse_postfix(parser *p)
{
	expr_node  *n = parse_primary(p);

	while (n != NULL)
	{
		token_kind	k = expr_current_kind(p);
		expr_node  *m;

		if (k == TOK_DOT)
		{
			token	   *name;

			expr_advance(p);
			name = expr_peek(p, 0);
			/* keywords are fine as field names: JSON keys may be "in" */
			if (name == NULL ||
				(name->kind != TOK_IDENT && name->kind != TOK_TRUE &&
				 name->kind != TOK_FALSE && name->kind != TOK_NULL &&
				 name->kind != TOK_IN))
				return unexpected(p, "a field name after '.'");
			if (expr_peek(p, 1) != NULL && expr_peek(p, 1)->kind == TOK_LPAREN)
			{
				name = expr_peek(p, 0);
				wfe_expr_set_error(p->err, "expr.syntax", name->offset,
								   "unknown function '%.*s' at offset %d; method calls are not supported (use size(x))",
								   name->length > 60 ? 60 : name->length,
								   p->src + name->offset, name->offset);
				return NULL;
			}
			name = expr_peek(p, 0);
			if ((m = new_node(p, EXPR_SELECT, name->offset, n->start)) == NULL)
				return NULL;
			m->str = expr_copy_text(p->src + name->offset, (size_t) name->length);
			if (m->str == NULL)
			{
				wfe_expr_set_error(p->err, "expr.too_large", name->offset, "out of memory");
				return NULL;
			}
			m->str_len = (size_t) name->length;
			expr_advance(p);
			n = link_node(p, m, n, NULL, NULL);
		}
		else if (k == TOK_LBRACKET)
		{
			expr_node  *index;

			if ((m = new_node(p, EXPR_INDEX, expr_peek(p, 0)->offset, n->start)) == NULL)
				return NULL;
			expr_advance(p);
			if ((index = parse_ternary(p)) == NULL)
				return NULL;
			if (expect(p, TOK_RBRACKET, "']'") < 0)
				return NULL;
			n = link_node(p, m, n, index, NULL);
		}
		else
			break;
	}
	return n;
}

/* unary := ('!' | '-') unary | postfix */
static expr_node *
parse_unary(parser *p)
{
	token_kind	k = expr_current_kind(p);
	int			offset;
	expr_node  *n;
	expr_node  *operand;

	if (k != TOK_NOT && k != TOK_MINUS)
		return parse_postfix(p);

	offset = expr_peek(p, 0)->offset;

	/*
	 * -9223372036854775808: the literal 2^63 alone is out of range, so fold
	 * the minus into it here, unless a postfix operator binds to the literal
	 * first.
	 */
	if (k == TOK_MINUS && expr_peek(p, 1) != NULL && expr_peek(p, 1)->kind == TOK_INT &&
		expr_peek(p, 1)->int_value == (uint64_t) INT64_MAX + 1 &&
		expr_peek(p, 2) != NULL && expr_peek(p, 2)->kind != TOK_DOT &&
		expr_peek(p, 2)->kind != TOK_LBRACKET)
	{
		expr_advance(p);
		expr_advance(p);
		if ((n = make_int_literal(p, offset, INT64_MIN)) == NULL)
			return NULL;
		n->start = offset;
		return n;
	}

	if (enter_nesting(p) < 0)
		return NULL;
	if ((n = new_node(p, k == TOK_NOT ? EXPR_NOT : EXPR_NEG, offset, offset)) == NULL)
		return NULL;
	expr_advance(p);
	if ((operand = parse_unary(p)) == NULL)
		return NULL;
	p->depth--;
	return link_node(p, n, operand, NULL, NULL);
}

/* Map a token to the binary operator it spells at a precedence level. */
static int
binary_operator(token_kind k, int level, expr_binop *op)
{
	switch (level)
	{
		case 0:					/* multiplicative */
			if (k == TOK_STAR)
				return *op = EXPR_OP_MUL, 1;
			if (k == TOK_SLASH)
				return *op = EXPR_OP_DIV, 1;
			if (k == TOK_PERCENT)
				return *op = EXPR_OP_MOD, 1;
			return 0;
		case 1:					/* additive */
			if (k == TOK_PLUS)
				return *op = EXPR_OP_ADD, 1;
			if (k == TOK_MINUS)
				return *op = EXPR_OP_SUB, 1;
			return 0;
		default:				/* relations */
			if (k == TOK_LT)
				return *op = EXPR_OP_LT, 1;
			if (k == TOK_LE)
				return *op = EXPR_OP_LE, 1;
			if (k == TOK_GT)
				return *op = EXPR_OP_GT, 1;
			if (k == TOK_GE)
				return *op = EXPR_OP_GE, 1;
			if (k == TOK_EQ)
				return *op = EXPR_OP_EQ, 1;
			if (k == TOK_NE)
				return *op = EXPR_OP_NE, 1;
			if (k == TOK_IN)
				return *op = EXPR_OP_IN, 1;
			return 0;
	}
}

/*
 * Left-associative binary levels: 0 multiplicative, 1 additive, 2 relations.
 * A loop, not recursion, so long chains cost no stack while parsing.
 */
static expr_node *
parse_binary_level(parser *p, int level)
{
	expr_node  *left = level == 0 ? parse_unary(p) : parse_binary_level(p, level - 1);
	expr_binop	op;

	while (left != NULL && binary_operator(expr_current_kind(p), level, &op))
	{
		expr_node  *n;
		expr_node  *right;

		if ((n = new_node(p, EXPR_BINARY, expr_peek(p, 0)->offset, left->start)) == NULL)
			return NULL;
		n->op = op;
		expr_advance(p);
		right = level == 0 ? parse_unary(p) : parse_binary_level(p, level - 1);
		if (right == NULL)
			return NULL;
		left = link_node(p, n, left, right, NULL);
	}
	return left;
}

/* and := rel ('&&' rel)*   and   or := and ('||' and)* */
static expr_node *
parse_logical(parser *p, int is_or)
{
	expr_node  *left = is_or ? parse_logical(p, 0) : parse_binary_level(p, 2);
	token_kind	want = is_or ? TOK_OR : TOK_AND;

	while (left != NULL && expr_current_kind(p) == want)
	{
		expr_node  *n;
		expr_node  *right;

		if ((n = new_node(p, is_or ? EXPR_OR : EXPR_AND, expr_peek(p, 0)->offset,
						  left->start)) == NULL)
			return NULL;
		expr_advance(p);
		right = is_or ? parse_logical(p, 0) : parse_binary_level(p, 2);
		if (right == NULL)
			return NULL;
		left = link_node(p, n, left, right, NULL);
	}
	return left;
}

/* expr := or ('?' expr ':' expr)?  — every nested expression starts here. */
static expr_node *
parse_ternary(parser *p)
{
	expr_node  *cond;
	expr_node  *n;
	expr_node  *then_branch;
	expr_node  *else_branch;

	if (enter_nesting(p) < 0)
		return NULL;
	if ((cond = parse_logical(p, 1)) == NULL)
		return NULL;
	if (expr_current_kind(p) != TOK_QUESTION)
	{
		p->depth--;
		return cond;
	}
	if ((n = new_node(p, EXPR_TERNARY, expr_peek(p, 0)->offset, cond->start)) == NULL)
		return NULL;
	expr_advance(p);
	if ((then_branch = parse_ternary(p)) == NULL)
		return NULL;
	if (expect(p, TOK_COLON, "':' in conditional") < 0)
		return NULL;
	if ((else_branch = parse_ternary(p)) == NULL)
		return NULL;
	p->depth--;
	return link_node(p, n, cond, then_branch, else_branch);
}

/* Parse an expression; NULL with *err (expr.syntax / expr.too_large). */
wfe_expr *
wfe_expr_parse(const char *src, size_t len, const wfe_expr_limits *limits,
			   wfe_expr_error *err)
{
	wfe_expr_limits lim;
	parser		p;
	wfe_expr   *e;

	wfe_expr_limits_resolve(limits, &lim);
	if (src == NULL)
	{
		if (len > 0)
		{
			wfe_expr_set_error(err, "expr.syntax", 0, "no expression source");
			return NULL;
		}
		src = "";
	}
	if (expr_check_source(src, len, lim.max_bytes, err) < 0)
		return NULL;

	e = calloc(1, sizeof(wfe_expr));
	if (e == NULL || (e->source = expr_copy_text(src, len)) == NULL)
	{
		free(e);
		wfe_expr_set_error(err, "expr.too_large", 0, "out of memory");
		return NULL;
	}
	e->source_len = len;

	memset(&p, 0, sizeof(p));
	p.src = src;
	p.len = len;
	p.expr = e;
	p.max_nodes = lim.max_nodes;
	p.err = err;

	if (expr_current_kind(&p) == TOK_END)
		wfe_expr_set_error(err, "expr.syntax", 0, "empty expression");
	else if ((e->top = parse_ternary(&p)) != NULL &&
			 expr_current_kind(&p) != TOK_END)
		e->top = unexpected(&p, "an operator or end of expression");

	expr_parser_cleanup(&p);
	if (e->top == NULL)
	{
		wfe_expr_free(e);
		return NULL;
	}
	return e;
}
