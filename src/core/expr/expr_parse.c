/*
 * expr_parse.c — recursive-descent parser for CEL expressions (cel-spec
 * langdef "Syntax"), over the lexer in expr_lex.c.  `${...}` reference paths
 * are parsed in expr_path.c.
 *
 * Grammar, lowest precedence first:
 *
 *	expr     := or ( '?' expr ':' expr )?   (CEL's middle operand is an
 *	            `or`; the wider form is accepted, as in 0.1.0)
 *	or       := and ( '||' and )*
 *	and      := rel ( '&&' rel )*
 *	rel      := add ( ('=='|'!='|'<'|'<='|'>'|'>='|'in') add )*
 *	add      := mul ( ('+'|'-') mul )*
 *	mul      := unary ( ('*'|'/'|'%') unary )*
 *	unary    := ('!'|'-') unary | member
 *	member   := primary ( '.' IDENT [ '(' args ')' ] | '.' `QUOTED` | '[' expr ']' )*
 *	primary  := literal | IDENT [ '(' args ')' ] | '(' expr ')'
 *	          | '[' [args [',']] ']' | '{' [key ':' expr {',' ...} [',']] '}'
 *
 * Calls are resolved to the functions and macros of dsl.md "Expressions"
 * here: an unknown function, a wrong number of arguments or a macro whose
 * variable is not a simple name is expr.syntax.  Macro variables are bound
 * to their macro here too (bind_variable), so the checker and the evaluator
 * never resolve names by string.
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

/* Append a child to a node's argument array (calls, lists, maps). */
static int
add_arg(parser *p, expr_node *n, expr_node *arg)
{
	expr_node **a = realloc(n->args, (size_t) (n->nargs + 1) * sizeof(expr_node *));

	if (a == NULL)
	{
		wfe_expr_set_error(p->err, "expr.too_large", n->offset, "out of memory");
		return -1;
	}
	n->args = a;
	n->args[n->nargs++] = arg;
	if (arg->height + 1 > n->height)
		n->height = arg->height + 1;
	return 0;
}

/* Finish a node with argument children: span end, height bound. */
static expr_node *
close_args_node(parser *p, expr_node *n, expr_node *left)
{
	int			h = n->height;

	n = link_node(p, n, left, NULL, NULL);
	if (n != NULL && h > n->height)
		n->height = h;
	if (n != NULL && n->height > WFE_EXPR_MAX_HEIGHT)
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
	return link_node(p, n, NULL, NULL, NULL);
}

/* Make an integer-valued literal node (int or uint). */
static expr_node *
make_uint_literal(parser *p, int offset, uint64_t v)
{
	expr_node  *n = new_node(p, EXPR_UINT, offset, offset);

	if (n == NULL)
		return NULL;
	n->uint_value = v;
	return link_node(p, n, NULL, NULL, NULL);
}

/* One function: its name, call styles and argument counts. */
typedef struct fn_spec
{
	const char *name;
	expr_fn		fn;
	int			global_args;	/* f(a...): argument count, -1 if not allowed */
	int			recv_min;		/* x.f(a...): argument counts, -1 if not */
	int			recv_max;
} fn_spec;

static const fn_spec FUNCTIONS[] = {
	{"size", FN_SIZE, 1, 0, 0},
	{"contains", FN_CONTAINS, -1, 1, 1},
	{"startsWith", FN_STARTS_WITH, -1, 1, 1},
	{"endsWith", FN_ENDS_WITH, -1, 1, 1},
	{"matches", FN_MATCHES, 2, 1, 1},
	{"int", FN_INT, 1, -1, -1},
	{"uint", FN_UINT, 1, -1, -1},
	{"double", FN_DOUBLE, 1, -1, -1},
	{"string", FN_STRING, 1, -1, -1},
	{"bool", FN_BOOL, 1, -1, -1},
	{"dyn", FN_DYN, 1, -1, -1},
	{"type", FN_TYPE, 1, -1, -1},
	{"timestamp", FN_TIMESTAMP, 1, -1, -1},
	{"duration", FN_DURATION, 1, -1, -1},
	{"getFullYear", FN_GET_FULL_YEAR, -1, 0, 1},
	{"getMonth", FN_GET_MONTH, -1, 0, 1},
	{"getDayOfYear", FN_GET_DAY_OF_YEAR, -1, 0, 1},
	{"getDayOfMonth", FN_GET_DAY_OF_MONTH, -1, 0, 1},
	{"getDate", FN_GET_DATE, -1, 0, 1},
	{"getDayOfWeek", FN_GET_DAY_OF_WEEK, -1, 0, 1},
	{"getHours", FN_GET_HOURS, -1, 0, 1},
	{"getMinutes", FN_GET_MINUTES, -1, 0, 1},
	{"getSeconds", FN_GET_SECONDS, -1, 0, 1},
	{"getMilliseconds", FN_GET_MILLISECONDS, -1, 0, 1},
};

/* The function of that name, or NULL. */
static const fn_spec *
find_function(const char *name, size_t len)
{
	size_t		i;

	for (i = 0; i < sizeof(FUNCTIONS) / sizeof(FUNCTIONS[0]); i++)
		if (strlen(FUNCTIONS[i].name) == len &&
			memcmp(FUNCTIONS[i].name, name, len) == 0)
			return &FUNCTIONS[i];
	return NULL;
}

/* Name of a function, for messages. */
const char *
wfe_expr_fn_name(expr_fn fn)
{
	size_t		i;

	for (i = 0; i < sizeof(FUNCTIONS) / sizeof(FUNCTIONS[0]); i++)
		if (FUNCTIONS[i].fn == fn)
			return FUNCTIONS[i].name;
	return "?";
}

/* The receiver macros, by name; -1 if not one. */
static int
find_macro(const char *name, size_t len, expr_macro *m)
{
	static const struct
	{
		const char *name;
		expr_macro	macro;
	}			macros[] = {
		{"all", MACRO_ALL}, {"exists", MACRO_EXISTS},
		{"exists_one", MACRO_EXISTS_ONE}, {"map", MACRO_MAP},
		{"filter", MACRO_FILTER}
	};
	size_t		i;

	for (i = 0; i < sizeof(macros) / sizeof(macros[0]); i++)
		if (strlen(macros[i].name) == len && memcmp(macros[i].name, name, len) == 0)
		{
			*m = macros[i].macro;
			return 0;
		}
	return -1;
}

/* Name of a macro, for messages. */
const char *
wfe_expr_macro_name(expr_macro m)
{
	switch (m)
	{
		case MACRO_ALL:
			return "all";
		case MACRO_EXISTS:
			return "exists";
		case MACRO_EXISTS_ONE:
			return "exists_one";
		case MACRO_MAP:
			return "map";
		case MACRO_FILTER:
			return "filter";
	}
	return "?";
}

/* The type an identifier denotes (int, string, ...); 0 ok, -1 not a type. */
static int
type_denotation(const char *name, cel_kind *k)
{
	static const struct
	{
		const char *name;
		cel_kind	kind;
	}			types[] = {
		{"int", CEL_INT}, {"uint", CEL_UINT}, {"double", CEL_DOUBLE},
		{"bool", CEL_BOOL}, {"string", CEL_STRING}, {"list", CEL_LIST},
		{"map", CEL_MAP}, {"null_type", CEL_NULL}, {"type", CEL_TYPE},
		{"dyn", CEL_DYN}
	};
	size_t		i;

	for (i = 0; i < sizeof(types) / sizeof(types[0]); i++)
		if (strcmp(types[i].name, name) == 0)
		{
			*k = types[i].kind;
			return 0;
		}
	return -1;
}

/* True for CEL's reserved words, which cannot name anything. */
static int
is_reserved(const char *s, size_t len)
{
	static const char *const words[] = {
		"as", "break", "const", "continue", "else", "for", "function", "if",
		"import", "let", "loop", "package", "namespace", "return", "var",
		"void", "while"
	};
	size_t		i;

	for (i = 0; i < sizeof(words) / sizeof(words[0]); i++)
		if (strlen(words[i]) == len && memcmp(words[i], s, len) == 0)
			return 1;
	return 0;
}

/*
 * Parse a parenthesised argument list into n->args; the '(' is current.
 * Returns the argument count, -1 on error.
 */
static int
parse_args(parser *p, expr_node *n, token_kind close, const char *closing)
{
	expr_advance(p);			/* ( or [ */
	while (expr_current_kind(p) != close)
	{
		expr_node  *arg = parse_ternary(p);

		if (arg == NULL || add_arg(p, n, arg) < 0)
			return -1;
		if (expr_current_kind(p) == TOK_COMMA)
		{
			expr_advance(p);
			continue;
		}
		if (expr_current_kind(p) != close)
		{
			unexpected(p, closing);
			return -1;
		}
	}
	expr_advance(p);
	return n->nargs;
}

/*
 * Bind the free identifiers called `name` in a macro's body to the macro.
 * Inner macros have bound their own variables already (the parse is bottom
 * up), so an inner variable of the same name shadows this one.
 */
static void
bind_variable(expr_node *n, const expr_node *macro, const char *name)
{
	int			i;

	if (n == NULL)
		return;
	if (n->kind == EXPR_IDENT && n->ident != IDENT_VAR && strcmp(n->str, name) == 0)
	{
		n->ident = IDENT_VAR;
		n->binder = macro;
	}
	bind_variable(n->left, macro, name);
	bind_variable(n->right, macro, name);
	bind_variable(n->third, macro, name);
	for (i = 0; i < n->nargs; i++)
		bind_variable(n->args[i], macro, name);
}

/*
 * Turn a receiver call target.NAME(args) that names a macro into an
 * EXPR_MACRO node: left = range, str = variable, right = predicate or
 * transform, third = the transform of map(x, p, t).
 */
static expr_node *
make_macro(parser *p, expr_node *call, expr_macro m, expr_node *target)
{
	const char *name = wfe_expr_macro_name(m);
	int			want_max = m == MACRO_MAP ? 3 : 2;
	expr_node  *var;

	if (call->nargs < 2 || call->nargs > want_max)
	{
		wfe_expr_set_error(p->err, "expr.syntax", call->offset,
						   "%s() at offset %d takes %s: a variable name and %s",
						   name, call->offset,
						   m == MACRO_MAP ? "two or three arguments" : "two arguments",
						   m == MACRO_MAP ? "a transform (or a filter and a transform)" :
						   "a predicate");
		return NULL;
	}
	var = call->args[0];
	if (var->kind != EXPR_IDENT || var->ident == IDENT_VAR)
	{
		wfe_expr_set_error(p->err, "expr.syntax", var->start,
						   "the first argument of %s() at offset %d must be a variable name",
						   name, var->start);
		return NULL;
	}
	if (var->ident == IDENT_TYPE)
	{
		wfe_expr_set_error(p->err, "expr.syntax", var->start,
						   "'%s' at offset %d names a type and cannot be a variable of %s()",
						   var->str, var->start, name);
		return NULL;
	}
	call->kind = EXPR_MACRO;
	call->macro = m;
	call->str = var->str;
	call->str_len = var->str_len;
	var->str = NULL;
	call->right = call->args[1];
	call->third = call->nargs == 3 ? call->args[2] : NULL;
	call->left = target;
	free(call->args);
	call->args = NULL;
	call->nargs = 0;
	bind_variable(call->right, call, call->str);
	bind_variable(call->third, call, call->str);
	return call;
}

/*
 * A call: NAME(args) when target is NULL, else target.NAME(args).  The
 * name is the current token and '(' follows.  Resolves macros (has and the
 * receiver macros) and functions; anything else is expr.syntax.
 */
static expr_node *
parse_call(parser *p, expr_node *target)
{
	token	   *name = expr_peek(p, 0);
	int			offset = name->offset;
	size_t		len = (size_t) name->length;
	const char *text = p->src + offset;
	int			start = target ? target->start : offset;
	const fn_spec *f = find_function(text, len);
	expr_macro	m = MACRO_ALL;
	int			is_macro = target != NULL && find_macro(text, len, &m) == 0;
	int			is_has = target == NULL && len == 3 && memcmp(text, "has", 3) == 0;
	expr_node  *n;
	int			nargs;

	if (f == NULL && !is_macro && !is_has)
	{
		wfe_expr_set_error(p->err, "expr.syntax", offset,
						   "unknown function '%.*s' at offset %d",
						   (int) (len > 60 ? 60 : len), text, offset);
		return NULL;
	}
	if ((n = new_node(p, EXPR_CALL, offset, start)) == NULL)
		return NULL;
	expr_advance(p);			/* name */
	if (enter_nesting(p) < 0 ||
		(nargs = parse_args(p, n, TOK_RPAREN, "',' or ')'")) < 0)
		return NULL;
	p->depth--;

	if (is_has)
	{
		if (nargs != 1)
		{
			wfe_expr_set_error(p->err, "expr.syntax", offset,
							   "has() at offset %d takes exactly one argument", offset);
			return NULL;
		}
		if (n->args[0]->kind != EXPR_SELECT && n->args[0]->kind != EXPR_INDEX)
		{
			wfe_expr_set_error(p->err, "expr.syntax", n->args[0]->start,
							   "has() argument at offset %d must be a field selection such as has(a.b) or has(a[\"b\"])",
							   n->args[0]->start);
			return NULL;
		}
		n->kind = EXPR_HAS;
		n->left = n->args[0];
		free(n->args);
		n->args = NULL;
		n->nargs = 0;
		return link_node(p, n, n->left, NULL, NULL);
	}
	if (is_macro)
	{
		if (make_macro(p, n, m, target) == NULL)
			return NULL;
		return link_node(p, n, n->left, n->right, n->third);
	}

	n->fn = f->fn;
	if (target == NULL ? nargs != f->global_args :
		(nargs < f->recv_min || nargs > f->recv_max))
	{
		if ((target == NULL ? f->global_args : f->recv_min) < 0)
			wfe_expr_set_error(p->err, "expr.syntax", offset,
							   target == NULL ?
							   "%s() at offset %d is a method: call it as x.%s(...)" :
							   "%s() at offset %d is not a method: call it as %s(x)",
							   f->name, offset, f->name);
		else if (target == NULL)
			wfe_expr_set_error(p->err, "expr.syntax", offset,
							   "%s() at offset %d takes %d argument%s, not %d",
							   f->name, offset, f->global_args,
							   f->global_args == 1 ? "" : "s", nargs);
		else
			wfe_expr_set_error(p->err, "expr.syntax", offset,
							   "x.%s() at offset %d takes %s%d argument%s, not %d",
							   f->name, offset,
							   f->recv_min != f->recv_max ? "at most " : "",
							   f->recv_max, f->recv_max == 1 ? "" : "s", nargs);
		return NULL;
	}
	if ((n = close_args_node(p, n, target)) == NULL)
		return NULL;
	if (n->fn == FN_MATCHES && expr_regex_prepare(n, p->err) < 0)
		return NULL;
	return n;
}

/* [a, b, ...] (a trailing comma is allowed); '[' is current. */
static expr_node *
parse_list(parser *p)
{
	int			offset = expr_peek(p, 0)->offset;
	expr_node  *n = new_node(p, EXPR_LIST, offset, offset);

	if (n == NULL || enter_nesting(p) < 0 ||
		parse_args(p, n, TOK_RBRACKET, "',' or ']'") < 0)
		return NULL;
	p->depth--;
	return close_args_node(p, n, NULL);
}

/* {k: v, ...} (a trailing comma is allowed); '{' is current. */
static expr_node *
parse_map(parser *p)
{
	int			offset = expr_peek(p, 0)->offset;
	expr_node  *n = new_node(p, EXPR_MAP, offset, offset);

	if (n == NULL || enter_nesting(p) < 0)
		return NULL;
	expr_advance(p);
	while (expr_current_kind(p) != TOK_RBRACE)
	{
		expr_node  *key;
		expr_node  *value;

		if ((key = parse_ternary(p)) == NULL || expect(p, TOK_COLON, "':' after a map key") < 0 ||
			(value = parse_ternary(p)) == NULL ||
			add_arg(p, n, key) < 0 || add_arg(p, n, value) < 0)
			return NULL;
		if (expr_current_kind(p) == TOK_COMMA)
		{
			expr_advance(p);
			continue;
		}
		if (expr_current_kind(p) != TOK_RBRACE)
			return unexpected(p, "',' or '}'");
	}
	expr_advance(p);
	p->depth--;
	return close_args_node(p, n, NULL);
}

/*
 * An identifier: a root, a type denotation, or (bound later by its macro)
 * a variable.  `google.protobuf.Timestamp` and `.Duration` are read as the
 * type denotations they are.
 */
static expr_node *
parse_identifier(parser *p)
{
	token	   *t = expr_peek(p, 0);
	int			offset = t->offset;
	size_t		len = (size_t) t->length;
	expr_node  *n;

	if (is_reserved(p->src + offset, len))
	{
		wfe_expr_set_error(p->err, "expr.syntax", offset,
						   "'%.*s' at offset %d is a reserved word", (int) len,
						   p->src + offset, offset);
		return NULL;
	}
	if (len == 5 && memcmp(p->src + offset, "bytes", 5) == 0)
	{
		wfe_expr_set_error(p->err, "expr.syntax", offset,
						   "bytes at offset %d is not supported (wfe expressions work over JSON, which has no bytes)",
						   offset);
		return NULL;
	}
	if ((n = new_node(p, EXPR_IDENT, offset, offset)) == NULL)
		return NULL;
	n->ident = IDENT_ROOT;
	expr_advance(p);
	if (len == 6 && memcmp(p->src + offset, "google", 6) == 0)
	{
		/*
		 * google.protobuf.Timestamp / google.protobuf.Duration.  Lex the
		 * furthest token first: lexing more may move the token array.
		 */
		token	   *d = expr_peek(p, 3);
		token	   *a = expr_peek(p, 0);
		token	   *b = expr_peek(p, 1);
		token	   *c = expr_peek(p, 2);

		if (a && b && c && d && a->kind == TOK_DOT && b->kind == TOK_IDENT &&
			b->length == 8 && memcmp(p->src + b->offset, "protobuf", 8) == 0 &&
			c->kind == TOK_DOT && d->kind == TOK_IDENT &&
			((d->length == 9 && memcmp(p->src + d->offset, "Timestamp", 9) == 0) ||
			 (d->length == 8 && memcmp(p->src + d->offset, "Duration", 8) == 0)))
		{
			n->ident = IDENT_TYPE;
			n->type_denoted = d->length == 9 ? CEL_TIMESTAMP : CEL_DURATION;
			len = (size_t) (d->offset + d->length - offset);
			expr_advance(p);
			expr_advance(p);
			expr_advance(p);
			expr_advance(p);
		}
	}
	n->str = expr_copy_text(p->src + offset, len);
	if (n->str == NULL)
	{
		wfe_expr_set_error(p->err, "expr.too_large", offset, "out of memory");
		return NULL;
	}
	n->str_len = len;
	if (n->ident == IDENT_ROOT && type_denotation(n->str, &n->type_denoted) == 0)
		n->ident = IDENT_TYPE;
	return link_node(p, n, NULL, NULL, NULL);
}

/* primary := literal | IDENT | call | '(' expr ')' | list | map */
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

		case TOK_UINT:
			expr_advance(p);
			return make_uint_literal(p, t->offset, t->int_value);

		case TOK_DOUBLE:
			if ((n = new_node(p, EXPR_DOUBLE, t->offset, t->offset)) == NULL)
				return NULL;
			n->double_value = t->double_value;
			expr_advance(p);
			return link_node(p, n, NULL, NULL, NULL);

		case TOK_STRING:
			if ((n = new_node(p, EXPR_STRING, t->offset, t->offset)) == NULL)
				return NULL;
			/* take ownership of the decoded text */
			n->str = t->text;
			n->str_len = t->text_len;
			t->text = NULL;
			expr_advance(p);
			return link_node(p, n, NULL, NULL, NULL);

		case TOK_TRUE:
		case TOK_FALSE:
			if ((n = new_node(p, EXPR_BOOL, t->offset, t->offset)) == NULL)
				return NULL;
			n->bool_value = (t->kind == TOK_TRUE);
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

				if (next != NULL && next->kind == TOK_LPAREN)
					return parse_call(p, NULL);
				return parse_identifier(p);
			}

		case TOK_LPAREN:
			expr_advance(p);
			if ((n = parse_ternary(p)) == NULL)
				return NULL;
			if (expect(p, TOK_RPAREN, "')'") < 0)
				return NULL;
			return n;

		case TOK_LBRACKET:
			return parse_list(p);

		case TOK_LBRACE:
			return parse_map(p);

		case TOK_DOT:
			wfe_expr_set_error(p->err, "expr.syntax", t->offset,
							   "unexpected '.' at offset %d (leading-dot names are for protobuf packages, which wfe expressions do not have)",
							   t->offset);
			return NULL;

		default:
			return unexpected(p, NULL);
	}
}

/* member := primary ( '.' IDENT [ '(' args ')' ] | '[' expr ']' )* */
static expr_node *
parse_member(parser *p)
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
				 name->kind != TOK_IN && name->kind != TOK_QFIELD))
				return unexpected(p, "a field name after '.'");
			if (name->kind == TOK_IDENT && expr_peek(p, 1) != NULL &&
				expr_peek(p, 1)->kind == TOK_LPAREN)
			{
				n = parse_call(p, n);
				continue;
			}
			name = expr_peek(p, 0);
			if ((m = new_node(p, EXPR_SELECT, name->offset, n->start)) == NULL)
				return NULL;
			if (name->kind == TOK_QFIELD)
			{
				/* take ownership of the quoted name */
				m->str = name->text;
				m->str_len = name->text_len;
				name->text = NULL;
			}
			else
			{
				m->str = expr_copy_text(p->src + name->offset, (size_t) name->length);
				m->str_len = (size_t) name->length;
			}
			if (m->str == NULL)
			{
				wfe_expr_set_error(p->err, "expr.too_large", name->offset, "out of memory");
				return NULL;
			}
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
		else if (k == TOK_LBRACE)
		{
			int			offset = expr_peek(p, 0)->offset;

			wfe_expr_set_error(p->err, "expr.syntax", offset,
							   "message construction at offset %d is not supported (wfe expressions have no protobuf messages)",
							   offset);
			return NULL;
		}
		else
			break;
	}
	return n;
}

/* unary := ('!' | '-') unary | member */
static expr_node *
parse_unary(parser *p)
{
	token_kind	k = expr_current_kind(p);
	int			offset;
	expr_node  *n;
	expr_node  *operand;

	if (k != TOK_NOT && k != TOK_MINUS)
		return parse_member(p);

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
