/*
 * expr_parse.c — lexer and recursive-descent parser for the CEL subset, and
 * the parser for `${...}` reference paths.
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
 * on demand, so the first problem in source order is the one reported.
 */
#include <errno.h>
#include <limits.h>
#include <locale.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "expr_internal.h"

typedef enum token_kind
{
	TOK_END,
	TOK_ERROR,					/* lexing failed; message in the parser */
	TOK_INT,
	TOK_DOUBLE,
	TOK_STRING,
	TOK_IDENT,
	TOK_TRUE,
	TOK_FALSE,
	TOK_NULL,
	TOK_IN,
	TOK_DOT,
	TOK_LBRACKET,
	TOK_RBRACKET,
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

typedef struct token
{
	token_kind	kind;
	int			offset;
	int			length;
	uint64_t	int_value;		/* TOK_INT: up to 2^63 (see parse_unary) */
	double		double_value;	/* TOK_DOUBLE */
	char	   *text;			/* TOK_STRING: decoded, malloc'd, owned */
	size_t		text_len;
} token;

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

/* ------------------------------------------------------------------------
 * Lexer
 * ------------------------------------------------------------------------ */

/*
 * Length of the well-formed UTF-8 sequence at s (at most `avail` bytes), or
 * 0 if it is not well formed: no overlongs, surrogates or code points above
 * U+10FFFF.
 */
static int
utf8_sequence_length(const unsigned char *s, size_t avail)
{
	int			need;
	unsigned int cp;
	int			i;

	if (s[0] < 0x80)
		return 1;
	if (s[0] >= 0xC2 && s[0] <= 0xDF)
		need = 1, cp = s[0] & 0x1F;
	else if (s[0] >= 0xE0 && s[0] <= 0xEF)
		need = 2, cp = s[0] & 0x0F;
	else if (s[0] >= 0xF0 && s[0] <= 0xF4)
		need = 3, cp = s[0] & 0x07;
	else
		return 0;
	if ((size_t) need >= avail)
		return 0;
	for (i = 1; i <= need; i++)
	{
		if ((s[i] & 0xC0) != 0x80)
			return 0;
		cp = (cp << 6) | (s[i] & 0x3F);
	}
	if ((need == 2 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) ||
		(need == 3 && (cp < 0x10000 || cp > 0x10FFFF)))
		return 0;
	return need + 1;
}

/* Append code point cp to buf as UTF-8; returns bytes written. */
static int
utf8_encode(unsigned int cp, char *buf)
{
	if (cp < 0x80)
	{
		buf[0] = (char) cp;
		return 1;
	}
	if (cp < 0x800)
	{
		buf[0] = (char) (0xC0 | (cp >> 6));
		buf[1] = (char) (0x80 | (cp & 0x3F));
		return 2;
	}
	if (cp < 0x10000)
	{
		buf[0] = (char) (0xE0 | (cp >> 12));
		buf[1] = (char) (0x80 | ((cp >> 6) & 0x3F));
		buf[2] = (char) (0x80 | (cp & 0x3F));
		return 3;
	}
	buf[0] = (char) (0xF0 | (cp >> 18));
	buf[1] = (char) (0x80 | ((cp >> 12) & 0x3F));
	buf[2] = (char) (0x80 | ((cp >> 6) & 0x3F));
	buf[3] = (char) (0x80 | (cp & 0x3F));
	return 4;
}

/* Value of a hex digit, or -1. */
static int
hex_value(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

static int
is_ident_start(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}

static int
is_ident_char(char c)
{
	return is_ident_start(c) || (c >= '0' && c <= '9');
}

/* Record a lexing error; the token being built becomes TOK_ERROR. */
static token_kind
lex_fail(parser *p, size_t offset, const char *message)
{
	size_t		n = strlen(message);

	if (n >= sizeof(p->lex_message))
		n = sizeof(p->lex_message) - 1;
	memcpy(p->lex_message, message, n);
	p->lex_message[n] = '\0';
	p->lex_offset = (int) offset;
	return TOK_ERROR;
}

/*
 * Lex a quoted string starting at the quote; decodes escapes into a malloc'd
 * buffer.  Escapes are CEL's: \\ \' \" \` \? \a \b \f \n \r \t \v, \xHH,
 * \uHHHH, \UHHHHHHHH and octal \ooo.  NUL (raw or escaped) is refused so
 * decoded strings are safe as C strings and JSON object keys.
 */
static token_kind
lex_string(parser *p, token *tok)
{
	const char *s = p->src;
	size_t		i = p->lex_pos;
	char		quote = s[i];
	char	   *buf;
	size_t		out = 0;

	/* escapes never expand, so the remaining source length is enough */
	buf = malloc(p->len - i + 1);
	if (buf == NULL)
		return lex_fail(p, i, "out of memory");
	i++;
	for (;;)
	{
		unsigned int cp;
		int			seq;

		if (i >= p->len || s[i] == '\n' || s[i] == '\r')
		{
			free(buf);
			return lex_fail(p, tok->offset, "unterminated string literal");
		}
		if (s[i] == quote)
		{
			i++;
			break;
		}
		if (s[i] == '\0')
		{
			free(buf);
			return lex_fail(p, i, "NUL byte in string literal");
		}
		if (s[i] != '\\')
		{
			seq = utf8_sequence_length((const unsigned char *) s + i, p->len - i);
			if (seq == 0)
			{
				free(buf);
				return lex_fail(p, i, "invalid UTF-8 in string literal");
			}
			memcpy(buf + out, s + i, (size_t) seq);
			out += (size_t) seq;
			i += (size_t) seq;
			continue;
		}

		/* escape sequence */
		if (i + 1 >= p->len)
		{
			free(buf);
			return lex_fail(p, tok->offset, "unterminated string literal");
		}
		switch (s[i + 1])
		{
			case '\\':
			case '\'':
			case '"':
			case '`':
			case '?':
				buf[out++] = s[i + 1];
				i += 2;
				continue;
			case 'a':
				buf[out++] = '\a';
				i += 2;
				continue;
			case 'b':
				buf[out++] = '\b';
				i += 2;
				continue;
			case 'f':
				buf[out++] = '\f';
				i += 2;
				continue;
			case 'n':
				buf[out++] = '\n';
				i += 2;
				continue;
			case 'r':
				buf[out++] = '\r';
				i += 2;
				continue;
			case 't':
				buf[out++] = '\t';
				i += 2;
				continue;
			case 'v':
				buf[out++] = '\v';
				i += 2;
				continue;
			case 'x':
			case 'X':
			case 'u':
			case 'U':
				{
					int			digits = (s[i + 1] == 'u') ? 4 :
						(s[i + 1] == 'U') ? 8 : 2;
					int			k;

					cp = 0;
					for (k = 0; k < digits; k++)
					{
						int			h = (i + 2 + k < p->len) ?
							hex_value(s[i + 2 + k]) : -1;

						if (h < 0)
						{
							free(buf);
							return lex_fail(p, i, "invalid hex escape in string literal");
						}
						cp = (cp << 4) | (unsigned int) h;
					}
					i += 2 + (size_t) digits;
					break;
				}
			case '0':
			case '1':
			case '2':
			case '3':
				{
					int			k;

					cp = 0;
					for (k = 0; k < 3; k++)
					{
						char		c = (i + 1 + k < p->len) ? s[i + 1 + k] : 0;

						if (c < '0' || c > '7')
						{
							free(buf);
							return lex_fail(p, i, "invalid octal escape in string literal");
						}
						cp = (cp << 3) | (unsigned int) (c - '0');
					}
					i += 4;
					break;
				}
			default:
				free(buf);
				return lex_fail(p, i, "invalid escape sequence in string literal");
		}
		/* a numeric escape produced cp */
		if (cp == 0)
		{
			free(buf);
			return lex_fail(p, i, "NUL character in string literal");
		}
		if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
		{
			free(buf);
			return lex_fail(p, i, "escape is not a valid Unicode code point");
		}
		out += (size_t) utf8_encode(cp, buf + out);
	}
	buf[out] = '\0';
	tok->text = buf;
	tok->text_len = out;
	p->lex_pos = i;
	return TOK_STRING;
}

/*
 * Convert a C-locale double literal.  strtod follows LC_NUMERIC, which a
 * client program may have changed, so '.' is swapped for the locale's point.
 */
static int
parse_double_literal(const char *s, size_t len, double *out)
{
	char		buf[512];
	const char *point = localeconv()->decimal_point;
	size_t		point_len = strlen(point);
	size_t		i;
	size_t		o = 0;
	char	   *end;

	for (i = 0; i < len; i++)
	{
		if (s[i] == '.' && !(point_len == 1 && point[0] == '.'))
		{
			if (o + point_len >= sizeof(buf))
				return -1;
			memcpy(buf + o, point, point_len);
			o += point_len;
		}
		else
		{
			if (o + 1 >= sizeof(buf))
				return -1;
			buf[o++] = s[i];
		}
	}
	buf[o] = '\0';
	errno = 0;
	*out = strtod(buf, &end);
	if (*end != '\0' || !isfinite(*out))
		return -1;
	return 0;
}

/*
 * Lex a number: decimal or 0x hex integer, or a double (digits '.' digits
 * and/or an exponent).  Integers above 2^63 are refused here; 2^63 itself is
 * let through only so that -9223372036854775808 can be written.
 */
static token_kind
lex_number(parser *p, token *tok)
{
	const char *s = p->src;
	size_t		start = p->lex_pos;
	size_t		i = start;
	int			is_double = 0;
	const uint64_t limit = (uint64_t) INT64_MAX + 1;

	if (s[i] == '0' && i + 1 < p->len && (s[i + 1] == 'x' || s[i + 1] == 'X'))
	{
		uint64_t	v = 0;

		i += 2;
		if (i >= p->len || hex_value(s[i]) < 0)
			return lex_fail(p, start, "invalid hex literal");
		while (i < p->len && hex_value(s[i]) >= 0)
		{
			if (v > (limit - (uint64_t) hex_value(s[i])) / 16)
				return lex_fail(p, start, "integer literal out of range");
			v = v * 16 + (uint64_t) hex_value(s[i]);
			i++;
		}
		if (i < p->len && is_ident_char(s[i]))
			return lex_fail(p, start, "invalid number literal");
		tok->int_value = v;
		p->lex_pos = i;
		return TOK_INT;
	}

	while (i < p->len && s[i] >= '0' && s[i] <= '9')
		i++;
	if (s[start] == '0' && i - start > 1)
		return lex_fail(p, start, "leading zeros are not allowed in number literals");
	if (i + 1 < p->len && s[i] == '.' && s[i + 1] >= '0' && s[i + 1] <= '9')
	{
		is_double = 1;
		i++;
		while (i < p->len && s[i] >= '0' && s[i] <= '9')
			i++;
	}
	if (i < p->len && (s[i] == 'e' || s[i] == 'E'))
	{
		size_t		j = i + 1;

		if (j < p->len && (s[j] == '+' || s[j] == '-'))
			j++;
		if (j >= p->len || s[j] < '0' || s[j] > '9')
			return lex_fail(p, start, "invalid exponent in number literal");
		while (j < p->len && s[j] >= '0' && s[j] <= '9')
			j++;
		is_double = 1;
		i = j;
	}
	if (i < p->len && is_ident_char(s[i]))
		return lex_fail(p, start, "invalid number literal");

	p->lex_pos = i;
	if (is_double)
	{
		if (parse_double_literal(s + start, i - start, &tok->double_value) < 0)
			return lex_fail(p, start, "double literal out of range or too long");
		return TOK_DOUBLE;
	}
	else
	{
		uint64_t	v = 0;
		size_t		k;

		for (k = start; k < i; k++)
		{
			uint64_t	d = (uint64_t) (s[k] - '0');

			if (v > (limit - d) / 10)
				return lex_fail(p, start, "integer literal out of range");
			v = v * 10 + d;
		}
		tok->int_value = v;
		return TOK_INT;
	}
}

/* Lex the next token at p->lex_pos into tok. */
static void
lex_token(parser *p, token *tok)
{
	const char *s = p->src;
	size_t		i;

	memset(tok, 0, sizeof(*tok));

	/* skip white space and // comments */
	for (;;)
	{
		while (p->lex_pos < p->len &&
			   (s[p->lex_pos] == ' ' || s[p->lex_pos] == '\t' ||
				s[p->lex_pos] == '\n' || s[p->lex_pos] == '\r' ||
				s[p->lex_pos] == '\f'))
			p->lex_pos++;
		if (p->lex_pos + 1 < p->len && s[p->lex_pos] == '/' &&
			s[p->lex_pos + 1] == '/')
		{
			while (p->lex_pos < p->len && s[p->lex_pos] != '\n')
				p->lex_pos++;
			continue;
		}
		break;
	}

	i = p->lex_pos;
	tok->offset = (int) i;
	if (i >= p->len)
	{
		tok->kind = TOK_END;
		return;
	}

	if (s[i] == '"' || s[i] == '\'')
		tok->kind = lex_string(p, tok);
	else if (s[i] >= '0' && s[i] <= '9')
		tok->kind = lex_number(p, tok);
	else if (is_ident_start(s[i]))
	{
		size_t		n;

		while (p->lex_pos < p->len && is_ident_char(s[p->lex_pos]))
			p->lex_pos++;
		n = p->lex_pos - i;
		if (n == 4 && memcmp(s + i, "true", 4) == 0)
			tok->kind = TOK_TRUE;
		else if (n == 5 && memcmp(s + i, "false", 5) == 0)
			tok->kind = TOK_FALSE;
		else if (n == 4 && memcmp(s + i, "null", 4) == 0)
			tok->kind = TOK_NULL;
		else if (n == 2 && memcmp(s + i, "in", 2) == 0)
			tok->kind = TOK_IN;
		else
			tok->kind = TOK_IDENT;
	}
	else
	{
		char		c = s[i];
		char		c2 = (i + 1 < p->len) ? s[i + 1] : '\0';
		int			two = 1;

		switch (c)
		{
			case '.':
				tok->kind = TOK_DOT;
				break;
			case '[':
				tok->kind = TOK_LBRACKET;
				break;
			case ']':
				tok->kind = TOK_RBRACKET;
				break;
			case '(':
				tok->kind = TOK_LPAREN;
				break;
			case ')':
				tok->kind = TOK_RPAREN;
				break;
			case ',':
				tok->kind = TOK_COMMA;
				break;
			case '*':
				tok->kind = TOK_STAR;
				break;
			case '/':
				tok->kind = TOK_SLASH;
				break;
			case '%':
				tok->kind = TOK_PERCENT;
				break;
			case '+':
				tok->kind = TOK_PLUS;
				break;
			case '-':
				tok->kind = TOK_MINUS;
				break;
			case '?':
				tok->kind = TOK_QUESTION;
				break;
			case ':':
				tok->kind = TOK_COLON;
				break;
			case '!':
				if (c2 == '=')
					tok->kind = TOK_NE, two = 2;
				else
					tok->kind = TOK_NOT;
				break;
			case '<':
				if (c2 == '=')
					tok->kind = TOK_LE, two = 2;
				else
					tok->kind = TOK_LT;
				break;
			case '>':
				if (c2 == '=')
					tok->kind = TOK_GE, two = 2;
				else
					tok->kind = TOK_GT;
				break;
			case '=':
				if (c2 != '=')
				{
					tok->kind = lex_fail(p, i, "'=' is not an operator; use '=='");
					return;
				}
				tok->kind = TOK_EQ, two = 2;
				break;
			case '&':
				if (c2 != '&')
				{
					tok->kind = lex_fail(p, i, "'&' is not an operator; use '&&'");
					return;
				}
				tok->kind = TOK_AND, two = 2;
				break;
			case '|':
				if (c2 != '|')
				{
					tok->kind = lex_fail(p, i, "'|' is not an operator; use '||'");
					return;
				}
				tok->kind = TOK_OR, two = 2;
				break;
			default:
				if (c == '\0')
					tok->kind = lex_fail(p, i, "unexpected NUL byte");
				else if (utf8_sequence_length((const unsigned char *) s + i,
											  p->len - i) == 0)
					tok->kind = lex_fail(p, i, "invalid UTF-8");
				else
					tok->kind = lex_fail(p, i, "unexpected character");
				return;
		}
		p->lex_pos += (size_t) two;
	}
	if (tok->kind != TOK_ERROR)
		tok->length = (int) (p->lex_pos - i);
}

/*
 * The token k places after the current one, lexing on demand.  After END or
 * ERROR, that same token is returned for every further position.
 */
static token *
peek(parser *p, int k)
{
	while (p->ntokens <= p->pos + k)
	{
		if (p->ntokens > 0 &&
			(p->tokens[p->ntokens - 1].kind == TOK_END ||
			 p->tokens[p->ntokens - 1].kind == TOK_ERROR))
			return &p->tokens[p->ntokens - 1];
		if (p->ntokens == p->tokens_cap)
		{
			int			cap = p->tokens_cap ? p->tokens_cap * 2 : 32;
			token	   *t = realloc(p->tokens, (size_t) cap * sizeof(token));

			if (t == NULL)
			{
				/* fabricate an error token in place of the last one */
				lex_fail(p, p->lex_pos, "out of memory");
				if (p->ntokens == 0)
					return NULL;
				free(p->tokens[p->ntokens - 1].text);
				p->tokens[p->ntokens - 1].text = NULL;
				p->tokens[p->ntokens - 1].kind = TOK_ERROR;
				return &p->tokens[p->ntokens - 1];
			}
			p->tokens = t;
			p->tokens_cap = cap;
		}
		lex_token(p, &p->tokens[p->ntokens]);
		p->ntokens++;
	}
	return &p->tokens[p->pos + k];
}

/* Move past the current token (never past END or ERROR). */
static void
advance(parser *p)
{
	token	   *t = peek(p, 0);

	if (t != NULL && t->kind != TOK_END && t->kind != TOK_ERROR)
		p->pos++;
}

/* Byte offset just past the previously consumed token. */
static int
previous_end(parser *p)
{
	if (p->pos == 0)
		return 0;
	return p->tokens[p->pos - 1].offset + p->tokens[p->pos - 1].length;
}

/* Free the lexed tokens and any string text still owned by them. */
static void
parser_cleanup(parser *p)
{
	int			i;

	for (i = 0; i < p->ntokens; i++)
		free(p->tokens[i].text);
	free(p->tokens);
	p->tokens = NULL;
	p->ntokens = 0;
}

/* ------------------------------------------------------------------------
 * Parser
 * ------------------------------------------------------------------------ */

/* Human description of a token for "unexpected ..." messages. */
static void
describe_token(parser *p, const token *t, char *buf, size_t size)
{
	switch (t->kind)
	{
		case TOK_END:
			snprintf(buf, size, "end of expression");
			return;
		case TOK_STRING:
			snprintf(buf, size, "string literal");
			return;
		case TOK_INT:
		case TOK_DOUBLE:
			snprintf(buf, size, "number %.*s", t->length > 40 ? 40 : t->length,
					 p->src + t->offset);
			return;
		case TOK_IDENT:
			snprintf(buf, size, "identifier '%.*s'",
					 t->length > 60 ? 60 : t->length, p->src + t->offset);
			return;
		default:
			snprintf(buf, size, "'%.*s'", t->length, p->src + t->offset);
			return;
	}
}

/* Report the current token as unexpected (or the lexer's error for it). */
static void *
unexpected(parser *p, const char *expecting)
{
	token	   *t = peek(p, 0);
	char		what[100];

	if (t == NULL || t->kind == TOK_ERROR)
	{
		wfe_expr_set_error(p->err, "expr.syntax", p->lex_offset,
						   "%s at offset %d", p->lex_message, p->lex_offset);
		return NULL;
	}
	describe_token(p, t, what, sizeof(what));
	if (expecting)
		wfe_expr_set_error(p->err, "expr.syntax", t->offset,
						   "unexpected %s at offset %d; expected %s",
						   what, t->offset, expecting);
	else
		wfe_expr_set_error(p->err, "expr.syntax", t->offset,
						   "unexpected %s at offset %d", what, t->offset);
	return NULL;
}

/* Kind of the current token (TOK_ERROR if lexing ran out of memory). */
static token_kind
current_kind(parser *p)
{
	token	   *t = peek(p, 0);

	return t ? t->kind : TOK_ERROR;
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
	n->end = previous_end(p);
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
		int			offset = peek(p, 0) ? peek(p, 0)->offset : 0;

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
	if (current_kind(p) != kind)
	{
		unexpected(p, expecting);
		return -1;
	}
	advance(p);
	return 0;
}

/* Copy n bytes into a new NUL-terminated string. */
static char *
copy_text(const char *s, size_t n)
{
	char	   *r = malloc(n + 1);

	if (r != NULL)
	{
		memcpy(r, s, n);
		r[n] = '\0';
	}
	return r;
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
	token	   *name = peek(p, 0);
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
	advance(p);					/* name */
	advance(p);					/* ( */
	if (current_kind(p) == TOK_RPAREN)
	{
		wfe_expr_set_error(p->err, "expr.syntax", offset,
						   "%s() at offset %d takes exactly one argument",
						   is_has ? "has" : "size", offset);
		return NULL;
	}
	if ((arg = parse_ternary(p)) == NULL)
		return NULL;
	if (current_kind(p) == TOK_COMMA)
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
	token	   *t = peek(p, 0);
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
			advance(p);
			return make_int_literal(p, t->offset, (int64_t) t->int_value);

		case TOK_DOUBLE:
			if ((n = new_node(p, EXPR_DOUBLE, t->offset, t->offset)) == NULL)
				return NULL;
			n->double_value = t->double_value;
			n->literal = json_object_new_double(t->double_value);
			advance(p);
			return link_node(p, n, NULL, NULL, NULL);

		case TOK_STRING:
			if ((n = new_node(p, EXPR_STRING, t->offset, t->offset)) == NULL)
				return NULL;
			/* take ownership of the decoded text */
			n->str = t->text;
			n->str_len = t->text_len;
			t->text = NULL;
			n->literal = json_object_new_string_len(n->str, (int) n->str_len);
			advance(p);
			return link_node(p, n, NULL, NULL, NULL);

		case TOK_TRUE:
		case TOK_FALSE:
			if ((n = new_node(p, EXPR_BOOL, t->offset, t->offset)) == NULL)
				return NULL;
			n->bool_value = (t->kind == TOK_TRUE);
			n->literal = json_object_new_boolean(n->bool_value);
			advance(p);
			return link_node(p, n, NULL, NULL, NULL);

		case TOK_NULL:
			if ((n = new_node(p, EXPR_NULL, t->offset, t->offset)) == NULL)
				return NULL;
			advance(p);
			return link_node(p, n, NULL, NULL, NULL);

		case TOK_IDENT:
			{
				token	   *next = peek(p, 1);

				/* peek may have moved the token array */
				t = peek(p, 0);
				if (next != NULL && next->kind == TOK_LPAREN)
					return parse_call(p);
				if ((n = new_node(p, EXPR_ROOT, t->offset, t->offset)) == NULL)
					return NULL;
				n->str = copy_text(p->src + t->offset, (size_t) t->length);
				if (n->str == NULL)
				{
					wfe_expr_set_error(p->err, "expr.too_large", t->offset, "out of memory");
					return NULL;
				}
				n->str_len = (size_t) t->length;
				advance(p);
				return link_node(p, n, NULL, NULL, NULL);
			}

		case TOK_LPAREN:
			advance(p);
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
		token_kind	k = current_kind(p);
		expr_node  *m;

		if (k == TOK_DOT)
		{
			token	   *name;

			advance(p);
			name = peek(p, 0);
			/* keywords are fine as field names: JSON keys may be "in" */
			if (name == NULL ||
				(name->kind != TOK_IDENT && name->kind != TOK_TRUE &&
				 name->kind != TOK_FALSE && name->kind != TOK_NULL &&
				 name->kind != TOK_IN))
				return unexpected(p, "a field name after '.'");
			if (peek(p, 1) != NULL && peek(p, 1)->kind == TOK_LPAREN)
			{
				name = peek(p, 0);
				wfe_expr_set_error(p->err, "expr.syntax", name->offset,
								   "unknown function '%.*s' at offset %d; method calls are not supported (use size(x))",
								   name->length > 60 ? 60 : name->length,
								   p->src + name->offset, name->offset);
				return NULL;
			}
			name = peek(p, 0);
			if ((m = new_node(p, EXPR_SELECT, name->offset, n->start)) == NULL)
				return NULL;
			m->str = copy_text(p->src + name->offset, (size_t) name->length);
			if (m->str == NULL)
			{
				wfe_expr_set_error(p->err, "expr.too_large", name->offset, "out of memory");
				return NULL;
			}
			m->str_len = (size_t) name->length;
			advance(p);
			n = link_node(p, m, n, NULL, NULL);
		}
		else if (k == TOK_LBRACKET)
		{
			expr_node  *index;

			if ((m = new_node(p, EXPR_INDEX, peek(p, 0)->offset, n->start)) == NULL)
				return NULL;
			advance(p);
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
	token_kind	k = current_kind(p);
	int			offset;
	expr_node  *n;
	expr_node  *operand;

	if (k != TOK_NOT && k != TOK_MINUS)
		return parse_postfix(p);

	offset = peek(p, 0)->offset;

	/*
	 * -9223372036854775808: the literal 2^63 alone is out of range, so fold
	 * the minus into it here, unless a postfix operator binds to the literal
	 * first.
	 */
	if (k == TOK_MINUS && peek(p, 1) != NULL && peek(p, 1)->kind == TOK_INT &&
		peek(p, 1)->int_value == (uint64_t) INT64_MAX + 1 &&
		peek(p, 2) != NULL && peek(p, 2)->kind != TOK_DOT &&
		peek(p, 2)->kind != TOK_LBRACKET)
	{
		advance(p);
		advance(p);
		if ((n = make_int_literal(p, offset, INT64_MIN)) == NULL)
			return NULL;
		n->start = offset;
		return n;
	}

	if (enter_nesting(p) < 0)
		return NULL;
	if ((n = new_node(p, k == TOK_NOT ? EXPR_NOT : EXPR_NEG, offset, offset)) == NULL)
		return NULL;
	advance(p);
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

	while (left != NULL && binary_operator(current_kind(p), level, &op))
	{
		expr_node  *n;
		expr_node  *right;

		if ((n = new_node(p, EXPR_BINARY, peek(p, 0)->offset, left->start)) == NULL)
			return NULL;
		n->op = op;
		advance(p);
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

	while (left != NULL && current_kind(p) == want)
	{
		expr_node  *n;
		expr_node  *right;

		if ((n = new_node(p, is_or ? EXPR_OR : EXPR_AND, peek(p, 0)->offset,
						  left->start)) == NULL)
			return NULL;
		advance(p);
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
	if (current_kind(p) != TOK_QUESTION)
	{
		p->depth--;
		return cond;
	}
	if ((n = new_node(p, EXPR_TERNARY, peek(p, 0)->offset, cond->start)) == NULL)
		return NULL;
	advance(p);
	if ((then_branch = parse_ternary(p)) == NULL)
		return NULL;
	if (expect(p, TOK_COLON, "':' in conditional") < 0)
		return NULL;
	if ((else_branch = parse_ternary(p)) == NULL)
		return NULL;
	p->depth--;
	return link_node(p, n, cond, then_branch, else_branch);
}

/*
 * Reject source that is too long or not valid UTF-8 before lexing, so the
 * lexer may assume well-formed input.  NUL bytes are caught by the lexer.
 */
static int
check_source(const char *src, size_t len, size_t max_bytes,
			 wfe_expr_error *err)
{
	size_t		i = 0;

	if (len > max_bytes || len > (size_t) INT_MAX / 2)
	{
		wfe_expr_set_error(err, "expr.too_large", 0,
						   "expression is %lu bytes; the limit is %lu",
						   (unsigned long) len, (unsigned long) max_bytes);
		return -1;
	}
	while (i < len)
	{
		int			n = utf8_sequence_length((const unsigned char *) src + i, len - i);

		if (n == 0)
		{
			wfe_expr_set_error(err, "expr.syntax", (int) i,
							   "invalid UTF-8 at offset %d", (int) i);
			return -1;
		}
		i += (size_t) n;
	}
	return 0;
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
	if (check_source(src, len, lim.max_bytes, err) < 0)
		return NULL;

	e = calloc(1, sizeof(wfe_expr));
	if (e == NULL || (e->source = copy_text(src, len)) == NULL)
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

	if (current_kind(&p) == TOK_END)
		wfe_expr_set_error(err, "expr.syntax", 0, "empty expression");
	else if ((e->top = parse_ternary(&p)) != NULL &&
			 current_kind(&p) != TOK_END)
		e->top = unexpected(&p, "an operator or end of expression");

	parser_cleanup(&p);
	if (e->top == NULL)
	{
		wfe_expr_free(e);
		return NULL;
	}
	return e;
}

/* ------------------------------------------------------------------------
 * Reference paths
 * ------------------------------------------------------------------------ */

/* Free a path's contents; the struct itself belongs to the caller. */
void
wfe_path_free(wfe_path *path)
{
	int			i;

	if (path == NULL)
		return;
	for (i = 0; i < path->nsegments; i++)
		if (!path->segments[i].is_index)
			free(path->segments[i].key);
	free(path->segments);
	free(path->root);
	path->root = NULL;
	path->segments = NULL;
	path->nsegments = 0;
}

/* Append a segment; the key (if any) is taken over by the path. */
static int
path_append(wfe_path *path, int *cap, int is_index, long index, char *key)
{
	if (path->nsegments == *cap)
	{
		int			newcap = *cap ? *cap * 2 : 4;
		wfe_path_segment *s = realloc(path->segments,
									  (size_t) newcap * sizeof(wfe_path_segment));

		if (s == NULL)
		{
			free(key);
			return -1;
		}
		path->segments = s;
		*cap = newcap;
	}
	path->segments[path->nsegments].is_index = is_index;
	path->segments[path->nsegments].index = index;
	path->segments[path->nsegments].key = key;
	path->nsegments++;
	return 0;
}

/* Report that an interpolation is not a pure reference path. */
static int
path_syntax_error(parser *p, wfe_expr_error *err)
{
	token	   *t = peek(p, 0);
	char		what[100];

	if (t == NULL || t->kind == TOK_ERROR)
		wfe_expr_set_error(err, "expr.syntax", p->lex_offset,
						   "%s at offset %d", p->lex_message, p->lex_offset);
	else
	{
		describe_token(p, t, what, sizeof(what));
		wfe_expr_set_error(err, "expr.syntax", t->offset,
						   "interpolation must be a reference path (root followed by .field, [\"key\"] or [N]); unexpected %s at offset %d",
						   what, t->offset);
	}
	return -1;
}

/* Parse the segments after the root; 0 ok, -1 with *err. */
static int
parse_path_segments(parser *p, wfe_path *out, wfe_expr_error *err)
{
	int			cap = 0;

	for (;;)
	{
		token_kind	k = current_kind(p);
		token	   *t;

		if (k == TOK_END)
			return 0;
		if (k == TOK_DOT)
		{
			advance(p);
			t = peek(p, 0);
			if (t == NULL ||
				(t->kind != TOK_IDENT && t->kind != TOK_TRUE &&
				 t->kind != TOK_FALSE && t->kind != TOK_NULL && t->kind != TOK_IN))
				return path_syntax_error(p, err);
			if (path_append(out, &cap, 0, 0,
							copy_text(p->src + t->offset, (size_t) t->length)) < 0 ||
				out->segments[out->nsegments - 1].key == NULL)
				goto oom;
			advance(p);
		}
		else if (k == TOK_LBRACKET)
		{
			advance(p);
			t = peek(p, 0);
			if (t != NULL && t->kind == TOK_STRING)
			{
				if (path_append(out, &cap, 0, 0, t->text) < 0)
				{
					t->text = NULL;
					goto oom;
				}
				t->text = NULL;
			}
			else if (t != NULL && t->kind == TOK_INT)
			{
				if (t->int_value > (uint64_t) LONG_MAX)
				{
					wfe_expr_set_error(err, "expr.syntax", t->offset,
									   "index out of range at offset %d", t->offset);
					return -1;
				}
				if (path_append(out, &cap, 1, (long) t->int_value, NULL) < 0)
					goto oom;
			}
			else
				return path_syntax_error(p, err);
			advance(p);
			if (current_kind(p) != TOK_RBRACKET)
				return path_syntax_error(p, err);
			advance(p);
		}
		else
			return path_syntax_error(p, err);
	}

oom:
	wfe_expr_set_error(err, "expr.too_large", 0, "out of memory");
	return -1;
}

/*
 * Parse the body of a `${...}` interpolation: a root then .field, ["key"]
 * and [N] segments only.  "payload" is normalised to "context".
 */
int
wfe_path_parse(const char *src, size_t len, wfe_expr_form form,
			   wfe_path *out, wfe_expr_error *err)
{
	parser		p;
	token	   *t;
	const char *root = NULL;
	int			rc = -1;

	memset(out, 0, sizeof(*out));
	if (src == NULL)
		src = "", len = 0;
	/*
	 * No byte limit of its own: the caller applies wfe.max_expression_bytes,
	 * and path parsing is linear and never recurses.
	 */
	if (check_source(src, len, (size_t) INT_MAX / 2, err) < 0)
		return -1;

	memset(&p, 0, sizeof(p));
	p.src = src;
	p.len = len;
	p.err = err;

	t = peek(&p, 0);
	if (t == NULL || t->kind != TOK_IDENT)
	{
		if (t != NULL && t->kind == TOK_END)
			wfe_expr_set_error(err, "expr.syntax", 0, "empty interpolation");
		else
			path_syntax_error(&p, err);
		goto done;
	}
	if (peek(&p, 1) != NULL && peek(&p, 1)->kind == TOK_LPAREN)
	{
		t = peek(&p, 0);
		wfe_expr_set_error(err, "expr.syntax", t->offset,
						   "interpolation must be a reference path; function calls are not allowed (offset %d)",
						   t->offset);
		goto done;
	}
	t = peek(&p, 0);
	if (t->length == 7 && memcmp(src + t->offset, "context", 7) == 0)
		root = "context";
	else if (t->length == 7 && memcmp(src + t->offset, "payload", 7) == 0)
		root = "context";
	else if (t->length == 3 && memcmp(src + t->offset, "run", 3) == 0)
		root = "run";
	else if (t->length == 6 && memcmp(src + t->offset, "stages", 6) == 0)
		root = "stages";
	else if (t->length == 7 && memcmp(src + t->offset, "outputs", 7) == 0)
		root = "outputs";
	{
		int			root_offset = t->offset;
		int			root_length = t->length;

		advance(&p);
		if (parse_path_segments(&p, out, err) < 0)
			goto done;
		if (root == NULL ||
			(form == WFE_FORM_STAGES && strcmp(root, "outputs") == 0) ||
			(form == WFE_FORM_TASKS && strcmp(root, "stages") == 0))
		{
			wfe_expr_set_error(err, "expr.unknown_root", root_offset,
							   "%s root '%.*s' at offset %d; expected %s",
							   root == NULL ? "unknown" : "unavailable",
							   root_length > 60 ? 60 : root_length,
							   src + root_offset, root_offset,
							   form == WFE_FORM_STAGES ?
							   "context, payload, stages or run" :
							   "context, payload, outputs or run");
			goto done;
		}
	}
	if ((out->root = copy_text(root, strlen(root))) == NULL)
	{
		wfe_expr_set_error(err, "expr.too_large", 0, "out of memory");
		goto done;
	}
	rc = 0;

done:
	parser_cleanup(&p);
	if (rc < 0)
		wfe_path_free(out);
	return rc;
}
