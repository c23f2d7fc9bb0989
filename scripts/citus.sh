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
#
# The root: Debian trixie made by debootstrap, with PostgreSQL 17 and Citus
# built from the vendored source release ($CITUS_VENDOR, default
# ../shared/vendor beside the clone). It is built once (about 25 minutes on
# two cores) into a per-user cache, $DEMO_API_CACHE (default
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
# Needs Linux, root (chroot, mounts) and, to build, debootstrap and the
# Debian mirror. Anything else gets one line saying so and exit status 2.
set -euo pipefail
shopt -s inherit_errexit # a failure inside $(...) stops the script too

recipe=1 # bump when the build below changes: the cache key changes with it
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
vendor="${CITUS_VENDOR:-$repo/../shared/vendor}"
tarball="$vendor/citus-14.0.1.tar.gz"
cache="${DEMO_API_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/demo-api}/citus"
mirror="${CITUS_MIRROR:-http://deb.debian.org/debian}"
base_port="${CITUS_PORT:-9700}"
data="$repo/.data/citus"
packages=postgresql-17,postgresql-server-dev-17,build-essential,autoconf,libcurl4-openssl-dev,liblz4-dev,libzstd-dev,libkrb5-dev,libssl-dev,libicu-dev,libselinux1-dev,libxml2-dev,libxslt1-dev,libpam0g-dev,libreadline-dev,zlib1g-dev,pkg-config,locales
pgbin=/usr/lib/postgresql/17/bin
nodes=(coordinator worker1 worker2)

log() { echo "citus: $*" >&2; }
die() { log "$*"; exit 1; }
unsupported() { log "$*"; exit 2; }

[[ "$base_port" =~ ^[0-9]+$ ]] || die "CITUS_PORT must be a port number, not '$base_port'"

# can_run says why this machine cannot run the root, if it cannot.
can_run() {
  [[ "$(uname -s)" == Linux ]] || unsupported "needs Linux (a chroot made by debootstrap); this is $(uname -s). Run the Citus tests on a Linux machine, or point TEST_DATABASE_URL at a Citus coordinator."
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

build() {
  can_run
  local k root
  k="$(key)"
  root="$cache/$k"
  [[ -x "$root/$pgbin/postgres" && -f "$root/.complete" ]] && { log "root cached: $root"; echo "$root"; return; }
  command -v debootstrap >/dev/null || unsupported "needs debootstrap to build the root once: 'apt-get install debootstrap' (Debian, Ubuntu)."
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
  log "building the root in $tmp (debootstrap trixie, then Citus; about 25 minutes on two cores)"
  local started=$SECONDS
  # debootstrap mounts /proc and /sys in the target itself; in a private
  # namespace, an interrupted run leaves no mount behind.
  unshare --mount --propagation private -- debootstrap --variant=minbase --include="$packages" trixie "$tmp" "$mirror"
  log "debootstrap done after $((SECONDS - started))s"
  # A service the packages' scripts may have started in the root.
  local pid
  for pid in $(cat "$tmp"/var/run/postgresql/*.pid 2>/dev/null | head -n1); do kill "$pid" 2>/dev/null || true; done
  mkdir -p "$tmp/src"
  tar -xzf "$tarball" -C "$tmp/src"
  inroot "$tmp" /bin/bash -euc "cd /src/citus-14.0.1 && ./configure --without-libcurl PG_CONFIG=$pgbin/pg_config && make -j2 && make install"
  rm -rf "$tmp/src" "$tmp"/var/cache/apt/archives/*.deb
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

port_of() { # port_of NODE
  local i
  for i in "${!nodes[@]}"; do [[ "${nodes[i]}" == "$1" ]] && { echo $((base_port + i)); return; }; done
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

url() { echo "postgres://postgres@127.0.0.1:$base_port/demo?sslmode=disable"; }

start_node() { # start_node ROOT NODE
  local root=$1 node=$2 port
  port="$(port_of "$node")"
  if pid_of "$node" >/dev/null; then return; fi
  if [[ ! -f "$data/$node/PG_VERSION" ]]; then
    rm -rf "${data:?}/$node"
    aspg "$root" "$pgbin/initdb" -D "/data/$node" -U postgres --auth=trust -E UTF8 --locale=C >/dev/null
    # A throw-away cluster for tests and measurements: no fsync (a crash of
    # the machine may lose it), as pgtest's single PostgreSQL.
    cat >>"$data/$node/postgresql.conf" <<CONF
shared_preload_libraries = 'citus'
listen_addresses = '127.0.0.1'
port = $port
unix_socket_directories = ''
max_connections = 300
max_prepared_transactions = 200
fsync = off
synchronous_commit = off
full_page_writes = off
# Two workers: 8 shards a table (4 each) keep a test's schema cheap to make.
citus.shard_count = 8
CONF
  fi
  aspg "$root" "$pgbin/pg_ctl" -D "/data/$node" -l "/data/$node.log" -w -t 60 start >/dev/null ||
    die "$node did not start: see $data/$node.log"
}

start() {
  can_run
  local root node
  root="$(build)"
  mkdir -p "$data"
  chown "$(pgowner "$root")" "$data"
  for node in "${nodes[@]}"; do start_node "$root" "$node"; done
  if [[ ! -f "$data/.formed" ]]; then
    for node in "${nodes[@]}"; do
      sql "$root" "$(port_of "$node")" postgres "CREATE DATABASE demo" >/dev/null
      sql "$root" "$(port_of "$node")" demo "CREATE EXTENSION citus" >/dev/null
    done
    sql "$root" "$base_port" demo "SELECT citus_set_coordinator_host('127.0.0.1', $base_port)" >/dev/null
    sql "$root" "$base_port" demo "SELECT citus_add_node('127.0.0.1', $((base_port + 1)))" >/dev/null
    sql "$root" "$base_port" demo "SELECT citus_add_node('127.0.0.1', $((base_port + 2)))" >/dev/null
    touch "$data/.formed"
  fi
  log "Citus $(sql "$root" "$base_port" demo "SELECT citus_version()" | awk '{ print $2 }'): coordinator on 127.0.0.1:$base_port, workers on $((base_port + 1)) and $((base_port + 2)) (data in $data)"
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
# what a request runs, a storm of 500 on one key, the store's scenarios
# (claim and finish, replay, takeovers, expiry, the sweeper, release, fifty
# racing claims, the one-phase writes, the cancel's rollback), the API's
# (create branches with the payload mismatch, a lost response, in progress,
# expiry, a lease taken over, racing requests on one key, the cancel, the
# outcome route, the delivery routes), the outbox delivered once (the
# dispatcher's tests, the cancel that stops a delivery, a third
# operation's events in order, transitions racing the dispatcher, the
# dispatch command and a dispatcher killed mid-delivery), and, last, a
# worker stopped under load. Not here (docs/running.md, Sharding on Citus): tests
# that take the outbox or hold locks in a transaction of their own, and a
# trigger on the key table.
citus_tests='^(TestCitusExplain|TestCitusScans|TestCitusStormOnOneKey|TestStoreScenarios|TestOnePhase|TestCreateBranches|TestLostResponse|TestInProgress|TestExpiredKeyIsANewIntent|TestLeaseTakeover|TestConcurrentSameKey|TestCancel|TestConcurrentCancels|TestOutcomeRoute|TestDeliveryRoutes|TestDeliveryRouteShowsTheCancel|TestCancelAfterAReopen|TestTheCancelStopsTheDelivery|TestAThirdOperationsEventsReachTheDeskInOrder|TestTransitionsRaceTheDispatcher|TestOutboxEndToEnd|TestDispatchCommand|TestDispatcherKilledBetweenAcceptAndMark|TestACancelBeforeDeliveryNeverReachesTheDesk|TestACancelAfterDeliveryReachesTheDeskOnce|TestACancelWhileTheDispatcherHoldsTheDelivery|TestACancelAfterAFailedAttemptIsNeverSubmitted|TestReconcileSettlesACancelThatEndedUnknown|TestEachRequestIsSubmittedOnceWithOneCall|TestLostAnswerIsLookedUpNotResent|TestBacklogGrowsWhileTheDeskIsDownAndDrains|TestRacingDispatchersSendEachRowOnce|TestAStaleDispatcherChangesNothing|TestGiveUpAndReconcile|TestRunBacksOffWhileTheDatabaseIsGone|TestASlowCallHoldsOnlyItsOwnDelivery|TestAnActorAtItsShareIsReadOncePerPause)$'
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

case "${1:-}" in
test) test_citus ;;
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
*) die "usage: $0 test | build | start [NODE] | stop [NODE [fast|immediate]] | status | url | reset" ;;
esac
