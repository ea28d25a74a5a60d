/*
 * step_bind.c — the step core's binding and decisions: a stage's input, the
 * branch a decision takes, its rate-limit and concurrency keys, the
 * finalisers' input.
 * What the files of the step core share: step_internal.h.
 */
#include <stdio.h>
#include <string.h>

#include <json-c/json.h>

#include "core/expr/expr.h"
#include "core/jsonschema/jsonschema.h"
#include "step_internal.h"

/*
 * The outputs task i requires, as {task: {key: value}}; *missing (if not
 * NULL) says whether any is absent.  A producer that completed in this very
 * step has not written its outputs yet: they are read from its result.
 */
json_object *
step_required_outputs(wfe_step *st, int i, int *missing)
{
	const wfe_rp_stage *s = &st->rp->stages[i];
	json_object *out = json_object_new_object();

	if (missing)
		*missing = 0;
	for (int k = 0; k < s->nrequires; k++)
	{
		const wfe_require *rq = &s->requires[k];
		json_object *value = NULL;
		int			found = 0;
		json_object *per;

		if (rq->producer >= 0 && wfe_step_row(st, rq->producer)->result != NULL)
		{
			const wfe_rp_stage *ps = &st->rp->stages[rq->producer];
			json_object *result = step_hold(st, step_jparse(st->rows[rq->producer].result));
			json_object *v;

			for (int m = 0; m < ps->nproduces && !found; m++)
				if (strcmp(ps->produces[m].key, rq->key) == 0 &&
					json_object_is_type(result, json_type_object) &&
					json_object_object_get_ex(result, rq->key, &v))
				{
					value = json_object_get(v);
					found = 1;
				}
		}
		else
		{
			const char *text = st->io->output(st->io->arg, rq->producer_name, rq->key);

			if (text != NULL)
			{
				value = step_jparse(text);
				found = 1;
			}
		}
		if (!found)
		{
			if (missing)
				*missing = 1;
			continue;
		}
		if (!json_object_object_get_ex(out, rq->producer_name, &per))
		{
			per = json_object_new_object();
			json_object_object_add(out, rq->producer_name, per);
		}
		json_object_object_add(per, rq->key, value);
	}
	return out;
}

/*
 * The evaluation root a stage's input or decision reads: the context and
 * run identity, the results of the stages it refers to (only completed
 * actions and workers have results), the outputs it requires.
 */
static json_object *
build_root(wfe_step *st, int i, int for_decision)
{
	const wfe_rp_stage *s = &st->rp->stages[i];
	json_object *root = json_object_new_object();
	json_object *stages = json_object_new_object();
	json_object *run = json_object_new_object();
	json_object *context = NULL;
	json_object *outputs = NULL;

	if (for_decision || (s->input_refs & WFE_REF_CONTEXT))
		context = step_jparse(st->io->context(st->io->arg));
	json_object_object_add(root, "context", context ? context : json_object_new_object());
	if (for_decision || (s->input_refs & WFE_REF_STAGES))
	{
		int			n = s->nstage_refs < 0 ? st->rp->nstages : s->nstage_refs;

		for (int k = 0; k < n; k++)
		{
			int			t = s->nstage_refs < 0 ? k : s->stage_refs[k];
			const wfe_rp_stage *ts = &st->rp->stages[t];
			wfe_row    *tr;
			json_object *entry;

			if (ts->kind != WFE_K_ACTION && ts->kind != WFE_K_WORKER &&
				ts->kind != WFE_K_WAIT && ts->kind != WFE_K_SLEEP && ts->kind != WFE_K_WORKFLOW &&
				ts->kind != WFE_K_MAP)
				continue;
			tr = wfe_step_row(st, t);
			if (!tr->exists || tr->state != WFE_COMPLETED)
				continue;
			entry = json_object_new_object();
			json_object_object_add(entry, "result",
								   step_jparse(tr->result ? tr->result : st->io->result(st->io->arg, t)));
			json_object_object_add(stages, ts->name, entry);
		}
	}
	json_object_object_add(root, "stages", stages);
	if (s->nrequires > 0)
		outputs = step_required_outputs(st, i, NULL);
	json_object_object_add(root, "outputs", outputs ? outputs : json_object_new_object());
	json_object_object_add(run, "id", json_object_new_int64(st->run->run_id));
	json_object_object_add(run, "tenant", step_jstr(st->run->tenant));
	json_object_object_add(run, "workflow", step_jstr(st->run->workflow));
	json_object_object_add(run, "version", step_jstr(st->run->version));
	json_object_object_add(root, "run", run);
	return step_hold(st, root);
}

/* A decision's outcome over pre-parsed `when` clauses (bind.c's rules). */
void
step_decide(wfe_step *st, int i, wfe_decision *d)
{
	const wfe_rp_stage *s = &st->rp->stages[i];
	json_object *root = build_root(st, i, 1);

	memset(d, 0, sizeof(*d));
	d->branch = -1;
	for (int k = 0; k < s->nbranches; k++)
	{
		wfe_expr_error err;
		int			rc;

		memset(&err, 0, sizeof(err));
		if (s->when[k] == NULL)
		{
			d->branch = k;
			d->code = "expr.eval";
			snprintf(d->message, sizeof(d->message), "expr.syntax: branch %d does not parse", k + 1);
			return;
		}
		rc = wfe_expr_eval_bool(s->when[k], root, NULL, &err);
		if (rc < 0)
		{
			d->branch = k;
			d->code = "expr.eval";
			snprintf(d->message, sizeof(d->message), "%s", err.message);
			return;
		}
		if (rc == 1)
		{
			d->ok = 1;
			d->branch = k;
			return;
		}
	}
	d->code = "expr.eval";
	snprintf(d->message, sizeof(d->message), "no branch of the decision is true");
}

/* A finaliser's input: the run's identity, intent and stage states. */
const char *
step_finaliser_input(wfe_step *st)
{
	json_object *in = json_object_new_object();
	json_object *stages = json_object_new_object();

	step_load_all(st);
	for (int k = 0; k < st->rp->nstages; k++)
		if (st->rp->stages[k].kind != WFE_K_FINALISER && st->rows[k].exists)
			json_object_object_add(stages, st->rp->stages[k].name,
								   json_object_new_string(wfe_state_name(st->rows[k].state)));
	json_object_object_add(in, "run_id", json_object_new_int64(st->run->run_id));
	json_object_object_add(in, "workflow", step_jstr(st->run->workflow));
	json_object_object_add(in, "version", step_jstr(st->run->version));
	json_object_object_add(in, "tenant", step_jstr(st->run->tenant));
	json_object_object_add(in, "intent", st->run->intent >= 0 ? step_jstr(step_intent_name(st->run->intent)) : NULL);
	json_object_object_add(in, "stages", stages);
	return step_json_text(st, in);
}

/*
 * Bind stage i's input.  Returns the input's JSON text, or NULL with *code
 * and *message set when binding failed.  whose: how a schema violation's
 * message names the schema (NULL: the contract's input schema).
 */
const char *
step_bind_stage(wfe_step *st, int i, const char *whose, const char **code, const char **message)
{
	const wfe_rp_stage *s = &st->rp->stages[i];

	return step_bind(st, i, s->input_refs ? build_root(st, i, 0) : NULL, whose, code, message);
}

/* The evaluation root of stage i's input (a map adds item and item_index to it). */
json_object *
step_root(wfe_step *st, int i)
{
	return build_root(st, i, 0);
}

/* Bind stage i's input over root (NULL: it reads no root), as step_bind_stage. */
const char *
step_bind(wfe_step *st, int i, json_object *root, const char *whose, const char **code,
		  const char **message)
{
	const wfe_rp_stage *s = &st->rp->stages[i];
	json_object *schema = st->io->input_schema(st->io->arg, i);
	json_object *input;
	wfe_bind_error err;
	char	   *canon;
	const char *text;

	if (s->input_refs == 0 && schema == NULL && strstr(s->input_text, "$${") == NULL)
		return s->input_text;	/* nothing to interpolate, unescape or check */
	if (root == NULL)
		root = step_hold(st, json_object_new_object());
	memset(&err, 0, sizeof(err));
	input = wfe_bind_input(s->input, root, schema, whose, &err);
	if (input == NULL)
	{
		*code = wfe_arena_strdup(&st->arena, err.code ? err.code : WFE_BIND_TYPE);
		*message = wfe_arena_strdup(&st->arena, err.message);
		return NULL;
	}
	canon = wfe_canonical_json(input);
	json_object_put(input);
	text = wfe_arena_strdup(&st->arena, canon ? canon : "{}");
	free(canon);
	return text;
}

/*
 * Bind a flow-control key (dsl.md "Flow-control keys"), the template expr
 * (rate_limit.key or concurrency.key: what), over root into *key_out: a
 * string as it is, any other value its canonical JSON.  Returns 0, or -1
 * with *code and *message set: a key that fails to bind is the stage's
 * binding failure.
 */
static int
bind_key(wfe_step *st, json_object *expr, const char *what, json_object *root,
		 const char **key_out, const char **code, const char **message)
{
	json_object *key;
	wfe_bind_error err;

	memset(&err, 0, sizeof(err));
	key = wfe_bind_input(expr, root, NULL, NULL, &err);
	if (key == NULL)
	{
		*code = wfe_arena_strdup(&st->arena, err.code ? err.code : WFE_BIND_TYPE);
		*message = wfe_arena_printf(&st->arena, "%s: %s", what, err.message);
		return -1;
	}
	if (json_object_get_type(key) == json_type_string)
		*key_out = wfe_arena_strdup(&st->arena, json_object_get_string(key));
	else
	{
		char	   *canon = wfe_canonical_json(key);

		*key_out = wfe_arena_strdup(&st->arena, canon ? canon : "null");
		free(canon);
	}
	json_object_put(key);
	return 0;
}

/*
 * Bind stage i's rate-limit key over root into *key_out (NULL: the stage
 * has no keyed rate limit); see bind_key.  A map binds one per element,
 * with item and item_index.
 */
int
step_rate_key(wfe_step *st, int i, json_object *root, const char **key_out,
			  const char **code, const char **message)
{
	*key_out = NULL;
	if (st->rp->stages[i].rate_key == NULL)
		return 0;
	return bind_key(st, st->rp->stages[i].rate_key, "rate_limit.key", root, key_out, code, message);
}

/* Bind stage i's rate-limit key into its row, for the enqueue to write. */
int
step_bind_rate_key(wfe_step *st, int i, const char **code, const char **message)
{
	const char *key;

	if (st->rp->stages[i].rate_key == NULL)
		return 0;
	if (step_rate_key(st, i, build_root(st, i, 0), &key, code, message) < 0)
		return -1;
	wfe_step_row(st, i)->rate_key = key;
	return 0;
}

/*
 * Bind stage i's concurrency key over root into *key_out (NULL: the stage
 * has no keyed concurrency), as step_rate_key does: a map binds one per
 * element, with item and item_index.
 */
int
step_concurrency_key(wfe_step *st, int i, json_object *root, const char **key_out,
					 const char **code, const char **message)
{
	*key_out = NULL;
	if (st->rp->stages[i].concurrency_key == NULL)
		return 0;
	return bind_key(st, st->rp->stages[i].concurrency_key, "concurrency.key", root, key_out, code, message);
}

/*
 * Bind stage i's concurrency key into its row, as bind_rate_key does.  (A
 * long key is stored as its digest by the server: concurrency.h.)
 */
int
step_bind_concurrency_key(wfe_step *st, int i, const char **code, const char **message)
{
	const wfe_rp_stage *s = &st->rp->stages[i];

	if (s->concurrency_key == NULL)
		return 0;
	return step_concurrency_key(st, i, build_root(st, i, 0), &wfe_step_row(st, i)->concurrency_key,
								code, message);
}
