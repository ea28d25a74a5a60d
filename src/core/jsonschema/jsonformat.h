/*
 * jsonformat.h — the JSON Schema "format" values wfe can assert, used when
 * wfe.schema_format_assertion is on (docs/dsl.md "Schemas").
 *
 * date-time, date, time, duration (RFC 3339 / ISO 8601), email, hostname,
 * ipv4, ipv6, uuid, uri, uri-reference, json-pointer, regex (wfe's
 * linear-time dialect).  Any other format stays an annotation.
 */
#ifndef WFE_JSONFORMAT_H
#define WFE_JSONFORMAT_H

#include <stddef.h>

/* 1 when s (len bytes) is a valid `format`, 0 when not, -1 for a format wfe does not know. */
extern int	wfe_json_format_check(const char *format, const char *s, size_t len);

#endif							/* WFE_JSONFORMAT_H */
