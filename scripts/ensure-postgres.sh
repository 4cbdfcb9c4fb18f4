#!/usr/bin/env bash
# Make a PostgreSQL server answer on loopback for rock's state-store tests, and print
# its URL as the last line of stdout; or stop with one sentence naming what to install.
#
# Idempotent: when a server already answers on 127.0.0.1:$ROCK_PG_PORT as rock/rock,
# it only prints the URL. On Debian as root it otherwise installs the `postgresql`
# package if missing, creates a cluster in $ROCK_PG_DIR owned by the postgres user,
# starts it with pg_ctl listening on 127.0.0.1 only (no systemd), and creates the
# role `rock` (password `rock`, allowed to create databases and, for the tests' forced
# drops, a member of pg_signal_backend) and the database `rock`.
#
#   ROCK_PG_PORT  port to listen on            (default 55432)
#   ROCK_PG_DIR   the cluster's data directory (default /var/lib/rock-pg)
#   ROCK_PG_LOG   the server's log file        (default /var/log/rock-pg.log)
set -euo pipefail

PORT="${ROCK_PG_PORT:-55432}"
DATA="${ROCK_PG_DIR:-/var/lib/rock-pg}"
LOG="${ROCK_PG_LOG:-/var/log/rock-pg.log}"
URL="postgresql://rock:rock@127.0.0.1:${PORT}/rock"

say() { echo "[ensure-postgres] $*" >&2; }

as_rock() {
  command -v psql >/dev/null 2>&1 &&
    PGPASSWORD=rock PGCONNECT_TIMEOUT=3 psql -X -q -w -h 127.0.0.1 -p "$PORT" -U rock -d rock \
      -tAc "$1" 2>/dev/null
}
answers() { [ "$(as_rock 'SELECT 1')" = 1 ]; }
# A test drops its database WITH (FORCE), which ends every process still in it; an
# autovacuum worker there belongs to no role, and only pg_signal_backend may end it.
ready() { [ "$(as_rock "SELECT pg_has_role('rock', 'pg_signal_backend', 'MEMBER')")" = t ]; }

if ready; then
  echo "$URL"
  exit 0
fi

is_debian_root() { [ -f /etc/debian_version ] && [ "$(id -u)" = 0 ]; }

if ! is_debian_root && answers; then
  echo "PostgreSQL answers on 127.0.0.1:${PORT} as rock/rock, but the role rock is not a member of pg_signal_backend, which a test needs to drop its database: run 'GRANT pg_signal_backend TO rock' there as a superuser, then run this again." >&2
  exit 1
fi
if ! is_debian_root; then
  echo "No PostgreSQL server answers on 127.0.0.1:${PORT} as rock/rock and this is not Debian as root: install PostgreSQL (the 'postgresql' package), start it there with a role rock/rock that may create databases, or point ROCK_TEST_PG_URL at a server, then run this again." >&2
  exit 1
fi

bindir() { ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1; }

if [ -z "$(bindir)" ] || [ ! -x "$(bindir)/initdb" ]; then
  say "installing the postgresql package from Debian"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q >/dev/null
  apt-get install -y -q postgresql >/dev/null
fi
BIN="$(bindir)"
if [ -z "$BIN" ] || [ ! -x "$BIN/initdb" ]; then
  echo "The postgresql package is installed but no /usr/lib/postgresql/*/bin/initdb was found: reinstall it with 'apt-get install --reinstall postgresql', then run this again." >&2
  exit 1
fi
VERSION="$(basename "$(dirname "$BIN")")"

as_postgres() { runuser -u postgres -- "$@"; }

if [ ! -s "$DATA/PG_VERSION" ]; then
  say "creating a PostgreSQL $VERSION cluster in $DATA"
  mkdir -p "$DATA"
  chown postgres:postgres "$DATA"
  chmod 700 "$DATA"
  as_postgres "$BIN/initdb" -D "$DATA" -U postgres -E UTF8 --no-locale \
    --auth-local=peer --auth-host=scram-sha-256 >/dev/null
elif [ "$(cat "$DATA/PG_VERSION")" != "$VERSION" ]; then
  echo "The cluster in $DATA was made by PostgreSQL $(cat "$DATA/PG_VERSION") but the installed server is $VERSION: remove $DATA (or set ROCK_PG_DIR to a new directory), then run this again." >&2
  exit 1
fi

# up, down, or busy: a server from $DATA that does not (yet) accept connections on
# $PORT, such as one still starting or shutting down, or a killed postmaster whose
# zombie has not been reaped yet.
server_state() {
  if ! as_postgres "$BIN/pg_ctl" status -D "$DATA" >/dev/null 2>&1; then
    echo down
  elif as_postgres "$BIN/pg_isready" -q -h "$DATA" -p "$PORT"; then
    echo up
  else
    echo busy
  fi
}
STATE="$(server_state)"
for _ in $(seq 1 60); do
  [ "$STATE" = busy ] || break
  sleep 0.5
  STATE="$(server_state)"
done
if [ "$STATE" = busy ]; then
  echo "A PostgreSQL server runs from $DATA but does not accept connections on port $PORT: stop it with 'runuser -u postgres -- $BIN/pg_ctl stop -D $DATA' (or read $LOG), then run this again." >&2
  exit 1
fi

if [ "$STATE" = down ]; then
  say "starting PostgreSQL $VERSION on 127.0.0.1:$PORT (log: $LOG)"
  mkdir -p "$(dirname "$LOG")"
  touch "$LOG"
  chown postgres:postgres "$LOG"
  # The Unix socket goes into the data directory: /var/run/postgresql may not exist.
  if ! as_postgres "$BIN/pg_ctl" start -D "$DATA" -l "$LOG" -w -t 60 \
    -o "-c listen_addresses=127.0.0.1 -p $PORT -c unix_socket_directories='$DATA'" >/dev/null; then
    echo "PostgreSQL did not start on 127.0.0.1:$PORT: read $LOG for the reason (is the port taken?), then run this again." >&2
    exit 1
  fi
fi

admin() { as_postgres "$BIN/psql" -X -q -v ON_ERROR_STOP=1 -h "$DATA" -p "$PORT" -U postgres -d postgres "$@"; }

admin -c "DO \$\$ BEGIN
  IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'rock') THEN
    CREATE ROLE rock LOGIN CREATEDB PASSWORD 'rock';
  ELSE
    ALTER ROLE rock LOGIN CREATEDB PASSWORD 'rock';
  END IF;
END \$\$;" >/dev/null
if [ "$(admin -tAc "SELECT pg_has_role('rock', 'pg_signal_backend', 'MEMBER')")" != t ]; then
  admin -c "GRANT pg_signal_backend TO rock" >/dev/null
fi
if [ "$(admin -tAc "SELECT 1 FROM pg_database WHERE datname = 'rock'")" != 1 ]; then
  admin -c "CREATE DATABASE rock OWNER rock" >/dev/null
fi

if ! ready; then
  echo "PostgreSQL runs from $DATA but does not accept rock/rock on 127.0.0.1:$PORT, or rock is not a member of pg_signal_backend: read $LOG and $DATA/pg_hba.conf for the reason, then run this again." >&2
  exit 1
fi
echo "$URL"
