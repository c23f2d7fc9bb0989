#!/usr/bin/env bash
# check.sh: make new-service's copy, proved. It writes the bare copy into a
# temporary folder under another module path and checks that nothing in it
# names this module, that it is gofmt-clean, that it builds and vets, and
# that its tests pass. make copy-check runs it; .ci/run runs it after
# make test. The copy's tests run without the race detector (make test
# runs the same code with it) and share this machine's module and build
# caches, so the check costs about the copy's test time.
set -euo pipefail
cd "$(dirname "$0")/../.."
export GOFLAGS="${GOFLAGS:--mod=mod}"
GO="${GO:-go}"

scratch="$(mktemp -d "${TMPDIR:-/tmp}/new-service-XXXXXX")"
trap 'rm -rf "$scratch"' EXIT
copy="$scratch/orders"
old="$(sed -n 's/^module //p' go.mod)"

"$GO" run ./scripts/newservice -dest "$copy" -module example.com/acme/orders
cd "$copy"
if grep -rIl --fixed-strings "$old" .; then
  echo "new-service: the files above still name $old" >&2
  exit 1
fi
unformatted="$(gofmt -l .)"
if [[ -n "$unformatted" ]]; then
  echo "new-service: the copy is not gofmt-clean: $unformatted" >&2
  exit 1
fi
"$GO" build ./...
"$GO" vet ./...
"$GO" test -count=1 ./...
echo "new-service: the copy builds, vets and passes its tests ($(find . -name '*.go' | xargs cat | wc -l) lines of Go)"
