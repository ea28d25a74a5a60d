/*
 * compile.h — the public face of the definition compiler core.
 *
 * The core is plain C99 over libyaml and json-c with no PostgreSQL headers:
 * the extension, the wfe-compile CLI, the unit tests and the fuzzer all link
 * the same objects, so a digest printed by the CLI is the database's digest.
 */
#ifndef WFE_COMPILE_H
#define WFE_COMPILE_H

#include <stddef.h>

#include "core/base/json.h"

#define WFE_DSL_VERSION "1"
#ifndef WFE_COMPILER_VERSION
#define WFE_COMPILER_VERSION "0.1.0"
#endif

/* SHA-256 provider: the extension passes PostgreSQL's, the CLI OpenSSL's. */
typedef void (*wfe_sha256_fn) (const unsigned char *data, size_t len,
							   unsigned char out[32]);

/* Admission limits and the optional contracts registry. */
typedef struct wfe_compile_options
{
	size_t		max_definition_bytes;	/* wfe.max_definition_bytes, 1 MiB */
	int			max_stages;		/* wfe.max_stages, 500 */
	int			max_fanout;		/* wfe.max_fanout, 64 */
	size_t		max_expression_bytes;	/* wfe.max_expression_bytes, 4096 */
	int			max_map_items;	/* wfe.max_map_items, 10000: a literal items array's length */

	/*
	 * NULL skips the contracts layer.  Otherwise a JSON array of
	 * {"ref": "name@N", "kind": "worker"|"action", "queue": text|null,
	 * "handler": bool, "input_schema": {...}, "output_schema": {...}}.
	 * Borrowed: the compiler never frees it.
	 */
	struct json_object *contracts;

	wfe_sha256_fn sha256;		/* required */
} wfe_compile_options;

/* Fill options with the documented defaults (contracts NULL, sha256 NULL). */
extern void wfe_compile_options_init(wfe_compile_options *opts);

typedef struct wfe_compile_result
{
	int			ok;				/* no error-severity diagnostic */
	char	   *digest;			/* "sha256:<hex>" when ok, else NULL */
	char	   *plan_text;		/* canonical plan bytes when ok, else NULL */
	struct json_object *plan;			/* the same plan as json-c, when ok */
	struct json_object *diagnostics;	/* array, always present */
} wfe_compile_result;

/* Compile one definition.  Never fails for bad input: see ->diagnostics. */
extern wfe_compile_result *wfe_compile(const char *source, size_t len,
									   const wfe_compile_options *opts);

/* {"ok", "digest", "plan", "diagnostics"} as canonical JSON (malloc'd). */
extern char *wfe_compile_result_json(const wfe_compile_result *res);

extern void wfe_compile_result_free(wfe_compile_result *res);

/* Mermaid flowchart of a compiled plan (malloc'd), or NULL if not a plan. */
extern char *wfe_plan_mermaid(struct json_object *plan);

#endif							/* WFE_COMPILE_H */
