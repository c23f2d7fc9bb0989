#!/usr/bin/env bash
# run.sh BIN: serve the API of BIN (a build of a demo-api command) with the
# development database of scripts/dev-db.sh and the development tokens
# DEV_TOKEN_ALICE and DEV_TOKEN_BOB (the server is given their SHA-256), on
# LISTEN_ADDR (127.0.0.1:8080), with WORKSHOP=true and LOG_FORMAT=text unless
# they are set. make run calls it, here and in demo/; whatever else serve
# reads (PROVIDER_URL, WORKSHOP_ROOM, …) comes from the caller's environment.
set -euo pipefail

bin="$1"
url="$("$(dirname "${BASH_SOURCE[0]}")/dev-db.sh")"
alice_token="${DEV_TOKEN_ALICE:-dev-alice}"
bob_token="${DEV_TOKEN_BOB:-dev-bob}"
alice="$("$bin" hash-token "$alice_token")"
bob="$("$bin" hash-token "$bob_token")"
echo "demo-api: database $url"
echo "demo-api: tokens: alice -> '$alice_token', bob -> '$bob_token'  (Authorization: Bearer $alice_token)"
DATABASE_URL="$url" API_TOKENS="alice:$alice,bob:$bob" \
LISTEN_ADDR="${LISTEN_ADDR:-127.0.0.1:8080}" WORKSHOP="${WORKSHOP:-true}" LOG_FORMAT="${LOG_FORMAT:-text}" \
exec "$bin" serve
