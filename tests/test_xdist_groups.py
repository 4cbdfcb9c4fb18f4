"""`make test`'s xdist groups hold: the tests of one ``xdist_group`` run on one worker.

Several modules rely on it (one Ray cluster at a time, one vLLM server for the module, one
gVisor fork bomb at a time, a module fixture that must run once). pytest 9.2 keeps a node's
id where pytest-xdist 3.8 no longer writes the group into it, so every group was silently
spread over the workers: three vLLM servers and three Ray clusters at once, each module
fixture run by every worker that took one of its tests. This runs a small suite the way
`make test` does and checks where each test ran."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SUITE = """
import os
import pytest

pytestmark = pytest.mark.xdist_group("together")


@pytest.mark.parametrize("n", range(8))
def test_where(n: int) -> None:
    with open(os.environ["WHERE"], "a") as f:
        f.write(os.environ["PYTEST_XDIST_WORKER"] + "\\n")


@pytest.mark.parametrize("n", range(8))
def test_elsewhere(n: int) -> None:
    pass
"""


def test_a_group_runs_on_one_worker(tmp_path: Path) -> None:
    (tmp_path / "test_grouped.py").write_text(SUITE)
    where = tmp_path / "where.txt"
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-n", "4", "--dist", "loadgroup", "-q", "-p",
         "no:cacheprovider", str(tmp_path / "test_grouped.py")],
        capture_output=True, text=True, timeout=300, cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin", "WHERE": str(where)},
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    workers = where.read_text().split()
    assert len(workers) == 8
    assert len(set(workers)) == 1, f"the group ran on {sorted(set(workers))}"
