/*
 * admission.c — the admission layer: YAML tree to typed model.
 *
 * Every key is checked against the closed set its position allows, every
 * value against its type and range, and every default is filled in here, so
 * later layers (graph, expressions, contracts, plan) read a complete model.
 * All problems are reported; a bad value is replaced by its default so the
 * layers after this one can still say what else is wrong.
 */
#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include "core/base/names.h"
#include "core/jsonschema/jsonschema.h"
#include "core/flow/concurrency.h"
#include "model.h"

/* Admission limits that have no GUC: they bound what a definition may ask. */
#define WFE_MAX_ATTEMPTS_LIMIT 100
#define WFE_MAX_DURATION_MS (30LL * 24 * 3600 * 1000)	/* 30 days */

static const char *const top_keys[] = {
	"name", "version", "description", "entry", "context", "context_schema",
	"defaults", "run_deadline_ms", "terminal_policy", "finalisers", "terminals",
	"stages", "tasks", "output", NULL
};
static const char *const defaults_keys[] = {
	"retry", "execution_deadline_ms", "queue_deadline_ms", "heartbeat_ms", NULL
};
static const char *const retry_keys[] = {
	"max_attempts", "initial_ms", "multiplier", "max_ms", "jitter", NULL
};
static const char *const policy_keys[] = {
	"fork_branch_failure", "late_callbacks", "finalisers",
	"finaliser_failure_terminal", NULL
};
static const char *const policy_values[] = {
	"request-cancellation-and-fence", "reject-and-record", "declared-order",
	"failed", NULL
};
static const char *const action_keys[] = {
	"name", "type", "action", "on_success", "on_failure", "input", "retry",
	"execution_deadline_ms", "cache", "rate_limit", "concurrency", NULL
};
static const char *const action_required[] = {
	"name", "type", "action", "on_success", "on_failure", NULL
};
static const char *const worker_keys[] = {
	"name", "type", "queue", "worker", "on_success", "on_failure", "input",
	"retry", "execution_deadline_ms", "queue_deadline_ms", "heartbeat_ms",
	"cache", "rate_limit", "concurrency", NULL
};
static const char *const worker_required[] = {
	"name", "type", "queue", "worker", "on_success", "on_failure", NULL
};
static const char *const decision_keys[] = {
	"name", "type", "branches", "on_evaluation_error", NULL
};
static const char *const decision_required[] = {
	"name", "type", "branches", "on_evaluation_error", NULL
};
static const char *const fork_keys[] = {"name", "type", "branches", NULL};
static const char *const join_keys[] = {
	"name", "type", "required", "acceptable_terminal_states", "on_success",
	"on_failure", NULL
};
static const char *const join_required[] = {
	"name", "type", "required", "on_success", "on_failure", NULL
};
static const char *const wait_keys[] = {
	"name", "type", "signal", "on_success", "on_failure", "timeout_ms", "on_timeout", NULL
};
static const char *const wait_required[] = {
	"name", "type", "signal", "on_success", "on_failure", NULL
};
static const char *const sleep_keys[] = {
	"name", "type", "duration_ms", "until", "on_success", "on_failure", NULL
};
static const char *const sleep_required[] = {"name", "type", "on_success", NULL};
static const char *const workflow_keys[] = {
	"name", "type", "workflow", "input", "retry", "execution_deadline_ms", "on_success",
	"on_failure", NULL
};
static const char *const workflow_required[] = {
	"name", "type", "workflow", "on_success", "on_failure", NULL
};
static const char *const map_keys[] = {
	"name", "type", "items", "item", "max_concurrency", "tolerated_failures", "on_success",
	"on_failure", NULL
};
static const char *const map_required[] = {
	"name", "type", "items", "item", "on_success", "on_failure", NULL
};
static const char *const item_keys[] = {
	"worker", "queue", "action", "workflow", "input", "retry", "execution_deadline_ms",
	"queue_deadline_ms", "heartbeat_ms", "cache", "rate_limit", "concurrency", NULL
};
static const char *const branch_keys[] = {"when", "next", NULL};
static const char *const task_keys[] = {
	"id", "worker", "queue", "action", "description", "depends_on", "critical",
	"dependency_policy", "contexts", "awaits", "produces", "requires_outputs",
	"input", "retry", "execution_deadline_ms", "queue_deadline_ms",
	"heartbeat_ms", "cache", "for_each", "max_concurrency", "tolerated_failures", "rate_limit",
	"concurrency", NULL
};
static const char *const task_action_keys[] = {
	"id", "action", "description", "depends_on", "critical",
	"dependency_policy", "contexts", "awaits", "produces", "requires_outputs",
	"input", "retry", "execution_deadline_ms", "queue_deadline_ms",
	"heartbeat_ms", "cache", "for_each", "max_concurrency", "tolerated_failures", "rate_limit",
	"concurrency", NULL
};
static const char *const task_wait_keys[] = {
	"id", "wait", "description", "depends_on", "critical", "dependency_policy",
	"contexts", "awaits", "produces", "requires_outputs", NULL
};
static const char *const task_sleep_keys[] = {
	"id", "sleep", "description", "depends_on", "critical", "dependency_policy",
	"contexts", "awaits", "produces", "requires_outputs", NULL
};
static const char *const task_workflow_keys[] = {
	"id", "workflow", "description", "depends_on", "critical", "dependency_policy",
	"contexts", "awaits", "produces", "requires_outputs", "input", "retry",
	"execution_deadline_ms", "for_each", "max_concurrency", "tolerated_failures", NULL
};
static const char *const wait_executor_keys[] = {"signal", "timeout_ms", NULL};
static const char *const wait_executor_required[] = {"signal", NULL};
static const char *const sleep_executor_keys[] = {"duration_ms", "until", NULL};
static const char *const produce_keys[] = {"key", "type", NULL};
static const char *const require_keys[] = {"producer_task_id", "key", NULL};
static const char *const cache_keys[] = {"ttl_ms", NULL};
static const char *const rate_limit_keys[] = {"name", "key", NULL};
static const char *const rate_limit_required[] = {"name", NULL};
static const char *const concurrency_keys[] = {"key", "max", NULL};
static const char *const stage_states[] = {
	"completed", "failed", "skipped", "cancelled", "timed_out", NULL
};
static const char *const produce_types[] = {
	"string", "number", "integer", "boolean", "object", "array", NULL
};
static const char *const none[] = {NULL};

static void report(wfe_model *m, const char *code, const wfe_ynode *n,
				   const char *path, const char *fmt,...)
			__attribute__((format(printf, 5, 6)));

/* Report a problem at a node (or at the document start when node is NULL). */
static void
report(wfe_model *m, const char *code, const wfe_ynode *n, const char *path,
	   const char *fmt,...)
{
	char		msg[400];
	va_list		ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	wfe_diag(m->diags, code, path, n ? n->line : 1, n ? n->column : 1, "%s", msg);
}

/* Is `s` in a NULL-terminated word list? */
static int
in_list(const char *s, const char *const *list)
{
	for (; *list; list++)
		if (strcmp(s, *list) == 0)
			return 1;
	return 0;
}

/* The list as "a, b, c" for messages. */
static const char *
list_text(wfe_model *m, const char *const *list)
{
	char		buf[512] = "";

	for (int i = 0; list[i]; i++)
	{
		if (i)
			strncat(buf, ", ", sizeof(buf) - strlen(buf) - 1);
		strncat(buf, list[i], sizeof(buf) - strlen(buf) - 1);
	}
	return wfe_arena_strdup(m->arena, buf);
}

/* path + "/" + key, with JSON-pointer escaping of '~' and '/'. */
static const char *
key_path(wfe_model *m, const char *path, const char *key)
{
	size_t		len = strlen(key);
	char	   *esc = wfe_arena_alloc(m->arena, len * 2 + 1);
	char	   *p = esc;

	for (const char *k = key; *k; k++)
	{
		if (*k == '~')
			*p++ = '~', *p++ = '0';
		else if (*k == '/')
			*p++ = '~', *p++ = '1';
		else
			*p++ = *k;
	}
	return wfe_arena_printf(m->arena, "%s/%s", path, esc);
}

/* path + "/" + index. */
static const char *
index_path(wfe_model *m, const char *path, int i)
{
	return wfe_arena_printf(m->arena, "%s/%d", path, i);
}

/* Does s match [a-z] followed by up to `max_rest` of [a-z0-9] and `extra`? */
static int
is_identifier(const char *s, const char *extra, int max_rest)
{
	int			n = 0;

	if (!(*s >= 'a' && *s <= 'z'))
		return 0;
	for (s++; *s; s++, n++)
		if (!((*s >= 'a' && *s <= 'z') || (*s >= '0' && *s <= '9') || strchr(extra, *s)))
			return 0;
	return n <= max_rest;
}

/* A contract reference: name@N with N a positive integer. */
static int
is_contract_ref(const char *s)
{
	const char *at = strrchr(s, '@');
	char	   *name;
	int			ok;

	if (at == NULL || at == s || at[1] < '1' || at[1] > '9')
		return 0;
	for (const char *d = at + 1; *d; d++)
		if (!isdigit((unsigned char) *d))
			return 0;
	if (strlen(at + 1) > 9)
		return 0;
	name = strndup(s, at - s);
	if (name == NULL)
		return 0;
	ok = is_identifier(name, "_.-", 126);
	free(name);
	return ok;
}

/* Semantic version: N.N.N with optional -prerelease and +build. */
static int
is_semver(const char *s)
{
	for (int part = 0; part < 3; part++)
	{
		const char *start = s;

		if (*s == '0' && isdigit((unsigned char) s[1]))
			return 0;			/* no leading zeros */
		while (isdigit((unsigned char) *s))
			s++;
		if (s == start || s - start > 9)
			return 0;
		if (part < 2 && *s++ != '.')
			return 0;
	}
	if (*s == '-' || *s == '+')
	{
		for (s++; *s; s++)
			if (!(isalnum((unsigned char) *s) || *s == '.' || *s == '-' || *s == '+'))
				return 0;
		return 1;
	}
	return *s == '\0';
}

/* Closed key set and required keys of one mapping. */
static void
check_keys(wfe_model *m, const wfe_ynode *map, const char *path,
		   const char *const *allowed, const char *const *required,
		   const char *what)
{
	for (int i = 0; i < map->n; i++)
	{
		const wfe_ynode *k = map->keys[i];

		if (k->text && !in_list(k->text, allowed))
			report(m, "schema.unknown_key", k, key_path(m, path, k->text),
				   "unknown key '%s' in %s (allowed: %s)", k->text, what,
				   list_text(m, allowed));
	}
	for (; *required; required++)
		if (wfe_ymap_get(map, *required) == NULL)
			report(m, "schema.required", map, path,
				   "%s is missing the required key '%s'", what, *required);
}

/* A string-valued node, or NULL after reporting schema.type. */
static const char *
as_string(wfe_model *m, const wfe_ynode *n, const char *path, const char *what)
{
	if (n->kind != WFE_Y_SCALAR || n->type != WFE_YS_STRING)
	{
		report(m, "schema.type", n, path, "%s must be a string, not %s",
			   what, wfe_ynode_describe(n));
		return NULL;
	}
	return n->text;
}

/* map[key] as a string; NULL if absent or reported. */
static const char *
get_string(wfe_model *m, const wfe_ynode *map, const char *key, const char *path)
{
	const wfe_ynode *n = wfe_ymap_get(map, key);

	if (n == NULL)
		return NULL;
	return as_string(m, n, key_path(m, path, key), key);
}

/* A name reference (stage, route target, contract) from a scalar node. */
static wfe_name_ref
name_ref_of(wfe_model *m, const wfe_ynode *n, const char *path, const char *what)
{
	wfe_name_ref r = {NULL, path, n ? n->line : 1, n ? n->column : 1};

	if (n != NULL)
		r.name = as_string(m, n, path, what);
	return r;
}

/* map[key] as a name reference. */
static wfe_name_ref
get_name_ref(wfe_model *m, const wfe_ynode *map, const char *key, const char *path)
{
	const wfe_ynode *n = wfe_ymap_get(map, key);
	wfe_name_ref r = {NULL, key_path(m, path, key), map->line, map->column};

	if (n == NULL)
		return r;
	return name_ref_of(m, n, r.path, key);
}

/* map[key] as a sequence of name references; returns count (-1 if absent). */
static int
get_name_list(wfe_model *m, const wfe_ynode *map, const char *key,
			  const char *path, wfe_name_ref **out)
{
	const wfe_ynode *n = wfe_ymap_get(map, key);
	const char *kpath = key_path(m, path, key);

	*out = NULL;
	if (n == NULL)
		return -1;
	if (n->kind != WFE_Y_SEQ)
	{
		report(m, "schema.type", n, kpath, "%s must be a list, not %s", key,
			   wfe_ynode_describe(n));
		return -1;
	}
	*out = wfe_arena_alloc(m->arena, sizeof(wfe_name_ref) * (n->n ? n->n : 1));
	for (int i = 0; i < n->n; i++)
		(*out)[i] = name_ref_of(m, n->items[i], index_path(m, kpath, i), key);
	return n->n;
}

/* map[key] as a list of plain strings (names), each checked by `valid`. */
static const char **
get_word_list(wfe_model *m, const wfe_ynode *map, const char *key,
			  const char *path, int *count, const char *const *allowed)
{
	wfe_name_ref *refs;
	int			n = get_name_list(m, map, key, path, &refs);
	const char **words;

	*count = n;
	if (n < 0)
		return NULL;
	words = wfe_arena_alloc(m->arena, sizeof(char *) * (n ? n : 1));
	for (int i = 0; i < n; i++)
	{
		words[i] = refs[i].name ? refs[i].name : "";
		if (refs[i].name && allowed && !in_list(refs[i].name, allowed))
			wfe_diag(m->diags, "schema.value", refs[i].path, refs[i].line, refs[i].column,
					 "'%s' is not allowed in %s (allowed: %s)", refs[i].name, key,
					 list_text(m, allowed));
		for (int j = 0; j < i; j++)
			if (refs[i].name && strcmp(words[j], refs[i].name) == 0)
				wfe_diag(m->diags, "schema.value", refs[i].path, refs[i].line, refs[i].column,
						 "'%s' is listed twice in %s", refs[i].name, key);
	}
	return words;
}

/* map[key] as a boolean; keeps *out when absent. */
static void
get_bool(wfe_model *m, const wfe_ynode *map, const char *key, const char *path, int *out)
{
	const wfe_ynode *n = wfe_ymap_get(map, key);

	if (n == NULL)
		return;
	if (n->kind != WFE_Y_SCALAR || n->type != WFE_YS_BOOL)
		report(m, "schema.type", n, key_path(m, path, key),
			   "%s must be true or false, not %s", key, wfe_ynode_describe(n));
	else
		*out = n->bval;
}

/*
 * map[key] as a duration in milliseconds: a positive integer, or null where
 * `nullable` (meaning "none").  Keeps *out when absent or invalid.
 */
static void
get_ms(wfe_model *m, const wfe_ynode *map, const char *key, const char *path,
	   long long *out, int nullable)
{
	const wfe_ynode *n = wfe_ymap_get(map, key);
	const char *kpath = key_path(m, path, key);

	if (n == NULL)
		return;
	if (nullable && n->kind == WFE_Y_SCALAR && n->type == WFE_YS_NULL)
	{
		*out = WFE_NONE;
		return;
	}
	if (n->kind != WFE_Y_SCALAR || n->type != WFE_YS_INT)
		report(m, "schema.type", n, kpath, "%s must be an integer number of milliseconds, not %s",
			   key, wfe_ynode_describe(n));
	else if (n->ival < 1)
		report(m, "schema.value", n, kpath, "%s must be at least 1, not %lld", key, n->ival);
	else if (n->ival > WFE_MAX_DURATION_MS)
		report(m, "limits.deadline", n, kpath,
			   "%s of %lld ms is over the limit of %lld ms (30 days)", key, n->ival,
			   WFE_MAX_DURATION_MS);
	else
		*out = n->ival;
}

/* A retry policy mapping over `base` (the defaults in force). */
static wfe_retry
read_retry(wfe_model *m, const wfe_ynode *n, const char *path, wfe_retry base)
{
	wfe_retry	r = base;
	const wfe_ynode *v;

	if (n == NULL)
		return r;
	if (n->kind != WFE_Y_MAP)
	{
		report(m, "schema.type", n, path, "retry must be a mapping, not %s", wfe_ynode_describe(n));
		return r;
	}
	check_keys(m, n, path, retry_keys, none, "retry");
	if ((v = wfe_ymap_get(n, "max_attempts")) != NULL)
	{
		const char *p = key_path(m, path, "max_attempts");

		if (v->kind != WFE_Y_SCALAR || v->type != WFE_YS_INT)
			report(m, "schema.type", v, p, "max_attempts must be an integer, not %s",
				   wfe_ynode_describe(v));
		else if (v->ival < 1)
			report(m, "schema.value", v, p, "max_attempts must be at least 1, not %lld", v->ival);
		else if (v->ival > WFE_MAX_ATTEMPTS_LIMIT)
			report(m, "limits.retries", v, p, "max_attempts of %lld is over the limit of %d",
				   v->ival, WFE_MAX_ATTEMPTS_LIMIT);
		else
			r.max_attempts = v->ival;
	}
	get_ms(m, n, "initial_ms", path, &r.initial_ms, 0);
	get_ms(m, n, "max_ms", path, &r.max_ms, 0);
	if ((v = wfe_ymap_get(n, "multiplier")) != NULL)
	{
		const char *p = key_path(m, path, "multiplier");

		if (v->kind != WFE_Y_SCALAR || (v->type != WFE_YS_INT && v->type != WFE_YS_FLOAT))
			report(m, "schema.type", v, p, "multiplier must be a number, not %s",
				   wfe_ynode_describe(v));
		else
		{
			double		mult = v->type == WFE_YS_INT ? (double) v->ival : v->dval;

			if (mult < 1.0 || mult > 100.0)
				report(m, "schema.value", v, p, "multiplier must be between 1 and 100, not %s", v->text);
			else
				r.multiplier = mult;
		}
	}
	if ((v = wfe_ymap_get(n, "jitter")) != NULL)
	{
		static const char *const jitters[] = {"full", "equal", "none", NULL};
		const char *p = key_path(m, path, "jitter");
		const char *j = as_string(m, v, p, "jitter");

		if (j && !in_list(j, jitters))
			report(m, "schema.value", v, p, "jitter must be full, equal or none, not '%s'", j);
		else if (j)
			r.jitter = j;
	}
	if (r.max_ms < r.initial_ms)
		report(m, "schema.value", n, path, "retry max_ms (%lld) is below initial_ms (%lld)",
			   r.max_ms, r.initial_ms);
	return r;
}

/* The cache: {ttl_ms: N} mapping. */
static long long
read_cache(wfe_model *m, const wfe_ynode *map, const char *path)
{
	const wfe_ynode *n = wfe_ymap_get(map, "cache");
	const char *cpath = key_path(m, path, "cache");
	long long	ttl = WFE_NONE;

	if (n == NULL)
		return WFE_NONE;
	if (n->kind != WFE_Y_MAP)
	{
		report(m, "schema.type", n, cpath, "cache must be a mapping like {ttl_ms: 60000}, not %s",
			   wfe_ynode_describe(n));
		return WFE_NONE;
	}
	check_keys(m, n, cpath, cache_keys, cache_keys, "cache");
	get_ms(m, n, "ttl_ms", cpath, &ttl, 0);
	return ttl;
}

/* A rate limit's name: what wfe.configure_rate_limit accepts. */
static int
rate_limit_name_ok(const char *name)
{
	if (!((name[0] >= 'a' && name[0] <= 'z') || (name[0] >= 'A' && name[0] <= 'Z') ||
		  (name[0] >= '0' && name[0] <= '9')))
		return 0;
	for (const char *c = name; *c; c++)
		if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') ||
			  *c == '.' || *c == '_' || *c == '-'))
			return 0;
	return 1;
}

/*
 * The rate limit (dsl.md "Flow-control keys"): `rate_limit: NAME` or
 * `{name: NAME, key: "${...}"}`.  Whether NAME is configured is not the
 * compiler's to know (ratelimit.unknown is a warning, wfe.compile's).
 */
static void
read_rate_limit(wfe_model *m, wfe_stage *s, const wfe_ynode *map)
{
	const wfe_ynode *n = wfe_ymap_get(map, "rate_limit");
	const char *rpath = key_path(m, s->path, "rate_limit");
	const wfe_ynode *name_node = n;
	const char *npath = rpath;

	if (n == NULL)
		return;
	if (n->kind == WFE_Y_MAP)
	{
		check_keys(m, n, rpath, rate_limit_keys, rate_limit_required, "rate_limit");
		name_node = wfe_ymap_get(n, "name");
		npath = key_path(m, rpath, "name");
		s->rate_key = get_string(m, n, "key", rpath);
		if (s->rate_key != NULL && strstr(s->rate_key, "${") == NULL)
			report(m, "schema.value", wfe_ymap_get(n, "key"), key_path(m, rpath, "key"),
				   "rate_limit.key must interpolate the run's data, like \"${context.customer}\"");
		if (name_node == NULL)
			return;
	}
	else if (n->kind != WFE_Y_SCALAR || n->type != WFE_YS_STRING)
	{
		report(m, "schema.type", n, rpath,
			   "rate_limit must be a name or a mapping like {name: api, key: \"${context.customer}\"}, not %s",
			   wfe_ynode_describe(n));
		return;
	}
	s->rate_limit = as_string(m, name_node, npath, "rate_limit.name");
	if (s->rate_limit != NULL && !rate_limit_name_ok(s->rate_limit))
	{
		report(m, "schema.value", name_node, npath,
			   "rate limit name \"%s\" is not valid: use letters, digits, \".\", \"_\" and \"-\"",
			   s->rate_limit);
		s->rate_limit = NULL;
	}
}

/*
 * Keyed concurrency (dsl.md "Flow-control keys"): `concurrency: {key:
 * "${...}", max: N}`, N >= 1.  The key's expressions are checked with the
 * other bindings (refs.c); what it binds to is the run's business.
 */
static void
read_concurrency(wfe_model *m, wfe_stage *s, const wfe_ynode *map)
{
	const wfe_ynode *n = wfe_ymap_get(map, "concurrency");
	const char *cpath = key_path(m, s->path, "concurrency");
	const wfe_ynode *max;

	s->concurrency_max = WFE_NONE;
	if (n == NULL)
		return;
	if (n->kind != WFE_Y_MAP)
	{
		report(m, "schema.type", n, cpath,
			   "concurrency must be a mapping like {key: \"${context.customer}\", max: 1}, not %s",
			   wfe_ynode_describe(n));
		return;
	}
	check_keys(m, n, cpath, concurrency_keys, concurrency_keys, "concurrency");
	s->concurrency_key = get_string(m, n, "key", cpath);
	s->concurrency_key_node = wfe_ymap_get(n, "key");
	s->concurrency_key_path = key_path(m, cpath, "key");
	if (s->concurrency_key != NULL && strstr(s->concurrency_key, "${") == NULL)
		report(m, "schema.value", s->concurrency_key_node, s->concurrency_key_path,
			   "concurrency.key must interpolate the run's data, like \"${context.customer}\"");
	max = wfe_ymap_get(n, "max");
	if (max == NULL)
		return;
	if (max->kind != WFE_Y_SCALAR || max->type != WFE_YS_INT)
		report(m, "schema.type", max, key_path(m, cpath, "max"),
			   "concurrency.max must be an integer, not %s", wfe_ynode_describe(max));
	else if (max->ival < 1 || max->ival > WFE_CONCURRENCY_MAX)
		report(m, "schema.value", max, key_path(m, cpath, "max"),
			   "concurrency.max must be between 1 and %d, not %lld", WFE_CONCURRENCY_MAX, max->ival);
	else
		s->concurrency_max = max->ival;
	if (s->concurrency_key == NULL)
		s->concurrency_max = WFE_NONE;
}

/* The YAML node a JSON pointer ("/a/0/b") names below n, or the deepest one found. */
static const wfe_ynode *
ynode_at_pointer(const wfe_ynode *n, const char *ptr)
{
	char		tok[256];

	while (n && *ptr == '/')
	{
		size_t		len = 0;
		const wfe_ynode *next = NULL;

		for (ptr++; *ptr && *ptr != '/' && len + 1 < sizeof(tok); ptr++)
		{
			if (ptr[0] == '~' && (ptr[1] == '0' || ptr[1] == '1'))
				tok[len++] = *++ptr == '0' ? '~' : '/';
			else
				tok[len++] = *ptr;
		}
		tok[len] = '\0';
		if (n->kind == WFE_Y_MAP)
			next = wfe_ymap_get(n, tok);
		else if (n->kind == WFE_Y_SEQ)
		{
			char	   *end;
			long		k = strtol(tok, &end, 10);

			if (*end == '\0' && k >= 0 && k < n->n)
				next = n->items[k];
		}
		if (next == NULL)
			return n;
		n = next;
	}
	return n;
}

/* Is n a boolean schema (true: anything, false: nothing)? */
static int
is_boolean_schema(const wfe_ynode *n)
{
	return n->kind == WFE_Y_SCALAR && n->type == WFE_YS_BOOL;
}

/*
 * context_schema: compiled by the one JSON Schema validator, so a schema
 * the definition accepts is one submit can check.  Returns whether it is
 * a schema (a mapping or a boolean).
 */
static int
check_json_schema(wfe_model *m, const wfe_ynode *n, const char *path)
{
	json_object *schema;
	wfe_jschema *compiled;
	wfe_jschema_error err;

	if (n->kind != WFE_Y_MAP && !is_boolean_schema(n))
	{
		report(m, "schema.type", n, path, "a schema must be a mapping or a boolean, not %s",
			   wfe_ynode_describe(n));
		return 0;
	}
	schema = wfe_ynode_to_json(n);
	compiled = wfe_jschema_compile(schema, &err);
	if (compiled == NULL)
		report(m, err.kind == WFE_JSE_UNKNOWN_KEYWORD ? "schema.unknown_key" : "schema.value",
			   ynode_at_pointer(n, err.pointer), wfe_arena_printf(m->arena, "%s%s", path, err.pointer),
			   "context_schema%s%s: %s", err.pointer[0] ? " at " : "", err.pointer, err.message);
	wfe_jschema_free(compiled);
	json_object_put(schema);
	return 1;
}

/* A string matching `valid`, reported as schema.value otherwise. */
static const char *
checked_string(wfe_model *m, const wfe_ynode *map, const char *key,
			   const char *path, int (*valid) (const char *), const char *expect)
{
	const char *s = get_string(m, map, key, path);

	if (s && !valid(s))
	{
		report(m, "schema.value", wfe_ymap_get(map, key), key_path(m, path, key),
			   "%s '%s' is not valid: %s", key, s, expect);
		return NULL;
	}
	return s;
}

static int
valid_stage_name(const char *s)
{
	return is_identifier(s, "_-", 62);
}

static int
valid_workflow_name(const char *s)
{
	return is_identifier(s, "_.-", 62);
}

/* A stage's queue, if named, must be a valid queue name. */
static void
check_queue(wfe_model *m, const wfe_stage *s)
{
	if (s->queue.name && !wfe_queue_name_valid(s->queue.name))
		wfe_diag(m->diags, "schema.value", s->queue.path, s->queue.line, s->queue.column,
				 "queue '%s' is not valid: queue names match " WFE_QUEUE_NAME_PATTERN,
				 s->queue.name);
}

static int
valid_context(const char *s)
{
	return is_identifier(s, "_.-", 62);
}

/* A name_ref that must be a contract ref. */
static wfe_name_ref
get_contract_ref(wfe_model *m, const wfe_ynode *map, const char *key, const char *path)
{
	wfe_name_ref r = get_name_ref(m, map, key, path);

	if (r.name && !is_contract_ref(r.name))
	{
		wfe_diag(m->diags, "schema.value", r.path, r.line, r.column,
				 "%s '%s' is not a contract reference like name@1", key, r.name);
		r.name = NULL;
	}
	return r;
}

/* input: a mapping (default {}). */
static void
read_input(wfe_model *m, wfe_stage *s, const wfe_ynode *map)
{
	const wfe_ynode *n = wfe_ymap_get(map, "input");

	s->input_path = key_path(m, s->path, "input");
	if (n == NULL || (n->kind == WFE_Y_SCALAR && n->type == WFE_YS_NULL))
		return;
	if (n->kind != WFE_Y_MAP)
		report(m, "schema.type", n, s->input_path, "input must be a mapping, not %s",
			   wfe_ynode_describe(n));
	else
		s->input = n;
}

/* The settings shared by action and worker stages and by tasks. */
static void
read_executor_settings(wfe_model *m, wfe_stage *s, const wfe_ynode *map)
{
	read_input(m, s, map);
	s->retry = read_retry(m, wfe_ymap_get(map, "retry"), key_path(m, s->path, "retry"),
						  m->default_retry);
	s->execution_deadline_ms = m->default_execution_deadline_ms;
	s->queue_deadline_ms = m->default_queue_deadline_ms;
	s->heartbeat_ms = m->default_heartbeat_ms;
	get_ms(m, map, "execution_deadline_ms", s->path, &s->execution_deadline_ms, 0);
	get_ms(m, map, "queue_deadline_ms", s->path, &s->queue_deadline_ms, 1);
	get_ms(m, map, "heartbeat_ms", s->path, &s->heartbeat_ms, 1);
	s->cache_ttl_ms = read_cache(m, map, s->path);
	read_rate_limit(m, s, map);
	read_concurrency(m, s, map);
}

/*
 * A child workflow (a workflow stage, a task's workflow:): NAME or
 * NAME@VERSION, with an input, a retry policy and an execution deadline.
 */
static void
read_child(wfe_model *m, wfe_stage *s, const wfe_ynode *map)
{
	s->ref = get_name_ref(m, map, "workflow", s->path);
	if (s->ref.name)
	{
		const char *at = strchr(s->ref.name, '@');
		char	   *name = wfe_arena_strdup(m->arena, s->ref.name);

		if (at)
			name[at - s->ref.name] = '\0';
		if (!valid_workflow_name(name) || (at && !is_semver(at + 1)))
		{
			wfe_diag(m->diags, "schema.value", s->ref.path, s->ref.line, s->ref.column,
					 "workflow '%s' is not a workflow name, or name@version with a semantic version",
					 s->ref.name);
			s->ref.name = NULL;
		}
	}
	read_input(m, s, map);
	s->retry = read_retry(m, wfe_ymap_get(map, "retry"), key_path(m, s->path, "retry"),
						  m->default_retry);
	s->execution_deadline_ms = m->default_execution_deadline_ms;
	s->queue_deadline_ms = WFE_NONE;
	s->heartbeat_ms = WFE_NONE;
	s->cache_ttl_ms = WFE_NONE;
	get_ms(m, map, "execution_deadline_ms", s->path, &s->execution_deadline_ms, 0);
}

/* map[key] as a count: an integer >= 0; keeps *out when absent or invalid. */
static void
get_count(wfe_model *m, const wfe_ynode *map, const char *key, const char *path, long long *out)
{
	const wfe_ynode *n = wfe_ymap_get(map, key);

	if (n == NULL)
		return;
	if (n->kind != WFE_Y_SCALAR || n->type != WFE_YS_INT)
		report(m, "schema.type", n, key_path(m, path, key), "%s must be an integer, not %s",
			   key, wfe_ynode_describe(n));
	else if (n->ival < 0)
		report(m, "schema.value", n, key_path(m, path, key), "%s must not be negative, not %lld",
			   key, n->ival);
	else
		*out = n->ival;
}

/*
 * A map's items (a map stage's `items`, a task's `for_each`): one "${...}"
 * reference bound at release, or a literal sequence no longer than
 * wfe.max_map_items; and its max_concurrency and tolerated_failures.
 */
static void
read_map_items(wfe_model *m, wfe_stage *s, const wfe_ynode *map, const char *key)
{
	const wfe_ynode *n = wfe_ymap_get(map, key);

	s->items_path = key_path(m, s->path, key);
	s->max_concurrency = WFE_NONE;
	s->tolerated_failures = 0;
	get_count(m, map, "max_concurrency", s->path, &s->max_concurrency);
	get_count(m, map, "tolerated_failures", s->path, &s->tolerated_failures);
	if (s->max_concurrency == 0)
		report(m, "schema.value", wfe_ymap_get(map, "max_concurrency"),
			   key_path(m, s->path, "max_concurrency"), "max_concurrency must be at least 1");
	if (n == NULL)
		return;
	if (n->kind == WFE_Y_SEQ)
	{
		if (n->n > m->opts->max_map_items)
			report(m, "limits.map_items", n, s->items_path,
				   "%s has %d items, over the limit of %d (wfe.max_map_items)",
				   key, n->n, m->opts->max_map_items);
		s->items = n;
	}
	else if (n->kind == WFE_Y_SCALAR && n->type == WFE_YS_STRING && n->len > 3 &&
			 strncmp(n->text, "${", 2) == 0 && n->text[n->len - 1] == '}' &&
			 memchr(n->text + 2, '$', n->len - 3) == NULL)
		s->items = n;
	else
		report(m, "schema.type", n, s->items_path,
			   "%s must be one reference \"${...}\" that binds to an array, or a list, not %s",
			   key, wfe_ynode_describe(n));
}

/*
 * A map item that runs a child workflow per element (map_child.c at run
 * time): a workflow stage's keys, so no queue, cache or worker deadlines.
 */
static void
read_map_child_item(wfe_model *m, wfe_stage *s, const wfe_ynode *item)
{
	static const char *const worker_only[] = {"queue", "cache", "queue_deadline_ms", "heartbeat_ms",
	"rate_limit", "concurrency", NULL};

	for (int k = 0; worker_only[k]; k++)
		if (wfe_ymap_get(item, worker_only[k]) != NULL)
			report(m, "schema.value", wfe_ymap_get(item, worker_only[k]), key_path(m, s->path, worker_only[k]),
				   "a map item that runs a child workflow has no %s (a child run has no queue of its own)",
				   worker_only[k]);
	s->item_workflow = 1;
	read_child(m, s, item);
}

/* A map stage's item: a worker (with its queue), an action or a child workflow, and their settings. */
static void
read_map_item(wfe_model *m, wfe_stage *s, const wfe_ynode *map)
{
	const wfe_ynode *item = wfe_ymap_get(map, "item");
	const char *ipath = key_path(m, s->path, "item");
	const char *saved = s->path;
	int			has_worker,
				has_action,
				has_child;

	if (item == NULL)
		return;
	if (item->kind != WFE_Y_MAP)
	{
		report(m, "schema.type", item, ipath, "item must be a mapping, not %s", wfe_ynode_describe(item));
		return;
	}
	check_keys(m, item, ipath, item_keys, none, "a map's item");
	has_worker = wfe_ymap_get(item, "worker") != NULL;
	has_action = wfe_ymap_get(item, "action") != NULL;
	has_child = wfe_ymap_get(item, "workflow") != NULL;
	if (has_worker + has_action + has_child != 1)
	{
		report(m, "schema.required", item, ipath,
			   "map '%s' needs one item executor: worker + queue, action, or workflow", s->name ? s->name : "?");
		return;
	}
	s->path = ipath;			/* the item's settings are reported under /item */
	if (has_child)
	{
		read_map_child_item(m, s, item);
		s->path = saved;
		return;
	}
	s->item_action = has_action;
	if (has_action)
		s->ref = get_contract_ref(m, item, "action", ipath);
	else
	{
		s->ref = get_contract_ref(m, item, "worker", ipath);
		s->queue = get_name_ref(m, item, "queue", ipath);
		if (s->queue.name == NULL && wfe_ymap_get(item, "queue") == NULL)
			report(m, "schema.required", item, ipath, "a worker item needs a queue");
		check_queue(m, s);
	}
	read_executor_settings(m, s, item);	/* its concurrency: {key, max} binds per element */
	if (has_action)
	{
		s->queue_deadline_ms = m->default_queue_deadline_ms;
		s->heartbeat_ms = m->default_heartbeat_ms;
	}
	s->path = saved;
}

/* A decision's branches: [{when, next}], the fallback flagged. */
static void
read_decision(wfe_model *m, wfe_stage *s, const wfe_ynode *map)
{
	const wfe_ynode *bl = wfe_ymap_get(map, "branches");
	const char *bpath = key_path(m, s->path, "branches");

	s->on_evaluation_error = get_name_ref(m, map, "on_evaluation_error", s->path);
	if (bl == NULL)
		return;
	if (bl->kind != WFE_Y_SEQ || bl->n == 0)
	{
		report(m, "schema.type", bl, bpath, "branches must be a non-empty list of {when, next}");
		return;
	}
	s->branches = wfe_arena_alloc(m->arena, sizeof(wfe_branch) * bl->n);
	s->nbranches = bl->n;
	for (int i = 0; i < bl->n; i++)
	{
		const wfe_ynode *b = bl->items[i];
		const char *path = index_path(m, bpath, i);
		wfe_branch *br = &s->branches[i];
		const wfe_ynode *w;

		br->when_path = key_path(m, path, "when");
		br->when_line = b->line;
		br->when_column = b->column;
		if (b->kind != WFE_Y_MAP)
		{
			report(m, "schema.type", b, path, "a branch must be a mapping {when, next}");
			continue;
		}
		check_keys(m, b, path, branch_keys, branch_keys, "a decision branch");
		br->next = get_name_ref(m, b, "next", path);
		w = wfe_ymap_get(b, "when");
		if (w == NULL)
			continue;
		br->when_line = w->line;
		br->when_column = w->column;
		if (w->kind == WFE_Y_SCALAR && w->type == WFE_YS_BOOL && w->bval)
			br->when = "true";	/* an unquoted `when: true` is the fallback too */
		else
			br->when = as_string(m, w, br->when_path, "when");
		if (br->when)
		{
			const char *t = br->when;
			size_t		len;

			while (isspace((unsigned char) *t))
				t++;
			len = strlen(t);
			while (len > 0 && isspace((unsigned char) t[len - 1]))
				len--;
			br->is_fallback = (len == 4 && strncmp(t, "true", 4) == 0);
		}
	}
}

/*
 * A sleep's time: exactly one of duration_ms (a duration like a deadline's)
 * and until (a string binding to an RFC 3339 timestamp when released).
 */
static void
read_sleep_at(wfe_model *m, wfe_stage *s, const wfe_ynode *map, const char *path)
{
	const wfe_ynode *d = wfe_ymap_get(map, "duration_ms");
	const wfe_ynode *u = wfe_ymap_get(map, "until");

	s->duration_ms = WFE_NONE;
	s->until_path = key_path(m, path, "until");
	if ((d == NULL) == (u == NULL))
	{
		report(m, d ? "schema.value" : "schema.required", d ? d : map, path,
			   "sleep '%s' needs exactly one of duration_ms and until", s->name ? s->name : "?");
		return;
	}
	if (d != NULL)
		get_ms(m, map, "duration_ms", path, &s->duration_ms, 0);
	else if (u->kind != WFE_Y_SCALAR || u->type != WFE_YS_STRING)
		report(m, "schema.type", u, s->until_path,
			   "until must be a string (an RFC 3339 timestamp or a ${...} binding to one), not %s",
			   wfe_ynode_describe(u));
	else
		s->until = u;
}

static void read_task_common(wfe_model *m, wfe_stage *s, const wfe_ynode *map);

/* One stage of the stages form. */
static void
read_stage(wfe_model *m, wfe_stage *s, const wfe_ynode *map)
{
	const wfe_ynode *tn = wfe_ymap_get(map, "type");
	const char *type;

	s->name = checked_string(m, map, "name", s->path, valid_stage_name,
							 "stage names match ^[a-z][a-z0-9_-]{0,62}$");
	s->critical = 1;
	s->awaits = 1;
	s->cache_ttl_ms = WFE_NONE;
	if (tn == NULL)
	{
		report(m, "schema.required", map, s->path, "stage is missing the required key 'type'");
		s->type = WFE_ST_INVALID;
		return;
	}
	type = as_string(m, tn, key_path(m, s->path, "type"), "type");
	if (type == NULL)
	{
		s->type = WFE_ST_INVALID;
		return;
	}
	if (strcmp(type, "action") == 0)
	{
		s->type = WFE_ST_ACTION;
		check_keys(m, map, s->path, action_keys, action_required, "an action stage");
		s->ref = get_contract_ref(m, map, "action", s->path);
		read_executor_settings(m, s, map);
		s->queue_deadline_ms = m->default_queue_deadline_ms;
		s->heartbeat_ms = m->default_heartbeat_ms;
	}
	else if (strcmp(type, "worker") == 0)
	{
		s->type = WFE_ST_WORKER;
		check_keys(m, map, s->path, worker_keys, worker_required, "a worker stage");
		s->ref = get_contract_ref(m, map, "worker", s->path);
		s->queue = get_name_ref(m, map, "queue", s->path);
		check_queue(m, s);
		read_executor_settings(m, s, map);
	}
	else if (strcmp(type, "decision") == 0)
	{
		s->type = WFE_ST_DECISION;
		check_keys(m, map, s->path, decision_keys, decision_required, "a decision stage");
		read_decision(m, s, map);
		return;
	}
	else if (strcmp(type, "fork") == 0)
	{
		s->type = WFE_ST_FORK;
		check_keys(m, map, s->path, fork_keys, fork_keys, "a fork stage");
		s->ntargets = get_name_list(m, map, "branches", s->path, &s->targets);
		if (s->ntargets > m->opts->max_fanout)
			report(m, "limits.fanout", wfe_ymap_get(map, "branches"),
				   key_path(m, s->path, "branches"),
				   "fork '%s' has %d branches, over the limit of %d (wfe.max_fanout)",
				   s->name ? s->name : "?", s->ntargets, m->opts->max_fanout);
		return;
	}
	else if (strcmp(type, "join") == 0)
	{
		static const char *default_acceptable[] = {"completed"};

		s->type = WFE_ST_JOIN;
		check_keys(m, map, s->path, join_keys, join_required, "a join stage");
		s->ntargets = get_name_list(m, map, "required", s->path, &s->targets);
		s->acceptable = get_word_list(m, map, "acceptable_terminal_states", s->path,
									  &s->nacceptable, stage_states);
		if (s->acceptable == NULL || s->nacceptable == 0)
		{
			if (s->acceptable && s->nacceptable == 0)
				report(m, "schema.value", wfe_ymap_get(map, "acceptable_terminal_states"),
					   key_path(m, s->path, "acceptable_terminal_states"),
					   "acceptable_terminal_states must not be empty");
			s->acceptable = default_acceptable;
			s->nacceptable = 1;
		}
	}
	else if (strcmp(type, "wait") == 0)
	{
		s->type = WFE_ST_WAIT;
		check_keys(m, map, s->path, wait_keys, wait_required, "a wait stage");
		s->ref = get_contract_ref(m, map, "signal", s->path);
		s->timeout_ms = WFE_NONE;
		get_ms(m, map, "timeout_ms", s->path, &s->timeout_ms, 1);
		s->on_timeout = get_name_ref(m, map, "on_timeout", s->path);
	}
	else if (strcmp(type, "sleep") == 0)
	{
		s->type = WFE_ST_SLEEP;
		check_keys(m, map, s->path, sleep_keys, sleep_required, "a sleep stage");
		read_sleep_at(m, s, map, s->path);
	}
	else if (strcmp(type, "workflow") == 0)
	{
		s->type = WFE_ST_WORKFLOW;
		check_keys(m, map, s->path, workflow_keys, workflow_required, "a workflow stage");
		read_child(m, s, map);
	}
	else if (strcmp(type, "map") == 0)
	{
		s->type = WFE_ST_MAP;
		check_keys(m, map, s->path, map_keys, map_required, "a map stage");
		read_map_items(m, s, map, "items");
		read_map_item(m, s, map);
	}
	else
	{
		report(m, "schema.value", tn, key_path(m, s->path, "type"),
			   "stage type '%s' is not one of action, worker, decision, fork, join, wait, sleep, workflow, map", type);
		s->type = WFE_ST_INVALID;
		return;
	}
	s->on_success = get_name_ref(m, map, "on_success", s->path);
	s->on_failure = get_name_ref(m, map, "on_failure", s->path);
}

/* produces: [{key, type}] */
static void
read_produces(wfe_model *m, wfe_stage *s, const wfe_ynode *map)
{
	const wfe_ynode *pl = wfe_ymap_get(map, "produces");
	const char *ppath = key_path(m, s->path, "produces");

	if (pl == NULL)
		return;
	if (pl->kind != WFE_Y_SEQ)
	{
		report(m, "schema.type", pl, ppath, "produces must be a list of {key, type}");
		return;
	}
	s->produces = wfe_arena_alloc(m->arena, sizeof(wfe_produce) * (pl->n ? pl->n : 1));
	for (int i = 0; i < pl->n; i++)
	{
		const wfe_ynode *p = pl->items[i];
		const char *path = index_path(m, ppath, i);
		wfe_produce *pr = &s->produces[s->nproduces];
		size_t		tl;

		if (p->kind != WFE_Y_MAP)
		{
			report(m, "schema.type", p, path, "a produces entry must be a mapping {key, type}");
			continue;
		}
		check_keys(m, p, path, produce_keys, produce_keys, "a produces entry");
		pr->key = get_string(m, p, "key", path);
		pr->type = get_string(m, p, "type", path);
		pr->path = path;
		if (pr->type == NULL || pr->key == NULL)
			continue;
		tl = strlen(pr->type);
		if (!in_list(pr->type, produce_types) &&
			!(tl > 6 && strcmp(pr->type + tl - 6, "Object") == 0 && isupper((unsigned char) pr->type[0])))
		{
			report(m, "schema.value", wfe_ymap_get(p, "type"), key_path(m, path, "type"),
				   "type '%s' is not one of %s, or a name ending in Object", pr->type,
				   list_text(m, produce_types));
			continue;
		}
		for (int j = 0; j < s->nproduces; j++)
			if (strcmp(s->produces[j].key, pr->key) == 0)
				report(m, "schema.value", p, path, "output key '%s' is produced twice", pr->key);
		s->nproduces++;
	}
}

/* requires_outputs: [{producer_task_id, key}] */
static void
read_requires(wfe_model *m, wfe_stage *s, const wfe_ynode *map)
{
	const wfe_ynode *rl = wfe_ymap_get(map, "requires_outputs");
	const char *rpath = key_path(m, s->path, "requires_outputs");

	if (rl == NULL)
		return;
	if (rl->kind != WFE_Y_SEQ)
	{
		report(m, "schema.type", rl, rpath, "requires_outputs must be a list of {producer_task_id, key}");
		return;
	}
	s->requires = wfe_arena_alloc(m->arena, sizeof(wfe_require) * (rl->n ? rl->n : 1));
	for (int i = 0; i < rl->n; i++)
	{
		const wfe_ynode *r = rl->items[i];
		const char *path = index_path(m, rpath, i);
		wfe_require *rq = &s->requires[s->nrequires];

		if (r->kind != WFE_Y_MAP)
		{
			report(m, "schema.type", r, path, "a requires_outputs entry must be a mapping");
			continue;
		}
		check_keys(m, r, path, require_keys, require_keys, "a requires_outputs entry");
		rq->producer = get_name_ref(m, r, "producer_task_id", path);
		rq->key = get_string(m, r, "key", path);
		if (rq->producer.name && rq->key)
			s->nrequires++;
	}
}

/* One task of the tasks form, as a stage. */
static void
read_task(wfe_model *m, wfe_stage *s, const wfe_ynode *map)
{
	int			has_worker = wfe_ymap_get(map, "worker") != NULL;
	int			has_action = wfe_ymap_get(map, "action") != NULL;
	const wfe_ynode *wait = wfe_ymap_get(map, "wait");
	const wfe_ynode *sleep = wfe_ymap_get(map, "sleep");
	int			has_child = wfe_ymap_get(map, "workflow") != NULL;
	static const char *const id_only[] = {"id", NULL};

	s->name = checked_string(m, map, "id", s->path, valid_stage_name,
							 "task ids match ^[a-z][a-z0-9_-]{0,62}$");
	s->critical = 1;
	s->awaits = 1;
	s->dependency_policy = "require_success";
	if ((wait != NULL) + (sleep != NULL) + has_worker + has_action + has_child > 1)
		report(m, "schema.form", map, s->path,
			   "task '%s' names more than one executor (worker, action, wait, sleep, workflow); it needs exactly one",
			   s->name ? s->name : "?");
	if (has_child && wait == NULL && sleep == NULL && !has_worker && !has_action)
	{
		s->type = WFE_ST_WORKFLOW;
		check_keys(m, map, s->path, task_workflow_keys, id_only, "a workflow task");
		read_child(m, s, map);
		read_task_common(m, s, map);
		if (wfe_ymap_get(map, "for_each") != NULL)
		{
			/* a map whose elements are child runs */
			s->item_workflow = 1;
			s->type = WFE_ST_MAP;
			read_map_items(m, s, map, "for_each");
		}
		else if (wfe_ymap_get(map, "max_concurrency") || wfe_ymap_get(map, "tolerated_failures"))
			report(m, "schema.value", map, s->path,
				   "task '%s' sets max_concurrency or tolerated_failures without for_each",
				   s->name ? s->name : "?");
		return;
	}
	if (wait != NULL || sleep != NULL)
	{
		/* wait: {signal, timeout_ms} or sleep: {duration_ms | until}: no input, retry or queue */
		const wfe_ynode *e = wait ? wait : sleep;
		const char *epath = key_path(m, s->path, wait ? "wait" : "sleep");

		s->type = wait ? WFE_ST_WAIT : WFE_ST_SLEEP;
		s->timeout_ms = WFE_NONE;
		s->duration_ms = WFE_NONE;
		check_keys(m, map, s->path, wait ? task_wait_keys : task_sleep_keys, id_only,
				   wait ? "a wait task" : "a sleep task");
		if (e->kind != WFE_Y_MAP)
			report(m, "schema.type", e, epath, "%s must be a mapping, not %s", wait ? "wait" : "sleep",
				   wfe_ynode_describe(e));
		else if (wait)
		{
			check_keys(m, e, epath, wait_executor_keys, wait_executor_required, "wait");
			s->ref = get_contract_ref(m, e, "signal", epath);
			get_ms(m, e, "timeout_ms", epath, &s->timeout_ms, 1);
		}
		else
		{
			check_keys(m, e, epath, sleep_executor_keys, none, "sleep");
			read_sleep_at(m, s, e, epath);
		}
		read_task_common(m, s, map);
		return;
	}
	if (has_worker && has_action)
	{
		report(m, "schema.form", map, s->path,
			   "task '%s' names both a worker and an action; it needs exactly one executor",
			   s->name ? s->name : "?");
		has_action = 0;
	}
	if (!has_worker && !has_action)
		report(m, "schema.required", map, s->path,
			   "task '%s' needs an executor: worker + queue, or action", s->name ? s->name : "?");
	if (has_action)
	{
		s->type = WFE_ST_ACTION;
		check_keys(m, map, s->path, task_action_keys, id_only, "an action task");
		s->ref = get_contract_ref(m, map, "action", s->path);
	}
	else
	{
		static const char *const worker_task_required[] = {"id", "queue", NULL};

		s->type = WFE_ST_WORKER;
		check_keys(m, map, s->path, task_keys,
				   has_worker ? worker_task_required : id_only, "a worker task");
		s->ref = get_contract_ref(m, map, "worker", s->path);
		s->queue = get_name_ref(m, map, "queue", s->path);
		check_queue(m, s);
	}
	read_executor_settings(m, s, map);
	read_task_common(m, s, map);
	if (wfe_ymap_get(map, "for_each") != NULL)
	{
		s->item_action = s->type == WFE_ST_ACTION;
		s->type = WFE_ST_MAP;
		read_map_items(m, s, map, "for_each");
	}
	else if (wfe_ymap_get(map, "max_concurrency") || wfe_ymap_get(map, "tolerated_failures"))
		report(m, "schema.value", map, s->path,
			   "task '%s' sets max_concurrency or tolerated_failures without for_each",
			   s->name ? s->name : "?");
}

/* What every task has besides its executor. */
static void
read_task_common(wfe_model *m, wfe_stage *s, const wfe_ynode *map)
{
	s->description = get_string(m, map, "description", s->path);
	get_bool(m, map, "critical", s->path, &s->critical);
	get_bool(m, map, "awaits", s->path, &s->awaits);
	{
		static const char *const policies[] = {"require_success", "allow_skipped", NULL};
		const char *p = get_string(m, map, "dependency_policy", s->path);

		if (p && !in_list(p, policies))
			report(m, "schema.value", wfe_ymap_get(map, "dependency_policy"),
				   key_path(m, s->path, "dependency_policy"),
				   "dependency_policy must be require_success or allow_skipped, not '%s'", p);
		else if (p)
			s->dependency_policy = p;
	}
	s->ndepends = get_name_list(m, map, "depends_on", s->path, &s->depends_on);
	if (s->ndepends < 0)
		s->ndepends = 0;
	s->contexts = get_word_list(m, map, "contexts", s->path, &s->ncontexts, NULL);
	read_produces(m, s, map);
	read_requires(m, s, map);
}

/* defaults: {retry, execution_deadline_ms, queue_deadline_ms, heartbeat_ms} */
static void
read_defaults(wfe_model *m, const wfe_ynode *root)
{
	const wfe_ynode *d = wfe_ymap_get(root, "defaults");

	m->default_retry.max_attempts = 3;
	m->default_retry.initial_ms = 1000;
	m->default_retry.multiplier = 2.0;
	m->default_retry.max_ms = 60000;
	m->default_retry.jitter = "full";
	m->default_execution_deadline_ms = 3600000;
	m->default_queue_deadline_ms = WFE_NONE;
	m->default_heartbeat_ms = WFE_NONE;
	if (d == NULL)
		return;
	if (d->kind != WFE_Y_MAP)
	{
		report(m, "schema.type", d, "/defaults", "defaults must be a mapping, not %s",
			   wfe_ynode_describe(d));
		return;
	}
	check_keys(m, d, "/defaults", defaults_keys, none, "defaults");
	m->default_retry = read_retry(m, wfe_ymap_get(d, "retry"), "/defaults/retry", m->default_retry);
	get_ms(m, d, "execution_deadline_ms", "/defaults", &m->default_execution_deadline_ms, 0);
	get_ms(m, d, "queue_deadline_ms", "/defaults", &m->default_queue_deadline_ms, 1);
	get_ms(m, d, "heartbeat_ms", "/defaults", &m->default_heartbeat_ms, 1);
}

/* terminal_policy: each key has exactly one accepted value today. */
static void
read_terminal_policy(wfe_model *m, const wfe_ynode *root)
{
	const wfe_ynode *p = wfe_ymap_get(root, "terminal_policy");
	const char **slots[] = {&m->fork_branch_failure, &m->late_callbacks,
	&m->finaliser_order, &m->finaliser_failure_terminal};

	for (int i = 0; policy_keys[i]; i++)
		*slots[i] = policy_values[i];
	if (p == NULL)
		return;
	if (p->kind != WFE_Y_MAP)
	{
		report(m, "schema.type", p, "/terminal_policy", "terminal_policy must be a mapping");
		return;
	}
	check_keys(m, p, "/terminal_policy", policy_keys, none, "terminal_policy");
	for (int i = 0; policy_keys[i]; i++)
	{
		const char *v = get_string(m, p, policy_keys[i], "/terminal_policy");

		if (v && strcmp(v, policy_values[i]) != 0)
			report(m, "schema.value", wfe_ymap_get(p, policy_keys[i]),
				   key_path(m, "/terminal_policy", policy_keys[i]),
				   "terminal_policy %s '%s' is not supported; the only accepted value is '%s'",
				   policy_keys[i], v, policy_values[i]);
	}
}

/* The top-level keys other than stages/tasks. */
static void
read_header(wfe_model *m, const wfe_ynode *root)
{
	const wfe_ynode *n;

	m->name = checked_string(m, root, "name", "", valid_workflow_name,
							 "workflow names match ^[a-z][a-z0-9_.-]{0,62}$");
	if ((n = wfe_ymap_get(root, "version")) != NULL)
	{
		if (n->kind == WFE_Y_SCALAR && (n->type == WFE_YS_INT || n->type == WFE_YS_FLOAT))
			report(m, "schema.type", n, "/version",
				   "version must be a quoted string like \"1.0.0\", not the number %s", n->text);
		else
			m->version = checked_string(m, root, "version", "", is_semver,
										"versions are semantic versions like \"2.3.0\"");
	}
	m->description = get_string(m, root, "description", "");
	m->context = checked_string(m, root, "context", "", valid_context,
								"context names match ^[a-z][a-z0-9_.-]{0,62}$");
	if ((n = wfe_ymap_get(root, "context_schema")) != NULL)
	{
		if (check_json_schema(m, n, "/context_schema"))
			m->context_schema = n;
	}
	if ((n = wfe_ymap_get(root, "output")) != NULL)
	{
		/* the run's output template (dsl.md "Run output"), bound like an input */
		if (n->kind != WFE_Y_MAP)
			report(m, "schema.type", n, "/output", "output must be a mapping, not %s",
				   wfe_ynode_describe(n));
		else
			m->output = n;
	}
	read_defaults(m, root);
	m->run_deadline_ms = WFE_NONE;
	get_ms(m, root, "run_deadline_ms", "", &m->run_deadline_ms, 1);
	read_terminal_policy(m, root);

	m->nfinalisers = get_name_list(m, root, "finalisers", "", &m->finalisers);
	if (m->nfinalisers < 0)
		m->nfinalisers = 0;
	for (int i = 0; i < m->nfinalisers; i++)
		if (m->finalisers[i].name && !is_contract_ref(m->finalisers[i].name))
		{
			wfe_diag(m->diags, "schema.value", m->finalisers[i].path, m->finalisers[i].line,
					 m->finalisers[i].column,
					 "finaliser '%s' is not an action reference like name@1",
					 m->finalisers[i].name);
			m->finalisers[i].name = NULL;
		}

	{
		static const char *const terminal_words[] = {"completed", "failed", NULL};
		static const char *default_terminals[] = {"completed", "failed"};

		m->terminals = get_word_list(m, root, "terminals", "", &m->nterminals, terminal_words);
		if (m->terminals == NULL)
		{
			m->terminals = default_terminals;
			m->nterminals = 2;
		}
		else if (m->nterminals == 0)
			report(m, "schema.value", wfe_ymap_get(root, "terminals"), "/terminals",
				   "terminals must not be empty");
	}
}

int
wfe_schema_build(wfe_model *m, const wfe_ynode *root)
{
	const wfe_ynode *list;
	const char *lpath;
	int			has_stages,
				has_tasks;

	if (root == NULL || root->kind != WFE_Y_MAP)
	{
		report(m, root ? "schema.type" : "schema.required", root, "",
			   "a definition must be a YAML mapping with name, version and stages or tasks%s%s",
			   root ? ", not " : "", root ? wfe_ynode_describe(root) : "");
		return -1;
	}
	check_keys(m, root, "", top_keys, (const char *const[]) {"name", "version", NULL},
			   "the definition");
	read_header(m, root);

	has_stages = wfe_ymap_get(root, "stages") != NULL;
	has_tasks = wfe_ymap_get(root, "tasks") != NULL;
	if (has_stages == has_tasks)
	{
		report(m, "schema.form", root, "",
			   has_stages ? "a definition has stages or tasks, not both"
			   : "a definition needs stages (a control-flow graph) or tasks (a dependency DAG)");
		return -1;
	}
	m->form = has_stages ? WFE_STAGES_FORM : WFE_TASKS_FORM;
	lpath = has_stages ? "/stages" : "/tasks";
	list = wfe_ymap_get(root, has_stages ? "stages" : "tasks");

	if (m->form == WFE_STAGES_FORM)
	{
		m->entry = get_name_ref(m, root, "entry", "");
		if (m->entry.name == NULL && wfe_ymap_get(root, "entry") == NULL)
			report(m, "schema.required", root, "",
				   "the stages form needs 'entry', the first stage");
	}
	else if (wfe_ymap_get(root, "entry") != NULL)
		report(m, "schema.unknown_key", wfe_ymap_get(root, "entry"), "/entry",
			   "'entry' belongs to the stages form; tasks start from those without depends_on");

	if (list->kind != WFE_Y_SEQ || list->n == 0)
	{
		report(m, "schema.type", list, lpath, "%s must be a non-empty list", lpath + 1);
		return -1;
	}
	if (list->n > m->opts->max_stages)
	{
		report(m, "limits.stages", list, lpath,
			   "%d %s is over the limit of %d (wfe.max_stages)", list->n, lpath + 1,
			   m->opts->max_stages);
		m->over_limits = 1;
		return -1;
	}

	m->stages = wfe_arena_alloc(m->arena, sizeof(wfe_stage) * list->n);
	m->nstages = list->n;
	for (int i = 0; i < list->n; i++)
	{
		wfe_stage  *s = &m->stages[i];
		const wfe_ynode *item = list->items[i];

		s->index = i;
		s->path = index_path(m, lpath, i);
		s->line = item->line;
		s->column = item->column;
		s->type = WFE_ST_INVALID;
		s->cache_ttl_ms = WFE_NONE;
		if (item->kind != WFE_Y_MAP)
		{
			report(m, "schema.type", item, s->path, "each of %s must be a mapping, not %s",
				   lpath + 1, wfe_ynode_describe(item));
			continue;
		}
		if (m->form == WFE_STAGES_FORM)
			read_stage(m, s, item);
		else
			read_task(m, s, item);
	}
	return 0;
}
