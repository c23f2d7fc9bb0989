#!/usr/bin/env bash
# statement-cost.sh: what PostgreSQL spends inside a create, counted in CPU
# instructions (valgrind's callgrind), which the host's load does not move.
#
#   scripts/statement-cost.sh [N]    N executions of each shape (default 2000)
#
# Each shape runs N times as a prepared statement in one single-user backend
# (postgres --single) on a throw-away cluster made with the root's
# migrations; the figure is the backend's instructions divided by N, less
# those of `SELECT 1` run the same way (the backend's own round per
# statement). The shapes, with the arguments of a typical create:
#
#   effect          the create's business effect alone, as make bench's
#                   baseline+outbox writes it: the request and its outbox
#                   row in one statement
#   key row         the key row alone, completed with its answer: a plain
#                   INSERT … ON CONFLICT DO NOTHING
#   key + effect    both in one statement, key row first (what a create
#                   must write, with nothing around it)
#   create          the create as the service runs it: create_demo_request.sql,
#                   the function that calls write_key and then writes the
#                   business rows where it wrote
#   create, no key CHECKs   the same without the key table's two CHECK
#                   constraints, which PostgreSQL parses again for every
#                   statement that writes the table
#
# Needs PostgreSQL's server binaries (as make test finds them) and valgrind;
# as root it runs PostgreSQL as the postgres user. About two minutes.
set -euo pipefail

n=${1:-2000}
here=$(cd "$(dirname "$0")/.." && pwd)
root=$(cd "$here/.." && pwd)
bin=${PG_BIN:-$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)}
for tool in "$bin/initdb" "$bin/pg_ctl" "$bin/postgres" "$bin/psql"; do
	[ -x "$tool" ] || { echo "statement-cost: no PostgreSQL server binaries (set PG_BIN)" >&2; exit 2; }
done
command -v valgrind >/dev/null || { echo "statement-cost: valgrind is not installed" >&2; exit 2; }

dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
as=()
if [ "$(id -u)" = 0 ]; then
	chown postgres "$dir"
	as=(runuser -u postgres --)
fi

# single DATA: the statements on stdin, one a line, in a single-user backend.
single() { "${as[@]}" "$bin/postgres" --single -D "$1" -c fsync=off demo; }

"${as[@]}" "$bin/initdb" -D "$dir/data" -A trust -U postgres --no-sync >/dev/null
# The migrations go in through a server of the moment, on a socket in $dir only.
"${as[@]}" "$bin/pg_ctl" -D "$dir/data" -w -l "$dir/server.log" \
	-o "-c listen_addresses= -k $dir -c fsync=off" start >/dev/null
psql=("${as[@]}" "$bin/psql" -h "$dir" -U postgres -X -q -v ON_ERROR_STOP=1)
"${psql[@]}" -d postgres -c "CREATE DATABASE demo"
for f in "$root"/migrations/0*.up.sql; do "${psql[@]}" -d demo -f "$f"; done
"${as[@]}" "$bin/pg_ctl" -D "$dir/data" -w stop >/dev/null
cp -a "$dir/data" "$dir/nocheck"
echo "ALTER TABLE idempotency_keys DROP CONSTRAINT idempotency_keys_lease_while_in_progress, DROP CONSTRAINT idempotency_keys_answer_when_completed;" |
	single "$dir/nocheck" >/dev/null 2>&1

# A create's arguments: a new key and request every time, an answer of the
# size the demo's create stores.
body="'\\x$(printf '{"requestId":"0193a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b","state":"accepted","topic":"bench","note":"a note of some length","createdAt":"2026-12-07T18:00:00Z"}' | od -An -tx1 | tr -d ' \n')'::bytea"
headers="'{\"Content-Type\":[\"application/json\"],\"Location\":[\"/v1/demo-requests/0193a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b\"]}'::jsonb"
fp="'9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08'"
key="INSERT INTO idempotency_keys VALUES ('bench', 'create_demo_request', gen_random_uuid()::text, $fp, 'completed', gen_random_uuid(), NULL, 201, $body, $headers, '0193a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b', now(), now(), now() + interval '1 day') ON CONFLICT DO NOTHING"
request="INSERT INTO demo_requests (id, actor_id, state, topic, note, created_at) SELECT gen_random_uuid(), 'bench', 'accepted', 'bench', 'a note of some length', now()"
outbox="INSERT INTO outbox (request_id, actor_id, next_attempt_at, created_at, updated_at) SELECT id, actor_id, created_at, created_at, created_at FROM request"

declare -A shape=(
	[select 1]="SELECT 1"
	[effect]="WITH request AS ($request RETURNING id, actor_id, created_at) $outbox"
	[key row]="$key"
	[key + effect]="WITH k AS ($key RETURNING 1), request AS ($request FROM k RETURNING id, actor_id, created_at) $outbox"
	[create]="SELECT * FROM create_demo_request(NULL, 'bench', 'create_demo_request', gen_random_uuid()::text, gen_random_uuid(), false, $fp, 86400000000, 201, $body, $headers, '0193a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b', gen_random_uuid(), 'accepted', 'bench', 'a note of some length', now())"
)

# instructions DATA SQL: the backend's instructions per execution of SQL.
instructions() {
	rm -rf "$dir/run"
	cp -a "$1" "$dir/run"
	{
		echo "PREPARE s AS $2;"
		for ((i = 0; i < n; i++)); do echo "EXECUTE s;"; done
	} >"$dir/script.sql"
	"${as[@]}" valgrind --tool=callgrind --callgrind-out-file="$dir/cg.out" \
		"$bin/postgres" --single -D "$dir/run" -c fsync=off demo <"$dir/script.sql" >"$dir/run.log" 2>&1
	if grep -q ERROR "$dir/run.log"; then
		grep -m1 ERROR "$dir/run.log" >&2
		exit 1
	fi
	echo $(($(awk '/^(summary|totals):/ {print $2; exit}' "$dir/cg.out") / n))
}

base=$(instructions "$dir/data" "${shape[select 1]}")
effect=$(($(instructions "$dir/data" "${shape[effect]}") - base))
printf '%-24s %9s %8s\n' shape instructions "÷ effect"
row() { printf '%-24s %9d %7.2f×\n' "$1" "$2" "$(echo "$2 / $effect" | bc -l)"; }
row effect "$effect"
for s in "key row" "key + effect" create; do
	row "$s" $(($(instructions "$dir/data" "${shape[$s]}") - base))
done
row "create, no key CHECKs" $(($(instructions "$dir/nocheck" "${shape[create]}") - base))
echo "(PostgreSQL $("$bin/postgres" --version | awk '{print $3}'), $n executions of each, less SELECT 1's $base)"
