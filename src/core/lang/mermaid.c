/*
 * mermaid.c — a compiled plan as a Mermaid flowchart, the picture a
 * reviewer looks at: success edges solid, failure and evaluation-error edges
 * dotted, decisions as diamonds, forks and joins marked, terminal intents
 * flowing through the finalisers to the exposed outcome.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include "compile.h"

typedef struct mbuf
{
	char	   *data;
	size_t		len;
	size_t		cap;
} mbuf;

/* printf-append. */
static void
out(mbuf *b, const char *fmt,...)
	__attribute__((format(printf, 2, 3)));

static void
out(mbuf *b, const char *fmt,...)
{
	va_list		ap;
	int			n;

	va_start(ap, fmt);
	n = vsnprintf(NULL, 0, fmt, ap);
	va_end(ap);
	if (n < 0)
		return;
	if (b->len + (size_t) n + 1 > b->cap)
	{
		size_t		cap = b->cap ? b->cap : 1024;

		while (cap < b->len + (size_t) n + 1)
			cap *= 2;
		b->data = realloc(b->data, cap);
		if (b->data == NULL)
			abort();
		b->cap = cap;
	}
	va_start(ap, fmt);
	vsnprintf(b->data + b->len, (size_t) n + 1, fmt, ap);
	va_end(ap);
	b->len += (size_t) n;
}

/* Text made safe inside a quoted Mermaid label (malloc'd). */
static char *
label(const char *s)
{
	mbuf		b = {NULL, 0, 0};

	out(&b, "%s", "");
	for (; s && *s; s++)
	{
		switch (*s)
		{
			case '"':
				out(&b, "#quot;");
				break;
			case '<':
				out(&b, "#lt;");
				break;
			case '>':
				out(&b, "#gt;");
				break;
			case '&':
				out(&b, "#amp;");
				break;
			case '#':
				out(&b, "#35;");
				break;
			case '\n':
			case '\r':
				out(&b, " ");
				break;
			default:
				out(&b, "%c", *s);
		}
	}
	return b.data;
}

static const char *
get_str(json_object *o, const char *key)
{
	json_object *v;

	if (json_object_object_get_ex(o, key, &v) && json_object_is_type(v, json_type_string))
		return json_object_get_string(v);
	return NULL;
}

/* Node id of a stage or terminal target. */
static void
node_id(json_object *stages, const char *name, char *buf, size_t size, int finalised)
{
	size_t		n = json_object_array_length(stages);

	for (size_t i = 0; i < n; i++)
		if (strcmp(get_str(json_object_array_get_idx(stages, i), "name"), name) == 0)
		{
			snprintf(buf, size, "s%zu", i);
			return;
		}
	/* a terminal: with finalisers it is an intent, otherwise the outcome */
	snprintf(buf, size, "%s_%s", finalised ? "intent" : "end", name);
}

/* One route edge. */
static void
edge(mbuf *b, json_object *stages, const char *from, const char *to,
	 const char *style, const char *text, int finalised)
{
	char		id[32];
	char	   *l;

	if (to == NULL)
		return;
	node_id(stages, to, id, sizeof(id), finalised);
	if (strcmp(style, "dotted") == 0)
	{
		l = label(text);
		out(b, "  %s -. \"%s\" .-> %s\n", from, l, id);
		free(l);
	}
	else if (text)
	{
		l = label(text);
		out(b, "  %s -->|\"%s\"| %s\n", from, l, id);
		free(l);
	}
	else
		out(b, "  %s --> %s\n", from, id);
}

/* A stage's node declaration. */
static void
declare_stage(mbuf *b, json_object *s, size_t i)
{
	const char *type = get_str(s, "type");
	char	   *name = label(get_str(s, "name"));

	if (strcmp(type, "action") == 0)
	{
		char	   *ref = label(get_str(s, "action"));

		out(b, "  s%zu[\"%s<br/><i>action %s</i>\"]\n", i, name, ref);
		free(ref);
	}
	else if (strcmp(type, "worker") == 0)
	{
		char	   *ref = label(get_str(s, "worker"));
		char	   *q = label(get_str(s, "queue"));

		out(b, "  s%zu(\"%s<br/><i>worker %s on %s</i>\")\n", i, name, ref, q);
		free(ref);
		free(q);
	}
	else if (strcmp(type, "decision") == 0)
		out(b, "  s%zu{\"%s\"}\n", i, name);
	else if (strcmp(type, "wait") == 0)
	{
		/* a hexagon: the run waits on the world */
		char	   *ref = label(get_str(s, "signal"));
		json_object *t = json_object_object_get(s, "timeout_ms");

		if (t && json_object_is_type(t, json_type_int))
			out(b, "  s%zu{{\"%s<br/><i>wait for %s, %lld ms</i>\"}}\n", i, name, ref,
				(long long) json_object_get_int64(t));
		else
			out(b, "  s%zu{{\"%s<br/><i>wait for %s</i>\"}}\n", i, name, ref);
		free(ref);
	}
	else if (strcmp(type, "workflow") == 0)
	{
		/* a subroutine: another workflow runs as this stage */
		char	   *ref = label(get_str(s, "workflow"));

		out(b, "  s%zu[[\"%s<br/><i>workflow %s</i>\"]]\n", i, name, ref);
		free(ref);
	}
	else if (strcmp(type, "map") == 0)
	{
		/* a parallelogram: one item executor per element of an array */
		json_object *item = json_object_object_get(s, "item");
		json_object *mc = json_object_object_get(s, "max_concurrency");
		const char *w = get_str(item, "worker");
		const char *child = get_str(item, "workflow");
		char	   *ref = label(w ? w : child ? child : get_str(item, "action"));
		char	   *q = label(get_str(item, "queue"));
		char		limit[48] = "";

		if (mc && json_object_is_type(mc, json_type_int))
			snprintf(limit, sizeof(limit), ", %lld at once", (long long) json_object_get_int64(mc));
		if (w)
			out(b, "  s%zu[/\"%s<br/><i>map: worker %s on %s%s</i>\"/]\n", i, name, ref, q, limit);
		else if (child)
			out(b, "  s%zu[/\"%s<br/><i>map: workflow %s%s</i>\"/]\n", i, name, ref, limit);
		else
			out(b, "  s%zu[/\"%s<br/><i>map: action %s%s</i>\"/]\n", i, name, ref, limit);
		free(ref);
		free(q);
	}
	else if (strcmp(type, "sleep") == 0)
	{
		/* a circle: a timer */
		json_object *d = json_object_object_get(s, "duration_ms");

		if (d && json_object_is_type(d, json_type_int))
			out(b, "  s%zu((\"%s<br/><i>sleep %lld ms</i>\"))\n", i, name,
				(long long) json_object_get_int64(d));
		else
		{
			char	   *until = label(get_str(s, "until"));

			out(b, "  s%zu((\"%s<br/><i>sleep until %s</i>\"))\n", i, name, until);
			free(until);
		}
	}
	else if (strcmp(type, "fork") == 0)
		out(b, "  s%zu[[\"fork: %s\"]]\n", i, name);
	else if (strcmp(type, "join") == 0)
	{
		json_object *acc;
		mbuf		states = {NULL, 0, 0};

		out(&states, "%s", "");
		if (json_object_object_get_ex(s, "acceptable_terminal_states", &acc))
			for (size_t k = 0; k < json_object_array_length(acc); k++)
				out(&states, "%s%s", k ? " or " : "",
					json_object_get_string(json_object_array_get_idx(acc, k)));
		out(b, "  s%zu[[\"join: %s<br/><i>all %s</i>\"]]\n", i, name, states.data);
		free(states.data);
	}
	free(name);
}

/* Edges of a stage in the stages form. */
static void
stage_edges(mbuf *b, json_object *stages, json_object *s, size_t i, int finalised)
{
	const char *type = get_str(s, "type");
	char		from[32];
	json_object *list;

	snprintf(from, sizeof(from), "s%zu", i);
	if (strcmp(type, "decision") == 0)
	{
		if (json_object_object_get_ex(s, "branches", &list))
			for (size_t k = 0; k < json_object_array_length(list); k++)
			{
				json_object *br = json_object_array_get_idx(list, k);
				const char *when = get_str(br, "when");

				edge(b, stages, from, get_str(br, "next"), "solid",
					 strcmp(when, "true") == 0 ? "fallback" : when, finalised);
			}
		edge(b, stages, from, get_str(s, "on_evaluation_error"), "dotted",
			 "evaluation error", finalised);
		return;
	}
	if (strcmp(type, "fork") == 0)
	{
		if (json_object_object_get_ex(s, "branches", &list))
			for (size_t k = 0; k < json_object_array_length(list); k++)
				edge(b, stages, from, json_object_get_string(json_object_array_get_idx(list, k)),
					 "solid", NULL, finalised);
		return;
	}
	edge(b, stages, from, get_str(s, "on_success"), "solid", NULL, finalised);
	edge(b, stages, from, get_str(s, "on_failure"), "dotted",
		 strcmp(type, "join") == 0 ? "join failure" : "failure", finalised);
	if (strcmp(type, "wait") == 0 && json_object_is_type(json_object_object_get(s, "timeout_ms"), json_type_int))
		edge(b, stages, from, get_str(s, "on_timeout"), "dotted", "timeout", finalised);
}

/* Edges of a task in the tasks form: dependency -> task. */
static void
task_edges(mbuf *b, json_object *stages, json_object *s, size_t i)
{
	json_object *deps;

	if (!json_object_object_get_ex(s, "depends_on", &deps))
		return;
	for (size_t k = 0; k < json_object_array_length(deps); k++)
	{
		const char *dep = json_object_get_string(json_object_array_get_idx(deps, k));
		json_object *reqs;
		mbuf		keys = {NULL, 0, 0};
		char		id[32];

		/* label a dependency with the outputs the task reads from it */
		out(&keys, "%s", "");
		if (json_object_object_get_ex(s, "requires_outputs", &reqs))
			for (size_t r = 0; r < json_object_array_length(reqs); r++)
			{
				json_object *req = json_object_array_get_idx(reqs, r);
				const char *producer = get_str(req, "producer_task_id");

				if (producer && strcmp(producer, dep) == 0)
					out(&keys, "%s%s", keys.len ? ", " : "", get_str(req, "key"));
			}
		node_id(stages, dep, id, sizeof(id), 0);
		if (keys.len)
		{
			char	   *l = label(keys.data);

			out(b, "  %s -->|\"%s\"| s%zu\n", id, l, i);
			free(l);
		}
		else
			out(b, "  %s --> s%zu\n", id, i);
		free(keys.data);
	}
}

/* Intents, finalisers in order, and the exposed outcomes. */
static void
finalisation(mbuf *b, json_object *plan, int tasks_form)
{
	json_object *fins;
	size_t		n = 0;

	if (json_object_object_get_ex(plan, "finalisers", &fins))
		n = json_object_array_length(fins);
	if (tasks_form)
		return;					/* a DAG's outcome is its tasks' states */
	if (n == 0)
	{
		out(b, "  end_completed([\"completed\"])\n  end_failed([\"failed\"])\n");
		return;
	}
	out(b, "  intent_completed([\"completed intent\"])\n  intent_failed([\"failed intent\"])\n");
	for (size_t k = 0; k < n; k++)
	{
		json_object *f = json_object_array_get_idx(fins, k);
		char	   *name = label(get_str(f, "name"));
		char	   *ref = label(get_str(f, "action"));

		out(b, "  f%zu[\"%s<br/><i>action %s</i>\"]\n", k, name, ref);
		free(name);
		free(ref);
		if (k > 0)
			out(b, "  f%zu --> f%zu\n", k - 1, k);
	}
	out(b, "  intent_completed --> f0\n  intent_failed --> f0\n");
	out(b, "  end_completed([\"completed\"])\n  end_failed([\"failed\"])\n");
	out(b, "  f%zu -->|\"completed intent, every finaliser succeeded\"| end_completed\n", n - 1);
	out(b, "  f%zu -. \"failed intent or a finaliser failed\" .-> end_failed\n", n - 1);
}

char *
wfe_plan_mermaid(json_object *plan)
{
	json_object *stages;
	const char *form,
			   *entry;
	mbuf		b = {NULL, 0, 0};
	size_t		n;
	int			finalised,
				tasks_form;

	if (plan == NULL || !json_object_is_type(plan, json_type_object) ||
		!json_object_object_get_ex(plan, "stages", &stages) ||
		!json_object_is_type(stages, json_type_array) ||
		(form = get_str(plan, "form")) == NULL)
		return NULL;
	for (size_t i = 0; i < json_object_array_length(stages); i++)
	{
		json_object *s = json_object_array_get_idx(stages, i);

		if (!json_object_is_type(s, json_type_object) || get_str(s, "name") == NULL ||
			get_str(s, "type") == NULL)
			return NULL;
	}
	tasks_form = strcmp(form, "tasks") == 0;
	{
		json_object *fins;

		finalised = !tasks_form && json_object_object_get_ex(plan, "finalisers", &fins) &&
			json_object_array_length(fins) > 0;
	}
	n = json_object_array_length(stages);

	out(&b, "flowchart LR\n");
	{
		char	   *title = label(get_str(plan, "name"));
		char	   *version = label(get_str(plan, "version"));

		out(&b, "  %%%% %s %s\n", title ? title : "", version ? version : "");
		free(title);
		free(version);
	}
	if (!tasks_form && (entry = get_str(plan, "entry")) != NULL)
	{
		char		id[32];

		node_id(stages, entry, id, sizeof(id), finalised);
		out(&b, "  start((start)) --> %s\n", id);
	}
	for (size_t i = 0; i < n; i++)
		declare_stage(&b, json_object_array_get_idx(stages, i), i);
	finalisation(&b, plan, tasks_form);
	for (size_t i = 0; i < n; i++)
	{
		json_object *s = json_object_array_get_idx(stages, i);

		if (tasks_form)
			task_edges(&b, stages, s, i);
		else
			stage_edges(&b, stages, s, i, finalised);
	}
	if (tasks_form)
	{
		/* non-critical tasks dashed, tasks nobody waits for dotted grey */
		out(&b, "  classDef noncritical stroke-dasharray: 5 5\n");
		out(&b, "  classDef detached stroke-dasharray: 2 2,color:#666\n");
		for (size_t i = 0; i < n; i++)
		{
			json_object *s = json_object_array_get_idx(stages, i);
			json_object *v;

			if (json_object_object_get_ex(s, "critical", &v) && !json_object_get_boolean(v))
				out(&b, "  class s%zu noncritical\n", i);
			if (json_object_object_get_ex(s, "awaits", &v) && !json_object_get_boolean(v))
				out(&b, "  class s%zu detached\n", i);
		}
	}
	return b.data;
}
