#!/usr/bin/env bash
# Makes sure the Debian packages a make target needs are installed, and only
# those:
#
#   scripts/ensure-deps.sh postgresql             # make demo
#   scripts/ensure-deps.sh postgresql pgbouncer   # make test, bench
#
# Known packages: postgresql (the server binaries: the tests and the demo run
# their own throwaway cluster), pgbouncer, redis-server, mariadb-server. When
# everything asked for is present it does nothing: no apt call. Otherwise, as
# root, it installs the missing ones from Debian's packages without creating
# or starting any system cluster or service, waiting up to ten minutes for an
# apt or dpkg run that holds the package locks; as anyone else it prints the
# exact command to run and fails. Never a silent skip.
set -euo pipefail

# How long to wait for another apt or dpkg run to release its locks.
lock_timeout=600

known="postgresql pgbouncer redis-server mariadb-server"

# have PACKAGE succeeds when what the project uses of PACKAGE is installed.
have() {
  case "$1" in
    postgresql) command -v initdb >/dev/null 2>&1 || compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null ;;
    pgbouncer) command -v pgbouncer >/dev/null 2>&1 || [ -x /usr/sbin/pgbouncer ] ;;
    redis-server) command -v redis-server >/dev/null 2>&1 || [ -x /usr/bin/redis-server ] ;;
    mariadb-server) command -v mariadbd >/dev/null 2>&1 || [ -x /usr/sbin/mariadbd ] ;;
    *) return 2 ;;
  esac
}

if [ $# -eq 0 ]; then
  echo "usage: $0 PACKAGE... (known: $known)" >&2
  exit 2
fi
missing=()
for pkg in "$@"; do
  rc=0
  have "$pkg" || rc=$?
  case $rc in
    0) ;;
    2) echo "ensure-deps: unknown package $pkg (known: $known)" >&2; exit 2 ;;
    *) missing+=("$pkg") ;;
  esac
done
[ ${#missing[@]} -eq 0 ] && exit 0

if [ "$(id -u)" -ne 0 ]; then
  echo "sqlock needs: ${missing[*]}. Install them with:" >&2
  echo "  sudo apt-get update && sudo apt-get install -y ${missing[*]}" >&2
  exit 1
fi

# apt_get runs apt-get, waiting for locks another apt or dpkg run holds.
# DPkg::Lock::Timeout makes apt-get itself wait for dpkg's locks and the
# archives lock, but not (apt 2.6) for the lists lock that `apt-get update`
# takes, so a run that failed on a lock, and changed nothing, is tried again
# until the same deadline.
apt_get() {
  local deadline=$((SECONDS + lock_timeout)) told=
  while true; do
    if apt-get -o DPkg::Lock::Timeout="$lock_timeout" "$@" 2>"$errfile"; then
      cat "$errfile" >&2 # warnings
      return 0
    fi
    if ! grep -q 'Could not get lock' "$errfile" || [ "$SECONDS" -ge "$deadline" ]; then
      cat "$errfile" >&2
      return 1
    fi
    if [ -z "$told" ]; then
      echo "ensure-deps: waiting up to ${lock_timeout}s for another apt run: $(grep -m1 'Could not get lock' "$errfile")" >&2
      told=1
    fi
    sleep 2
  done
}

echo "installing ${missing[*]} from Debian's packages" >&2
errfile=$(mktemp)
policy_added=
cleanup() {
  rm -f "$errfile"
  if [ -n "$policy_added" ]; then rm -f /usr/sbin/policy-rc.d; fi
}
trap cleanup EXIT
# No system cluster and no service start: the tests and the demo run their
# own servers.
mkdir -p /etc/postgresql-common
[ -e /etc/postgresql-common/createcluster.conf ] || echo 'create_main_cluster = false' >/etc/postgresql-common/createcluster.conf
if [ ! -e /usr/sbin/policy-rc.d ]; then
  printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
  chmod +x /usr/sbin/policy-rc.d
  policy_added=1
fi
export DEBIAN_FRONTEND=noninteractive
apt_get update -qq
apt_get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
for pkg in "${missing[@]}"; do
  have "$pkg" || { echo "ensure-deps: $pkg installed but not found" >&2; exit 1; }
done
