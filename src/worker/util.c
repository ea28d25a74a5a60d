/*
 * util.c — logging, the clock, buffers and UTF-8 clean-up for wfe-worker.
 */
#include "util.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "core/base/utf8.h"

LogLevel	log_min_level = LOG_INFO;

/*
 * Write one log line to stderr: local time with milliseconds, the program
 * and pid, the level, the message.  errno is preserved for the caller.
 */
void
wlog(LogLevel level, const char *fmt,...)
{
	static const char *const names[] = {"DEBUG", "INFO", "WARNING", "ERROR"};
	int			save_errno = errno;
	struct timeval tv;
	struct tm	tm;
	char		stamp[32];
	char		msg[4096];
	va_list		ap;

	if (level < log_min_level)
		return;
	gettimeofday(&tv, NULL);
	localtime_r(&tv.tv_sec, &tm);
	strftime(stamp, sizeof(stamp), "%Y-%m-%d %H:%M:%S", &tm);
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	/* one write per line, so lines of concurrent processes do not mix */
	fprintf(stderr, "%s.%03d wfe-worker[%d] %s: %s\n", stamp, (int) (tv.tv_usec / 1000),
			(int) getpid(), names[level], msg);
	fflush(stderr);
	errno = save_errno;
}

/* Milliseconds of a clock that never jumps. */
int64_t
now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t) ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Out of memory is not recoverable in a worker: say so and exit. */
static void
out_of_memory(size_t size)
{
	wlog(LOG_ERROR, "out of memory (allocating %zu bytes)", size);
	exit(1);
}

/* malloc or exit. */
void *
xmalloc(size_t size)
{
	void	   *p = malloc(size ? size : 1);

	if (p == NULL)
		out_of_memory(size);
	return p;
}

/* realloc or exit. */
void *
xrealloc(void *p, size_t size)
{
	void	   *q = realloc(p, size ? size : 1);

	if (q == NULL)
		out_of_memory(size);
	return q;
}

/* strdup or exit; NULL stays NULL. */
char *
xstrdup(const char *s)
{
	return s ? xstrndup(s, strlen(s)) : NULL;
}

/* The first n bytes of s as a new string. */
char *
xstrndup(const char *s, size_t n)
{
	char	   *p = xmalloc(n + 1);

	memcpy(p, s, n);
	p[n] = '\0';
	return p;
}

/* An empty buffer that owns no memory yet. */
void
buf_init(Buf *b)
{
	b->data = NULL;
	b->len = 0;
	b->cap = 0;
}

/* Release the buffer's memory; it is empty again afterwards. */
void
buf_free(Buf *b)
{
	free(b->data);
	buf_init(b);
}

/* Empty the buffer, keeping its memory. */
void
buf_reset(Buf *b)
{
	b->len = 0;
	if (b->data)
		b->data[0] = '\0';
}

/* Append bytes, growing geometrically. */
void
buf_append(Buf *b, const char *data, size_t len)
{
	if (b->len + len + 1 > b->cap)
	{
		size_t		cap = b->cap ? b->cap : 256;

		while (cap < b->len + len + 1)
			cap *= 2;
		b->data = xrealloc(b->data, cap);
		b->cap = cap;
	}
	memcpy(b->data + b->len, data, len);
	b->len += len;
	b->data[b->len] = '\0';
}

/* See util.h. */
char *
utf8_clean(const char *data, size_t len, bool from_tail)
{
	const unsigned char *s = (const unsigned char *) data;
	char	   *out = xmalloc(len + 1);
	size_t		i = 0,
				o = 0;

	/* a tail may begin inside a character: skip its continuation bytes */
	if (from_tail)
		while (i < len && i < 3 && (s[i] & 0xC0) == 0x80)
			i++;
	while (i < len)
	{
		size_t		n = s[i] ? (size_t) wfe_utf8_decode(s + i, len - i, NULL) : 0;

		if (n == 0)
		{
			out[o++] = '?';
			i++;
		}
		else
		{
			memcpy(out + o, s + i, n);
			o += n;
			i += n;
		}
	}
	out[o] = '\0';
	return out;
}

/* See util.h. */
void
one_line(char *s)
{
	char	   *o = s;
	bool		space = false;

	for (char *p = s; *p; p++)
	{
		if (*p == '\n' || *p == '\t' || *p == '\r' || *p == ' ')
			space = true;
		else
		{
			if (space && o != s)
				*o++ = ' ';
			space = false;
			*o++ = *p;
		}
	}
	*o = '\0';
}
