"""Each package installs on its own with only its own dependencies."""

from __future__ import annotations

import os
import subprocess
import sys
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

CASES = {
    # packages installed -> (module that must import, modules that must be absent, script)
    "ale-core": (
        ["ale-core"],
        "ale.atif, ale.task, ale.jsonl, ale.chunking",
        ["docker", "click", "task_families", "rock", "iflow", "roll"],
        "ale",
    ),
    "task-families": (
        ["ale-core", "task-families"],
        "task_families",
        ["docker", "click", "rock", "iflow", "roll"],
        "ale",
    ),
    "rock": (
        ["ale-core", "task-families", "rock"],
        "rock.cli, rock.engine",
        ["iflow", "roll"],
        "rock",
    ),
    "iflow-cli": (["ale-core", "iflow-cli"], "iflow.cli", ["rock", "roll", "docker"], "iflow"),
}


def _run(args: list[str], env: dict[str, str] | None = None) -> str:
    done = subprocess.run(args, capture_output=True, text=True, env=env)
    assert done.returncode == 0, f"{' '.join(args)} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout


@pytest.mark.slow
@pytest.mark.parametrize("dist", list(CASES))
def test_installs_alone(tmp_path: Path, dist: str) -> None:
    dists, must_import, absent, script = CASES[dist]
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    py = env_dir / "bin" / "python"
    # the set-up's installer (scripts/_install.sh: uv from .venv, as `make setup` uses, or pip)
    install = ["bash", "-c", '. "$0" && venv_install "$@"', str(ROOT / "scripts" / "_install.sh")]
    args = [*install, str(env_dir)]
    for d in dists:
        args += ["-e", str(ROOT / "packages" / d)]
    _run(args, env={**os.environ, "ALE_UV": str(Path(sys.executable).parent / "uv")})
    probe = (
        f"import importlib.util, {must_import}\n"
        f"absent = {absent!r}\n"
        "present = [m for m in absent if importlib.util.find_spec(m) is not None]\n"
        "assert not present, 'installed but should not be: ' + ', '.join(present)\n"
    )
    _run([str(py), "-c", probe])
    assert "0.1.0" in _run([str(env_dir / "bin" / script), "--version"])
