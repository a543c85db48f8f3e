# corral's build and test entry points. `make test` is what CI runs
# (.ci/run); it must pass on a fresh Debian 12 machine with Go, Docker and
# the packages .ci/run installs.

SHELL := bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := test

GO ?= go
GOBIN_DIR := $(shell $(GO) env GOPATH)/bin
STATICCHECK_VERSION := v0.8.2
STATICCHECK := $(GOBIN_DIR)/staticcheck

VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT ?= $(shell git rev-parse HEAD 2>/dev/null || true)
LDFLAGS := -X main.version=$(VERSION) -X main.commit=$(COMMIT)

# Extra flags for go test, e.g. GOTESTFLAGS=-v (CI) or GOTESTFLAGS='-run TestX'.
GOTESTFLAGS ?=
# integration (daemon, docker, ssh, plugins end to end) takes 6-7 min of CI's
# race-enabled run on 2 cores, and env/nohup beside it slows to 15 min and more
# when the load average reaches 20-40; 25m leaves them headroom.
TEST_TIMEOUT ?= 25m
# -benchtime for make bench; each benchmark sizes its own work per op.
BENCHTIME ?= 1s

# Tests that need Docker or sshd skip without them, unless these are 1:
# then they fail. .ci/run sets both.
export CORRAL_REQUIRE_DOCKER
export CORRAL_REQUIRE_SSH

.PHONY: generate test tracked-files fmt-check vet staticcheck staticcheck-install shell-check test-image unit chaos cross build bench clean

## test: everything CI checks, in order: tracked files, format, vet, staticcheck, shell, tests, the fault suite, cross-builds
test: tracked-files fmt-check vet staticcheck shell-check test-image unit chaos cross
	@echo "make test: all checks passed"

# No executable binary and nothing over 1 MB is tracked (named exceptions
# in the script).
tracked-files:
	@bash scripts/check-tracked-files.sh

fmt-check:
	@files="$$(gofmt -l $$(find . -name '*.go' -not -path './.git/*'))"; \
	if [[ -n "$$files" ]]; then echo "gofmt: these files need formatting (run gofmt -w):"; echo "$$files"; exit 1; fi
	@echo "gofmt: ok"

vet:
	$(GO) vet ./...

# Installs the pinned staticcheck into GOPATH/bin when missing or another version.
staticcheck-install:
	@if ! "$(STATICCHECK)" -version 2>/dev/null | grep -qF "($(STATICCHECK_VERSION:v%=%))"; then \
		echo "installing staticcheck $(STATICCHECK_VERSION)"; \
		GOBIN="$(GOBIN_DIR)" $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION); \
	fi

staticcheck: staticcheck-install
	"$(STATICCHECK)" ./...

# The nohup engine's shell (env/nohup/sh, embedded into the Go code) must
# parse under every shell a sandbox may have, and pass shellcheck; a finding
# that is deliberate is disabled in the file, next to the code, with a reason.
SH_FILES := $(sort $(wildcard env/nohup/sh/*.sh))
shell-check:
	@missing=; for sh in dash bash busybox shellcheck; do command -v "$$sh" >/dev/null || missing="$$missing $$sh"; done; \
	if [[ -n "$$missing" ]] && [[ $$(id -u) -eq 0 ]] && command -v apt-get >/dev/null; then \
		echo "shell-check: installing busybox-static and shellcheck (missing:$$missing)"; \
		DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq busybox-static shellcheck >/dev/null || \
			{ apt-get -o DPkg::Lock::Timeout=600 update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq busybox-static shellcheck >/dev/null; }; \
	fi; \
	for sh in dash bash busybox shellcheck; do \
		command -v "$$sh" >/dev/null || { echo "shell-check: $$sh not found (Debian: apt-get install dash bash busybox-static shellcheck)"; exit 1; }; \
	done
	@for f in $(SH_FILES); do \
		dash -n "$$f" || { echo "shell-check: dash -n $$f failed"; exit 1; }; \
		bash -n "$$f" || { echo "shell-check: bash -n $$f failed"; exit 1; }; \
		busybox ash -n "$$f" || { echo "shell-check: busybox ash -n $$f failed"; exit 1; }; \
	done
	shellcheck -s sh $(SH_FILES)
	@echo "shell-check: ok ($(words $(SH_FILES)) files: dash, bash and busybox ash parse them; shellcheck is clean)"

# The Docker tests run in an image built locally from busybox-static (no
# registry is reachable). Built when an engine is reachable or required.
test-image:
	@if [[ "$${CORRAL_REQUIRE_DOCKER:-}" == 1 ]] || docker version >/dev/null 2>&1; then \
		if [[ -f scripts/build-test-image.sh ]]; then bash scripts/build-test-image.sh; fi; \
	else \
		echo "test-image: no Docker engine reachable; Docker tests will skip"; \
	fi

# -parallel 4: the docker, ssh and nohup suites spend their time waiting on
# the engine, sshd and shells inside sandboxes, not on the CPU; two cases at
# a time (GOMAXPROCS on 2 cores) left both cores idle much of the run.
TEST_PARALLEL ?= 4

# The fault suite (integration/chaos_*_test.go, tests named TestChaos…)
# runs in its own step, so `make chaos` can be run alone and unit does not
# run it twice.
CHAOS_RUN := ^TestChaos
CHAOS_TIMEOUT ?= 10m

unit:
	$(GO) test -race -timeout $(TEST_TIMEOUT) -parallel $(TEST_PARALLEL) -skip '$(CHAOS_RUN)' $(GOTESTFLAGS) ./...

## chaos: inject faults on real components (docker, sshd, daemon and front
## ends killed, full disk, OOM, bad input) and check every promise of
## docs/reliability.md
chaos: test-image
	$(GO) test -race -timeout $(CHAOS_TIMEOUT) -run '$(CHAOS_RUN)' $(GOTESTFLAGS) ./integration/

# Every package compiles for darwin/arm64 and windows/amd64, and the
# command links; the binaries go to bin/cross (ignored), never beside the
# sources.
CROSS_DIR := bin/cross
cross:
	GOOS=darwin GOARCH=arm64 $(GO) build ./...
	GOOS=windows GOARCH=amd64 $(GO) build ./...
	GOOS=darwin GOARCH=arm64 $(GO) build -o $(CROSS_DIR)/darwin-arm64/corral ./cmd/corral
	GOOS=windows GOARCH=amd64 $(GO) build -o $(CROSS_DIR)/windows-amd64/corral.exe ./cmd/corral
	@echo "cross-builds: ok (darwin/arm64, windows/amd64: $(CROSS_DIR))"

## generate: regenerate plugins/proto's gRPC code (protoc from Debian's
## protobuf-compiler; the Go generators are pinned as go.mod tools). The
## test TestGeneratedCodeIsFresh fails when the committed code is stale.
generate:
	$(GO) generate ./plugins/proto

## build: ./bin/corral with version and commit stamped in
build:
	@mkdir -p bin
	$(GO) build -ldflags "$(LDFLAGS)" -o bin/corral ./cmd/corral
	@echo "built bin/corral ($(VERSION))"

## bench: run every package's benchmarks and print the corral-vs-baseline table.
# -p 1: packages one at a time, so benchmarks do not compete for the CPUs.
bench:
	@mkdir -p bin
	$(GO) build -o bin/benchtab ./internal/benchtab/cmd/benchtab
	@pkgs="$$(grep -rl --include='*_test.go' -E '^func Benchmark' . | xargs -n1 dirname | sort -u)"; \
	echo "benchmarking: $$pkgs"; \
	$(GO) test -p 1 -run '^$$' -bench . -benchmem -benchtime $(BENCHTIME) -timeout 30m $$pkgs | tee bin/bench.txt; \
	echo; bin/benchtab < bin/bench.txt

clean:
	rm -rf bin
