/*
 * expr_match.c — CEL's matches(): RE2-syntax regular expressions, searched
 * in time linear in the input by wfe's engine (regex.h: a Pike VM, never a
 * backtracking engine), with every engine step charged to the expression's
 * step budget.
 *
 * The engine reads JSON Schema's ECMA-262 dialect.  RE2 and ECMA-262 agree
 * on the common core (literals, ., classes, \d \w \s, anchors, groups,
 * alternation, greedy and lazy quantifiers); where RE2 means something the
 * engine would read differently, the pattern is translated (\A, \z, \a,
 * \x{...}, \pL, \p{^Greek}) or refused with a diagnostic (POSIX classes
 * [[:alpha:]], \Q...\E, \C, other letter escapes), so a pattern
 * never silently means something else.  Flags ((?i)), backreferences and
 * lookaround are refused by the engine itself.  docs/dsl.md lists this.
 *
 * A literal pattern is compiled once, by the parser (an invalid one is
 * expr.syntax at compile time); a computed one is compiled per call.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "expr_internal.h"
#include "core/jsonschema/regex.h"

/* Upper bound on a pattern's length (bytes), before translation. */
#define MATCH_MAX_PATTERN 4096

/*
 * Translate an RE2 pattern into the engine's dialect in out (capacity at
 * least 2 * len + 8).  0 ok; -1 with a message naming the offset.
 */
static int
translate_re2(const char *pat, size_t len, char *out, size_t *outlen,
			  char *why, size_t whylen)
{
	size_t		i = 0;
	size_t		o = 0;
	int			in_class = 0;

	while (i < len)
	{
		char		c = pat[i];

		if (c == '[' && !in_class)
		{
			if (i + 1 < len && pat[i + 1] == '[' && i + 2 < len && pat[i + 2] == ':')
			{
				snprintf(why, whylen, "POSIX classes such as [[:alpha:]] at offset %zu are not supported; use [a-zA-Z]", i);
				return -1;
			}
			in_class = 1;
			out[o++] = c;
			i++;
			/* a ']' or '^]' right after '[' is a literal */
			if (i < len && pat[i] == '^')
				out[o++] = pat[i++];
			if (i < len && pat[i] == ']')
				out[o++] = pat[i++];
			continue;
		}
		if (c == '[' && in_class && i + 1 < len && pat[i + 1] == ':')
		{
			snprintf(why, whylen, "POSIX classes such as [:alpha:] at offset %zu are not supported", i);
			return -1;
		}
		if (c == ']' && in_class)
			in_class = 0;
		if (c != '\\')
		{
			out[o++] = c;
			i++;
			continue;
		}
		if (i + 1 >= len)
		{
			snprintf(why, whylen, "trailing backslash at offset %zu", i);
			return -1;
		}
		c = pat[i + 1];
		if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'))
		{
			switch (c)
			{
				case 'f':
				case 'n':
				case 'r':
				case 't':
				case 'v':
				case 'd':
				case 'D':
				case 's':
				case 'S':
				case 'w':
				case 'W':
				case 'b':
				case 'B':
					out[o++] = '\\';
					out[o++] = c;
					i += 2;
					continue;
				case 'a':		/* RE2: bell */
					memcpy(out + o, "\\x07", 4);
					o += 4;
					i += 2;
					continue;
				case 'A':		/* RE2: beginning of text */
				case 'z':		/* RE2: end of text */
					if (in_class)
					{
						snprintf(why, whylen, "\\%c at offset %zu is not allowed in a class", c, i);
						return -1;
					}
					out[o++] = c == 'A' ? '^' : '$';
					i += 2;
					continue;
				case 'x':
					if (i + 2 < len && pat[i + 2] == '{')
					{
						/* \x{10FFFF} is the engine's \u{10FFFF} */
						memcpy(out + o, "\\u", 2);
						o += 2;
						i += 2;
						continue;
					}
					out[o++] = '\\';
					out[o++] = 'x';
					i += 2;
					continue;
				case 'p':
				case 'P':

					/*
					 * RE2's Unicode classes \pL, \p{Greek} and \p{^Greek}
					 * (negated) are the engine's \p{L}, \p{Greek} and
					 * \P{Greek}; the engine checks the name.
					 */
					if (i + 2 < len && pat[i + 2] == '{')
					{
						const char *close = memchr(pat + i + 3, '}', len - i - 3);
						size_t		from = i + 3;
						int			negate = 0;

						if (close == NULL)
						{
							snprintf(why, whylen, "unterminated \\%c{ at offset %zu", c, i);
							return -1;
						}
						if (from < len && pat[from] == '^')
							negate = 1, from++;
						out[o++] = '\\';
						out[o++] = negate ? (c == 'p' ? 'P' : 'p') : c;
						out[o++] = '{';
						memcpy(out + o, pat + from, (size_t) (close - pat) - from);
						o += (size_t) (close - pat) - from;
						out[o++] = '}';
						i = (size_t) (close - pat) + 1;
						continue;
					}
					if (i + 2 < len && ((pat[i + 2] >= 'A' && pat[i + 2] <= 'Z') ||
										(pat[i + 2] >= 'a' && pat[i + 2] <= 'z')))
					{
						out[o++] = '\\';
						out[o++] = c;
						out[o++] = '{';
						out[o++] = pat[i + 2];
						out[o++] = '}';
						i += 3;
						continue;
					}
					snprintf(why, whylen, "\\%c at offset %zu must name a Unicode class (\\pL, \\p{Greek})",
							 c, i);
					return -1;
				default:
					snprintf(why, whylen,
							 "\\%c at offset %zu is not supported in matches() patterns (%s)",
							 c, i,
							 c == 'Q' || c == 'E' ? "quote the characters with \\ instead" :
							 "not an RE2 escape wfe implements");
					return -1;
			}
		}
		/* escaped punctuation and digits: the engine reads them as RE2 does */
		out[o++] = '\\';
		out[o++] = c;
		i += 2;
	}
	out[o] = '\0';
	*outlen = o;
	return 0;
}

/* Compile an RE2 pattern; NULL with a message on failure. */
static wfe_regex *
compile_re2(const char *pat, size_t len, char *why, size_t whylen)
{
	char	   *buf;
	size_t		n;
	wfe_regex  *re = NULL;

	if (len > MATCH_MAX_PATTERN)
	{
		snprintf(why, whylen, "pattern is longer than %d bytes", MATCH_MAX_PATTERN);
		return NULL;
	}
	if ((buf = malloc(2 * len + 8)) == NULL)
	{
		snprintf(why, whylen, "out of memory");
		return NULL;
	}
	if (translate_re2(pat, len, buf, &n, why, whylen) == 0)
		re = wfe_regex_compile(buf, n, why, whylen);
	free(buf);
	return re;
}

/*
 * Called by the parser for each matches() call: a string-literal pattern is
 * compiled now, so an invalid one is a compile-time diagnostic.
 */
int
expr_regex_prepare(expr_node *n, wfe_expr_error *err)
{
	const expr_node *pattern = n->left != NULL ? n->args[0] : n->args[1];
	char		why[200];

	if (pattern->kind != EXPR_STRING)
		return 0;
	n->regex = compile_re2(pattern->str, pattern->str_len, why, sizeof(why));
	if (n->regex == NULL)
	{
		wfe_expr_set_error(err, "expr.syntax", pattern->offset,
						   "invalid regular expression in matches() at offset %d: %s",
						   pattern->offset, why);
		return -1;
	}
	return 0;
}

/* Free a compiled pattern. */
void
expr_regex_release(struct wfe_regex *re)
{
	wfe_regex_free(re);
}

/* s.matches(re) / matches(s, re): does the pattern match anywhere in s? */
int
eval_matches(eval_context *cx, const expr_node *n, const cel_value *s,
			 const cel_value *pattern, cel_value *out)
{
	wfe_regex  *re = n->regex;
	wfe_regex  *own = NULL;
	long		budget;
	long		before;
	int			rc;

	if (s->kind != CEL_STRING || pattern->kind != CEL_STRING)
		return eval_no_overload(cx, n->offset, "matches()", s, pattern);
	if (re == NULL)
	{
		char		why[200];

		/* compiling costs about one step per pattern byte */
		if (eval_charge(cx, (long) (pattern->v.s.len / 8 + 1), n->offset) < 0)
			return -1;
		own = re = compile_re2(pattern->v.s.ptr, pattern->v.s.len, why, sizeof(why));
		if (re == NULL)
			return eval_error(cx, n->offset, "matches() at offset %d: invalid regular expression: %s",
							  n->offset, why);
	}
	before = budget = cx->max_steps - cx->steps;
	rc = wfe_regex_search(re, s->v.s.ptr, s->v.s.len, &budget);
	wfe_regex_free(own);
	/* the engine's steps are evaluation steps */
	cx->steps += before - budget;
	if (rc < 0)
	{
		cx->steps = cx->max_steps;
		cx->fatal = 1;
		return eval_error(cx, n->offset,
						  "evaluation step budget of %ld exhausted at offset %d (in matches())",
						  cx->max_steps, n->offset);
	}
	memset(out, 0, sizeof(*out));
	out->kind = CEL_BOOL;
	out->v.b = rc == 1;
	return 0;
}
