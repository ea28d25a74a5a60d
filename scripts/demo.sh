#!/bin/bash
# demo.sh — what `make demo` runs: the example workflows on a private cluster.
#
# Installs what is missing, builds and installs wfe, starts a throwaway
# cluster, registers the example contracts, creates a definition from each
# examples/*.yaml and prints its digest and Mermaid picture, then stops the
# cluster and removes it.  Every run starts from nothing: re-running is safe.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/../test/harness/lib.sh"
. "$WFE_HARNESS/cluster.sh"

DB=wfe_demo
WORKDIR=""

# cleanup: the EXIT trap; stop the cluster and remove its directory.
cleanup() {
	cluster_stop
	[ -z "$WORKDIR" ] || rm -rf "$WORKDIR"
}

# yaml_top KEY FILE: a top-level scalar of a definition (name, version),
# without quotes or a trailing comment.
yaml_top() {
	sed -nE "s/^$1:[[:space:]]*//p" "$2" | head -n 1 |
		sed -E "s/[[:space:]]+#.*//; s/^[\"']//; s/[\"'][[:space:]]*\$//"
}

# show_definition FILE: create the definition, print its digest and picture.
show_definition() {
	local file=$1 ref
	ref="$(yaml_top name "$file")@$(yaml_top version "$file")"
	banner "$ref (examples/$(basename "$file"))"
	cluster_psql -d "$DB" -At -v file="$file" -v ref="$ref" <<'SQL'
\set src `cat :'file'`
SELECT 'digest: ' || wfe.create_definition(:'src');
SELECT wfe.plan_mermaid(:'ref');
SQL
}

main() {
	local file

	trap cleanup EXIT
	trap 'exit 130' INT
	trap 'exit 143' TERM

	# Step 1: packages, build, install.
	wfe_setup

	# Step 2: a private cluster with a database that has the extension.
	banner "cluster"
	WORKDIR=$(make_workdir)
	cluster_start "$WORKDIR"
	cluster_createdb "$DB"

	# Step 3: the worker and action contracts the examples name.
	cluster_psql -d "$DB" -f "$WFE_TOP/examples/contracts.sql" >/dev/null

	# Step 4: each example becomes a definition; show what was stored.
	for file in "$WFE_TOP"/examples/*.yaml; do
		show_definition "$file"
	done

	# Step 5: cleanup (the EXIT trap) stops the cluster.
}

main "$@"
