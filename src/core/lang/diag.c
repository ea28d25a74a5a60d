/*
 * diag.c — collecting compiler diagnostics (see diag.h).
 */
#include <stdarg.h>
#include <stdio.h>

#include "diag.h"

/* Start an empty list. */
void
wfe_diags_init(wfe_diags *d)
{
	d->list = json_object_new_array();
	d->errors = 0;
	d->dropped = 0;
}

/* Append one error diagnostic. */
void
wfe_diag(wfe_diags *d, const char *code, const char *path, int line,
		 int column, const char *fmt,...)
{
	char		message[512];
	va_list		ap;
	json_object *o;

	d->errors++;
	if ((int) json_object_array_length(d->list) >= WFE_MAX_DIAGNOSTICS)
	{
		d->dropped++;
		return;
	}
	va_start(ap, fmt);
	vsnprintf(message, sizeof(message), fmt, ap);
	va_end(ap);

	o = json_object_new_object();
	json_object_object_add(o, "code", json_object_new_string(code));
	json_object_object_add(o, "severity", json_object_new_string("error"));
	json_object_object_add(o, "message", json_object_new_string(message));
	json_object_object_add(o, "path", json_object_new_string(path ? path : ""));
	json_object_object_add(o, "line", json_object_new_int(line < 1 ? 1 : line));
	json_object_object_add(o, "column", json_object_new_int(column < 1 ? 1 : column));
	json_object_array_add(d->list, o);
}

/* Return the array, noting how many diagnostics were left out. */
json_object *
wfe_diags_finish(wfe_diags *d)
{
	json_object *list = d->list;

	if (d->dropped > 0)
	{
		json_object *o = json_object_new_object();
		char		message[128];

		snprintf(message, sizeof(message),
				 "%d further diagnostics were not reported", d->dropped);
		json_object_object_add(o, "code", json_object_new_string("limits.diagnostics"));
		json_object_object_add(o, "severity", json_object_new_string("error"));
		json_object_object_add(o, "message", json_object_new_string(message));
		json_object_object_add(o, "path", json_object_new_string(""));
		json_object_object_add(o, "line", json_object_new_int(1));
		json_object_object_add(o, "column", json_object_new_int(1));
		json_object_array_add(list, o);
	}
	d->list = NULL;
	return list;
}
