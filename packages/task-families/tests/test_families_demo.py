"""The demo families text-count, text-transform and text-find: determinism, and each kind's
one-line solution run with the host's coreutils passes the task's own tests (and doing nothing
fails them); text-find's requests never name the file, and its expert looks first."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from task_families.text_tools import (
    COUNT_KINDS,
    HIDDEN_SOURCES,
    OUTPUTS,
    SOURCES,
    TRANSFORM_KINDS,
)

from ale.synth.expert import ExpertRun, Final, Observation
from ale.synth.family import draft_for, get_family

FAMILIES = {
    "text-count": COUNT_KINDS,
    "text-transform": TRANSFORM_KINDS,
    "text-find": {**COUNT_KINDS, **TRANSFORM_KINDS},
}


def _drafts(family: str, count: int = 60) -> list:
    return [draft_for(family, seed, "easy") for seed in range(count)]


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_deterministic_and_covering(family: str) -> None:
    drafts = _drafts(family)
    again = _drafts(family)
    assert [d.instruction for d in drafts] == [d.instruction for d in again]
    assert [d.files for d in drafts] == [d.files for d in again]
    assert {d.params["kind"] for d in drafts} == set(FAMILIES[family])
    sources = HIDDEN_SOURCES if family == "text-find" else SOURCES
    assert {d.params["source"] for d in drafts} <= set(sources)
    assert {d.params["output"] for d in drafts} <= set(OUTPUTS)
    assert get_family(family).difficulties == ("easy",)


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_expert_is_the_solution_then_done(family: str) -> None:
    draft = draft_for(family, 3, "easy")
    run = ExpertRun(draft.expert())
    action = run.next(None)
    if family == "text-find":  # it looks first: the request does not name the file
        assert action.kind == "shell" and action.command == "ls"
        action = run.next(Observation(f"{draft.params['source']}\nExit code: 0", 0))
    assert action.kind == "shell" and action.command == draft.solution.strip()
    final = run.next(Observation("(no output)\nExit code: 0", 0))
    assert isinstance(final, Final)


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_solution_passes_and_nothing_fails(family: str, tmp_path: Path, run_tests) -> None:
    """(Each run by pytest and by the task's own runner, which agree: conftest.py.)"""
    seen: set[str] = set()
    for seed in range(40):
        draft = draft_for(family, seed, "easy")
        kind = draft.params["kind"]
        if kind in seen:
            continue
        seen.add(kind)
        root = tmp_path / f"{seed}"
        root.mkdir()
        for path, text in draft.files.items():
            (root / path.removeprefix("/app/")).write_text(text)
        tests = root / "test_outputs.py"
        tests.write_text(draft.tests.replace("/app/", f"{root}/"))
        assert run_tests(tests, root) != 0, f"{kind}: doing nothing passed"
        env = {"PATH": "/usr/bin:/bin", "LC_ALL": "C"}
        subprocess.run(["bash", "-c", draft.solution], cwd=root, env=env, check=True)
        assert run_tests(tests, root) == 0, f"{kind}: {draft.solution} failed its tests"
    assert seen == set(FAMILIES[family])


def test_text_find_never_names_the_file() -> None:
    for seed in range(60):
        draft = draft_for("text-find", seed, "easy")
        assert draft.params["source"] not in draft.instruction
        assert "/app" in draft.instruction and draft.params["output"] in draft.instruction


def test_no_shortcut_is_rewarded() -> None:
    """Guessing a name the other families use never finds text-find's file, and `sort -u`
    never passes a plain sort task (each has a repeated line)."""
    assert not set(HIDDEN_SOURCES) & set(SOURCES)
    sorts = [d for d in _drafts("text-transform", 120) if d.params["kind"] == "sort"]
    assert sorts
    for draft in sorts:
        lines = next(iter(draft.files.values())).splitlines()
        assert len(set(lines)) < len(lines)
