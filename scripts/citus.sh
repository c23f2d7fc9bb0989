#!/usr/bin/env bash
# citus.sh: a local Citus cluster (a coordinator and two workers of
# PostgreSQL 17 with Citus 14) for make citus and make test-citus.
#
#   scripts/citus.sh build    build the root, if the cache does not have it
#   scripts/citus.sh start    build if needed, start the three servers, print
#                             the coordinator's URL (the only line on stdout)
#   scripts/citus.sh stop     stop them (all three, or what runs of them)
#   scripts/citus.sh status   say what runs
#   scripts/citus.sh url      print the coordinator's URL
#   scripts/citus.sh start NODE | stop NODE [fast|immediate]
#                             start or stop one node (coordinator, worker1,
#                             worker2): a worker down, for the tests
#   scripts/citus.sh reset    stop and delete the clusters' data
#   scripts/citus.sh test     start, run the Citus tests (make test-citus),
#                             stop what it started
#   scripts/citus.sh bench    a create and a replay on the cluster, each
#                             beside its business effect alone, and beside
#                             one PostgreSQL 17 of the same root (make
#                             bench-citus): req/s and CPU per request
#
# The root: Debian trixie made by mmdebstrap, with PostgreSQL 17 and Citus
# built from the vendored source release ($CITUS_VENDOR, default
# ../shared/vendor beside the clone). It is built once (about 5 minutes on
# two cores: docs/running.md, CI) into a per-user cache, $DEMO_API_CACHE (default
# ${XDG_CACHE_HOME:-~/.cache}/demo-api), under a name made of the source's
# sha256 and this script's recipe version, and renamed there only when
# complete: an interrupted build is started again, never used. Every clone
# of the project on the machine shares it; a start with the root built takes
# seconds.
#
# The clusters' data is the clone's own: .data/citus/{coordinator,worker1,
# worker2}, on 127.0.0.1 ports $CITUS_PORT (default 9700), +1 and +2. The
# servers run as the root's postgres user, chrooted into the root, each in a
# mount namespace of its own (unshare): the bind mounts of /proc, /dev and
# the data exist only inside it, and leave with the server. Nothing is
# mounted on the machine itself.
#
# Needs Linux, root (chroot, mounts) and, to build, mmdebstrap and the
# Debian mirror. Anything else gets one line saying so and exit status 2.
set -euo pipefail
shopt -s inherit_errexit # a failure inside $(...) stops the script too

recipe=2 # bump when the build below changes: the cache key changes with it
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
vendor="${CITUS_VENDOR:-$repo/../shared/vendor}"
tarball="$vendor/citus-14.0.1.tar.gz"
cache="${DEMO_API_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/demo-api}/citus"
mirror="${CITUS_MIRROR:-}" # else the machine's own Debian mirror (apt_mirror)
base_port="${CITUS_PORT:-9700}"
data="$repo/.data/citus"
# What the build of Citus includes: the server's headers (their clang and LLVM
# come along, unused: the build makes no JIT bitcode), a C compiler, and the
# headers of the libraries those headers and Citus's configure name.
packages=postgresql-17,postgresql-server-dev-17,gcc,make,libc6-dev,libpq-dev,libssl-dev,libkrb5-dev,libicu-dev,liblz4-dev,libzstd-dev
pgbin=/usr/lib/postgresql/17/bin
nodes=(coordinator worker1 worker2)

log() { echo "citus: $*" >&2; }
die() { log "$*"; exit 1; }
unsupported() { log "$*"; exit 2; }

[[ "$base_port" =~ ^[0-9]+$ ]] || die "CITUS_PORT must be a port number, not '$base_port'"

# can_run says why this machine cannot run the root, if it cannot.
can_run() {
  [[ "$(uname -s)" == Linux ]] || unsupported "needs Linux (a chroot made by mmdebstrap); this is $(uname -s). Run the Citus tests on a Linux machine, or point TEST_DATABASE_URL at a Citus coordinator."
  ((EUID == 0)) || unsupported "needs root (chroot and bind mounts): run it with sudo, or on a machine where you are root."
  command -v unshare >/dev/null && command -v chroot >/dev/null || unsupported "needs unshare and chroot (util-linux, coreutils)."
}

key() {
  [[ -r "$tarball" ]] || die "no Citus source at $tarball (set CITUS_VENDOR to the folder that has citus-14.0.1.tar.gz)"
  local sum
  sum="$(sha256sum "$tarball" | cut -c1-16)"
  echo "citus-14.0.1-$sum-r$recipe"
}

# inroot DIR CMD...: CMD chrooted into DIR, in a private mount namespace
# with /proc and /dev bound in (and the clone's data at /data, when it
# exists). The mounts end with the namespace: with CMD, or with the last
# process it left running (a server).
inroot() {
  local dir=$1
  shift
  local bind_data=""
  [[ -d "$data" ]] && bind_data="$data"
  unshare --mount --propagation private -- /bin/bash -euc '
    dir=$1 bind_data=$2; shift 2
    mount --bind /proc "$dir/proc"
    mount --rbind /dev "$dir/dev"
    if [[ -n "$bind_data" ]]; then mkdir -p "$dir/data"; mount --bind "$bind_data" "$dir/data"; fi
    exec chroot "$dir" /usr/bin/env -i PATH=/usr/local/bin:/usr/bin:/bin LANG=C.UTF-8 "$@"
  ' inroot "$dir" "$bind_data" "$@"
}

# apt_mirror prints the Debian archive this machine's apt uses (the first
# URI ending in /debian in its sources), so that the root is built from the
# same mirror as the machine's own packages.
apt_mirror() {
  local uri
  uri="$(cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources 2>/dev/null | grep -v "^[[:space:]]*#" |
    grep -oE '(https?|file)://[^[:space:]]+/debian/?([[:space:]]|$)' | head -n1 | tr -d '[:space:]')" || true
  [[ -n "$uri" ]] || die "no Debian mirror in this machine's apt sources: set CITUS_MIRROR to one"
  echo "${uri%/}"
}

build() {
  can_run
  local k root
  k="$(key)"
  root="$cache/$k"
  [[ -x "$root/$pgbin/postgres" && -f "$root/.complete" ]] && { log "root cached: $root"; echo "$root"; return; }
  command -v mmdebstrap >/dev/null || "$repo/scripts/setup.sh" mmdebstrap >&2 || unsupported "needs mmdebstrap to build the root once: 'apt-get install mmdebstrap' (Debian, Ubuntu)."
  [[ -n "$mirror" ]] || mirror="$(apt_mirror)"
  mkdir -p "$cache"
  # One build at a time per cache: a second caller waits for the first.
  exec 9>"$cache/.lock"
  log "waiting for the build lock ($cache/.lock)"
  flock 9
  if [[ -f "$root/.complete" ]]; then log "root cached: $root"; echo "$root"; return; fi
  rm -rf "$cache"/.build-* # what an interrupted build left
  local tmp
  tmp="$(mktemp -d "$cache/.build-$k.XXXXXX")"
  chmod 755 "$tmp" # the root's /, which its postgres user reads
  log "building the root in $tmp (mmdebstrap trixie, then Citus)"
  local started=$SECONDS
  # mmdebstrap installs the packages with apt in one go, keeps the
  # packages' services from starting, and, through its eatmydata hook (where
  # the machine's mmdebstrap has it), lets dpkg skip the syncs that only a
  # root that must survive a crash needs. It
  # mounts /proc and /sys in the target itself; in a private namespace, an
  # interrupted run leaves no mount behind.
  local hooks=() eatmydata=/usr/share/mmdebstrap/hooks/eatmydata
  [[ -d "$eatmydata" ]] && hooks=(--hook-dir="$eatmydata")
  unshare --mount --propagation private -- mmdebstrap --variant=minbase --include="$packages" \
    "${hooks[@]}" trixie "$tmp" "$mirror" >&2
  log "packages installed after $((SECONDS - started))s"
  mkdir -p "$tmp/src"
  tar -xzf "$tarball" -C "$tmp/src"
  # with_llvm=no: no JIT bitcode of Citus (clang would compile every file a
  # second time); PostgreSQL runs Citus's functions without it.
  inroot "$tmp" /bin/bash -euc "cd /src/citus-14.0.1 && ./configure --without-libcurl PG_CONFIG=$pgbin/pg_config &&
    make -s -j$(nproc) with_llvm=no && make -s install with_llvm=no" >&2
  log "Citus built after $((SECONDS - started))s"
  rm -rf "$tmp/src"
  # The cluster the package made is not used: the clusters live in the clone.
  rm -rf "$tmp"/var/lib/postgresql/17/main "$tmp"/etc/postgresql/17/main
  inroot "$tmp" $pgbin/postgres --version >&2
  date -u +%FT%TZ >"$tmp/.complete"
  mv -T "$tmp" "$root"
  log "root built in $((SECONDS - started))s: $root"
  echo "$root"
}

# pgowner is uid:gid of the root's postgres user: it owns the clusters.
pgowner() { awk -F: '$1 == "postgres" { print $3 ":" $4 }' "$1/etc/passwd"; }

# aspg ROOT CMD...: CMD in the root as its postgres user.
aspg() {
  local root=$1
  shift
  inroot "$root" /usr/bin/setpriv --reuid=postgres --regid=postgres --init-groups "$@"
}

port_of() { # port_of NODE: the cluster's three, and single (make bench-citus's one PostgreSQL)
  local i all=("${nodes[@]}" single)
  for i in "${!all[@]}"; do [[ "${all[i]}" == "$1" ]] && { echo $((base_port + i)); return; }; done
  die "no node '$1' (coordinator, worker1, worker2)"
}

# pid_of NODE: the postmaster's pid, if one runs for the node's data.
pid_of() {
  local f="$data/$1/postmaster.pid" pid
  [[ -f "$f" ]] || return 1
  pid="$(head -n1 "$f")"
  [[ "$pid" =~ ^[0-9]+$ && "$(cat "/proc/$pid/comm" 2>/dev/null)" == postgres ]] || return 1
  echo "$pid"
}

sql() { # sql ROOT PORT DB SQL: run SQL as postgres, print the rows unaligned
  aspg "$1" "$pgbin/psql" -X -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$2" -U postgres -d "$3" -Atqc "$4"
}

url() { echo "postgres://postgres@127.0.0.1:$base_port/demo_api?sslmode=disable"; }

start_node() { # start_node ROOT NODE
  local root=$1 node=$2 port
  port="$(port_of "$node")"
  if pid_of "$node" >/dev/null; then return; fi
  if [[ ! -f "$data/$node/PG_VERSION" ]]; then
    rm -rf "${data:?}/$node"
    aspg "$root" "$pgbin/initdb" -D "/data/$node" -U postgres --auth=trust -E UTF8 --locale=C >/dev/null
    # A throw-away cluster for tests and measurements: no fsync (a crash of
    # the machine may lose it), as pgtest's single PostgreSQL. Its commits
    # wait for their WAL write all the same (synchronous_commit, set at
    # every start below): a node stopped immediately, a crash of its
    # server, loses no acknowledged commit.
    [[ "$node" == single ]] || echo "shared_preload_libraries = 'citus'" >>"$data/$node/postgresql.conf"
    cat >>"$data/$node/postgresql.conf" <<CONF
listen_addresses = '127.0.0.1'
unix_socket_directories = ''
max_connections = 300
max_prepared_transactions = 200
fsync = off
full_page_writes = off
# Two workers: 8 shards a table (4 each) keep a test's schema cheap to make.
citus.shard_count = 8
CONF
  fi
  aspg "$root" "$pgbin/pg_ctl" -D "/data/$node" -l "/data/$node.log" -o "-p $port -c synchronous_commit=on" -w -t 60 start >/dev/null ||
    die "$node did not start: see $data/$node.log"
}

start() {
  can_run
  local root node
  root="$(build)"
  mkdir -p "$data"
  chown "$(pgowner "$root")" "$data"
  if [[ -f "$data/.formed" && "$(cat "$data/.formed")" != "$base_port" ]]; then
    die "the cluster in $data was formed on port $(cat "$data/.formed"): start it with CITUS_PORT=$(cat "$data/.formed"), or delete it (scripts/citus.sh reset)"
  fi
  for node in "${nodes[@]}"; do start_node "$root" "$node"; done
  if [[ ! -f "$data/.formed" ]]; then
    for node in "${nodes[@]}"; do
      sql "$root" "$(port_of "$node")" postgres "CREATE DATABASE demo_api" >/dev/null
      sql "$root" "$(port_of "$node")" demo_api "CREATE EXTENSION citus" >/dev/null
    done
    sql "$root" "$base_port" demo_api "SELECT citus_set_coordinator_host('127.0.0.1', $base_port)" >/dev/null
    sql "$root" "$base_port" demo_api "SELECT citus_add_node('127.0.0.1', $((base_port + 1)))" >/dev/null
    sql "$root" "$base_port" demo_api "SELECT citus_add_node('127.0.0.1', $((base_port + 2)))" >/dev/null
    echo "$base_port" >"$data/.formed"
  fi
  log "Citus $(sql "$root" "$base_port" demo_api "SELECT citus_version()" | awk '{ print $2 }'): coordinator on 127.0.0.1:$base_port, workers on $((base_port + 1)) and $((base_port + 2)) (data in $data)"
  url
}

# stop_node NODE [MODE]: fast (the default: sessions ended, a clean stop)
# or immediate (as a crash). Signals, so it needs no root built.
stop_node() {
  local node=$1 mode=${2:-fast} pid sig=INT
  [[ "$mode" == immediate ]] && sig=QUIT
  pid="$(pid_of "$node")" || return 0
  kill -"$sig" "$pid" 2>/dev/null || true
  for _ in $(seq 300); do
    [[ -d "/proc/$pid" ]] || { log "$node stopped"; return 0; }
    sleep 0.1
  done
  log "$node did not stop within 30 s of SIG$sig; stopping it immediately"
  kill -QUIT "$pid" 2>/dev/null || true
  for _ in $(seq 100); do [[ -d "/proc/$pid" ]] || return 0; sleep 0.1; done
  die "$node (pid $pid) did not stop"
}

stop() {
  local node
  if (($# > 0)); then
    port_of "$1" >/dev/null
    stop_node "$@"
    return
  fi
  # The workers first: a coordinator stopping waits for none of them.
  for node in worker2 worker1 coordinator; do stop_node "$node"; done
}

status() {
  local node pid rc=0
  for node in "${nodes[@]}"; do
    if pid="$(pid_of "$node")"; then
      echo "$node: running (pid $pid) on 127.0.0.1:$(port_of "$node")"
    else
      echo "$node: stopped"
      rc=3
    fi
  done
  return $rc
}

# The tests of make test-citus: those that hold on Citus today. EXPLAIN of
# what a request runs, a worker session's memory under 500 replays, a
# storm of 500 on one key, the store's scenarios
# (claim and finish, replay, takeovers, expiry, the sweeper, release, fifty
# racing claims, the one-phase writes, the cancel's rollback), the API's
# (create branches with the payload mismatch, a lost response, in progress,
# expiry, a lease taken over, racing requests on one key, the cancel, the
# outcome route, the delivery routes), the outbox delivered once (the
# dispatcher's tests, the cancel that stops a delivery, a third
# operation's events in order, transitions (and a reopen against a
# withdrawal) racing the dispatcher, the
# dispatch command and a dispatcher killed mid-delivery), two replicas
# started together, each operation's statement writing its key and its
# business rows together, and, last, a worker stopped under load, fast and
# immediately. Not here (docs/running.md, Sharding on Citus): tests
# that take the outbox or hold locks in a transaction of their own, and a
# trigger on the key table.
citus_tests='^(TestCitusExplain|TestCitusScanIsDelegated|TestCitusKeyWritesKeepAWorkerSessionsMemory|TestScansReachEveryRow|TestCitusScansAfterASplit|TestCitusStormOnOneKey|TestCitusReplicasStartTogether|TestStatementsWriteKeyAndBusinessRowsTogether|TestKeyRowsAreWrittenByWriteKey|TestStoreScenarios|TestOnePhase|TestCreateBranches|TestLostResponse|TestInProgress|TestExpiredKeyIsANewIntent|TestLeaseTakeover|TestConcurrentSameKey|TestCancel|TestConcurrentCancels|TestOutcomeRoute|TestDeliveryRoutes|TestDeliveryRouteShowsTheCancel|TestCancelAfterAReopen|TestTheCancelStopsTheDelivery|TestAThirdOperationsEventsReachTheDeskInOrder|TestAReopenPutsAWithdrawnSubmissionBack|TestAWithdrawalYieldsToAReopen|TestAWithdrawalRacesAReopen|TestTransitionsRaceTheDispatcher|TestOutboxEndToEnd|TestDispatchCommand|TestDispatcherKilledBetweenAcceptAndMark|TestACancelBeforeDeliveryNeverReachesTheDesk|TestACancelAfterDeliveryReachesTheDeskOnce|TestACancelWhileTheDispatcherHoldsTheDelivery|TestACancelAfterAFailedAttemptIsNeverSubmitted|TestReconcileSettlesACancelThatEndedUnknown|TestEachRequestIsSubmittedOnceWithOneCall|TestLostAnswerIsLookedUpNotResent|TestBacklogGrowsWhileTheDeskIsDownAndDrains|TestRacingDispatchersSendEachRowOnce|TestAStaleDispatcherChangesNothing|TestGiveUpAndReconcile|TestRunBacksOffWhileTheDatabaseIsGone|TestASlowCallHoldsOnlyItsOwnDelivery|TestAnActorAtItsShareIsReadOncePerPause)$'
citus_packages=(./internal/postgres ./internal/delivery ./internal/httpapi ./internal/service)
# A worker stopped under load runs last, alone: the packages' tests run
# at the same time, and the worker it stops holds their shards too.
citus_alone=('^TestCitusWorkerDown$' ./internal/service)

# test: start the cluster (if it is not running), run the Citus tests on
# it, and stop what this started, whatever the tests did. A skipped test
# is a failure here: every one of them must run on Citus.
# started and out are global: the EXIT trap reads them after the function.
started=()
out=""
test_citus() {
  local url node rc=0
  for node in "${nodes[@]}"; do pid_of "$node" >/dev/null || started+=("$node"); done
  out="$(mktemp)"
  trap 'rm -f "$out"; for n in "${started[@]}"; do stop_node "$n" || true; done' EXIT
  url="$(start)"
  run_go() { # run_go RUN PACKAGE...
    (cd "$repo" && TEST_DATABASE_URL="$url" CITUS_PORT="$base_port" ${GO:-go} test -tags citus -count=1 -v \
      -run "$1" "${@:2}" 2>&1) |
      grep -vE '^[[:space:]]*(=== (RUN|PAUSE|CONT)|--- PASS: [^[:space:]]+/|[^[:space:]]+_test\.go:[0-9]+: testdbconf: )|^PASS$' |
      tee -a "$out"
  }
  run_go "$citus_tests" "${citus_packages[@]}" || rc=1
  run_go "${citus_alone[@]}" || rc=1
  if grep -E -e '--- SKIP' "$out" >&2; then
    log "a test skipped on Citus: every test of make test-citus must run"
    rc=1
  fi
  grep -q 'pgtest: PostgreSQL from TEST_DATABASE_URL (Citus' "$out" || { log "the tests did not run on Citus"; rc=1; }
  return $rc
}

# bench: what a create and a replay cost on the cluster, each beside what it
# does without its key, under pgbench at 8 and 32 clients (make bench-citus;
# docs/capacity.md, On Citus). The shapes, on Citus and, for scale, on one
# PostgreSQL of the same root:
#   create    create_demo_request.sql on a new key of one of 64 actors, as
#             the store runs it (on Citus, delegated to the actor's worker)
#   effect    the same call of bench_effect (scripts/bench-citus.sql): the
#             request and its outbox row, no key; delegated the same way
#   replay    the create's statement on one of 16 completed keys of each
#             actor: it writes nothing and returns the row
#   read      the outcome route's lookup_key.sql: a one-row router read
# and on Citus alone two alternatives to the delegated function:
#   create3   the key row, the request and its outbox row as three router
#             statements in one transaction (the business rows only where
#             the key's INSERT ... ON CONFLICT DO NOTHING wrote)
#   effect2   the request and its outbox row as two router statements in
#             one transaction
# The shapes run interleaved, BENCH_ROUNDS rounds (default 3) of
# BENCH_SECONDS each (default 10), so that they see the same load; each
# figure is the median of its rounds. CPU is the database's alone: every
# process of each node's postmaster, living or exited, from /proc, the
# coordinator's and the workers' apart.
bench_secs="${BENCH_SECONDS:-10}"
bench_rounds="${BENCH_ROUNDS:-3}"
bench_started=()

# cpu_ticks PID...: the clock ticks of the postmasters and their children.
# Read it while no child exits (settle): a child that exits between the
# reading of its postmaster and its own is counted in neither.
cpu_ticks() {
  local f line rest ppid ut st cut cst total=0 pm want=" $* "
  for f in /proc/[0-9]*/stat; do
    read -r line 2>/dev/null <"$f" || continue
    rest="${line##*) }"
    read -r _ ppid _ _ _ _ _ _ _ _ _ ut st cut cst _ <<<"$rest"
    pm="${line%% *}"
    if [[ "$want" == *" $pm "* ]]; then
      total=$((total + ut + st + cut + cst))
    elif [[ "$want" == *" $ppid "* ]]; then
      total=$((total + ut + st))
    fi
  done
  echo "$total"
}

# children PID...: how many processes the postmasters have, exited ones not yet reaped included.
children() {
  local f line ppid n=0 want=" $* "
  for f in /proc/[0-9]*/stat; do
    read -r line 2>/dev/null <"$f" || continue
    read -r _ ppid _ <<<"${line##*) }"
    [[ "$want" == *" $ppid "* ]] && n=$((n + 1))
  done
  echo "$n"
}

# settle N PID...: wait (up to 10 s) until the postmasters have no more than
# N children: a run's backends (and, on Citus, the workers' backends of its
# coordinator's connections) have exited and their postmasters reaped them.
settle() {
  local n=$1 _
  shift
  for _ in $(seq 100); do
    (($(children "$@") <= n)) && return
    sleep 0.1
  done
}

# bench_scripts DIR: the pgbench scripts, from the statements' own files.
bench_scripts() {
  local dir=$1 body headers
  body="'\\x$(printf '{"id":"%s","state":"accepted","topic":"a topic of forty characters, about","note":"","created_at":"2026-12-06T00:00:00Z"}' 00000000-0000-0000-0000-000000000000 | od -An -tx1 | tr -d ' \n')'"
  headers="'{\"Content-Type\": \"application/problem+json\"}'"
  # The create's parameters, $1 to $17 (create_demo_request.sql names them).
  local args=(NULL :a "'demo-requests.create'" :k "md5(:a::text || '/' || :k || 't')::uuid" false "'fp'" 86400000000 201 "$body" "$headers"
    "md5(:a::text || '/' || :k)" "md5(:a::text || '/' || :k)::uuid" "'accepted'" "'a topic'" "''" "'2026-12-06T00:00:00Z'")
  local create effect lookup i
  create="$(grep -v '^--' "$repo/internal/postgres/sql/create_demo_request.sql")"
  effect="${create//create_demo_request(/bench_effect(}"
  lookup="$(grep -v '^--' "$repo/internal/postgres/sql/lookup_key.sql")"
  for ((i = 17; i >= 1; i--)); do
    create="${create//\$$i/${args[i - 1]}}" effect="${effect//\$$i/${args[i - 1]}}" lookup="${lookup//\$$i/${args[i - 1]}}"
  done
  local new='\set a random(1, 64)
\set k random(1000000, 1000000000000)'
  local old='\set a random(1, 64)
\set k random(1, 16)'
  printf '%s\n%s;\n' "$new" "$create" >"$dir/create.sql"
  printf '%s\n%s;\n' "$new" "$effect" >"$dir/effect.sql"
  printf '%s\n%s;\n' "$old" "$create" >"$dir/replay.sql"
  printf '%s\n%s;\n' "$old" "$lookup" >"$dir/read.sql"
  # The alternatives: the rows write_key's first INSERT and create_demo_request
  # write for a new key, as router statements. (\gset wants one row: a new
  # key's INSERT always returns it.)
  local request="INSERT INTO demo_requests (id, actor_id, state, topic, note, created_at)
VALUES (${args[12]}, :a, 'accepted', 'a topic', '', '2026-12-06T00:00:00Z');
INSERT INTO outbox (request_id, actor_id, next_attempt_at, created_at, updated_at)
VALUES (${args[12]}, :a, '2026-12-06T00:00:00Z', '2026-12-06T00:00:00Z', '2026-12-06T00:00:00Z');"
  printf '%s\nBEGIN;\n%s\nCOMMIT;\n' "$new" "$request" >"$dir/effect2.sql"
  printf '%s\nBEGIN;\n%s\n\\if :wrote = 1\n%s\n\\endif\nCOMMIT;\n' "$new" \
    "INSERT INTO idempotency_keys VALUES (:a, 'demo-requests.create', :k, 'fp', 'completed', ${args[4]}, NULL,
  201, $body, $headers, ${args[11]}, now(), now(), now() + interval '1 day')
ON CONFLICT (actor_id, operation, idem_key) DO NOTHING RETURNING 1 AS wrote \\gset" "$request" >"$dir/create3.sql"
  # The replay's keys, 16 completed keys of each actor.
  local a k line
  line="$(sed -n '3,$p' "$dir/create.sql")"
  for a in $(seq 64); do
    for k in $(seq 16); do sed -e "s/:a\b/'$a'/g" -e "s/:k\b/'$k'/g" <<<"$line"; done
  done >"$dir/preload.sql"
}

# median: the median of the numbers on stdin.
median() { sort -g | awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2]; else printf "%.2f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

bench() {
  can_run
  local root bin dir target shape clients round out n t0 t1 hz port load key idle
  root="$(build)"
  for node in "${nodes[@]}" single; do pid_of "$node" >/dev/null || bench_started+=("$node"); done
  trap 'for n in "${bench_started[@]}"; do stop_node "$n" || true; done' EXIT
  start >/dev/null
  start_node "$root" single
  [[ "$(sql "$root" "$(port_of single)" postgres "SELECT count(*) FROM pg_database WHERE datname = 'demo_api'")" == 1 ]] ||
    sql "$root" "$(port_of single)" postgres "CREATE DATABASE demo_api" >/dev/null
  bin="$(mktemp -d)"
  (cd "$repo" && ${GO:-go} build -o "$bin/demo-api" ./cmd/demo-api)
  dir="$data/bench"
  mkdir -p "$dir"
  bench_scripts "$dir"
  cp "$repo/scripts/bench-citus.sql" "$dir/"
  chmod -R a+rX "$dir"
  hz="$(getconf CLK_TCK)"
  declare -A shapes=([single]="create effect replay read" [citus]="create effect create3 effect2 replay read")
  for target in single citus; do
    port=$base_port
    [[ "$target" == single ]] && port="$(port_of single)"
    DATABASE_URL="postgres://postgres@127.0.0.1:$port/demo_api?sslmode=disable" "$bin/demo-api" migrate up >&2
    aspg "$root" "$pgbin/psql" -X -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$port" -U postgres -d demo_api -f /data/bench/bench-citus.sql
    # bench_effect returns key_write: on Citus a second migrate up delegates it as it delegates the store's key writes.
    [[ "$target" == citus ]] && DATABASE_URL="postgres://postgres@127.0.0.1:$port/demo_api?sslmode=disable" "$bin/demo-api" migrate up >&2
    sql "$root" "$port" demo_api "TRUNCATE idempotency_keys, demo_requests, outbox" >/dev/null
    aspg "$root" "$pgbin/psql" -X -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$port" -U postgres -d demo_api -f /data/bench/preload.sql >/dev/null
  done
  rm -rf "$bin"
  load="$(cut -d' ' -f1 /proc/loadavg)"
  # Per run: req/s, and the CPU ticks of each node (coordinator, worker1, worker2, or single).
  declare -A rate coord workers total
  local -a ticks0 ticks1 pids
  for ((round = 1; round <= bench_rounds; round++)); do
    for clients in 8 32; do
      for target in citus single; do
        port=$base_port pids=("$(pid_of coordinator)" "$(pid_of worker1)" "$(pid_of worker2)")
        [[ "$target" == single ]] && port="$(port_of single)" pids=("$(pid_of single)")
        for shape in ${shapes[$target]}; do
          idle="$(children "${pids[@]}")" ticks0=()
          for t0 in "${pids[@]}"; do ticks0+=("$(cpu_ticks "$t0")"); done
          out="$(aspg "$root" "$pgbin/pgbench" -n -h 127.0.0.1 -p "$port" -U postgres -M prepared \
            -c "$clients" -j 2 -T "$bench_secs" -f "/data/bench/$shape.sql" demo_api 2>&1)" ||
            die "pgbench $shape on $target failed: $out"
          settle "$idle" "${pids[@]}"
          ticks1=()
          for t1 in "${pids[@]}"; do ticks1+=("$(cpu_ticks "$t1")"); done
          n="$(awk -F': ' '/transactions actually processed/ { print $2 }' <<<"$out" | cut -d/ -f1)"
          key="$target.$shape.$clients"
          rate[$key]+="$(awk '/^tps = / { printf "%d", $3 }' <<<"$out") "
          # ms of CPU a request: of the coordinator (or the one PostgreSQL), of the workers, of all.
          read -r t0 t1 <<<"$(awk -v hz="$hz" -v n="$n" -v a="${ticks0[*]}" -v b="${ticks1[*]}" 'BEGIN {
            split(a, x); split(b, y); c = (y[1] - x[1]) / hz * 1000 / n; w = 0
            for (i = 2; i in y; i++) w += (y[i] - x[i]) / hz * 1000 / n
            printf "%.3f %.3f", c, w }')"
          coord[$key]+="$t0 " workers[$key]+="$t1 " total[$key]+="$(awk -v c="$t0" -v w="$t1" 'BEGIN { printf "%.3f", c + w }') "
          log "round $round, $target $shape, $clients clients: $(awk '/^tps = / { printf "%d", $3 }' <<<"$out") req/s, $t0 + $t1 ms CPU a request"
        done
      done
    done
  done
  med() { tr ' ' '\n' <<<"$1" | grep . | median; }
  ms() { awk -v v="$1" 'BEGIN { printf "%.2f ms", v }'; }
  rps() { printf "%.0f" "$(med "$1")"; }
  ratio() { awk -v a="$(med "${total[$1]}")" -v b="$(med "${total[$2]}")" 'BEGIN { printf "%.2f×", a / b }'; }
  echo "PostgreSQL $(sql "$root" "$(port_of single)" demo_api "SHOW server_version"), Citus $(sql "$root" "$base_port" demo_api "SELECT citus_version()" | awk '{ print $2 }'); $(nproc) CPUs, load average $load at the start, $(cut -d' ' -f1 /proc/loadavg) at the end; pgbench -M prepared, $bench_rounds interleaved rounds of ${bench_secs} s a shape, medians."
  echo
  echo "| on | request | clients | req/s | CPU per req | coordinator | workers |"
  echo "|---|---|---|---|---|---|---|"
  for target in citus single; do
    for shape in ${shapes[$target]}; do
      for clients in 8 32; do
        key="$target.$shape.$clients"
        if [[ "$target" == citus ]]; then
          echo "| Citus | $shape | $clients | $(rps "${rate[$key]}") | $(ms "$(med "${total[$key]}")") | $(ms "$(med "${coord[$key]}")") | $(ms "$(med "${workers[$key]}")") |"
        else
          echo "| one PostgreSQL | $shape | $clients | $(rps "${rate[$key]}") | $(ms "$(med "${total[$key]}")") | | |"
        fi
      done
    done
  done
  echo
  local ratios=("citus create effect" "citus replay read" "citus create3 effect2" "citus create effect2" "single create effect" "single replay read")
  local r
  echo "CPU per request, one shape ÷ another (make bench-citus's targets: create ÷ effect and replay ÷ read at most 1.5× on Citus):"
  for r in "${ratios[@]}"; do
    read -r target shape key <<<"$r"
    echo "- $( [[ $target == citus ]] && echo Citus || echo one PostgreSQL ): $shape ÷ $key $(ratio "$target.$shape.8" "$target.$key.8") at 8 clients, $(ratio "$target.$shape.32" "$target.$key.32") at 32"
  done
}

case "${1:-}" in
test) test_citus ;;
bench) bench ;;
build) build >/dev/null ;;
start)
  if (($# > 1)); then
    can_run
    root="$(build)"
    start_node "$root" "$2"
  else start; fi
  ;;
stop) stop "${@:2}" ;;
status) status ;;
url) url ;;
reset)
  stop
  rm -rf "${data:?}"
  ;;
*) die "usage: $0 test | bench | build | start [NODE] | stop [NODE [fast|immediate]] | status | url | reset" ;;
esac
