#!/usr/bin/env bash
# Makes sure the Debian packages a make target needs are installed, and only
# those:
#
#   scripts/ensure-deps.sh postgresql             # make demo
#   scripts/ensure-deps.sh postgresql pgbouncer   # make test, bench
#
# Known packages: postgresql (the server binaries: the tests and the demo run
# their own throwaway cluster), pgbouncer, redis-server, mariadb-server,
# nodejs and npm (the dynamo module's tests run dynalite, installed by npm),
# etcd-server (the etcdlock module's tests run a three-member cluster of it). When
# everything asked for is present it does nothing: no apt call. Otherwise, as
# root, it installs the missing ones from Debian's packages without creating
# or starting any system cluster or service, waiting up to ten minutes for an
# apt or dpkg run that holds the package locks; as anyone else it prints the
# exact command to run and fails. Never a silent skip.
#
# Sourced (scripts/ensure_deps_test.go does), it only defines its functions.
set -euo pipefail

# How long to wait for another apt or dpkg run to release its locks, and how
# often to look again where apt-get does not wait by itself.
lock_timeout=600
lock_poll=2

known="postgresql pgbouncer redis-server mariadb-server nodejs npm etcd-server"

# have PACKAGE succeeds when what the project uses of PACKAGE is installed;
# it returns 2 for a package it does not know.
have() {
  case "$1" in
    postgresql) command -v initdb >/dev/null 2>&1 || compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null ;;
    pgbouncer) command -v pgbouncer >/dev/null 2>&1 || [ -x /usr/sbin/pgbouncer ] ;;
    redis-server) command -v redis-server >/dev/null 2>&1 || [ -x /usr/bin/redis-server ] ;;
    mariadb-server) command -v mariadbd >/dev/null 2>&1 || [ -x /usr/sbin/mariadbd ] ;;
    nodejs) command -v node >/dev/null 2>&1 ;;
    npm) command -v npm >/dev/null 2>&1 ;;
    etcd-server) command -v etcd >/dev/null 2>&1 || [ -x /usr/bin/etcd ] ;;
    *) return 2 ;;
  esac
}

# apt_get runs apt-get, waiting for locks another apt or dpkg run holds.
# DPkg::Lock::Timeout makes apt-get itself wait for dpkg's locks and the
# archives lock, but not (apt 2.6) for the lists lock that `apt-get update`
# takes, so a run that failed on a lock, and so changed nothing, is tried
# again until the same deadline. Its standard error is passed on.
apt_get() {
  local deadline=$((SECONDS + lock_timeout)) told='' errfile rc
  errfile=$(mktemp)
  while true; do
    rc=0
    apt-get -o DPkg::Lock::Timeout="$lock_timeout" "$@" 2>"$errfile" || rc=$?
    if [ "$rc" -eq 0 ] || ! grep -q 'Could not get lock' "$errfile" || [ "$SECONDS" -ge "$deadline" ]; then
      cat "$errfile" >&2
      rm -f "$errfile"
      return "$rc"
    fi
    if [ -z "$told" ]; then
      echo "ensure-deps: waiting up to ${lock_timeout}s for another apt run: $(grep -m1 'Could not get lock' "$errfile")" >&2
      told=1
    fi
    sleep "$lock_poll"
  done
}

main() {
  if [ $# -eq 0 ]; then
    echo "usage: ensure-deps.sh PACKAGE... (known: $known)" >&2
    return 2
  fi
  local pkg rc missing=()
  for pkg in "$@"; do
    rc=0
    have "$pkg" || rc=$?
    case $rc in
      0) ;;
      2) echo "ensure-deps: unknown package $pkg (known: $known)" >&2; return 2 ;;
      *) missing+=("$pkg") ;;
    esac
  done
  [ ${#missing[@]} -eq 0 ] && return 0

  if [ "$(id -u)" -ne 0 ]; then
    echo "sqlock needs: ${missing[*]}. Install them with:" >&2
    echo "  sudo apt-get update && sudo apt-get install -y ${missing[*]}" >&2
    return 1
  fi
  echo "installing ${missing[*]} from Debian's packages" >&2
  install_packages "${missing[@]}"
}

# install_packages installs the packages from Debian's packages, as root.
install_packages() {
  # No system cluster and no service start: the tests and the demo run
  # their own servers.
  mkdir -p /etc/postgresql-common
  [ -e /etc/postgresql-common/createcluster.conf ] || echo 'create_main_cluster = false' >/etc/postgresql-common/createcluster.conf
  local policy_added='' rc=0 pkg
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
    chmod +x /usr/sbin/policy-rc.d
    policy_added=1
    # Removed on any exit, also an interrupted one.
    trap 'rm -f /usr/sbin/policy-rc.d' EXIT
  fi
  export DEBIAN_FRONTEND=noninteractive
  { apt_get update -qq && apt_get install -y -qq --no-install-recommends "$@" >/dev/null; } || rc=$?
  if [ -n "$policy_added" ]; then
    rm -f /usr/sbin/policy-rc.d
    trap - EXIT
  fi
  [ "$rc" -eq 0 ] || return "$rc"
  for pkg in "$@"; do
    have "$pkg" || { echo "ensure-deps: $pkg installed but not found" >&2; return 1; }
  done
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  main "$@"
fi
