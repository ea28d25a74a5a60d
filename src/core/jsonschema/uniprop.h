/*
 * uniprop.h — Unicode character properties for the regex engine's
 * \p{...} and \P{...} escapes: General_Category, Script and
 * Script_Extensions, and the binary properties Any, ASCII and Assigned.
 *
 * The data is generated from the Unicode Character Database into
 * uniprop_tables.h by scripts/gen-unicode-tables.py.
 *
 * Plain C99, no dependencies.
 */
#ifndef WFE_UNIPROP_H
#define WFE_UNIPROP_H

#include <stddef.h>
#include <stdint.h>

/* A range of code points, lo..hi inclusive. */
typedef struct wfe_uc_range
{
	uint32_t	lo,
				hi;
} wfe_uc_range;

/*
 * The code points of the property named by `body` (`len` bytes, what stands
 * between the braces of \p{...}): "Value" (a General_Category value such as
 * L, Lu, Letter, Uppercase_Letter; Any, ASCII or Assigned; or, as RE2 writes
 * it, a script such as Greek), "General_Category=Value" / "gc=Value",
 * "Script=Value" / "sc=Value", "Script_Extensions=Value" / "scx=Value".
 * Names are matched exactly (case and underscores count), as ECMA-262 says.
 * Returns the sorted, merged ranges and their number in *n, or NULL when
 * no property has that name.
 */
extern const wfe_uc_range *wfe_uniprop_lookup(const char *body, size_t len, int *n);

/* The Unicode version of the tables, e.g. "15.0.0". */
extern const char *wfe_uniprop_version(void);

#endif							/* WFE_UNIPROP_H */
