/*
 * plan.c — the canonical plan: what the source determines, every default
 * explicit.  Facts from the registry (an action's queue, schemas) are not in
 * it, so the CLI without a registry prints the database's plan and digest.
 */
#include <stdio.h>
#include <string.h>

#include "model.h"

/* A duration or null. */
static json_object *
ms_json(long long v)
{
	return v == WFE_NONE ? NULL : json_object_new_int64(v);
}

/* A string or null. */
static json_object *
str_json(const char *s)
{
	return s ? json_object_new_string(s) : NULL;
}

/* A list of names. */
static json_object *
names_json(const wfe_name_ref *refs, int n)
{
	json_object *a = json_object_new_array();

	for (int i = 0; i < n; i++)
		json_object_array_add(a, str_json(refs[i].name));
	return a;
}

/* A list of plain strings. */
static json_object *
words_json(const char **words, int n)
{
	json_object *a = json_object_new_array();

	for (int i = 0; i < n; i++)
		json_object_array_add(a, json_object_new_string(words[i]));
	return a;
}

static json_object *
retry_json(const wfe_retry *r)
{
	json_object *o = json_object_new_object();

	json_object_object_add(o, "max_attempts", json_object_new_int64(r->max_attempts));
	json_object_object_add(o, "initial_ms", json_object_new_int64(r->initial_ms));
	json_object_object_add(o, "multiplier", json_object_new_double(r->multiplier));
	json_object_object_add(o, "max_ms", json_object_new_int64(r->max_ms));
	json_object_object_add(o, "jitter", json_object_new_string(r->jitter));
	return o;
}

/* Keys every executing stage (action/worker, stage or task) carries. */
static void
add_executor(json_object *o, const wfe_stage *s)
{
	json_object *input = s->input ? wfe_ynode_to_json(s->input) : json_object_new_object();
	int			worker = s->type == WFE_ST_WORKER || (s->type == WFE_ST_MAP && !s->item_action);

	json_object_object_add(o, worker ? "worker" : "action", str_json(s->ref.name));
	if (worker)
		json_object_object_add(o, "queue", str_json(s->queue.name));
	json_object_object_add(o, "input", input);
	json_object_object_add(o, "retry", retry_json(&s->retry));
	json_object_object_add(o, "execution_deadline_ms", ms_json(s->execution_deadline_ms));
	json_object_object_add(o, "queue_deadline_ms", ms_json(s->queue_deadline_ms));
	json_object_object_add(o, "heartbeat_ms", ms_json(s->heartbeat_ms));
	if (s->cache_ttl_ms == WFE_NONE)
		json_object_object_add(o, "cache", NULL);
	else
	{
		json_object *c = json_object_new_object();

		json_object_object_add(c, "ttl_ms", json_object_new_int64(s->cache_ttl_ms));
		json_object_object_add(o, "cache", c);
	}
	/* only when set: plans without one keep their digests */
	if (s->rate_limit != NULL)
	{
		json_object *r = json_object_new_object();

		json_object_object_add(r, "name", str_json(s->rate_limit));
		json_object_object_add(r, "key", s->rate_key ? str_json(s->rate_key) : NULL);
		json_object_object_add(o, "rate_limit", r);
	}
	if (s->concurrency_max != WFE_NONE && s->concurrency_key != NULL)
	{
		json_object *c = json_object_new_object();

		json_object_object_add(c, "key", str_json(s->concurrency_key));
		json_object_object_add(c, "max", json_object_new_int64(s->concurrency_max));
		json_object_object_add(o, "concurrency", c);
	}
}

/* A workflow stage's or task's child: the workflow, its input, retry and deadline. */
static void
add_child(json_object *o, const wfe_stage *s)
{
	json_object_object_add(o, "workflow", str_json(s->ref.name));
	json_object_object_add(o, "input", s->input ? wfe_ynode_to_json(s->input) : json_object_new_object());
	json_object_object_add(o, "retry", retry_json(&s->retry));
	json_object_object_add(o, "execution_deadline_ms", ms_json(s->execution_deadline_ms));
}

/*
 * A map's own keys: its items (a reference or a literal list), bounds, and
 * its item executor as an "item" object with the keys of a worker or action.
 */
static void
add_map(json_object *o, const wfe_stage *s)
{
	json_object *item = json_object_new_object();

	json_object_object_add(o, "items", s->items ? wfe_ynode_to_json(s->items) : NULL);
	json_object_object_add(o, "max_concurrency", ms_json(s->max_concurrency));
	json_object_object_add(o, "tolerated_failures", json_object_new_int64(s->tolerated_failures));
	if (s->item_workflow)
		add_child(item, s);
	else
		add_executor(item, s);
	json_object_object_add(o, "item", item);
}

static const char *
type_name(wfe_stage_type t)
{
	switch (t)
	{
		case WFE_ST_ACTION:
			return "action";
		case WFE_ST_WORKER:
			return "worker";
		case WFE_ST_DECISION:
			return "decision";
		case WFE_ST_FORK:
			return "fork";
		case WFE_ST_JOIN:
			return "join";
		case WFE_ST_WAIT:
			return "wait";
		case WFE_ST_SLEEP:
			return "sleep";
		case WFE_ST_WORKFLOW:
			return "workflow";
		case WFE_ST_MAP:
			return "map";
		case WFE_ST_INVALID:
			break;
	}
	return "invalid";
}

/* One stage of the stages form. */
static json_object *
stage_json(const wfe_stage *s)
{
	json_object *o = json_object_new_object();

	json_object_object_add(o, "name", json_object_new_string(s->name));
	json_object_object_add(o, "type", json_object_new_string(type_name(s->type)));
	switch (s->type)
	{
		case WFE_ST_ACTION:
		case WFE_ST_WORKER:
			add_executor(o, s);
			json_object_object_add(o, "on_success", str_json(s->on_success.name));
			json_object_object_add(o, "on_failure", str_json(s->on_failure.name));
			break;
		case WFE_ST_DECISION:
			{
				json_object *bl = json_object_new_array();

				for (int i = 0; i < s->nbranches; i++)
				{
					json_object *b = json_object_new_object();

					/* the fallback is spelled one way, however it was written */
					json_object_object_add(b, "when",
										   json_object_new_string(s->branches[i].is_fallback
																  ? "true" : s->branches[i].when));
					json_object_object_add(b, "next", str_json(s->branches[i].next.name));
					json_object_array_add(bl, b);
				}
				json_object_object_add(o, "branches", bl);
				json_object_object_add(o, "on_evaluation_error",
									   str_json(s->on_evaluation_error.name));
				break;
			}
		case WFE_ST_FORK:
			json_object_object_add(o, "branches", names_json(s->targets, s->ntargets));
			break;
		case WFE_ST_JOIN:
			json_object_object_add(o, "required", names_json(s->targets, s->ntargets));
			json_object_object_add(o, "acceptable_terminal_states",
								   words_json(s->acceptable, s->nacceptable));
			json_object_object_add(o, "on_success", str_json(s->on_success.name));
			json_object_object_add(o, "on_failure", str_json(s->on_failure.name));
			break;
		case WFE_ST_WAIT:
			/* the timeout route is written out: on_failure's when not given */
			json_object_object_add(o, "signal", str_json(s->ref.name));
			json_object_object_add(o, "timeout_ms", ms_json(s->timeout_ms));
			json_object_object_add(o, "on_success", str_json(s->on_success.name));
			json_object_object_add(o, "on_failure", str_json(s->on_failure.name));
			json_object_object_add(o, "on_timeout",
								   str_json(s->on_timeout.name ? s->on_timeout.name : s->on_failure.name));
			break;
		case WFE_ST_SLEEP:
			json_object_object_add(o, "duration_ms", ms_json(s->duration_ms));
			json_object_object_add(o, "until", str_json(s->until ? s->until->text : NULL));
			json_object_object_add(o, "on_success", str_json(s->on_success.name));
			json_object_object_add(o, "on_failure", str_json(s->on_failure.name));
			break;
		case WFE_ST_WORKFLOW:
			add_child(o, s);
			json_object_object_add(o, "on_success", str_json(s->on_success.name));
			json_object_object_add(o, "on_failure", str_json(s->on_failure.name));
			break;
		case WFE_ST_MAP:
			add_map(o, s);
			json_object_object_add(o, "on_success", str_json(s->on_success.name));
			json_object_object_add(o, "on_failure", str_json(s->on_failure.name));
			break;
		case WFE_ST_INVALID:
			break;
	}
	return o;
}

/* One task of the tasks form. */
static json_object *
task_json(const wfe_stage *s)
{
	json_object *o = json_object_new_object();
	json_object *produces = json_object_new_array();
	json_object *requires = json_object_new_array();

	json_object_object_add(o, "name", json_object_new_string(s->name));
	json_object_object_add(o, "type", json_object_new_string(type_name(s->type)));
	if (s->type == WFE_ST_WAIT)
	{
		json_object_object_add(o, "signal", str_json(s->ref.name));
		json_object_object_add(o, "timeout_ms", ms_json(s->timeout_ms));
	}
	else if (s->type == WFE_ST_SLEEP)
	{
		json_object_object_add(o, "duration_ms", ms_json(s->duration_ms));
		json_object_object_add(o, "until", str_json(s->until ? s->until->text : NULL));
	}
	else if (s->type == WFE_ST_WORKFLOW)
		add_child(o, s);
	else if (s->type == WFE_ST_MAP)
		add_map(o, s);
	else
		add_executor(o, s);
	json_object_object_add(o, "description", str_json(s->description));
	json_object_object_add(o, "depends_on", names_json(s->depends_on, s->ndepends));
	json_object_object_add(o, "critical", json_object_new_boolean(s->critical));
	json_object_object_add(o, "awaits", json_object_new_boolean(s->awaits));
	json_object_object_add(o, "dependency_policy", json_object_new_string(s->dependency_policy));
	json_object_object_add(o, "contexts", s->contexts ? words_json(s->contexts, s->ncontexts) : NULL);
	for (int i = 0; i < s->nproduces; i++)
	{
		json_object *p = json_object_new_object();

		json_object_object_add(p, "key", json_object_new_string(s->produces[i].key));
		json_object_object_add(p, "type", json_object_new_string(s->produces[i].type));
		json_object_array_add(produces, p);
	}
	for (int i = 0; i < s->nrequires; i++)
	{
		json_object *r = json_object_new_object();

		json_object_object_add(r, "producer_task_id", json_object_new_string(s->requires[i].producer.name));
		json_object_object_add(r, "key", json_object_new_string(s->requires[i].key));
		json_object_array_add(requires, r);
	}
	json_object_object_add(o, "produces", produces);
	json_object_object_add(o, "requires_outputs", requires);
	return o;
}

/* Sorted, unique contract refs of stages and finalisers. */
static json_object *
contracts_json(const wfe_model *m)
{
	json_object *refs = json_object_new_array();
	const char **all = wfe_arena_alloc(m->arena, sizeof(char *) * (m->nstages + m->nfinalisers + 1));
	int			n = 0;

	/* a child workflow is no contract: definitions pin it at release */
	for (int i = 0; i < m->nstages; i++)
		if (m->stages[i].ref.name && m->stages[i].type != WFE_ST_WORKFLOW && !m->stages[i].item_workflow)
			all[n++] = m->stages[i].ref.name;
	for (int i = 0; i < m->nfinalisers; i++)
		all[n++] = m->finalisers[i].name;
	/* insertion sort with dedup: n is at most a few hundred */
	for (int i = 1; i < n; i++)
	{
		const char *v = all[i];
		int			j = i - 1;

		while (j >= 0 && strcmp(all[j], v) > 0)
		{
			all[j + 1] = all[j];
			j--;
		}
		all[j + 1] = v;
	}
	for (int i = 0; i < n; i++)
		if (i == 0 || strcmp(all[i], all[i - 1]) != 0)
			json_object_array_add(refs, json_object_new_string(all[i]));
	return refs;
}

json_object *
wfe_plan_build(const wfe_model *m)
{
	json_object *plan = json_object_new_object();
	json_object *defaults = json_object_new_object();
	json_object *policy = json_object_new_object();
	json_object *finalisers = json_object_new_array();
	json_object *stages = json_object_new_array();

	json_object_object_add(plan, "dsl_version", json_object_new_string(WFE_DSL_VERSION));
	json_object_object_add(plan, "compiler_version", json_object_new_string(WFE_COMPILER_VERSION));
	json_object_object_add(plan, "name", json_object_new_string(m->name));
	json_object_object_add(plan, "version", json_object_new_string(m->version));
	json_object_object_add(plan, "description", str_json(m->description));
	json_object_object_add(plan, "form", json_object_new_string(m->form == WFE_STAGES_FORM ? "stages" : "tasks"));
	json_object_object_add(plan, "entry", m->form == WFE_STAGES_FORM ? str_json(m->entry.name) : NULL);
	json_object_object_add(plan, "context", str_json(m->context));
	json_object_object_add(plan, "context_schema",
						   m->context_schema ? wfe_ynode_to_json(m->context_schema) : NULL);

	json_object_object_add(defaults, "retry", retry_json(&m->default_retry));
	json_object_object_add(defaults, "execution_deadline_ms", ms_json(m->default_execution_deadline_ms));
	json_object_object_add(defaults, "queue_deadline_ms", ms_json(m->default_queue_deadline_ms));
	json_object_object_add(defaults, "heartbeat_ms", ms_json(m->default_heartbeat_ms));
	json_object_object_add(plan, "defaults", defaults);
	json_object_object_add(plan, "run_deadline_ms", ms_json(m->run_deadline_ms));

	json_object_object_add(policy, "fork_branch_failure", json_object_new_string(m->fork_branch_failure));
	json_object_object_add(policy, "late_callbacks", json_object_new_string(m->late_callbacks));
	json_object_object_add(policy, "finalisers", json_object_new_string(m->finaliser_order));
	json_object_object_add(policy, "finaliser_failure_terminal",
						   json_object_new_string(m->finaliser_failure_terminal));
	json_object_object_add(plan, "terminal_policy", policy);
	json_object_object_add(plan, "terminals", words_json(m->terminals, m->nterminals));

	/* finalisers run with the workflow's default retry policy and deadline */
	for (int i = 0; i < m->nfinalisers; i++)
	{
		json_object *f = json_object_new_object();
		char		name[32];

		snprintf(name, sizeof(name), "finaliser.%d", i + 1);
		json_object_object_add(f, "name", json_object_new_string(name));
		json_object_object_add(f, "action", json_object_new_string(m->finalisers[i].name));
		json_object_object_add(f, "retry", retry_json(&m->default_retry));
		json_object_object_add(f, "execution_deadline_ms", ms_json(m->default_execution_deadline_ms));
		json_object_array_add(finalisers, f);
	}
	json_object_object_add(plan, "finalisers", finalisers);

	for (int i = 0; i < m->nstages; i++)
		json_object_array_add(stages, m->form == WFE_STAGES_FORM
							  ? stage_json(&m->stages[i]) : task_json(&m->stages[i]));
	json_object_object_add(plan, "stages", stages);
	json_object_object_add(plan, "contracts", contracts_json(m));
	/* only when written, so that the plans of 0.2.0's definitions are unchanged */
	if (m->output != NULL)
		json_object_object_add(plan, "output", wfe_ynode_to_json(m->output));
	return plan;
}
