/*
 * cache.c — the result cache's server side (docs: dsl.md "Result cache").
 *
 * The step core decides what a release does with the cache (core/engine/step.c,
 * "The result cache"); this file computes keys, reads and writes
 * wfe.cache_entries, finds the attempt in flight under a key and wakes the
 * stages that wait on it.
 *
 * One key at a time.  A release's read of a key and the end of an attempt
 * run under it both take a transaction lock on the key first (a wfe lock,
 * locks.c, which no login can take or hold) and
 * read in statements of their own after it, so each sees what the lock's
 * previous holder committed.  Hence a release sees either the stored entry
 * or the attempt still in flight (and waits on it rather than running the
 * same work again), and an attempt's end sees every stage that committed
 * to wait on it: no waiter is lost.  The lock is taken after the run's
 * lock, never before one.
 */
#include "postgres.h"

#include "executor/spi.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"

#include "core/engine/cachekey.h"
#include "core/lang/compile.h"
#include "core/engine/step.h"
#include "spi_stmt.h"
#include "bgw/bgw.h"
#include "wfe.h"

/* expired is a clean miss: it is not read at all */
static stmt q_entry = STMT(
	"SELECT e.result::text, e.result_digest,"
	"       pg_catalog.json_build_object('run_id', e.run_id, 'stage', e.stage, 'attempt', e.attempt,"
	"                                    'created_at', e.created_at, 'expires_at', e.expires_at)::text"
	"  FROM wfe.cache_entries AS e"
	" WHERE e.key = $1 AND e.tenant = $2 AND e.expires_at > pg_catalog.now()", 2, TX, TX);
static stmt q_leader = STMT(
	"SELECT pg_catalog.json_build_object('run_id', st.run_id, 'stage', st.stage, 'attempt', st.attempt)::text"
	"  FROM wfe.run_stages AS st"
	" WHERE st.cache_key = $1 AND st.tenant = $2 AND st.run_id <> $3"
	"   AND st.state IN ('queued', 'dispatched', 'running', 'retry_scheduled')"
	" LIMIT 1", 3, TX, TX, I8);
static stmt q_store = STMT(
	"INSERT INTO wfe.cache_entries AS e"
	"       (key, tenant, contract, result, result_digest, run_id, stage, attempt, created_at, expires_at)"
	" VALUES ($1, $2, $3, $4::jsonb, $5, $6, $7, $8, pg_catalog.now(),"
	"         pg_catalog.now() + pg_catalog.make_interval(secs => $9 / 1000.0))"
	" ON CONFLICT (key) DO UPDATE"
	"   SET tenant = excluded.tenant, contract = excluded.contract, result = excluded.result,"
	"       result_digest = excluded.result_digest, run_id = excluded.run_id, stage = excluded.stage,"
	"       attempt = excluded.attempt, created_at = excluded.created_at, expires_at = excluded.expires_at",
	9, TX, TX, TX, TX, TX, I8, TX, I4, I8);
/* each waiter's own step goes on, in its own transaction (the worker fires the timer) */
static stmt q_wake = STMT(
	"INSERT INTO wfe.timers (tenant, run_id, stage, attempt, fence, kind, due_at)"
	" SELECT st.tenant, st.run_id, st.stage, NULL, st.fence, 'cache_ready', pg_catalog.now()"
	"   FROM wfe.run_stages AS st"
	"  WHERE st.cache_key = $1 AND st.state = 'waiting' AND NOT (st.run_id = $2 AND st.stage = $3)",
	3, TX, I8, TX);

/* "sha256:" and the lowercase hex SHA-256 of len bytes of data (palloc'd). */
static char *
sha256_text(const char *data, size_t len)
{
	unsigned char d[32];
	char	   *out = palloc(72);

	wfe_sha256((const unsigned char *) data, len, d);
	wfe_digest_text(d, out);
	return out;
}

/* The digest of a JSON text: of its canonical form, so the storage's spelling does not matter. */
static char *
json_digest(const char *json)
{
	struct json_object *o = wfe_json_parse(json);
	char	   *canon = o ? wfe_canonical_json(o) : NULL;
	char	   *digest;

	wfe_json_free(o);
	if (canon == NULL)
		return NULL;
	digest = sha256_text(canon, strlen(canon));
	free(canon);
	return digest;
}

/* A contract's schemas digest: of the canonical JSON of {"input": IN, "output": OUT}. */
char *
wfe_cache_schemas_digest(const char *in, const char *out)
{
	char	   *both = psprintf("{\"input\": %s, \"output\": %s}", in ? in : "{}", out ? out : "{}");

	return json_digest(both);
}

/* Take key's lock (a wfe lock, which no login can take: locks.c); it is this transaction's until commit. */
static void
lock_key(const char *key)
{
	(void) wfe_lock("wfe.cache", key, false);
}

/*
 * The key of a cached stage's bound input (cachekey.h; the contract's
 * implementation and schemas digest come with engine.c's contract cache),
 * its lock, and its unexpired entry, if any, with whether the stored
 * result still matches its stored digest.
 */
void
wfe_cache_lookup(const char *tenant, const char *contract, const char *implementation,
				 const char *schemas, const char *input, struct wfe_cache_entry *e)
{
	char	   *material;
	Datum		v[2];

	if (implementation == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("contract \"%s\" of a cached stage is not registered", contract)));
	material = wfe_cache_key_material(tenant, contract, implementation, schemas, input);
	if (material == NULL)
		elog(ERROR, "wfe: the bound input of a cached stage is not JSON");
	e->key = sha256_text(material, strlen(material));
	free(material);
	lock_key(e->key);
	v[0] = CStringGetTextDatum(e->key);
	v[1] = CStringGetTextDatum(tenant);
	stmt_run(&q_entry, v, NULL);
	e->found = SPI_processed == 1;
	if (e->found)
	{
		char	   *digest;

		e->result = stmt_col(1);
		e->origin = stmt_col(3);
		digest = json_digest(e->result);
		e->digest_ok = digest != NULL && strcmp(digest, stmt_col(2)) == 0;
	}
}

/*
 * The attempt of another run than run_id in flight under key, as JSON
 * {run_id, stage, attempt}, or NULL.  (The step core answers for its own
 * run: these rows are as they were before its step.)
 */
const char *
wfe_cache_leader(const char *tenant, const char *key, int64 run_id)
{
	Datum		v[3] = {CStringGetTextDatum(key), CStringGetTextDatum(tenant), Int64GetDatum(run_id)};

	stmt_run(&q_leader, v, NULL);
	return SPI_processed == 1 ? stmt_col(1) : NULL;
}

/* Store an accepted result under key for ttl_ms (its attempt's origin beside it). */
void
wfe_cache_store(const char *tenant, const char *key, const char *contract, int64 ttl_ms,
				int64 run_id, const char *stage, int attempt, const char *result)
{
	char	   *digest = json_digest(result);
	Datum		v[9];

	if (digest == NULL)
		elog(ERROR, "wfe: an accepted result is not JSON");
	lock_key(key);
	v[0] = CStringGetTextDatum(key);
	v[1] = CStringGetTextDatum(tenant);
	v[2] = CStringGetTextDatum(contract);
	v[3] = CStringGetTextDatum(result);
	v[4] = CStringGetTextDatum(digest);
	v[5] = Int64GetDatum(run_id);
	v[6] = CStringGetTextDatum(stage);
	v[7] = Int32GetDatum(attempt);
	v[8] = Int64GetDatum(ttl_ms);
	stmt_run(&q_store, v, NULL);
}

/* The attempt (run_id, stage) ran under key is over: a cache_ready timer for each waiter. */
void
wfe_cache_wake(const char *key, int64 run_id, const char *stage)
{
	Datum		v[3] = {CStringGetTextDatum(key), Int64GetDatum(run_id), CStringGetTextDatum(stage)};

	lock_key(key);
	stmt_run(&q_wake, v, NULL);
	if (SPI_processed > 0)
		wfe_wake_at(GetCurrentTimestamp());
}
