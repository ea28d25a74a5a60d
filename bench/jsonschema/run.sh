#!/bin/bash
# run.sh — the JSON Schema validator's benchmark (docs/benchmarks.md
# "Schemas"): builds bench_jsonschema.c over the compiler core with -O2 (no
# sanitizers) into build/bench/ and runs it.  No server needed.
set -euo pipefail
TOP=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
OUT="$TOP/build/bench/bench_jsonschema"
mkdir -p "$(dirname "$OUT")"
VERSION=$(sed -n "s/^default_version[[:space:]]*=[[:space:]]*'\([^']*\)'.*/\1/p" "$TOP/wfe.control")
${CC:-cc} -std=gnu11 -O2 -Wall -Wextra -Werror -I"$TOP/src" -I"$TOP/src/core" \
	-DWFE_COMPILER_VERSION="\"$VERSION\"" -o "$OUT" "$TOP/bench/jsonschema/bench_jsonschema.c" \
	"$TOP"/src/core/*.c -lyaml -ljson-c -lcrypto -lm
echo "== jsonschema: the JSON Schema validator (median of 7 rounds)"
"$OUT"
