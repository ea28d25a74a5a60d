/*
 * expr_lex.h — the lexer's tokens, the parser state they are buffered in,
 * and the lexer entry points shared by expr_lex.c (lexer, token buffer),
 * expr_parse.c (expression parser) and expr_path.c (reference paths).
 * Not part of the public API.
 */
#ifndef WFE_EXPR_LEX_H
#define WFE_EXPR_LEX_H

#include <stddef.h>
#include <stdint.h>

#include "expr_internal.h"

/* Token kinds; TOK_END and TOK_ERROR repeat for every later position. */
typedef enum token_kind
{
	TOK_END,
	TOK_ERROR,					/* lexing failed; message in the parser */
	TOK_INT,
	TOK_UINT,					/* 1u; the value is in int_value */
	TOK_DOUBLE,
	TOK_STRING,
	TOK_IDENT,
	TOK_QFIELD,				/* `field name`: text holds the name */
	TOK_TRUE,
	TOK_FALSE,
	TOK_NULL,
	TOK_IN,
	TOK_DOT,
	TOK_LBRACKET,
	TOK_RBRACKET,
	TOK_LBRACE,
	TOK_RBRACE,
	TOK_LPAREN,
	TOK_RPAREN,
	TOK_COMMA,
	TOK_NOT,
	TOK_MINUS,
	TOK_STAR,
	TOK_SLASH,
	TOK_PERCENT,
	TOK_PLUS,
	TOK_LT,
	TOK_LE,
	TOK_GT,
	TOK_GE,
	TOK_EQ,
	TOK_NE,
	TOK_AND,
	TOK_OR,
	TOK_QUESTION,
	TOK_COLON
} token_kind;

/* One lexed token: kind, source span [offset, offset + length), value. */
typedef struct token
{
	token_kind	kind;
	int			offset;
	int			length;
	uint64_t	int_value;		/* TOK_INT: up to 2^63 (see parse_unary,
								 * expr_parse.c) */
	double		double_value;	/* TOK_DOUBLE */
	char	   *text;			/* TOK_STRING, TOK_QFIELD: malloc'd, owned */
	size_t		text_len;
} token;

/*
 * State of one parse: the source, the on-demand token buffer, the last
 * lexing error, and (expressions only) the AST budget and nesting depth.
 */
typedef struct parser
{
	const char *src;
	size_t		len;
	size_t		lex_pos;		/* next byte to lex */
	token	   *tokens;			/* lexed so far */
	int			ntokens;
	int			tokens_cap;
	int			pos;			/* index of the current token */
	char		lex_message[200];	/* set when a TOK_ERROR is produced */
	int			lex_offset;
	wfe_expr   *expr;			/* receives nodes; NULL for paths */
	int			max_nodes;
	int			depth;			/* current nesting */
	wfe_expr_error *err;
} parser;

/* Reject over-long or invalid UTF-8 source; 0 ok, -1 with *err. */
extern int	expr_check_source(const char *src, size_t len, size_t max_bytes,
							  wfe_expr_error *err);

/* The token k places after the current one, lexed on demand; NULL on OOM. */
extern token *expr_peek(parser *p, int k);

/* Move past the current token (never past END or ERROR). */
extern void expr_advance(parser *p);

/* Kind of the current token (TOK_ERROR if lexing ran out of memory). */
extern token_kind expr_current_kind(parser *p);

/* Byte offset just past the previously consumed token. */
extern int	expr_previous_end(parser *p);

/* Human description of a token for "unexpected ..." messages. */
extern void expr_describe_token(parser *p, const token *t, char *buf,
								size_t size);

/* Free the lexed tokens and any string text still owned by them. */
extern void expr_parser_cleanup(parser *p);

/* Copy n bytes into a new NUL-terminated string; NULL on OOM. */
extern char *expr_copy_text(const char *s, size_t n);

#endif							/* WFE_EXPR_LEX_H */
