# sqlock — the two commands a newcomer needs are `make demo` and `make test`.
SHELL := /bin/bash
GO ?= go
STATICCHECK := honnef.co/go/tools/cmd/staticcheck@v0.8.2
# One throwaway PostgreSQL for every package's tests (internal/testing/pgtest).
WITHPG := $(GO) run ./internal/tools/withpg
# Every module of the workspace (go.work): the root, and the nested modules
# that keep heavy dependencies (go-redis, OpenTelemetry, etcd, the AWS SDK)
# out of the root module's graph. In workspace mode ./... names the root
# module's packages only, so each module is named by its own pattern.
PKGS := $(shell $(GO) list -m -f '{{.Dir}}' | sed -e 's|^$(CURDIR)|.|' -e 's|$$|/...|')
FUZZTIME ?= 15s
# package:FuzzTarget pairs run by `make fuzz`.
FUZZ_TARGETS := ./hash:FuzzTextExtended ./internal/vmodel:FuzzParseTag ./versioned:FuzzQuoteIdent ./sqlxhelpers:FuzzRewrite ./sqlxhelpers:FuzzRewriteMySQL ./gormplugin:FuzzConditions ./httpver:FuzzParseCondition
# Model-based (rapid) tests that `make fuzz` runs with RAPID_CHECKS checks
# (make test runs rapid's default 100).
# The gormplugin model test counts writes instead (SQLOCK_MODEL_OPS; make test
# runs 10,000).
RAPID_CHECKS ?= 2000
MODEL_OPS ?= 200000
MODEL_TESTS := ./versioned:TestStructWritesModel ./sqlxhelpers:TestStructWritesModel ./gormplugin:TestRandomWritesKeepVersionPromises

# The Debian packages each command needs; scripts/ensure-deps.sh installs the
# missing ones as root, or prints the apt-get line to run. The tests on MariaDB
# (internal/testing/mariatest) start their own server from mariadb-server's binaries,
# and redislock's (internal/testing/redistest) theirs from redis-server's; the
# dynamo module's run dynalite under Debian's Node, installed with npm into a cache;
# the etcdlock module's a three-member cluster of etcd-server's binary.
TEST_DEPS := postgresql pgbouncer mariadb-server redis-server nodejs npm etcd-server
DEMO_DEPS := postgresql

.PHONY: test lint deps deps-demo demo bench bench-report bench-redis fuzz matrix

test: deps lint
	$(WITHPG) -mariadb -- $(GO) test -race -count=1 -timeout 20m $(PKGS)

lint:
	@unformatted=$$(gofmt -l $$(find . -name '*.go' -not -path './.git/*')); \
	if [ -n "$$unformatted" ]; then echo "gofmt needed:"; echo "$$unformatted"; exit 1; fi
	$(GO) vet $(PKGS)
	$(GO) run $(STATICCHECK) $(PKGS)

deps:
	@./scripts/ensure-deps.sh $(TEST_DEPS)

deps-demo:
	@./scripts/ensure-deps.sh $(DEMO_DEPS)

demo: deps-demo
	$(GO) run ./cmd/sqlock-demo

bench: deps
	$(WITHPG) -- $(GO) test -p 1 -run='^$$' -bench=. -benchmem -count=1 $(PKGS)

# Regenerates docs/benchmarks.md, docs/benchmarks.txt and docs/contention.svg.
bench-report: deps
	$(WITHPG) -- $(GO) run ./internal/tools/benchreport

# redislock beside bsm/redislock and go-redsync/redsync (docs/redislock.md's
# comparison table), from bench/redislockcmp: a module of its own, so that
# the library does not depend on them. REDISCMP_FLAGS, e.g. -rounds 5.
REDISCMP_FLAGS ?=
bench-redis: deps
	cd bench/redislockcmp && $(GO) run . $(REDISCMP_FLAGS)

# Regenerates docs/matrix.md and docs/matrix-<workload>.svg: every mechanism
# of the guide's decision table under the same load and faults (issue #37).
# MATRIX=full (the published figures, under 30 minutes on 2 cores) or quick
# (under 5: the grid make test runs, with MATRIX unset, to prove the harness).
# -p 1: no two cells measure beside each other.
MATRIX ?= full
MATRIX_OUT ?= $(or $(TMPDIR),/tmp)/sqlock-matrix
MATRIX_PKGS := ./internal/tools/matrix ./redislock ./etcdlock ./dynamo
matrix: deps
	rm -rf $(MATRIX_OUT)
	MATRIX=$(MATRIX) MATRIX_OUT=$(MATRIX_OUT) $(WITHPG) -mariadb -- $(GO) test -p 1 -run '^TestMatrix$$' -count=1 -timeout 60m $(MATRIX_PKGS)
	$(GO) run ./internal/tools/matrix -in $(MATRIX_OUT) -out docs -command 'make matrix MATRIX=$(MATRIX)'

fuzz:
	@set -e; for t in $(FUZZ_TARGETS); do \
		pkg=$${t%%:*}; name=$${t##*:}; \
		echo "fuzz $$pkg $$name for $(FUZZTIME)"; \
		$(GO) test -run='^$$' -fuzz="^$$name\$$" -fuzztime=$(FUZZTIME) $$pkg; \
	done
	@set -e; for t in $(MODEL_TESTS); do \
		pkg=$${t%%:*}; name=$${t##*:}; \
		echo "model $$pkg $$name with RAPID_CHECKS=$(RAPID_CHECKS)"; \
		RAPID_CHECKS=$(RAPID_CHECKS) SQLOCK_MODEL_OPS=$(MODEL_OPS) $(WITHPG) -- $(GO) test -count=1 -run="^$$name" $$pkg; \
	done
