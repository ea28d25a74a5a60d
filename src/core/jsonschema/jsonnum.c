/*
 * jsonnum.c — exact decimal JSON numbers (see jsonnum.h).
 */
#include "jsonnum.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

/* Exponents beyond this are clamped (no JSON text in practice has them). */
#define JNUM_MAX_EXP		1000000000L

/* multipleOf expands at most this many digits exactly; beyond, doubles decide. */
#define JNUM_MAX_EXPAND		100000L

int
wfe_jnum_parse(wfe_jnum *n, const char *text, size_t len)
{
	const char *p = text,
			   *end = text + len;
	const char *ds;
	size_t		nd = 0;
	long		exp = 0;
	char	   *out;
	size_t		i,
				first,
				last;

	memset(n, 0, sizeof(*n));
	n->dig = n->inl;
	if (p < end && *p == '-')
	{
		n->neg = 1;
		p++;
	}
	if (p >= end || *p < '0' || *p > '9')
		return -1;
	ds = p;
	/* count the digits of the integer and fraction parts */
	while (p < end && *p >= '0' && *p <= '9')
		p++, nd++;
	if (p < end && *p == '.')
	{
		p++;
		if (p >= end || *p < '0' || *p > '9')
			return -1;
		while (p < end && *p >= '0' && *p <= '9')
			p++, nd++, exp--;
	}
	if (p < end && (*p == 'e' || *p == 'E'))
	{
		int			eneg = 0;
		long		e = 0;

		p++;
		if (p < end && (*p == '+' || *p == '-'))
			eneg = *p++ == '-';
		if (p >= end || *p < '0' || *p > '9')
			return -1;
		while (p < end && *p >= '0' && *p <= '9')
		{
			if (e < JNUM_MAX_EXP)
				e = e * 10 + (*p - '0');
			p++;
		}
		exp += eneg ? -e : e;
	}
	if (p != end)
		return -1;
	/* the significant digits: skip the '.', strip leading and trailing zeros */
	out = nd + 1 <= sizeof(n->inl) ? n->inl : malloc(nd + 1);
	if (!out)
		return -1;
	for (i = 0, p = ds; i < nd; p++)
		if (*p != '.')
			out[i++] = *p;
	for (first = 0; first < nd && out[first] == '0'; first++)
		;
	for (last = nd; last > first && out[last - 1] == '0'; last--)
		exp++;
	n->ndig = (int) (last - first);
	memmove(out, out + first, (size_t) n->ndig);
	out[n->ndig] = '\0';
	n->dig = out;
	n->exp = n->ndig ? exp : 0;
	if (n->ndig == 0)
		n->neg = 0;				/* -0 is 0 */
	return 0;
}

int
wfe_jnum_from_json(wfe_jnum *n, json_object *v)
{
	char		buf[32];
	const char *text;

	if (json_object_is_type(v, json_type_int))
	{
		int64_t		i = json_object_get_int64(v);

		/* json-c keeps integers above INT64_MAX as uint64 */
		if (i == INT64_MAX)
			snprintf(buf, sizeof(buf), "%llu", (unsigned long long) json_object_get_uint64(v));
		else
			snprintf(buf, sizeof(buf), "%lld", (long long) i);
		return wfe_jnum_parse(n, buf, strlen(buf));
	}
	if (json_object_is_type(v, json_type_double))
	{
		double		d = json_object_get_double(v);

		if (!isfinite(d) && !isinf(d))
			goto fail;
		/* a parsed double keeps its text (so 1E+400 stays exact) */
		text = json_object_to_json_string_ext(v, JSON_C_TO_STRING_PLAIN);
		if (text && wfe_jnum_parse(n, text, strlen(text)) == 0)
		{
			/*
			 * 17 significant digits is how json-c prints a double it did
			 * not parse (0.1 -> 0.10000000000000001, e.g. from YAML): read
			 * the shortest decimal that names the same double instead.
			 */
			if (n->ndig == 17 && isfinite(d))
				for (int prec = 1; prec < 17; prec++)
				{
					snprintf(buf, sizeof(buf), "%.*g", prec, d);
					if (strtod(buf, NULL) == d)
					{
						wfe_jnum_free(n);
						return wfe_jnum_parse(n, buf, strlen(buf));
					}
				}
			return 0;
		}
		if (!isfinite(d))
			goto fail;
		snprintf(buf, sizeof(buf), "%.17g", d);
		return wfe_jnum_parse(n, buf, strlen(buf));
	}
fail:
	memset(n, 0, sizeof(*n));
	n->dig = n->inl;
	return -1;
}

void
wfe_jnum_free(wfe_jnum *n)
{
	if (n->dig && n->dig != n->inl)
		free(n->dig);
	n->dig = n->inl;
	n->ndig = 0;
}

int
wfe_jnum_copy(wfe_jnum *dst, const wfe_jnum *src)
{
	*dst = *src;
	if ((size_t) src->ndig + 1 <= sizeof(dst->inl))
		dst->dig = dst->inl;
	else if ((dst->dig = malloc((size_t) src->ndig + 1)) == NULL)
		return -1;
	memcpy(dst->dig, src->dig, (size_t) src->ndig + 1);
	return 0;
}

/* Compare magnitudes. */
static int
cmp_abs(const wfe_jnum *a, const wfe_jnum *b)
{
	long		ma,
				mb;
	int			i;

	if (a->ndig == 0 || b->ndig == 0)
		return (a->ndig != 0) - (b->ndig != 0);
	/* order of magnitude: position of the leading digit */
	ma = a->exp + a->ndig;
	mb = b->exp + b->ndig;
	if (ma != mb)
		return ma < mb ? -1 : 1;
	for (i = 0; i < a->ndig || i < b->ndig; i++)
	{
		char		da = i < a->ndig ? a->dig[i] : '0',
					db = i < b->ndig ? b->dig[i] : '0';

		if (da != db)
			return da < db ? -1 : 1;
	}
	return 0;
}

int
wfe_jnum_cmp(const wfe_jnum *a, const wfe_jnum *b)
{
	int			c;

	if (a->neg != b->neg)
		return a->neg ? -1 : 1;
	c = cmp_abs(a, b);
	return a->neg ? -c : c;
}

int
wfe_jnum_is_integer(const wfe_jnum *n)
{
	return n->ndig == 0 || n->exp >= 0;
}

/* Compare digit strings of equal meaning (no leading zeros) as integers. */
static int
cmp_digits(const char *a, int na, const char *b, int nb)
{
	int			c;

	if (na != nb)
		return na < nb ? -1 : 1;
	c = memcmp(a, b, (size_t) na);
	return (c > 0) - (c < 0);
}

/*
 * Remainder of the integer "digits followed by zeros" modulo the integer m
 * (decimal digits), digit by digit: r = (r * 10 + d) mod m.  Returns 1 if
 * the remainder is zero.
 */
static int
divisible(const char *digits, int ndig, long zeros, const char *m, int nm)
{
	long		total = ndig + zeros,
				k;

	if (nm <= 18)
	{
		uint64_t	mv = 0,
					r = 0;
		int			i;

		for (i = 0; i < nm; i++)
			mv = mv * 10 + (uint64_t) (m[i] - '0');
		for (k = 0; k < total; k++)
		{
			unsigned	d = k < ndig ? (unsigned) (digits[k] - '0') : 0;

			r = (uint64_t) (((unsigned __int128) r * 10 + d) % mv);
		}
		return r == 0;
	}
	else
	{
		/* r has at most nm + 1 digits; kept without leading zeros */
		char	   *r = malloc((size_t) nm + 2);
		int			nr = 0,
					res;

		if (!r)
			return 0;
		for (k = 0; k < total; k++)
		{
			char		d = k < ndig ? digits[k] : '0';

			if (nr > 0 || d != '0')
				r[nr++] = d;
			/* subtract m while r >= m (at most 9 times) */
			while (cmp_digits(r, nr, m, nm) >= 0)
			{
				int			i,
							borrow = 0,
							lead;

				for (i = 0; i < nr; i++)
				{
					int			ri = nr - 1 - i,
								mi = nm - 1 - i;
					int			v = (r[ri] - '0') - borrow - (mi >= 0 ? m[mi] - '0' : 0);

					borrow = v < 0;
					r[ri] = (char) ('0' + (v < 0 ? v + 10 : v));
				}
				for (lead = 0; lead < nr && r[lead] == '0'; lead++)
					;
				memmove(r, r + lead, (size_t) (nr - lead));
				nr -= lead;
			}
		}
		res = nr == 0;
		free(r);
		return res;
	}
}

int
wfe_jnum_is_multiple(const wfe_jnum *a, const wfe_jnum *m)
{
	long		shift;

	if (a->ndig == 0)
		return 1;
	if (m->ndig == 0)
		return 0;
	/* a/m = (A/M) * 10^(ea-em); A has no trailing zeros, so ea < em fails */
	if (a->exp < m->exp)
		return 0;
	shift = a->exp - m->exp;
	if (shift > JNUM_MAX_EXPAND - a->ndig)
	{
		/* astronomically large quotient: decide with doubles */
		double		av = strtod(a->dig, NULL),
					mv = strtod(m->dig, NULL);
		double		q = av / mv * pow(10.0, (double) shift);

		return isfinite(q) && floor(q) == q;
	}
	return divisible(a->dig, a->ndig, shift, m->dig, m->ndig);
}

void
wfe_jnum_format(const wfe_jnum *n, char *buf, size_t buflen)
{
	const char *sign = n->neg ? "-" : "";
	long		point = n->ndig + n->exp;	/* digits before the decimal point */

	if (n->ndig == 0)
		snprintf(buf, buflen, "0");
	else if (n->exp >= 0 && point <= 40)
		snprintf(buf, buflen, "%s%s%.*s", sign, n->dig, (int) n->exp, "0000000000000000000000000000000000000000");
	else if (n->exp < 0 && point > 0 && n->ndig <= 40)
		snprintf(buf, buflen, "%s%.*s.%s", sign, (int) point, n->dig, n->dig + point);
	else if (n->exp < 0 && point <= 0 && n->ndig - point <= 40)
		snprintf(buf, buflen, "%s0.%.*s%s", sign, (int) -point, "0000000000000000000000000000000000000000", n->dig);
	else
		snprintf(buf, buflen, "%s%c%s%.*se%+ld", sign, n->dig[0], n->ndig > 1 ? "." : "",
				 n->ndig > 20 ? 20 : n->ndig - 1, n->dig + 1, point - 1);
}

int
wfe_json_is_integral(json_object *v)
{
	wfe_jnum	n;
	int			r;

	if (json_object_is_type(v, json_type_int))
		return 1;
	if (!json_object_is_type(v, json_type_double) || wfe_jnum_from_json(&n, v) < 0)
		return 0;
	r = wfe_jnum_is_integer(&n);
	wfe_jnum_free(&n);
	return r;
}
