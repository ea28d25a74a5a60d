/*
 * jsontext.c — strict JSON parsing and compact serialisation (json-c).
 */
#include "jsontext.h"

#include <stdio.h>
#include <string.h>

#include "util.h"

/* See jsontext.h. */
json_object *
json_parse_text(const char *text, size_t len, int *is_null, char *err, size_t errlen)
{
	json_tokener *tok;
	json_object *obj;
	enum json_tokener_error jerr;

	if (is_null)
		*is_null = 0;
	if (len > (size_t) 0x7ffffffe)
	{
		snprintf(err, errlen, "the JSON text is too long (%zu bytes)", len);
		return NULL;
	}
	tok = json_tokener_new();
	if (tok == NULL)
	{
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	json_tokener_set_flags(tok, JSON_TOKENER_STRICT | JSON_TOKENER_VALIDATE_UTF8);
	/* the terminating '\0' tells the tokener the input ends (numbers need it) */
	obj = json_tokener_parse_ex(tok, text, (int) len + 1);
	jerr = json_tokener_get_error(tok);
	if (jerr != json_tokener_success)
	{
		snprintf(err, errlen, "%s at byte %zu",
				 jerr == json_tokener_continue ? "unexpected end of input" : json_tokener_error_desc(jerr),
				 json_tokener_get_parse_end(tok));
		json_object_put(obj);
		obj = NULL;
	}
	else if (json_tokener_get_parse_end(tok) < len)
	{
		/* something (perhaps a NUL byte) follows the document */
		snprintf(err, errlen, "unexpected data after the JSON value at byte %zu",
				 json_tokener_get_parse_end(tok));
		json_object_put(obj);
		obj = NULL;
	}
	else if (obj == NULL)
	{
		if (is_null)
			*is_null = 1;
		else
			snprintf(err, errlen, "the JSON value is null");
	}
	json_tokener_free(tok);
	return obj;
}

/* See jsontext.h. */
char *
json_to_text(json_object *obj)
{
	return xstrdup(json_object_to_json_string_ext(obj, JSON_C_TO_STRING_PLAIN |
												  JSON_C_TO_STRING_NOSLASHESCAPE));
}
