# shellcheck shell=bash
# profile.sh — what bench/profile/*.sh share: a private cluster shaped like
# `make bench`'s (wfe and pg_stat_statements preloaded, defaults otherwise,
# pg_stat_statements.track = all, track_functions = all) with the bench
# schema (bench/sql/setup.sql) and pg_walinspect; PUBLISH_EVENTS=on turns
# wfe.publish_events on (the event log's projection on the outbox, off by
# default as in `make bench`).  Sourced from the
# repository's top directory; sets BIN and WORKDIR, defines Q.
. test/harness/lib.sh
. test/harness/cluster.sh
. bench/chain.sh

BIN=$(pg_path bindir)
WORKDIR=$(make_workdir)
trap 'cluster_stop; rm -rf "$WORKDIR"' EXIT

# Q ARGS...: psql in the bench database, tuples only
Q() { "$BIN/psql" -X -q -v ON_ERROR_STOP=1 -d wfe_bench -At "$@"; }

# profile_cluster STEP_STAGES [RATE_LIMIT]: the cluster, the bench schema
# with a STEP_STAGES-stage bench-steps (each stage taking a token of
# RATE_LIMIT when given) and the 12-stage bench-submit chains
profile_cluster() {
	cluster_start "$WORKDIR"
	cluster_createdb wfe_bench
	cat >>"$CLUSTER_DIR/data/postgresql.conf" <<CONF
shared_preload_libraries = 'wfe,pg_stat_statements'
wfe.database = 'wfe_bench'
pg_stat_statements.track = all
pg_stat_statements.max = 5000
track_functions = all
wfe.publish_events = ${PUBLISH_EVENTS:-off}
CONF
	cluster_pg_ctl -l "$CLUSTER_DIR/server.log" -m fast -w -t 60 restart >/dev/null
	chain bench-steps "$1" bench bench.step@1 "${2:-}" >"$WORKDIR/steps.yaml"
	chain bench-submit 12 bench-submit bench.submit@1 >"$WORKDIR/submit.yaml"
	Q -v steps="$WORKDIR/steps.yaml" -v submit="$WORKDIR/submit.yaml" -f bench/sql/setup.sql >/dev/null
	Q -c "CREATE EXTENSION pg_walinspect"
}

# wal_report LSN0 LSN1 N UNIT OUT: the WAL between the two LSNs per one of
# N units (records, bytes, full-page images) appended to OUT/summary.txt,
# and by resource manager, record type and relation (records and bytes
# without full-page images per unit) into OUT/wal.txt
wal_report() {
	Q -c "SELECT 'WAL records/$4 ' || round(count(*)::numeric / $3, 2)
	             || ', bytes/$4 ' || round(sum(record_length)::numeric / $3)
	             || ' (' || round(sum(record_length - fpi_length)::numeric / $3) || ' without full-page images)'
	             || ', FPI/$4 ' || round(count(*) FILTER (WHERE fpi_length > 0)::numeric / $3, 2)
	        FROM pg_get_wal_records_info('$1', '$2')" | tee -a "$5/summary.txt"
	# bytes without full-page images: where a checkpoint fell moves those
	Q -c "SELECT round(count(*)::numeric / $3, 2) AS per_$4,
	             round(sum(record_length - fpi_length)::numeric / $3) AS bytes_$4,
	             resource_manager, record_type, coalesce(c.relname, w.rel)
	        FROM (SELECT *, (regexp_match(block_ref, 'rel [0-9]+/[0-9]+/([0-9]+)'))[1] AS rel
	                FROM pg_get_wal_records_info('$1', '$2')) AS w
	        LEFT JOIN pg_class AS c ON c.relfilenode::text = w.rel
	       GROUP BY 3, 4, 5 ORDER BY 1 DESC" >"$5/wal.txt"
}
