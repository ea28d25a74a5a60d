/*
 * bench_expr.c — how long one CEL expression evaluation takes (the goal in
 * issue 12 / docs/benchmarks.md: at most 5 µs), for the two seed
 * expressions and for expressions that use each costlier feature: list
 * literals with `in`, macros, string functions, conversions, timestamps,
 * regular expressions.
 *
 *	make build/bench/bench_expr && build/bench/bench_expr [ITERATIONS]
 *
 * Each expression is parsed and checked once (as the compiler does), then
 * evaluated ITERATIONS times (default 200000) through wfe_expr_eval_bool,
 * the entry point decisions use, over a 20-property context.  Prints the
 * best of 5 rounds in nanoseconds per evaluation.  Reported, never asserted.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/expr/expr.h"

static const char *ROOT_JSON =
"{\"context\": {\"amount\": 15000, \"currency\": \"EUR\", \"country\": \"DE\","
" \"customer\": {\"id\": \"c-1\", \"tier\": \"gold\", \"since\": \"2019-04-01T00:00:00Z\"},"
" \"items\": [{\"sku\": \"a\", \"qty\": 1, \"price\": 10.5}, {\"sku\": \"b\", \"qty\": 3, \"price\": 2.25},"
"   {\"sku\": \"c\", \"qty\": 2, \"price\": 99.0}, {\"sku\": \"d\", \"qty\": 1, \"price\": 5.0}],"
" \"email\": \"ann@example.com\", \"created\": \"2024-02-29T12:30:45Z\", \"priority\": 3,"
" \"flags\": [\"new\", \"vip\"], \"channel\": \"web\", \"retries\": 0, \"score\": 0.93,"
" \"notes\": null, \"approved\": false, \"region\": \"eu-west\", \"tags\": {\"a\": 1, \"b\": 2},"
" \"version\": 7, \"source\": \"api\"},"
" \"stages\": {\"cache-lookup\": {\"result\": {\"hit\": true}}}, \"run\": {\"id\": \"r-1\", \"tenant\": \"acme\"}}";

static const char *EXPRESSIONS[] = {
	"stages[\"cache-lookup\"].result.hit == true",
	"has(payload.amount) && payload.amount > 10000",
	"payload.country in [\"DE\", \"FR\", \"NL\", \"BE\", \"AT\"] && payload.currency == \"EUR\"",
	"payload.items.exists(i, i.qty > 2 && i.price < 5.0)",
	"payload.items.all(i, i.sku.size() == 1) && payload.items.map(i, i.qty).size() == 4",
	"payload.email.endsWith(\"@example.com\") && payload.customer.tier.startsWith(\"go\")",
	"timestamp(payload.created) - timestamp(payload.customer.since) > duration(\"8760h\")",
	"int(payload.score * 100.0) >= 90 && string(payload.version) == \"7\"",
	"(payload.notes == null ? 0 : size(payload.notes)) == 0 || payload.approved",
	"payload.email.matches(r\"^[a-z]+@[a-z]+\\.com$\") && payload.region.matches(\"^eu-\")",
};

/* Nanoseconds now (monotonic). */
static double
now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double) ts.tv_sec * 1e9 + (double) ts.tv_nsec;
}

int
main(int argc, char **argv)
{
	long		iterations = argc > 1 ? atol(argv[1]) : 200000;
	json_object *root = json_tokener_parse(ROOT_JSON);
	size_t		i;
	double		worst = 0;

	if (root == NULL || iterations <= 0)
		return 2;
	printf("== expr: ns per evaluation (best of 5 rounds of %ld), goal <= 5000\n", iterations);
	for (i = 0; i < sizeof(EXPRESSIONS) / sizeof(EXPRESSIONS[0]); i++)
	{
		const char *src = EXPRESSIONS[i];
		wfe_expr_error err;
		wfe_expr   *e = wfe_expr_parse(src, strlen(src), NULL, &err);
		double		best = 1e30;
		int			round;
		long		k;
		int			result = -1;

		if (e == NULL || wfe_expr_check(e, WFE_FORM_STAGES, NULL, NULL, &err) != 0)
		{
			fprintf(stderr, "%s: %s: %s\n", src, err.code, err.message);
			return 1;
		}
		for (round = 0; round < 5; round++)
		{
			double		t0 = now_ns();

			for (k = 0; k < iterations; k++)
				result = wfe_expr_eval_bool(e, root, NULL, &err);
			if ((now_ns() - t0) / (double) iterations < best)
				best = (now_ns() - t0) / (double) iterations;
		}
		if (result < 0)
		{
			fprintf(stderr, "%s: %s\n", src, err.message);
			return 1;
		}
		printf("%8.0f ns  %-5s  %s\n", best, result ? "true" : "false", src);
		if (best > worst)
			worst = best;
		wfe_expr_free(e);
	}
	printf("== expr: slowest %.0f ns (goal 5000 ns)\n", worst);
	json_object_put(root);
	return 0;
}
