/*
 * diag.h — the list of diagnostics one compilation reports.
 *
 * Each diagnostic is {"code", "severity", "message", "path", "line",
 * "column"}: path is a JSON-pointer-like location in the source document,
 * line and column are 1-based positions from libyaml's marks.
 */
#ifndef WFE_DIAG_H
#define WFE_DIAG_H

#include <json-c/json.h>

/* More than this many diagnostics is noise; the rest are summarised. */
#define WFE_MAX_DIAGNOSTICS 200

typedef struct wfe_diags
{
	json_object *list;			/* array of diagnostic objects */
	int			errors;			/* count of error-severity entries */
	int			dropped;		/* over WFE_MAX_DIAGNOSTICS */
} wfe_diags;

extern void wfe_diags_init(wfe_diags *d);

/* Report an error; line/column below 1 are raised to 1. */
extern void wfe_diag(wfe_diags *d, const char *code, const char *path,
					 int line, int column, const char *fmt,...)
			__attribute__((format(printf, 6, 7)));

/* Hand the finished array to the caller (adds the "dropped" note). */
extern json_object *wfe_diags_finish(wfe_diags *d);

#endif							/* WFE_DIAG_H */
