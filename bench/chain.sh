# shellcheck shell=bash
# chain NAME STAGES QUEUE WORKER [RATE_LIMIT]: a stages-form definition of
# STAGES worker stages in a line, each binding its input from the run
# context (and taking a token of RATE_LIMIT when given).  Sourced by
# bench/run.sh and bench/profile/*.sh.
# shellcheck disable=SC2016  # ${context.x} is the definition's, not ours
chain() {
	local i next
	printf 'name: %s\nversion: "1.0.0"\nentry: s001\nstages:\n' "$1"
	for ((i = 1; i <= $2; i++)); do
		next=completed
		[ "$i" -eq "$2" ] || next=$(printf 's%03d' $((i + 1)))
		cat <<EOF2
  - name: $(printf 's%03d' "$i")
    type: worker
    queue: $3
    worker: $4
    input: { x: "\${context.x}" }
    on_success: $next
    on_failure: failed
EOF2
		[ -z "${5:-}" ] || printf '    rate_limit: %s\n' "$5"
	done
}
