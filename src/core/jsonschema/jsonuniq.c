/*
 * jsonuniq.c — uniqueItems in O(n log n).
 *
 * Comparing every pair of items is O(n^2): 40,000 items took over 20 s.
 * Instead each item gets an equality key, a byte string that two values
 * share exactly when wfe_json_equal says they are equal (JSON Schema
 * equality: numbers by exact value, so 1 and 1.0 are equal; objects by
 * their members, whatever their order).  The keys are sorted and
 * neighbours compared.
 *
 * The key is self-delimiting, so concatenating keys stays unambiguous:
 *   null "z"   false "f"   true "t"
 *   number "n" sign exponent ";" digits ";" (jsonnum.h's exact decimal form)
 *   string "s" length ":" bytes
 *   array  "a" count ":" the items' keys
 *   object "o" count ":" the members sorted by name, each name as a string
 *          key followed by the value's key
 * A value wfe_json_equal finds equal to nothing (a number it cannot read,
 * nesting beyond its bound) gets a key of its own: "x" and its address.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include "jsonschema_internal.h"

/* A growing byte buffer. */
typedef struct keybuf
{
	char	   *data;
	size_t		len;
	size_t		cap;
	int			oom;
} keybuf;

/* Make room for n more bytes; 0 when out of memory. */
static int
kb_reserve(keybuf *b, size_t n)
{
	size_t		cap;
	char	   *data;

	if (b->oom)
		return 0;
	if (b->len + n <= b->cap)
		return 1;
	cap = b->cap ? b->cap : 256;
	while (cap < b->len + n)
		cap *= 2;
	data = realloc(b->data, cap);
	if (data == NULL)
	{
		b->oom = 1;
		return 0;
	}
	b->data = data;
	b->cap = cap;
	return 1;
}

/* Append n bytes. */
static void
kb_put(keybuf *b, const void *p, size_t n)
{
	if (kb_reserve(b, n))
	{
		memcpy(b->data + b->len, p, n);
		b->len += n;
	}
}

/* Append a tag byte and a decimal count ending in sep. */
static void
kb_counted(keybuf *b, char tag, unsigned long long count, char sep)
{
	char		tmp[32];
	int			n = snprintf(tmp, sizeof(tmp), "%c%llu%c", tag, count, sep);

	kb_put(b, tmp, (size_t) n);
}

/* Append a string's key. */
static void
kb_string(keybuf *b, const char *s, size_t len)
{
	kb_counted(b, 's', (unsigned long long) len, ':');
	kb_put(b, s, len);
}

/* A value equal to nothing, not even itself: a key no other value has. */
static void
kb_unique(keybuf *b, json_object *v)
{
	char		tmp[40];
	int			n = snprintf(tmp, sizeof(tmp), "x%p;", (void *) v);

	kb_put(b, tmp, (size_t) n);
}

/* One member of an object, for sorting by name. */
typedef struct member
{
	const char *name;
	json_object *value;
} member;

/* Order members by name. */
static int
member_cmp(const void *a, const void *b)
{
	return strcmp(((const member *) a)->name, ((const member *) b)->name);
}

/* Append v's key; 0 when the meter stopped. */
static int
kb_value(keybuf *b, json_object *v, int depth, js_meter *m)
{
	if (!js_meter_spend(m, 1))
		return 0;
	if (depth > JS_EQUAL_MAX_DEPTH)
	{
		kb_unique(b, v);
		return 1;
	}
	switch (json_object_get_type(v))
	{
		case json_type_null:
			kb_put(b, "z", 1);
			return 1;
		case json_type_boolean:
			kb_put(b, json_object_get_boolean(v) ? "t" : "f", 1);
			return 1;
		case json_type_int:
		case json_type_double:
			{
				wfe_jnum	x;
				char		tmp[40];
				int			n;
				long		ndig;

				if (wfe_jnum_from_json(&x, v) < 0)
				{
					kb_unique(b, v);
					return 1;
				}
				/* zero has no digits: one spelling whatever its sign and exponent */
				n = snprintf(tmp, sizeof(tmp), "n%c%ld;",
							 x.ndig > 0 && x.neg ? '-' : '+', x.ndig > 0 ? x.exp : 0L);
				kb_put(b, tmp, (size_t) n);
				kb_put(b, x.dig, (size_t) x.ndig);
				kb_put(b, ";", 1);
				ndig = x.ndig;
				wfe_jnum_free(&x);
				return js_meter_spend(m, ndig / 64);
			}
		case json_type_string:
			{
				size_t		len = (size_t) json_object_get_string_len(v);

				kb_string(b, json_object_get_string(v), len);
				return js_meter_spend(m, (long) (len / 64));
			}
		case json_type_array:
			{
				size_t		n = json_object_array_length(v);

				kb_counted(b, 'a', (unsigned long long) n, ':');
				for (size_t i = 0; i < n; i++)
					if (!kb_value(b, json_object_array_get_idx(v, i), depth + 1, m))
						return 0;
				return 1;
			}
		case json_type_object:
			{
				size_t		n = (size_t) json_object_object_length(v),
							k = 0;
				member	   *mem;
				int			ok = 1;

				kb_counted(b, 'o', (unsigned long long) n, ':');
				if (n == 0)
					return 1;
				mem = malloc(n * sizeof(member));
				if (mem == NULL)
				{
					b->oom = 1;
					return 1;
				}
				{
					json_object_object_foreach(v, key, val)
					{
						mem[k].name = key;
						mem[k].value = val;
						k++;
					}
				}
				/* the sort costs about n*log2(n) steps: charge it first */
				for (size_t s = n; s > 1 && ok; s >>= 1)
					ok = js_meter_spend(m, (long) n);
				if (ok)
					qsort(mem, n, sizeof(member), member_cmp);
				for (k = 0; k < n && ok; k++)
				{
					kb_string(b, mem[k].name, strlen(mem[k].name));
					ok = kb_value(b, mem[k].value, depth + 1, m);
				}
				free(mem);
				return ok;
			}
	}
	kb_unique(b, v);
	return 1;
}

/* One item's key, where it sits in the buffer, and its index. */
typedef struct item_key
{
	const char *key;
	size_t		len;
	size_t		index;
} item_key;

/* Order by key bytes, then by index. */
static int
item_cmp(const void *a, const void *b)
{
	const item_key *x = a,
			   *y = b;
	size_t		n = x->len < y->len ? x->len : y->len;
	int			c = memcmp(x->key, y->key, n);

	if (c != 0)
		return c;
	if (x->len != y->len)
		return x->len < y->len ? -1 : 1;
	return x->index < y->index ? -1 : x->index > y->index;
}

/* uniqueItems; see jsonschema_internal.h. */
int
js_unique_items(json_object *arr, js_meter *m, size_t *j, size_t *i)
{
	size_t		n = json_object_array_length(arr);
	keybuf		b = {0};
	item_key   *items;
	int			rc = 0;

	if (n < 2)
		return 0;
	items = malloc(n * sizeof(item_key));
	if (items == NULL)
		return -2;
	/* keys first, as offsets: the buffer moves while it grows */
	for (size_t k = 0; k < n; k++)
	{
		items[k].key = (const char *) (uintptr_t) b.len;
		if (!kb_value(&b, json_object_array_get_idx(arr, k), 0, m))
		{
			rc = -1;
			goto done;
		}
		items[k].len = b.len - (size_t) (uintptr_t) items[k].key;
		items[k].index = k;
	}
	if (b.oom)
	{
		rc = -2;
		goto done;
	}
	for (size_t k = 0; k < n; k++)
		items[k].key = b.data + (size_t) (uintptr_t) items[k].key;
	for (size_t s = n; s > 1; s >>= 1)
		if (!js_meter_spend(m, (long) n))
		{
			rc = -1;
			goto done;
		}
	qsort(items, n, sizeof(item_key), item_cmp);

	/*
	 * Equal items are neighbours, in index order.  A pairwise scan reports
	 * the first item i that equals an earlier one, with the first such j:
	 * of each run of equal keys that is its first two indexes; report the
	 * run whose second index is smallest.
	 */
	for (size_t k = 1; k < n; k++)
	{
		const item_key *p = &items[k - 1],
				   *q = &items[k];

		if (p->len == q->len && memcmp(p->key, q->key, p->len) == 0 &&
			(k < 2 || items[k - 2].len != p->len ||
			 memcmp(items[k - 2].key, p->key, p->len) != 0) &&
			(rc == 0 || q->index < *i))
		{
			*j = p->index;
			*i = q->index;
			rc = 1;
		}
	}
done:
	free(items);
	free(b.data);
	return rc;
}
