/*
 * expr_internal.h — the expression AST, the run-time value model and the
 * helpers shared by the expression files:
 *
 *	expr.c        shared utilities (errors, limits, freeing)
 *	expr_lex.c    lexer                 expr_parse.c  parser, macro expansion
 *	expr_check.c  compile-time type checker
 *	expr_value.c  values: JSON mapping, equality, ordering, formatting
 *	expr_eval.c   evaluator (operators, logic, macros)
 *	expr_func.c   functions (size, strings, conversions, type)
 *	expr_time.c   timestamps and durations
 *	expr_path.c   `${...}` reference paths
 *
 * Not part of the public API; the lexer's own declarations are in expr_lex.h.
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

/* Bound on recursion into values (deep equality, formatting). */
#define WFE_EXPR_MAX_JSON_DEPTH 256

/* Bound on the memory one evaluation may build (strings, lists, maps). */
#define WFE_EXPR_MAX_EVAL_BYTES (16 * 1024 * 1024)

typedef enum expr_node_kind
{
	EXPR_NULL,
	EXPR_BOOL,
	EXPR_INT,
	EXPR_UINT,
	EXPR_DOUBLE,
	EXPR_STRING,
	EXPR_IDENT,					/* str: a root, a macro variable or a type */
	EXPR_SELECT,				/* left.str */
	EXPR_INDEX,					/* left[right] */
	EXPR_HAS,					/* has(left), left is SELECT or INDEX */
	EXPR_CALL,					/* fn(args) or left.fn(args) */
	EXPR_LIST,					/* [args...] */
	EXPR_MAP,					/* {args[0]: args[1], ...} */
	EXPR_MACRO,					/* left.macro(str, right[, third]) */
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

/* What an identifier names; resolved by the parser. */
typedef enum expr_ident_kind
{
	IDENT_ROOT,					/* context, payload, stages, outputs, run, or unknown */
	IDENT_VAR,					/* a macro's variable: binder says which */
	IDENT_TYPE					/* a type denotation: int, string, ... */
} expr_ident_kind;

/* The macros (dsl.md "Expressions"). */
typedef enum expr_macro
{
	MACRO_ALL,
	MACRO_EXISTS,
	MACRO_EXISTS_ONE,
	MACRO_MAP,					/* map(x, t) and, with third, map(x, p, t) */
	MACRO_FILTER
} expr_macro;

/* The functions, resolved from their names at parse time. */
typedef enum expr_fn
{
	FN_SIZE,
	FN_CONTAINS,
	FN_STARTS_WITH,
	FN_ENDS_WITH,
	FN_MATCHES,
	FN_INT,
	FN_UINT,
	FN_DOUBLE,
	FN_STRING,
	FN_BOOL,
	FN_DYN,
	FN_TYPE,
	FN_TIMESTAMP,
	FN_DURATION,
	FN_GET_FULL_YEAR,
	FN_GET_MONTH,
	FN_GET_DAY_OF_YEAR,
	FN_GET_DAY_OF_MONTH,
	FN_GET_DATE,
	FN_GET_DAY_OF_WEEK,
	FN_GET_HOURS,
	FN_GET_MINUTES,
	FN_GET_SECONDS,
	FN_GET_MILLISECONDS
} expr_fn;

/*
 * Run-time value kinds.  CEL_DYN is never a value: the checker uses it for
 * "not known before run time".
 */
typedef enum cel_kind
{
	CEL_NULL,
	CEL_BOOL,
	CEL_INT,
	CEL_UINT,
	CEL_DOUBLE,
	CEL_STRING,
	CEL_LIST,
	CEL_MAP,
	CEL_TIMESTAMP,
	CEL_DURATION,
	CEL_TYPE,
	CEL_DYN
} cel_kind;

typedef struct cel_list cel_list;
typedef struct cel_map cel_map;

/*
 * A value.  Strings point into the input JSON, the AST or the evaluation's
 * arena and are always NUL-terminated.  Lists and maps are either JSON
 * (borrowed from the input) or built by the expression (arena).
 */
typedef struct cel_value
{
	cel_kind	kind;
	union
	{
		int			b;
		int64_t		i;			/* INT; DURATION in nanoseconds */
		uint64_t	u;
		double		d;
		struct
		{
			const char *ptr;
			size_t		len;
		}			s;
		struct
		{
			json_object *json;	/* JSON array/object, or NULL */
			const cel_list *list;	/* built list, when json is NULL */
			const cel_map *map; /* built map, when json is NULL */
		}			c;
		struct
		{
			int64_t		sec;	/* seconds since the Unix epoch */
			int32_t		nsec;	/* 0 .. 999999999 */
		}			t;
		cel_kind	type;		/* TYPE: the type it denotes */
	}			v;
} cel_value;

struct cel_list
{
	size_t		n;
	cel_value  *items;
};

struct cel_map
{
	size_t		n;
	cel_value  *keys;
	cel_value  *values;
};

/* Static type for the checker: a kind, plus element (and key) kinds. */
typedef struct cel_type
{
	cel_kind	kind;
	cel_kind	elem;			/* LIST element, MAP value */
	cel_kind	key;			/* MAP key */
} cel_type;

struct wfe_regex;

typedef struct expr_node
{
	expr_node_kind kind;
	expr_binop	op;				/* EXPR_BINARY */
	expr_fn		fn;				/* EXPR_CALL */
	expr_macro	macro;			/* EXPR_MACRO */
	expr_ident_kind ident;		/* EXPR_IDENT */
	cel_kind	type_denoted;	/* EXPR_IDENT of IDENT_TYPE */
	int			offset;			/* where diagnostics point: the operator,
								 * the field name, or the first token */
	int			start;			/* source span [start, end), for messages */
	int			end;
	int			height;			/* 1 + height of the tallest child */
	int64_t		int_value;		/* EXPR_INT */
	uint64_t	uint_value;		/* EXPR_UINT */
	double		double_value;	/* EXPR_DOUBLE */
	int			bool_value;		/* EXPR_BOOL */
	char	   *str;			/* EXPR_STRING value, EXPR_IDENT / EXPR_SELECT
								 * name, EXPR_MACRO variable; malloc'd */
	size_t		str_len;
	const struct expr_node *binder;	/* IDENT_VAR: the EXPR_MACRO binding it */
	struct wfe_regex *regex;	/* matches() with a literal pattern */
	struct expr_node *left;		/* operand, receiver, macro range */
	struct expr_node *right;
	struct expr_node *third;
	struct expr_node **args;	/* EXPR_CALL, EXPR_LIST, EXPR_MAP; malloc'd */
	int			nargs;
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
extern const char *wfe_expr_fn_name(expr_fn fn);
extern const char *wfe_expr_macro_name(expr_macro m);

/* ------------------------------------------------------------------------
 * Evaluation state, shared by expr_eval.c, expr_func.c and expr_time.c
 * ------------------------------------------------------------------------ */

typedef struct eval_chunk eval_chunk;

/* A macro variable's current value. */
typedef struct eval_frame
{
	const expr_node *binder;
	cel_value	value;
} eval_frame;

typedef struct eval_context
{
	const wfe_expr *expr;
	json_object *root;
	long		steps;
	long		max_steps;
	wfe_expr_error *err;
	int			fatal;			/* budget, memory: never absorbed by && || */
	eval_frame	frames[WFE_EXPR_MAX_NESTING];
	int			nframes;
	eval_chunk *chunks;			/* arena: everything built while evaluating */
	size_t		arena_bytes;
	char	   *inline_next;	/* bump pointer into inline_buf */
	size_t		inline_left;
	max_align_t inline_buf[256];
} eval_context;

/* expr_eval.c */
extern int	eval_node(eval_context *cx, const expr_node *n, cel_value *out);
extern int	eval_charge(eval_context *cx, long n, int offset);
extern void *eval_alloc(eval_context *cx, size_t size, int offset);
extern int	eval_error(eval_context *cx, int offset, const char *fmt,...)
#if defined(__GNUC__)
			__attribute__((format(printf, 3, 4)))
#endif
			;
extern int	eval_no_overload(eval_context *cx, int offset, const char *what,
							 const cel_value *a, const cel_value *b);
extern int	eval_string(eval_context *cx, const char *s, size_t len,
						int offset, cel_value *out);

/* expr_value.c */
extern const char *cel_kind_name(cel_kind k);
extern cel_value cel_from_json(json_object *j);
extern size_t cel_list_size(const cel_value *v);
extern cel_value cel_list_get(const cel_value *v, size_t i);
extern size_t cel_map_size(const cel_value *v);
extern cel_value cel_map_key_at(const cel_value *v, size_t i, void **iter);
extern int	cel_map_find(const cel_value *map, const cel_value *key,
						 cel_value *out);
extern int	cel_equal(eval_context *cx, const cel_value *a, const cel_value *b,
					  int depth, int offset, int *equal);
extern int	cel_compare(const cel_value *a, const cel_value *b, int *cmp);
extern int	cel_is_number(cel_kind k);
extern json_object *cel_to_json(const cel_value *v, int depth);
extern int	cel_format(const cel_value *v, char *buf, size_t size, int depth);
extern int	cel_format_double(double d, char *buf, size_t size);

/* expr_func.c */
extern int	eval_call(eval_context *cx, const expr_node *n, cel_value *out);

/* expr_match.c: matches() and its regular expressions */
extern int	expr_regex_prepare(expr_node *n, wfe_expr_error *err);
extern void expr_regex_release(struct wfe_regex *re);
extern int	eval_matches(eval_context *cx, const expr_node *n,
						 const cel_value *s, const cel_value *pattern,
						 cel_value *out);

/* expr_time.c */
#define CEL_TS_MIN (-62135596800LL)	/* 0001-01-01T00:00:00Z */
#define CEL_TS_MAX (253402300799LL) /* 9999-12-31T23:59:59Z */
extern int	cel_parse_timestamp(const char *s, size_t len, int64_t *sec,
								int32_t *nsec, char *why, size_t whylen);
extern int	cel_format_timestamp(int64_t sec, int32_t nsec, char *buf,
								 size_t size);
extern int	cel_parse_duration(const char *s, size_t len, int64_t *ns,
							   char *why, size_t whylen);
extern int	cel_format_duration(int64_t ns, char *buf, size_t size);
extern int	eval_time_arith(eval_context *cx, const expr_node *n,
							const cel_value *l, const cel_value *r,
							cel_value *out);
extern int	eval_time_accessor(eval_context *cx, const expr_node *n,
							   const cel_value *target, const cel_value *tz,
							   cel_value *out);

/* expr_check.c */
extern int	wfe_expr_check_types(const wfe_expr *e, wfe_expr_form form,
								 wfe_stage_ref_cb on_stage_ref, void *arg,
								 wfe_expr_error *err, cel_type *result);

/* Evaluate to a value (unit tests format it); see expr.h for the rules. */
extern int	wfe_expr_eval_format(const wfe_expr *e, json_object *root,
								 const wfe_expr_limits *limits, char *buf,
								 size_t size, const char **type_name,
								 wfe_expr_error *err);

#endif							/* WFE_EXPR_INTERNAL_H */
