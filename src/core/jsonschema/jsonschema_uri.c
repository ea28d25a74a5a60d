/*
 * jsonschema_uri.c — the URIs of the JSON Schema compiler
 * (jsonschema_compile.h): references resolved against a base (RFC 3986
 * section 5), fragments percent-decoded, and JSON pointers (RFC 6901) built
 * and followed.
 */
#include <stdlib.h>
#include <string.h>

#include "jsonschema_compile.h"

/* Length of the scheme of u ("http" in "http://x"), or 0. */
static size_t
scheme_len(const char *u)
{
	size_t		i = 0;

	if (!((u[0] >= 'a' && u[0] <= 'z') || (u[0] >= 'A' && u[0] <= 'Z')))
		return 0;
	while (u[i] && u[i] != ':' && u[i] != '/' && u[i] != '?' && u[i] != '#')
		i++;
	return u[i] == ':' ? i : 0;
}

/* Remove "." and ".." segments from a path (RFC 3986 5.2.4), into the arena. */
static char *
remove_dots(cctx *cx, const char *path, size_t len)
{
	char	   *in = wfe_arena_strndup(cx->a, path, len);
	char	   *out = wfe_arena_alloc(cx->a, len + 1);
	size_t		o = 0,
				i = 0;

	while (i < len)
	{
		const char *p = in + i;
		size_t		left = len - i;

		if (left >= 3 && strncmp(p, "../", 3) == 0)
			i += 3;
		else if (left >= 2 && strncmp(p, "./", 2) == 0)
			i += 2;
		else if (left >= 3 && strncmp(p, "/./", 3) == 0)
			i += 2;				/* leaves "/..." */
		else if (left == 2 && strncmp(p, "/.", 2) == 0)
		{
			in[i + 1] = '/';
			i += 1;
		}
		else if ((left >= 4 && strncmp(p, "/../", 4) == 0) || (left == 3 && strncmp(p, "/..", 3) == 0))
		{
			if (left == 3)
				in[i + 2] = '/';
			i += left == 3 ? 2 : 3;
			/* drop the output's last segment */
			while (o > 0 && out[o - 1] != '/')
				o--;
			if (o > 0)
				o--;
		}
		else if ((left == 1 && p[0] == '.') || (left == 2 && strncmp(p, "..", 2) == 0))
			i = len;
		else
		{
			do
				out[o++] = in[i++];
			while (i < len && in[i] != '/');
		}
	}
	out[o] = '\0';
	return out;
}

/*
 * Resolve reference ref against base (absolute, no fragment) into an
 * absolute URI with ref's fragment, in the arena.
 */
char *
js_uri_resolve(cctx *cx, const char *base, const char *ref)
{
	size_t		bs = scheme_len(base),
				rs = scheme_len(ref);
	const char *bauth_end,
			   *hash;

	if (rs > 0)
	{
		const char *rest = ref + rs + 1;
		size_t		auth = 0;

		if (rest[0] == '/' && rest[1] == '/')
			for (auth = 2; rest[auth] && rest[auth] != '/' && rest[auth] != '#'; auth++)
				;
		hash = strchr(rest + auth, '#');
		return wfe_arena_printf(cx->a, "%.*s%s%s", (int) (rs + 1 + auth), ref,
								remove_dots(cx, rest + auth, hash ? (size_t) (hash - rest - auth) : strlen(rest + auth)),
								hash ? hash : "");
	}
	/* the base's scheme and authority */
	bauth_end = base + bs + 1;
	if (bauth_end[0] == '/' && bauth_end[1] == '/')
		for (bauth_end += 2; *bauth_end && *bauth_end != '/'; bauth_end++)
			;
	if (ref[0] == '\0' || ref[0] == '#')
		return wfe_arena_printf(cx->a, "%s%s", base, ref);
	if (ref[0] == '/' && ref[1] == '/')
		return wfe_arena_printf(cx->a, "%.*s%s", (int) (bs + 1), base, ref);
	hash = strchr(ref, '#');
	if (ref[0] == '/')
		return wfe_arena_printf(cx->a, "%.*s%s%s", (int) (bauth_end - base), base,
								remove_dots(cx, ref, hash ? (size_t) (hash - ref) : strlen(ref)),
								hash ? hash : "");
	else
	{
		/* merge: the base path up to its last '/', then ref */
		const char *slash = strrchr(bauth_end, '/');
		char	   *merged;

		if (slash)
			merged = wfe_arena_printf(cx->a, "%.*s%.*s", (int) (slash + 1 - bauth_end), bauth_end,
									  (int) (hash ? (size_t) (hash - ref) : strlen(ref)), ref);
		else
			merged = wfe_arena_printf(cx->a, "%s%.*s", *bauth_end || bauth_end[-1] == '/' ? "/" : "",
									  (int) (hash ? (size_t) (hash - ref) : strlen(ref)), ref);
		return wfe_arena_printf(cx->a, "%.*s%s%s", (int) (bauth_end - base), base,
								remove_dots(cx, merged, strlen(merged)), hash ? hash : "");
	}
}

/* Split an absolute URI at '#': the part before is returned, *frag after ("" if none). */
char *
js_uri_split(cctx *cx, const char *uri, const char **frag)
{
	const char *h = strchr(uri, '#');

	*frag = h ? h + 1 : "";
	return h ? wfe_arena_strndup(cx->a, uri, (size_t) (h - uri)) : (char *) uri;
}

/* "#/a/b" + key -> "#/a/b/key" with RFC 6901 escaping. */
const char *
js_ptr_push(cctx *cx, const char *ptr, const char *key)
{
	size_t		n = 0;
	char	   *esc;

	for (const char *k = key; *k; k++)
		n += (*k == '~' || *k == '/') ? 2 : 1;
	esc = wfe_arena_alloc(cx->a, n + 1);
	n = 0;
	for (const char *k = key; *k; k++)
	{
		if (*k == '~' || *k == '/')
		{
			esc[n++] = '~';
			esc[n++] = *k == '~' ? '0' : '1';
		}
		else
			esc[n++] = *k;
	}
	return wfe_arena_printf(cx->a, "%s/%s", ptr, esc);
}

/* Decode %XX in a URI fragment, in the arena. */
char *
js_percent_decode(cctx *cx, const char *s)
{
	size_t		n = strlen(s),
				o = 0;
	char	   *out = wfe_arena_alloc(cx->a, n + 1);

	for (size_t i = 0; i < n; i++)
	{
		int			h1,
					h2;

		if (s[i] == '%' && i + 2 < n + 1 &&
			(h1 = (s[i + 1] >= '0' && s[i + 1] <= '9') ? s[i + 1] - '0' :
			 ((s[i + 1] | 0x20) >= 'a' && (s[i + 1] | 0x20) <= 'f') ? (s[i + 1] | 0x20) - 'a' + 10 : -1) >= 0 &&
			(h2 = (s[i + 2] >= '0' && s[i + 2] <= '9') ? s[i + 2] - '0' :
			 ((s[i + 2] | 0x20) >= 'a' && (s[i + 2] | 0x20) <= 'f') ? (s[i + 2] | 0x20) - 'a' + 10 : -1) >= 0)
		{
			out[o++] = (char) (h1 * 16 + h2);
			i += 2;
		}
		else
			out[o++] = s[i];
	}
	out[o] = '\0';
	return out;
}

/* Follow a JSON pointer ("/a/b", unescaped tokens) from j; NULL if absent. */
json_object *
js_pointer_get(json_object *j, const char *p)
{
	char		tok[512];

	while (*p == '/')
	{
		size_t		n = 0;

		p++;
		while (*p && *p != '/' && n + 1 < sizeof(tok))
		{
			if (p[0] == '~' && p[1] == '1')
				tok[n++] = '/', p += 2;
			else if (p[0] == '~' && p[1] == '0')
				tok[n++] = '~', p += 2;
			else
				tok[n++] = *p++;
		}
		tok[n] = '\0';
		if (json_object_is_type(j, json_type_object))
		{
			if (!json_object_object_get_ex(j, tok, &j))
				return NULL;
		}
		else if (json_object_is_type(j, json_type_array))
		{
			char	   *end;
			long		i = strtol(tok, &end, 10);

			if (n == 0 || *end || i < 0 || (size_t) i >= json_object_array_length(j))
				return NULL;
			j = json_object_array_get_idx(j, (size_t) i);
		}
		else
			return NULL;
	}
	return *p ? NULL : j;
}
