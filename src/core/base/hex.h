/*
 * hex.h — the value of a hexadecimal digit, for every parser of the cores
 * (CEL escapes, regex escapes, signature digests).
 */
#ifndef WFE_HEX_H
#define WFE_HEX_H

/* The value of hex digit c (either case), or -1. */
static inline int
wfe_hex_value(int c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

#endif							/* WFE_HEX_H */
