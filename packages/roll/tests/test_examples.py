"""The example configs validate, and `roll experts` records solved expert trajectories."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from ale.jsonl import read_jsonl
from roll.config import SFTConfig, TrainConfig, load_config
from roll.envs.registry import env_names, make_env
from roll.resample import expert_actions, record_experts

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.yaml")), ids=lambda p: p.name)
def test_example_configs_validate(path: Path) -> None:
    model = SFTConfig if path.name.startswith("sft") else TrainConfig
    config = load_config(model, path)
    assert config.run.steps >= 1


@pytest.mark.parametrize("name", env_names())
def test_every_builtin_expert_solves_its_environment(name: str) -> None:
    for trajectory in record_experts(name, range(5)):
        assert trajectory.reward == pytest.approx(1.0), trajectory.task_id
        assert trajectory.extra["roll"]["env_seed"] in range(5)


def test_recorded_experts_replay_in_the_environment() -> None:
    (trajectory,) = record_experts("guess", [7], n=16, max_turns=5)
    env = make_env("guess", n=16, max_turns=5)
    env.reset(7)
    results = [env.step(action) for action in expert_actions(trajectory)]
    assert results[-1].done and results[-1].reward == 1.0
    assert len(results) <= 5  # binary search over 16 numbers


def test_roll_experts_command(tmp_path: Path) -> None:
    out = tmp_path / "experts.jsonl"
    result = subprocess.run(
        [sys.executable, "-m", "roll.cli", "experts", "echo", "-n", "3", "--kwarg", "rounds=2",
         "-o", str(out)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "3 expert trajectories (3 solved)" in result.stdout
    assert len(list(read_jsonl(out))) == 3
    bad = subprocess.run(
        [sys.executable, "-m", "roll.cli", "experts", "gues", "-o", str(out)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert bad.returncode == 2 and "did you mean 'guess'" in bad.stderr
