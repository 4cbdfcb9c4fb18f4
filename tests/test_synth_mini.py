"""datasets/synth-mini: the committed synthesized dataset is what its config makes, and
its tasks and trajectories hold up in real sandboxes."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pytest

from ale.jsonl import read_jsonl
from ale.synth.config import load_config
from ale.synth.dataset import dataset_stats, tree_digest
from ale.synth.family import draft_for
from ale.synth.plan import plan
from ale.synth.render import render_task
from ale.task import load_task
from ale.trajectory import Role, StepMark

ROOT = Path(__file__).resolve().parents[1]
DATASET = ROOT / "datasets" / "synth-mini"
CONFIG = ROOT / "datasets" / "synth-mini.yaml"


@pytest.fixture(scope="module")
def manifest() -> dict:
    return json.loads((DATASET / "manifest.json").read_text())


def test_make_up_follows_the_config(manifest: dict) -> None:
    config = load_config(CONFIG)
    stats = dataset_stats(DATASET)
    assert stats["digests_ok"] and stats["tasks"] == stats["trajectories"] == config.target
    assert len(stats["by"]["family"]) >= 12
    for dim in ("category", "difficulty"):
        for value, row in manifest["proportions"][dim].items():
            assert abs(row["achieved"] - row["declared"]) <= 0.02, (dim, value)
    assert stats["bytes"] < 8_000_000  # small on disk


def test_every_task_regenerates_byte_for_byte_from_the_config(manifest: dict) -> None:
    config = load_config(CONFIG)
    planned = {c.id: c for c in plan(config)}
    with tempfile.TemporaryDirectory() as tmp:
        for entry in manifest["tasks"]:
            c = planned[entry["id"]]
            path = render_task(
                draft_for(c.family, c.seed, c.difficulty),
                Path(tmp) / c.id,
                family=c.family,
                category=c.category,
                difficulty=c.difficulty,
                seed=c.seed,
            )
            assert tree_digest(path) == manifest["digests"]["per_task"][c.id], c.id


def test_tasks_load_and_trajectories_are_solved_expert_runs(manifest: dict) -> None:
    ids = {t["id"] for t in manifest["tasks"]}
    for task_id in ids:
        task = load_task(DATASET / "tasks" / task_id)
        assert task.metadata.extra["family"] == task_id.rsplit("-", 1)[0]
    trajectories = list(read_jsonl(DATASET / "trajectories.jsonl"))
    assert {t.task_id for t in trajectories} == ids
    for t in trajectories:
        assert t.reward == 1.0 and t.failure_mode is None and t.model == "expert"
        assert t.steps[0].role is Role.SYSTEM and t.steps[1].role is Role.USER
        assert t.steps[-2].tool_calls[0].name == "finish"
    mistakes = sum(any(s.mark is StepMark.MISTAKE for s in t.steps) for t in trajectories)
    assert 0.1 <= mistakes / len(trajectories) <= 0.3  # mistake_rate 0.2


@pytest.mark.docker
def test_a_sample_passes_the_bench_gate_with_real_image_builds(tmp_path: Path) -> None:
    """Built by `rock bench` from their Dockerfiles (not the synth runner's shortcut):
    the oracle passes and the no-op agent fails."""
    from click.testing import CliRunner

    from rock.cli import main

    sample = tmp_path / "sample"
    sample.mkdir()
    tasks = sorted((DATASET / "tasks").iterdir())
    families_seen: set[str] = set()
    for task in tasks:  # one task of each of the first four families
        family = task.name.rsplit("-", 1)[0]
        if family not in families_seen and len(families_seen) < 4:
            families_seen.add(family)
            (sample / task.name).symlink_to(task)
    result = CliRunner().invoke(
        main,
        [
            "bench",
            "check",
            str(sample),
            "--strict",  # their tests install what they need, as Harbor runs them
            "--output",
            str(tmp_path / "runs"),
            "--n-concurrent",
            "2",
        ],
    )
    assert result.exit_code == 0, result.output
    assert "0 offender(s)" in result.output
