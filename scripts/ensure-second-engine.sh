#!/usr/bin/env bash
# A second Docker engine on this machine, for the tests and benchmarks of rock's ray
# backend: two Ray nodes here, each bound to its own engine, stand for two machines.
# Its own socket, data root, exec root (so its own containerd), bridge and config; no
# iptables rules of its own, so it never touches the first engine's. Idempotent: does
# nothing when it answers already; loads the base image from the first engine when it
# lacks it. Prints the DOCKER_HOST that reaches it.
#
# Environment: ROCK_ENGINE2_ROOT (default /var/lib/rock-engine2), ROCK_ENGINE2_RUN
# (default /run/rock-engine2), ROCK_ENGINE2_BRIDGE (default rockbr2, 10.213.0.1/24).
set -euo pipefail

ROOT="${ROCK_ENGINE2_ROOT:-/var/lib/rock-engine2}"
RUN="${ROCK_ENGINE2_RUN:-/run/rock-engine2}"
BRIDGE="${ROCK_ENGINE2_BRIDGE:-rockbr2}"
HOST="unix://$RUN/docker.sock"
BASE="${ROCK_BASE_IMAGE:-rock/base:bookworm}"

answers() { DOCKER_HOST="$HOST" docker info >/dev/null 2>&1; }

if [ "$(id -u)" != 0 ]; then
  echo "A second Docker engine needs root (it makes a bridge and runs dockerd): run this as root." >&2
  exit 1
fi
command -v dockerd >/dev/null || { echo "dockerd is not installed: run scripts/ensure-docker.sh first." >&2; exit 1; }

# A pid file whose process is gone or is another program (left by an engine that did not
# stop: a crash, a machine restored from a snapshot with its /run) would have dockerd wait
# for a containerd that is not there ("containerd is still running", then a timeout).
forget_stale() {
  local pid
  [ -f "$1" ] || return 0
  pid=$(cat "$1" 2>/dev/null || true)
  if [ -z "$pid" ] || [ "$(cat "/proc/$pid/comm" 2>/dev/null)" != "$2" ]; then rm -f "$1"; fi
}

if ! answers; then
  mkdir -p "$ROOT" "$RUN"
  forget_stale "$RUN/exec/containerd/containerd.pid" containerd
  forget_stale "$RUN/dockerd.pid" dockerd
  if ! ip link show "$BRIDGE" >/dev/null 2>&1; then
    ip link add "$BRIDGE" type bridge
    ip addr add 10.213.0.1/24 dev "$BRIDGE"
    ip link set "$BRIDGE" up
  fi
  runtimes='{}'
  if command -v runsc >/dev/null; then
    runtimes='{"runsc": {"path": "'"$(command -v runsc)"'", "runtimeArgs": ["--network=none"]}}'
  fi
  printf '{"runtimes": %s}\n' "$runtimes" > "$RUN/daemon.json"
  nohup dockerd --host "$HOST" --data-root "$ROOT/data" --exec-root "$RUN/exec" \
    --pidfile "$RUN/dockerd.pid" --bridge "$BRIDGE" --iptables=false --ip6tables=false \
    --config-file "$RUN/daemon.json" >>"$ROOT/dockerd.log" 2>&1 </dev/null &
  for _ in $(seq 1 60); do
    answers && break
    sleep 1
  done
  answers || { echo "the second dockerd did not answer within 60 s: read $ROOT/dockerd.log for the reason." >&2; exit 1; }
fi

if ! DOCKER_HOST="$HOST" docker image inspect "$BASE" >/dev/null 2>&1; then
  docker image inspect "$BASE" >/dev/null 2>&1 || {
    echo "the first engine has no $BASE to copy: run 'rock image build-base' (make base-image) first." >&2
    exit 1
  }
  docker save "$BASE" | DOCKER_HOST="$HOST" docker load >/dev/null
fi
echo "$HOST"
