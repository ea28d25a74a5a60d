/*
 * graph.c — the graph layer: names, routes, reachability, cycles, decision
 * fallbacks, fork/join shape (stages form) and dependencies (tasks form).
 *
 * Every edge namespace counts: on_success, on_failure, on_timeout, decision next and
 * on_evaluation_error, and fork branches.  A failure route that loops back
 * is as much a cycle as a success route that does.
 */
#include <stdlib.h>
#include <string.h>

#include "model.h"

static const wfe_model *sort_model;

/* qsort comparator: stage indexes by name. */
static int
cmp_stage_name(const void *a, const void *b)
{
	const wfe_stage *sa = &sort_model->stages[*(const int *) a];
	const wfe_stage *sb = &sort_model->stages[*(const int *) b];
	int			c = strcmp(sa->name, sb->name);

	return c != 0 ? c : sa->index - sb->index;
}

int
wfe_is_terminal_word(const char *name)
{
	return strcmp(name, "completed") == 0 || strcmp(name, "failed") == 0;
}

int
wfe_model_declares_terminal(const wfe_model *m, const char *name)
{
	for (int i = 0; i < m->nterminals; i++)
		if (strcmp(m->terminals[i], name) == 0)
			return 1;
	return 0;
}

int
wfe_model_find(const wfe_model *m, const char *name)
{
	int			lo = 0,
				hi = m->nnamed - 1;

	if (name == NULL)
		return -1;
	while (lo <= hi)
	{
		int			mid = (lo + hi) / 2;
		int			c = strcmp(m->stages[m->name_order[mid]].name, name);

		if (c == 0)
		{
			/* the first stage of that name, if duplicated */
			while (mid > 0 && strcmp(m->stages[m->name_order[mid - 1]].name, name) == 0)
				mid--;
			return m->name_order[mid];
		}
		if (c < 0)
			lo = mid + 1;
		else
			hi = mid - 1;
	}
	return -1;
}

/* Sort names for lookup and report duplicates (and reserved words). */
static void
index_names(wfe_model *m)
{
	m->name_order = wfe_arena_alloc(m->arena, sizeof(int) * (m->nstages + 1));
	m->nnamed = 0;
	for (int i = 0; i < m->nstages; i++)
	{
		wfe_stage  *s = &m->stages[i];

		if (s->name == NULL)
			continue;
		if (wfe_is_terminal_word(s->name))
		{
			wfe_diag(m->diags, "schema.value", s->path, s->line, s->column,
					 "'%s' is a terminal outcome and cannot name a stage", s->name);
			continue;
		}
		m->name_order[m->nnamed++] = i;
	}
	sort_model = m;
	qsort(m->name_order, m->nnamed, sizeof(int), cmp_stage_name);
	for (int k = 1; k < m->nnamed; k++)
	{
		const wfe_stage *prev = &m->stages[m->name_order[k - 1]];
		const wfe_stage *s = &m->stages[m->name_order[k]];

		if (strcmp(prev->name, s->name) == 0)
			wfe_diag(m->diags, "graph.duplicate_name", s->path, s->line, s->column,
					 "%s '%s' is defined twice (first at %s)",
					 m->form == WFE_STAGES_FORM ? "stage" : "task", s->name, prev->path);
	}
}

/*
 * Resolve a route target: a stage index, or -1 for a (declared) terminal or
 * an unresolvable name (reported).  -2 when the ref is absent.
 */
static int
resolve_route(wfe_model *m, const wfe_name_ref *r, int allow_terminal)
{
	int			idx;

	if (r->name == NULL)
		return -2;
	idx = wfe_model_find(m, r->name);
	if (idx >= 0)
		return idx;
	if (wfe_is_terminal_word(r->name) && allow_terminal)
	{
		if (!wfe_model_declares_terminal(m, r->name))
			wfe_diag(m->diags, "graph.terminal_undeclared", r->path, r->line, r->column,
					 "route to terminal '%s', which is not in this definition's terminals",
					 r->name);
		return -1;
	}
	wfe_diag(m->diags, "graph.unresolved_ref", r->path, r->line, r->column,
			 "'%s' names no %s%s", r->name,
			 m->form == WFE_STAGES_FORM ? "stage" : "task",
			 allow_terminal ? " and no terminal (completed, failed)" : "");
	return -1;
}

/* Collect every outgoing edge of a stage (stage targets only). */
static int
stage_edges(wfe_model *m, const wfe_stage *s, int *out, int report)
{
	int			n = 0;
	int			t;

#define ADD_ROUTE(ref, term) \
	do { \
		t = report ? resolve_route(m, (ref), (term)) \
			: ((ref)->name ? wfe_model_find(m, (ref)->name) : -1); \
		if (t >= 0) \
			out[n++] = t; \
	} while (0)

	if (m->form == WFE_TASKS_FORM)
		return 0;				/* tasks: edges come from depends_on */
	switch (s->type)
	{
		case WFE_ST_ACTION:
		case WFE_ST_WORKER:
		case WFE_ST_JOIN:
		case WFE_ST_WORKFLOW:
		case WFE_ST_MAP:
			ADD_ROUTE(&s->on_success, 1);
			ADD_ROUTE(&s->on_failure, 1);
			break;
		case WFE_ST_WAIT:
			ADD_ROUTE(&s->on_success, 1);
			ADD_ROUTE(&s->on_failure, 1);
			ADD_ROUTE(&s->on_timeout, 1);
			break;
		case WFE_ST_SLEEP:
			ADD_ROUTE(&s->on_success, 1);
			ADD_ROUTE(&s->on_failure, 1);	/* optional: absent adds nothing */
			break;
		case WFE_ST_DECISION:
			for (int i = 0; i < s->nbranches; i++)
				ADD_ROUTE(&s->branches[i].next, 1);
			ADD_ROUTE(&s->on_evaluation_error, 1);
			break;
		case WFE_ST_FORK:
			for (int i = 0; i < s->ntargets; i++)
				ADD_ROUTE(&s->targets[i], 0);
			break;
		case WFE_ST_INVALID:
			break;
	}
#undef ADD_ROUTE
	return n;
}

/* Build the CSR adjacency of the whole graph, reporting bad targets once. */
static void
build_edges(wfe_model *m)
{
	int			cap = 0;
	int		   *tmp;

	for (int i = 0; i < m->nstages; i++)
	{
		const wfe_stage *s = &m->stages[i];

		cap += 3 + s->nbranches + s->ntargets + s->ndepends;
	}
	tmp = wfe_arena_alloc(m->arena, sizeof(int) * (cap + 1));
	m->edge_to = wfe_arena_alloc(m->arena, sizeof(int) * (cap + 1));
	m->edge_start = wfe_arena_alloc(m->arena, sizeof(int) * (m->nstages + 1));

	if (m->form == WFE_STAGES_FORM)
	{
		int			n = 0;

		for (int i = 0; i < m->nstages; i++)
		{
			int			k = stage_edges(m, &m->stages[i], tmp, 1);

			m->edge_start[i] = n;
			memcpy(m->edge_to + n, tmp, sizeof(int) * k);
			n += k;
		}
		m->edge_start[m->nstages] = n;
		return;
	}

	/* tasks form: an edge from each dependency to its dependent */
	{
		int		   *count = wfe_arena_alloc(m->arena, sizeof(int) * (m->nstages + 1));
		int		   *fill = wfe_arena_alloc(m->arena, sizeof(int) * (m->nstages + 1));
		int		   *dep = tmp;	/* resolved dependency per (task, k) */
		int			d = 0;

		for (int i = 0; i < m->nstages; i++)
			for (int k = 0; k < m->stages[i].ndepends; k++)
			{
				const wfe_name_ref *r = &m->stages[i].depends_on[k];
				int			t = resolve_route(m, r, 0);

				if (t == i)
				{
					wfe_diag(m->diags, "graph.cycle", r->path, r->line, r->column,
							 "task '%s' depends on itself", r->name);
					t = -1;
				}
				dep[d++] = t;
				if (t >= 0)
					count[t]++;
			}
		for (int i = 0, n = 0; i <= m->nstages; i++)
		{
			m->edge_start[i] = n;
			fill[i] = n;
			if (i < m->nstages)
				n += count[i];
		}
		d = 0;
		for (int i = 0; i < m->nstages; i++)
			for (int k = 0; k < m->stages[i].ndepends; k++, d++)
				if (dep[d] >= 0)
					m->edge_to[fill[dep[d]]++] = i;
	}
}

/* Breadth-first reach from `start`, not passing through `stop` (-1: none). */
static void
reach_from(const wfe_model *m, int start, int stop, unsigned char *seen, int *queue)
{
	int			head = 0,
				tail = 0;

	memset(seen, 0, m->nstages);
	seen[start] = 1;
	queue[tail++] = start;
	while (head < tail)
	{
		int			v = queue[head++];

		if (v == stop)
			continue;
		for (int e = m->edge_start[v]; e < m->edge_start[v + 1]; e++)
			if (!seen[m->edge_to[e]])
			{
				seen[m->edge_to[e]] = 1;
				queue[tail++] = m->edge_to[e];
			}
	}
}

int
wfe_graph_reaches(wfe_model *m, int from, int to)
{
	if (m->edge_start == NULL || from < 0 || to < 0)
		return 0;
	if (m->reach == NULL)
	{
		/* NB: computed on first use only; 500 stages is 250 kB at most */
		int		   *queue = wfe_arena_alloc(m->arena, sizeof(int) * m->nstages);

		m->reach = wfe_arena_alloc(m->arena, (size_t) m->nstages * m->nstages);
		for (int i = 0; i < m->nstages; i++)
		{
			unsigned char *row = m->reach + (size_t) i * m->nstages;

			reach_from(m, i, -1, row, queue);
			row[i] = 0;
			for (int e = m->edge_start[i]; e < m->edge_start[i + 1]; e++)
				if (m->edge_to[e] == i)
					row[i] = 1;
		}
	}
	return m->reach[(size_t) from * m->nstages + to];
}

/* Iterative depth-first search reporting each edge that closes a cycle. */
static void
check_cycles(wfe_model *m)
{
	unsigned char *color = wfe_arena_alloc(m->arena, m->nstages + 1);	/* 0 new, 1 open, 2 done */
	int		   *stack = wfe_arena_alloc(m->arena, sizeof(int) * (m->nstages + 1));
	int		   *next_edge = wfe_arena_alloc(m->arena, sizeof(int) * (m->nstages + 1));

	for (int root = 0; root < m->nstages; root++)
	{
		int			sp = 0;

		if (color[root])
			continue;
		stack[sp++] = root;
		color[root] = 1;
		next_edge[root] = m->edge_start[root];
		while (sp > 0)
		{
			int			v = stack[sp - 1];

			if (next_edge[v] < m->edge_start[v + 1])
			{
				int			w = m->edge_to[next_edge[v]++];

				if (color[w] == 1)
				{
					const wfe_stage *s = &m->stages[v];

					if (v == w && m->form == WFE_TASKS_FORM)
						continue;	/* reported as self-dependency */
					wfe_diag(m->diags, "graph.cycle", s->path, s->line, s->column,
							 m->form == WFE_STAGES_FORM
							 ? "stage '%s' routes back to '%s', closing a cycle"
							 : "task '%s' is needed by '%s', which it depends on: a cycle",
							 s->name, m->stages[w].name);
				}
				else if (color[w] == 0)
				{
					color[w] = 1;
					next_edge[w] = m->edge_start[w];
					stack[sp++] = w;
				}
			}
			else
			{
				color[v] = 2;
				sp--;
			}
		}
	}
}

/* Decisions: exactly one fallback, and it comes last. */
static void
check_decision(wfe_model *m, const wfe_stage *s)
{
	int			fallback = -1;

	for (int i = 0; i < s->nbranches; i++)
		if (s->branches[i].is_fallback)
		{
			if (i != s->nbranches - 1)
				wfe_diag(m->diags, "graph.fallback_not_last", s->branches[i].when_path,
						 s->branches[i].when_line, s->branches[i].when_column,
						 "decision '%s': the fallback branch (when: \"true\") is number %d of %d; "
						 "it must be the last, or the branches after it can never be taken",
						 s->name, i + 1, s->nbranches);
			fallback = i;
		}
	if (fallback < 0 && s->nbranches > 0)
		wfe_diag(m->diags, "graph.no_fallback", s->path, s->line, s->column,
				 "decision '%s' has no fallback: its last branch must be when: \"true\"",
				 s->name);
}

/* Forks and joins: each join requires exactly the branches of one fork that reach it. */
static void
check_fork_join(wfe_model *m)
{
	unsigned char *seen = wfe_arena_alloc(m->arena, m->nstages + 1);
	int		   *queue = wfe_arena_alloc(m->arena, sizeof(int) * (m->nstages + 1));
	unsigned char *fork_matched = wfe_arena_alloc(m->arena, m->nstages + 1);

	for (int f = 0; f < m->nstages; f++)
	{
		const wfe_stage *s = &m->stages[f];

		if (s->type != WFE_ST_FORK)
			continue;
		if (s->ntargets >= 0 && s->ntargets < 2)
			wfe_diag(m->diags, "graph.fork_malformed", s->path, s->line, s->column,
					 "fork '%s' needs at least two branches, it has %d", s->name,
					 s->ntargets < 0 ? 0 : s->ntargets);
		for (int i = 0; i < s->ntargets; i++)
		{
			const wfe_name_ref *b = &s->targets[i];
			int			t = wfe_model_find(m, b->name);

			if (b->name == NULL)
				continue;
			for (int j = 0; j < i; j++)
				if (s->targets[j].name && strcmp(s->targets[j].name, b->name) == 0)
					wfe_diag(m->diags, "graph.fork_malformed", b->path, b->line, b->column,
							 "fork '%s' lists branch '%s' twice", s->name, b->name);
			if (t >= 0 && m->stages[t].type == WFE_ST_JOIN)
				wfe_diag(m->diags, "graph.fork_malformed", b->path, b->line, b->column,
						 "fork '%s' branch '%s' is a join; a branch must do some work",
						 s->name, b->name);
		}
	}

	for (int j = 0; j < m->nstages; j++)
	{
		const wfe_stage *join = &m->stages[j];
		int			fork = -1;

		if (join->type != WFE_ST_JOIN || join->ntargets <= 0)
			continue;
		for (int r = 0; r < join->ntargets; r++)
			if (join->targets[r].name && wfe_model_find(m, join->targets[r].name) < 0)
				wfe_diag(m->diags, "graph.unresolved_ref", join->targets[r].path,
						 join->targets[r].line, join->targets[r].column,
						 "join '%s' requires '%s', which names no stage",
						 join->name, join->targets[r].name);

		/* the fork whose branches the required set names */
		for (int f = 0; f < m->nstages && fork < 0; f++)
		{
			const wfe_stage *s = &m->stages[f];
			int			all = 1;

			if (s->type != WFE_ST_FORK)
				continue;
			for (int r = 0; r < join->ntargets && all; r++)
			{
				int			found = 0;

				for (int b = 0; b < s->ntargets; b++)
					if (join->targets[r].name && s->targets[b].name &&
						strcmp(join->targets[r].name, s->targets[b].name) == 0)
						found = 1;
				all = found;
			}
			if (all)
				fork = f;
		}
		if (fork < 0)
		{
			wfe_diag(m->diags, "graph.join_mismatch", wfe_arena_printf(m->arena, "%s/required", join->path),
					 join->line, join->column,
					 "join '%s': its required stages are not the branches of one fork",
					 join->name);
			continue;
		}

		/* every branch of that fork reaching the join is required, and only those */
		{
			const wfe_stage *fs = &m->stages[fork];
			int			all_branches = 1;

			for (int b = 0; b < fs->ntargets; b++)
			{
				int			t = wfe_model_find(m, fs->targets[b].name);
				int			required = 0;

				if (t < 0)
					continue;
				for (int r = 0; r < join->ntargets; r++)
					if (join->targets[r].name && strcmp(join->targets[r].name, fs->targets[b].name) == 0)
						required = 1;
				reach_from(m, t, j, seen, queue);
				if (seen[j] && !required)
					wfe_diag(m->diags, "graph.join_mismatch", join->path, join->line, join->column,
							 "join '%s': branch '%s' of fork '%s' reaches it but is not in required",
							 join->name, fs->targets[b].name, fs->name);
				if (!seen[j] && required)
					wfe_diag(m->diags, "graph.join_mismatch", join->path, join->line, join->column,
							 "join '%s' requires '%s', which never reaches it",
							 join->name, fs->targets[b].name);
				if (!required)
					all_branches = 0;
			}
			if (all_branches)
				fork_matched[fork] = 1;
		}
	}

	for (int f = 0; f < m->nstages; f++)
		if (m->stages[f].type == WFE_ST_FORK && m->stages[f].ntargets >= 2 && !fork_matched[f])
			wfe_diag(m->diags, "graph.fork_malformed", m->stages[f].path, m->stages[f].line,
					 m->stages[f].column,
					 "fork '%s' has no join whose required list is exactly its branches",
					 m->stages[f].name);
}

/* Stages form: entry, reachability, decisions, fork/join. */
static void
check_stages_form(wfe_model *m)
{
	int			entry = -1;

	if (m->entry.name)
	{
		entry = wfe_model_find(m, m->entry.name);
		if (entry < 0)
			wfe_diag(m->diags, "graph.entry_missing", m->entry.path, m->entry.line, m->entry.column,
					 "entry '%s' names no stage", m->entry.name);
	}
	if (entry >= 0)
	{
		unsigned char *seen = wfe_arena_alloc(m->arena, m->nstages + 1);
		int		   *queue = wfe_arena_alloc(m->arena, sizeof(int) * (m->nstages + 1));

		reach_from(m, entry, -1, seen, queue);
		for (int i = 0; i < m->nstages; i++)
			if (!seen[i] && m->stages[i].name && wfe_model_find(m, m->stages[i].name) == i)
				wfe_diag(m->diags, "graph.unreachable", m->stages[i].path, m->stages[i].line,
						 m->stages[i].column,
						 "stage '%s' cannot be reached from entry '%s' by any route",
						 m->stages[i].name, m->entry.name);
	}
	for (int i = 0; i < m->nstages; i++)
		if (m->stages[i].type == WFE_ST_DECISION)
			check_decision(m, &m->stages[i]);
	check_fork_join(m);
}

/* Tasks form: requires_outputs name an ancestor and a key it produces. */
static void
check_tasks_form(wfe_model *m)
{
	for (int i = 0; i < m->nstages; i++)
	{
		const wfe_stage *s = &m->stages[i];

		for (int k = 0; k < s->nrequires; k++)
		{
			const wfe_require *rq = &s->requires[k];
			int			p = wfe_model_find(m, rq->producer.name);
			int			produced = 0;

			if (p < 0)
			{
				wfe_diag(m->diags, "graph.output_not_in_lineage", rq->producer.path,
						 rq->producer.line, rq->producer.column,
						 "task '%s' requires output '%s' of '%s', which is not a task",
						 s->name, rq->key, rq->producer.name);
				continue;
			}
			if (!wfe_graph_reaches(m, p, i))
			{
				wfe_diag(m->diags, "graph.output_not_in_lineage", rq->producer.path,
						 rq->producer.line, rq->producer.column,
						 "task '%s' requires output '%s' of '%s', which is not among its dependencies",
						 s->name, rq->key, rq->producer.name);
				continue;
			}
			for (int o = 0; o < m->stages[p].nproduces; o++)
				if (strcmp(m->stages[p].produces[o].key, rq->key) == 0)
					produced = 1;
			if (!produced)
				wfe_diag(m->diags, "graph.output_not_in_lineage", rq->producer.path,
						 rq->producer.line, rq->producer.column,
						 "task '%s' requires output '%s' of '%s', which does not produce it",
						 s->name, rq->key, rq->producer.name);
		}
	}
}

void
wfe_graph_check(wfe_model *m)
{
	index_names(m);
	build_edges(m);
	check_cycles(m);
	if (m->form == WFE_STAGES_FORM)
		check_stages_form(m);
	else
		check_tasks_form(m);
}
