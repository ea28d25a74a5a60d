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
	opts->max_map_items = 10000;
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
