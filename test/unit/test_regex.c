/*
 * test_regex.c — unit tests of the linear-time regex engine (src/core/jsonschema/regex*.c).
 *
 * A standalone TAP program, run under ASan/UBSan: every case compiles a
 * pattern, searches subjects, and frees it.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/jsonschema/regex.h"
#include "tap.h"


/* Search outcome of pattern over subject (-2: the pattern did not compile). */
static int
search(const char *pat, const char *subj)
{
	char		err[256];
	wfe_regex  *re = wfe_regex_compile(pat, strlen(pat), err, sizeof(err));
	int			rc;

	if (!re)
	{
		printf("# compile /%s/: %s\n", pat, err);
		return -2;
	}
	rc = wfe_regex_search(re, subj, strlen(subj), NULL);
	wfe_regex_free(re);
	return rc;
}

typedef struct
{
	const char *pat;
	const char *subj;
	int			want;
} match_case;

static const match_case MATCHES[] = {
	/* literals, unanchored search */
	{"abc", "abc", 1}, {"abc", "xxabcxx", 1}, {"abc", "ab", 0}, {"", "", 1}, {"", "x", 1},
	/* anchors */
	{"^abc$", "abc", 1}, {"^abc$", "abcd", 0}, {"^abc", "xabc", 0}, {"abc$", "abcx", 0},
	{"^$", "", 1}, {"^$", "a", 0}, {"a|^b", "cb", 0}, {"a|^b", "bc", 1},
	{"^a|b$", "xb", 1}, {"^a|b$", "bx", 0},
	/* dot */
	{"^.$", "x", 1}, {"^.$", "\n", 0}, {"^.$", "\r", 0}, {"^.$", "\xe2\x80\xa8", 0},
	{"^.$", "\xc3\xa9", 1}, {"^..$", "\xc3\xa9", 0}, {"^.$", "\xf0\x9f\x98\x80", 1},
	/* classes */
	{"^[abc]+$", "abcabc", 1}, {"^[abc]+$", "abd", 0}, {"^[a-z0-9]+$", "az09", 1},
	{"^[^a-z]$", "A", 1}, {"^[^a-z]$", "q", 0}, {"^[-a]$", "-", 1}, {"^[a-]$", "-", 1},
	{"^[]$", "a", 0}, {"^[^]$", "\n", 1}, {"^[\\]]$", "]", 1}, {"^[\\d-]$", "-", 1},
	{"^[\\d-z]$", "z", 1}, {"^[\\d-z]$", "y", 0}, {"^[\\D]$", "a", 1}, {"^[\\D]$", "5", 0},
	{"^[\\W\\d]$", "5", 1}, {"^[\\W\\d]$", "a", 0}, {"^[\\b]$", "\b", 1},
	{"^[\xc3\xa0-\xc3\xbf]$", "\xc3\xa9", 1}, {"^[\xc3\xa0-\xc3\xbf]$", "e", 0},
	/* escapes */
	{"^\\d+$", "0123456789", 1}, {"^\\d$", "a", 0}, {"^\\D$", "a", 1}, {"^\\D$", "1", 0},
	{"^\\w+$", "a_Z9", 1}, {"^\\w$", "-", 0}, {"^\\W$", "-", 1}, {"^\\w$", "\xc3\xa9", 0},
	{"^\\s$", " ", 1}, {"^\\s$", "\t", 1}, {"^\\s$", "\xc2\xa0", 1}, {"^\\s$", "\xef\xbb\xbf", 1},
	{"^\\s$", "\xe2\x80\x83", 1}, {"^\\s$", "x", 0}, {"^\\S$", "x", 1}, {"^\\S$", " ", 0},
	{"^\\t\\n\\r\\v\\f$", "\t\n\r\v\f", 1}, {"^\\x41\\u0042\\u{43}$", "ABC", 1},
	{"^\\ud83d\\ude00$", "\xf0\x9f\x98\x80", 1}, {"^\\cJ$", "\n", 1}, {"^\\.$", ".", 1},
	{"^\\.$", "a", 0}, {"^\\/\\-\\*$", "/-*", 1}, {"^a\\0b$", "a", 0},
	{"^\\xZ$", "xZ", 1}, {"^\\u$", "u", 1}, {"^\\k$", "k", 1},
	/* word boundaries */
	{"\\bfoo\\b", "a foo b", 1}, {"\\bfoo\\b", "afoob", 0}, {"\\Boo\\B", "foob", 1},
	{"\\Boo\\B", "oo", 0}, {"^\\b$", "", 0}, {"^\\B$", "", 1},
	/* groups and alternation */
	{"^(ab)+$", "ababab", 1}, {"^(ab)+$", "aba", 0}, {"^(?:a|bc)*$", "abcbca", 1},
	{"^(?:a|bc)*$", "abcb", 0}, {"^(?<year>\\d{4})-(?<m>\\d\\d)$", "2024-05", 1},
	{"^(a|b|c|)$", "", 1}, {"^(|a)$", "a", 1}, {"^(a(b(c)))$", "abc", 1},
	{"cat|dog", "hotdog", 1}, {"cat|dog", "cow", 0}, {"^()$", "", 1},
	/* quantifiers */
	{"^a?$", "", 1}, {"^a?$", "a", 1}, {"^a?$", "aa", 0}, {"^a*$", "aaaa", 1},
	{"^a+$", "", 0}, {"^a{3}$", "aaa", 1}, {"^a{3}$", "aa", 0}, {"^a{3}$", "aaaa", 0},
	{"^a{2,}$", "a", 0}, {"^a{2,}$", "aaaaa", 1}, {"^a{2,4}$", "aaaa", 1},
	{"^a{2,4}$", "aaaaa", 0}, {"^a{0}$", "", 1}, {"^a{0,1}b$", "b", 1},
	{"^a*?b$", "aab", 1}, {"^a+?$", "aa", 1}, {"^a??$", "a", 1}, {"^a{1,2}?$", "aa", 1},
	{"^(a*)*$", "aaa", 1}, {"^(a*)*b$", "aaa", 0}, {"^(a|a?)+$", "aaaa", 1},
	{"^x{1,3}y{2}$", "xxyy", 1},
	/* braces that are not quantifiers are literals (Annex B) */
	{"^a{$", "a{", 1}, {"^a{,2}$", "a{,2}", 1}, {"^{}$", "{}", 1}, {"^a}$", "a}", 1},
	{"^]$", "]", 1},
	/* UTF-8 literals, and invalid UTF-8 in the subject */
	{"^h\xc3\xa9llo$", "h\xc3\xa9llo", 1}, {"^\xe6\x97\xa5+$", "\xe6\x97\xa5\xe6\x97\xa5", 1},
	{"^.$", "\xff", 1}, {"^a$", "\xc3", 0}, {"^[^a]$", "\xc3", 1},
	/* JSON-Schema-ish patterns */
	{"^[A-Z]{2}$", "DE", 1}, {"^[A-Z]{2}$", "Deu", 0},
	{"^[a-z0-9._%+-]+@[a-z0-9.-]+\\.[a-z]{2,}$", "ann.b+x@example.org", 1},
	{"^[a-z0-9._%+-]+@[a-z0-9.-]+\\.[a-z]{2,}$", "ann@example", 0},
	{"^(\\([0-9]{3}\\))?[0-9]{3}-[0-9]{4}$", "(888)555-1212", 1},
	{"^(\\([0-9]{3}\\))?[0-9]{3}-[0-9]{4}$", "(888)555-1212 ext. 532", 0},
	{"^[0-9]{4}-[0-9]{2}-[0-9]{2}T", "2024-01-31T10:00:00Z", 1},
	{"a+", "xxaxx", 1}, {"^\\p$", "p", 1},
	/* Unicode properties: general categories, short and long names */
	{"^\\p{L}+$", "h\xc3\xa9llo\xce\xb1\xe6\x97\xa5", 1}, {"^\\p{L}$", "1", 0},
	{"^\\p{Letter}+$", "\xd0\x96x", 1}, {"^\\p{Lu}$", "A", 1}, {"^\\p{Lu}$", "a", 0},
	{"^\\p{Ll}$", "\xc3\xa9", 1}, {"^\\p{Lt}$", "\xc7\x85", 1}, {"^\\p{Lm}$", "\xca\xb0", 1},
	{"^\\p{Lo}$", "\xe6\x97\xa5", 1}, {"^\\p{Lo}$", "a", 0},
	{"^\\p{Uppercase_Letter}$", "\xce\x91", 1}, {"^\\p{LC}$", "\xc7\x85", 1},
	{"^\\p{M}$", "\xcc\x81", 1}, {"^\\p{Mn}$", "\xcc\x81", 1}, {"^\\p{Mc}$", "\xe0\xa4\x83", 1},
	{"^\\p{Me}$", "\xe2\x83\x9d", 1}, {"^\\p{N}+$", "1\xd9\xa3\xe2\x85\xa0\xc2\xbd", 1},
	{"^\\p{Nd}+$", "09\xd9\xa3\xe0\xa5\xa7", 1}, {"^\\p{Nd}$", "\xc2\xbd", 0},
	{"^\\p{Nl}$", "\xe2\x85\xa0", 1}, {"^\\p{No}$", "\xc2\xbd", 1}, {"^\\p{digit}$", "7", 1},
	{"^\\p{P}+$", "!-()\xc2\xab_", 1}, {"^\\p{Pd}$", "-", 1}, {"^\\p{Ps}$", "(", 1},
	{"^\\p{Pe}$", ")", 1}, {"^\\p{Pc}$", "_", 1}, {"^\\p{Pi}$", "\xc2\xab", 1},
	{"^\\p{Pf}$", "\xc2\xbb", 1}, {"^\\p{Po}$", "!", 1}, {"^\\p{S}+$", "+$^\xc2\xa9", 1},
	{"^\\p{Sm}$", "+", 1}, {"^\\p{Sc}$", "\xe2\x82\xac", 1}, {"^\\p{Sk}$", "^", 1},
	{"^\\p{So}$", "\xc2\xa9", 1}, {"^\\p{Z}$", " ", 1}, {"^\\p{Zs}$", "\xc2\xa0", 1},
	{"^\\p{Zl}$", "\xe2\x80\xa8", 1}, {"^\\p{Zp}$", "\xe2\x80\xa9", 1}, {"^\\p{Z}$", "\t", 0},
	{"^\\p{C}$", "\x01", 1}, {"^\\p{Cc}$", "\x7f", 1}, {"^\\p{Cf}$", "\xc2\xad", 1},
	{"^\\p{Co}$", "\xee\x80\x80", 1}, {"^\\p{Cn}$", "\xcd\xb8", 1}, {"^\\p{Cn}$", "a", 0},
	{"^\\p{gc=Lu}$", "Q", 1}, {"^\\p{General_Category=Decimal_Number}$", "5", 1},
	/* scripts: Script=, sc=, Script_Extensions=, and RE2's lone names */
	{"^\\p{Script=Latin}+$", "abc\xc3\xa9", 1}, {"^\\p{sc=Latn}$", "\xce\xb1", 0},
	{"^\\p{Script=Greek}+$", "\xce\xb1\xce\xb2", 1}, {"^\\p{Greek}$", "\xce\xa9", 1},
	{"^\\p{Cyrillic}+$", "\xd0\x96\xd0\xb8", 1}, {"^\\p{Han}+$", "\xe6\x97\xa5\xe6\x9c\xac", 1},
	{"^\\p{Arabic}$", "\xd8\xb9", 1}, {"^\\p{Hebrew}$", "\xd7\x90", 1},
	{"^\\p{Hiragana}$", "\xe3\x81\x82", 1}, {"^\\p{Katakana}$", "\xe3\x82\xa2", 1},
	{"^\\p{Hangul}$", "\xed\x95\x9c", 1}, {"^\\p{Thai}$", "\xe0\xb8\x81", 1},
	{"^\\p{Devanagari}$", "\xe0\xa4\x95", 1}, {"^\\p{Script=Common}$", "1", 1},
	{"^\\p{Script=Devanagari}$", "\xe0\xa5\xa4", 0}, {"^\\p{scx=Deva}$", "\xe0\xa5\xa4", 1},
	{"^\\p{Script_Extensions=Bengali}$", "\xe0\xa5\xa4", 1},
	/* binary properties */
	{"^\\p{Any}$", "\xf4\x8f\xbf\xbf", 1}, {"^\\p{ASCII}+$", "az~", 1},
	{"^\\p{ASCII}$", "\xc3\xa9", 0}, {"^\\p{Assigned}$", "a", 1}, {"^\\p{Assigned}$", "\xcd\xb8", 0},
	/* \P, and properties in classes, negated classes and ranges */
	{"^\\P{L}+$", "12 !", 1}, {"^\\P{L}$", "\xc3\xa9", 0}, {"^\\P{L}$", "\xff", 1},
	{"^[\\p{L}\\p{Nd}]+$", "ab12\xce\xb1", 1}, {"^[\\p{L}\\p{Nd}]+$", "a-b", 0},
	{"^[^\\p{L}]$", "1", 1}, {"^[^\\p{L}]$", "a", 0}, {"^[\\P{L}]$", "a", 0},
	{"^[\\P{L}]$", "1", 1}, {"^[^\\P{L}]$", "a", 1}, {"^[\\p{Greek}a-c]+$", "ab\xce\xb1", 1},
	{"^[\\p{Lu}-]+$", "A-B", 1}, {"^\\p{L}{3}$", "\xce\xb1" "bc", 1}, {"^\\p{L}{3}$", "ab", 0},
	{"\\p{Lu}", "abcD", 1}, {"\\p{Lu}", "abcd", 0}, {"^\\p{Katakana_Or_Hiragana}$", "\xe3\x82\xa2", 0},
};

/* Patterns refused at compile time, with a word the message must contain. */
static const struct
{
	const char *pat;
	const char *needle;
} REFUSED[] = {
	{"(a)\\1", "backreference"}, {"(?<n>a)\\k<n>", "backreference"},
	{"a(?=b)", "lookahead"}, {"a(?!b)", "lookahead"}, {"(?<=a)b", "lookbehind"},
	{"(?<!a)b", "lookbehind"}, {"\\p{Foo}", "unknown Unicode property"},
	{"\\p{latin}", "unknown Unicode property"}, {"\\p{Script=L}", "unknown Unicode property"},
	{"\\p{Block=Basic_Latin}", "unknown Unicode property"}, {"\\p{Lu", "unterminated"},
	{"[\\P{}]", "unknown Unicode property"}, {"\\p{gc=Latin}", "unknown Unicode property"},
	{"(ab", "unterminated group"},
	{"ab)", "unmatched )"}, {"[ab", "unterminated character class"},
	{"*a", "nothing to repeat"}, {"a**", "nothing to repeat"}, {"a{2}{3}", "nothing to repeat"},
	{"^*", "nothing to repeat"}, {"\\b+", "nothing to repeat"}, {"{2}", "nothing to repeat"},
	{"[z-a]", "out of order"}, {"a{3,2}", "out of order"}, {"a{1001}", "repetition bound"},
	{"(a{1000}){1000}", "too large"}, {"a\\", "at end"}, {"\\07", "octal"},
	{"(?i)a", "group syntax"}, {"(?<>a)", "group name"}, {"\xff", "UTF-8"},
	{"[\\B]", "\\B"},
};

/* Every MATCHES case gives its expected result. */
static void
test_matches(void)
{
	size_t		i;

	for (i = 0; i < sizeof(MATCHES) / sizeof(MATCHES[0]); i++)
	{
		int			got = search(MATCHES[i].pat, MATCHES[i].subj);

		ok(got == MATCHES[i].want, "/%s/ on \"%s\": want %d, got %d",
		   MATCHES[i].pat, MATCHES[i].subj, MATCHES[i].want, got);
	}
}

/* Refused patterns say why, with the offset. */
static void
test_refused(void)
{
	size_t		i;

	for (i = 0; i < sizeof(REFUSED) / sizeof(REFUSED[0]); i++)
	{
		char		err[256] = "";
		wfe_regex  *re = wfe_regex_compile(REFUSED[i].pat, strlen(REFUSED[i].pat),
										   err, sizeof(err));

		ok(re == NULL && strstr(err, REFUSED[i].needle) && strstr(err, "offset"),
		   "/%s/ refused: %s", REFUSED[i].pat, err);
		wfe_regex_free(re);
	}
	/* a NULL error buffer is allowed */
	ok(wfe_regex_compile("(", 1, NULL, 0) == NULL, "refusal with no error buffer");
}

/* The pattern and the subject may contain NUL bytes: lengths, not strings. */
static void
test_embedded_nul(void)
{
	wfe_regex  *re = wfe_regex_compile("a\0b", 3, NULL, 0);

	ok(re && wfe_regex_search(re, "xa\0by", 5, NULL) == 1, "NUL in pattern and subject");
	ok(re && wfe_regex_search(re, "xa", 2, NULL) == 0, "NUL pattern, shorter subject");
	wfe_regex_free(re);
}

/* Catastrophic-backtracking patterns run in linear time; the budget bounds work. */
static void
test_linear_and_budget(void)
{
	size_t		n = 100000;
	char	   *s = malloc(n + 2);
	wfe_regex  *re;
	clock_t		t0;
	double		secs;
	long		budget;
	int			rc;

	memset(s, 'a', n);
	s[n] = '!';
	s[n + 1] = '\0';
	re = wfe_regex_compile("^(a+)+$", 7, NULL, 0);
	t0 = clock();
	rc = wfe_regex_search(re, s, n + 1, NULL);
	secs = (double) (clock() - t0) / CLOCKS_PER_SEC;
	ok(rc == 0 && secs < 2.0, "^(a+)+$ over 100000 a's and a '!': %d in %.3fs", rc, secs);

	budget = 1000;
	rc = wfe_regex_search(re, s, n + 1, &budget);
	ok(rc == -1 && budget == 0, "budget 1000 runs out: %d (left %ld)", rc, budget);

	budget = 10000000;
	rc = wfe_regex_search(re, s, n, &budget);
	ok(rc == 1 && budget > 0 && budget < 10000000,
	   "budget 10M suffices for a match and is spent: %d (left %ld)", rc, budget);

	budget = 0;
	ok(wfe_regex_search(re, "a", 1, &budget) == -1, "an empty budget is exhausted at once");
	wfe_regex_free(re);

	re = wfe_regex_compile("(x+x+)+y", 8, NULL, 0);
	memset(s, 'x', n);
	t0 = clock();
	rc = wfe_regex_search(re, s, n, NULL);
	secs = (double) (clock() - t0) / CLOCKS_PER_SEC;
	ok(rc == 0 && secs < 2.0, "(x+x+)+y unanchored over 100000 x's: %d in %.3fs", rc, secs);
	wfe_regex_free(re);

	/* a long pattern does not recurse per character */
	{
		size_t		m = 200000;
		char	   *p = malloc(m);

		memset(p, 'q', m);
		re = wfe_regex_compile(p, m, NULL, 0);
		ok(re == NULL, "a 200000-character literal is refused as too large");
		wfe_regex_free(re);
		m = 15000;
		re = wfe_regex_compile(p, m, NULL, 0);
		ok(re && wfe_regex_search(re, p, m, NULL) == 1, "a 15000-character literal matches itself");
		wfe_regex_free(re);
		free(p);
	}
	/* property classes: linear, and bounded in what they copy */
	{
		size_t		m = 200 * 7 + 2;
		char	   *p = malloc(m + 1);

		memset(s, 'a', n);
		re = wfe_regex_compile("^(\\p{L}|\\p{Lu})+$", 17, NULL, 0);
		t0 = clock();
		rc = wfe_regex_search(re, s, n, NULL);
		secs = (double) (clock() - t0) / CLOCKS_PER_SEC;
		ok(rc == 1 && secs < 2.0, "^(\\p{L}|\\p{Lu})+$ over 100000 a's: %d in %.3fs", rc, secs);
		wfe_regex_free(re);
		p[0] = '[';
		for (size_t i = 0; i < 200; i++)
			memcpy(p + 1 + 7 * i, "\\P{Cn}", 7);
		p[m - 1] = ']';
		re = wfe_regex_compile(p, m, NULL, 0);
		ok(re == NULL, "200 copies of \\P{Cn} in one class are refused as too large");
		wfe_regex_free(re);
		for (size_t i = 0; i < 200; i++)
			memcpy(p + 7 * i, "\\P{Cn}", 7);
		re = wfe_regex_compile(p, 1400, NULL, 0);
		ok(re != NULL, "200 \\P{Cn} outside classes borrow their table");
		wfe_regex_free(re);
		free(p);
	}
	/* deep nesting is refused, not a stack overflow */
	{
		char		p[600];
		int			i;

		for (i = 0; i < 300; i++)
		{
			p[i] = '(';
			p[300 + i] = ')';
		}
		re = wfe_regex_compile(p, 600, NULL, 0);
		ok(re == NULL, "300 nested groups are refused");
		wfe_regex_free(re);
		re = wfe_regex_compile(p + 200, 200, NULL, 0);
		ok(re && wfe_regex_search(re, "", 0, NULL) == 1, "100 nested groups compile");
		wfe_regex_free(re);
	}
	free(s);
}

int
main(void)
{
	test_matches();
	test_refused();
	test_embedded_nul();
	test_linear_and_budget();
	return tap_done();
}
