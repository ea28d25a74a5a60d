#!/bin/bash
# run.sh — the Debian packages, built and used (test suite "deb").
#
#   test/deb/run.sh [WORKDIR]
#
# Builds postgresql-15-wfe, wfe-worker and python3-wfe with `make deb`
# (debhelper, pg_buildext), then installs them WITHOUT touching the
# machine's PostgreSQL or /usr: each .deb is unpacked with `dpkg -x` into a
# scratch root that also holds a copy of PostgreSQL 15 (bin, lib, share).
# PostgreSQL finds its share and lib directories relative to its binaries,
# so the copy's server loads the extension the package put under
# ROOT/usr/lib/postgresql/15/lib and ROOT/usr/share/postgresql/15/extension,
# the same relative places as in /usr.  A cluster of that server (wfe
# preloaded, its background worker on) runs a workflow whose tasks are
# taken by the packaged wfe-worker (poll mode) and the packaged Python
# client (imported from ROOT/usr/lib/python3/dist-packages).  Also checks
# the files the packages ship (the systemd template, the config example)
# and prints lintian's tags.  Ends with "N passed, N failed".
set -uo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/../harness/lib.sh"
. "$WFE_HARNESS/cluster.sh"

SYS_PG=/usr/lib/postgresql/15
PASS=0
FAIL=0
WORKDIR=""
OWN_WORKDIR=0

check() {
	local name=$1 want=$2 got=$3
	if [ "$want" = "$got" ]; then
		PASS=$((PASS + 1)); echo "ok - $name"
	else
		FAIL=$((FAIL + 1)); echo "not ok - $name"; echo "#   want: $want"; echo "#   got:  $got"
	fi
}

cleanup() {
	cluster_stop
	if [ "$OWN_WORKDIR" = 1 ] && [ "${WFE_KEEP_WORKDIR:-0}" != 1 ]; then
		rm -rf "$WORKDIR"
	elif [ -n "$WORKDIR" ]; then
		say "# logs in $WORKDIR"
	fi
}

main() {
	local root debs deb run status q out
	if [ $# -ge 1 ]; then WORKDIR=$1; mkdir -p "$WORKDIR"; else WORKDIR=$(make_workdir); OWN_WORKDIR=1; fi
	trap cleanup EXIT
	touch "$WORKDIR/started"

	# Step 1: build the packages (in a copy of the tree, build/deb/);
	# WFE_DEB_REUSE=1 takes those a previous `make deb` left there.
	if [ "${WFE_DEB_REUSE:-0}" = 1 ] && ls "$WFE_TOP"/build/deb/*.deb >/dev/null 2>&1; then
		say "# reusing $(ls "$WFE_TOP"/build/deb/*.deb | wc -l) packages in build/deb"
	elif ! $MAKE -C "$WFE_TOP" --no-print-directory deb >"$WORKDIR/deb-build.log" 2>&1; then
		tail -n 40 "$WORKDIR/deb-build.log"
		check "make deb builds the packages" 0 1
		summary "$PASS" "$FAIL"; return 1
	fi
	mapfile -t debs < <(ls "$WFE_TOP"/build/deb/*.deb | grep -v -- '-dbgsym_')
	check "make deb builds the three packages" "postgresql-15-wfe python3-wfe wfe-worker" \
		"$(for d in "${debs[@]}"; do dpkg-deb -f "$d" Package; done | sort | tr '\n' ' ' | sed 's/ $//')"

	# Step 2: a scratch root: PostgreSQL 15 copied, the packages unpacked over it.
	root=$WORKDIR/root
	mkdir -p "$root/usr/lib/postgresql" "$root/usr/share/postgresql"
	cp -a "$SYS_PG" "$root/usr/lib/postgresql/"
	cp -a /usr/share/postgresql/15 "$root/usr/share/postgresql/"
	for deb in "${debs[@]}"; do dpkg -x "$deb" "$root"; done
	chmod -R a+rX "$root"
	check "the extension is where PostgreSQL looks for it" "yes yes yes" \
		"$(for f in usr/lib/postgresql/15/lib/wfe.so usr/share/postgresql/15/extension/wfe.control \
			usr/share/postgresql/15/extension/wfe--0.2.0--0.3.0.sql; do
			[ -e "$root/$f" ] && echo yes || echo "no $f"; done | tr '\n' ' ' | sed 's/ $//')"
	check "wfe-worker is in /usr/bin, not in PostgreSQL's bindir" "yes 0" \
		"$([ -x "$root/usr/bin/wfe-worker" ] && echo yes || echo no) $(for d in "${debs[@]}"; do dpkg-deb -c "$d"; done | grep -c 'postgresql/15/bin/wfe-worker')"
	check "the systemd template and the config example are shipped" "yes yes" \
		"$([ -f "$root/lib/systemd/system/wfe-worker@.service" ] || [ -f "$root/usr/lib/systemd/system/wfe-worker@.service" ] && echo yes || echo no) $([ -f "$root/etc/wfe-worker/example.conf" ] && echo yes || echo no)"
	check "wfe-compile from the package lints an example" "0" \
		"$("$root/usr/lib/postgresql/15/bin/wfe-compile" "$WFE_TOP/examples/payment-routing.yaml" >/dev/null 2>&1; echo $?)"

	# Step 3: a cluster of the copied server, wfe preloaded.
	export PG_CONFIG=$root/usr/lib/postgresql/15/bin/pg_config
	check "the copied server's pg_config points into the scratch root" "$root/usr/share/postgresql/15" "$(pg_path sharedir)"
	CLUSTER_EXTRA_CONF="shared_preload_libraries = 'wfe'
wfe.database = 'postgres'
wfe.poll_interval_ms = 200" cluster_start "$WORKDIR" >"$WORKDIR/cluster.log" 2>&1 || {
		cat "$WORKDIR/cluster.log"; check "the cluster starts" 0 1; summary "$PASS" "$FAIL"; return 1; }
	q() { "$(pg_path bindir)/psql" -X -q -A -t -v ON_ERROR_STOP=1 -d postgres -c "$1"; }
	q "CREATE EXTENSION wfe" >/dev/null
	check "CREATE EXTENSION wfe from the package" "0.3.0" "$(q "SELECT extversion FROM pg_extension WHERE extname = 'wfe'")"
	q "SELECT wfe.register_worker('deb.echo@1', 'debq'); SELECT wfe.register_worker('deb.py@1', 'debpy');
	   SELECT wfe.create_definition(\$y\$
name: deb-flow
version: \"1.0.0\"
entry: shell
stages:
  - name: shell
    type: worker
    queue: debq
    worker: deb.echo@1
    input: { n: \"\${context.n}\" }
    on_success: python
    on_failure: failed
  - name: python
    type: worker
    queue: debpy
    worker: deb.py@1
    input: { prev: \"\${stages.shell.result}\" }
    on_success: completed
    on_failure: failed
\$y\$);" >/dev/null 2>"$WORKDIR/define.log" || cat "$WORKDIR/define.log"
	q "SELECT wfe.approve('deb-flow', '1.0.0'); SELECT wfe.activate('deb-flow', '1.0.0')" >/dev/null
	run=$(q "SELECT run_id FROM wfe.submit('deb-flow', '{\"n\": 7}')")

	# Step 4: the packaged wfe-worker takes the first task...
	"$root/usr/bin/wfe-worker" --queue debq --command 'cat' --once \
		--dsn "host=$PGHOST port=$PGPORT dbname=postgres user=postgres" >"$WORKDIR/worker.log" 2>&1
	check "the packaged wfe-worker ran the shell stage" 'completed|{"n": 7}' \
		"$(q "SELECT state || '|' || result FROM wfe.run_stages WHERE run_id = $run AND stage = 'shell'")"
	# ...and the packaged Python client the second.
	out=$(cd / && PYTHONPATH="$root/usr/lib/python3/dist-packages" /usr/bin/python3 - "$PGHOST" "$PGPORT" "$root" <<'EOF' 2>&1
import sys, psycopg, wfe
host, port, root = sys.argv[1:4]
assert wfe.__file__.startswith(root), wfe.__file__
with psycopg.connect(host=host, port=port, dbname="postgres", user="postgres", autocommit=True) as db:
    [task] = wfe.claim_task(db, "debpy", "deb-python")
    print(wfe.complete_task(db, task, {"double": task.input["prev"]["n"] * 2}).value)
EOF
)
	check "the packaged Python client ran the python stage" "accepted" "$out"
	# the background worker of the packaged library finishes the run
	wait_for 30 "[ \"\$(q \"SELECT state FROM wfe.runs WHERE run_id = $run\")\" = completed ]" || true
	check "the run completed, moved by the packaged library's background worker" "completed|{\"double\": 14}" \
		"$(q "SELECT r.state || '|' || s.result FROM wfe.runs AS r JOIN wfe.run_stages AS s USING (run_id)
		      WHERE r.run_id = $run AND s.stage = 'python'")"
	check "the machine's PostgreSQL was not touched (no wfe file there changed)" "" \
		"$(find "$SYS_PG" /usr/share/postgresql/15 -name 'wfe*' -newer "$WORKDIR/started" 2>/dev/null)"

	# Step 5: lintian's view, for the record (docs/packaging.md explains each tag left).
	if command -v lintian >/dev/null; then
		lintian --tag-display-limit 0 "${debs[@]}" >"$WORKDIR/lintian.log" 2>&1
		say "# lintian: $(grep -c '^[EW]:' "$WORKDIR/lintian.log") errors and warnings"
		sed 's/^/#   /' "$WORKDIR/lintian.log" | head -n 40
	fi

	summary "$PASS" "$FAIL"
	[ "$FAIL" -eq 0 ]
}

main "$@"
