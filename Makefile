# demo-api: make run serves the API on :8080 with a development PostgreSQL;
# make test runs every test against a real PostgreSQL it starts itself.
SHELL := /bin/bash
GO ?= go
export GOFLAGS ?= -mod=mod

# Development tokens, for make run only. The server is given their SHA-256.
DEV_TOKEN_ALICE ?= dev-alice
DEV_TOKEN_BOB   ?= dev-bob
sha256 = $(shell printf %s '$(1)' | sha256sum | cut -d' ' -f1)

.PHONY: run test bench build vet fmt db-stop clean

build:
	$(GO) build -o bin/demo-api ./cmd/demo-api

run: build
	@url="$$(scripts/dev-db.sh)"; \
	echo "demo-api: database $$url"; \
	echo "demo-api: tokens: alice -> '$(DEV_TOKEN_ALICE)', bob -> '$(DEV_TOKEN_BOB)'  (Authorization: Bearer $(DEV_TOKEN_ALICE))"; \
	echo "demo-api: workshop headers enabled; try the curl lines of README.md"; \
	DATABASE_URL="$$url" \
	API_TOKENS="alice:$(call sha256,$(DEV_TOKEN_ALICE)),bob:$(call sha256,$(DEV_TOKEN_BOB))" \
	LISTEN_ADDR="$${LISTEN_ADDR:-:8080}" WORKSHOP="$${WORKSHOP:-true}" LOG_FORMAT="$${LOG_FORMAT:-text}" \
	exec ./bin/demo-api serve

# The whole suite, with the race detector. The integration tests use
# TEST_DATABASE_URL if set, else start a throw-away PostgreSQL from the local
# binaries, else dockertest; they never skip.
# The output lists every top-level test that ran and where its PostgreSQL
# came from; subtest and per-test database lines are left out.
test:
	gofmt -l . | tee /dev/stderr | (! read)
	$(GO) vet ./...
	set -o pipefail; $(GO) test -race -count=1 -v ./... 2>&1 \
	  | grep -vE '^\s*(=== (RUN|PAUSE|CONT)|--- PASS: \S+/|\S+_test\.go:[0-9]+: testdbconf: )|^PASS$$'

bench:
	$(GO) run ./cmd/demo-bench

vet:
	$(GO) vet ./...

fmt:
	gofmt -w .

db-stop:
	scripts/dev-db.sh stop

clean:
	rm -rf bin
