#!/usr/bin/env bash
# Make a Docker engine reachable, or stop with one sentence naming what to install.
# Idempotent: does nothing when an engine already answers.
# On Debian as root with no engine: installs docker.io and starts dockerd in the
# background, logging to $ALE_DOCKERD_LOG (default /var/log/ale-dockerd.log), its pid
# in $ALE_DOCKERD_PIDFILE (default /var/run/docker.pid).
set -euo pipefail

LOG="${ALE_DOCKERD_LOG:-/var/log/ale-dockerd.log}"
PIDFILE="${ALE_DOCKERD_PIDFILE:-/var/run/docker.pid}"

engine_answers() { docker info >/dev/null 2>&1; }

if command -v docker >/dev/null 2>&1 && engine_answers; then
  exit 0
fi

is_debian_root() { [ -f /etc/debian_version ] && [ "$(id -u)" = 0 ]; }

if ! command -v dockerd >/dev/null 2>&1; then
  if ! is_debian_root; then
    echo "No Docker engine answers and this is not Debian as root: install Docker Engine (https://docs.docker.com/engine/install/) and start it, then run this again." >&2
    exit 1
  fi
  echo "[ensure-docker] installing docker.io from Debian packages" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q >/dev/null
  apt-get install -y -q docker.io >/dev/null
fi

if ! is_debian_root && ! engine_answers; then
  echo "dockerd is installed but no engine answers and this user cannot start it: start the Docker service (for example 'sudo systemctl start docker'), then run this again." >&2
  exit 1
fi

# Whether the default engine's dockerd runs, by its pid file: another dockerd (the
# second engine of the Ray tests) must not stand for it.
default_dockerd_runs() {
  local pid
  pid=$(cat "$PIDFILE" 2>/dev/null) && [ -n "$pid" ] &&
    [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = dockerd ]
}

if ! default_dockerd_runs; then
  # a pid file left by an engine that did not stop (its pid now another program's) would
  # have dockerd refuse to start
  rm -f "$PIDFILE"
  echo "[ensure-docker] starting dockerd in the background (log: $LOG)" >&2
  mkdir -p "$(dirname "$LOG")"
  nohup dockerd --pidfile "$PIDFILE" >>"$LOG" 2>&1 </dev/null &
fi

for _ in $(seq 1 60); do
  if engine_answers; then
    exit 0
  fi
  sleep 1
done
echo "dockerd was started but did not answer within 60 s: read $LOG for the reason." >&2
exit 1
