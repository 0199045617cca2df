#!/usr/bin/env bash
# Makes sure the PostgreSQL server binaries and PgBouncer that the tests use
# are installed. As root it installs them from Debian's packages without
# creating or starting any system cluster or service; otherwise it prints the
# exact command to run and fails. Never a silent skip.
set -euo pipefail

have_postgres() {
  command -v initdb >/dev/null 2>&1 && return 0
  compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null
}
have_pgbouncer() { command -v pgbouncer >/dev/null 2>&1 || [ -x /usr/sbin/pgbouncer ]; }

missing=()
have_postgres || missing+=(postgresql)
have_pgbouncer || missing+=(pgbouncer)
[ ${#missing[@]} -eq 0 ] && exit 0

if [ "$(id -u)" -ne 0 ]; then
  echo "sqlock tests need: ${missing[*]}. Install them with:" >&2
  echo "  sudo apt-get update && sudo apt-get install -y ${missing[*]}" >&2
  exit 1
fi

echo "installing ${missing[*]} from Debian's packages" >&2
# No system cluster and no service start: the tests run their own server.
mkdir -p /etc/postgresql-common
[ -e /etc/postgresql-common/createcluster.conf ] || echo 'create_main_cluster = false' > /etc/postgresql-common/createcluster.conf
policy_added=
if [ ! -e /usr/sbin/policy-rc.d ]; then
  printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d
  chmod +x /usr/sbin/policy-rc.d
  policy_added=1
fi
trap '[ -n "$policy_added" ] && rm -f /usr/sbin/policy-rc.d' EXIT
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
have_postgres || { echo "postgresql installed but initdb not found" >&2; exit 1; }
have_pgbouncer || { echo "pgbouncer installed but not found" >&2; exit 1; }
