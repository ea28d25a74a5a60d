/*
 * bind.h — the run-time half of the language: binding a stage's input
 * template (`${PATH}` interpolation) and evaluating a decision's branches.
 *
 * Both work over the evaluation root, a JSON object
 *   {"context": {...}, "stages": {name: {"result": ...}},
 *    "outputs": {task: {key: value}},
 *    "run": {"id", "tenant", "workflow", "version"}}
 * the same one wfe_expr_eval takes (expr.h).
 *
 * Plain C99 over json-c, but this header only forward-declares json-c's
 * type, so PostgreSQL-facing files can include it (PostgreSQL declares a SQL
 * function named json_object, which clashes with json-c's typedef).
 */
#ifndef WFE_BIND_H
#define WFE_BIND_H

#include <stddef.h>

struct json_object;
struct wfe_expr_limits;			/* expr.h; NULL means the defaults */

/* Binding failure codes (runtime.md, "Binding failures"). */
#define WFE_BIND_MISSING	"binding.missing"	/* the path does not exist */
#define WFE_BIND_NULL		"binding.null"	/* the value is JSON null */
#define WFE_BIND_TYPE		"binding.type"	/* not interpolable, or input schema */
/* Not a binding problem: the input schema is not in the subset. */
#define WFE_BIND_BAD_SCHEMA	"schema.invalid"

/* Templates nest at most this deep (the YAML loader allows 64). */
#define WFE_BIND_MAX_DEPTH	128

/* What went wrong with a binding. */
typedef struct wfe_bind_error
{
	const char *code;			/* one of the WFE_BIND_* codes */
	char		message[512];	/* names the input key path */
} wfe_bind_error;

/*
 * Bind `tmpl` (the stage's input template from the plan) over `root`.
 *
 * Every string value (not key) of the template, however deeply nested, is
 * interpolated: a string that is exactly one `${PATH}` becomes the
 * referenced JSON value with its type; references inside a longer string are
 * replaced by their text (strings as they are, numbers in shortest form,
 * true/false) and must be scalars; `$${` is a literal `${`.  PATH is parsed
 * with wfe_path_parse, in the stages form or else the tasks form.
 *
 * When `input_schema` is not NULL the bound input must satisfy it; a
 * violation's message names the schema as `whose` says (NULL: "contract
 * input schema"; a child's: "context_schema of the child workflow
 * NAME@VERSION").
 *
 * Returns a new object (caller frees it with wfe_json_free), or NULL with
 * *err filled: binding.missing, binding.null or binding.type, with a message
 * such as `input.modelId: ${context.modelId} is missing`; or schema.invalid
 * when `input_schema` itself is malformed.
 */
extern struct json_object *wfe_bind_input(struct json_object *tmpl,
										  struct json_object *root,
										  struct json_object *input_schema,
										  const char *whose,
										  wfe_bind_error *err);

/* The outcome of a decision. */
typedef struct wfe_decision
{
	int			ok;				/* 1: a branch was taken */
	int			branch;			/* the taken or failing branch; -1 none */
	char		next[256];		/* the taken branch's target, when ok */
	const char *code;			/* "expr.eval" when !ok */
	char		message[512];	/* why, when !ok */
} wfe_decision;

/*
 * Evaluate a decision's branches, the plan's [{"when": EXPR, "next": STAGE},
 * ...], in order over `root`; the first whose `when` is true is taken.  A
 * parse error, an evaluation error (expr.eval: missing field without has(),
 * type mismatch, division by zero, step budget) or a non-boolean result
 * stops at that branch with d->ok = 0 and code "expr.eval"; so does no
 * branch being true (branch -1: a compiled plan always ends with "true").
 *
 * Returns 0 when *d says what happened, -1 when `branches` is not such a
 * list (d->message says why).
 */
extern int	wfe_eval_decision(struct json_object *branches,
							  struct json_object *root,
							  const struct wfe_expr_limits *limits,
							  wfe_decision *d);

#endif							/* WFE_BIND_H */
