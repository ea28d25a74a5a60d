/*
 * arena.c — bump allocator backing one compilation (see arena.h).
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "arena.h"

#define ARENA_BLOCK_SIZE 16384

struct wfe_arena_block
{
	wfe_arena_block *next;
	size_t		size;
	size_t		used;
	/* data follows, max-aligned */
	max_align_t data[];
};

/* Start an empty arena. */
void
wfe_arena_init(wfe_arena *a)
{
	a->head = NULL;
	a->used = 0;
}

/* Hand out `size` zeroed bytes; aborts only if malloc itself fails. */
void *
wfe_arena_alloc(wfe_arena *a, size_t size)
{
	wfe_arena_block *b = a->head;
	size_t		aligned = (size + sizeof(max_align_t) - 1) & ~(sizeof(max_align_t) - 1);
	char	   *p;

	if (aligned == 0)
		aligned = sizeof(max_align_t);
	if (b == NULL || b->size - b->used < aligned)
	{
		size_t		bsize = aligned > ARENA_BLOCK_SIZE ? aligned : ARENA_BLOCK_SIZE;

		b = malloc(sizeof(wfe_arena_block) + bsize);
		if (b == NULL)
			abort();
		b->size = bsize;
		b->used = 0;
		b->next = a->head;
		a->head = b;
	}
	p = (char *) b->data + b->used;
	b->used += aligned;
	a->used += aligned;
	memset(p, 0, size);
	return p;
}

/* Copy `len` bytes of `s` into the arena, NUL-terminated. */
char *
wfe_arena_strndup(wfe_arena *a, const char *s, size_t len)
{
	char	   *d = wfe_arena_alloc(a, len + 1);

	memcpy(d, s, len);
	d[len] = '\0';
	return d;
}

/* Copy a C string into the arena. */
char *
wfe_arena_strdup(wfe_arena *a, const char *s)
{
	return wfe_arena_strndup(a, s, strlen(s));
}

/* printf into the arena. */
char *
wfe_arena_printf(wfe_arena *a, const char *fmt,...)
{
	char		small[256];
	va_list		ap;
	int			n;
	char	   *d;

	va_start(ap, fmt);
	n = vsnprintf(small, sizeof(small), fmt, ap);
	va_end(ap);
	if (n < 0)
		return wfe_arena_strdup(a, "");
	if ((size_t) n < sizeof(small))
		return wfe_arena_strndup(a, small, (size_t) n);
	d = wfe_arena_alloc(a, (size_t) n + 1);
	va_start(ap, fmt);
	vsnprintf(d, (size_t) n + 1, fmt, ap);
	va_end(ap);
	return d;
}

/* Release every block. */
void
wfe_arena_free(wfe_arena *a)
{
	while (a->head)
	{
		wfe_arena_block *next = a->head->next;

		free(a->head);
		a->head = next;
	}
	a->used = 0;
}
