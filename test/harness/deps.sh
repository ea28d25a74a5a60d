#!/bin/bash
# deps.sh — install the Debian packages wfe needs that are not installed yet.
#
#   test/harness/deps.sh          check, and as root install what is missing
#   test/harness/deps.sh --list   print the package list (.ci/run uses it)
#
# Everything comes from Debian; nothing is vendored or downloaded otherwise.
set -euo pipefail

PACKAGES=(
	build-essential             # gcc and make
	postgresql-15
	postgresql-server-dev-15    # PGXS, pg_regress, pg_isolation_regress, TAP modules
	libyaml-dev
	libjson-c-dev
	libssl-dev                  # SHA-256 for wfe-compile
	librabbitmq-dev
	libpq-dev
	rabbitmq-server
	libipc-run-perl             # TAP tests
	amqp-tools
	clang                       # libFuzzer
	libclang-rt-14-dev
	python3-psycopg             # the Python client (clients/python) and its tests
	python3-pika
	python3-pytest
	python3-pip                 # its test installs it with pip install --no-index
	json-schema-test-suite      # JSON Schema conformance (test/unit/test_jsonschema_suite.c)
	openssl                     # TAP 019: the documented gateway signing example
	prometheus-postgres-exporter  # TAP 025: the shipped query file, scraped
	iproute2                    # TAP 029: ss shows what the RabbitMQ nodes listen on

	debhelper                   # make deb (debian/), the "deb" suite
	postgresql-server-dev-all   # pg_buildext
	dh-python
	python3-all
	fakeroot
	lintian                     # the "deb" suite prints its tags
	pgbouncer                   # TAP 033: poll workers through a transaction pooler
)

# is_installed PACKAGE: true when dpkg has the package fully installed.
is_installed() {
	[ "$(dpkg-query -W -f='${Status}' "$1" 2>/dev/null)" = "install ok installed" ]
}

# missing_packages: print the packages that are not installed, one a line.
missing_packages() {
	local pkg
	for pkg in "${PACKAGES[@]}"; do
		is_installed "$pkg" || echo "$pkg"
	done
}

main() {
	local missing

	if [ "${1:-}" = "--list" ]; then
		printf '%s\n' "${PACKAGES[@]}"
		return 0
	fi

	# Step 1: what is missing?
	mapfile -t missing < <(missing_packages)
	if [ "${#missing[@]}" -eq 0 ]; then
		echo "deps: all ${#PACKAGES[@]} packages are installed"
		return 0
	fi
	echo "deps: missing: ${missing[*]}"

	# Step 2: only root installs; anyone else is told the command.
	if [ "$(id -u)" -ne 0 ]; then
		echo "deps: run: sudo apt-get update && sudo apt-get install -y ${missing[*]}" >&2
		return 1
	fi

	# Step 3: install them, without questions (CI has no stdin).
	export DEBIAN_FRONTEND=noninteractive
	apt-get update
	apt-get install -y "${missing[@]}"
}

main "$@"
