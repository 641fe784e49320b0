# Jobwire developer commands. `make run` starts the broker; `make test` runs every check CI runs.

SHELL := /bin/bash
BIN := $(CURDIR)/.bin
export PATH := $(BIN):$(PATH)
GO ?= go

TOOLS := buf protoc-gen-go protoc-gen-go-grpc protoc-gen-go-vtproto
TOOL_PKGS := github.com/bufbuild/buf/cmd/buf google.golang.org/protobuf/cmd/protoc-gen-go google.golang.org/grpc/cmd/protoc-gen-go-grpc \
	github.com/planetscale/vtprotobuf/cmd/protoc-gen-go-vtproto

# The Python worker library's tests and the conformance suite's Python worker run on the
# virtual environment that `make sdk-deps` builds in .bin/python from the PyPI packages
# sdks/python/constraints.txt pins (their wheels kept in .bin/python-wheels, where the package's
# install test finds them). The unit tests run once more on Debian's packages (DEBIAN_PYTHON).
PYTHON_VENV := $(BIN)/python
PYTHON_WHEELS := $(BIN)/python-wheels
PYTHON ?= $(PYTHON_VENV)/bin/python
DEBIAN_PYTHON ?= /usr/bin/python3
PIP_QUIET := --quiet --disable-pip-version-check --no-input

.PHONY: bench-compare bench-floor bench-river bench-asynq bench-faktory bench-bulk run build tools generate check-generate docs lint test test-go test-reference test-sdks test-java test-rust rust-worker sdk-deps bench mutate fuzz fuzz-short soak clean

## run: start the broker on ./jobwire.db, listening on 127.0.0.1:7070
run:
	$(GO) run ./cmd/jobwire serve

# VERSION is what `jobwire version` prints: git describe's nearest tag, commits since it and the
# commit, with -dirty for uncommitted changes.
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null)
BINDIR ?= bin

## build: build the jobwire binary into ./bin, stamped with VERSION
build:
	$(GO) build -ldflags "-X main.version=$(VERSION)" -o $(BINDIR)/jobwire ./cmd/jobwire

## tools: build the pinned code generators (versions in tools/go.mod) into .bin
tools: $(BIN)/.stamp

$(BIN)/.stamp: tools/go.mod tools/go.sum
	@mkdir -p $(BIN)
	$(GO) -C tools build -o $(BIN)/ $(TOOL_PKGS)
	@touch $@

## generate: regenerate gen/ (Go) and the Python stubs from proto/
generate: tools
	buf generate
	scripts/gen-polyglot.sh

## check-generate: fail when gen/ differs from what proto/ generates
check-generate: generate
	@git diff --exit-code --stat -- gen/ sdks/python/jobwire/v1/ || { echo "generated code is stale: run 'make generate' and commit the result" >&2; exit 1; }
	@test -z "$$(git status --porcelain -- gen/ sdks/python/jobwire/v1/)" || { echo "generated code is stale or untracked: run 'make generate' and commit the result" >&2; git status --porcelain -- gen/ sdks/python/jobwire/v1/ >&2; exit 1; }

## docs: regenerate docs/cli.md and the README's command synopsis from the commands' own help
docs:
	$(GO) test ./cmd/jobwire -run '^TestCLIReferenceMatchesHelp$$' -count=1 -update-docs

## lint: buf lint, buf format, go vet, gofmt
lint: tools
	buf lint
	buf format -d --exit-code
	$(GO) vet ./...
	@out=$$(gofmt -l $$(git ls-files '*.go' | grep -v '^gen/')); test -z "$$out" || { echo "gofmt would change: $$out" >&2; exit 1; }

## test: everything CI checks: lint, generated code, the race-enabled Go suite (with the
## conformance suite against Go, Python, Node.js, Java and Rust workers) and the SDKs' own
## tests. A passing run prints little and ends with a summary; a failing one prints the failures in full.
test: lint check-generate sdk-deps test-rust test-go test-reference test-sdks test-java fuzz-short
	@scripts/test-summary.sh $(BIN)

# The conformance suite (package conformance) runs inside this: strict, so a missing Python,
# Node.js or Java runtime fails instead of skipping, and its per-language table is printed at the end.
# The PostgreSQL store's tests run against a private cluster that scripts/with-postgres.sh
# starts for the run and removes after it (JOBWIRE_TEST_POSTGRES names it).
# Passing packages are left out of the output; the full list is in .bin/go-test.log. The peer
# harnesses' shared open loop (bench/openloop, a module of its own without dependencies) runs too.
test-go: sdk-deps rust-worker
	@mkdir -p $(BIN)
	@echo "go test -race ./... (passing packages: .bin/go-test.log)"
	@set -o pipefail; JOBWIRE_CONFORMANCE_STRICT=1 JOBWIRE_CONFORMANCE_REPORT=$(BIN)/conformance.txt JOBWIRE_PYTHON=$(PYTHON) \
		scripts/with-postgres.sh $(GO) test -race -count=1 -timeout 20m ./... 2>&1 | tee $(BIN)/go-test.log | sed -E '/^(ok|\?) +\t/d'
	@set -o pipefail; cd bench/openloop && $(GO) test -race -count=1 ./... 2>&1 | tee -a $(BIN)/go-test.log | sed -E '/^(ok|\?) +\t/d'
	@cat $(BIN)/conformance.txt

## test-reference: the broker's behaviour tests on the reference writer, one operation per
## transaction (JOBWIRE_TEST_COMMIT=one-by-one), which group commit must behave as.
test-reference:
	@mkdir -p $(BIN)
	@echo "JOBWIRE_TEST_COMMIT=one-by-one go test -race ./broker/ ./server/ (log: .bin/go-test-reference.log)"
	@set -o pipefail; JOBWIRE_TEST_COMMIT=one-by-one scripts/with-postgres.sh $(GO) test -race -count=1 -timeout 20m \
		./broker/ ./server/ 2>&1 | tee $(BIN)/go-test-reference.log | sed -E '/^(ok|\?) +\t/d'

## test-sdks: the Python and Node.js worker libraries' own tests; a test's log output is shown
## only if it fails
test-sdks: sdk-deps
	@mkdir -p $(BIN)
	@echo "python -m unittest: PyPI's grpcio and protobuf (.bin/python), then Debian's ($(DEBIAN_PYTHON))"
	@set -o pipefail; GRPC_VERBOSITY=NONE $(PYTHON) -m unittest discover --buffer -s sdks/python 2>&1 | tee $(BIN)/python-test.log
	@set -o pipefail; GRPC_VERBOSITY=NONE $(DEBIAN_PYTHON) -m unittest discover --buffer -s sdks/python 2>&1 | tee $(BIN)/python-debian-test.log
	@echo "node --test sdks/node/"
	@node --test --test-reporter=dot --test-reporter-destination=stdout \
		--test-reporter=tap --test-reporter-destination=$(BIN)/node-test.tap sdks/node/

## test-rust: the Rust worker library's own tests (cargo, release profile, so that they share
## their build with the conformance worker); the full output is in .bin/rust-test.log
CARGO_FLAGS := --locked --release --manifest-path sdks/rust/Cargo.toml
test-rust:
	@mkdir -p $(BIN)
	@echo "cargo test sdks/rust (output: .bin/rust-test.log)"
	@set -o pipefail; cargo test $(CARGO_FLAGS) 2>&1 | tee $(BIN)/rust-test.log | sed -nE '/^test result:|FAILED|panicked|^error/p'

## rust-worker: build the Rust library's conformance worker, which the conformance suite runs
rust-worker:
	@cargo build --quiet $(CARGO_FLAGS) --example conformance_worker

## test-java: the Java worker library's own tests, `mvn verify` in sdks/java (a test's log output
## is kept in sdks/java/worker/target/surefire-reports and shown only if it fails)
test-java:
	@mkdir -p $(BIN)
	@echo "mvn verify sdks/java"
	@set -o pipefail; mvn -B -q -f sdks/java verify 2>&1 | sed 's/\x1b\[0m//g' | tee $(BIN)/java-test.log
	@cat sdks/java/worker/target/surefire-reports/*.txt > $(BIN)/java-test.txt

## sdk-deps: install the Node.js and Python worker libraries' pinned packages
sdk-deps: sdks/node/node_modules/.package-lock.json python-venv

## python-venv: the virtual environment of the Python library's pinned PyPI packages, in .bin/python
.PHONY: python-venv
python-venv: $(PYTHON_VENV)/.stamp

# Remade only when the pins change. The wheels are downloaded once, then installed without the index.
$(PYTHON_VENV)/.stamp: sdks/python/constraints.txt
	rm -rf $(PYTHON_VENV)
	$(DEBIAN_PYTHON) -m venv $(PYTHON_VENV)
	$(PYTHON_VENV)/bin/pip download $(PIP_QUIET) --only-binary=:all: --dest $(PYTHON_WHEELS) -r $<
	$(PYTHON_VENV)/bin/pip install $(PIP_QUIET) --no-index --find-links $(PYTHON_WHEELS) -r $<
	@touch $@

sdks/node/node_modules/.package-lock.json: sdks/node/package-lock.json
	cd sdks/node && npm ci --no-audit --no-fund --loglevel=error

## mutate: break each guard the broker's promises rest on (attempt counting, fencing, reruns,
## jitter, breaker permits, max attempts, always-fatal types, storage retries, the PostgreSQL
## store, auth, limits, the SDKs), one at a time, and check a test fails; prints the kill table
## (not part of `make test`, which only checks that every entry still fits the code;
## MUTATE_ARGS=-only=REGEXP). The PostgreSQL store's guards run against a private cluster.
mutate: sdk-deps
	PYTHON=$(PYTHON) scripts/with-postgres.sh $(GO) run ./internal/mutate $(MUTATE_ARGS)

## bench: end-to-end benchmark over real gRPC (broker and workers in separate processes)
bench:
	$(GO) run ./cmd/jobwire-bench $(BENCH_ARGS)

## bench-compare: this work tree's benchmark against REF's (a commit), in ROUNDS interleaved rounds
## (default 3), printing each scenario's medians and their ratio; BENCH_ARGS go to both
bench-compare:
	@test -n "$(REF)" || { echo "make bench-compare needs REF=<commit>, e.g. make bench-compare REF=HEAD~1" >&2; exit 2; }
	$(GO) run ./cmd/jobwire-bench compare --ref $(REF) --rounds $(or $(ROUNDS),3) -- $(BENCH_ARGS)

## bench-floor: what a lone job cannot cost less than on this machine (a round trip over TCP and over gRPC, a one-row commit); BENCH_ARGS="--db postgres://..." adds PostgreSQL
bench-floor:
	$(GO) run ./cmd/jobwire-bench floor $(BENCH_ARGS)

## bench-river: River and Jobwire side by side on a private PostgreSQL, in ROUNDS interleaved rounds (default 5)
bench-river:
	scripts/with-postgres.sh --durable scripts/vs-river.sh $(or $(ROUNDS),5)

## bench-asynq: Asynq (on a private redis-server) and Jobwire side by side, in ROUNDS interleaved rounds (default 5)
bench-asynq:
	scripts/vs-asynq.sh $(or $(ROUNDS),5)

## bench-faktory: Faktory (with its own redis-server) and Jobwire side by side, in ROUNDS interleaved rounds (default 5)
bench-faktory:
	scripts/vs-faktory.sh $(or $(ROUNDS),5)

## bench-bulk: the bulk scenarios (drain, batches of 100, 64 producers) of Jobwire, Asynq and Faktory side by side, in ROUNDS interleaved rounds (default 5) of JOBS jobs (default 20,000)
bench-bulk:
	scripts/vs-bulk.sh $(or $(ROUNDS),5) $(or $(JOBS),20000)

# Native Go fuzz targets, as package:Target. Their seed corpora also run as plain tests.
FUZZ_TARGETS := server:FuzzValidateRequest server:FuzzTruncate internal/config:FuzzParse security:FuzzWorkerStream \
	internal/protocodec:FuzzUnmarshalAgreesWithProtobuf
FUZZTIME ?= 30s

## fuzz: run each fuzz target for FUZZTIME, a duration or an input count (default 30s; e.g. make fuzz FUZZTIME=10m or FUZZTIME=1000000x)
fuzz:
	@for t in $(FUZZ_TARGETS); do pkg=$${t%%:*}; fn=$${t##*:}; \
		echo "fuzz $$fn ($$pkg), -fuzztime $(FUZZTIME)"; \
		$(GO) test -run '^$$' -fuzz "^$$fn$$" -fuzztime $(FUZZTIME) ./$$pkg >$(BIN)/fuzz.log 2>&1 || { cat $(BIN)/fuzz.log; exit 1; }; \
	done

## soak: run the resource attacks against a broker process for SOAKTIME (default 60s) while a
## bystander enqueues and reads jobs; prints the bystander's latency and the broker's peak RSS
SOAKTIME ?= 60s
soak:
	$(GO) run ./cmd/jobwire-soak -duration $(SOAKTIME)

# fuzz-short: what make test runs, a few thousand inputs per target. A count, not a duration:
# Go 1.26's fuzz coordinator can report a spurious "context deadline exceeded" when a -fuzztime
# duration ends while a worker is mid-input (go.dev/issue/75804); a count has no deadline to race.
fuzz-short:
	@mkdir -p $(BIN)
	@$(MAKE) --no-print-directory fuzz FUZZTIME=5000x

clean:
	rm -rf $(BIN) bin
