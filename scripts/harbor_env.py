"""Harbor, the reference harness we compare with and whose models read our runs, installed
once in a virtual environment of its own (it needs Python 3.12 or newer, which this
project's own environment may not be): the benchmark against Harbor and the tests that
read our files with Harbor's pydantic models share it."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

HARBOR_VERSION = "0.26.0"
VENV = (
    Path(os.environ.get("XDG_CACHE_HOME", "~/.cache")).expanduser()
    / "ale-tests"
    / f"harbor-{HARBOR_VERSION}"
)
PYTHON = VENV / "bin" / "python"
E2B_EXTRA = ("e2b==2.63.0", "dockerfile-parse==2.0.1")
"""Harbor's ``e2b`` extra, pinned to the versions its E2B environment was tested with."""
HARBOR = VENV / "bin" / "harbor"


class HarborUnavailable(RuntimeError):
    """Harbor could not be installed; the message says why and what to do."""


def python312() -> Path | None:
    """A Python 3.12 or newer: pyenv's first, then one on PATH."""
    found = sorted(Path("~/.pyenv/versions").expanduser().glob("3.12*/bin/python"))
    if found:
        return found[-1]
    for name in ("python3.12", "python3.13"):
        path = shutil.which(name)
        if path:
            return Path(path)
    return None


def ensure_harbor() -> Path:
    """Harbor's Python, its venv made and Harbor installed on first use (from PyPI)."""
    ready = VENV / ".installed"
    if ready.is_file() and HARBOR.is_file():
        return PYTHON
    python = python312()
    if python is None:
        raise HarborUnavailable(
            "Harbor needs Python 3.12 or newer, and none is installed (pyenv install 3.12)."
        )
    print(f"installing harbor=={HARBOR_VERSION} into {VENV}", flush=True)
    made = subprocess.run([python, "-m", "venv", "--clear", VENV], capture_output=True)
    if made.returncode == 0:
        made = subprocess.run(
            [PYTHON, "-m", "pip", "install", "-q", f"harbor=={HARBOR_VERSION}"],
            capture_output=True,
            timeout=900,
        )
    if made.returncode != 0:
        tail = made.stderr.decode(errors="replace").strip().splitlines()[-1:]
        raise HarborUnavailable(
            f"harbor=={HARBOR_VERSION} could not be installed in {VENV} "
            f"({tail[0] if tail else 'no output'}); delete it and try again."
        )
    ready.write_text(f"harbor=={HARBOR_VERSION}")
    return PYTHON


def ensure_rock_in_harbor(root: Path) -> Path:
    """Harbor's Python with this checkout's ale-core, task-families and rock installed beside
    Harbor (editable, once per checkout), for ``--environment-import-path
    rock.harbor:RockEnvironment``, and what Harbor's own ``--env e2b`` needs (its ``e2b``
    extra, at the versions tested)."""
    python = ensure_harbor()
    stamp = VENV / ".rock-checkout"
    if stamp.is_file() and stamp.read_text() == str(root):
        return python
    packages = [str(root / "packages" / name) for name in ("ale-core", "task-families", "rock")]
    print(f"installing {root}'s rock into {VENV}", flush=True)
    args = [python, "-m", "pip", "install", "-q", *E2B_EXTRA]
    args += [a for p in packages for a in ("-e", p)]
    made = subprocess.run(args, capture_output=True, timeout=900)
    if made.returncode != 0:
        tail = made.stderr.decode(errors="replace").strip().splitlines()[-1:]
        raise HarborUnavailable(
            f"rock could not be installed beside Harbor in {VENV} "
            f"({tail[0] if tail else 'no output'}); delete it and try again."
        )
    stamp.write_text(str(root))
    return python
