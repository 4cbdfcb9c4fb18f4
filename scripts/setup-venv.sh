#!/usr/bin/env bash
# Create .venv with the dev tools and the five packages installed editable.
# Idempotent: make only calls this when a pyproject.toml changed or .venv is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

PY="${PYTHON:-python3}"
if ! "$PY" -c 'import sys; raise SystemExit(sys.version_info < (3, 11))' 2>/dev/null; then
  echo "Python 3.11 or newer is needed as '$PY': install it, or run make with PYTHON=/path/to/python3.11." >&2
  exit 1
fi
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --upgrade "pip>=25.1"
# shellcheck source=scripts/_install.sh
. scripts/_install.sh
# constraints.txt pins the tested versions of the fast-moving dependencies (torch among them:
# 2.13.0 resolves to a CPU build here; an unpinned torch pulls CUDA wheels).
venv_install .venv -c constraints.txt --group dev "torch==2.13.0" \
  -e packages/ale-core -e packages/task-families -e "packages/rock[ray]" \
  -e "packages/iflow-cli[local,sandbox]" -e "packages/roll[tensorboard,ray,mini-swe-agent]"
touch .venv/.installed
echo "[setup] .venv ready: $(.venv/bin/python --version), packages installed editable" >&2
