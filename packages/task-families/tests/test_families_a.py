"""Tests of the task families fix-failing-test, implement-function, log-summary, json-reshape.

Besides determinism, rendering and instruction variety, each family's expert is run for
real on a local copy of its environment (the container paths mapped under a temporary
directory) and the generated tests are run on the result, so a broken expert, oracle or
test file shows up here before a Docker check.
"""

from __future__ import annotations

import itertools
import random
import re
import subprocess
from pathlib import Path

import pytest
from task_families.log_summary import _detect

from ale.synth.dedup import jaccard
from ale.synth.expert import ExpertRun, Final, Observation, format_shell
from ale.synth.family import draft_for, get_family
from ale.synth.render import render_task
from ale.task import load_task

FAMILIES = {
    "fix-failing-test": ("debugging", True),
    "implement-function": ("software-engineering", False),
    "log-summary": ("text-processing", True),
    "json-reshape": ("data-processing", False),
}
DIFFICULTIES = ("easy", "medium", "hard")
_ROOTS = re.compile(r"(?<![\w/.-])/(app|var|srv|etc)(?=/|\b)")


def _local(text: str, root: Path) -> str:
    """``text`` with container paths moved under ``root``."""
    return _ROOTS.sub(lambda m: f"{root}{m.group(0)}", text)


def _materialize(draft, root: Path) -> None:
    (root / "app").mkdir(parents=True, exist_ok=True)
    for path, content in draft.files.items():
        target = root / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(content.encode() if isinstance(content, str) else content)


def _shell(command: str, root: Path) -> Observation:
    done = subprocess.run(
        ["bash", "-c", _local(command, root)],
        cwd=root / "app",
        capture_output=True,
        text=True,
        timeout=60,
    )
    strip = str(root)
    text = format_shell(
        done.stdout.replace(strip, ""), done.stderr.replace(strip, ""), done.returncode
    )
    return Observation(text, done.returncode)


def _run_expert(draft, root: Path, mistake: bool = False) -> tuple[str, int]:
    run = ExpertRun(draft.expert(), mistake=mistake, mistakes=draft.mistakes)
    observation = None
    for turn in range(30):
        step = run.next(observation)
        if isinstance(step, Final):
            return step.message, turn
        if step.kind == "write":
            path = step.path if step.path.startswith("/") else f"/app/{step.path}"
            target = root / path.lstrip("/")
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(_local(step.content, root))
            observation = Observation(f"Wrote {len(step.content)} bytes to {path}.", 0)
        else:
            observation = _shell(step.command, root)
    raise AssertionError("the expert did not finish")


def _tests_pass(draft, root: Path, run_tests) -> bool:
    """(Run by pytest and, for plain checks, by the task's own runner too: conftest.py.)"""
    test_file = root / "test_outputs.py"
    test_file.write_text(_local(draft.tests, root))
    return run_tests(test_file, root / "app") == 0


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_registered(family: str) -> None:
    fam = get_family(family)
    assert (fam.category, fam.multi_turn) == FAMILIES[family]
    assert fam.description.endswith(".")


@pytest.mark.parametrize(("family", "difficulty"), list(itertools.product(FAMILIES, DIFFICULTIES)))
def test_deterministic(family: str, difficulty: str) -> None:
    for seed in (1, 7):
        a, b = draft_for(family, seed, difficulty), draft_for(family, seed, difficulty)
        assert a.instruction == b.instruction
        assert a.files == b.files
        assert a.tests == b.tests
        assert a.solution == b.solution
        assert a.params == b.params
    assert draft_for(family, 1, difficulty).files != draft_for(family, 2, difficulty).files


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_renders_and_loads(family: str, tmp_path: Path) -> None:
    fam = get_family(family)
    draft = draft_for(family, 3, "medium")
    dest = render_task(
        draft, tmp_path / "task", family=family, category=fam.category, difficulty="medium", seed=3
    )
    task = load_task(dest)
    assert task.instruction.strip() == draft.instruction.strip()
    assert task.metadata.category == fam.category
    assert task.metadata.difficulty == "medium"
    assert family in task.metadata.tags
    assert task.solution is not None and task.solution.is_file()
    for path in draft.files:
        assert (dest / "environment" / "rootfs" / path.lstrip("/")).is_file()


@pytest.mark.parametrize(("family", "difficulty"), list(itertools.product(FAMILIES, DIFFICULTIES)))
def test_instruction_variety(family: str, difficulty: str) -> None:
    texts = [draft_for(family, seed, difficulty).instruction for seed in range(30)]
    scores = [jaccard(a, b) for a, b in itertools.combinations(texts, 2)]
    assert sum(scores) / len(scores) < 0.3
    assert max(scores) < 0.8


@pytest.mark.parametrize(("family", "difficulty"), list(itertools.product(FAMILIES, DIFFICULTIES)))
def test_expert_and_oracle_solve_locally(
    family: str, difficulty: str, tmp_path: Path, run_tests
) -> None:
    draft = draft_for(family, 11, difficulty)
    nop, oracle, expert = tmp_path / "nop", tmp_path / "oracle", tmp_path / "expert"
    for root in (nop, oracle, expert):
        _materialize(draft, root)
    assert not _tests_pass(draft, nop, run_tests)
    assert _shell("set -e\n" + draft.solution, oracle).ok
    assert _tests_pass(draft, oracle, run_tests)
    message, turns = _run_expert(draft, expert, mistake=difficulty == "medium")
    assert 2 <= turns <= 9, message
    assert _tests_pass(draft, expert, run_tests), message


def test_fix_expert_follows_the_failing_function() -> None:
    draft = draft_for("fix-failing-test", 4, "easy")
    (bug,) = draft.params["bugs"]
    module = draft.params["module"] + ".py"
    source = draft.files[f"/app/{module}"]
    assert isinstance(source, str)
    line = int(re.search(r"-e '(\d+)s/", draft.solution).group(1))  # type: ignore[union-attr]
    run = ExpertRun(draft.expert())
    first = run.next(None)
    assert first.command.startswith("python3 ")  # type: ignore[union-attr]
    said = f"ok   other(1)\nFAIL {bug['function']}(3): expected 1, got 2\n1 passed, 1 failed"
    view = run.next(Observation(said + "\nExit code: 1", 1))
    assert f"^def {bug['function']}(" in view.command  # type: ignore[union-attr]
    listing = "\n".join(f"{i}:{text}" for i, text in enumerate(source.split("\n"), 1))
    fix = run.next(Observation(listing + "\nExit code: 0", 0))
    assert fix.command.startswith("sed -i")  # type: ignore[union-attr]
    assert f"'{line}s/" in fix.command  # type: ignore[union-attr]
    # shown a listing shifted by two lines, it edits the line it saw, not the one it knew
    run = ExpertRun(draft.expert())
    run.next(None)
    run.next(Observation(said + "\nExit code: 1", 1))
    shifted = "\n".join(f"{i + 2}:{text}" for i, text in enumerate(source.split("\n"), 1))
    fix = run.next(Observation(shifted + "\nExit code: 0", 0))
    assert f"'{line + 2}s/" in fix.command  # type: ignore[union-attr]


def test_fix_expert_stops_when_nothing_fails() -> None:
    run = ExpertRun(draft_for("fix-failing-test", 2, "easy").expert())
    run.next(None)
    done = run.next(Observation("ok   f(1)\n1 passed, 0 failed\nExit code: 0", 0))
    assert isinstance(done, Final)


@pytest.mark.parametrize("seed", range(1, 16))
def test_log_format_detection(seed: int) -> None:
    draft = draft_for("log-summary", seed, "hard")
    ((_path, content),) = draft.files.items()
    assert isinstance(content, str)
    found = _detect("\n".join(content.splitlines()[:8]))
    params = draft.params
    assert found is not None and found[0] == params["format"]
    if params["format"] in ("json", "logfmt"):
        assert found[1:] == (params["level_key"], params["component_key"])


def test_log_expert_writes_a_parser_for_what_it_saw() -> None:
    seed = next(
        s for s in range(1, 60) if draft_for("log-summary", s, "easy").params["format"] == "json"
    )
    draft = draft_for("log-summary", seed, "easy")
    run = ExpertRun(draft.expert())
    assert "head" in run.next(None).command  # type: ignore[union-attr]
    sample = '{"t": "x", "severity": "INFO", "module": "db", "msg": "hi"}\nExit code: 0'
    script = run.next(Observation(sample, 0))
    assert script.kind == "write"  # type: ignore[union-attr]
    assert "'severity'" in script.content and "'module'" in script.content  # type: ignore[union-attr]
    run = ExpertRun(draft.expert())
    run.next(None)
    sample = "2026-03-02 10:00:01 [ERROR] auth: token expired\nExit code: 0"
    script = run.next(Observation(sample, 0))
    assert "LINE = re.compile(" in script.content  # type: ignore[union-attr]
    assert "json.loads(line)" not in script.content  # type: ignore[union-attr]
    run = ExpertRun(draft.expert())
    run.next(None)
    assert isinstance(run.next(Observation("garbage\nExit code: 0", 0)), Final)


def test_fix_checker_is_pinned_and_bugs_differ() -> None:
    draft = draft_for("fix-failing-test", 5, "hard")
    checker = draft.params["checker"]
    assert len(draft.params["bugs"]) == 2
    assert draft.params["bugs"][0]["function"].startswith("_")
    assert checker in draft.tests and "CHECKER_SHA256" in draft.tests


def test_json_reshape_hard_states_default_and_flattening() -> None:
    draft = draft_for("json-reshape", 2, "hard")
    assert draft.params["missing_default"] and draft.params["flatten"]
    assert draft.params["flatten"] in draft.instruction
    assert (
        "missing" in draft.instruction
        or "absent" in draft.instruction
        or "lack" in draft.instruction
    )


def test_implement_function_hard_lists_edge_cases() -> None:
    easy, hard = (
        draft_for("implement-function", 3, "easy"),
        draft_for("implement-function", 3, "hard"),
    )
    assert hard.params["edge_cases"] and not easy.params["edge_cases"]
    assert hard.instruction.count("\n- ") > easy.instruction.count("\n- ")


def test_fix_bug_menu_is_sound() -> None:
    from task_families import fix_failing_test as fix

    assert len(fix._MODULES) >= 6
    for module in fix._MODULES:
        good = fix._load(module.source)
        assert any(b.func.startswith("_") for b in module.bugs)
        for bug in module.bugs:
            broken = fix._apply(module.source, [bug])
            assert [line.strip() for line in broken.split("\n")].count(bug.bad) == 1, bug
            assert bug.func in good
        fix._pick_cases(random.Random(0), module, list(module.bugs), 1)
