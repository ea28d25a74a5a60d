/*
 * map.h — the server layer of map stages (map.c), for engine.c.
 */
#ifndef WFE_PG_MAP_H
#define WFE_PG_MAP_H

#include "core/engine/runplan.h"
#include "core/engine/step.h"

/* NAME[elem], palloc'd: an element's stage name everywhere */
extern char *wfe_map_element_name(const char *map, int64 elem);
/* the map's counter row (all 0: none) */
extern void wfe_map_read_counts(int64 run_id, const char *map, wfe_map_counts *c);
/* the one final aggregation: {"items", "failed"} in element order */
extern const char *wfe_map_results(int64 run_id, int ordinal, int64 elem, const char *elem_result);
/* the indices of the map's cancelled elements, ascending, at most max into out; how many */
extern int64 wfe_map_cancelled(int64 run_id, int ordinal, int64_t *out, int64_t max);
/* the lowest index below `below` of the map's elements waiting (held for a slot), or -1 */
extern int64 wfe_map_held(int64 run_id, int ordinal, int64 below);
/* write a MAP_START or MAP_COUNTS op of map stage s */
extern void wfe_map_apply(int64 run_id, const char *tenant, const wfe_rp_stage *s, const wfe_op *op);

/* an element the map's end cancelled: its name, attempt, the fence asked to stop, the state it was in */
typedef void (*wfe_map_cancelled_fn) (void *arg, const char *stage, int attempt, int64 fence, const char *was);

/*
 * a MAP_CANCEL op of map stage s: its elements under way cancelled and
 * fenced, each that had an attempt passed to each (in element order);
 * returns how many cancel messages to broker workers were written
 */
extern int64 wfe_map_cancel(int64 run_id, const wfe_rp_stage *s, const char *error, wfe_map_cancelled_fn each,
							void *arg);

#endif							/* WFE_PG_MAP_H */
