#!/usr/bin/env bash
# Runs a command with a private PostgreSQL cluster for the tests, and JOBWIRE_TEST_POSTGRES
# naming it:  scripts/with-postgres.sh [--durable] COMMAND [ARGS...]
#
# The cluster lives in a new temporary directory (data and socket), listens on a free port of
# 127.0.0.1 only, and is stopped and removed when the command ends, whatever its result; the
# command's exit status is the script's. It never touches a system PostgreSQL service. initdb
# refuses to run as root, so as root the cluster runs as the `postgres` user.
#
# Test clusters run with fsync off (a crash of the machine may lose them; nothing is kept);
# --durable keeps PostgreSQL's default durability, for benchmarks.
#
# When JOBWIRE_TEST_POSTGRES is set already, the command runs against that server. When no
# PostgreSQL binaries are found (PGBIN, or Debian's /usr/lib/postgresql/N/bin), the command
# runs without a server and the PostgreSQL tests skip, except under CI, where this fails.
set -euo pipefail

durable=0
if [ "${1:-}" = "--durable" ]; then
  durable=1
  shift
fi
if [ $# -eq 0 ]; then
  echo "usage: scripts/with-postgres.sh [--durable] COMMAND [ARGS...]" >&2
  exit 2
fi
if [ -n "${JOBWIRE_TEST_POSTGRES:-}" ]; then
  exec "$@"
fi

ci() { [ -n "${CI:-}" ] && [ "${CI}" != "false" ] && [ "${CI}" != "0" ]; }

pgbin=${PGBIN:-}
if [ -z "$pgbin" ]; then
  pgbin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1 || true)
fi
if [ -z "$pgbin" ] || [ ! -x "$pgbin/initdb" ]; then
  if ci; then
    echo "with-postgres: no PostgreSQL binaries found (set PGBIN, or install Debian's postgresql), and CI requires the PostgreSQL tests" >&2
    exit 1
  fi
  echo "with-postgres: no PostgreSQL binaries found (set PGBIN, or install Debian's postgresql): the PostgreSQL tests will skip" >&2
  exec "$@"
fi

dir=$(mktemp -d "${TMPDIR:-/tmp}/jobwire-pg.XXXXXX")
as_owner=()
if [ "$(id -u)" = 0 ]; then
  chown postgres: "$dir"
  as_owner=(runuser -u postgres --)
fi
cleanup() {
  "${as_owner[@]}" "$pgbin/pg_ctl" -D "$dir/data" -m immediate -w stop >/dev/null 2>&1 || true
  rm -rf "$dir"
}
trap cleanup EXIT INT TERM

port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
if ! "${as_owner[@]}" "$pgbin/initdb" -D "$dir/data" -U postgres --auth=trust -E UTF8 --no-sync >"$dir/initdb.log" 2>&1; then
  cat "$dir/initdb.log" >&2
  echo "with-postgres: initdb failed" >&2
  exit 1
fi
opts="-p $port -k $dir -c listen_addresses=127.0.0.1 -c max_connections=300"
if [ "$durable" = 0 ]; then
  opts="$opts -c fsync=off -c synchronous_commit=off -c full_page_writes=off"
fi
if ! "${as_owner[@]}" "$pgbin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -o "$opts" -w start >/dev/null; then
  cat "$dir/server.log" >&2
  echo "with-postgres: the PostgreSQL server did not start" >&2
  exit 1
fi
export JOBWIRE_TEST_POSTGRES="postgres://postgres@127.0.0.1:$port/postgres?sslmode=disable"
export JOBWIRE_TEST_POSTGRES_SOCKET_DIR="$dir" # the same server through its Unix socket
set +e
"$@"
status=$?
set -e
exit $status
