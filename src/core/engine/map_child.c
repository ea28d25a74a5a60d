/*
 * map_child.c — maps whose item executor is a child workflow (dsl.md
 * "Stages form: new types", runtime.md "Map elements" and "Child runs").
 *
 * Each element NAME[k] is released as a workflow stage is (child.c): a new
 * attempt starts a child run of the item's workflow, pinned at that release,
 * with the element's bound input as its context, and the parent links
 * naming the element.  The child's end comes back to the element
 * (wfe_step_child_ended), so its output is the element's result, and
 * child.failed / child.cancelled fail its attempt, whose retry policy may
 * start a new child; the element's end is counted by map.c as any other.
 * max_concurrency bounds the live children, as it bounds queued workers:
 * an element is under way until its child ends.
 */
#include <string.h>

#include "step_internal.h"

/*
 * At the map's release: is its child workflow runnable (approved, within
 * wfe.max_workflow_depth)?  If not, the map fails unbound, with no element.
 */
int
step_map_child_ok(wfe_step *st, int i)
{
	const wfe_rp_stage *s = &st->rp->stages[i];
	wfe_child	c = {NULL, 0, 0};

	if (st->io->child)
		st->io->child(st->io->arg, i, &c);
	if (c.version == NULL)
	{
		step_map_unbound(st, i, "contract.unknown",
						 wfe_arena_printf(&st->arena, "the items of map '%s' run workflow %s, which %s",
										  s->name, s->contract,
										  strchr(s->contract, '@') ? "is not approved" : "has no active version"));
		return 0;
	}
	if (c.depth > c.max_depth)
	{
		step_map_unbound(st, i, "limits.workflow_depth",
						 wfe_arena_printf(&st->arena,
										  "the items of map '%s' would run %s nested %d deep; wfe.max_workflow_depth is %d",
										  s->name, s->contract, c.depth, c.max_depth));
		return 0;
	}
	return 1;
}

/*
 * Release the step's current element of map i: its child run starts.
 * input: the element's context when its row is being created in this step
 * (the map's release); NULL reads it from the row.
 */
void
step_release_element_child(wfe_step *st, int i, const char *input)
{
	if (input != NULL)
		step_release_child_bound(st, i, input);
	else
		step_release_child(st, i, 1);
}
