#!/usr/bin/env bash
# Register gVisor's runsc with the Docker engine as the runtime "runsc" (its own network
# off: --network=none), for sandboxes that ask for `runtime: runsc`. Idempotent: nothing to
# do when the engine already lists it. On Debian as root: installs the runsc package, adds
# it to /etc/docker/daemon.json and has dockerd reload its runtimes (SIGHUP). Elsewhere, or
# when that fails, it says so and exits 0: runc sandboxes (the default) need none of it.
set -euo pipefail

has_runsc() { docker info --format '{{json .Runtimes}}' 2>/dev/null | grep -q '"runsc"'; }

has_runsc && exit 0
if ! { [ -f /etc/debian_version ] && [ "$(id -u)" = 0 ]; }; then
  echo "[ensure-runsc] the engine has no runsc runtime and this is not Debian as root: install gVisor (https://gvisor.dev/docs/user_guide/install/) and register it as runsc to use runtime runsc." >&2
  exit 0
fi
if ! command -v runsc >/dev/null 2>&1; then
  echo "[ensure-runsc] installing runsc (gVisor) from Debian packages" >&2
  if ! DEBIAN_FRONTEND=noninteractive apt-get install -y -q runsc >/dev/null 2>&1; then
    apt-get update -q >/dev/null 2>&1 || true
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q runsc >/dev/null 2>&1 || {
      echo "[ensure-runsc] could not install the runsc package; runtime runsc stays unavailable." >&2
      exit 0
    }
  fi
fi
RUNSC="$(command -v runsc)" python3 - <<'PY'
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
  has_runsc && exit 0
  sleep 1
done
echo "[ensure-runsc] runsc was registered in /etc/docker/daemon.json but the engine does not list it; restart dockerd to use runtime runsc." >&2
exit 0
