# lib.sh — helpers shared by the test harness, the demo and the benchmarks.
# shellcheck shell=bash
# Source it from bash; it sets a few paths and defines functions.

WFE_TOP=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
WFE_HARNESS="$WFE_TOP/test/harness"
PG_CONFIG=${PG_CONFIG:-pg_config}
MAKE=${MAKE:-make}

# say MESSAGE...: one line of progress.
say() {
	printf '%s\n' "$*"
}

# banner TITLE: mark the start of a step, so a long log is easy to scan.
banner() {
	printf '\n== %s\n' "$*"
}

# die MESSAGE...: report a problem and stop.
die() {
	printf 'error: %s\n' "$*" >&2
	exit 1
}

# is_root: true when running as root.
is_root() {
	[ "$(id -u)" -eq 0 ]
}

# pg_path WHAT: a directory from pg_config (bindir, pkglibdir, ...).
pg_path() {
	"$PG_CONFIG" "--$1"
}

# pgxs_tool NAME: path of a test driver shipped with PGXS (pg_regress, ...).
pgxs_tool() {
	case $1 in
		pg_regress) echo "$(pg_path pkglibdir)/pgxs/src/test/regress/pg_regress" ;;
		pg_isolation_regress) echo "$(pg_path pkglibdir)/pgxs/src/test/isolation/pg_isolation_regress" ;;
		perl) echo "$(pg_path pkglibdir)/pgxs/src/test/perl" ;;
		*) die "unknown PGXS tool $1" ;;
	esac
}

# as_server_user CMD...: run CMD as the user that owns the server.  initdb
# refuses to run as root, so root hands the server to "postgres"; the
# command starts in a directory that user can read.
as_server_user() {
	if is_root; then
		(cd / && runuser -u postgres -- "$@")
	else
		"$@"
	fi
}

# give_to_server_user PATH...: hand files over to that user.
give_to_server_user() {
	if is_root; then
		chown -R postgres: "$@"
	fi
}

# make_workdir: create a private temporary directory and print its path.
make_workdir() {
	local dir
	dir=$(mktemp -d "${TMPDIR:-/tmp}/wfe.XXXXXX")
	# Traversable, so the server user can reach what is handed to it inside.
	chmod 755 "$dir"
	echo "$dir"
}

# wfe_make TARGET...: run make at the top of the tree.
wfe_make() {
	$MAKE -C "$WFE_TOP" --no-print-directory "$@"
}

# wfe_build TARGET...: build in parallel, unless the calling make already
# runs jobs (its -j reaches us through MAKEFLAGS).
wfe_build() {
	if [[ ${MAKEFLAGS:-} == *j* ]]; then
		wfe_make "$@"
	else
		wfe_make -j"$(nproc)" "$@"
	fi
}

# wfe_install: install the extension and wfe-compile, which needs write
# access to PostgreSQL's directories (root, on Debian).
wfe_install() {
	if [ ! -w "$(pg_path pkglibdir)" ]; then
		die "cannot write $(pg_path pkglibdir): run as root (sudo make ...)"
	fi
	wfe_make install
}

# logged LOG CMD...: run CMD with its output appended to LOG instead of the
# terminal, with one line of progress (the lines it has written so far, on a
# terminal) and the time it took; if it fails, show the end of LOG.
logged() {
	local log=$1 pid status=0 start=$SECONDS
	shift
	"$@" >>"$log" 2>&1 &
	pid=$!
	while kill -0 "$pid" 2>/dev/null; do
		[ -t 1 ] && printf '\r  working: %d lines of output so far' "$(wc -l <"$log")"
		sleep 1
	done
	wait "$pid" || status=$?
	[ -t 1 ] && printf '\r\033[K'
	if [ "$status" -ne 0 ]; then
		tail -n 40 "$log"
		die "failed (exit status $status); the whole output is in $log"
	fi
	say "done in $((SECONDS - start)) s"
}

# wfe_setup: the set-up shared by the demo and the benchmarks: packages,
# build, install, the compiler's and make's output kept in build/setup.log
# (a newcomer running `make demo` sees progress, not every command line).
# (run-all.sh does the same steps one by one, to count them.)
wfe_setup() {
	local log="$WFE_TOP/build/setup.log"
	mkdir -p "$WFE_TOP/build"
	: >"$log"
	banner "packages"
	"$WFE_HARNESS/deps.sh"
	banner "build"
	say "compiling wfe (output in build/setup.log)"
	logged "$log" wfe_build all
	banner "install"
	say "installing into $(pg_path pkglibdir)"
	logged "$log" wfe_install
}

# tap_tally FILE STATUS: count a TAP stream, print "PASSED FAILED".  A
# "not ok" marked # TODO is expected to fail and counts as passed.  A missing
# plan, a plan that disagrees with the count, or a non-zero exit status with
# no failing assertion (a crash, a sanitizer report) adds one failure.
tap_tally() {
	local file=$1 status=$2 passed failed planned
	passed=$(grep -cE '^ok [0-9]+|^not ok [0-9]+.*# *TODO' "$file" || true)
	failed=$(grep -E '^not ok [0-9]+' "$file" | grep -cvE '# *TODO' || true)
	planned=$(sed -nE 's/^1\.\.([0-9]+).*/\1/p' "$file" | tail -n 1)
	if [ -z "$planned" ] || [ "$planned" -ne $((passed + failed)) ]; then
		failed=$((failed + 1))
	elif [ "$status" -ne 0 ] && [ "$failed" -eq 0 ]; then
		failed=1
	fi
	echo "$passed $failed"
}

# summary PASSED FAILED: the last line of every suite and of the whole run.
summary() {
	printf '%d passed, %d failed\n' "$1" "$2"
}

# wait_for SECONDS EXPR: evaluate EXPR (in the caller's variables) every
# 0.1 s until it is true; false if it never is.
wait_for() {
	local deadline=$((SECONDS + $1))
	until eval "$2"; do
		[ $SECONDS -ge $deadline ] && return 1
		sleep 0.1
	done
}
