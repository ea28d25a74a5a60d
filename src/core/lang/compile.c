/*
 * compile.c — runs the layers in order and assembles the result.
 *
 * YAML → schema/admission → graph → expressions → contracts → plan + digest.
 * A layer runs when the layers it stands on produced something usable, so a
 * definition with several independent mistakes gets all of them reported.
 */
#include <stdlib.h>
#include <string.h>

#include "core/jsonschema/jsonschema.h"
#include "model.h"
#include "yamltree.h"

void
wfe_compile_options_init(wfe_compile_options *opts)
{
	memset(opts, 0, sizeof(*opts));
	opts->max_definition_bytes = 1024 * 1024;
	opts->max_stages = 500;
	opts->max_fanout = 64;
	opts->max_expression_bytes = 4096;
}

/* "sha256:" + lowercase hex of the canonical plan bytes. */
static char *
digest_of(const wfe_compile_options *opts, const char *bytes)
{
	unsigned char hash[32];
	char	   *out = malloc(72);

	if (out == NULL)
		abort();
	opts->sha256((const unsigned char *) bytes, strlen(bytes), hash);
	wfe_digest_text(hash, out);
	return out;
}

wfe_compile_result *
wfe_compile(const char *source, size_t len, const wfe_compile_options *opts)
{
	wfe_compile_result *res = calloc(1, sizeof(wfe_compile_result));
	wfe_arena	arena;
	wfe_diags	diags;
	wfe_model	model;
	wfe_ynode  *root;

	if (res == NULL)
		abort();
	wfe_arena_init(&arena);
	wfe_diags_init(&diags);
	memset(&model, 0, sizeof(model));
	model.arena = &arena;
	model.diags = &diags;
	model.opts = opts;
	model.source = source;
	model.source_len = len;

	root = wfe_yaml_load(&arena, &diags, source, len, opts->max_definition_bytes);
	if (root != NULL || diags.errors == 0)
	{
		if (wfe_schema_build(&model, root) == 0)
		{
			wfe_graph_check(&model);
			wfe_refs_check(&model);
			wfe_contracts_check(&model);
		}
	}

	if (diags.errors == 0)
	{
		res->plan = wfe_plan_build(&model);
		res->plan_text = wfe_canonical_json(res->plan);
		res->digest = digest_of(opts, res->plan_text);
		res->ok = 1;
	}
	res->diagnostics = wfe_diags_finish(&diags);
	wfe_arena_free(&arena);
	return res;
}

char *
wfe_compile_result_json(const wfe_compile_result *res)
{
	json_object *o = json_object_new_object();
	char	   *text;

	json_object_object_add(o, "ok", json_object_new_boolean(res->ok));
	json_object_object_add(o, "digest", res->digest ? json_object_new_string(res->digest) : NULL);
	json_object_object_add(o, "plan", res->plan ? json_object_get(res->plan) : NULL);
	json_object_object_add(o, "diagnostics", json_object_get(res->diagnostics));
	text = wfe_canonical_json(o);
	json_object_put(o);
	return text;
}

void
wfe_compile_result_free(wfe_compile_result *res)
{
	if (res == NULL)
		return;
	free(res->digest);
	free(res->plan_text);
	json_object_put(res->plan);
	json_object_put(res->diagnostics);
	free(res);
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
