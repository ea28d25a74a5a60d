/*
 * json.c — the JSON every core shares: parsing (big integers kept exact)
 * and canonical JSON, the bytes a plan's digest is taken over.
 *
 * Object keys sorted bytewise, no insignificant white space, integers as
 * integers, other numbers in the shortest form that reads back to the same
 * double, strings with the minimal escapes.  Two plans with the same meaning
 * therefore serialise to the same bytes.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include "json.h"

typedef struct sbuf
{
	char	   *data;
	size_t		len;
	size_t		cap;
} sbuf;

/* Append n bytes. */
static void
sbuf_put(sbuf *b, const char *s, size_t n)
{
	if (b->len + n + 1 > b->cap)
	{
		size_t		cap = b->cap ? b->cap : 256;

		while (cap < b->len + n + 1)
			cap *= 2;
		b->data = realloc(b->data, cap);
		if (b->data == NULL)
			abort();
		b->cap = cap;
	}
	memcpy(b->data + b->len, s, n);
	b->len += n;
	b->data[b->len] = '\0';
}

/* Append a C string. */
static void
sbuf_puts(sbuf *b, const char *s)
{
	sbuf_put(b, s, strlen(s));
}

/* A JSON string literal with minimal escaping. */
static void
put_string(sbuf *b, const char *s, size_t len)
{
	size_t		run = 0;

	sbuf_put(b, "\"", 1);
	for (size_t i = 0; i < len; i++)
	{
		unsigned char c = (unsigned char) s[i];
		char		esc[8];

		if (c >= 0x20 && c != '"' && c != '\\')
			continue;
		sbuf_put(b, s + run, i - run);
		run = i + 1;
		switch (c)
		{
			case '"':
				sbuf_puts(b, "\\\"");
				break;
			case '\\':
				sbuf_puts(b, "\\\\");
				break;
			case '\b':
				sbuf_puts(b, "\\b");
				break;
			case '\f':
				sbuf_puts(b, "\\f");
				break;
			case '\n':
				sbuf_puts(b, "\\n");
				break;
			case '\r':
				sbuf_puts(b, "\\r");
				break;
			case '\t':
				sbuf_puts(b, "\\t");
				break;
			default:
				snprintf(esc, sizeof(esc), "\\u%04x", c);
				sbuf_puts(b, esc);
		}
	}
	sbuf_put(b, s + run, len - run);
	sbuf_put(b, "\"", 1);
}

/* The shortest decimal that reads back as d (integral values as integers). */
static void
put_double(sbuf *b, double d)
{
	char		buf[40];

	if (!isfinite(d))
	{
		sbuf_puts(b, "null");	/* cannot happen: the loader refuses them */
		return;
	}
	if (d == floor(d) && fabs(d) < 9007199254740992.0)
	{
		snprintf(buf, sizeof(buf), "%.0f", d);
		if (strcmp(buf, "-0") == 0)
			strcpy(buf, "0");
		sbuf_puts(b, buf);
		return;
	}
	for (int prec = 1; prec <= 17; prec++)
	{
		snprintf(buf, sizeof(buf), "%.*g", prec, d);
		if (strtod(buf, NULL) == d)
			break;
	}
	/* "1e+20" -> "1e20", "1e-05" -> "1e-5" */
	{
		char	   *e = strchr(buf, 'e');

		if (e)
		{
			char		mant[64];
			int			exp = atoi(e + 1);

			*e = '\0';
			snprintf(mant, sizeof(mant), "%se%d", buf, exp);
			strcpy(buf, mant);
		}
	}
	sbuf_puts(b, buf);
}

static int
cmp_keys(const void *a, const void *b)
{
	return strcmp(*(char *const *) a, *(char *const *) b);
}

/* Serialise one value. */
static void
put_value(sbuf *b, json_object *o)
{
	switch (json_object_get_type(o))
	{
		case json_type_null:
			sbuf_puts(b, "null");
			break;
		case json_type_boolean:
			sbuf_puts(b, json_object_get_boolean(o) ? "true" : "false");
			break;
		case json_type_int:
			{
				char		buf[32];

				snprintf(buf, sizeof(buf), "%lld", (long long) json_object_get_int64(o));
				sbuf_puts(b, buf);
				break;
			}
		case json_type_double:
			put_double(b, json_object_get_double(o));
			break;
		case json_type_string:
			put_string(b, json_object_get_string(o), (size_t) json_object_get_string_len(o));
			break;
		case json_type_array:
			{
				size_t		n = json_object_array_length(o);

				sbuf_put(b, "[", 1);
				for (size_t i = 0; i < n; i++)
				{
					if (i)
						sbuf_put(b, ",", 1);
					put_value(b, json_object_array_get_idx(o, i));
				}
				sbuf_put(b, "]", 1);
				break;
			}
		case json_type_object:
			{
				int			n = json_object_object_length(o);
				char	  **keys = malloc(sizeof(char *) * (n ? n : 1));
				int			k = 0;

				if (keys == NULL)
					abort();
				{
					/* the macro declares its cursor: give it a block of its own */
					json_object_object_foreach(o, key, val)
					{
						(void) val;
						keys[k++] = key;
					}
				}
				qsort(keys, k, sizeof(char *), cmp_keys);
				sbuf_put(b, "{", 1);
				for (int i = 0; i < k; i++)
				{
					if (i)
						sbuf_put(b, ",", 1);
					put_string(b, keys[i], strlen(keys[i]));
					sbuf_put(b, ":", 1);
					put_value(b, json_object_object_get(o, keys[i]));
				}
				sbuf_put(b, "}", 1);
				free(keys);
				break;
			}
	}
}

char *
wfe_canonical_json(json_object *obj)
{
	sbuf		b = {NULL, 0, 0};

	put_value(&b, obj);
	return b.data;
}

/* A digest's text: "sha256:" and the lowercase hex of its 32 bytes. */
void
wfe_digest_text(const unsigned char hash[32], char out[72])
{
	static const char hex[] = "0123456789abcdef";

	memcpy(out, "sha256:", 7);
	for (int i = 0; i < 32; i++)
	{
		out[7 + 2 * i] = hex[hash[i] >> 4];
		out[7 + 2 * i + 1] = hex[hash[i] & 15];
	}
	out[71] = '\0';
}

/*
 * Does the integer literal s[0..n) (an optional '-' and digits) fit json-c's
 * integers (int64, or uint64 when positive)?  json-c saturates others.
 */
static int
integer_fits(const char *s, size_t n)
{
	int			neg = s[0] == '-';
	const char *d = s + neg;
	size_t		nd = n - (size_t) neg;
	const char *limit = neg ? "9223372036854775808" : "18446744073709551615";
	size_t		nl = strlen(limit);

	while (nd > 1 && d[0] == '0')
		d++, nd--;
	return nd < nl || (nd == nl && memcmp(d, limit, nl) <= 0);
}

/*
 * The text with "e0" after every integer literal json-c cannot hold, or
 * NULL when there is none (the common case).  json-c reads such a literal
 * as a double and keeps its text, so exact comparisons (jsonnum.h) still
 * see the integer the user wrote; jsonb reads "Ne0" as N again.
 */
static char *
widen_big_integers(const char *text)
{
	size_t		len = strlen(text),
				extra = 0,
				o = 0;
	char	   *out = NULL;
	int			pass;

	for (pass = 0; pass < 2; pass++)
	{
		int			in_string = 0;

		for (size_t i = 0; i < len;)
		{
			char		c = text[i];

			if (in_string)
			{
				if (c == '\\' && i + 1 < len)
				{
					if (out)
						out[o++] = text[i];
					i++;
				}
				else if (c == '"')
					in_string = 0;
				if (out)
					out[o++] = text[i];
				i++;
				continue;
			}
			if (c == '"')
				in_string = 1;
			if (c == '-' || (c >= '0' && c <= '9'))
			{
				size_t		start = i,
							end;
				int			integral;

				i += c == '-';
				while (i < len && text[i] >= '0' && text[i] <= '9')
					i++;
				integral = !(i < len && (text[i] == '.' || text[i] == 'e' || text[i] == 'E'));
				while (i < len && ((text[i] >= '0' && text[i] <= '9') || text[i] == '.' ||
								   text[i] == 'e' || text[i] == 'E' || text[i] == '+' || text[i] == '-'))
					i++;
				end = i;
				if (out)
				{
					memcpy(out + o, text + start, end - start);
					o += end - start;
				}
				if (integral && end - start >= 19 && !integer_fits(text + start, end - start))
				{
					if (out)
					{
						out[o++] = 'e';
						out[o++] = '0';
					}
					else
						extra += 2;
				}
				continue;
			}
			if (out)
				out[o++] = c;
			i++;
		}
		if (pass == 0)
		{
			if (extra == 0)
				return NULL;
			out = malloc(len + extra + 1);
			if (out == NULL)
				abort();
		}
	}
	out[o] = '\0';
	return out;
}

struct json_object *
wfe_json_parse(const char *text)
{
	json_tokener *tok = json_tokener_new_ex(WFE_JSON_MAX_DEPTH);
	json_object *obj;
	char	   *widened = widen_big_integers(text);

	if (tok == NULL)
		abort();
	if (widened)
		text = widened;
	/* the terminating NUL ends a bare scalar ("1", "true") json-c would wait on */
	obj = json_tokener_parse_ex(tok, text, (int) strlen(text) + 1);
	if (json_tokener_get_error(tok) != json_tokener_success)
	{
		json_object_put(obj);
		obj = NULL;
	}
	json_tokener_free(tok);
	free(widened);
	return obj;
}

int
wfe_json_is_array(struct json_object *obj)
{
	return obj != NULL && json_object_is_type(obj, json_type_array);
}

void
wfe_json_free(struct json_object *obj)
{
	json_object_put(obj);
}
