#!/usr/bin/env bash
# dev-db.sh: have a development PostgreSQL and print its URL.
#
#   scripts/dev-db.sh        print a DATABASE_URL (last and only line on stdout)
#   scripts/dev-db.sh stop   stop the local cluster, if this script started one
#
# Where the database comes from, in this order:
#   1. $DATABASE_URL, if set: printed as is.
#   2. A Docker engine (docker info succeeds): `docker compose up -d --wait
#      postgres` (docker-compose.yml), on 127.0.0.1:55432.
#   3. A persistent local cluster from the PostgreSQL binaries (PATH, then
#      /usr/lib/postgresql/*/bin, newest first) in .data/pg, on
#      127.0.0.1:54329, run as the `postgres` OS user when root.
# Progress goes to stderr. Running it again is fine: it reuses what runs.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
data_root="$root/.data"
pgdata="$data_root/pg"
pgsock="$data_root/pgsock"
pglog="$data_root/pg.log"
port=54329
db=demo
local_url="postgres://postgres@127.0.0.1:$port/$db?sslmode=disable"
docker_url="postgres://postgres:postgres@127.0.0.1:55432/$db?sslmode=disable"

log() { echo "dev-db: $*" >&2; }
die() { log "$*"; exit 1; }

# bindir prints the folder of initdb/pg_ctl/postgres: the one matching an
# existing cluster's version if installed, else PATH, else the newest
# /usr/lib/postgresql/*/bin.
bindir() {
  local candidates=() p d
  if [[ -f "$pgdata/PG_VERSION" ]]; then
    candidates+=("/usr/lib/postgresql/$(<"$pgdata/PG_VERSION")/bin")
  fi
  for p in initdb pg_ctl; do
    if p="$(command -v "$p")"; then
      candidates+=("$(dirname "$(readlink -f "$p")")")
    fi
  done
  while IFS= read -r d; do
    candidates+=("$d")
  done < <(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -t/ -k4,4 -V -r)
  for d in ${candidates[@]+"${candidates[@]}"}; do
    if [[ -x "$d/initdb" && -x "$d/pg_ctl" && -x "$d/postgres" ]]; then
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

stop_local() {
  if [[ ! -f "$pgdata/PG_VERSION" ]]; then
    log "no local cluster in $pgdata"
    return 0
  fi
  bin="$(bindir)" || die "no PostgreSQL binaries to stop the cluster in $pgdata"
  if running; then
    as_pg "$bin/pg_ctl" stop -w -m fast -D "$pgdata" >&2
    log "stopped the local cluster in $pgdata"
  else
    log "the local cluster in $pgdata is not running"
  fi
}

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
      die "$pgdata is not empty but holds no cluster; remove it"
    fi
    log "initdb $pgdata ($bin)"
    as_pg "$bin/initdb" -D "$pgdata" -U postgres --auth=trust -E UTF8 --locale=C >&2
  fi

  if running; then
    log "local cluster in $pgdata already runs"
  else
    log "starting PostgreSQL on 127.0.0.1:$port (log: $pglog)"
    if ! as_pg "$bin/pg_ctl" start -w -D "$pgdata" -l "$pglog" \
      -o "-c listen_addresses=127.0.0.1 -c port=$port -c unix_socket_directories='$pgsock'" >&2; then
      tail -n 20 "$pglog" >&2 || true
      die "PostgreSQL did not start"
    fi
  fi

  local psql=psql
  if [[ -x "$bin/psql" ]]; then
    psql="$bin/psql"
  elif ! command -v psql >/dev/null; then
    die "no psql to create the database '$db' (apt-get install postgresql-client)"
  fi
  local q=("$psql" -X -q -h 127.0.0.1 -p "$port" -U postgres -d postgres -v ON_ERROR_STOP=1)
  if [[ "$("${q[@]}" -tAc "SELECT 1 FROM pg_database WHERE datname = '$db'")" != 1 ]]; then
    log "creating database $db"
    "${q[@]}" -c "CREATE DATABASE $db" >&2
  fi
  echo "$local_url"
}

case "${1:-}" in
  stop)
    stop_local
    exit 0
    ;;
  "") ;;
  *)
    die "usage: $0 [stop]"
    ;;
esac

if [[ -n "${DATABASE_URL:-}" ]]; then
  echo "$DATABASE_URL"
  exit 0
fi

if command -v docker >/dev/null && docker info >/dev/null 2>&1; then
  if docker compose version >/dev/null 2>&1; then
    log "Docker engine found: docker compose up -d --wait postgres"
    (cd "$root" && docker compose up -d --wait postgres) >&2
    echo "$docker_url"
    exit 0
  fi
  log "a Docker engine runs but docker compose is missing (install the compose plugin); trying local binaries"
fi

if bin="$(bindir)"; then
  start_local
  exit 0
fi

die "no PostgreSQL for development: install the PostgreSQL server binaries (e.g. apt-get install postgresql), or run a Docker engine (then docker compose is used), or set DATABASE_URL"
