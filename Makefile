# Makefile — wfe, a durable workflow engine for PostgreSQL (built with PGXS).
#
#   make                 the extension, its install script and wfe-compile
#   make install         install them into PostgreSQL's directories (as root)
#   make test            install what is missing, build, install, run every suite
#   make demo            scripts/demo.sh: the example workflows on a private cluster
#   make bench           bench/run.sh: compile, throughput and latency benchmarks
#   make check-unit      the C unit tests of the compiler core (no server needed)
#   make test-tools      build/test/amqp-probe, the TAP tests' AMQP client
#   make check-regress   pg_regress alone, on a private cluster
#   make installcheck    regress, isolation and TAP against the installed server (PGXS;
#                        as a user that may run initdb, with lc_messages = C)
#   make fuzz            libFuzzer over the compiler and the cores for FUZZ_SECONDS (600)
#   make META.json       regenerate it after changing the version in wfe.control
#   make deps            install the Debian packages the project needs

EXTENSION = wfe

# The version is written once, in wfe.control; everything else reads it.
EXTVERSION := $(shell sed -n "s/^default_version[[:space:]]*=[[:space:]]*'\([^']*\)'.*/\1/p" wfe.control)
ifeq ($(EXTVERSION),)
$(error cannot read default_version from wfe.control)
endif

# ---------------------------------------------------------------------------
# The extension: the module entry point src/wfe.c, the server layer src/pg/,
# the background worker src/bgw/, the AMQP code src/amqp/ and the pure C cores
# src/core/*/ (no PostgreSQL headers) linked into one shared library.  See
# docs/architecture.md for what each folder may include.
# ---------------------------------------------------------------------------
MODULE_big   = wfe
CORE_SRCS   := $(sort $(wildcard src/core/*/*.c))
SERVER_SRCS := src/wfe.c $(sort $(wildcard src/pg/*.c src/bgw/*.c src/amqp/*.c))
OBJS        := $(patsubst %.c,%.o,$(SERVER_SRCS) $(CORE_SRCS))
SRC_HEADERS := $(wildcard src/*/*.h src/core/*/*.h)
# PostgreSQL's own headers have unused parameters; nothing else is relaxed.
PG_CPPFLAGS  = -std=gnu11 -Wall -Wextra -Werror -Wno-unused-parameter \
               -Isrc -DWFE_COMPILER_VERSION='"$(EXTVERSION)"'
SHLIB_LINK  += -lyaml -ljson-c -lrabbitmq -lm

# The install script is src/sql/*.sql concatenated in lexical order.
SQL_SRCS    := $(sort $(wildcard src/sql/*.sql))
DATA_built   = wfe--$(EXTVERSION).sql
# Upgrade scripts (sql/wfe--A--B.sql) and frozen scripts of past releases.
DATA        := $(wildcard sql/wfe--*.sql)

# `make installcheck` against an installed server: pg_regress
# (test/regress/sql/NAME.sql vs test/regress/expected/NAME.out), the
# isolation specs (test/isolation/specs/) and the TAP tests (test/tap/*.pl).
# `make test` runs the same suites and more on a private cluster.
REGRESS        := $(basename $(notdir $(wildcard test/regress/sql/*.sql)))
REGRESS_OPTS    = --inputdir=test/regress
ISOLATION      := $(basename $(notdir $(wildcard test/isolation/specs/*.spec)))
ISOLATION_OPTS  = --inputdir=test/isolation
TAP_TESTS       = 1
PROVE_TESTS     = test/tap/*.pl
PROVE_FLAGS     = -I test/tap

EXTRA_CLEAN = build results output_iso tmp_check regression.diffs regression.out

# ---------------------------------------------------------------------------
# Outside the server: wfe-compile, the unit tests and the fuzz target each
# build the compiler core with their own flags, into build/.
# ---------------------------------------------------------------------------
WFE_CFLAGS   = -std=gnu11 -O2 -Wall -Wextra -Werror
WFE_CPPFLAGS = -Isrc -DWFE_COMPILER_VERSION='"$(EXTVERSION)"'
WFE_LIBS     = -lyaml -ljson-c -lcrypto -lm

CLI          = build/wfe-compile
CLI_OBJS     = $(patsubst src/%.c,build/cli/%.o,$(CORE_SRCS) $(sort $(wildcard src/cli/*.c)))

# wfe-worker: the reference worker, a client of libpq and librabbitmq.  It
# shares the PostgreSQL-free parts of the tree with the server: UTF-8 and
# queue names (src/core/base/), the AMQP topology and the node list
# (src/amqp/topology.c, nodes.c).
WORKER       = build/wfe-worker
WORKER_SHARED := src/core/base/utf8.c src/core/base/names.c src/amqp/topology.c src/amqp/nodes.c
WORKER_SRCS := $(sort $(wildcard src/worker/*.c)) $(WORKER_SHARED)
WORKER_OBJS  = $(patsubst src/%.c,build/wfe-worker-obj/%.o,$(WORKER_SRCS))
WORKER_CPPFLAGS = -Isrc -I$(shell $(PG_CONFIG) --includedir 2>/dev/null) -DWFE_VERSION='"$(EXTVERSION)"'
WORKER_LIBS  = -lpq -lrabbitmq -ljson-c

UNIT_CFLAGS  = $(WFE_CFLAGS) -g -fno-omit-frame-pointer \
               -fsanitize=address,undefined -fno-sanitize-recover=all
UNIT_TESTS  := $(patsubst %.c,build/%,$(sort $(wildcard test/unit/test_*.c)))
UNIT_OBJS    = $(patsubst src/%.c,build/unit/%.o,$(CORE_SRCS))

PROBE        = build/test/amqp-probe
PROBE_LIBS   = -lrabbitmq -ljson-c -lm

FUZZ_CC      = clang
FUZZ_CFLAGS  = -std=gnu11 -g -O1 -Wall -Wextra -Werror \
               -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all
FUZZ_TARGET  = build/fuzz/fuzz_compile
FUZZ_STEP    = build/fuzz/fuzz_step
FUZZ_EXPR    = build/fuzz/fuzz_expr
FUZZ_SCHEMA  = build/fuzz/fuzz_schema
FUZZ_FLOW    = build/fuzz/fuzz_flow
FUZZ_SECONDS = 600
# the core as the fuzz targets link it: coverage without libFuzzer's main
FUZZ_OBJ_CFLAGS = $(subst -fsanitize=fuzzer,-fsanitize=fuzzer-no-link,$(FUZZ_CFLAGS))
FUZZ_OBJS    = $(patsubst src/%.c,build/fuzz/obj/%.o,$(CORE_SRCS))

# ---------------------------------------------------------------------------
# PGXS.  On a fresh machine pg_config is not installed yet: `make test`,
# `make demo`, `make bench` and `make deps` install it before they build.
# ---------------------------------------------------------------------------
PG_CONFIG ?= pg_config
PGXS := $(shell $(PG_CONFIG) --pgxs 2>/dev/null)
ifneq ($(PGXS),)
include $(PGXS)
else
all install installcheck:
	@echo "$(PG_CONFIG) not found: run 'make deps' (as root) first" >&2; exit 1
endif

.DEFAULT_GOAL := all
.PHONY: all install install-cli uninstall uninstall-cli unit-tests fuzz-target test-tools \
        test check-unit check-regress check-meta fuzz demo bench deps deb

all: $(CLI) $(WORKER)

# Every object depends on every header and on the version it is stamped with.
$(OBJS) $(OBJS:.o=.bc): $(SRC_HEADERS) wfe.control

# The install script, with the usual guard against running it from psql.
$(DATA_built): $(SQL_SRCS) wfe.control
	@test -n "$(SQL_SRCS)" || { echo "no src/sql/*.sql to build $@ from" >&2; exit 1; }
	{ printf '%s\n' '-- Generated by make from src/sql/*.sql; edit those, not this file.' \
	    '\echo Use "CREATE EXTENSION wfe" to load this file. \quit'; \
	  for f in $(SQL_SRCS); do printf '\n-- %s\n' "$$f"; cat "$$f"; done; \
	} > $@.tmp && mv $@.tmp $@

# wfe-compile: the compiler core and src/cli/*.c, no server flags.
$(CLI): $(CLI_OBJS)
	$(CC) $(WFE_CFLAGS) -o $@ $^ $(WFE_LIBS)

build/cli/%.o: src/%.c $(SRC_HEADERS) wfe.control
	@mkdir -p $(@D)
	$(CC) $(WFE_CFLAGS) $(WFE_CPPFLAGS) -c -o $@ $<

# wfe-worker: src/worker/*.c, a program of its own (not in OBJS).
$(WORKER): $(WORKER_OBJS)
	$(CC) $(WFE_CFLAGS) -o $@ $^ $(WORKER_LIBS)

build/wfe-worker-obj/%.o: src/%.c $(wildcard src/worker/*.h) $(SRC_HEADERS) wfe.control
	@mkdir -p $(@D)
	$(CC) $(WFE_CFLAGS) $(WORKER_CPPFLAGS) -c -o $@ $<

install: install-cli
install-cli: $(CLI) $(WORKER)
	$(MKDIR_P) '$(DESTDIR)$(bindir)'
	$(INSTALL_PROGRAM) $(CLI) '$(DESTDIR)$(bindir)/wfe-compile'
	$(INSTALL_PROGRAM) $(WORKER) '$(DESTDIR)$(bindir)/wfe-worker'

uninstall: uninstall-cli
uninstall-cli:
	rm -f '$(DESTDIR)$(bindir)/wfe-compile' '$(DESTDIR)$(bindir)/wfe-worker'

# Unit tests: each test/unit/test_*.c is a program over the core, sanitized.
unit-tests: $(UNIT_TESTS)

build/test/unit/test_%: test/unit/test_%.c $(UNIT_OBJS) $(wildcard test/unit/*.h)
	@mkdir -p $(@D)
	$(CC) $(UNIT_CFLAGS) $(WFE_CPPFLAGS) -Itest/unit -o $@ $(filter %.c %.o,$^) $(WFE_LIBS)

build/unit/%.o: src/%.c $(SRC_HEADERS) wfe.control
	@mkdir -p $(@D)
	$(CC) $(UNIT_CFLAGS) $(WFE_CPPFLAGS) -c -o $@ $<

# amqp-probe: the AMQP client of the TAP tests and the benchmark.
test-tools: $(PROBE)

# PGXS's installcheck runs the TAP tests too, which use amqp-probe.
installcheck: test-tools

$(PROBE): test/tools/amqp-probe.c
	@mkdir -p $(@D)
	$(CC) $(WFE_CFLAGS) -o $@ $< $(PROBE_LIBS)

# The libFuzzer targets: each harness linked with the core, compiled once
# for all five (instrumented for coverage, sanitized) under build/fuzz/obj.
# fuzz_step drives the step core through the unit tests' in-memory server
# (test/unit/step_harness.h); fuzz_expr drives the CEL expression core;
# fuzz_schema feeds the JSON Schema validator and the regex engine;
# fuzz_flow drives the flow controls' core (src/core/flow/).
fuzz-target: $(FUZZ_TARGET) $(FUZZ_STEP) $(FUZZ_EXPR) $(FUZZ_SCHEMA) $(FUZZ_FLOW)

build/fuzz/fuzz_%: test/fuzz/fuzz_%.c $(FUZZ_OBJS) $(wildcard test/unit/*.h)
	@mkdir -p $(@D)
	$(FUZZ_CC) $(FUZZ_CFLAGS) $(WFE_CPPFLAGS) -Itest/unit -o $@ $(filter %.c %.o,$^) $(WFE_LIBS)

build/fuzz/obj/%.o: src/%.c $(SRC_HEADERS) wfe.control
	@mkdir -p $(@D)
	$(FUZZ_CC) $(FUZZ_OBJ_CFLAGS) $(WFE_CPPFLAGS) -c -o $@ $<

# bench_expr: one CEL evaluation's cost (bench/expr/bench_expr.c), optimised.
build/bench/bench_expr: bench/expr/bench_expr.c $(CORE_SRCS) $(SRC_HEADERS) wfe.control
	@mkdir -p $(@D)
	$(CC) $(WFE_CFLAGS) $(WFE_CPPFLAGS) -o $@ $(filter %.c,$^) $(WFE_LIBS)

# META.json is committed (PGXN reads it) and generated from META.json.in.
META.json: META.json.in wfe.control
	sed 's/@EXTVERSION@/$(EXTVERSION)/g' META.json.in > $@

check-meta:
	@sed 's/@EXTVERSION@/$(EXTVERSION)/g' META.json.in | cmp -s - META.json || \
	  { echo "META.json is stale (version $(EXTVERSION) in wfe.control): run 'make META.json'" >&2; exit 1; }
	@echo "META.json matches META.json.in and wfe.control (version $(EXTVERSION))"

# The harness scripts set up everything themselves (see test/harness/).
test:
	MAKE='$(MAKE)' PG_CONFIG='$(PG_CONFIG)' test/harness/run-all.sh

check-regress:
	MAKE='$(MAKE)' PG_CONFIG='$(PG_CONFIG)' test/harness/run-all.sh regress

check-unit: unit-tests
	test/harness/run-unit.sh $(UNIT_TESTS)

fuzz: fuzz-target
	test/harness/run-fuzz.sh $(FUZZ_SECONDS) build/fuzz/corpus build/fuzz

demo:
	MAKE='$(MAKE)' PG_CONFIG='$(PG_CONFIG)' scripts/demo.sh

bench:
	MAKE='$(MAKE)' PG_CONFIG='$(PG_CONFIG)' bench/run.sh

deps:
	test/harness/deps.sh

# Debian packages (debian/; docs/packaging.md): built with dpkg-buildpackage
# in a copy of the tree (tracked and new files) under build/deb/, so the
# working tree's build is left alone; the .debs land in build/deb/.
deb:
	rm -rf build/deb
	mkdir -p build/deb/wfe-$(EXTVERSION)
	touch build/deb/.started
	git ls-files -z -c -o --exclude-standard | grep -zv '^build/' | \
	  xargs -0 tar -cf - | tar -xf - -C build/deb/wfe-$(EXTVERSION)
	cd build/deb/wfe-$(EXTVERSION) && dpkg-buildpackage -us -uc -b
	@ls build/deb/*.deb
