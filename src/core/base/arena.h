/*
 * arena.h — one allocation arena per compilation.
 *
 * Everything the compiler builds (YAML tree, model, path strings) lives in the
 * arena and goes away in one call, so no error path can leak and the fuzzer's
 * leak checker has nothing to find.
 */
#ifndef WFE_ARENA_H
#define WFE_ARENA_H

#include <stddef.h>

typedef struct wfe_arena_block wfe_arena_block;

typedef struct wfe_arena
{
	wfe_arena_block *head;
	size_t		used;			/* total bytes handed out, for bounds */
} wfe_arena;

extern void wfe_arena_init(wfe_arena *a);
extern void *wfe_arena_alloc(wfe_arena *a, size_t size);	/* zeroed */
extern char *wfe_arena_strndup(wfe_arena *a, const char *s, size_t len);
extern char *wfe_arena_strdup(wfe_arena *a, const char *s);
extern char *wfe_arena_printf(wfe_arena *a, const char *fmt,...)
			__attribute__((format(printf, 2, 3)));
extern void wfe_arena_free(wfe_arena *a);

#endif							/* WFE_ARENA_H */
