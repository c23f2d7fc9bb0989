#!/usr/bin/env bash
# setup.sh: install what the tests and tools need where it is missing, and
# say what it does. make test and .ci/run call it first; running it again is
# cheap: what is there is only named.
#
#   scripts/setup.sh            every need below but those in on_request
#   scripts/setup.sh NAME...    only those needs (e.g. scripts/setup.sh chromium)
#
# How a missing need is installed:
#   Debian, Ubuntu  apt-get install PACKAGE, as root or through `sudo -n`
#                   (apt-get update first when the package lists know no
#                   such package, or are too old to download from)
#   macOS           brew install FORMULA (Homebrew)
#   anything else   no install: it stops and prints the command to run
# A need that cannot be installed here stops the script (exit 1) with the
# exact command that would install it.
#
# To add a need: write a have_NAME function that succeeds when it is there
# (and prints where), and add a line to needs below with its packages.
set -euo pipefail

log() { echo "setup: $*" >&2; }
die() { log "$*"; exit 1; }

# needs: NAME | Debian packages, the first one apt knows is taken | Homebrew
# arguments ("" when macOS has it already) | what to run elsewhere.
needs=(
  "chromium|chromium chromium-browser|--cask chromium|run 'sudo dnf install chromium' (Fedora), 'sudo pacman -S chromium' (Arch) or 'winget install Google.Chrome' (Windows), or set CHROME_PATH to a Chrome or Chromium binary"
  "curl|curl||run 'sudo dnf install curl' (Fedora) or 'sudo pacman -S curl' (Arch)"
  "pgbouncer|pgbouncer|pgbouncer|run 'sudo dnf install pgbouncer' (Fedora) or 'sudo pacman -S pgbouncer' (Arch)"
  "docker|docker.io|--cask docker|install a Docker engine (https://docs.docker.com/engine/install/) and start it"
  "mmdebstrap|mmdebstrap||run 'sudo dnf install mmdebstrap' (Fedora), or install mmdebstrap from its source (it is one Perl script); the Citus cluster needs Linux"
  "pg_autoctl|postgresql-15-auto-failover postgresql-16-auto-failover postgresql-17-auto-failover||install pg_auto_failover for your PostgreSQL (https://pg-auto-failover.readthedocs.io, 'Installing pg_auto_failover'): Homebrew has no formula of it; on Fedora or RHEL, 'sudo dnf install pg_auto_failover_15' from the PGDG repository"
)

# on_request: needs that only a named call installs (the full demo's make
# test names chromium, its make chaos pg_autoctl, make image-check docker),
# so that make test does not install, or stop for, what no test of it uses.
on_request=" chromium pg_autoctl docker mmdebstrap "

# have_chromium: the browser the browser tests drive, found where
# internal/tools/browsertest looks for it.
have_chromium() {
  if [[ -n "${CHROME_PATH:-}" ]]; then
    command -v "$CHROME_PATH"
    return
  fi
  local c
  for c in chromium chromium-browser google-chrome google-chrome-stable chrome; do
    command -v "$c" && return 0
  done
  for c in "/Applications/Google Chrome.app/Contents/MacOS/Google Chrome" \
    "/Applications/Chromium.app/Contents/MacOS/Chromium"; do
    [[ -x "$c" ]] && echo "$c" && return 0
  done
  return 1
}

# have_mmdebstrap: mmdebstrap, which scripts/citus.sh builds the Citus
# cluster's root with, once per machine.
have_mmdebstrap() { command -v mmdebstrap; }

# have_curl: curl, which the README walkthrough test runs.
have_curl() { command -v curl; }

# have_pgbouncer: PgBouncer, which the tests of the service behind a pooler
# start (internal/tools/pgtest looks in the same places). Debian puts it in
# /usr/sbin, off a user's PATH.
have_pgbouncer() {
  command -v pgbouncer && return 0
  local p
  for p in /usr/sbin/pgbouncer /usr/local/bin/pgbouncer /opt/homebrew/bin/pgbouncer /opt/homebrew/sbin/pgbouncer; do
    [[ -x "$p" ]] && echo "$p" && return 0
  done
  return 1
}

# have_docker: a Docker engine that answers, which make image-check builds
# and runs the image with. One installed but stopped is started (start_docker).
have_docker() {
  command -v docker >/dev/null || return 1
  docker info >/dev/null 2>&1 || start_docker || return 1
  command -v docker
}

# start_docker starts the engine of this Linux machine: through systemd
# where it runs, else dockerd in the background as root, its log in
# /var/log/dockerd.log. Elsewhere (Docker Desktop) it is started by hand.
start_docker() {
  [[ "$(uname -s)" == Linux ]] || return 1
  command -v dockerd >/dev/null || [[ -x /usr/sbin/dockerd ]] || return 1
  log "starting the Docker engine"
  if [[ -d /run/systemd/system ]]; then
    as_root systemctl start docker || return 1
  else
    as_root sh -c 'PATH="$PATH:/usr/sbin"; nohup dockerd >>/var/log/dockerd.log 2>&1 &' || return 1
  fi
  local i
  for i in $(seq 60); do
    docker info >/dev/null 2>&1 && return 0
    sleep 0.5
  done
  log "the Docker engine did not answer within 30 s (its log: journalctl -u docker, or /var/log/dockerd.log)"
  return 1
}

# have_pg_autoctl: pg_auto_failover's pg_autoctl, which make chaos runs for
# its failover scenarios (demo/cmd/demo-chaos looks in the same places). Debian
# puts it beside the server binaries, off a user's PATH.
have_pg_autoctl() {
  command -v pg_autoctl && return 0
  local p
  for p in /usr/lib/postgresql/*/bin/pg_autoctl /usr/pgsql-*/bin/pg_autoctl /usr/local/bin/pg_autoctl; do
    [[ -x "$p" ]] && echo "$p" && return 0
  done
  return 1
}

# as_root runs a command as root: directly, or through sudo without a
# password prompt. It fails when neither can.
as_root() {
  if [[ "$(id -u)" == 0 ]]; then
    "$@"
  elif command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
    sudo -n "$@"
  else
    return 1
  fi
}

# debian_installed prints the first of the packages dpkg holds, and its
# status: "installed", or a step of an install or upgrade under way.
debian_installed() {
  local p status
  for p in "$@"; do
    status="$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null)" || continue
    case "${status##* }" in
      not-installed | config-files | "") ;;
      *) echo "$p ${status##* }" && return 0 ;;
    esac
  done
  return 1
}

# not_found_NAME says what to do when NAME's package is installed but NAME
# is not found; $1 is an executable of the package, if one was seen.
not_found_chromium() { echo "set CHROME_PATH to its binary${1:+ (e.g. CHROME_PATH=$1)}"; }
not_found() { echo "put it on PATH${1:+ (e.g. $1)}"; }

# debian_executable prints an executable of package pkg named like need.
debian_executable() {
  local f
  while read -r f; do
    [[ -f "$f" && -x "$f" ]] && echo "$f" && return 0
  done < <(dpkg-query -L "$1" 2>/dev/null | grep -E "/$2[^/]*\$" || true)
  return 1
}

# debian_package prints the first of the packages that apt can install.
debian_package() {
  local p
  for p in "$@"; do
    if apt-cache show "$p" >/dev/null 2>&1; then
      echo "$p"
      return 0
    fi
  done
  return 1
}

apt_updated=
apt_update() {
  [[ -z "$apt_updated" ]] || return 1
  apt_updated=1
  log "apt-get update"
  as_root apt-get update -qq -o DPkg::Lock::Timeout=300
}

apt_install() {
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq -o DPkg::Lock::Timeout=300 "$1" >/dev/null
}

# install_debian installs the first of pkgs that apt knows, updating the
# package lists first when they know none, or when they are too old to
# download from.
install_debian() {
  local name=$1 pkgs=$2 pkg hint="sudo apt-get update && sudo apt-get install ${2%% *}"
  as_root true || die "$name is missing, and installing it needs root (or sudo without a password); run: $hint"
  if ! pkg="$(debian_package $pkgs)"; then
    apt_update || die "apt-get update failed; run: $hint"
    pkg="$(debian_package $pkgs)" || die "$name is missing and apt knows no package of it (${pkgs// / or }): install it by hand"
  fi
  log "apt-get install $pkg (for $name)"
  if ! apt_install "$pkg"; then
    apt_update && log "apt-get install $pkg (for $name), again" && apt_install "$pkg" ||
      die "installing $pkg failed; run: sudo apt-get update && sudo apt-get install $pkg"
  fi
}

install_macos() {
  local name=$1 brew=$2 other=$3
  [[ -n "$brew" ]] || die "$name is missing: $other"
  command -v brew >/dev/null || die "$name is missing and Homebrew is not installed: install Homebrew, then run 'brew install $brew'"
  log "brew install $brew (for $name)"
  # shellcheck disable=SC2086 # $brew holds the arguments, e.g. --cask chromium
  brew install $brew || die "brew install $brew failed: run it by hand"
}

if [[ -n "${CHROME_PATH:-}" ]] && ! command -v "$CHROME_PATH" >/dev/null; then
  die "CHROME_PATH=$CHROME_PATH is no executable: fix it, or unset it"
fi

want=("$@")
for w in "${want[@]}"; do
  [[ " ${needs[*]%%|*} " == *" $w "* ]] || die "no need named $w (known: ${needs[*]%%|*})"
done
for line in "${needs[@]}"; do
  IFS='|' read -r name debian brew other <<<"$line"
  if ((${#want[@]})) && [[ " ${want[*]} " != *" $name "* ]]; then
    continue
  fi
  if ((${#want[@]} == 0)) && [[ "$on_request" == *" $name "* ]]; then
    continue
  fi
  if where="$("have_$name")"; then
    log "$name: $where"
    continue
  fi
  if command -v apt-get >/dev/null && command -v dpkg-query >/dev/null && held="$(debian_installed $debian)"; then
    # Installing it again would upgrade it, under whatever runs it now.
    pkg=${held% *} exe="$(debian_executable "${held% *}" "$name" || true)"
    hint="$(if declare -F "not_found_$name" >/dev/null; then "not_found_$name" "$exe"; else not_found "$exe"; fi)"
    [[ "${held##* }" == installed ]] ||
      die "$name: the package $pkg is being installed or upgraded (dpkg: ${held##* }): run this again when that ends"
    die "$name: installed (the package $pkg) but not found: $hint"
  elif command -v apt-get >/dev/null; then
    install_debian "$name" "$debian"
  elif [[ "$(uname -s)" == Darwin ]]; then
    install_macos "$name" "$brew" "$other"
  else
    die "$name is missing: $other"
  fi
  where="$("have_$name")" || die "$name was installed but is still not found"
  log "$name: $where (installed)"
done
