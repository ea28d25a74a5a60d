/*
 * runplan.h — the run plan: a stored, compiled plan as the engine works
 * from it.
 *
 * Built once from the plan's canonical JSON and then only read.  Plans are
 * immutable, so the server keeps one per definition for the life of a
 * backend and never invalidates it.  Everything the compiler proved is
 * resolved here once: stage names become indexes, routes become successor
 * indexes, each join knows its fork, reachability is a bit matrix, each
 * decision's `when` clauses are parsed, each input template knows whether
 * it interpolates at all and which stage results it reads.
 * Plain C over json-c; the header forward-declares json-c's type.
 */
#ifndef WFE_RUNPLAN_H
#define WFE_RUNPLAN_H

#include <stdint.h>

struct json_object;
typedef struct wfe_expr wfe_expr;

/* Stage kinds (plan "type"; finalisers are the plan's "finalisers"). */
typedef enum wfe_kind
{
	WFE_K_ACTION,
	WFE_K_WORKER,
	WFE_K_DECISION,
	WFE_K_FORK,
	WFE_K_JOIN,
	WFE_K_FINALISER,
	WFE_K_WAIT,					/* running, no worker, until its signal or timeout */
	WFE_K_SLEEP,				/* running, no worker, until its timer */
	WFE_K_WORKFLOW,				/* running, no worker, until its child run ends */
	WFE_K_MAP					/* running while its elements (NAME[i]) are under way */
} wfe_kind;

/* A route's target: a stage index (>= 0), no route, or a terminal intent. */
#define WFE_TO_NONE			(-1)
#define WFE_TO_COMPLETED	(-2)
#define WFE_TO_FAILED		(-3)

/* Retry policy (dsl.md "retry"). */
typedef enum wfe_jitter
{
	WFE_JITTER_NONE,
	WFE_JITTER_FULL,
	WFE_JITTER_EQUAL
} wfe_jitter;

typedef struct wfe_retry
{
	int			max_attempts;
	double		initial_ms;
	double		multiplier;
	double		max_ms;
	wfe_jitter	jitter;
} wfe_retry;

/* A declared output (tasks form): key and type. */
typedef struct wfe_produce
{
	char	   *key;
	char	   *type;
} wfe_produce;

/* A required output (tasks form): producer task index and key. */
typedef struct wfe_require
{
	int			producer;
	char	   *producer_name;
	char	   *key;
} wfe_require;

/* What an input template reads from the evaluation root. */
#define WFE_REF_CONTEXT	0x01
#define WFE_REF_STAGES	0x02	/* stages.X: see stage_refs */
#define WFE_REF_OUTPUTS	0x04
#define WFE_REF_RUN		0x08
#define WFE_REF_ITEM	0x10	/* item, item_index: a map's element */

typedef struct wfe_rp_stage
{
	char	   *name;
	wfe_kind	kind;
	int			ordinal;		/* 1-based, as in wfe.plan_stages */

	/* routes (stages form) */
	int			on_success;
	int			on_failure;
	int			on_evaluation_error;
	int			on_timeout;		/* a wait's timeout route; on_failure for every other kind */
	const char *on_success_name;	/* the plan's words, for event details */
	const char *on_failure_name;
	const char *on_evaluation_error_name;

	/* decision: branches in order */
	int			nbranches;
	wfe_expr  **when;			/* parsed; NULL where parsing failed */
	int		   *next;
	const char **next_name;
	struct json_object *branches;	/* the plan's list, for the forked event */

	/* fork: branch heads; join: required branches */
	int			ntargets;
	int		   *targets;
	int			fork;			/* join: the fork whose branches it joins, or -1 */
	unsigned	acceptable;		/* join: bit per wfe_state that counts as success */

	/* wait and sleep */
	int64_t		timeout_ms;		/* wait: -1 waits for ever */
	int64_t		sleep_ms;		/* sleep: -1 when it sleeps until a bound time */

	/*
	 * map: the items template ({"items": the plan's items}) bound at release,
	 * and its bounds; contract, retry, input and cache below are its item's
	 */
	struct json_object *items;
	int			item_worker;	/* elements are workers (else actions or child runs) */
	int			item_workflow;	/* elements are child runs of the workflow in contract */
	const char *item_queue;		/* a worker item's queue */
	int64_t		max_concurrency;	/* -1: unlimited */
	int64_t		tolerated_failures;

	/* executing stages */
	const char *contract;		/* worker or action ref; a wait's signal ref */
	wfe_retry	retry;
	struct json_object *input;	/* template; NULL for decisions, forks, joins, waits; a sleep's {"until"} */
	char	   *input_text;		/* the template as canonical JSON text */
	unsigned	input_refs;		/* WFE_REF_* the template interpolates */
	int			nstage_refs;	/* stages.X the template reads, -1: all */
	int		   *stage_refs;
	int64_t		cache_ttl_ms;	/* cache: {ttl_ms}; -1: the stage is not cached */
	struct json_object *rate_key;	/* rate_limit.key: a "${...}" string; NULL: unkeyed or none */
	struct json_object *concurrency_key;	/* concurrency.key: a "${...}" string; NULL: none */
	int			concurrency_max;	/* concurrency.max (>= 1) with a key */

	/* tasks form */
	int			ndeps;
	int		   *deps;
	int			ndependents;
	int		   *dependents;		/* in ordinal order */
	int			critical;
	int			awaits;
	int			allow_skipped;	/* dependency_policy allow_skipped */
	int			ncontexts;		/* -1: any context */
	char	  **contexts;
	int			nproduces;
	wfe_produce *produces;
	int			nrequires;
	wfe_require *requires;
} wfe_rp_stage;

typedef struct wfe_run_plan
{
	int64_t		definition_id;
	int			tasks_form;		/* 0: stages form */
	int			entry;			/* stages form */
	int			nstages;		/* declared stages, then finalisers */
	int			nfinalisers;
	int			first_finaliser;	/* index of finaliser.1 */
	wfe_rp_stage *stages;
	uint8_t    *reach;			/* nstages x nstages: reach[a*n+b] = b reachable from a */
	struct json_object *output;	/* the run's output template (plan "output"), or NULL */
	struct json_object *context_schema;	/* plan "context_schema" (a child's context is bound to it), or NULL */
	struct json_object *plan;	/* the whole plan, owned */
} wfe_run_plan;

/*
 * Build the run plan of a stored plan (its canonical JSON text).  Returns
 * NULL with a message in err when the text is not such a plan.
 */
extern wfe_run_plan *wfe_run_plan_build(int64_t definition_id, const char *plan_json,
										char *err, int errlen);
extern void wfe_run_plan_free(wfe_run_plan *rp);

/* Index of a stage by name, or -1. */
extern int	wfe_run_plan_find(const wfe_run_plan *rp, const char *name);

/* Can stage b still be reached from stage a (a itself included)? */
static inline int
wfe_run_plan_reaches(const wfe_run_plan *rp, int a, int b)
{
	return rp->reach[(size_t) a * rp->nstages + b];
}

#endif							/* WFE_RUNPLAN_H */
