#!/bin/bash
# cli_vs_db.sh — wfe-compile and the database must agree on every definition.
#
# For each examples/*.yaml and test/cli/*.yaml, the installed
# `wfe-compile --digest FILE` and `SELECT wfe.compile(source)` in the test
# cluster must accept it with the same digest, or both reject it.  The
# examples are the seed workflows and must be accepted.  The database has
# examples/contracts.sql registered; the CLI runs without --contracts (the
# digest never depends on the registry).  One test per file.
#
# Needs a running cluster (PGHOST, PGPORT, PGUSER from cluster.sh) and the
# extension installed.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
. "$WFE_HARNESS/cluster.sh"

DB=wfe_cli
CHILD_EXAMPLES=(publish-asset.yaml)   # examples/ workflows other examples call

# cli_verdict FILE: the CLI's digest, or "rejected" when it exits 1.
cli_verdict() {
	local out status=0
	out=$("$(pg_path bindir)/wfe-compile" --digest "$1" 2>/dev/null) || status=$?
	case $status in
		0) echo "$out" ;;
		1) echo "rejected" ;;
		*) echo "error: exit status $status" ;;
	esac
}

# db_verdict FILE: the database's digest, or "rejected" when "ok" is false.
# psql reads the file itself (a backquoted `cat`, the path quoted by psql)
# and passes it as :'src', so neither content nor size meets a shell quote.
db_verdict() {
	local out
	if out=$(cluster_psql -d "$DB" -At -v file="$1" 2>&1 <<'SQL'
\set src `cat :'file'`
SELECT CASE WHEN (r ->> 'ok')::boolean THEN r ->> 'digest' ELSE 'rejected' END
  FROM (SELECT wfe.compile(:'src') AS r) AS c;
SQL
	); then
		echo "$out"
	else
		echo "error: $out" | head -n 3
	fi
}

# check_file FILE MUST_ACCEPT: compare both verdicts; true when they agree.
check_file() {
	local file=$1 must_accept=$2 name cli db
	name=${file#"$WFE_TOP"/}
	cli=$(cli_verdict "$file")
	db=$(db_verdict "$file")
	if [ "$cli" != "$db" ] || [[ $cli == error* ]]; then
		say "FAILED - $name: wfe-compile says '$cli', wfe.compile says '$db'"
		return 1
	fi
	if [ "$cli" = rejected ] && [ "$must_accept" = yes ]; then
		say "FAILED - $name: rejected by both, but the examples must compile"
		return 1
	fi
	say "ok - $name: $cli"
}

# prepare_db: a fresh database with the extension, the example contracts
# and the example workflows other examples call as children (active: the
# compiler checks a workflow stage against the child's version).
prepare_db() {
	local child
	cluster_createdb "$DB"
	if [ -f "$WFE_TOP/examples/contracts.sql" ]; then
		cluster_psql -d "$DB" -f "$WFE_TOP/examples/contracts.sql" >/dev/null
	fi
	for child in "${CHILD_EXAMPLES[@]}"; do
		child="$WFE_TOP/examples/$child"
		[ -f "$child" ] || continue
		cluster_psql -d "$DB" -At -v file="$child" >/dev/null <<'SQL'
\set ON_ERROR_STOP on
\set src `cat :'file'`
SELECT wfe.create_definition(:'src') AS d \gset
SELECT wfe.approve(workflow, version), wfe.activate(workflow, version)
  FROM wfe.definitions WHERE digest = :'d';
SQL
	done
}

main() {
	local passed=0 failed=0 file must_accept

	# Step 1: the database side.
	prepare_db || { say "cli_vs_db: could not prepare database $DB"; exit 2; }

	# Step 2: one comparison per definition.
	shopt -s nullglob
	for file in "$WFE_TOP"/examples/*.yaml "$WFE_TOP"/test/cli/*.yaml; do
		case $file in
			"$WFE_TOP"/examples/*) must_accept=yes ;;
			*) must_accept=no ;;
		esac
		if check_file "$file" "$must_accept"; then
			passed=$((passed + 1))
		else
			failed=$((failed + 1))
		fi
	done

	summary "$passed" "$failed"
	[ "$failed" -eq 0 ]
}

main "$@"
