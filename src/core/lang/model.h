/*
 * model.h — a definition after the schema layer: typed, defaulted, with the
 * source position and path of everything later layers may complain about.
 */
#ifndef WFE_MODEL_H
#define WFE_MODEL_H

#include "core/base/arena.h"
#include "compile.h"
#include "diag.h"
#include "yamltree.h"

/* "None" for optional durations; written as JSON null in the plan. */
#define WFE_NONE (-1LL)

typedef enum wfe_form
{
	WFE_STAGES_FORM,
	WFE_TASKS_FORM
} wfe_form;

typedef enum wfe_stage_type
{
	WFE_ST_INVALID = -1,		/* type missing or unknown: reported already */
	WFE_ST_ACTION,
	WFE_ST_WORKER,
	WFE_ST_DECISION,
	WFE_ST_FORK,
	WFE_ST_JOIN,
	WFE_ST_WAIT,				/* waits for a registered signal */
	WFE_ST_SLEEP,				/* a durable timer */
	WFE_ST_WORKFLOW,			/* a child run of another workflow */
	WFE_ST_MAP					/* a worker or action per element of an array (a task's for_each) */
} wfe_stage_type;

/* A name written somewhere in the source: a route target, a dependency... */
typedef struct wfe_name_ref
{
	const char *name;			/* NULL when absent */
	const char *path;
	int			line;
	int			column;
} wfe_name_ref;

typedef struct wfe_retry
{
	long long	max_attempts;
	long long	initial_ms;
	double		multiplier;
	long long	max_ms;
	const char *jitter;			/* "full", "equal" or "none" */
} wfe_retry;

typedef struct wfe_branch
{
	const char *when;			/* expression source */
	const char *when_path;
	int			when_line;
	int			when_column;
	int			is_fallback;	/* when is the literal "true" */
	wfe_name_ref next;
} wfe_branch;

typedef struct wfe_produce
{
	const char *key;
	const char *type;
	const char *path;
} wfe_produce;

typedef struct wfe_require
{
	wfe_name_ref producer;
	const char *key;
} wfe_require;

typedef struct wfe_stage
{
	const char *name;
	const char *path;			/* "/stages/3" or "/tasks/3" */
	int			line;
	int			column;
	int			index;
	wfe_stage_type type;

	wfe_name_ref ref;			/* action, worker or (wait) signal contract ref; a child workflow NAME[@VERSION] */
	wfe_name_ref queue;			/* worker queue */
	wfe_name_ref on_success;
	wfe_name_ref on_failure;
	wfe_name_ref on_evaluation_error;
	wfe_name_ref on_timeout;	/* wait: where a timeout goes (default on_failure) */

	long long	timeout_ms;		/* wait: WFE_NONE waits for ever */
	long long	duration_ms;	/* sleep: WFE_NONE when `until` is given */
	const wfe_ynode *until;		/* sleep: the `until` string, or NULL */
	const char *until_path;

	wfe_branch *branches;		/* decision */
	int			nbranches;
	wfe_name_ref *targets;		/* fork branches, join required */
	int			ntargets;
	const char **acceptable;	/* join acceptable_terminal_states */
	int			nacceptable;

	const wfe_ynode *input;		/* mapping, or NULL for {} */
	const char *input_path;
	wfe_retry	retry;
	long long	execution_deadline_ms;
	long long	queue_deadline_ms;
	long long	heartbeat_ms;
	long long	cache_ttl_ms;	/* WFE_NONE: no cache */
	const char *rate_limit;		/* the token bucket, or NULL */
	const char *rate_key;		/* its key template, or NULL: unkeyed */
	const char *concurrency_key;	/* concurrency.key's template, or NULL: none */
	const wfe_ynode *concurrency_key_node;
	const char *concurrency_key_path;
	long long	concurrency_max;	/* concurrency.max; WFE_NONE: no keyed concurrency */

	/* map: ref, queue, input, retry, deadlines and cache above are its item's */
	const wfe_ynode *items;		/* a "${...}" string, or a literal sequence */
	const char *items_path;
	int			item_action;	/* the item executor is an action (else a worker) */
	int			item_workflow;	/* the item executor is a child workflow (ref: NAME[@VERSION]) */
	long long	max_concurrency;	/* WFE_NONE: unlimited */
	long long	tolerated_failures;

	/* tasks form */
	const char *description;
	int			critical;
	int			awaits;
	const char *dependency_policy;
	wfe_name_ref *depends_on;
	int			ndepends;
	const char **contexts;		/* NULL: every context */
	int			ncontexts;
	wfe_produce *produces;
	int			nproduces;
	wfe_require *requires;
	int			nrequires;
} wfe_stage;

typedef struct wfe_model
{
	wfe_arena  *arena;
	wfe_diags  *diags;
	const wfe_compile_options *opts;
	const char *source;			/* the YAML text, for positions inside scalars */
	size_t		source_len;

	wfe_form	form;
	const char *name;
	const char *version;
	const char *description;
	const char *context;
	const wfe_ynode *context_schema;
	const wfe_ynode *output;	/* the run's output template, or NULL */
	wfe_name_ref entry;

	wfe_retry	default_retry;
	long long	default_execution_deadline_ms;
	long long	default_queue_deadline_ms;
	long long	default_heartbeat_ms;
	long long	run_deadline_ms;

	const char *fork_branch_failure;
	const char *late_callbacks;
	const char *finaliser_order;
	const char *finaliser_failure_terminal;

	wfe_name_ref *finalisers;	/* action refs */
	int			nfinalisers;
	const char **terminals;
	int			nterminals;

	wfe_stage  *stages;
	int			nstages;
	int			over_limits;	/* too many stages: skip the graph layer */

	/* built by the graph layer, read by later layers */
	int		   *name_order;		/* stage indexes sorted by name */
	int			nnamed;
	int		   *edge_start;		/* CSR adjacency over every edge namespace */
	int		   *edge_to;
	unsigned char *reach;		/* reach[i * nstages + j]: i can reach j */
} wfe_model;

/* Schema/admission layer: tree -> model.  Returns 0 if the model is usable. */
extern int	wfe_schema_build(wfe_model *m, const wfe_ynode *root);

/* Graph layer over a usable model. */
extern void wfe_graph_check(wfe_model *m);

/* Expressions and interpolations: syntax, roots, lineage. */
extern void wfe_refs_check(wfe_model *m);

/* Contracts layer (only when opts->contracts is set). */
extern void wfe_contracts_check(wfe_model *m);

/* The canonical plan of a model that passed every layer. */
extern json_object *wfe_plan_build(const wfe_model *m);

/* Can stage `from` reach stage `to` along any edges? (graph layer first) */
extern int	wfe_graph_reaches(wfe_model *m, int from, int to);

/* Index of a stage by name, or -1. */
extern int	wfe_model_find(const wfe_model *m, const char *name);

/* Is `name` one of the terminal words the language knows? */
extern int	wfe_is_terminal_word(const char *name);

/* Is `name` a terminal this definition declares? */
extern int	wfe_model_declares_terminal(const wfe_model *m, const char *name);

#endif							/* WFE_MODEL_H */
