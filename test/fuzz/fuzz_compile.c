/*
 * fuzz_compile.c — libFuzzer harness over the definition compiler core.
 *
 * Feeds arbitrary bytes to wfe_compile() and does with the result what every
 * caller does: serialise it and, for a plan, draw its Mermaid picture.
 * AddressSanitizer, LeakSanitizer and UBSan catch memory errors, leaks and
 * undefined behaviour; the runner bounds time and memory per input.  Beyond
 * "no crash", it checks the result's invariants and that compiling is
 * deterministic.
 *
 * Build and run: make fuzz FUZZ_SECONDS=600 (make test runs it briefly).
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/sha.h>

#include "core/lang/compile.h"

int			LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* SHA-256 from OpenSSL, as in wfe-compile. */
static void
fuzz_sha256(const unsigned char *data, size_t len, unsigned char out[32])
{
	SHA256(data, len, out);
}

/* Abort (so libFuzzer keeps the input) when a promise of compile.h breaks. */
static void
require(int cond, const char *what)
{
	if (!cond)
	{
		fprintf(stderr, "fuzz_compile: broken invariant: %s\n", what);
		abort();
	}
}

/* Compile once; return the result as canonical JSON (malloc'd). */
static char *
compile_to_json(const uint8_t *data, size_t size)
{
	wfe_compile_options opts;
	wfe_compile_result *res;
	char	   *json;

	wfe_compile_options_init(&opts);
	opts.sha256 = fuzz_sha256;

	res = wfe_compile((const char *) data, size, &opts);
	require(res != NULL, "wfe_compile returned NULL");
	require(res->diagnostics != NULL, "diagnostics is NULL");
	if (res->ok)
	{
		char	   *mermaid;

		require(res->digest != NULL && strncmp(res->digest, "sha256:", 7) == 0,
				"an accepted definition has a sha256: digest");
		require(res->plan != NULL && res->plan_text != NULL,
				"an accepted definition has a plan");
		mermaid = wfe_plan_mermaid(res->plan);
		require(mermaid != NULL, "a plan has a Mermaid picture");
		free(mermaid);
	}
	else
		require(res->digest == NULL && res->plan == NULL,
				"a rejected definition has no digest and no plan");

	json = wfe_compile_result_json(res);
	require(json != NULL, "wfe_compile_result_json returned NULL");
	wfe_compile_result_free(res);
	return json;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char	   *first = compile_to_json(data, size);
	char	   *second = compile_to_json(data, size);

	require(strcmp(first, second) == 0, "compiling twice gives the same result");
	free(first);
	free(second);
	return 0;
}
