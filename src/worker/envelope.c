/*
 * envelope.c — parsing broker messages with json-c.
 *
 * Numbers that must be exact (run_id, fence) are read as 64-bit integers;
 * the inline payload is written out again with json-c, which keeps the
 * original text of every number it parsed.
 */
#include "envelope.h"

#include <stdio.h>
#include <string.h>

#include "jsontext.h"
#include "util.h"

/* Parse a message body as one JSON document; NULL with *err set if it is not. */
static json_object *
parse_document(const char *body, size_t len, char *err, size_t errlen)
{
	char		why[256];
	json_object *obj = json_parse_text(body, len, NULL, why, sizeof(why));

	if (obj == NULL)
		snprintf(err, errlen, "the body is not JSON: %s", why);
	return obj;
}

/* A required integer member; false with *err set when absent or not one. */
static bool
get_int64(json_object *o, const char *key, int64_t *out, char *err, size_t errlen)
{
	json_object *v;

	if (!json_object_object_get_ex(o, key, &v) || !json_object_is_type(v, json_type_int))
	{
		snprintf(err, errlen, "the envelope has no integer \"%s\"", key);
		return false;
	}
	*out = json_object_get_int64(v);
	return true;
}

/* A string member as a fresh string, or NULL when absent or not a string. */
static char *
get_string(json_object *o, const char *key)
{
	json_object *v;

	if (!json_object_object_get_ex(o, key, &v) || !json_object_is_type(v, json_type_string))
		return NULL;
	return xstrndup(json_object_get_string(v), (size_t) json_object_get_string_len(v));
}

/* JSON text of a member, or NULL when it is absent or JSON null. */
static char *
get_json_text(json_object *o, const char *key)
{
	json_object *v;

	if (!json_object_object_get_ex(o, key, &v) || v == NULL)
		return NULL;
	return json_to_text(v);
}

/* See envelope.h. */
bool
envelope_parse(const char *body, size_t len, Task *task, char **payload_ref,
			   char *err, size_t errlen)
{
	json_object *doc = parse_document(body, len, err, errlen);
	json_object *v;
	int64_t		attempt;
	bool		ok = false;

	memset(task, 0, sizeof(*task));
	*payload_ref = NULL;
	if (doc == NULL)
		return false;
	if (!json_object_is_type(doc, json_type_object))
	{
		snprintf(err, errlen, "the envelope is not a JSON object");
		goto done;
	}
	if (!get_int64(doc, "run_id", &task->run_id, err, errlen) ||
		!get_int64(doc, "attempt", &attempt, err, errlen) ||
		!get_int64(doc, "fence", &task->fence, err, errlen))
		goto done;
	task->attempt = (int) attempt;
	task->stage = get_string(doc, "stage");
	if (task->stage == NULL)
	{
		snprintf(err, errlen, "the envelope has no string \"stage\"");
		goto done;
	}
	task->worker = get_string(doc, "worker");
	task->message_id = get_string(doc, "message_id");
	task->traceparent = get_string(doc, "traceparent");
	task->deadline_at = get_string(doc, "deadline_at");
	if (json_object_object_get_ex(doc, "headers", &v) && json_object_is_type(v, json_type_object))
		task->tenant = get_string(v, "tenant");
	if (json_object_object_get_ex(doc, "heartbeat_ms", &v) && json_object_is_type(v, json_type_int))
		task->heartbeat_ms = json_object_get_int(v);
	/* accept_task starts the execution deadline: it is this long from now */
	task->deadline_in_ms = -1;
	if (json_object_object_get_ex(doc, "execution_deadline_ms", &v) && json_object_is_type(v, json_type_int))
		task->deadline_in_ms = json_object_get_int64(v);

	*payload_ref = get_json_text(doc, "payload_ref");
	if (*payload_ref == NULL)
	{
		/* an absent or null inline payload is the JSON null input */
		task->input = get_json_text(doc, "payload_inline");
		if (task->input == NULL)
			task->input = xstrdup("null");
	}
	ok = true;

done:
	json_object_put(doc);
	if (!ok)
	{
		task_free(task);
		free(*payload_ref);
		*payload_ref = NULL;
	}
	return ok;
}

/* See envelope.h. */
bool
cancel_parse(const char *body, size_t len, CancelRequest *req, char *err, size_t errlen)
{
	json_object *doc = parse_document(body, len, err, errlen);
	int64_t		attempt;
	bool		ok = false;

	memset(req, 0, sizeof(*req));
	if (doc == NULL)
		return false;
	if (!json_object_is_type(doc, json_type_object))
	{
		snprintf(err, errlen, "the cancellation request is not a JSON object");
		goto done;
	}
	if (!get_int64(doc, "run_id", &req->run_id, err, errlen) ||
		!get_int64(doc, "attempt", &attempt, err, errlen) ||
		!get_int64(doc, "fence", &req->fence, err, errlen))
		goto done;
	req->attempt = (int) attempt;
	req->stage = get_string(doc, "stage");
	if (req->stage == NULL)
	{
		snprintf(err, errlen, "the cancellation request has no string \"stage\"");
		goto done;
	}
	req->reason = get_string(doc, "reason");
	ok = true;

done:
	json_object_put(doc);
	if (!ok)
		cancel_free(req);
	return ok;
}

/* Free what cancel_parse allocated. */
void
cancel_free(CancelRequest *req)
{
	free(req->stage);
	free(req->reason);
	req->stage = req->reason = NULL;
}
