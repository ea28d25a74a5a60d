/*
 * refs.c — the expressions layer: decision `when` clauses and `${...}`
 * interpolations in inputs are parsed and checked here (syntax, size, roots,
 * literal types), and every reference to another stage's result or another
 * task's output is checked against the graph: a stage can only read what
 * can have completed before it.
 */
#include <string.h>

#include "core/base/utf8.h"
#include "core/expr/expr.h"
#include "model.h"

/* Context for the stage-reference callback of one expression. */
typedef struct ref_ctx
{
	wfe_model  *m;
	int			stage;			/* the stage whose expression this is */
	const char *path;
	int			line;
	int			column;
} ref_ctx;

/* Check that stage `name` can have completed before stage ctx->stage. */
static void
check_stage_ref(ref_ctx *ctx, const char *name)
{
	wfe_model  *m = ctx->m;
	int			t = wfe_model_find(m, name);

	if (t < 0)
	{
		wfe_diag(m->diags, "graph.unresolved_ref", ctx->path, ctx->line, ctx->column,
				 "reference to stage '%s', which does not exist", name);
		return;
	}
	if (m->stages[t].type != WFE_ST_ACTION && m->stages[t].type != WFE_ST_WORKER &&
		m->stages[t].type != WFE_ST_WAIT && m->stages[t].type != WFE_ST_SLEEP &&
		m->stages[t].type != WFE_ST_WORKFLOW && m->stages[t].type != WFE_ST_MAP)
	{
		wfe_diag(m->diags, "graph.ref_not_in_lineage", ctx->path, ctx->line, ctx->column,
				 "stage '%s' is a %s and has no result to read", name,
				 m->stages[t].type == WFE_ST_DECISION ? "decision" :
				 m->stages[t].type == WFE_ST_FORK ? "fork" : "join");
		return;
	}
	/* the run's output (stage -1) reads whatever completed */
	if (ctx->stage >= 0 && (t == ctx->stage || !wfe_graph_reaches(m, t, ctx->stage)))
		wfe_diag(m->diags, "graph.ref_not_in_lineage", ctx->path, ctx->line, ctx->column,
				 "stage '%s' reads the result of '%s', which cannot have completed before it",
				 m->stages[ctx->stage].name, name);
}

/* wfe_stage_ref_cb adapter. */
static void
on_stage_ref(void *arg, const char *stage, int offset)
{
	(void) offset;
	check_stage_ref((ref_ctx *) arg, stage);
}

/*
 * Where byte `offset` of an expression is in the YAML source, when the
 * expression is a scalar written on one line, plain or quoted, with nothing
 * escaped (the usual case): then the source spells the expression byte for
 * byte after the scalar's start (line, column).  Otherwise the scalar's own
 * start is the best position there is, and *column is left alone.
 */
static void
expr_position(const wfe_model *m, const char *expr, int offset, int line,
			  int *column)
{
	const char *s = m->source;
	size_t		len = m->source_len;
	size_t		i = 0;
	size_t		n = strlen(expr);
	int			l = 1;
	int			c = 1;
	int			quoted = 0;

	if (s == NULL || offset <= 0 || (size_t) offset > n || memchr(expr, '\n', n) != NULL)
		return;
	/* libyaml marks count lines and characters from 1 */
	while (i < len && l < line)
		if (s[i++] == '\n')
			l++;
	while (i < len && c < *column && s[i] != '\n')
	{
		i++;
		while (i < len && ((unsigned char) s[i] & 0xC0) == 0x80)
			i++;
		c++;
	}
	if (l != line || c != *column || i >= len)
		return;
	if (s[i] == '"' || s[i] == '\'')
		quoted = 1;
	if (len - i - (size_t) quoted < n || memcmp(s + i + quoted, expr, n) != 0 ||
		(quoted && (i + 1 + n >= len || s[i + 1 + n] != s[i])))
		return;
	*column += quoted + (int) wfe_utf8_chars(expr, (size_t) offset);
}

/* Report an expression error at the position of the problem in the source. */
static void
report_expr(wfe_model *m, const wfe_expr_error *err, const char *path, int line,
			int column, const char *what, const char *expr)
{
	if (expr != NULL)
		expr_position(m, expr, err->offset, line, &column);
	wfe_diag(m->diags, err->code, path, line, column, "%s: %s", what, err->message);
}

/* Expression limits from the compile options. */
static wfe_expr_limits
limits_of(const wfe_model *m)
{
	wfe_expr_limits l;

	l.max_bytes = m->opts->max_expression_bytes;
	l.max_nodes = WFE_EXPR_DEFAULT_MAX_NODES;
	l.max_steps = WFE_EXPR_DEFAULT_MAX_STEPS;
	return l;
}

/* A decision's when clauses. */
static void
check_decision(wfe_model *m, int idx)
{
	wfe_stage  *s = &m->stages[idx];
	wfe_expr_limits lim = limits_of(m);

	for (int i = 0; i < s->nbranches; i++)
	{
		wfe_branch *b = &s->branches[i];
		wfe_expr_error err;
		wfe_expr   *e;
		ref_ctx		ctx = {m, idx, b->when_path, b->when_line, b->when_column};

		if (b->when == NULL)
			continue;
		memset(&err, 0, sizeof(err));
		e = wfe_expr_parse(b->when, strlen(b->when), &lim, &err);
		if (e == NULL)
		{
			report_expr(m, &err, b->when_path, b->when_line, b->when_column, "when", b->when);
			continue;
		}
		if (wfe_expr_check(e, WFE_FORM_STAGES, on_stage_ref, &ctx, &err) != 0)
			report_expr(m, &err, b->when_path, b->when_line, b->when_column, "when", b->when);
		wfe_expr_free(e);
	}
}

/*
 * One `${...}` body found in an input string of stage `idx`.  item_ok: the
 * string is in a map's item input, where the element roots exist.
 */
static void
check_interpolation(wfe_model *m, int idx, const char *body, size_t len,
					const char *path, const wfe_ynode *at, int item_ok)
{
	wfe_stage  *s = idx >= 0 ? &m->stages[idx] : NULL;	/* NULL: the run's output */
	wfe_path	p;
	wfe_expr_error err;
	ref_ctx		ctx = {m, idx, path, at->line, at->column};
	wfe_expr_form form = m->form == WFE_STAGES_FORM ? WFE_FORM_STAGES : WFE_FORM_TASKS;

	memset(&err, 0, sizeof(err));
	if (len > m->opts->max_expression_bytes)
	{
		wfe_diag(m->diags, "expr.too_large", path, at->line, at->column,
				 "interpolation of %zu bytes is over the limit of %zu (wfe.max_expression_bytes)",
				 len, m->opts->max_expression_bytes);
		return;
	}
	if (wfe_path_parse(body, len, form, &p, &err) != 0)
	{
		report_expr(m, &err, path, at->line, at->column, "interpolation", NULL);
		return;
	}
	if (strncmp(p.root, "item", 4) == 0)
	{
		if (!item_ok)
			wfe_diag(m->diags, "expr.unknown_root", path, at->line, at->column,
					 "unavailable root '%s': item and item_index exist only in a map's item input",
					 p.root);
		else if (strcmp(p.root, "item_index") == 0 && p.nsegments > 0)
			wfe_diag(m->diags, "expr.syntax", path, at->line, at->column,
					 "item_index is a number: it has no fields");
	}
	else if (strcmp(p.root, "stages") == 0)
	{
		if (p.nsegments < 2 || p.segments[0].is_index || p.segments[1].is_index ||
			strcmp(p.segments[1].key, "result") != 0)
			wfe_diag(m->diags, "expr.syntax", path, at->line, at->column,
					 "a stage reference reads stages[\"name\"].result or below");
		else
			check_stage_ref(&ctx, p.segments[0].key);
	}
	else if (strcmp(p.root, "outputs") == 0)
	{
		int			declared = 0;

		if (p.nsegments != 2 || p.segments[0].is_index || p.segments[1].is_index)
			wfe_diag(m->diags, "expr.syntax", path, at->line, at->column,
					 "an output reference is outputs.TASK.KEY");
		else if (s == NULL)
		{
			/* the run's output reads any declared output of any task */
			int			t = wfe_model_find(m, p.segments[0].key);

			for (int k = 0; t >= 0 && k < m->stages[t].nproduces; k++)
				if (strcmp(m->stages[t].produces[k].key, p.segments[1].key) == 0)
					declared = 1;
			if (!declared)
				wfe_diag(m->diags, "graph.unresolved_ref", path, at->line, at->column,
						 "the run's output reads outputs.%s.%s, which no task produces",
						 p.segments[0].key, p.segments[1].key);
		}
		else
		{
			for (int k = 0; k < s->nrequires; k++)
				if (strcmp(s->requires[k].producer.name, p.segments[0].key) == 0 &&
					strcmp(s->requires[k].key, p.segments[1].key) == 0)
					declared = 1;
			if (!declared)
				wfe_diag(m->diags, "graph.output_not_in_lineage", path, at->line, at->column,
						 "task '%s' reads outputs.%s.%s without declaring it in requires_outputs",
						 s->name, p.segments[0].key, p.segments[1].key);
		}
	}
	else if (strcmp(p.root, "run") == 0)
	{
		static const char *const fields[] = {"id", "tenant", "workflow", "version", NULL};
		int			ok = p.nsegments == 1 && !p.segments[0].is_index;

		if (ok)
		{
			ok = 0;
			for (int f = 0; fields[f]; f++)
				if (strcmp(p.segments[0].key, fields[f]) == 0)
					ok = 1;
		}
		if (!ok)
			wfe_diag(m->diags, "expr.syntax", path, at->line, at->column,
					 "run has the fields id, tenant, workflow and version");
	}
	wfe_path_free(&p);
}

/* Scan one string for `${...}`; `$${` is a literal "${". */
static void
scan_string(wfe_model *m, int idx, const wfe_ynode *n, const char *path, int item_ok)
{
	const char *s = n->text;
	size_t		len = n->len;

	for (size_t i = 0; i + 1 < len; i++)
	{
		size_t		j;

		if (s[i] == '$' && s[i + 1] == '$' && i + 2 < len && s[i + 2] == '{')
		{
			i += 2;
			continue;
		}
		if (s[i] != '$' || s[i + 1] != '{')
			continue;
		/* the closing brace, skipping quoted keys like ["a}b"] */
		j = wfe_interp_close(s, len, i + 2);
		if (j >= len)
		{
			wfe_diag(m->diags, "expr.syntax", path, n->line, n->column,
					 "unterminated interpolation: '${' without a closing '}'");
			return;
		}
		check_interpolation(m, idx, s + i + 2, j - i - 2, path, n, item_ok);
		i = j;
	}
}

/* Walk an input value for strings. */
static void
scan_input(wfe_model *m, int idx, const wfe_ynode *n, const char *path, int item_ok)
{
	if (n->kind == WFE_Y_SCALAR)
	{
		if (n->type == WFE_YS_STRING)
			scan_string(m, idx, n, path, item_ok);
		return;
	}
	for (int i = 0; i < n->n; i++)
		scan_input(m, idx, n->items[i],
				   n->kind == WFE_Y_MAP
				   ? wfe_arena_printf(m->arena, "%s/%s", path, n->keys[i]->text)
				   : wfe_arena_printf(m->arena, "%s/%d", path, i), item_ok);
}

void
wfe_refs_check(wfe_model *m)
{
	for (int i = 0; i < m->nstages; i++)
	{
		wfe_stage  *s = &m->stages[i];

		if (s->type == WFE_ST_DECISION)
			check_decision(m, i);
		if (s->input != NULL && s->name != NULL)
			scan_input(m, i, s->input, s->input_path, s->type == WFE_ST_MAP);
		if (s->until != NULL && s->name != NULL)
			scan_input(m, i, s->until, s->until_path, 0);
		if (s->items != NULL && s->name != NULL)
			scan_input(m, i, s->items, s->items_path, 0);
		if (s->concurrency_key_node != NULL && s->concurrency_key != NULL && s->name != NULL)
			scan_input(m, i, s->concurrency_key_node, s->concurrency_key_path, s->type == WFE_ST_MAP);
	}
	if (m->output != NULL)
		scan_input(m, -1, m->output, "/output", 0);
}
