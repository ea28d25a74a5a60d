/*
 * expr_internal.h — the expression AST and helpers shared by expr.c (shared
 * utilities, static check), expr_lex.c (lexer), expr_parse.c (parser),
 * expr_path.c (reference paths) and expr_eval.c (evaluation, path
 * resolution).  Not part of the public API; the lexer's own declarations
 * are in expr_lex.h.
 */
#ifndef WFE_EXPR_INTERNAL_H
#define WFE_EXPR_INTERNAL_H

#include <stdint.h>
#include "expr.h"

/*
 * Parser recursion bound: nesting deeper than this (parentheses, brackets,
 * call arguments, ternary branches, runs of unary operators) is
 * expr.too_large, so hostile input cannot exhaust the C stack.
 */
#define WFE_EXPR_MAX_NESTING 64

/*
 * AST height bound.  Left-associative chains (a+b+c..., a.b.c...) are built
 * by loops, not recursion, but the evaluator and checker recurse over the
 * finished tree; this keeps them bounded even if max_nodes is raised.
 */
#define WFE_EXPR_MAX_HEIGHT 512

/* Bound on recursion into JSON values (deep equality). */
#define WFE_EXPR_MAX_JSON_DEPTH 256

typedef enum expr_node_kind
{
	EXPR_NULL,
	EXPR_BOOL,
	EXPR_INT,
	EXPR_DOUBLE,
	EXPR_STRING,
	EXPR_ROOT,					/* str: root identifier as written */
	EXPR_SELECT,				/* left.str */
	EXPR_INDEX,					/* left[right] */
	EXPR_HAS,					/* has(left), left is SELECT or INDEX */
	EXPR_SIZE,					/* size(left) */
	EXPR_NOT,					/* !left */
	EXPR_NEG,					/* -left */
	EXPR_BINARY,				/* left op right */
	EXPR_AND,					/* left && right */
	EXPR_OR,					/* left || right */
	EXPR_TERNARY				/* left ? right : third */
} expr_node_kind;

typedef enum expr_binop
{
	EXPR_OP_MUL,
	EXPR_OP_DIV,
	EXPR_OP_MOD,
	EXPR_OP_ADD,
	EXPR_OP_SUB,
	EXPR_OP_LT,
	EXPR_OP_LE,
	EXPR_OP_GT,
	EXPR_OP_GE,
	EXPR_OP_EQ,
	EXPR_OP_NE,
	EXPR_OP_IN
} expr_binop;

typedef struct expr_node
{
	expr_node_kind kind;
	expr_binop	op;				/* EXPR_BINARY only */
	int			offset;			/* where diagnostics point: the operator,
								 * the field name, or the first token */
	int			start;			/* source span [start, end), for messages */
	int			end;
	int			height;			/* 1 + height of the tallest child */
	int64_t		int_value;		/* EXPR_INT */
	double		double_value;	/* EXPR_DOUBLE */
	int			bool_value;		/* EXPR_BOOL */
	char	   *str;			/* EXPR_STRING value (no NUL inside),
								 * EXPR_ROOT / EXPR_SELECT name; malloc'd */
	size_t		str_len;
	json_object *literal;		/* literal value, built once at parse time */
	struct expr_node *left;
	struct expr_node *right;
	struct expr_node *third;
	struct expr_node *next_allocated;	/* list of every node, for freeing */
} expr_node;

struct wfe_expr
{
	expr_node  *top;
	expr_node  *all_nodes;		/* every node, freed iteratively */
	int			node_count;
	char	   *source;			/* NUL-terminated copy, for messages */
	size_t		source_len;
};

/* Shared helpers, defined in expr.c. */
extern void wfe_expr_set_error(wfe_expr_error *err, const char *code,
							   int offset, const char *fmt,...)
#if defined(__GNUC__)
			__attribute__((format(printf, 4, 5)))
#endif
			;
extern void wfe_expr_limits_resolve(const wfe_expr_limits *limits,
									wfe_expr_limits *out);
extern const char *wfe_expr_op_name(expr_binop op);
extern const char *wfe_expr_root_key(const char *root_name);
extern int	wfe_expr_span_text(const wfe_expr *e, const expr_node *n,
							   char *buf, size_t bufsize);

#endif							/* WFE_EXPR_INTERNAL_H */
