#!/usr/bin/env bash
# System packages the test suite drives for real: Chromium for the inspector's browser test,
# PostgreSQL's server binaries (initdb, pg_ctl) for the throwaway server the Postgres tests start.
set -euo pipefail

has_initdb() {
  command -v initdb >/dev/null 2>&1 && return 0
  compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null
}

missing=()
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
has_initdb || missing+=(postgresql)
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "missing system packages: ${missing[*]} (install them as root: apt-get install ${missing[*]})" >&2
    exit 1
  fi
  echo "installing system packages: ${missing[*]}"
  # The tests start their own server in a temporary folder, so Debian's default cluster
  # (15/main on port 5432, run by postgresql.service) is never used: have the package skip
  # creating it, for this install only.
  no_main_cluster=/etc/postgresql-common/createcluster.d/zincir-no-main-cluster.conf
  if [[ " ${missing[*]} " == *" postgresql "* ]] && [ ! -e "$no_main_cluster" ]; then
    mkdir -p "$(dirname "$no_main_cluster")"
    echo "create_main_cluster = false" >"$no_main_cluster"
    trap 'rm -f "$no_main_cluster"' EXIT
  fi
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
  if [[ " ${missing[*]} " == *" postgresql "* ]] && ! has_initdb; then
    echo "installed postgresql but found no initdb on PATH or in /usr/lib/postgresql/*/bin" >&2
    exit 1
  fi
fi
