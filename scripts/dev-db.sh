#!/usr/bin/env bash
# dev-db.sh: have a development PostgreSQL and print a database URL.
#
#   scripts/dev-db.sh             print the URL of database "demo_api" (the only
#                                 line on stdout), creating what is missing
#   scripts/dev-db.sh url NAME... the same for each database NAME on the
#                                 same server, a line each, e.g.
#                                 `scripts/dev-db.sh url demo_full reviewdesk`
#                                 (the full demo's make run: its own
#                                 databases, apart from the root's "demo_api")
#   scripts/dev-db.sh stop        stop the local cluster (make db-stop)
#   scripts/dev-db.sh reset       stop it and delete its data, or the Docker
#                                 service and its volume (make db-reset); the
#                                 next run starts fresh
#
# Where the server comes from, in this order:
#   1. $DATABASE_URL, if set: printed as is (with NAME: its database swapped
#      for NAME, which must exist there).
#   2. A Docker engine (docker info succeeds): `docker compose up -d --wait
#      postgres` (docker-compose.yml), on 127.0.0.1:${DEV_DB_PORT:-55432}.
#   3. A cluster of its own in .data/pg, from the local PostgreSQL binaries,
#      on 127.0.0.1:${DEV_DB_PORT:-54329}, run as the `postgres` OS user when
#      root. The binaries are looked for in `pg_config --bindir`, on PATH, in
#      /usr/lib/postgresql/*/bin (apt), /opt/homebrew/opt/postgresql@*/bin and
#      /usr/local/opt/postgresql@*/bin (Homebrew),
#      /Applications/Postgres.app/Contents/Versions/*/bin, newest first
#      (an existing cluster keeps the version that made it).
#
# DEV_DB_PORT sets the port, so that two clones on one machine can each run
# their own cluster: e.g. `DEV_DB_PORT=54330 make run` in the second one.
# Progress is one line per step on stderr; what the PostgreSQL tools print
# goes to .data/dev-db.log, the server's own log to .data/pg.log. Running it
# again is fine: it reuses what runs.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
data_root="$root/.data"
pgdata="$data_root/pg"
pgsock="$data_root/pgsock"
pglog="$data_root/pg.log"
toollog="$data_root/dev-db.log"
local_port="${DEV_DB_PORT:-54329}"
docker_port="${DEV_DB_PORT:-55432}"

log() { echo "dev-db: $*" >&2; }
die() { log "$*"; exit 1; }

install_hint="install the PostgreSQL server binaries: 'sudo apt-get install postgresql' (Debian, Ubuntu), 'brew install postgresql@16' (macOS, Homebrew) or Postgres.app (https://postgresapp.com); or run a Docker engine (docker compose is then used); or set DATABASE_URL"

[[ "$local_port" =~ ^[0-9]+$ ]] || die "DEV_DB_PORT must be a port number, not '$local_port'"

# tool runs a PostgreSQL tool with its output in the tool log; on failure it
# shows the end of that log and stops with message $1.
tool() {
  local what=$1
  shift
  mkdir -p "$data_root"
  echo "== $(date '+%Y-%m-%d %H:%M:%S') $*" >>"$toollog"
  if ! "$@" >>"$toollog" 2>&1; then
    tail -n 15 "$toollog" | sed 's/^/  /' >&2
    die "$what failed (the whole output is in $toollog)"
  fi
}

# resolve prints the folder of file $1, symbolic links followed (readlink -f
# is not on every macOS).
resolve_dir() {
  local p=$1 t
  while [[ -L "$p" ]]; do
    t="$(readlink "$p")"
    if [[ "$t" == /* ]]; then p="$t"; else p="$(dirname "$p")/$t"; fi
  done
  (cd "$(dirname "$p")" && pwd -P)
}

# newest_first prints the folders matching a pattern whose * is a version,
# the newest first ("latest", as Postgres.app names a link, before any
# number).
newest_first() {
  local pattern=$1 prefix suffix d v
  prefix="${pattern%%\**}"
  suffix="${pattern#*\*}"
  for d in $pattern; do
    [[ -d "$d" ]] || continue
    v="${d#"$prefix"}"
    v="${v%"$suffix"}"
    [[ "$v" =~ ^[0-9]+(\.[0-9]+)?$ ]] || v=999999
    printf '%s %s\n' "$v" "$d"
  done | sort -rn -k1,1 | cut -d' ' -f2-
}

has_binaries() { [[ -x "$1/initdb" && -x "$1/pg_ctl" && -x "$1/postgres" ]]; }

# bindir prints the folder of initdb, pg_ctl and postgres (see the header),
# preferring the version of an existing cluster.
bindir() {
  local candidates=() p d line want=""
  if p="$(command -v pg_config 2>/dev/null)" && d="$("$p" --bindir 2>/dev/null)"; then
    candidates+=("$d")
  fi
  for p in initdb pg_ctl; do
    if p="$(command -v "$p" 2>/dev/null)"; then
      candidates+=("$(resolve_dir "$p")")
    fi
  done
  for p in "/usr/lib/postgresql/*/bin" "/opt/homebrew/opt/postgresql@*/bin" \
    "/usr/local/opt/postgresql@*/bin" "/Applications/Postgres.app/Contents/Versions/*/bin"; do
    while IFS= read -r line; do
      [[ -n "$line" ]] && candidates+=("$line")
    done < <(newest_first "$p")
  done
  [[ -f "$pgdata/PG_VERSION" ]] && want="$(<"$pgdata/PG_VERSION")"
  if [[ -n "$want" ]]; then
    for d in ${candidates[@]+"${candidates[@]}"}; do
      if has_binaries "$d" && [[ "$("$d/postgres" --version 2>/dev/null)" =~ \)\ $want([.]|beta|rc|$) ]]; then
        echo "$d"
        return 0
      fi
    done
    log "no PostgreSQL $want binaries for the cluster in $pgdata (make db-reset starts a new one with the binaries you have)"
    return 1
  fi
  for d in ${candidates[@]+"${candidates[@]}"}; do
    if has_binaries "$d"; then
      echo "$d"
      return 0
    fi
  done
  return 1
}

# as_pg runs a command as the postgres OS user when root (PostgreSQL refuses
# to run as root), from / so that user need not enter the current folder.
as_pg() {
  if [[ $EUID -eq 0 ]]; then
    (cd / && runuser -u postgres -- "$@")
  else
    "$@"
  fi
}

running() { as_pg "$bin/pg_ctl" status -D "$pgdata" >/dev/null 2>&1; }

# running_port prints the port of the running cluster (postmaster.pid, line 4).
running_port() { sed -n 4p "$pgdata/postmaster.pid" 2>/dev/null; }

# refuse_while_in_use stops a reset while a server (make run) still uses the
# local cluster: deleting it under the server leaves it failing every
# second.
refuse_while_in_use() {
  [[ -f "$pgdata/PG_VERSION" ]] || return 0
  bin="$(bindir)" || return 0
  running && [[ -x "$bin/psql" ]] || return 0
  local n
  n="$(as_pg "$bin/psql" -h "$pgsock" -p "$(running_port)" -U postgres -d postgres -Atc \
    "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()" 2>/dev/null)" || return 0
  if [[ "$n" =~ ^[0-9]+$ ]] && ((n > 0)); then
    die "$n connections still use the local cluster: stop make run (Ctrl-C) first, then make db-reset"
  fi
}

stop_local() {
  if [[ ! -f "$pgdata/PG_VERSION" ]]; then
    log "no local cluster in $pgdata"
    return 0
  fi
  bin="$(bindir)" || die "no PostgreSQL binaries to stop the cluster in $pgdata; $install_hint"
  if running; then
    tool "pg_ctl stop" as_pg "$bin/pg_ctl" stop -w -m fast -D "$pgdata"
    log "stopped the local cluster in $pgdata"
  else
    log "the local cluster in $pgdata is not running"
  fi
}

# port_in_use reports whether something accepts connections on 127.0.0.1:$1.
port_in_use() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

start_local() {
  if [[ $EUID -eq 0 ]]; then
    id postgres >/dev/null 2>&1 || die "running as root, which PostgreSQL refuses, and there is no 'postgres' OS user (apt-get install postgresql creates one)"
    command -v runuser >/dev/null || die "running as root and no runuser (util-linux) to run PostgreSQL as 'postgres'"
  fi
  mkdir -p "$pgdata" "$pgsock"
  if [[ $EUID -eq 0 ]]; then
    chown postgres: "$data_root" "$pgdata" "$pgsock"
    as_pg test -x "$root" || die "user 'postgres' cannot enter $root; make it and its parents traversable (chmod o+x)"
  fi
  chmod 700 "$pgdata"

  if [[ ! -f "$pgdata/PG_VERSION" ]]; then
    if [[ -n "$(ls -A "$pgdata")" ]]; then
      die "$pgdata is not empty but holds no cluster; remove it (make db-reset)"
    fi
    log "initdb $pgdata ($bin)"
    tool initdb as_pg "$bin/initdb" -D "$pgdata" -U postgres --auth=trust -E UTF8 --locale=C
  fi

  if running; then
    local p
    p="$(running_port)"
    if [[ -n "$p" && "$p" != "$local_port" ]]; then
      die "the local cluster in $pgdata runs on port $p, not $local_port: set DEV_DB_PORT=$p, or stop it first (make db-stop)"
    fi
  else
    if port_in_use "$local_port"; then
      die "port $local_port is taken (by another clone's cluster?): pick another, e.g. DEV_DB_PORT=$((local_port + 1)) make run"
    fi
    log "starting PostgreSQL on 127.0.0.1:$local_port (server log: $pglog)"
    echo "== $(date '+%Y-%m-%d %H:%M:%S') pg_ctl start (port $local_port)" >>"$toollog"
    if ! as_pg "$bin/pg_ctl" start -w -D "$pgdata" -l "$pglog" \
      -o "-c listen_addresses=127.0.0.1 -c port=$local_port -c unix_socket_directories='$pgsock'" >>"$toollog" 2>&1; then
      tail -n 15 "$pglog" 2>/dev/null | sed 's/^/  /' >&2 || true
      die "PostgreSQL did not start (server log: $pglog)"
    fi
  fi
}

# local_db prints the URL of database $db on the local cluster, creating it
# if it is missing.
local_db() {
  local psql=psql
  if [[ -x "$bin/psql" ]]; then
    psql="$bin/psql"
  elif ! command -v psql >/dev/null; then
    die "no psql to create the database '$db' (apt-get install postgresql-client, brew install libpq)"
  fi
  local q=("$psql" -X -q -h 127.0.0.1 -p "$local_port" -U postgres -d postgres -v ON_ERROR_STOP=1)
  if [[ "$("${q[@]}" -tAc "SELECT 1 FROM pg_database WHERE datname = '$db'")" != 1 ]]; then
    log "creating database $db"
    tool "CREATE DATABASE $db" "${q[@]}" -c "CREATE DATABASE $db"
  fi
  echo "postgres://postgres@127.0.0.1:$local_port/$db?sslmode=disable"
}

start_docker() {
  export DEV_DB_PORT="$docker_port" # docker-compose.yml publishes this port
  log "Docker engine found: docker compose up -d --wait postgres (port $docker_port)"
  (cd "$root" && tool "docker compose up" docker compose up -d --wait postgres)
}

# docker_db prints the URL of database $db on the Docker service, creating
# it if it is missing.
docker_db() {
  local q=(docker compose exec -T postgres psql -X -q -U postgres -d postgres -v ON_ERROR_STOP=1)
  if [[ "$(cd "$root" && "${q[@]}" -tAc "SELECT 1 FROM pg_database WHERE datname = '$db'")" != 1 ]]; then
    log "creating database $db"
    (cd "$root" && tool "CREATE DATABASE $db" "${q[@]}" -c "CREATE DATABASE $db")
  fi
  echo "postgres://postgres:postgres@127.0.0.1:$docker_port/$db?sslmode=disable"
}

docker_ok() {
  command -v docker >/dev/null && docker info >/dev/null 2>&1 || return 1
  if ! docker compose version >/dev/null 2>&1; then
    log "a Docker engine runs but docker compose is missing (install the compose plugin); using local binaries"
    return 1
  fi
}

# swap_database prints URL $1 with its database replaced by $2.
swap_database() {
  local re='^([A-Za-z][A-Za-z0-9+.-]*://[^/?#]*)(/[^?#]*)?(.*)$'
  [[ "$1" =~ $re ]] || die "DATABASE_URL is not a postgres:// URL, so its database cannot be swapped for '$2'"
  echo "${BASH_REMATCH[1]}/$2${BASH_REMATCH[3]}"
}

dbs=(demo_api)
case "${1:-}" in
  "") ;;
  url)
    [[ $# -ge 2 ]] || die "usage: $0 url NAME..."
    shift
    dbs=("$@")
    for db in "${dbs[@]}"; do
      [[ "$db" =~ ^[a-z_][a-z0-9_]*$ ]] || die "a database name is lower-case letters, digits and _, not '$db'"
    done
    ;;
  stop)
    stop_local
    exit 0
    ;;
  reset)
    refuse_while_in_use
    stop_local
    rm -rf "$pgdata" "$pgsock" "$pglog" "$toollog"
    log "deleted the local cluster in $pgdata"
    if docker_ok; then
      (cd "$root" && tool "docker compose down" docker compose down --volumes)
      log "removed the Docker services of docker-compose.yml and their volumes"
    fi
    exit 0
    ;;
  *)
    die "usage: $0 [url NAME... | stop | reset]"
    ;;
esac

if [[ -n "${DATABASE_URL:-}" ]]; then
  if [[ "${1:-}" == url ]]; then
    for db in "${dbs[@]}"; do
      log "DATABASE_URL is set: database $db on its server (create it there if it does not exist)"
      swap_database "$DATABASE_URL" "$db"
    done
  else
    echo "$DATABASE_URL"
  fi
  exit 0
fi

# One check of Docker for all the names, so that what it finds is said once.
if docker_ok; then
  start_docker
  for db in "${dbs[@]}"; do docker_db; done
  exit 0
fi

if bin="$(bindir)"; then
  start_local
  for db in "${dbs[@]}"; do local_db; done
  exit 0
fi
[[ -f "$pgdata/PG_VERSION" ]] && exit 1 # bindir said why
die "no PostgreSQL for development: $install_hint"
