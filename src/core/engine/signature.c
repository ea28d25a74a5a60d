/*
 * signature.c — the signature header of a signed callback, parsed; digests
 * compared in constant time.  See signature.h.
 */
#include "signature.h"

#include <string.h>

#include "core/base/hex.h"

/* Does item (len bytes) start with prefix? */
static int
starts_with(const char *item, size_t len, const char *prefix)
{
	size_t		n = strlen(prefix);

	return len >= n && memcmp(item, prefix, n) == 0;
}

/* One item of the header into *sig: 1, or 0 when it makes the header malformed. */
static int
parse_item(const char *item, size_t len, wfe_signature *sig)
{
	if (starts_with(item, len, "key_id="))
	{
		const char *k = item + 7;
		size_t		klen = len - 7;

		/* one key per header, named as wfe.callback_keys allows */
		if (sig->key_id[0] != '\0' || klen == 0 || klen > WFE_SIG_KEY_ID_MAX)
			return 0;
		for (size_t i = 0; i < klen; i++)
			if (k[i] == '\0' || strchr(WFE_SIG_KEY_ID_CHARS, k[i]) == NULL)
				return 0;
		memcpy(sig->key_id, k, klen);
		sig->key_id[klen] = '\0';
		return 1;
	}
	if (starts_with(item, len, "v1="))
	{
		const char *hex = item + 3;

		if (sig->n == WFE_SIG_MAX || len - 3 != 2 * WFE_SIG_DIGEST_BYTES)
			return 0;
		for (int k = 0; k < WFE_SIG_DIGEST_BYTES; k++)
		{
			int			hi = wfe_hex_value(hex[2 * k]),
						lo = wfe_hex_value(hex[2 * k + 1]);

			if (hi < 0 || lo < 0)
				return 0;
			sig->digest[sig->n][k] = (uint8_t) (hi << 4 | lo);
		}
		sig->n++;
		return 1;
	}
	/* another scheme (v2=, ...): ignored, so a gateway may send one early */
	return 1;
}

int
wfe_signature_parse(const char *header, size_t len, wfe_signature *sig)
{
	size_t		pos = 0;

	memset(sig, 0, sizeof(*sig));
	while (pos <= len)
	{
		size_t		end = pos;

		while (end < len && header[end] != ',')
			end++;
		while (pos < end && header[pos] == ' ')
			pos++;
		if (end > pos && !parse_item(header + pos, end - pos, sig))
			return 0;
		pos = end + 1;
	}
	return sig->key_id[0] != '\0' && sig->n > 0;
}

int
wfe_digest_equal(const uint8_t *a, const uint8_t *b)
{
	/* no early exit: every byte is read whatever the first difference */
	volatile uint8_t diff = 0;

	for (int k = 0; k < WFE_SIG_DIGEST_BYTES; k++)
		diff |= a[k] ^ b[k];
	return diff == 0;
}
