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
CLI_PKG := github.com/corralhq/corral/internal/cli
LDFLAGS := -X $(CLI_PKG).version=$(VERSION) -X $(CLI_PKG).commit=$(COMMIT)

# Extra flags for go test, e.g. GOTESTFLAGS=-v (CI) or GOTESTFLAGS='-run TestX'.
GOTESTFLAGS ?=
# integration (daemon, docker, ssh, plugins end to end) takes 6-7 min of CI's
# race-enabled run on 2 cores, and env/nohup beside it slows to 15 min and more
# when the load average reaches 20-40; 25m leaves them headroom.
TEST_TIMEOUT ?= 25m
# -benchtime for make bench; each benchmark sizes its own work per op.
BENCHTIME ?= 1s

# Tests that need Docker or sshd skip without them, unless these are 1:
# then they fail; the same for Wine and the Windows tests (wine-test), and
# for the Kubernetes test cluster (make k8s-up). .ci/run sets all four.
export CORRAL_REQUIRE_DOCKER
export CORRAL_REQUIRE_SSH
export CORRAL_REQUIRE_WINE
export CORRAL_REQUIRE_K8S
# 1: the per-process limits tests fail, instead of skipping, where the
# local backend cannot enforce --memory, --cpus and --pids (cgroups).
export CORRAL_REQUIRE_LIMITS

.PHONY: generate test tracked-files fmt-check vet staticcheck staticcheck-install shell-check test-image unit chaos wine-test cross build bench clean k8s-up k8s-down

## test: everything CI checks, in order: tracked files, format, vet, staticcheck, shell, tests, the fault suite, cross-builds, the Windows tests under Wine, the Kubernetes tests
# wine-test comes after cross, whose windows build leaves the packages it
# needs compiled in the build cache. k8s-test comes last: CI builds and
# starts the cluster in the background meanwhile (see k8s-test).
test: tracked-files fmt-check vet staticcheck shell-check test-image unit chaos cross wine-test k8s-test
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
# The bash scripts that run the Windows tests under Wine (wine-test).
WINE_SH_FILES := $(sort $(wildcard scripts/wine/*.sh))
# The Kubernetes test cluster's scripts (k8s-up, k8s-down).
K8S_SH_FILES := $(sort $(wildcard scripts/k8s/*.sh))
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
	shellcheck $(WINE_SH_FILES)
	shellcheck -x $(K8S_SH_FILES)
	@echo "shell-check: ok ($(words $(SH_FILES)) files: dash, bash and busybox ash parse them; shellcheck is clean; and the $(words $(WINE_SH_FILES)) Wine scripts and $(words $(K8S_SH_FILES)) Kubernetes scripts)"

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

# The Kubernetes tests (env/k8s, k8stest, integration's TestCorralK8s… and
# TestMCPK8s) run in
# their own step, after unit: beside the other packages, the cluster's
# execs and the suites' waits made every package several times slower on
# 2 cores (a CI run of 45 min). Without a cluster they skip at once.
K8S_PKGS := ./env/k8s ./internal/testing/k8stest
K8S_RUN := ^Test(Corral|MCP)K8s

unit:
	$(GO) test -race -timeout $(TEST_TIMEOUT) -parallel $(TEST_PARALLEL) -skip '$(CHAOS_RUN)|$(K8S_RUN)' $(GOTESTFLAGS) $$($(GO) list ./... | grep -v -e '/env/k8s$$' -e '/internal/testing/k8stest$$')

## k8s-test: the Kubernetes backend's tests on the test cluster (make
## k8s-up); they skip without one unless CORRAL_REQUIRE_K8S=1
# CORRAL_K8S_AWAIT names the status file of a cluster bring-up running in
# the background (.ci/run's), waited for first (scripts/k8s/await.sh);
# the cluster's env file, when there is one, gives the tests its
# kubeconfigs and image.
K8S_DIR := $(or $(CORRAL_K8S_DIR),/var/tmp/corral-k8s)
k8s-test:
	@if [[ -n "$${CORRAL_K8S_AWAIT:-}" ]]; then bash scripts/k8s/await.sh "$$CORRAL_K8S_AWAIT"; fi
	if [[ -f $(K8S_DIR)/env ]]; then set -a; source $(K8S_DIR)/env; set +a; fi; \
	$(GO) test -race -timeout $(TEST_TIMEOUT) -parallel $(TEST_PARALLEL) $(GOTESTFLAGS) $(K8S_PKGS) && \
	$(GO) test -race -timeout $(TEST_TIMEOUT) -run '$(K8S_RUN)' -skip '$(CHAOS_RUN)' $(GOTESTFLAGS) ./integration/

## chaos: inject faults on real components (docker, sshd, daemon and front
## ends killed, full disk, OOM, bad input) and check every promise of
## docs/reliability.md
chaos: test-image
	$(GO) test -race -timeout $(CHAOS_TIMEOUT) -run '$(CHAOS_RUN)' $(GOTESTFLAGS) ./integration/

## wine-test: the Windows tests of the packages below, cross-compiled and
## run under Wine (scripts/wine/run-windows-tests.sh: a private Wine prefix,
## removed after). Skips without wine64 and binutils-mingw-w64-x86-64
## unless CORRAL_REQUIRE_WINE=1; CORRAL_WINE_RUN=REGEXP picks tests.
# PKG=REGEXP runs only the tests REGEXP matches: internal/cli's and docs'
# other tests need a POSIX system.
WINE_PKGS ?= ./env/local './internal/cli=^TestWindows' './docs=^Example$$'

wine-test:
	GO="$(GO)" bash scripts/wine/run-windows-tests.sh $(WINE_PKGS)

# Every package compiles for darwin/arm64 and windows/amd64, and the
# command links; the binaries go to bin/cross (ignored), never beside the
# sources. The Kubernetes plugin's packages are left out: they add
# client-go's 340 packages (pure Go, built for every platform upstream),
# whose two extra compiles cost CI's cold run about 90 s of its budget.
CROSS_DIR := bin/cross
CROSS_SKIP := -e '/env/k8s$$' -e '/internal/testing/k8stest$$' -e '/cmd/corral-backend-k8s$$'
# (Listed per platform: a package whose files all exclude it is left out
# of ./... silently, but named explicitly it is an error.)
CROSS_LIST = $$($(GO) list -f '{{if .GoFiles}}{{.ImportPath}}{{end}}' ./... | grep -v $(CROSS_SKIP))
cross:
	export GOOS=darwin GOARCH=arm64; $(GO) build $(CROSS_LIST)
	export GOOS=windows GOARCH=amd64; $(GO) build $(CROSS_LIST)
	GOOS=darwin GOARCH=arm64 $(GO) build -o $(CROSS_DIR)/darwin-arm64/ ./cmd/corral ./cmd/corrald
	GOOS=windows GOARCH=amd64 $(GO) build -o $(CROSS_DIR)/windows-amd64/ ./cmd/corral ./cmd/corrald
	@echo "cross-builds: ok (darwin/arm64, windows/amd64: $(CROSS_DIR))"

## generate: regenerate plugins/proto's gRPC code (protoc from Debian's
## protobuf-compiler; the Go generators are pinned as go.mod tools). The
## test TestGeneratedCodeIsFresh fails when the committed code is stale.
generate:
	$(GO) generate ./plugins/proto

## k8s-up: bring up the single-node Kubernetes test cluster, as root
## (scripts/k8s/up.sh): etcd, a second containerd, kube-apiserver,
## kube-scheduler and a kubelet on 127.0.0.1; the Kubernetes binaries are
## built once per version into ~/.cache/corral/k8s (scripts/k8s/build.sh,
## about 7 min cold). State, kubeconfigs and the env file in
## /var/tmp/corral-k8s (CORRAL_K8S_DIR). Idempotent; not part of make test,
## whose Kubernetes tests skip without it.
k8s-up:
	bash scripts/k8s/up.sh

## k8s-down: stop the test cluster and leave the machine as before it
## (scripts/k8s/down.sh: no process, mount, cgroup, bridge or state dir left;
## sysctls and iptables restored); the binaries' cache stays
k8s-down:
	bash scripts/k8s/down.sh

## build: ./bin/corral (the thin command line), and beside it corrald
## (the daemon and what hosts the backends, to which corral hands those
## commands) and the Kubernetes backend plugin (bin/corral-backend-k8s),
## with version and commit stamped in
build:
	@mkdir -p bin
	$(GO) build -ldflags "$(LDFLAGS)" -o bin/ ./cmd/corral ./cmd/corrald
	$(GO) build -ldflags "-X main.version=$(VERSION)" -o bin/corral-backend-k8s ./cmd/corral-backend-k8s
	@echo "built bin/corral, bin/corrald and bin/corral-backend-k8s ($(VERSION))"

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
