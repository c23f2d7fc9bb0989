# demo-api: make run serves the API on 127.0.0.1:8080 with a development PostgreSQL;
# make test runs every test against a real PostgreSQL it starts itself.
#
#   make run        the API on 127.0.0.1:8080 (LISTEN_ADDR; LISTEN_ADDR=0.0.0.0:8080
#                   opens it, and its workshop knobs, to the room) and the review desk on
#                   127.0.0.1:8090 (PROVIDER_LISTEN_ADDR), with a development database
#                   from scripts/dev-db.sh: DATABASE_URL if set, else Docker,
#                   else a cluster of its own in .data/pg on 127.0.0.1:54329.
#                   DEV_DB_PORT=54330 make run picks another port, so that two
#                   clones on one machine can run side by side.
#                   WORKSHOP_ROOM=true LISTEN_ADDR=0.0.0.0:8080 make run opens a
#                   workshop room: any token dev-<name> is the participant
#                   dev-<name> (no secret: for a workshop only), and the desk
#                   listens on LISTEN_ADDR's host too (port 8090).
#   make db-stop    stop that cluster
#   make db-reset   stop it and delete its data: the next make run starts fresh
#   make test       scripts/setup.sh (installs the browser the tests drive
#                   where it is missing), no tracked file over 1 MiB, gofmt,
#                   go vet and every test with the race detector
#   make test-short the fast tier (go test -short): every branch of the
#                   contract against a real PostgreSQL, without the browser,
#                   fault, restart and long end-to-end tests
#   make image      the container image (Dockerfile): the static binary on
#                   scratch, built here; make image-check runs it against a
#                   real PostgreSQL with a real Docker engine
#   make cross      the builds of other systems: go vet for macOS, go vet
#                   and go build for Windows (.ci/run runs it beside make test)
#   make bench      the benchmark; writes docs/bench.md # demo-only
#   make bench-scale  the key table at 10 M keys and under churn; writes # demo-only
#                   docs/scale.md # demo-only
#   make chaos      the fault campaign; writes docs/chaos.md (make test runs a # demo-only
#                   short one) # demo-only
#   make fuzz       every fuzz target for FUZZTIME (30s); make test runs their seeds
#   make new-service DEST=dir MODULE=path  the bare template: the service without # demo-only
#                   its demo-only parts, under a new module path (README.md) # demo-only
#   make copy-check such a copy, made in a temporary folder, builds, vets # demo-only
#                   and passes its tests (.ci/run runs it after make test) # demo-only
#   make screenshots  the browser tests, writing the README's screenshots to # demo-only
#                   docs/screenshots # demo-only
SHELL := /bin/bash
GO ?= go
export GOFLAGS ?= -mod=mod
export DEV_DB_PORT

# Development tokens, for make run only. The server is given their SHA-256.
DEV_TOKEN_ALICE ?= dev-alice
DEV_TOKEN_BOB   ?= dev-bob

.PHONY: run test test-short image image-check cross bench bench-scale chaos fuzz screenshots build vet fmt db-stop db-reset clean new-service copy-check

build:
	$(GO) build -o bin/demo-api ./cmd/demo-api

# demo-only{ make run of the full demo, with the stand-in review desk
# Each step stops make run at its first failure, with that step's message.
# The review desk (demo-api provider, the external service) runs beside the
# API on PROVIDER_LISTEN_ADDR (127.0.0.1:8090) with its own database and its
# fault knobs on; serve's dispatcher hands it every accepted request, and
# gives up (unknown) after DISPATCH_MAX_ATTEMPTS=4 attempts, some 7 s, so a
# workshop sees it happen. Ctrl-C stops both.
run: build
	@set -eo pipefail; \
	url="$$(scripts/dev-db.sh)"; \
	desk_url="$$(scripts/dev-db.sh url reviewdesk)"; \
	api_addr="$${LISTEN_ADDR:-127.0.0.1:8080}"; \
	desk_addr="$${PROVIDER_LISTEN_ADDR:-127.0.0.1:8090}"; \
	if [ "$${WORKSHOP_ROOM:-false}" = true ] && [ -z "$${PROVIDER_LISTEN_ADDR:-}" ]; then \
	  case "$${api_addr%:*}" in 127.*|localhost|'[::1]') ;; *) desk_addr="$${api_addr%:*}:8090" ;; esac; \
	fi; \
	desk_api="http://$$desk_addr"; \
	case "$${desk_addr%:*}" in ''|0.0.0.0|'[::]') desk_api="http://127.0.0.1:$${desk_addr##*:}" ;; esac; \
	alice="$$(./bin/demo-api hash-token '$(DEV_TOKEN_ALICE)')"; \
	bob="$$(./bin/demo-api hash-token '$(DEV_TOKEN_BOB)')"; \
	echo "demo-api: database $$url"; \
	echo "demo-api: tokens: alice -> '$(DEV_TOKEN_ALICE)', bob -> '$(DEV_TOKEN_BOB)'  (Authorization: Bearer $(DEV_TOKEN_ALICE))"; \
	echo "demo-api: workshop headers enabled; try the curl lines of README.md"; \
	if [ "$${WORKSHOP_ROOM:-false}" = true ]; then \
	  echo "demo-api: workshop room: every participant is the token dev-<name> (a short lowercase name; README: ME=<name>), at the address serve prints below; the review desk listens on $$desk_addr"; \
	fi; \
	PROVIDER_DATABASE_URL="$$desk_url" PROVIDER_LISTEN_ADDR="$$desk_addr" PROVIDER_FAULTS=true \
	LOG_FORMAT="$${LOG_FORMAT:-text}" ./bin/demo-api provider & desk=$$!; \
	trap 'kill $$desk 2>/dev/null || true; wait $$desk 2>/dev/null || true' EXIT; \
	DATABASE_URL="$$url" API_TOKENS="alice:$$alice,bob:$$bob" PROVIDER_URL="$$desk_api" \
	DISPATCH_MAX_ATTEMPTS="$${DISPATCH_MAX_ATTEMPTS:-4}" \
	LISTEN_ADDR="$$api_addr" WORKSHOP="$${WORKSHOP:-true}" WORKSHOP_ROOM="$${WORKSHOP_ROOM:-false}" LOG_FORMAT="$${LOG_FORMAT:-text}" \
	./bin/demo-api serve
# }demo-only
# The bare copy's make run: the API alone (no desk: PROVIDER_URL names
# yours), the workshop knobs off unless WORKSHOP=true.
# copy-only: run: build
# copy-only: 	@set -eo pipefail; \
# copy-only: 	url="$$(scripts/dev-db.sh)"; \
# copy-only: 	alice="$$(./bin/demo-api hash-token '$(DEV_TOKEN_ALICE)')"; \
# copy-only: 	bob="$$(./bin/demo-api hash-token '$(DEV_TOKEN_BOB)')"; \
# copy-only: 	echo "demo-api: database $$url"; \
# copy-only: 	echo "demo-api: tokens: alice -> '$(DEV_TOKEN_ALICE)', bob -> '$(DEV_TOKEN_BOB)'"; \
# copy-only: 	DATABASE_URL="$$url" API_TOKENS="alice:$$alice,bob:$$bob" \
# copy-only: 	LISTEN_ADDR="$${LISTEN_ADDR:-127.0.0.1:8080}" WORKSHOP="$${WORKSHOP:-false}" LOG_FORMAT="$${LOG_FORMAT:-text}" \
# copy-only: 	./bin/demo-api serve

# The whole suite, with the race detector. scripts/setup.sh first installs
# what the tests need where it is missing (Chromium), or stops with the
# command that would. The integration tests use
# TEST_DATABASE_URL if set, else start a throw-away PostgreSQL from the local
# binaries, else dockertest; they never skip.
# The output lists every top-level test that ran and where its PostgreSQL
# came from; subtest and per-test database lines are left out.
test:
	scripts/setup.sh
	@git ls-files -z 2>/dev/null | xargs -0 wc -c 2>/dev/null \
	  | awk '$$2 != "total" && $$1 > 1048576 { print "tracked file over 1 MiB (build output?): " $$2; bad = 1 } END { exit bad }'
	gofmt -l . | tee /dev/stderr | (! read)
	$(GO) vet ./...
	set -o pipefail; $(GO) test -race -count=1 -v ./... 2>&1 \
	  | grep -vE '^[[:space:]]*(=== (RUN|PAUSE|CONT)|--- PASS: [^[:space:]]+/|[^[:space:]]+_test\.go:[0-9]+: testdbconf: )|^PASS$$'

# The fast tier: every branch of the contract against a real PostgreSQL,
# without the browser, fault, restart and long end-to-end tests (each of
# those skips under -short, saying why).
test-short:
	$(GO) test -short -count=1 ./...

# The container image (Dockerfile), tagged $(IMAGE): the binary built here,
# static and for the engine's Linux, packed on scratch with this machine's CA
# certificates, so that the build pulls nothing.
IMAGE ?= demo-api
image:
	@set -eo pipefail; rm -rf bin/image; mkdir -p bin/image/etc/ssl/certs; \
	arch="$$(docker version -f '{{.Server.Arch}}')"; \
	CGO_ENABLED=0 GOOS=linux GOARCH="$$arch" $(GO) build -trimpath -ldflags='-s -w' -o bin/image/demo-api ./cmd/demo-api; \
	for f in /etc/ssl/certs/ca-certificates.crt /etc/pki/tls/certs/ca-bundle.crt /etc/ssl/cert.pem; do \
	  if [[ -f "$$f" ]]; then cp "$$f" bin/image/etc/ssl/certs/ca-certificates.crt; break; fi; \
	done; \
	[[ -s bin/image/etc/ssl/certs/ca-certificates.crt ]] || { echo "image: no CA certificates found on this machine" >&2; exit 1; }
	docker build --target image -t $(IMAGE) .

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

# demo-only{ the full demo's tools
bench:
	$(GO) run ./cmd/demo-bench

# The key table at 0, 1 M and 10 M keys and under steady churn (under 20
# minutes; it says the disk it needs first); writes docs/scale.md.
bench-scale:
	$(GO) run ./cmd/demo-bench -scale

# The failover scenarios run a pg_auto_failover formation: setup.sh
# installs pg_autoctl where it is missing, or stops with the command.
chaos:
	scripts/setup.sh pg_autoctl
	$(GO) run ./cmd/demo-chaos

screenshots:
	mkdir -p docs/screenshots
	SCREENSHOTS_DIR=$(CURDIR)/docs/screenshots $(GO) test -count=1 -run '^TestBrowser' ./cmd/demo-api
# }demo-only

# demo-only{ the bare template (scripts/newservice)
# make new-service DEST=../orders MODULE=example.com/acme/orders writes the
# service without its demo-only parts (scripts/newservice/demo-only.txt)
# under a new module path; make copy-check proves such a copy builds, vets
# and passes its tests (.ci/run runs it after make test).
new-service:
	@if [[ -z "$(DEST)" || -z "$(MODULE)" ]]; then echo "usage: make new-service DEST=<dir> MODULE=<module path>" >&2; exit 2; fi
	$(GO) run ./scripts/newservice -dest "$(DEST)" -module "$(MODULE)"

copy-check:
	scripts/newservice/check.sh
# }demo-only

FUZZTIME ?= 30s
# Every fuzz target, found where it is written, so a new one cannot be left out.
fuzz:
	@set -eo pipefail; grep -r --include='*_test.go' -o '^func Fuzz[A-Za-z0-9_]*' . | sed 's/:func / /' | sort | \
	while read -r file name; do \
	  echo "fuzz $$name in $$(dirname $$file) for $(FUZZTIME)"; \
	  $(GO) test -run '^$$' -fuzz "^$$name\$$" -fuzztime $(FUZZTIME) "$$(dirname $$file)"; \
	done

vet:
	$(GO) vet ./...

fmt:
	gofmt -w .

db-stop:
	scripts/dev-db.sh stop

db-reset:
	scripts/dev-db.sh reset

clean:
	rm -rf bin
