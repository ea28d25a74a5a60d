/*
 * regex.h — a linear-time regular-expression engine for the ECMA-262 subset
 * JSON Schema recommends (pattern, patternProperties) and CEL's matches().
 *
 * Supported: literals; `.`; classes `[...]`, `[^...]` with ranges; the
 * escapes \d \D \w \W \s \S \b \B \t \n \r \v \f \0 \cX \xHH \uHHHH \u{H...}
 * and escaped syntax characters; the Unicode property escapes \p{...} and
 * \P{...} (General_Category, Script, Script_Extensions; uniprop.h), alone
 * or inside classes; anchors ^ and $ (no multiline flag: they
 * match only at the ends of the string); groups `(...)`, `(?:...)`,
 * `(?<name>...)` (nothing is captured: only whether the string matches is
 * asked); alternation `|`; the quantifiers ? * + {n} {n,} {n,m} and their
 * lazy forms.  Patterns and subjects are UTF-8 and are matched by code point.
 *
 * Refused at compile time, with a message saying so: backreferences (\1,
 * \k<name>) and lookaround ((?=, (?!, (?<=, (?<!), because no linear-time
 * engine can run them.
 *
 * The engine simulates the NFA over all threads at once (Thompson / Pike),
 * so a search costs at most O(program size x subject length) steps however
 * the pattern is written; the caller bounds even that with a step budget.
 *
 * Plain C99, no dependencies.
 */
#ifndef WFE_REGEX_H
#define WFE_REGEX_H

#include <stddef.h>

typedef struct wfe_regex wfe_regex;

/* Largest {n,m} bound accepted, and the largest compiled program. */
#define WFE_REGEX_MAX_REPEAT	1000
#define WFE_REGEX_MAX_PROGRAM	20000

/*
 * Compile pattern `pat` (`len` bytes of UTF-8, no NUL needed).  Returns the
 * compiled expression, or NULL with a message in err (capacity errlen; err
 * may be NULL) naming what is unsupported or malformed and its byte offset.
 */
extern wfe_regex *wfe_regex_compile(const char *pat, size_t len,
									char *err, size_t errlen);

/*
 * Does the pattern match anywhere in `s` (`len` bytes)?  Returns 1 if it
 * does, 0 if not, -1 if *budget ran out first.  Each unit of the budget is
 * one NFA thread step; *budget is decreased by the steps spent.  budget may
 * be NULL (no bound).
 */
extern int	wfe_regex_search(const wfe_regex *re, const char *s, size_t len,
							 long *budget);

/* Free a compiled expression (NULL is fine). */
extern void wfe_regex_free(wfe_regex *re);

#endif							/* WFE_REGEX_H */
