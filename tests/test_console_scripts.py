"""Every package's console script answers --help and --version."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BIN = Path(sys.executable).parent


@pytest.mark.parametrize(
    ("script", "dist"),
    [("rock", "rock"), ("iflow", "iflow"), ("roll", "roll"), ("ale", "ale-core")],
)
def test_help_and_version(script: str, dist: str) -> None:
    version = subprocess.run(
        [BIN / script, "--version"], capture_output=True, text=True, check=True
    )
    assert "0.1.0" in version.stdout
    helped = subprocess.run([BIN / script, "--help"], capture_output=True, text=True, check=True)
    assert "usage" in helped.stdout.lower()


def test_rock_bench_refuses_an_agent_that_cannot_start_before_any_trial(tmp_path: Path) -> None:
    """iflow with no model: one sentence and exit 2, not a run of failed trials that exits 0."""
    import os

    repo = Path(__file__).resolve().parents[1]
    env = {k: v for k, v in os.environ.items() if not k.startswith("IFLOW_")}
    env["HOME"] = str(tmp_path)  # no ~/.iflow/settings.json naming a model
    out = tmp_path / "run"
    ran = subprocess.run(
        [
            BIN / "rock",
            "bench",
            "run",
            "--dataset",
            repo / "datasets" / "terminal-bench-local",
            "--agent",
            "iflow",
            "--output",
            out,
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=300,
    )
    assert ran.returncode == 2, ran.stderr
    assert "iflow cannot start: no model name is set for the openai provider" in ran.stderr
    assert "Traceback" not in ran.stderr
    assert not any(out.glob("*/*/results.json"))  # no trial ran
