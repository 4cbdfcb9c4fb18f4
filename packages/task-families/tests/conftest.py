"""The ``run_tests`` fixture: a draft's checks run by pytest and, where they are plain, by the
runner a rendered task runs them with (:mod:`ale.synth.run_checks`), which must agree."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from ale.synth.render import RUN_CHECKS, plain_checks

_OUTCOME = re.compile(r"^(PASSED|FAILED|ERROR) \S*::(\w+)", re.M)


def _run(command: list[str], cwd: Path) -> tuple[int, dict[str, str]]:
    env = {**os.environ, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    done = subprocess.run(command, cwd=cwd, capture_output=True, text=True, env=env, timeout=120)
    return done.returncode, {m[2]: m[1] for m in _OUTCOME.finditer(done.stdout)}


def _run_tests(test_file: Path, cwd: Path) -> int:
    """pytest's exit code for ``test_file`` run from ``cwd``; for plain checks, the runner
    gives the same code and the same outcome of each check."""
    pytest_run = [sys.executable, "-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider"]
    code, outcomes = _run([*pytest_run, str(test_file)], cwd)
    if plain_checks(test_file.read_text()):
        assert _run([sys.executable, str(RUN_CHECKS), str(test_file)], cwd) == (code, outcomes)
    return code


@pytest.fixture
def run_tests() -> Callable[[Path, Path], int]:
    return _run_tests
