/*
 * cachekey.h — the result cache's key material (dsl.md "Result cache").
 *
 * The key of a cached stage's result is "sha256:" and the lowercase hex
 * SHA-256 of these bytes: the canonical JSON (sorted keys, no white space,
 * shortest numbers) of
 *
 *   {"contract": REF, "implementation": IMPL, "input": INPUT,
 *    "schemas": SCHEMAS_DIGEST, "tenant": TENANT, "v": 1}
 *
 * Plain C: the digest itself is the server's (PostgreSQL's cryptohash), so
 * what goes into a key is unit tested without a server.
 */
#ifndef WFE_CACHEKEY_H
#define WFE_CACHEKEY_H

/* Version of the key material; a change of meaning bumps it. */
#define WFE_CACHE_KEY_VERSION 1

/*
 * The key material (malloc'd canonical JSON), or NULL when input is not
 * JSON.  Every argument but input is a plain string (NULL: JSON null).
 */
extern char *wfe_cache_key_material(const char *tenant, const char *contract,
									const char *implementation, const char *schemas_digest,
									const char *input_json);

#endif							/* WFE_CACHEKEY_H */
