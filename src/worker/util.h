/*
 * util.h — wfe-worker's small helpers: logging, the monotonic clock, a
 * growable byte buffer and UTF-8 clean-up of text that goes into JSON.
 */
#ifndef WFE_WORKER_UTIL_H
#define WFE_WORKER_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum LogLevel
{
	LOG_DEBUG,
	LOG_INFO,
	LOG_WARNING,
	LOG_ERROR
} LogLevel;

/* Messages below this level are not written (LOG_INFO unless -v). */
extern LogLevel log_min_level;

extern void wlog(LogLevel level, const char *fmt,...)
			__attribute__((format(printf, 2, 3)));

/* Milliseconds of CLOCK_MONOTONIC. */
extern int64_t now_ms(void);

/* A growable buffer of bytes, always NUL-terminated. */
typedef struct Buf
{
	char	   *data;
	size_t		len;
	size_t		cap;
} Buf;

extern void buf_init(Buf *b);
extern void buf_free(Buf *b);
extern void buf_reset(Buf *b);
extern void buf_append(Buf *b, const char *data, size_t len);

/* malloc that never returns NULL (it exits on exhaustion). */
extern void *xmalloc(size_t size);
extern void *xrealloc(void *p, size_t size);
extern char *xstrdup(const char *s);
extern char *xstrndup(const char *s, size_t n);

/* Fold newlines and tabs (libpq's multi-line messages) into single spaces, in place. */
extern void one_line(char *s);

/*
 * Copy `len` bytes into a fresh string that is valid UTF-8 without NULs
 * (which jsonb refuses): invalid sequences and NUL become '?'.  With
 * `from_tail`, a sequence cut at the start is dropped instead.
 */
extern char *utf8_clean(const char *data, size_t len, bool from_tail);

#endif							/* WFE_WORKER_UTIL_H */
