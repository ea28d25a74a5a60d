/*
 * expr_lex.c — lexer for CEL expressions, shared by the expression parser
 * (expr_parse.c) and the `${...}` reference-path parser (expr_path.c).
 *
 * Source is checked for length and UTF-8 validity up front
 * (expr_check_source); tokens are then lexed on demand into the parser's
 * token buffer (expr_peek), so the first problem in source order, lexical
 * or syntactic, is the one reported.  A lexing error becomes a TOK_ERROR
 * token whose message is kept in the parser struct.
 */
#include <errno.h>
#include <limits.h>
#include <locale.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "expr_lex.h"
#include "core/base/hex.h"
#include "core/base/utf8.h"

/* ------------------------------------------------------------------------
 * Lexer
 * ------------------------------------------------------------------------ */

/* Can c start an identifier?  ASCII letters and underscore. */
static int
is_ident_start(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}

/* Can c continue an identifier?  Letters, underscore and digits. */
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
 * Lex a quoted string starting at the quote (p->lex_pos); decodes escapes
 * into a malloc'd buffer.  Single, double and triple quotes (three ' or
 * three ", which may span lines); `raw` (the r"..." prefix) keeps
 * backslashes as written.  Escapes are CEL's: \\ \' \" \` \? \a \b \f \n \r
 * \t \v, \xHH, \uHHHH, \UHHHHHHHH and octal \ooo.  NUL (raw or escaped) is
 * refused so decoded strings are safe as C strings and JSON object keys.
 */
static token_kind
lex_string(parser *p, token *tok, int raw)
{
	const char *s = p->src;
	size_t		i = p->lex_pos;
	char		quote = s[i];
	int			triple = (i + 2 < p->len && s[i + 1] == quote && s[i + 2] == quote);
	char	   *buf;
	size_t		out = 0;

	/* escapes never expand, so the remaining source length is enough */
	buf = malloc(p->len - i + 1);
	if (buf == NULL)
		return lex_fail(p, i, "out of memory");
	i += triple ? 3 : 1;
	for (;;)
	{
		unsigned int cp;
		int			seq;

		if (i >= p->len || (!triple && (s[i] == '\n' || s[i] == '\r')))
		{
			free(buf);
			return lex_fail(p, tok->offset, "unterminated string literal");
		}
		if (s[i] == quote && (!triple ||
							  (i + 2 < p->len && s[i + 1] == quote && s[i + 2] == quote)))
		{
			i += triple ? 3 : 1;
			break;
		}
		if (s[i] == '\0')
		{
			free(buf);
			return lex_fail(p, i, "NUL byte in string literal");
		}
		if (s[i] != '\\' || raw)
		{
			seq = wfe_utf8_decode((const unsigned char *) s + i, p->len - i, NULL);
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
							wfe_hex_value(s[i + 2 + k]) : -1;

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
		out += (size_t) wfe_utf8_encode(cp, buf + out);
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
 * Finish an integer literal whose digits end at i: an optional u/U suffix
 * makes it a uint; without one it must fit int (up to 2^63, see lex_number).
 */
static token_kind
lex_int_suffix(parser *p, token *tok, size_t start, size_t i, uint64_t v)
{
	const char *s = p->src;
	int			is_uint = 0;

	if (i < p->len && (s[i] == 'u' || s[i] == 'U'))
	{
		is_uint = 1;
		i++;
	}
	if (i < p->len && is_ident_char(s[i]))
		return lex_fail(p, start, "invalid number literal");
	if (!is_uint && v > (uint64_t) INT64_MAX + 1)
		return lex_fail(p, start, "integer literal out of range (a uint literal needs the suffix u)");
	tok->int_value = v;
	p->lex_pos = i;
	return is_uint ? TOK_UINT : TOK_INT;
}

/*
 * Lex a number: decimal or 0x hex integer with an optional u/U suffix
 * (uint), or a double (digits '.' digits and/or an exponent).  int literals
 * above 2^63 are refused (lex_int_suffix); 2^63 itself is let through only
 * so that -9223372036854775808 can be written.  uint goes up to 2^64-1.
 */
static token_kind
lex_number(parser *p, token *tok)
{
	const char *s = p->src;
	size_t		start = p->lex_pos;
	size_t		i = start;
	int			is_double = 0;

	if (s[i] == '0' && i + 1 < p->len && (s[i + 1] == 'x' || s[i + 1] == 'X'))
	{
		uint64_t	v = 0;

		i += 2;
		if (i >= p->len || wfe_hex_value(s[i]) < 0)
			return lex_fail(p, start, "invalid hex literal");
		while (i < p->len && wfe_hex_value(s[i]) >= 0)
		{
			if (v > (UINT64_MAX - (uint64_t) wfe_hex_value(s[i])) / 16)
				return lex_fail(p, start, "integer literal out of range");
			v = v * 16 + (uint64_t) wfe_hex_value(s[i]);
			i++;
		}
		return lex_int_suffix(p, tok, start, i, v);
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
	if (i < p->len && is_ident_char(s[i]) &&
		(is_double || (s[i] != 'u' && s[i] != 'U')))
		return lex_fail(p, start, "invalid number literal");

	if (is_double)
	{
		if (parse_double_literal(s + start, i - start, &tok->double_value) < 0)
			return lex_fail(p, start, "double literal out of range or too long");
		p->lex_pos = i;
		return TOK_DOUBLE;
	}
	else
	{
		uint64_t	v = 0;
		size_t		k;

		for (k = start; k < i; k++)
		{
			uint64_t	d = (uint64_t) (s[k] - '0');

			if (v > (UINT64_MAX - d) / 10)
				return lex_fail(p, start, "integer literal out of range");
			v = v * 10 + d;
		}
		return lex_int_suffix(p, tok, start, i, v);
	}
}

/*
 * A backtick-quoted field name, `content-type`, for map keys that are not
 * identifiers (cel-spec's escaped field selection): any characters but a
 * backtick, a newline or NUL, at least one.
 */
static token_kind
lex_quoted_field(parser *p, token *tok)
{
	const char *s = p->src;
	size_t		start = p->lex_pos + 1;
	size_t		i = start;

	while (i < p->len && s[i] != '`' && s[i] != '\n' && s[i] != '\r' && s[i] != '\0')
		i++;
	if (i >= p->len || s[i] != '`')
		return lex_fail(p, p->lex_pos, "unterminated `quoted field name`");
	if (i == start)
		return lex_fail(p, p->lex_pos, "empty `quoted field name`");
	tok->text = expr_copy_text(s + start, i - start);
	if (tok->text == NULL)
		return lex_fail(p, p->lex_pos, "out of memory");
	tok->text_len = i - start;
	p->lex_pos = i + 1;
	return TOK_QFIELD;
}

/* True at b"...", br"...", rb"..." (any case, either quote): bytes. */
static int
is_bytes_prefix(const char *s, size_t avail)
{
#define IS_B(c) ((c) == 'b' || (c) == 'B')
#define IS_R(c) ((c) == 'r' || (c) == 'R')
#define IS_Q(c) ((c) == '"' || (c) == '\'')
	if (avail >= 2 && IS_B(s[0]) && IS_Q(s[1]))
		return 1;
	if (avail >= 3 && ((IS_B(s[0]) && IS_R(s[1])) || (IS_R(s[0]) && IS_B(s[1]))) &&
		IS_Q(s[2]))
		return 1;
	return 0;
#undef IS_B
#undef IS_R
#undef IS_Q
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
		tok->kind = lex_string(p, tok, 0);
	else if ((s[i] == 'r' || s[i] == 'R') && i + 1 < p->len &&
			 (s[i + 1] == '"' || s[i + 1] == '\''))
	{
		p->lex_pos++;
		tok->kind = lex_string(p, tok, 1);
	}
	else if (is_bytes_prefix(s + i, p->len - i))
	{
		tok->kind = lex_fail(p, i, "bytes literals are not supported (wfe expressions work over JSON, which has no bytes)");
		return;
	}
	else if ((s[i] >= '0' && s[i] <= '9') ||
			 (s[i] == '.' && i + 1 < p->len && s[i + 1] >= '0' && s[i + 1] <= '9'))
		tok->kind = lex_number(p, tok);	/* .5 is a double, as in CEL */
	else if (s[i] == '`')
		tok->kind = lex_quoted_field(p, tok);
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
			case '{':
				tok->kind = TOK_LBRACE;
				break;
			case '}':
				tok->kind = TOK_RBRACE;
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
				else if (wfe_utf8_decode((const unsigned char *) s + i,
										  p->len - i, NULL) == 0)
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

/* ------------------------------------------------------------------------
 * Token buffer
 * ------------------------------------------------------------------------ */

/*
 * The token k places after the current one, lexing on demand.  After END or
 * ERROR, that same token is returned for every further position.
 */
token *
expr_peek(parser *p, int k)
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
void
expr_advance(parser *p)
{
	token	   *t = expr_peek(p, 0);

	if (t != NULL && t->kind != TOK_END && t->kind != TOK_ERROR)
		p->pos++;
}

/* Kind of the current token (TOK_ERROR if lexing ran out of memory). */
token_kind
expr_current_kind(parser *p)
{
	token	   *t = expr_peek(p, 0);

	return t ? t->kind : TOK_ERROR;
}

/* Byte offset just past the previously consumed token. */
int
expr_previous_end(parser *p)
{
	if (p->pos == 0)
		return 0;
	return p->tokens[p->pos - 1].offset + p->tokens[p->pos - 1].length;
}

/* Human description of a token for "unexpected ..." messages. */
void
expr_describe_token(parser *p, const token *t, char *buf, size_t size)
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
		case TOK_UINT:
		case TOK_DOUBLE:
			snprintf(buf, size, "number %.*s", t->length > 40 ? 40 : t->length,
					 p->src + t->offset);
			return;
		case TOK_QFIELD:
			snprintf(buf, size, "quoted field name");
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

/* Free the lexed tokens and any string text still owned by them. */
void
expr_parser_cleanup(parser *p)
{
	int			i;

	for (i = 0; i < p->ntokens; i++)
		free(p->tokens[i].text);
	free(p->tokens);
	p->tokens = NULL;
	p->ntokens = 0;
}

/* ------------------------------------------------------------------------
 * Helpers shared by the parsers
 * ------------------------------------------------------------------------ */

/*
 * Reject source that is too long or not valid UTF-8 before lexing, so the
 * lexer may assume well-formed input.  NUL bytes are caught by the lexer.
 */
int
expr_check_source(const char *src, size_t len, size_t max_bytes,
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
		int			n = wfe_utf8_decode((const unsigned char *) src + i, len - i, NULL);

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

/* Copy n bytes into a new NUL-terminated string. */
char *
expr_copy_text(const char *s, size_t n)
{
	char	   *r = malloc(n + 1);

	if (r != NULL)
	{
		memcpy(r, s, n);
		r[n] = '\0';
	}
	return r;
}
