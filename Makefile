# demo-api: make run serves the API on 127.0.0.1:8080 with a development PostgreSQL;
# make test runs every test against a real PostgreSQL it starts itself. The full
# worked example (the review desk, the expedite, the workshop, bench and chaos)
# is demo/, with a Makefile of its own.
#
#   make run        the API on 127.0.0.1:8080 (LISTEN_ADDR), with a development
#                   database from scripts/dev-db.sh: DATABASE_URL if set, else
#                   Docker, else a cluster of its own in .data/pg on
#                   127.0.0.1:54329. DEV_DB_PORT=54330 make run picks another
#                   port, so that two clones on one machine can run side by
#                   side. PROVIDER_URL names the other system the dispatcher
#                   hands requests to (none: nothing is handed over).
#   make db-stop    stop that cluster
#   make db-reset   stop it and delete its data: the next make run starts fresh
#   make test       scripts/setup.sh (installs what the tests need where it is
#                   missing), no tracked file over 1 MiB, gofmt, go vet and
#                   every test with the race detector, here and in
#                   conformance/ (idemcheck, a module of its own)
#   make test-short the fast tier (go test -short): every branch of the
#                   contract against a real PostgreSQL, without the fault,
#                   restart and long end-to-end tests
#   make image      the container image (Dockerfile): the static binary on
#                   scratch, built here; make image-check runs it against a
#                   real PostgreSQL with a real Docker engine
#   make cross      the builds of other systems: go vet for macOS, go vet
#                   and go build for Windows (.ci/run runs it beside make test)
#   make citus      a local Citus cluster (scripts/citus.sh): a coordinator and
#                   two workers of PostgreSQL 17 with Citus 14, on 127.0.0.1:9700
#                   (CITUS_PORT) and the two ports after; prints the
#                   coordinator's URL. Linux and root only; the first run
#                   builds its root (about 5 minutes), later ones take seconds.
#                   make citus-stop stops it.
#   make test-citus the tests that hold on that cluster today (started for
#                   them, stopped after; docs/running.md, Sharding on Citus)
#   make bench-citus a create and a replay on that cluster, each beside what
#                   it does without its key, and beside one PostgreSQL: req/s
#                   and CPU per request (docs/capacity.md, On Citus)
#   make fuzz       every fuzz target for FUZZTIME (30s); make test runs their seeds
#   make lint       golangci-lint (.golangci.yml), built from the Go module
#                   proxy at GOLANGCI_LINT_VERSION into bin/tools; not part
#                   of make test (CI runs it beside)
#   make rename MODULE=path  give this module (a copy of the template, without
#                   demo/) its own path, and the names an operator sees its
#                   last element; RESOURCE=ticket renames the example
#                   resource, demo requests, in every form (scripts/rename)
SHELL := /bin/bash
GO ?= go
export GOFLAGS ?= -mod=mod
export DEV_DB_PORT

# Development tokens, for make run only (scripts/run.sh).
export DEV_TOKEN_ALICE ?= dev-alice
export DEV_TOKEN_BOB   ?= dev-bob

# Runs a command in conformance/ (idemcheck, a module of its own) where
# there is one: a copy of the template made without its nested modules has
# none, and the command is then a no-op (:).
IN_CONFORMANCE = $(if $(wildcard conformance/go.mod),cd conformance &&,:)

.PHONY: run test test-short citus citus-stop test-citus bench-citus image image-check cross fuzz lint rename build vet fmt db-stop db-reset clean

build:
	$(GO) build -o bin/demo-api ./cmd/demo-api

# make run: the API with its development database (scripts/run.sh); Ctrl-C
# stops it.
run: build
	@scripts/run.sh ./bin/demo-api

# The whole suite, with the race detector. scripts/setup.sh first installs
# what the tests need where it is missing (PgBouncer, curl), or stops with
# the command that would. The integration tests use
# TEST_DATABASE_URL if set, else start a throw-away PostgreSQL from the local
# binaries, else dockertest; they never skip.
# The output lists every top-level test that ran and where its PostgreSQL
# came from; subtest and per-test database lines are left out. go vet -race
# checks the race build the tests run, so each package compiles once. A
# package may take more than go test's default 10 minutes on a busy first
# run (internal/service builds and tests a renamed copy): 30 minutes. The
# conformance suite's tests mostly wait on their target, eight at a time.
test:
	scripts/setup.sh
	@git ls-files -z 2>/dev/null | xargs -0 wc -c 2>/dev/null \
	  | awk '$$2 != "total" && $$1 > 1048576 { print "tracked file over 1 MiB (build output?): " $$2; bad = 1 } END { exit bad }'
	gofmt -l . | awk '{ print "not gofmt-ed: " $$0; bad = 1 } END { exit bad }'
	@echo "make test: compiling the race build (minutes on a first run; nothing is printed until it is done)"
	$(GO) vet -race ./...
	$(GO) vet -race -tags citus ./internal/postgres/ ./internal/service/ # make test-citus's tests, built here too
	$(IN_CONFORMANCE) $(GO) vet -race ./...
	set -o pipefail; $(GO) test -race -vet=off -count=1 -timeout 30m -v ./... 2>&1 \
	  | grep -vE '^[[:space:]]*(=== (RUN|PAUSE|CONT)|--- PASS: [^[:space:]]+/|[^[:space:]]+_test\.go:[0-9]+: testdbconf: )|^PASS$$'
	$(IN_CONFORMANCE) $(GO) test -race -vet=off -count=1 -parallel 8 ./...

# The fast tier: every branch of the contract against a real PostgreSQL,
# without the fault, restart and long end-to-end tests (each of those skips
# under -short, saying why).
test-short:
	$(GO) test -short -count=1 ./...
	$(IN_CONFORMANCE) $(GO) test -short -count=1 ./...

# Citus: the cluster, and the tests against it (scripts/citus.sh says how).
citus:
	@scripts/citus.sh start
citus-stop:
	@scripts/citus.sh stop
test-citus:
	scripts/citus.sh test
bench-citus:
	scripts/citus.sh bench

# The container image (Dockerfile), tagged $(IMAGE): the binary built here,
# static and for the engine's Linux, packed on scratch with this machine's CA
# certificates, so that the build pulls nothing. The image it replaces is
# removed, so that rebuilds leave no untagged images behind.
IMAGE ?= demo-api
image:
	@set -eo pipefail; rm -rf bin/image; mkdir -p bin/image/etc/ssl/certs; \
	arch="$$(docker version -f '{{.Server.Arch}}')"; \
	CGO_ENABLED=0 GOOS=linux GOARCH="$$arch" $(GO) build -trimpath -ldflags='-s -w' -o bin/image/demo-api ./cmd/demo-api; \
	for f in /etc/ssl/certs/ca-certificates.crt /etc/pki/tls/certs/ca-bundle.crt /etc/ssl/cert.pem; do \
	  if [[ -f "$$f" ]]; then cp "$$f" bin/image/etc/ssl/certs/ca-certificates.crt; break; fi; \
	done; \
	[[ -s bin/image/etc/ssl/certs/ca-certificates.crt ]] || { echo "image: no CA certificates found on this machine" >&2; exit 1; }; \
	old="$$(docker image inspect -f '{{.Id}}' $(IMAGE) 2>/dev/null || true)"; \
	docker build --target image -t $(IMAGE) .; \
	if [[ -n "$$old" && "$$old" != "$$(docker image inspect -f '{{.Id}}' $(IMAGE))" ]]; then \
	  docker image rm "$$old" >/dev/null 2>&1 || true; \
	fi

# The image against a real PostgreSQL: scripts/setup.sh brings a Docker
# engine where it can, then scripts/imagecheck runs the image (/readyz, a
# create and its replay, the health check) and prints its size.
image-check:
	scripts/setup.sh docker
	$(MAKE) image
	$(GO) run ./scripts/imagecheck -image $(IMAGE)

# The project must build on macOS and Windows too.
cross:
	GOOS=darwin $(GO) vet ./...
	GOOS=windows $(GO) vet ./...
	GOOS=windows $(GO) build ./...
	$(IN_CONFORMANCE) GOOS=darwin $(GO) vet ./...
	$(IN_CONFORMANCE) GOOS=windows $(GO) vet ./...
	$(IN_CONFORMANCE) GOOS=windows $(GO) build ./...

# make rename MODULE=example.com/acme/orders: this module under a new path
# (go.mod and every import), and the names an operator sees (the command,
# binary, image, compose service, metrics, tracing, README title) under its
# last element, orders; NAME=… names the service otherwise.
# make rename RESOURCE=order: the example resource, demo request(s), is
# order(s) in every case form (table, types, routes, JSON fields, key
# prefix, codes, file names, docs); RESOURCES=… gives an irregular plural.
# Both in one call do both.
rename:
	@if [[ -z "$(MODULE)$(RESOURCE)" ]]; then echo "usage: make rename [MODULE=<module path> [NAME=<service name>]] [RESOURCE=<name> [RESOURCES=<plural>]]" >&2; exit 2; fi
	$(GO) run ./scripts/rename $(if $(RESOURCE),-resource "$(RESOURCE)") $(if $(RESOURCES),-resources "$(RESOURCES)") $(if $(MODULE),"$(MODULE)" $(NAME))

FUZZTIME ?= 30s
# Every fuzz target, found where it is written, so a new one cannot be left out.
fuzz:
	@set -eo pipefail; grep -r --include='*_test.go' -o '^func Fuzz[A-Za-z0-9_]*' . | sed 's/:func / /' | sort | \
	while read -r file name; do \
	  echo "fuzz $$name in $$(dirname $$file) for $(FUZZTIME)"; \
	  $(GO) test -run '^$$' -fuzz "^$$name\$$" -fuzztime $(FUZZTIME) "$$(dirname $$file)"; \
	done

# golangci-lint at a pinned version, installed once into bin/tools.
GOLANGCI_LINT_VERSION ?= v2.15.0
lint:
	GOFLAGS= GOBIN="$(CURDIR)/bin/tools" $(GO) install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION)
	bin/tools/golangci-lint run ./...

vet:
	$(GO) vet ./...
	$(IN_CONFORMANCE) $(GO) vet ./...

fmt:
	gofmt -w .

db-stop:
	scripts/dev-db.sh stop

db-reset:
	scripts/dev-db.sh reset

clean:
	rm -rf bin
