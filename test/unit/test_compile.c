/*
 * test_compile.c — unit tests of the compiler core (src/core): the layers,
 * the canonical plan and digest, Mermaid, and hostile YAML refused quickly
 * within bounded memory.
 *
 * A standalone TAP program: "ok N - ..." / "not ok N - ...", then "1..N";
 * exit status 1 if anything failed.  Built with ASan/UBSan by the Makefile.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <json-c/json.h>
#include <openssl/evp.h>

#include "core/lang/compile.h"
#include "tap.h"


/* SHA-256 for the core, from libcrypto. */
static void
sha256(const unsigned char *data, size_t len, unsigned char out[32])
{
	unsigned int n = 32;

	EVP_Digest(data, len, out, &n, EVP_sha256(), NULL);
}

/* Compile with default options (and an optional registry). */
static wfe_compile_result *
compile_with(const char *src, size_t len, json_object *contracts)
{
	wfe_compile_options opts;

	wfe_compile_options_init(&opts);
	opts.sha256 = sha256;
	opts.contracts = contracts;
	return wfe_compile(src, len, &opts);
}

static wfe_compile_result *
compile(const char *src)
{
	return compile_with(src, strlen(src), NULL);
}

/* Does the result carry a diagnostic with this code? */
static int
has_code(const wfe_compile_result *r, const char *code)
{
	for (size_t i = 0; i < json_object_array_length(r->diagnostics); i++)
	{
		json_object *d = json_object_array_get_idx(r->diagnostics, i);

		if (strcmp(json_object_get_string(json_object_object_get(d, "code")), code) == 0)
			return 1;
	}
	return 0;
}

/* Every diagnostic has a line and column of at least 1. */
static int
positions_valid(const wfe_compile_result *r)
{
	for (size_t i = 0; i < json_object_array_length(r->diagnostics); i++)
	{
		json_object *d = json_object_array_get_idx(r->diagnostics, i);

		if (json_object_get_int(json_object_object_get(d, "line")) < 1 ||
			json_object_get_int(json_object_object_get(d, "column")) < 1)
			return 0;
	}
	return 1;
}

/* Seconds since an arbitrary start, for "quickly" (reported, not asserted). */
static double
now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static const char *MODEL_INGEST =
"name: model-ingest\n"
"version: \"2.3.0\"\n"
"entry: cache-lookup\n"
"stages:\n"
"  - name: cache-lookup\n"
"    type: action\n"
"    action: cache.lookup@1\n"
"    input: { modelId: \"${context.modelId}\" }\n"
"    on_success: cache-route\n"
"    on_failure: failed\n"
"  - name: cache-route\n"
"    type: decision\n"
"    on_evaluation_error: failed\n"
"    branches:\n"
"      - when: 'stages[\"cache-lookup\"].result.hit == true'\n"
"        next: publish\n"
"      - when: \"true\"\n"
"        next: render-thumbnail\n"
"  - name: render-thumbnail\n"
"    type: worker\n"
"    queue: rendering\n"
"    worker: thumbnail.render@3\n"
"    input: { modelId: \"${context.modelId}\" }\n"
"    execution_deadline_ms: 300000\n"
"    on_success: derive-fork\n"
"    on_failure: failed\n"
"  - name: derive-fork\n"
"    type: fork\n"
"    branches: [semantic-analysis, technical-metadata]\n"
"  - name: semantic-analysis\n"
"    type: worker\n"
"    queue: analysis\n"
"    worker: semantic.analyse@4\n"
"    input: { modelId: \"${context.modelId}\" }\n"
"    on_success: derive-join\n"
"    on_failure: failed\n"
"  - name: technical-metadata\n"
"    type: worker\n"
"    queue: metadata\n"
"    worker: metadata.extract@2\n"
"    input: { modelId: \"${context.modelId}\" }\n"
"    on_success: derive-join\n"
"    on_failure: failed\n"
"  - name: derive-join\n"
"    type: join\n"
"    required: [semantic-analysis, technical-metadata]\n"
"    acceptable_terminal_states: [completed]\n"
"    on_success: publish\n"
"    on_failure: failed\n"
"  - name: publish\n"
"    type: action\n"
"    action: catalogue.publish@2\n"
"    input: { modelId: \"${context.modelId}\" }\n"
"    on_success: completed\n"
"    on_failure: failed\n"
"finalisers: [audit.run-terminal@1]\n";

/* The seed workflow compiles, with defaults explicit in its plan. */
static void
test_model_ingest(void)
{
	wfe_compile_result *r = compile(MODEL_INGEST);
	json_object *stages,
			   *first;
	char	   *chart;

	ok(r->ok, "model-ingest compiles");
	ok(r->digest && strncmp(r->digest, "sha256:", 7) == 0 && strlen(r->digest) == 71,
	   "digest is sha256: and 64 hex digits");
	stages = json_object_object_get(r->plan, "stages");
	ok(json_object_array_length(stages) == 8, "plan has 8 stages");
	first = json_object_array_get_idx(stages, 0);
	ok(json_object_get_int(json_object_object_get(json_object_object_get(first, "retry"), "max_attempts")) == 3,
	   "default retry is explicit in the plan");
	ok(json_object_object_get_ex(first, "queue_deadline_ms", NULL) &&
	   json_object_object_get(first, "queue_deadline_ms") == NULL,
	   "queue_deadline_ms is present and null (none)");
	ok(strstr(r->plan_text, "\"finalisers\":[{\"action\":\"audit.run-terminal@1\"") != NULL,
	   "finaliser named in the canonical plan");
	{
		/* canonical form is a fixed point: parsing and re-serialising changes nothing */
		json_object *again = json_tokener_parse(r->plan_text);
		char	   *text = wfe_canonical_json(again);

		ok(strcmp(text, r->plan_text) == 0 && strstr(r->plan_text, "\": ") == NULL,
		   "canonical plan is a fixed point with no insignificant white space");
		free(text);
		json_object_put(again);
	}

	chart = wfe_plan_mermaid(r->plan);
	ok(chart && strncmp(chart, "flowchart LR\n", 13) == 0, "mermaid starts with flowchart LR");
	ok(chart && strstr(chart, "s1{\"cache-route\"}") != NULL, "decision drawn as a diamond");
	ok(chart && strstr(chart, "s3[[\"fork: derive-fork\"]]") != NULL, "fork marked");
	ok(chart && strstr(chart, "s0 -. \"failure\" .-> intent_failed") != NULL, "failure edge dotted");
	ok(chart && strstr(chart, "s1 -->|\"fallback\"| s2") != NULL, "fallback branch labelled");
	ok(chart && strstr(chart, "s6 --> s7") != NULL, "join releases publish");
	free(chart);
	wfe_compile_result_free(r);
}

/* Same meaning, same digest; other meaning, other digest. */
static void
test_digest_stability(void)
{
	const char *a = "name: d\nversion: \"1.0.0\"\nentry: a\nstages:\n"
		"  - {name: a, type: worker, queue: q, worker: w.run@1, on_success: completed, on_failure: failed}\n";
	const char *b = "# comment\nstages:\n  - on_failure: failed\n    on_success: 'completed'\n"
		"    worker: \"w.run@1\"\n    queue: q\n    type: worker\n    name: a\n"
		"entry: a\nversion: '1.0.0'\nname: d   # trailing\n";
	const char *c = "name: d\nversion: \"1.0.0\"\nentry: a\nstages:\n"
		"  - {name: a, type: worker, queue: q, worker: w.run@1, on_success: completed, on_failure: completed}\n";
	wfe_compile_result *ra = compile(a),
			   *rb = compile(b),
			   *rc = compile(c);

	ok(ra->ok && rb->ok && rc->ok, "three variants compile");
	ok(ra->digest && rb->digest && strcmp(ra->digest, rb->digest) == 0,
	   "comments, key order and quoting do not change the digest");
	ok(ra->digest && rc->digest && strcmp(ra->digest, rc->digest) != 0,
	   "a changed route changes the digest");
	ok(strcmp(ra->plan_text, rb->plan_text) == 0, "canonical bytes are identical");
	wfe_compile_result_free(ra);
	wfe_compile_result_free(rb);
	wfe_compile_result_free(rc);
}

/* Canonical JSON: sorted keys, shortest numbers, minimal escapes. */
static void
test_canonical_json(void)
{
	json_object *o = json_tokener_parse("{\"b\": 1.50, \"a\": [2.0, 1e21, 0.1, -0.0], \"c\": \"q\\\"\\n\\u0001\"}");
	char	   *text = wfe_canonical_json(o);

	ok(strcmp(text, "{\"a\":[2,1e21,0.1,0],\"b\":1.5,\"c\":\"q\\\"\\n\\u0001\"}") == 0,
	   "canonical JSON: %s", text);
	free(text);
	json_object_put(o);
}

/* Each hostile input is refused with its code, fast, without growing. */
static void
test_hostile_yaml(void)
{
	/* a billion-laughs document: refused at the first anchor, never expanded */
	const char *laughs =
		"a: &a [\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\"]\n"
		"b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]\n"
		"c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]\n"
		"d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]\n"
		"e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]\n"
		"f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]\n"
		"g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]\n"
		"h: &h [*g,*g,*g,*g,*g,*g,*g,*g,*g]\n"
		"i: &i [*h,*h,*h,*h,*h,*h,*h,*h,*h]\n";
	wfe_compile_result *r;
	char	   *deep,
			   *big,
			   *junk;
	size_t		n = 10000;
	double		t0;

	r = compile(laughs);
	ok(!r->ok && has_code(r, "yaml.alias_forbidden") && positions_valid(r), "alias bomb: yaml.alias_forbidden");
	wfe_compile_result_free(r);

	deep = malloc(2 * n + 8);
	memcpy(deep, "x: ", 3);
	memset(deep + 3, '[', n);
	memset(deep + 3 + n, ']', n);
	deep[3 + 2 * n] = '\0';
	t0 = now();
	r = compile(deep);
	ok(!r->ok && has_code(r, "yaml.depth"), "10,000-deep nesting: yaml.depth (%.1f ms)", (now() - t0) * 1e3);
	wfe_compile_result_free(r);
	free(deep);

	n = 100 * 1024 * 1024;
	big = malloc(n + 16);
	memcpy(big, "x: \"", 4);
	memset(big + 4, 'a', n);
	strcpy(big + 4 + n, "\"\n");
	t0 = now();
	r = compile_with(big, strlen(big), NULL);
	ok(!r->ok && has_code(r, "yaml.too_large"), "100 MB scalar: yaml.too_large (%.1f ms)", (now() - t0) * 1e3);
	wfe_compile_result_free(r);
	free(big);

	big = malloc(80 * 1024);
	memcpy(big, "x: ", 3);
	memset(big + 3, 'a', 70 * 1024);
	big[3 + 70 * 1024] = '\0';
	r = compile(big);
	ok(!r->ok && has_code(r, "yaml.scalar_too_large"), "70 KiB scalar: yaml.scalar_too_large");
	wfe_compile_result_free(r);
	free(big);

	junk = malloc(4096);
	srand(42);
	for (int i = 0; i < 4096; i++)
		junk[i] = (char) (rand() & 0xff);
	r = compile_with(junk, 4096, NULL);
	ok(!r->ok && has_code(r, "yaml.syntax") && positions_valid(r), "binary junk: yaml.syntax");
	wfe_compile_result_free(r);
	free(junk);

	r = compile_with("name: a\0b\n", 10, NULL);
	ok(!r->ok && has_code(r, "yaml.syntax"), "NUL byte: yaml.syntax");
	wfe_compile_result_free(r);

	r = compile("");
	ok(!r->ok && has_code(r, "schema.required") && positions_valid(r), "empty document: schema.required");
	wfe_compile_result_free(r);
}

/* A generated 500-stage definition compiles; the time is printed, not asserted. */
static void
test_five_hundred_stages(void)
{
	size_t		cap = 500 * 200 + 256;
	char	   *src = malloc(cap);
	size_t		len = 0;
	wfe_compile_result *r;
	double		t0;

	len += snprintf(src + len, cap - len, "name: big\nversion: \"1.0.0\"\nentry: s0\nstages:\n");
	for (int i = 0; i < 500; i++)
	{
		char		next[32];

		if (i == 499)
			strcpy(next, "completed");
		else
			snprintf(next, sizeof(next), "s%d", i + 1);
		len += snprintf(src + len, cap - len,
						"  - {name: s%d, type: worker, queue: q, worker: w.run@1, "
						"input: {n: \"${context.n}\"}, on_success: %s, on_failure: failed}\n",
						i, next);
	}
	t0 = now();
	r = compile_with(src, len, NULL);
	ok(r->ok, "500-stage definition compiles (%.1f ms)", (now() - t0) * 1e3);
	wfe_compile_result_free(r);

	/* one more is over wfe.max_stages */
	len += snprintf(src + len, cap - len,
					"  - {name: extra, type: worker, queue: q, worker: w.run@1, on_success: completed, on_failure: failed}\n");
	r = compile_with(src, len, NULL);
	ok(!r->ok && has_code(r, "limits.stages"), "501 stages: limits.stages");
	wfe_compile_result_free(r);
	free(src);
}

/* The contracts layer uses the registry it is given. */
static void
test_contracts(void)
{
	json_object *reg = json_tokener_parse(
		"[{\"ref\":\"w.run@1\",\"kind\":\"worker\",\"queue\":\"q\",\"handler\":false,"
		"\"input_schema\":{\"type\":\"object\",\"required\":[\"n\"],\"properties\":{\"n\":{\"type\":\"integer\"}}},"
		"\"output_schema\":{}}]");
	const char *good = "name: d\nversion: \"1.0.0\"\nentry: a\nstages:\n"
		"  - {name: a, type: worker, queue: q, worker: w.run@1, input: {n: 3}, on_success: completed, on_failure: failed}\n";
	const char *bad = "name: d\nversion: \"1.0.0\"\nentry: a\nstages:\n"
		"  - {name: a, type: worker, queue: z, worker: w.run@1, input: {n: x}, on_success: completed, on_failure: failed}\n";
	wfe_compile_result *r = compile_with(good, strlen(good), reg);
	wfe_compile_result *plain = compile(good);

	ok(r->ok, "matching contract accepted");
	ok(r->digest && plain->digest && strcmp(r->digest, plain->digest) == 0,
	   "registry facts do not enter the digest");
	wfe_compile_result_free(r);
	wfe_compile_result_free(plain);
	r = compile_with(bad, strlen(bad), reg);
	ok(!r->ok && has_code(r, "contract.queue_mismatch") && has_code(r, "contract.input_type"),
	   "queue mismatch and input type both reported");
	wfe_compile_result_free(r);
	json_object_put(reg);

	/* boolean input schemas: true accepts any input, false none */
	for (int b = 0; b < 2; b++)
	{
		char		contracts[200];

		snprintf(contracts, sizeof(contracts),
				 "[{\"ref\":\"w.run@1\",\"kind\":\"worker\",\"queue\":\"q\",\"handler\":false,"
				 "\"input_schema\":%s,\"output_schema\":true}]", b ? "true" : "false");
		reg = json_tokener_parse(contracts);
		r = compile_with(good, strlen(good), reg);
		ok(b ? r->ok : !r->ok && has_code(r, "contract.input_type"),
		   "input_schema %s: %s", b ? "true" : "false", b ? "accepted" : "contract.input_type");
		wfe_compile_result_free(r);
		json_object_put(reg);
	}
}

/* The result JSON is what wfe.compile returns. */
static void
test_result_json(void)
{
	wfe_compile_result *r = compile("name: d\n");
	char	   *json = wfe_compile_result_json(r);
	json_object *o = json_tokener_parse(json);

	ok(o && !json_object_get_boolean(json_object_object_get(o, "ok")) &&
	   json_object_object_get(o, "digest") == NULL &&
	   json_object_array_length(json_object_object_get(o, "diagnostics")) >= 2,
	   "invalid result: ok false, digest null, diagnostics listed");
	json_object_put(o);
	free(json);
	wfe_compile_result_free(r);
}

/* The position of the n-th diagnostic with this code as "line:column", or "". */
static void
position_of(const wfe_compile_result *r, const char *code, int nth, char *buf,
			size_t size)
{
	buf[0] = '\0';
	for (size_t i = 0; i < json_object_array_length(r->diagnostics); i++)
	{
		json_object *d = json_object_array_get_idx(r->diagnostics, i);

		if (strcmp(json_object_get_string(json_object_object_get(d, "code")), code) == 0 &&
			nth-- == 0)
		{
			snprintf(buf, size, "%d:%d",
					 json_object_get_int(json_object_object_get(d, "line")),
					 json_object_get_int(json_object_object_get(d, "column")));
			return;
		}
	}
}

/*
 * Expression diagnostics point at the offending token when the `when` is a
 * one-line scalar, plain or quoted; at the scalar otherwise.
 */
static void
test_expression_positions(void)
{
	const char *src =
		"name: t\n"
		"version: \"1.0.0\"\n"
		"entry: d\n"
		"stages:\n"
		"  - name: d\n"
		"    type: decision\n"
		"    branches:\n"
		"      - when: payload.a + \"x\" > 1\n"
		"        next: completed\n"
		"      - when: 'payload.c in 1'\n"
		"        next: completed\n"
		"      - when: \"payload.b.matches('(')\"\n"
		"        next: completed\n"
		"      - when: >-\n"
		"          payload.q - \"s\"\n"
		"        next: completed\n"
		"      - when: \"\\\"h\\\" + 1 == 2\"\n"
		"        next: completed\n"
		"      - when: \"true\"\n"
		"        next: completed\n"
		"    on_evaluation_error: failed\n";
	wfe_compile_result *r = compile(src);
	char		pos[32];

	position_of(r, "expr.type", 0, pos, sizeof(pos));
	ok(strcmp(pos, "8:31") == 0, "plain when: the column of the '>' (got %s)", pos);
	position_of(r, "expr.type", 1, pos, sizeof(pos));
	ok(strcmp(pos, "10:26") == 0, "single-quoted when: the column of 'in' (got %s)", pos);
	position_of(r, "expr.syntax", 0, pos, sizeof(pos));
	ok(strcmp(pos, "12:34") == 0, "double-quoted when: the column of the bad pattern (got %s)", pos);
	position_of(r, "expr.type", 2, pos, sizeof(pos));
	ok(strcmp(pos, "14:15") == 0, "block scalar: the scalar's start (got %s)", pos);
	position_of(r, "expr.type", 3, pos, sizeof(pos));
	ok(strcmp(pos, "17:15") == 0, "an escape in the scalar: the scalar's start (got %s)", pos);
	ok(positions_valid(r), "every position is at least 1:1");
	wfe_compile_result_free(r);
}

/* The diagnostic with this code, or NULL. */
static json_object *
find_code(const wfe_compile_result *r, const char *code)
{
	for (size_t i = 0; i < json_object_array_length(r->diagnostics); i++)
	{
		json_object *d = json_object_array_get_idx(r->diagnostics, i);

		if (strcmp(json_object_get_string(json_object_object_get(d, "code")), code) == 0)
			return d;
	}
	return NULL;
}

/* context_schema goes through the JSON Schema validator: codes, paths, lines. */
static void
test_context_schema(void)
{
	static const char *head = "name: t\nversion: \"1.0.0\"\nentry: a\n";
	static const char *tail =
		"stages:\n  - { name: a, type: worker, queue: q, worker: w@1, on_success: completed, on_failure: failed }\n";
	static const struct
	{
		const char *schema;
		const char *code;
		const char *path;
		const char *needle;
		int			line;
	}			cases[] = {
		{"context_schema:\n  type: object\n  properties:\n    n: { type: integer, minimun: 0 }\n",
		"schema.unknown_key", "/context_schema/properties/n/minimun", "unsupported JSON Schema keyword", 7},
		{"context_schema:\n  properties:\n    id: { pattern: \"(a)\\\\1\" }\n",
		"schema.value", "/context_schema/properties/id/pattern", "backreference", 6},
		{"context_schema:\n  $ref: \"https://example.com/s.json\"\n",
		"schema.value", "/context_schema/$ref", "remote reference", 5},
		{"context_schema: [1]\n", "schema.type", "/context_schema", "must be a mapping or a boolean", 4},
	};
	char		src[1024];

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
	{
		wfe_compile_result *r;
		json_object *d;
		const char *path = "",
				   *msg = "";
		int			line = 0;

		snprintf(src, sizeof(src), "%s%s%s", head, cases[i].schema, tail);
		r = compile(src);
		d = find_code(r, cases[i].code);
		if (d)
		{
			path = json_object_get_string(json_object_object_get(d, "path"));
			msg = json_object_get_string(json_object_object_get(d, "message"));
			line = json_object_get_int(json_object_object_get(d, "line"));
		}
		ok(!r->ok && d && strcmp(path, cases[i].path) == 0 && strstr(msg, cases[i].needle) &&
		   line == cases[i].line, "context_schema: %s at %s line %d (%s)", cases[i].code, path, line, msg);
		wfe_compile_result_free(r);
	}
	snprintf(src, sizeof(src), "%s%s%s", head,
			 "context_schema:\n  type: object\n  required: [n]\n  additionalProperties: false\n"
			 "  properties:\n    n: { type: integer, minimum: 1, multipleOf: 0.5 }\n"
			 "    tags: { type: array, prefixItems: [{ const: x }], uniqueItems: true }\n", tail);
	{
		wfe_compile_result *r = compile(src);

		ok(r->ok, "context_schema with the standard's keywords compiles");
		wfe_compile_result_free(r);
	}
	/* boolean schemas: true (any context) and false (none), kept in the plan */
	for (int b = 0; b < 2; b++)
	{
		wfe_compile_result *r;
		json_object *cs = NULL;

		snprintf(src, sizeof(src), "%scontext_schema: %s\n%s", head, b ? "true" : "false", tail);
		r = compile(src);
		if (r->ok)
			json_object_object_get_ex(r->plan, "context_schema", &cs);
		ok(r->ok && json_object_is_type(cs, json_type_boolean) && json_object_get_boolean(cs) == b,
		   "context_schema: %s compiles into the plan", b ? "true" : "false");
		wfe_compile_result_free(r);
	}
	snprintf(src, sizeof(src), "%scontext_schema: \"true\"\n%s", head, tail);
	{
		wfe_compile_result *r = compile(src);

		ok(!r->ok && find_code(r, "schema.type"), "context_schema: \"true\" (a string) is schema.type");
		wfe_compile_result_free(r);
	}
}

/* rate_limit (dsl.md "Flow-control keys"): a name or {name, key}; into the plan only when set. */
static void
test_rate_limit(void)
{
	const char *head =
		"name: t\n"
		"version: \"1.0.0\"\n"
		"entry: a\n"
		"stages:\n"
		"  - name: a\n"
		"    type: worker\n"
		"    queue: q\n"
		"    worker: w@1\n"
		"    on_success: completed\n"
		"    on_failure: failed\n";
	struct
	{
		const char *line;
		const char *code;		/* NULL: compiles */
		const char *plan;		/* expected in the plan text, when it compiles */
	}			cases[] = {
		{"    rate_limit: api\n", NULL, "\"rate_limit\":{\"key\":null,\"name\":\"api\"}"},
		{"    rate_limit: {name: api, key: \"${context.c}\"}\n", NULL,
		"\"rate_limit\":{\"key\":\"${context.c}\",\"name\":\"api\"}"},
		{"    rate_limit: {key: \"${context.c}\"}\n", "schema.required", NULL},
		{"    rate_limit: {name: api, key: fixed}\n", "schema.value", NULL},
		{"    rate_limit: {name: api, burst: 3}\n", "schema.unknown_key", NULL},
		{"    rate_limit: [api]\n", "schema.type", NULL},
		{"    rate_limit: \"a b\"\n", "schema.value", NULL},
	};

	for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++)
	{
		char		src[1024];
		wfe_compile_result *r;

		snprintf(src, sizeof(src), "%s%s", head, cases[k].line);
		r = compile(src);
		if (cases[k].code == NULL)
			ok(r->ok && strstr(r->plan_text, cases[k].plan) != NULL, "rate_limit %zu compiles into the plan", k);
		else
			ok(!r->ok && has_code(r, cases[k].code), "rate_limit %zu: %s", k, cases[k].code);
		wfe_compile_result_free(r);
	}
	/* without one, the plan has no rate_limit key: older plans keep their digests */
	{
		wfe_compile_result *r = compile(head);

		ok(r->ok && strstr(r->plan_text, "rate_limit") == NULL, "no rate_limit, no key in the plan");
		wfe_compile_result_free(r);
	}
}

int
main(void)
{
	test_context_schema();
	test_model_ingest();
	test_digest_stability();
	test_canonical_json();
	test_hostile_yaml();
	test_five_hundred_stages();
	test_contracts();
	test_result_json();
	test_expression_positions();
	test_rate_limit();
	return tap_done();
}
