/*
 * expr.h — the CEL subset used by decision `when` clauses and `${...}` paths.
 *
 * Plain C99 over json-c: no PostgreSQL headers, so the same code serves the
 * extension, the wfe-compile CLI, the unit tests and the fuzzer.
 */
#ifndef WFE_EXPR_H
#define WFE_EXPR_H

#include <stddef.h>
#include <stdint.h>
#include <json-c/json.h>

/* Bounds applied while parsing and evaluating (dsl.md, "Expressions"). */
typedef struct wfe_expr_limits
{
	size_t		max_bytes;		/* source length; default 4096 */
	int			max_nodes;		/* AST nodes; default 256 */
	int			max_steps;		/* evaluation steps; default 10000 */
} wfe_expr_limits;

#define WFE_EXPR_DEFAULT_MAX_BYTES 4096
#define WFE_EXPR_DEFAULT_MAX_NODES 256
#define WFE_EXPR_DEFAULT_MAX_STEPS 10000

/* Which document form the expression lives in: decides the legal roots. */
typedef enum wfe_expr_form
{
	WFE_FORM_STAGES,			/* roots: context, payload, stages, run */
	WFE_FORM_TASKS				/* roots: context, payload, outputs, run */
} wfe_expr_form;

/*
 * An error from parse, check or eval.  `code` is one of the diagnostic codes
 * "expr.syntax", "expr.too_large", "expr.unknown_root", "expr.type" (compile
 * time) or "expr.eval" (run time).  `offset` is the 0-based byte offset in the
 * source where the problem is (best effort; 0 if unknown).
 */
typedef struct wfe_expr_error
{
	const char *code;
	char		message[256];
	int			offset;
} wfe_expr_error;

typedef struct wfe_expr wfe_expr;	/* opaque AST */

/* Parse; NULL on failure with *err filled (expr.syntax or expr.too_large). */
extern wfe_expr *wfe_expr_parse(const char *src, size_t len,
								const wfe_expr_limits *limits,
								wfe_expr_error *err);

/* Free an AST (NULL is fine). */
extern void wfe_expr_free(wfe_expr *e);

/* Callback for each reference to a stage's result: stages["x"] or stages.x */
typedef void (*wfe_stage_ref_cb) (void *arg, const char *stage, int offset);

/*
 * Static checks: every root is legal for the form (expr.unknown_root), and
 * no operator is applied to literals of a type it cannot take (expr.type:
 * e.g. `"a" - 1`, `!3`, `size(true)`, `1 && x`).  Calls on_stage_ref for every
 * stage reference (so the compiler can check lineage).  Returns 0 when clean,
 * else -1 with *err filled for the first problem found.
 */
extern int	wfe_expr_check(const wfe_expr *e, wfe_expr_form form,
						   wfe_stage_ref_cb on_stage_ref, void *arg,
						   wfe_expr_error *err);

/*
 * Evaluate over `root`, a JSON object with members "context", "stages"
 * ({name: {"result": ...}}), "outputs", "run"; `payload` aliases "context".
 * On success returns 0 and *out is a new reference (caller puts it; JSON null
 * is returned as NULL with return 0).  On failure returns -1 with code
 * "expr.eval": missing field without has(), type mismatch, division by zero,
 * integer overflow, step budget exhausted.
 */
extern int	wfe_expr_eval(const wfe_expr *e, json_object *root,
						  const wfe_expr_limits *limits,
						  json_object **out, wfe_expr_error *err);

/* Evaluate and require a boolean: 1 true, 0 false, -1 error (expr.eval). */
extern int	wfe_expr_eval_bool(const wfe_expr *e, json_object *root,
							   const wfe_expr_limits *limits,
							   wfe_expr_error *err);

/*
 * A reference path, the body of an interpolation `${...}`: a root followed by
 * field selections and indexes only, e.g. context.modelId,
 * stages["cache-lookup"].result.hit, outputs.restore_session.user_session,
 * run.id, context.items[0].
 */
typedef struct wfe_path_segment
{
	int			is_index;		/* 1: array index, 0: object key */
	long		index;
	char	   *key;			/* malloc'd when !is_index */
} wfe_path_segment;

typedef struct wfe_path
{
	char	   *root;			/* "context" ("payload" is normalised to it), "stages", "outputs", "run" */
	int			nsegments;
	wfe_path_segment *segments;	/* malloc'd */
} wfe_path;

/*
 * Parse a path; 0 ok, -1 with *err (expr.syntax if not a pure path,
 * expr.unknown_root if the root is not legal for the form).
 */
extern int	wfe_path_parse(const char *src, size_t len, wfe_expr_form form,
						   wfe_path *out, wfe_expr_error *err);
extern void wfe_path_free(wfe_path *p);

/* Result of resolving a path against JSON: distinct missing and null. */
typedef enum wfe_path_status
{
	WFE_PATH_FOUND,
	WFE_PATH_NULL,				/* the value is JSON null */
	WFE_PATH_MISSING			/* some segment does not exist */
} wfe_path_status;

/*
 * In an interpolating string: the index of the '}' closing the `${` body
 * that starts at `from`, or len when it is not closed.
 */
extern size_t wfe_interp_close(const char *s, size_t len, size_t from);

/* Resolve against the same root object as wfe_expr_eval; *out is borrowed. */
extern wfe_path_status wfe_path_resolve(const wfe_path *p, json_object *root,
										json_object **out);

/*
 * Parse an RFC 3339 timestamp (CEL's timestamp() accepts the same): 0 with
 * seconds since the epoch and nanoseconds; -1 with a reason in why.
 */
extern int	wfe_timestamp_parse(const char *s, size_t len, int64_t *sec, int32_t *nsec,
								char *why, size_t whylen);

#endif							/* WFE_EXPR_H */
