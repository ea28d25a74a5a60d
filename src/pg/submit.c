/*
 * submit.c — starting runs: wfe.submit, a child run (wfe_start_child) and
 * the admission of one more run in flight (wfe_admit_run), in C.
 *
 * The checks of a submit's arguments and what an idempotency key or a
 * tenant's run limit means are decided by the core (core/engine/submit.c);
 * this file reads what they need and writes a new run.  Every statement is
 * prepared once per backend (spi_stmt.c).  A new run -- submitted or a
 * child -- is one statement: the run row, its stage rows and its
 * run.submitted event, then its timers and its start (engine.c).
 *
 * wfe.submit is SECURITY DEFINER: the tables it reads and writes are not
 * granted to its callers; the role acting (wfe_caller_role) is who must act
 * for the tenant, and wfe._identity() is who is recorded.  A schedule's
 * tick and a run command submit through it too, as a role (submit_as.c).
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "funcapi.h"
#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"
#include "utils/numeric.h"
#include "utils/timestamp.h"
#include "utils/tuplestore.h"

#include "bgw/bgw.h"
#include "core/engine/submit.h"
#include "spi_stmt.h"
#include "wfe.h"

PG_FUNCTION_INFO_V1(wfe_submit);
PG_FUNCTION_INFO_V1(wfe_submittable);

extern Datum wfe_validate_sql(PG_FUNCTION_ARGS);
extern Datum wfe_start_run(PG_FUNCTION_ARGS);

#define JB JSONBOID
#define TS TIMESTAMPTZOID

/*
 * A definition a run starts from, and its plan, read once: each reference
 * to d.plan in a statement would decompress the whole plan again.
 */
#define DEFINITION_COLUMNS "SELECT d.definition_id, d.workflow, d.version, d.state, d.plan FROM wfe.definitions AS d"
static stmt q_named = STMT(DEFINITION_COLUMNS " WHERE d.workflow = $1 AND d.version = $2", 2, TX, TX);
static stmt q_active = STMT(DEFINITION_COLUMNS " WHERE d.workflow = $1 AND d.state = 'active'", 1, TX);
static stmt q_definition_row = STMT("SELECT d FROM wfe.definitions AS d WHERE d.definition_id = $1", 1, I8);

/* the run that keeps an idempotency key (wfe._run_keeps_key), and whether its context is this one */
static stmt q_idempotent = STMT(
	"SELECT x.run_id, x.context = $4 FROM wfe.runs AS x"
	" WHERE x.tenant = $1 AND x.workflow = $2 AND x.idempotency_key = $3 AND wfe._run_keeps_key(x.state)",
	4, TX, TX, TX, JB);
static stmt q_deduplicated = STMT(
	"INSERT INTO wfe.events (run_id, tenant, type, detail)"
	" VALUES ($1, $2, 'run.deduplicated', jsonb_build_object('by', wfe._identity()))", 2, I8, TX);

static stmt q_run_limit = STMT(
	"SELECT t.max_runs_in_flight FROM wfe.tenant_limits AS t"
	" WHERE t.tenant = $1 AND t.max_runs_in_flight IS NOT NULL", 1, TX);
static stmt q_runs_live = STMT(
	"SELECT count(*) FROM wfe.runs AS x WHERE x.tenant = $1 AND x.finished_at IS NULL", 1, TX);

/*
 * A new run of definition $2: the run row (no row when another run keeps
 * its idempotency key), one stage row per stage, task and finaliser of the
 * plan, waiting, and its run.submitted event.  $15 and $16 are the plan's
 * form and contracts; NULLs take a new trace id and the sampled flag.
 * A child run ($12, $13, $14: its parent's attempt) says so in its event; a
 * submitted one how it came (wfe._submit_via).  The stage rows have no
 * foreign key to check: they are written here, with their run.
 */
#define INSERT_RUN_HEAD \
	"WITH r AS (" \
	"  INSERT INTO wfe.runs AS x (tenant, workflow, version, definition_id, definition_digest, dsl_version," \
	"                             compiler_version, engine_version, contracts, context, execution_context," \
	"                             idempotency_key, priority, not_before, deadline_at, form," \
	"                             trace_id, trace_parent, trace_flags, parent_run_id, parent_stage, parent_attempt)" \
	"  SELECT $1, d.workflow, d.version, d.definition_id, d.digest, d.dsl_version, d.compiler_version," \
	"         (SELECT e.extversion FROM pg_catalog.pg_extension AS e WHERE e.extname = 'wfe')," \
	/* the contract versions the run pins: {ref: {"kind", "queue", "handler"}} */ \
	"         (SELECT coalesce(jsonb_object_agg(c.ref, jsonb_build_object('kind', c.kind, 'queue', c.queue," \
	"                                                                    'handler', c.handler::text)), '{}')" \
	"            FROM wfe.contracts AS c" \
	"           WHERE c.ref IN (SELECT jsonb_array_elements_text($16)))," \
	"         $3, $4, $5, $6, $7, now() + make_interval(secs => $8 / 1000.0)," \
	"         $15, coalesce($9, wfe._random_hex(32)), $10, coalesce($11, '01'), $12, $13, $14" \
	"    FROM wfe.definitions AS d WHERE d.definition_id = $2"
#define INSERT_RUN_ON_CONFLICT \
	"  ON CONFLICT (tenant, workflow, idempotency_key)" \
	"     WHERE idempotency_key IS NOT NULL AND wfe._run_keeps_key(state)" \
	"     DO NOTHING"
#define INSERT_RUN_TAIL \
	"  RETURNING x.run_id, x.tenant, x.workflow, x.version, x.definition_id, x.definition_digest," \
	"            x.idempotency_key, x.priority, x.deadline_at)," \
	" s AS (" \
	"  INSERT INTO wfe.run_stages (run_id, stage, tenant, ordinal, kind, queue, worker, handler, priority," \
	"                              awaits, exec_ms, queue_ms, heartbeat_ms, rate_limit)" \
	"  SELECT r.run_id, ps.stage, r.tenant, ps.ordinal, ps.type," \
	"         CASE WHEN ps.type = 'worker' THEN ps.spec ->> 'queue' ELSE c.queue END," \
	"         coalesce(ps.spec ->> 'worker', ps.spec ->> 'action', ps.spec ->> 'signal'," \
	"                  ps.spec -> 'item' ->> 'worker', ps.spec -> 'item' ->> 'action'), c.handler, r.priority," \
	"         coalesce((ps.spec ->> 'awaits')::boolean, true)," \
	/* a map's are its item's (its elements' rows copy them: map.c) */ \
	"         (coalesce(ps.spec -> 'item', ps.spec) ->> 'execution_deadline_ms')::int," \
	"         (coalesce(ps.spec -> 'item', ps.spec) ->> 'queue_deadline_ms')::int," \
	"         (coalesce(ps.spec -> 'item', ps.spec) ->> 'heartbeat_ms')::int," \
	"         coalesce(ps.spec -> 'item', ps.spec) -> 'rate_limit' ->> 'name'" \
	"    FROM r JOIN wfe.plan_stages AS ps ON ps.definition_id = r.definition_id" \
	"    LEFT JOIN wfe.contracts AS c ON c.ref = coalesce(ps.spec ->> 'worker', ps.spec ->> 'action'))," \
	" e AS (" \
	"  INSERT INTO wfe.events (run_id, tenant, type, detail)" \
	"  SELECT r.run_id, r.tenant, 'run.submitted'," \
	"         jsonb_build_object('workflow', r.workflow, 'version', r.version," \
	"                            'digest', r.definition_digest, 'idempotency_key', r.idempotency_key)" \
	"         || CASE WHEN $12::bigint IS NULL THEN wfe._submit_via()" \
	"                 ELSE jsonb_build_object('parent_run_id', $12, 'parent_stage', $13, 'parent_attempt', $14) END" \
	"    FROM r)" \
	" SELECT r.run_id, r.deadline_at FROM r"
/*
 * Without a key the run cannot conflict: no ON CONFLICT, whose speculative
 * insertion costs a WAL record and an index probe more.
 */
static stmt q_insert_run = STMT(INSERT_RUN_HEAD INSERT_RUN_TAIL,
	16, TX, I8, JB, TX, TX, I4, TS, I8, TX, TX, TX, I8, TX, I4, TX, JB);
static stmt q_insert_run_keyed = STMT(INSERT_RUN_HEAD INSERT_RUN_ON_CONFLICT INSERT_RUN_TAIL,
	16, TX, I8, JB, TX, TX, I4, TS, I8, TX, TX, TX, I8, TX, I4, TX, JB);

static stmt q_timer = STMT(
	"INSERT INTO wfe.timers (tenant, run_id, kind, due_at) VALUES ($1, $2, $3, $4)", 4, TX, I8, TX, TS);

/* what a child run takes from its parent: tenant, priority and trace (its span a child of the attempt's) */
static stmt q_parent = STMT(
	"SELECT p.tenant, p.priority, p.trace_id, wfe._attempt_span_id(p.span_id, $2, $3), p.trace_flags"
	"  FROM wfe.runs AS p WHERE p.run_id = $1", 3, I8, TX, I4);
/* the parent's attempt has the stage's execution deadline, as a worker's does */
static stmt q_parent_deadline = STMT(
	"UPDATE wfe.run_stages AS st SET deadline_at = now() + make_interval(secs => st.exec_ms / 1000.0)"
	" WHERE st.run_id = $1 AND st.stage = $2 AND st.exec_ms IS NOT NULL RETURNING st.deadline_at", 2, I8, TX);

/* A definition a run starts from, with what it takes from the plan. */
typedef struct definition
{
	int64		id;
	char	   *workflow;
	char	   *version;
	char	   *state;
	Jsonb	   *schema;			/* its context_schema, or NULL */
	char	   *context;		/* its execution context, or NULL */
	char	   *form;
	bool		has_deadline_ms;
	int64		deadline_ms;	/* its run_deadline_ms */
	Jsonb	   *contracts;		/* the contract refs it names */
} definition;

/* Column c (1-based) of the last result's row 0 as a Datum; *isnull set. */
static Datum
col(int c, bool *isnull)
{
	return SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, c, isnull);
}

/* A JSON value as jsonb's text output (what jsonb -> key prints). */
static char *
json_text(JsonbValue *v)
{
	Jsonb	   *jb = JsonbValueToJsonb(v);

	return JsonbToCString(NULL, &jb->root, VARSIZE(jb));
}

/* A JSON value as ->> gives it: a string's text, NULL for null, else its JSON. */
static char *
json_unquoted(JsonbValue *v)
{
	if (v->type == jbvNull)
		return NULL;
	if (v->type == jbvString)
		return pnstrdup(v->val.string.val, v->val.string.len);
	return json_text(v);
}

/* Option key of opts into *v; false when absent. */
static bool
option(Jsonb *opts, const char *key, JsonbValue *v)
{
	return JB_ROOT_IS_OBJECT(opts) &&
		getKeyJsonValueFromContainer(&opts->root, key, strlen(key), v) != NULL;
}

/* The first n characters of s (SQL's left(s, n)). */
static char *
left_chars(const char *s, int n)
{
	return pnstrdup(s, pg_mbcharcliplen(s, strlen(s), n));
}

/* The jsonb_typeof of a whole jsonb. */
static char *
jsonb_type_name(Jsonb *jb)
{
	return TextDatumGetCString(DirectFunctionCall1(jsonb_typeof, JsonbPGetDatum(jb)));
}

/* Is the numeric an integer (n % 1 = 0)? */
static bool
numeric_is_integral(Numeric n)
{
	Datum		rest = DirectFunctionCall2(numeric_mod, NumericGetDatum(n), NumericGetDatum(int64_to_numeric(1)));

	return DatumGetInt32(DirectFunctionCall2(numeric_cmp, rest, NumericGetDatum(int64_to_numeric(0)))) == 0;
}

/* numeric_cmp(a, b) against an integer. */
static int
numeric_cmp_int(Numeric a, int64 b)
{
	return DatumGetInt32(DirectFunctionCall2(numeric_cmp, NumericGetDatum(a), NumericGetDatum(int64_to_numeric(b))));
}

/* The definition of the last result's row 0 (DEFINITION_COLUMNS), its plan decompressed once. */
static void
read_definition(definition *d)
{
	bool		isnull;
	Jsonb	   *plan;
	JsonbValue	v;

	d->id = DatumGetInt64(col(1, &isnull));
	d->workflow = stmt_col(2);
	d->version = stmt_col(3);
	d->state = stmt_col(4);
	plan = DatumGetJsonbP(col(5, &isnull));
	d->schema = NULL;
	if (option(plan, "context_schema", &v) &&
		(v.type == jbvBool || (v.type == jbvBinary && JsonContainerIsObject(v.val.binary.data))))
		d->schema = JsonbValueToJsonb(&v);
	d->context = option(plan, "context", &v) ? json_unquoted(&v) : NULL;
	d->form = option(plan, "form", &v) ? json_unquoted(&v) : NULL;
	d->has_deadline_ms = option(plan, "run_deadline_ms", &v) && v.type != jbvNull;
	if (d->has_deadline_ms)
		d->deadline_ms = DatumGetInt64(DirectFunctionCall1(int8in, CStringGetDatum(json_unquoted(&v))));
	d->contracts = option(plan, "contracts", &v) ? JsonbValueToJsonb(&v) : NULL;
}

/*
 * The definition a submit names: 'name' (its active version) or
 * 'name@version' (approved or active; the last '@' separates them).
 */
static void
resolve(const char *workflow, definition *d)
{
	const char *at = strrchr(workflow, '@');

	if (at != NULL)
	{
		Datum		v[2] = {PointerGetDatum(cstring_to_text_with_len(workflow, at - workflow)),
		CStringGetTextDatum(at + 1)};

		stmt_run(&q_named, v, NULL);
		if (SPI_processed != 1)
			ereport(ERROR,
					(errcode(ERRCODE_UNDEFINED_OBJECT),
					 errmsg("workflow definition \"%s\" does not exist", workflow)));
		read_definition(d);
		if (strcmp(d->state, "draft") == 0)
			ereport(ERROR,
					(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
					 errmsg("workflow definition \"%s\" is a draft and cannot start runs", workflow),
					 errhint("Approve it with wfe.approve() first.")));
	}
	else
	{
		Datum		v[1] = {CStringGetTextDatum(workflow)};

		stmt_run(&q_active, v, NULL);
		if (SPI_processed != 1)
			ereport(ERROR,
					(errcode(ERRCODE_UNDEFINED_OBJECT),
					 errmsg("workflow \"%s\" has no active version", workflow),
					 errhint("Activate a version with wfe.activate(), or submit 'name@version' of an approved one.")));
		read_definition(d);
	}
}

/* Raise 22023 unless the context satisfies the definition's context_schema (wfe._validate). */
static void
check_context(definition *d, Jsonb *context)
{
	LOCAL_FCINFO(vf, 2);
	Datum		problem;

	if (d->schema == NULL)
		return;
	InitFunctionCallInfoData(*vf, NULL, 2, InvalidOid, NULL, NULL);
	vf->args[0].value = JsonbPGetDatum(d->schema);
	vf->args[0].isnull = false;
	vf->args[1].value = JsonbPGetDatum(context);
	vf->args[1].isnull = false;
	problem = wfe_validate_sql(vf);
	if (!vf->isnull)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("context does not satisfy the context_schema of %s@%s: %s",
						d->workflow, d->version, TextDatumGetCString(problem)),
				 errhint("The message names the context path and the schema keyword it breaks.")));
}

/*
 * The run that keeps the key (0: none), or 22023 when it was started with
 * another context (wfe_idempotency_outcome decides).
 */
static int64
idempotent_run(const char *tenant, const char *workflow, const char *key, Jsonb *context)
{
	Datum		v[4] = {CStringGetTextDatum(tenant), CStringGetTextDatum(workflow), CStringGetTextDatum(key),
	JsonbPGetDatum(context)};
	bool		isnull;
	int64		run_id;

	stmt_run(&q_idempotent, v, NULL);
	if (SPI_processed == 0)
		return 0;
	run_id = DatumGetInt64(col(1, &isnull));
	switch (wfe_idempotency_outcome(true, DatumGetBool(col(2, &isnull))))
	{
		case WFE_IDEMPOTENT_CONFLICT:
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("idempotency key \"%s\" of workflow \"%s\" was already used with a different context",
							key, workflow),
					 errdetail("Run " INT64_FORMAT " was submitted with this key.", run_id),
					 errhint("Use a new key for a different request, or resubmit the same context.")));
			break;
		default:
			break;
	}
	return run_id;
}

/* The run.deduplicated event of a submit answered with an earlier run. */
static void
deduplicated(int64 run_id, const char *tenant)
{
	Datum		v[2] = {Int64GetDatum(run_id), CStringGetTextDatum(tenant)};

	stmt_run(&q_deduplicated, v, NULL);
}

/*
 * Runs in flight: one more run of tenant is about to be in flight -- a
 * submit (replay is one), or an operator's redrive or skip_stage that
 * reopens a run that ended failed (engine.c).  One admission of a limited
 * tenant at a time counts and decides, so two cannot both take the last
 * slot; the count is a statement of its own after the lock, so (under READ
 * COMMITTED) it sees what the previous one committed.  Lock order: the run
 * locks first (a reopening holds its run's), then this one.  again says
 * what to do again, for the hint.  The caller is connected to SPI.
 */
void
wfe_admit_run(const char *tenant, const char *again)
{
	Datum		v[1] = {CStringGetTextDatum(tenant)};
	bool		isnull;
	int			limit;
	int64		live;

	stmt_run(&q_run_limit, v, NULL);
	if (SPI_processed == 0)
		return;
	limit = DatumGetInt32(col(1, &isnull));
	wfe_lock("wfe.max_runs_in_flight", tenant, false);
	stmt_run(&q_runs_live, v, NULL);
	live = DatumGetInt64(col(1, &isnull));
	if (!wfe_run_admitted(live, limit))
		ereport(ERROR,
				(errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
				 errmsg("tenant \"%s\" has " INT64_FORMAT " runs in flight, its max_runs_in_flight", tenant, live),
				 errdetail("Limit max_runs_in_flight = %d (wfe.tenant_limits).", limit),
				 errhint("%s again when a run has finished, or raise the limit with wfe.configure_tenant.",
						 again)));
}

/* What a new run is made of, besides its definition. */
typedef struct new_run
{
	const char *tenant;
	Jsonb	   *context;
	const char *execution_context;	/* NULL: the plan's */
	const char *key;
	int			priority;
	bool		has_start;
	TimestampTz start;			/* not_before */
	bool		has_deadline_ms;
	int64		deadline_ms;	/* NULL: the plan's */
	const char *trace_id;		/* NULL: a new one */
	const char *trace_parent;
	const char *trace_flags;	/* NULL: sampled */
	int64		parent;			/* 0: none (a submitted run) */
	const char *parent_stage;
	int			parent_attempt;
} new_run;

/*
 * Insert a run of d (q_insert_run): its id, 0 when another run keeps its
 * key.  Its run deadline's timer too.  The run's execution context and
 * deadline are its own or its plan's.
 */
static int64
insert_run(const definition *d, const new_run *n)
{
	Datum		v[16];
	char		nulls[17] = "                ";
	bool		isnull;
	int64		run_id;
	Datum		deadline;

	v[0] = CStringGetTextDatum(n->tenant);
	v[1] = Int64GetDatum(d->id);
	v[2] = JsonbPGetDatum(n->context);
	v[3] = stmt_text_or_null(n->execution_context ? n->execution_context : d->context, &nulls[3]);
	v[4] = stmt_text_or_null(n->key, &nulls[4]);
	v[5] = Int32GetDatum(n->priority);
	v[6] = TimestampTzGetDatum(n->start);
	nulls[6] = n->has_start ? ' ' : 'n';
	v[7] = Int64GetDatum(n->has_deadline_ms ? n->deadline_ms : d->deadline_ms);
	nulls[7] = n->has_deadline_ms || d->has_deadline_ms ? ' ' : 'n';
	v[8] = stmt_text_or_null(n->trace_id, &nulls[8]);
	v[9] = stmt_text_or_null(n->trace_parent, &nulls[9]);
	v[10] = stmt_text_or_null(n->trace_flags, &nulls[10]);
	v[11] = Int64GetDatum(n->parent);
	nulls[11] = n->parent != 0 ? ' ' : 'n';
	v[12] = stmt_text_or_null(n->parent_stage, &nulls[12]);
	v[13] = Int32GetDatum(n->parent_attempt);
	nulls[13] = n->parent != 0 ? ' ' : 'n';
	v[14] = stmt_text_or_null(d->form, &nulls[14]);
	v[15] = d->contracts ? JsonbPGetDatum(d->contracts) : (Datum) 0;
	nulls[15] = d->contracts ? ' ' : 'n';
	stmt_run(n->key != NULL ? &q_insert_run_keyed : &q_insert_run, v, nulls);
	if (SPI_processed == 0)
		return 0;
	run_id = DatumGetInt64(col(1, &isnull));
	deadline = col(2, &isnull);
	if (!isnull)
	{
		Datum		t[4] = {CStringGetTextDatum(n->tenant), Int64GetDatum(run_id), CStringGetTextDatum("run_deadline"),
		deadline};

		stmt_run(&q_timer, t, NULL);
		wfe_wake_at(DatumGetTimestampTz(deadline));
	}
	return run_id;
}

/* Release the first stages of a run this transaction inserted (wfe._start_run). */
static void
start_run(int64 run_id)
{
	DirectFunctionCall1(wfe_start_run, Int64GetDatum(run_id));
}

/* A submit's options, checked in the order wfe.submit always has. */
static void
read_options(Jsonb *opts, new_run *n)
{
	JsonbValue	v;
	StringInfoData unknown;
	char		trace_id[33],
				parent_id[17],
				flags[3];

	initStringInfo(&unknown);
	if (JB_ROOT_IS_OBJECT(opts))
	{
		JsonbIterator *it = JsonbIteratorInit(&opts->root);
		JsonbIteratorToken tok;

		while ((tok = JsonbIteratorNext(&it, &v, true)) != WJB_DONE)
			if (tok == WJB_KEY)
				wfe_admit_name(v.val.string.val, v.val.string.len, "submit option key");
		if (option(opts, "execution_context", &v) && v.type == jbvString)
			wfe_admit_name(v.val.string.val, v.val.string.len, "execution_context");
		it = JsonbIteratorInit(&opts->root);
		while ((tok = JsonbIteratorNext(&it, &v, true)) != WJB_DONE)
		{
			char	   *key;

			if (tok != WJB_KEY)
				continue;
			key = pnstrdup(v.val.string.val, v.val.string.len);
			if (!wfe_submit_option_known(key))
				appendStringInfo(&unknown, "%s%s", unknown.len > 0 ? ", " : "", key);
		}
	}
	if (unknown.len > 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("unknown submit option: %s", unknown.data),
				 errhint(WFE_SUBMIT_OPTIONS_HINT)));

	n->tenant = option(opts, "tenant", &v) ? json_unquoted(&v) : NULL;
	if (n->tenant == NULL)
		n->tenant = "default";
	if (!wfe_tenant_name_valid(n->tenant))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("tenant \"%s\" is not valid", left_chars(n->tenant, 80)),
				 errhint("Tenants match ^[A-Za-z0-9_.-]{1,63}$.")));
	/* a role submits only for the tenants it acts for, the default one too */
	if (!wfe_acts_for_tenant(n->tenant))
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("role \"%s\" does not act for tenant \"%s\"",
						DatumGetCString(DirectFunctionCall1(regroleout, ObjectIdGetDatum(wfe_caller_role()))),
						n->tenant),
				 errhint("An administrator maps a role to a tenant with wfe.add_tenant_member(role, tenant).")));

	if (option(opts, "priority", &v))
	{
		if (v.type != jbvNumeric || numeric_cmp_int(v.val.numeric, WFE_PRIORITY_MIN) < 0 ||
			numeric_cmp_int(v.val.numeric, WFE_PRIORITY_MAX) > 0 || !numeric_is_integral(v.val.numeric))
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("priority must be an integer between -1000000 and 1000000, not %s", json_text(&v))));
		/* as (options ->> 'priority')::int reads it: 1.0 is refused there */
		n->priority = DatumGetInt32(DirectFunctionCall1(int4in, CStringGetDatum(json_unquoted(&v))));
	}
	if (option(opts, "run_deadline_ms", &v))
	{
		if (v.type != jbvNumeric || numeric_cmp_int(v.val.numeric, 1) < 0 || !numeric_is_integral(v.val.numeric))
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("run_deadline_ms must be a positive integer, not %s", json_text(&v))));
	}
	if (option(opts, "not_before", &v) && v.type != jbvNull)
	{
		char	   *text = json_unquoted(&v);
		MemoryContext mcxt = CurrentMemoryContext;

		PG_TRY();
		{
			n->start = DatumGetTimestampTz(DirectFunctionCall3(timestamptz_in, CStringGetDatum(text),
															   ObjectIdGetDatum(InvalidOid), Int32GetDatum(-1)));
			n->has_start = true;
		}
		PG_CATCH();
		{
			ErrorData  *e;

			/* a pure input function: nothing to release but the error */
			MemoryContextSwitchTo(mcxt);
			e = CopyErrorData();
			if (e->sqlerrcode != ERRCODE_INVALID_DATETIME_FORMAT &&
				e->sqlerrcode != ERRCODE_DATETIME_FIELD_OVERFLOW)
				PG_RE_THROW();
			FlushErrorState();
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("not_before must be a timestamp, not %s", json_text(&v))));
		}
		PG_END_TRY();
	}
	if (option(opts, "traceparent", &v))
	{
		if (v.type != jbvString ||
			!wfe_traceparent_read(pnstrdup(v.val.string.val, v.val.string.len), trace_id, parent_id, flags))
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("option traceparent must be a W3C traceparent, not %s", left_chars(json_text(&v), 80)),
					 errhint("Write \"00-<32 lowercase hex trace id>-<16 lowercase hex parent id>-<2 hex flags>\", ids not all zero.")));
		n->trace_id = pstrdup(trace_id);
		n->trace_parent = pstrdup(parent_id);
		n->trace_flags = pstrdup(flags);
	}
	if (option(opts, "execution_context", &v))
	{
		if (v.type != jbvString)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("execution_context must be a string")));
		n->execution_context = pnstrdup(v.val.string.val, v.val.string.len);
	}
}

/*
 * The body of wfe.submit: the run started, or the earlier run an
 * idempotency key names (*accepted false).
 */
static int64
submit(text *workflow_t, Jsonb *context, text *key_t, Jsonb *opts, bool *accepted)
{
	new_run		n = {0};
	definition	d;
	char	   *workflow;
	const char *key = NULL;
	JsonbValue	v;
	int64		run_id;
	bool		isnull;

	workflow = text_to_cstring(workflow_t);
	/* the admission limits, before anything is built from the arguments */
	wfe_admit_name(VARDATA_ANY(workflow_t), VARSIZE_ANY_EXHDR(workflow_t), "workflow");
	if (key_t != NULL)
	{
		wfe_admit_name(VARDATA_ANY(key_t), VARSIZE_ANY_EXHDR(key_t), "idempotency_key");
		key = text_to_cstring(key_t);
	}
	wfe_admit_jsonb(context, "context", 0);
	wfe_admit_jsonb(opts, "options", 0);
	if (!JB_ROOT_IS_OBJECT(context))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("context must be a JSON object, not %s", jsonb_type_name(context))));
	if (!JB_ROOT_IS_OBJECT(opts))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("options must be a JSON object, not %s", jsonb_type_name(opts))));
	n.context = context;
	n.key = key;
	read_options(opts, &n);

	resolve(workflow, &d);
	if (option(opts, "run_deadline_ms", &v))
	{
		/* as (options ->> 'run_deadline_ms')::bigint reads it */
		n.deadline_ms = DatumGetInt64(DirectFunctionCall1(int8in, CStringGetDatum(json_unquoted(&v))));
		n.has_deadline_ms = true;
	}
	check_context(&d, context);

	if (key != NULL)
	{
		run_id = idempotent_run(n.tenant, d.workflow, key, context);
		if (run_id != 0)
		{
			/* an insert, not a counter on the run: no lock on a run in flight */
			deduplicated(run_id, n.tenant);
			*accepted = false;
			return run_id;
		}
	}

	/* Admission: the tenant's runs in flight (wfe.configure_tenant) */
	wfe_admit_run(n.tenant, "Submit");

	run_id = insert_run(&d, &n);
	if (run_id == 0)
	{
		/*
		 * A concurrent submit with the same key won: answer with its run.
		 * (Should that run have failed in between, the key is free again:
		 * the caller's retry starts a new run.)
		 */
		run_id = idempotent_run(n.tenant, d.workflow, key, context);
		if (run_id == 0)
			ereport(ERROR,
					(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
					 errmsg("idempotency key \"%s\" was released while this submit ran", key),
					 errhint("Submit again: the run that held the key has ended failed or cancelled.")));
		deduplicated(run_id, n.tenant);
		*accepted = false;
		return run_id;
	}

	if (n.has_start && n.start > GetCurrentTransactionStartTimestamp())
	{
		Datum		t[4] = {CStringGetTextDatum(n.tenant), Int64GetDatum(run_id), CStringGetTextDatum("not_before"),
		TimestampTzGetDatum(n.start)};

		stmt_run(&q_timer, t, NULL);
		wfe_wake_at(n.start);
	}
	else
		start_run(run_id);
	(void) isnull;
	*accepted = true;
	return run_id;
}

/*
 * wfe.submit(workflow text, context jsonb DEFAULT '{}', idempotency_key text
 * DEFAULT NULL, options jsonb DEFAULT '{}') RETURNS TABLE (run_id bigint,
 * accepted boolean): starts a run in the caller's transaction.
 */
Datum
wfe_submit(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	Jsonb	   *empty = NULL;
	int64		run_id;
	bool		accepted;
	Datum		values[2];
	bool		nulls[2] = {false, false};

	if (PG_ARGISNULL(0))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("workflow must not be null")));
	if (PG_ARGISNULL(1) || PG_ARGISNULL(3))
		empty = DatumGetJsonbP(DirectFunctionCall1(jsonb_in, CStringGetDatum("{}")));

	InitMaterializedSRF(fcinfo, MAT_SRF_USE_EXPECTED_DESC);
	SPI_connect();
	run_id = submit(PG_GETARG_TEXT_PP(0), PG_ARGISNULL(1) ? empty : PG_GETARG_JSONB_P(1),
					PG_ARGISNULL(2) ? NULL : PG_GETARG_TEXT_PP(2), PG_ARGISNULL(3) ? empty : PG_GETARG_JSONB_P(3),
					&accepted);
	SPI_finish();
	values[0] = Int64GetDatum(run_id);
	values[1] = BoolGetDatum(accepted);
	tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	return (Datum) 0;
}

/*
 * wfe._submittable(workflow text) RETURNS wfe.definitions: the definition a
 * submit names (resolve), for a schedule's checks.
 */
Datum
wfe_submittable(PG_FUNCTION_ARGS)
{
	definition	d;
	Datum		row;
	bool		isnull;

	SPI_connect();
	resolve(PG_ARGISNULL(0) ? "<NULL>" : text_to_cstring(PG_GETARG_TEXT_PP(0)), &d);
	{
		Datum		v[1] = {Int64GetDatum(d.id)};

		stmt_run(&q_definition_row, v, NULL);
	}
	row = SPI_datumTransfer(col(1, &isnull), false, -1);
	SPI_finish();
	PG_RETURN_DATUM(row);
}

/*
 * A child run for attempt of the parent's workflow stage, started in the
 * caller's transaction under the parent's lock (child.c).  Unlike a submit
 * it checks nothing a caller could get wrong: the step core resolved the
 * definition (workflow at version, not a draft), bound the context against
 * its context_schema and checked the depth.  The child runs in the
 * parent's tenant, with its priority and in its trace (the child's run
 * span is a child of the parent's attempt span); it counts as the parent's
 * work, not against the tenant's max_runs_in_flight again.  The caller is
 * connected to SPI.
 */
void
wfe_start_child(int64 parent, const char *stage, int attempt, const char *workflow, const char *version,
				const char *context)
{
	new_run		n = {0};
	Datum		p[3] = {Int64GetDatum(parent), CStringGetTextDatum(stage), Int32GetDatum(attempt)};
	Datum		dv[2] = {CStringGetTextDatum(workflow), CStringGetTextDatum(version)};
	bool		isnull;
	definition	d;
	int64		run_id;

	stmt_run(&q_parent, p, NULL);
	if (SPI_processed != 1)
		elog(ERROR, "wfe: the parent run " INT64_FORMAT " of a child run does not exist", parent);
	n.tenant = stmt_col(1);
	n.priority = DatumGetInt32(col(2, &isnull));
	n.trace_id = stmt_col(3);
	n.trace_parent = stmt_col(4);
	n.trace_flags = stmt_col(5);
	stmt_run(&q_named, dv, NULL);
	if (SPI_processed != 1)
		elog(ERROR, "wfe: the definition %s@%s of a child run does not exist", workflow, version);
	read_definition(&d);
	n.context = DatumGetJsonbP(DirectFunctionCall1(jsonb_in, CStringGetDatum(context)));
	n.parent = parent;
	n.parent_stage = stage;
	n.parent_attempt = attempt;
	run_id = insert_run(&d, &n);
	if (run_id == 0)
		elog(ERROR, "wfe: a child run of run " INT64_FORMAT " was not inserted", parent);
	stmt_run(&q_parent_deadline, p, NULL);
	if (SPI_processed > 0)
		wfe_wake_at(DatumGetTimestampTz(col(1, &isnull)));
	start_run(run_id);
}
