/*
 * signature.h — a signed callback's signature header (operations.md
 * "Signed callbacks"): "key_id=K,v1=HEX[,v1=HEX...]", parsed, and the
 * constant-time comparison of HMAC-SHA256 digests.
 *
 * Plain C: no PostgreSQL headers (the HMAC itself is the server's,
 * signed_callback.c), so the parser of this attacker-controlled text is unit
 * tested under ASan/UBSan.
 */
#ifndef WFE_SIGNATURE_H
#define WFE_SIGNATURE_H

#include <stddef.h>
#include <stdint.h>

#define WFE_SIG_DIGEST_BYTES 32	/* HMAC-SHA256 */
#define WFE_SIG_MAX 8			/* v1= values in one header */
#define WFE_SIG_KEY_ID_MAX 64	/* what wfe.callback_keys' CHECK allows */
#define WFE_SIG_KEY_ID_CHARS \
	"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._:-"

typedef struct wfe_signature
{
	char		key_id[WFE_SIG_KEY_ID_MAX + 1];
	int			n;				/* v1= values */
	uint8_t		digest[WFE_SIG_MAX][WFE_SIG_DIGEST_BYTES];
} wfe_signature;

/*
 * Parse header (len bytes, not necessarily NUL-terminated) into *sig: 1,
 * or 0 when it is not one key_id (1-64 of WFE_SIG_KEY_ID_CHARS) and 1-8
 * v1= values of 64 hex digits.  Items are separated by commas, spaces
 * after a comma are skipped, empty items and items of other schemes
 * (v2=...) are ignored.
 */
extern int	wfe_signature_parse(const char *header, size_t len, wfe_signature *sig);

/* 1 if the two digests are equal, in time that does not depend on where they differ. */
extern int	wfe_digest_equal(const uint8_t *a, const uint8_t *b);

#endif							/* WFE_SIGNATURE_H */
