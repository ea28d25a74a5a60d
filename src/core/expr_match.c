/*
 * expr_match.c — CEL's matches(): RE2-syntax regular expressions searched
 * in time linear in the input.
 *
 * This build has no linear-time regex engine yet, so the parser refuses
 * every matches() call (expr.syntax) rather than fall back to a
 * backtracking engine, which dsl.md forbids.
 */
#include <stdlib.h>

#include "expr_internal.h"

/* Called by the parser for each matches() call: refused in this build. */
int
expr_regex_prepare(expr_node *n, wfe_expr_error *err)
{
	wfe_expr_set_error(err, "expr.syntax", n->offset,
					   "matches() at offset %d is not available: this build of wfe has no linear-time regular expression engine",
					   n->offset);
	return -1;
}

/* Free a compiled pattern (none exist in this build). */
void
expr_regex_release(struct wfe_regex *re)
{
	(void) re;
}

/* matches(): unreachable in this build, since the parser refuses it. */
int
eval_matches(eval_context *cx, const expr_node *n, const cel_value *s,
			 const cel_value *pattern, cel_value *out)
{
	(void) s;
	(void) pattern;
	(void) out;
	return eval_error(cx, n->offset, "matches() is not available in this build");
}
