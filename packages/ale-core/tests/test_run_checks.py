"""A generated task's plain checks run by ``tests/run_checks.py`` (python3 alone) as pytest
would run them: the same exit code and the same outcome for each check, and pytest kept for
the test files that need it."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from ale.synth.family import TaskDraft
from ale.synth.render import RUN_CHECKS, TEST_SH, TEST_SH_PLAIN, plain_checks, render_task

_OUTCOME = re.compile(r"^(PASSED|FAILED|ERROR) \S*::(\w+)", re.M)

CASES = {
    "all pass": "def test_a():\n    assert 1 + 1 == 2\n\ndef test_b():\n    pass\n",
    "one fails": (
        "from pathlib import Path\n\ndef test_file():\n    assert Path('answer.txt').read_text() "
        "== '8'\n\ndef test_true():\n    assert True\n"
    ),
    "a helper is not a check": "def helper():\n    raise SystemExit(3)\n\ndef test_x():\n    pass\n",
    "a check exits": "import sys\n\ndef test_x():\n    sys.exit(0)\n\ndef test_y():\n    pass\n",
    "a check raises": "def test_x():\n    {}['missing']\n",
    "import fails": "import no_such_module_here\n\ndef test_x():\n    pass\n",
    "no checks": "X = 1\n",
    "an imported check runs": "from os.path import join as test_join_is_called\n",
    "reads the folder's module": "import helper_mod\n\ndef test_x():\n    assert helper_mod.V == 2\n",
    "order of the module": "def test_z():\n    pass\n\ndef test_a():\n    assert 0, 'no'\n",
}


def _run(command: list[str], cwd: Path) -> tuple[int, list[tuple[str, str]]]:
    env = {**os.environ, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    done = subprocess.run(command, cwd=cwd, capture_output=True, text=True, env=env, timeout=60)
    return done.returncode, [(m[2], m[1]) for m in _OUTCOME.finditer(done.stdout)]


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_runner_decides_as_pytest_does(case: str, tmp_path: Path) -> None:
    tests, work = tmp_path / "tests", tmp_path / "app"
    tests.mkdir()
    work.mkdir()
    (tests / "helper_mod.py").write_text("V = 2\n")
    (work / "answer.txt").write_text("7")
    test_file = tests / "test_outputs.py"
    test_file.write_text(CASES[case])
    pytest_code, pytest_outcomes = _run(
        [sys.executable, "-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider", str(test_file)],
        work,
    )
    code, outcomes = _run([sys.executable, str(RUN_CHECKS), str(test_file)], work)
    assert code == pytest_code
    if case != "import fails":  # (pytest names the file alone there, as the runner does)
        assert sorted(outcomes) == sorted(pytest_outcomes)
    if case == "order of the module":
        assert [name for name, _ in outcomes] == ["test_z", "test_a"]


def test_the_runner_prints_each_failure_with_its_line(tmp_path: Path) -> None:
    test_file = tmp_path / "test_outputs.py"
    test_file.write_text("def test_sum():\n    total = 3\n    assert total == 4, 'off by one'\n")
    done = subprocess.run(
        [sys.executable, str(RUN_CHECKS), str(test_file)], capture_output=True, text=True
    )
    assert done.returncode == 1
    assert "assert total == 4, 'off by one'" in done.stdout  # the traceback's line
    assert f"FAILED {test_file}::test_sum - AssertionError: off by one" in done.stdout
    assert done.stdout.rstrip().splitlines()[-1].startswith("1 failed in ")


@pytest.mark.parametrize(
    ("source", "plain"),
    [
        ("def test_a():\n    assert True\n", True),
        ("import json\nfrom pathlib import Path\n\ndef test_a():\n    assert Path('.')\n", True),
        ("import pytest\n\ndef test_a():\n    pass\n", False),
        ("from _pytest.outcomes import fail\n", False),
        ("from pytest import raises\n", False),
        ("def test_a(tmp_path):\n    pass\n", False),
        ("def test_a(*, capsys):\n    pass\n", False),
        ("import functools\n\n@functools.cache\ndef test_a():\n    pass\n", False),
        ("async def test_a():\n    pass\n", False),
        ("class TestA:\n    def test_a(self):\n        pass\n", False),
        ("def test_a(:\n", False),
        ("def setup_module(module):\n    pass\n\ndef test_a():\n    pass\n", False),
        ("def teardown_function(f):\n    pass\n\ndef test_a():\n    pass\n", False),
        ("pytestmark = []\n\ndef test_a():\n    pass\n", False),
        ("pytest_plugins: list = ['x']\n", False),
        ("def helper(x):\n    return x\n\ndef test_a():\n    assert helper(1)\n", True),
    ],
)
def test_plain_checks_are_told_from_pytest_ones(source: str, plain: bool) -> None:
    assert plain_checks(source) is plain


@pytest.mark.parametrize("uses_pytest", [False, True])
def test_a_task_is_rendered_with_the_runner_its_checks_need(
    tmp_path: Path, uses_pytest: bool
) -> None:
    tests = "def test_a():\n    assert True\n"
    if uses_pytest:
        tests = "import pytest\n\n" + tests
    draft = TaskDraft(
        instruction="Write x.",
        files={"/app/a.txt": "a\n"},
        tests=tests,
        solution="true\n",
        expert=lambda: iter(()),
    )
    task = render_task(draft, tmp_path / "t", family="f", category="c", difficulty="easy", seed=1)
    test_sh = (task / "tests" / "test.sh").read_text()
    assert test_sh == (TEST_SH if uses_pytest else TEST_SH_PLAIN)
    assert (task / "tests" / "run_checks.py").is_file() is not uses_pytest
    if not uses_pytest:
        assert (task / "tests" / "run_checks.py").read_bytes() == RUN_CHECKS.read_bytes()
