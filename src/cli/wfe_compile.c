/*
 * wfe_compile.c — the wfe-compile command: the database's compiler, offline.
 *
 *   wfe-compile FILE.yaml [--plan | --digest | --mermaid | --json] [--contracts FILE]
 *               [--max-definition-bytes N] [--max-stages N] [--max-fanout N]
 *               [--max-expression-bytes N]
 *
 * Prints exactly the diagnostics, plan and digest the database would, so a
 * release pipeline can lint definitions before they reach a server.  Exit
 * status: 0 valid, 1 invalid, 2 usage or I/O error.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <json-c/json.h>
#include <openssl/evp.h>

#include "core/lang/compile.h"

typedef enum output_mode
{
	OUT_SUMMARY,
	OUT_PLAN,
	OUT_DIGEST,
	OUT_MERMAID,
	OUT_JSON
} output_mode;

/* SHA-256 from libcrypto: the same bytes PostgreSQL's cryptohash gives. */
static void
sha256_openssl(const unsigned char *data, size_t len, unsigned char out[32])
{
	unsigned int n = 32;

	if (!EVP_Digest(data, len, out, &n, EVP_sha256(), NULL))
	{
		fprintf(stderr, "wfe-compile: SHA-256 failed\n");
		exit(2);
	}
}

/* Read a whole file ("-" is stdin); NULL with errno on failure. */
static char *
read_all(const char *path, size_t *len)
{
	FILE	   *f = strcmp(path, "-") == 0 ? stdin : fopen(path, "rb");
	char	   *buf = NULL;
	size_t		cap = 0;

	*len = 0;
	if (f == NULL)
		return NULL;
	for (;;)
	{
		size_t		got;

		if (*len + 65536 + 1 > cap)
		{
			cap = cap ? cap * 2 : 65536 * 2;
			buf = realloc(buf, cap);
			if (buf == NULL)
				abort();
		}
		got = fread(buf + *len, 1, cap - *len - 1, f);
		*len += got;
		if (got == 0)
			break;
	}
	if (ferror(f))
	{
		free(buf);
		buf = NULL;
	}
	else
		buf[*len] = '\0';
	if (f != stdin)
		fclose(f);
	return buf;
}

/*
 * Is argv[*i] one of the --max-* options?  Then consume its value into *n
 * (-1 when missing or not a number) and leave *i on the value.
 */
static int
limit_option(int argc, char **argv, int *i, long *n)
{
	static const char *const names[] = {
		"--max-definition-bytes", "--max-stages", "--max-fanout", "--max-expression-bytes", NULL
	};
	char	   *end;

	for (int k = 0; names[k]; k++)
		if (strcmp(argv[*i], names[k]) == 0)
		{
			*n = -1;
			if (*i + 1 < argc)
			{
				*n = strtol(argv[*i + 1], &end, 10);
				if (*end != '\0' || *n > 1000000000L)
					*n = -1;
			}
			(*i)++;
			return 1;
		}
	return 0;
}

/* The range the server accepts for the setting behind a --max-* option. */
static void
limit_range(const char *option, long *lo, long *hi)
{
	if (strcmp(option, "--max-definition-bytes") == 0)
		*lo = 1024, *hi = 64L * 1024 * 1024;
	else if (strcmp(option, "--max-stages") == 0)
		*lo = 1, *hi = 10000;
	else if (strcmp(option, "--max-fanout") == 0)
		*lo = 2, *hi = 1024;
	else
		*lo = 16, *hi = 65536;	/* --max-expression-bytes */
}

static void
usage(FILE *to)
{
	fprintf(to,
			"Usage: wfe-compile FILE.yaml [--plan | --digest | --mermaid | --json] [--contracts FILE]\n"
			"\n"
			"Compile a wfe workflow definition as the database would.\n"
			"\n"
			"  (no option)       print the digest, or the diagnostics on stderr\n"
			"  --plan            print the canonical plan JSON\n"
			"  --digest          print the plan digest (sha256:...)\n"
			"  --mermaid         print the plan as a Mermaid flowchart\n"
			"  --json            print {ok, digest, plan, diagnostics} as wfe.compile() returns it\n"
			"  --contracts FILE  check contracts against FILE, a JSON list of\n"
			"                    {ref, kind, queue, handler, input_schema, output_schema}\n"
			"  --max-definition-bytes N, --max-stages N, --max-fanout N,\n"
			"  --max-expression-bytes N\n"
			"                    the server's wfe.max_* settings, when not the defaults\n"
			"                    (1048576, 500, 64, 4096)\n"
			"  FILE may be - for standard input.\n"
			"\n"
			"Exit status: 0 valid, 1 invalid, 2 usage or I/O error.\n");
}

/* Print diagnostics as FILE:LINE:COLUMN: error: MESSAGE [CODE] [PATH]. */
static void
print_diagnostics(const char *file, json_object *diags)
{
	for (size_t i = 0; i < json_object_array_length(diags); i++)
	{
		json_object *d = json_object_array_get_idx(diags, i);

		fprintf(stderr, "%s:%d:%d: %s: %s [%s] at %s\n", file,
				json_object_get_int(json_object_object_get(d, "line")),
				json_object_get_int(json_object_object_get(d, "column")),
				json_object_get_string(json_object_object_get(d, "severity")),
				json_object_get_string(json_object_object_get(d, "message")),
				json_object_get_string(json_object_object_get(d, "code")),
				*json_object_get_string(json_object_object_get(d, "path"))
				? json_object_get_string(json_object_object_get(d, "path")) : "/");
	}
}

int
main(int argc, char **argv)
{
	const char *file = NULL,
			   *contracts_file = NULL;
	output_mode mode = OUT_SUMMARY;
	wfe_compile_options opts;
	wfe_compile_result *res;
	json_object *contracts = NULL;
	char	   *source;
	size_t		len;
	int			status;

	wfe_compile_options_init(&opts);
	for (int i = 1; i < argc; i++)
	{
		long		n;

		if (limit_option(argc, argv, &i, &n))
		{
			long		lo,
						hi;

			/* the ranges of the server's wfe.max_* settings */
			limit_range(argv[i - 1], &lo, &hi);
			if (n < lo || n > hi)
			{
				fprintf(stderr, "wfe-compile: %s takes a number from %ld to %ld\n",
						argv[i - 1], lo, hi);
				return 2;
			}
			if (strcmp(argv[i - 1], "--max-definition-bytes") == 0)
				opts.max_definition_bytes = (size_t) n;
			else if (strcmp(argv[i - 1], "--max-stages") == 0)
				opts.max_stages = (int) n;
			else if (strcmp(argv[i - 1], "--max-fanout") == 0)
				opts.max_fanout = (int) n;
			else
				opts.max_expression_bytes = (size_t) n;
		}
		else if (strcmp(argv[i], "--plan") == 0)
			mode = OUT_PLAN;
		else if (strcmp(argv[i], "--digest") == 0)
			mode = OUT_DIGEST;
		else if (strcmp(argv[i], "--mermaid") == 0)
			mode = OUT_MERMAID;
		else if (strcmp(argv[i], "--json") == 0)
			mode = OUT_JSON;
		else if (strcmp(argv[i], "--contracts") == 0 && i + 1 < argc)
			contracts_file = argv[++i];
		else if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0)
		{
			usage(stdout);
			return 0;
		}
		else if (argv[i][0] == '-' && argv[i][1] != '\0')
		{
			fprintf(stderr, "wfe-compile: unknown option %s\n", argv[i]);
			usage(stderr);
			return 2;
		}
		else if (file == NULL)
			file = argv[i];
		else
		{
			fprintf(stderr, "wfe-compile: one file at a time\n");
			return 2;
		}
	}
	if (file == NULL)
	{
		usage(stderr);
		return 2;
	}

	opts.sha256 = sha256_openssl;
	if (contracts_file)
	{
		contracts = json_object_from_file(contracts_file);
		if (contracts == NULL || !json_object_is_type(contracts, json_type_array))
		{
			fprintf(stderr, "wfe-compile: %s is not a JSON list of contracts\n", contracts_file);
			json_object_put(contracts);
			return 2;
		}
		opts.contracts = contracts;
	}

	source = read_all(file, &len);
	if (source == NULL)
	{
		fprintf(stderr, "wfe-compile: cannot read %s: %s\n", file, strerror(errno));
		json_object_put(contracts);
		return 2;
	}

	res = wfe_compile(source, len, &opts);
	status = res->ok ? 0 : 1;
	if (mode == OUT_JSON)
	{
		char	   *text = wfe_compile_result_json(res);

		printf("%s\n", text);
		free(text);
	}
	else if (!res->ok)
		print_diagnostics(file, res->diagnostics);
	else if (mode == OUT_PLAN)
		printf("%s\n", res->plan_text);
	else if (mode == OUT_MERMAID)
	{
		char	   *chart = wfe_plan_mermaid(res->plan);

		fputs(chart, stdout);
		free(chart);
	}
	else
		printf("%s\n", res->digest);

	wfe_compile_result_free(res);
	json_object_put(contracts);
	free(source);
	return status;
}
