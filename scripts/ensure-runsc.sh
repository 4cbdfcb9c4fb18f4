#!/usr/bin/env bash
# Register gVisor's runsc with the Docker engine as the runtime "runsc" (its own network
# off: --network=none), for sandboxes that ask for `runtime: runsc`. Debian bookworm's runsc
# (0.0~20221219) cannot list a directory ("Invalid argument" from statx), so a runsc that
# fails that check is replaced by Debian trixie's package (a static Go binary, fetched with
# apt from a private list of trixie's archive: the system's own apt sources are left alone).
# Idempotent: nothing to do when the engine lists a runsc that passes the check. On Debian
# as root it installs, registers (/etc/docker/daemon.json) and has dockerd reload its
# runtimes (SIGHUP). Elsewhere, or when that fails, it says so and exits 0: runc sandboxes
# (the default) need none of it.
set -euo pipefail

SUITE="${ROCK_RUNSC_SUITE:-trixie}"
MIRROR="${ROCK_RUNSC_MIRROR:-http://deb.debian.org/debian}"
MIN_VERSION="0.0~20240729"  # the oldest runsc known to pass the check below

say() { echo "[ensure-runsc] $*" >&2; }

registered_path() {
  docker info --format '{{json .Runtimes}}' 2>/dev/null | python3 -c \
    'import json, sys; print((json.load(sys.stdin).get("runsc") or {}).get("path", ""))' 2>/dev/null || true
}

version_of() { "$1" --version 2>/dev/null | sed -n 's/^runsc version //p' | head -n 1; }

# A runsc that works: it runs, is at least MIN_VERSION, and (as root) lists / in a sandbox
# of its own (`runsc do` needs no image), which bookworm's fails with "Invalid argument".
works() {
  local bin="$1" version
  [ -x "$bin" ] || return 1
  version="$(version_of "$bin")"
  [ -n "$version" ] || return 1
  dpkg --compare-versions "${version#release-}" ge "$MIN_VERSION" 2>/dev/null || return 1
  [ "$(id -u)" = 0 ] || return 0
  (cd / && timeout 120 "$bin" --network=none do ls / >/dev/null 2>&1)
}

# Debian trixie's runsc package, checked, installed with dpkg over any older one.
install_trixie_runsc() (
  work="$(mktemp -d)"
  trap 'rm -rf "$work"' EXIT
  mkdir -p "$work/lists/partial" "$work/cache/archives/partial"
  echo "deb $MIRROR $SUITE main" >"$work/sources.list"
  : >"$work/status"
  apt_opts=(
    -o "Dir::Etc::SourceList=$work/sources.list" -o "Dir::Etc::SourceParts=$work/none"
    -o "Dir::State::Lists=$work/lists" -o "Dir::Cache=$work/cache"
    -o "Dir::State::Status=$work/status" -o "APT::Sandbox::User=root"
  )
  say "fetching runsc from Debian $SUITE ($MIRROR)"
  if ! apt-get "${apt_opts[@]}" update -q >"$work/log" 2>&1 \
    || ! (cd "$work" && apt-get "${apt_opts[@]}" download runsc >>"$work/log" 2>&1); then
    say "could not fetch runsc from Debian $SUITE: $(tail -n 1 "$work/log")"
    return 1
  fi
  deb="$(ls "$work"/runsc_*.deb)"
  mkdir "$work/root"
  dpkg-deb -x "$deb" "$work/root"
  if ! works "$work/root/usr/bin/runsc"; then
    say "$(basename "$deb") does not pass the check (version $(version_of "$work/root/usr/bin/runsc"), ls / in a sandbox)"
    return 1
  fi
  say "installing $(basename "$deb")"
  dpkg -i "$deb" >"$work/log" 2>&1 || { say "dpkg -i failed: $(tail -n 1 "$work/log")"; return 1; }
)

if ! { [ -f /etc/debian_version ] && [ "$(id -u)" = 0 ]; }; then
  if [ -z "$(registered_path)" ]; then
    say "the engine has no runsc runtime and this is not Debian as root: install gVisor (https://gvisor.dev/docs/user_guide/install/) and register it as runsc to use runtime runsc."
  fi
  exit 0
fi

current="$(registered_path)"
if [ -n "$current" ] && works "$current"; then
  exit 0
fi
RUNSC="$(command -v runsc || true)"
if [ -z "$RUNSC" ] || ! works "$RUNSC"; then
  [ -n "$RUNSC" ] && say "$RUNSC ($(version_of "$RUNSC")) cannot list a directory under gVisor; replacing it"
  if ! install_trixie_runsc; then
    say "runtime runsc stays unavailable or broken; runc sandboxes (the default) are not affected."
    exit 0
  fi
  RUNSC=/usr/bin/runsc
fi
say "runsc $(version_of "$RUNSC") at $RUNSC"
RUNSC="$RUNSC" python3 - <<'PY'
import json, os, pathlib

path = pathlib.Path("/etc/docker/daemon.json")
text = path.read_text() if path.exists() else ""
config = json.loads(text) if text.strip() else {}
config.setdefault("runtimes", {})["runsc"] = {
    "path": os.environ["RUNSC"],
    "runtimeArgs": ["--network=none"],
}
path.parent.mkdir(parents=True, exist_ok=True)
path.write_text(json.dumps(config, indent=2) + "\n")
PY
pkill -HUP -x dockerd || true
for _ in $(seq 1 30); do
  [ "$(registered_path)" = "$RUNSC" ] && exit 0
  sleep 1
done
say "runsc was registered in /etc/docker/daemon.json but the engine does not list it; restart dockerd to use runtime runsc."
exit 0
