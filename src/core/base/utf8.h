/*
 * utf8.h — what wfe knows about UTF-8: one definition of a well-formed
 * character (RFC 3629: no overlongs, no surrogates, nothing above U+10FFFF),
 * used by the lexer, the regex engine, the messages of the cores and
 * wfe-worker alike.  Plain C, no PostgreSQL headers.
 */
#ifndef WFE_UTF8_H
#define WFE_UTF8_H

#include <stddef.h>
#include <stdint.h>

/*
 * Decode the character at s (avail > 0 bytes left): its length in bytes and,
 * if cp is not NULL, its code point; 0 when the bytes there are not a
 * well-formed character (invalid, overlong, a surrogate, beyond U+10FFFF or
 * cut off by avail).  A NUL byte is a character of length 1.
 */
extern int	wfe_utf8_decode(const unsigned char *s, size_t avail, uint32_t *cp);

/* Append code point cp (at most U+10FFFF) to buf as UTF-8; returns the bytes written (1-4). */
extern int	wfe_utf8_encode(uint32_t cp, char *buf);

/* The number of characters in the first n bytes of well-formed text s. */
extern size_t wfe_utf8_chars(const char *s, size_t n);

/*
 * The largest length <= n at which s may be cut without splitting a
 * character: n backed up over continuation bytes (s has more than n bytes).
 */
extern size_t wfe_utf8_cut(const char *s, size_t n);

/*
 * Replace every byte that is not part of a well-formed character with '?',
 * in place.  Messages quote source text and are cut at fixed sizes; a cut
 * can split a character, and PostgreSQL rejects invalid UTF-8 in messages.
 */
extern void wfe_utf8_sanitize(char *s);

#endif							/* WFE_UTF8_H */
