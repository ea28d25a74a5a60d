/*
 * test_signature.c — unit tests of the signature header parser and the
 * digest comparison (src/core/engine/signature.c), the attacker-controlled part
 * of wfe.callback that is plain C.
 *
 * A standalone TAP program: "ok N - ..." / "not ok N - ...", then "1..N";
 * exit status 1 if anything failed.  Built with ASan/UBSan by the Makefile.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/engine/signature.h"

#define HEX_A "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff"
#define HEX_B "FFEEDDCCBBAA99887766554433221100ffeeddccbbaa99887766554433221100"

#include "tap.h"

/* Parse a NUL-terminated header; copy it to the heap first, exactly len bytes, so ASan sees any overread. */
static int
parse(const char *header, wfe_signature *sig)
{
	size_t		len = strlen(header);
	char	   *copy = malloc(len > 0 ? len : 1);
	int			r;

	memcpy(copy, header, len);
	r = wfe_signature_parse(copy, len, sig);
	free(copy);
	return r;
}

/* The header is refused. */
static void
malformed(const char *header, const char *why)
{
	wfe_signature sig;

	ok(parse(header, &sig) == 0, "malformed: %s", why);
}

int
main(void)
{
	wfe_signature sig;
	uint8_t		a[WFE_SIG_DIGEST_BYTES],
				b[WFE_SIG_DIGEST_BYTES];
	char		buf[2048];

	/* well-formed */
	ok(parse("key_id=gw1,v1=" HEX_A, &sig) == 1, "one key, one v1");
	ok(strcmp(sig.key_id, "gw1") == 0 && sig.n == 1, "key_id gw1, one digest");
	ok(sig.digest[0][0] == 0x00 && sig.digest[0][1] == 0x11 && sig.digest[0][31] == 0xff,
	   "the digest is the hex decoded");
	ok(parse("key_id=gw.1:a_b-c,v1=" HEX_A ", v1=" HEX_B, &sig) == 1 && sig.n == 2,
	   "two v1 values, a space after the comma, every key_id character class");
	ok(sig.digest[1][0] == 0xff && sig.digest[1][31] == 0x00, "upper-case hex decodes");
	ok(parse("v1=" HEX_A ",key_id=gw1", &sig) == 1 && strcmp(sig.key_id, "gw1") == 0,
	   "the key_id may come after the v1");
	ok(parse("key_id=gw1,v2=whatever,v1=" HEX_A ",t=1", &sig) == 1 && sig.n == 1,
	   "items of other schemes are ignored");
	ok(parse("key_id=gw1,,v1=" HEX_A ",", &sig) == 1, "empty items are ignored");
	strcpy(buf, "key_id=gw1");
	for (int k = 0; k < WFE_SIG_MAX; k++)
		strcat(buf, ",v1=" HEX_A);
	ok(parse(buf, &sig) == 1 && sig.n == WFE_SIG_MAX, "%d v1 values", WFE_SIG_MAX);
	strcpy(buf, "key_id=");
	for (int k = 0; k < WFE_SIG_KEY_ID_MAX; k++)
		strcat(buf, "k");
	strcat(buf, ",v1=" HEX_A);
	ok(parse(buf, &sig) == 1 && strlen(sig.key_id) == WFE_SIG_KEY_ID_MAX, "a key_id of %d bytes",
	   WFE_SIG_KEY_ID_MAX);

	/* malformed */
	malformed("", "empty");
	malformed(",,,", "only commas");
	malformed("key_id=gw1", "no v1");
	malformed("v1=" HEX_A, "no key_id");
	malformed("key_id=,v1=" HEX_A, "an empty key_id");
	malformed("key_id=gw1,key_id=gw2,v1=" HEX_A, "two key_ids");
	malformed("key_id=g w,v1=" HEX_A, "a space in the key_id");
	malformed("key_id=g=w,v1=" HEX_A, "an = in the key_id");
	malformed("key_id=gw\n1,v1=" HEX_A, "a newline in the key_id");
	malformed("key_id=gw1,v1=" HEX_A "0", "65 hex digits");
	malformed("key_id=gw1,v1=" "0011", "4 hex digits");
	malformed("key_id=gw1,v1=", "an empty v1");
	malformed("key_id=gw1,v1=g0112233445566778899aabbccddeeff00112233445566778899aabbccddeeff",
			  "a non-hex digit first");
	malformed("key_id=gw1,v1=00112233445566778899aabbccddeeff00112233445566778899aabbccddeefz",
			  "a non-hex digit last");
	malformed("key_id=gw1,v1= " HEX_A, "a space inside the v1");
	strcpy(buf, "key_id=gw1");
	for (int k = 0; k <= WFE_SIG_MAX; k++)
		strcat(buf, ",v1=" HEX_A);
	malformed(buf, "more than 8 v1 values");
	strcpy(buf, "key_id=");
	for (int k = 0; k <= WFE_SIG_KEY_ID_MAX; k++)
		strcat(buf, "k");
	strcat(buf, ",v1=" HEX_A);
	malformed(buf, "a key_id over 64 bytes");
	{
		/* a NUL inside the given length is not part of a key_id */
		const char raw[] = "key_id=gw\0001,v1=" HEX_A;

		ok(wfe_signature_parse(raw, sizeof(raw) - 1, &sig) == 0, "malformed: a NUL in the key_id");
	}

	/* the length is respected: a header cut short of its v1 is refused */
	{
		const char *h = "key_id=gw1,v1=" HEX_A;

		ok(wfe_signature_parse(h, strlen(h) - 1, &sig) == 0, "a header cut one byte short is refused");
		ok(wfe_signature_parse(h, strlen(h), &sig) == 1, "the same header whole is accepted");
	}

	/* digests */
	for (int k = 0; k < WFE_SIG_DIGEST_BYTES; k++)
		a[k] = b[k] = (uint8_t) (k * 7);
	ok(wfe_digest_equal(a, b) == 1, "equal digests are equal");
	b[0] ^= 1;
	ok(wfe_digest_equal(a, b) == 0, "digests differing in the first byte differ");
	b[0] ^= 1;
	b[WFE_SIG_DIGEST_BYTES - 1] ^= 0x80;
	ok(wfe_digest_equal(a, b) == 0, "digests differing in the last bit differ");

	return tap_done();
}
