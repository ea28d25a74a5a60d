/*
 * expr_path.c — the parser for the body of a `${...}` interpolation: a
 * reference path, i.e. a root followed by .field, ["key"] and [N] segments
 * only, lexed with the expression lexer (expr_lex.c).
 */
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "expr_lex.h"

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
	token	   *t = expr_peek(p, 0);
	char		what[100];

	if (t == NULL || t->kind == TOK_ERROR)
		wfe_expr_set_error(err, "expr.syntax", p->lex_offset,
						   "%s at offset %d", p->lex_message, p->lex_offset);
	else
	{
		expr_describe_token(p, t, what, sizeof(what));
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
		token_kind	k = expr_current_kind(p);
		token	   *t;

		if (k == TOK_END)
			return 0;
		if (k == TOK_DOT)
		{
			expr_advance(p);
			t = expr_peek(p, 0);
			if (t == NULL ||
				(t->kind != TOK_IDENT && t->kind != TOK_TRUE &&
				 t->kind != TOK_FALSE && t->kind != TOK_NULL && t->kind != TOK_IN))
				return path_syntax_error(p, err);
			if (path_append(out, &cap, 0, 0,
							expr_copy_text(p->src + t->offset, (size_t) t->length)) < 0 ||
				out->segments[out->nsegments - 1].key == NULL)
				goto oom;
			expr_advance(p);
		}
		else if (k == TOK_LBRACKET)
		{
			expr_advance(p);
			t = expr_peek(p, 0);
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
			expr_advance(p);
			if (expr_current_kind(p) != TOK_RBRACKET)
				return path_syntax_error(p, err);
			expr_advance(p);
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
	if (expr_check_source(src, len, (size_t) INT_MAX / 2, err) < 0)
		return -1;

	memset(&p, 0, sizeof(p));
	p.src = src;
	p.len = len;
	p.err = err;

	t = expr_peek(&p, 0);
	if (t == NULL || t->kind != TOK_IDENT)
	{
		if (t != NULL && t->kind == TOK_END)
			wfe_expr_set_error(err, "expr.syntax", 0, "empty interpolation");
		else
			path_syntax_error(&p, err);
		goto done;
	}
	if (expr_peek(&p, 1) != NULL && expr_peek(&p, 1)->kind == TOK_LPAREN)
	{
		t = expr_peek(&p, 0);
		wfe_expr_set_error(err, "expr.syntax", t->offset,
						   "interpolation must be a reference path; function calls are not allowed (offset %d)",
						   t->offset);
		goto done;
	}
	t = expr_peek(&p, 0);
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
	/* a map's element roots: parsed everywhere, legal only in its item input (refs.c) */
	else if (t->length == 4 && memcmp(src + t->offset, "item", 4) == 0)
		root = "item";
	else if (t->length == 10 && memcmp(src + t->offset, "item_index", 10) == 0)
		root = "item_index";
	{
		int			root_offset = t->offset;
		int			root_length = t->length;

		expr_advance(&p);
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
	if ((out->root = expr_copy_text(root, strlen(root))) == NULL)
	{
		wfe_expr_set_error(err, "expr.too_large", 0, "out of memory");
		goto done;
	}
	rc = 0;

done:
	expr_parser_cleanup(&p);
	if (rc < 0)
		wfe_path_free(out);
	return rc;
}

/*
 * Index of the '}' closing the interpolation whose body starts at `from`, or
 * len if there is none.  Quoted keys may contain braces (["a}b"]).  The one
 * rule the compiler (refs.c), the binder (bind.c) and the run plan
 * (runplan.c) share, so all three see the same references.
 */
size_t
wfe_interp_close(const char *s, size_t len, size_t from)
{
	char		quote = 0;
	size_t		j;

	for (j = from; j < len; j++)
	{
		if (quote)
		{
			if (s[j] == '\\' && j + 1 < len)
				j++;
			else if (s[j] == quote)
				quote = 0;
		}
		else if (s[j] == '"' || s[j] == '\'')
			quote = s[j];
		else if (s[j] == '}')
			break;
	}
	return j;
}
