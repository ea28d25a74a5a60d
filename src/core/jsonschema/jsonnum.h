/*
 * jsonnum.h — JSON numbers compared exactly, as decimals.
 *
 * JSON Schema asks for exact numbers: integers of any size, 1.0 is an
 * integer, multipleOf 0.01 is decided without binary rounding.  A number is
 * read from its JSON text (json-c keeps the text of every double it parses,
 * and wfe_json_parse keeps integers beyond 64 bits as such doubles) into
 * sign, significant digits and a decimal exponent.
 *
 * Plain C99 over json-c; the header only forward-declares json-c's type.
 */
#ifndef WFE_JSONNUM_H
#define WFE_JSONNUM_H

#include <stddef.h>

struct json_object;

/* value = (neg ? -1 : 1) * dig[0..ndig) * 10^exp; zero has ndig 0. */
typedef struct wfe_jnum
{
	int			neg;
	int			ndig;
	long		exp;
	char	   *dig;			/* ASCII digits, no leading or trailing '0' */
	char		inl[40];		/* dig points here when it fits */
} wfe_jnum;

/* Parse JSON number text; 0, or -1 if it is not a JSON number. */
extern int	wfe_jnum_parse(wfe_jnum *n, const char *text, size_t len);

/* Read a json-c number (int or double); 0, or -1 if it is not a finite number. */
extern int	wfe_jnum_from_json(wfe_jnum *n, struct json_object *v);

/* Release what a parsed number holds (its digits, when long). */
extern void wfe_jnum_free(wfe_jnum *n);

/* Copy a number (the copy owns its digits). */
extern int	wfe_jnum_copy(wfe_jnum *dst, const wfe_jnum *src);

/* -1, 0 or 1 as a < b, a == b, a > b. */
extern int	wfe_jnum_cmp(const wfe_jnum *a, const wfe_jnum *b);

/* Is the number integral (1.0 and 1e2 are)? */
extern int	wfe_jnum_is_integer(const wfe_jnum *n);

/* Is a an integer multiple of m (m > 0)?  Exact. */
extern int	wfe_jnum_is_multiple(const wfe_jnum *a, const wfe_jnum *m);

/*
 * Write the number in plain decimal notation ("100", "0.01", "-2.5") into
 * buf, or as d.ddde+N when that would take more than 40 characters.
 */
extern void wfe_jnum_format(const wfe_jnum *n, char *buf, size_t buflen);

/* Is v (a json-c value) a number whose value is integral? */
extern int	wfe_json_is_integral(struct json_object *v);

#endif							/* WFE_JSONNUM_H */
