/*
 * limits.c — admission limits at the door (operations.md "Admission and
 * backpressure", sizes).
 *
 * Every value a caller hands wfe is measured before wfe builds anything
 * from it: JSON by its size and nesting depth, names (stages, queues,
 * worker ids, idempotency keys, ...) by their length and for control
 * characters, which would otherwise reach the server log and the event
 * log verbatim.  A refusal is 54000 (program_limit_exceeded) naming the
 * limit, or 22023 for a control character; nothing is written.
 *
 * The depth bound is the one binding and contract validation work within
 * (WFE_JSON_DEPTH_CEILING), so data accepted here never fails deeper in.
 */
#include "postgres.h"

#include "fmgr.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"

#include "wfe.h"

/* The depth of jb's deepest container (a scalar is 0), or limit + 1 once past limit. */
static int
jsonb_depth(Jsonb *jb, int limit)
{
	JsonbIterator *it = JsonbIteratorInit(&jb->root);
	JsonbValue	v;
	JsonbIteratorToken tok;
	int			depth = 0,
				deepest = 0;

	/* a raw scalar is stored as a one-element array: it counts as 0 */
	if (JB_ROOT_IS_SCALAR(jb))
		return 0;
	while ((tok = JsonbIteratorNext(&it, &v, false)) != WJB_DONE)
	{
		if (tok == WJB_BEGIN_ARRAY || tok == WJB_BEGIN_OBJECT)
		{
			if (++depth > deepest)
				deepest = depth;
			if (deepest > limit)
				return deepest;	/* no need to read the rest */
		}
		else if (tok == WJB_END_ARRAY || tok == WJB_END_OBJECT)
			depth--;
	}
	return deepest;
}

/* Refuse jb (named what, e.g. "the result") if it is too large or too deep; extra_depth allows for a wrapper. */
void
wfe_admit_jsonb(Jsonb *jb, const char *what, int extra_depth)
{
	Size		bytes = VARSIZE(jb);
	int			depth;

	if (bytes > (Size) wfe_max_payload_bytes)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("%s is %zu bytes, more than wfe.max_payload_bytes (%d)",
						what, bytes, wfe_max_payload_bytes),
				 errhint("Keep large data outside the run and pass a reference to it.")));
	depth = jsonb_depth(jb, wfe_max_json_depth + extra_depth);
	if (depth > wfe_max_json_depth + extra_depth)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("%s is nested more than wfe.max_json_depth (%d) levels deep",
						what, wfe_max_json_depth),
				 errhint("Flatten the data: binding and contract validation work within this depth.")));
}

/* Refuse a caller-chosen name (named what) that is too long or holds a control character. */
void
wfe_admit_name(const char *value, Size len, const char *what)
{
	if (len > (Size) wfe_max_name_bytes)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("%s is %zu bytes long, more than wfe.max_name_bytes (%d)",
						what, len, wfe_max_name_bytes),
				 errhint("Names and reasons go into the event log and the server log: keep them short, and long text outside wfe.")));
	for (Size k = 0; k < len; k++)
		if ((unsigned char) value[k] < 0x20 || value[k] == 0x7f)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("%s must not contain control characters (byte %zu is 0x%02x)",
							what, k + 1, (unsigned char) value[k]),
					 errhint("Names and reasons are written to the event log and the server log as they are: send them on one line, without escapes.")));
}

/* A text argument as a C string, after wfe_admit_name. */
char *
wfe_admitted_name(text *t, const char *what)
{
	wfe_admit_name(VARDATA_ANY(t), VARSIZE_ANY_EXHDR(t), what);
	return text_to_cstring(t);
}

PG_FUNCTION_INFO_V1(wfe_admit);
PG_FUNCTION_INFO_V1(wfe_admit_name_sql);

/* wfe._admit(value jsonb, what text): the size limits of a JSON value, for SQL callers. */
Datum
wfe_admit(PG_FUNCTION_ARGS)
{
	if (!PG_ARGISNULL(0))
		wfe_admit_jsonb(PG_GETARG_JSONB_P(0), text_to_cstring(PG_GETARG_TEXT_PP(1)), 0);
	PG_RETURN_VOID();
}

/* wfe._admit_name(value text, what text): the limits of a name, for SQL callers. */
Datum
wfe_admit_name_sql(PG_FUNCTION_ARGS)
{
	if (!PG_ARGISNULL(0))
	{
		text	   *t = PG_GETARG_TEXT_PP(0);

		wfe_admit_name(VARDATA_ANY(t), VARSIZE_ANY_EXHDR(t), text_to_cstring(PG_GETARG_TEXT_PP(1)));
	}
	PG_RETURN_VOID();
}
