/*
 * redact.c — wfe.redact_keys: the JSON keys whose values telemetry never
 * shows (operations.md "Redaction").
 *
 * The one rule lives here: wfe_redact_jsonb() replaces the value of every
 * listed key, at any depth, with the string "[redacted]".  Everything that
 * shows run data to people rather than to workers asks it: the event log
 * (a BEFORE INSERT trigger, so the stored row, the projection on the outbox
 * and every reader of wfe.events see the redacted detail), wfe.report and
 * wfe.run_spans (through wfe._redact).  What workers receive -- the run's
 * context, the stage inputs, the dispatch envelope, claim_task's rows -- is
 * the data itself and is never redacted.
 */
#include "postgres.h"

#include "commands/trigger.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/jsonb.h"
#include "utils/rel.h"
#include "utils/varlena.h"

#include "pg/wfe.h"

char	   *wfe_redact_keys = NULL;

/* The parsed list, built by the check hook as the setting's "extra". */
typedef struct redact_list
{
	int			n;				/* how many keys */
	int			len[FLEXIBLE_ARRAY_MEMBER];	/* each key's length; the keys follow, NUL-terminated */
} redact_list;

#define WFE_REDACT_MAX_KEYS 256
#define WFE_REDACT_MAX_KEY_BYTES 256
#define REDACTED "[redacted]"

static const redact_list *redacting = NULL;

/* The first key of a list (its keys follow the length array). */
static const char *
list_keys(const redact_list *l)
{
	return (const char *) &l->len[l->n];
}

/*
 * Check hook: the value must be a comma-separated list of keys (double
 * quotes around a key that holds a comma, a space or a quote), none empty
 * or longer than 256 bytes, at most 256 of them.
 */
bool
wfe_redact_keys_check(char **newval, void **extra, GucSource source)
{
	char	   *raw = pstrdup(*newval ? *newval : "");
	List	   *keys = NIL;
	ListCell   *lc;
	Size		size;
	Size		text_bytes = 0;
	redact_list *l;
	char	   *out;
	int			i = 0;

	if (!SplitGUCList(raw, ',', &keys))
	{
		GUC_check_errdetail("wfe.redact_keys must be a comma-separated list of JSON keys.");
		GUC_check_errhint("Write for example 'password, token, \"api key\"'; double-quote a key that holds a comma, space or quote.");
		return false;
	}
	if (list_length(keys) > WFE_REDACT_MAX_KEYS)
	{
		GUC_check_errdetail("wfe.redact_keys lists %d keys; at most %d are allowed.",
							list_length(keys), WFE_REDACT_MAX_KEYS);
		return false;
	}
	foreach(lc, keys)
	{
		const char *k = lfirst(lc);

		if (k[0] == '\0' || strlen(k) > WFE_REDACT_MAX_KEY_BYTES)
		{
			GUC_check_errdetail("Every key in wfe.redact_keys must be 1 to %d bytes long.",
								WFE_REDACT_MAX_KEY_BYTES);
			GUC_check_errhint("Write for example 'password, token, \"api key\"'.");
			return false;
		}
		text_bytes += strlen(k) + 1;
	}

	/* the extra must be malloc'd: the GUC machinery frees it with free() */
	size = offsetof(redact_list, len) + sizeof(int) * list_length(keys) + text_bytes;
	l = malloc(size);
	if (l == NULL)
	{
		GUC_check_errdetail("Out of memory.");
		return false;
	}
	l->n = list_length(keys);
	out = (char *) &l->len[l->n];
	foreach(lc, keys)
	{
		const char *k = lfirst(lc);

		l->len[i++] = (int) strlen(k);
		memcpy(out, k, strlen(k) + 1);
		out += strlen(k) + 1;
	}
	*extra = l;
	list_free(keys);
	pfree(raw);
	return true;
}

/* Assign hook: the parsed list becomes the one in force. */
void
wfe_redact_keys_assign(const char *newval, void *extra)
{
	redacting = (const redact_list *) extra;
}

/* Is this object key one whose value is redacted? */
static bool
redacted_key(const char *key, int len)
{
	const char *k = list_keys(redacting);

	for (int i = 0; i < redacting->n; k += redacting->len[i] + 1, i++)
		if (redacting->len[i] == len && memcmp(k, key, len) == 0)
			return true;
	return false;
}

/*
 * The document with every listed key's value, at any depth, replaced by
 * "[redacted]"; the document itself when no key is listed or none occurs.
 */
Jsonb *
wfe_redact_jsonb(Jsonb *jb)
{
	JsonbIterator *it;
	JsonbParseState *state = NULL;
	JsonbValue	v;
	JsonbValue *res = NULL;
	JsonbIteratorToken tok;
	bool		changed = false;

	if (redacting == NULL || redacting->n == 0 || JB_ROOT_IS_SCALAR(jb))
		return jb;
	it = JsonbIteratorInit(&jb->root);
	while ((tok = JsonbIteratorNext(&it, &v, false)) != WJB_DONE)
	{
		if (tok == WJB_KEY && redacted_key(v.val.string.val, v.val.string.len))
		{
			JsonbValue	r;

			pushJsonbValue(&state, WJB_KEY, &v);
			/* skipNested: an object or array value is passed over whole */
			tok = JsonbIteratorNext(&it, &v, true);
			Assert(tok == WJB_VALUE);
			r.type = jbvString;
			r.val.string.val = REDACTED;
			r.val.string.len = strlen(REDACTED);
			pushJsonbValue(&state, WJB_VALUE, &r);
			changed = true;
		}
		else if (tok == WJB_KEY || tok == WJB_VALUE || tok == WJB_ELEM)
			pushJsonbValue(&state, tok, &v);
		else
			res = pushJsonbValue(&state, tok, NULL);
	}
	return changed ? JsonbValueToJsonb(res) : jb;
}

PG_FUNCTION_INFO_V1(wfe_redact_sql);
PG_FUNCTION_INFO_V1(wfe_redact_trigger);

/* wfe._redact(jsonb) RETURNS jsonb (STRICT): wfe_redact_jsonb for SQL. */
Datum
wfe_redact_sql(PG_FUNCTION_ARGS)
{
	PG_RETURN_JSONB_P(wfe_redact_jsonb(PG_GETARG_JSONB_P(0)));
}

/*
 * BEFORE INSERT row trigger: redacts the jsonb column named by the
 * trigger's argument.  In C, so it needs no EXECUTE privilege of whoever
 * writes the row, and costs one comparison while no key is listed.
 */
Datum
wfe_redact_trigger(PG_FUNCTION_ARGS)
{
	TriggerData *td = (TriggerData *) fcinfo->context;
	HeapTuple	tuple;
	int			col;
	bool		isnull;
	Datum		value;
	Jsonb	   *before;
	Jsonb	   *after;
	Datum		replacement[1];
	bool		replnull[1] = {false};

	if (!CALLED_AS_TRIGGER(fcinfo) || !TRIGGER_FIRED_BEFORE(td->tg_event) ||
		!TRIGGER_FIRED_FOR_ROW(td->tg_event) || !TRIGGER_FIRED_BY_INSERT(td->tg_event) ||
		td->tg_trigger->tgnargs != 1)
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("wfe._redact_trigger must be a BEFORE INSERT row trigger with a column name")));
	tuple = td->tg_trigtuple;
	if (redacting == NULL || redacting->n == 0)
		return PointerGetDatum(tuple);
	col = SPI_fnumber(td->tg_relation->rd_att, td->tg_trigger->tgargs[0]);
	if (col <= 0)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_COLUMN),
				 errmsg("wfe._redact_trigger: no column \"%s\"", td->tg_trigger->tgargs[0])));
	value = heap_getattr(tuple, col, td->tg_relation->rd_att, &isnull);
	if (isnull)
		return PointerGetDatum(tuple);
	before = DatumGetJsonbP(value);
	after = wfe_redact_jsonb(before);
	if (after == before)
		return PointerGetDatum(tuple);
	replacement[0] = JsonbPGetDatum(after);
	return PointerGetDatum(heap_modify_tuple_by_cols(tuple, td->tg_relation->rd_att,
													 1, &col, replacement, replnull));
}
