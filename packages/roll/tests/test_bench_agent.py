"""The ``roll-policy`` bench agent: bad arguments are one sentence before any trial; a real
rock bench run in Docker shares one model (one queue) among all its trials, and every model
call of every trial goes through it with its tokens recorded."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner
from policy_bench import TASKS, recorded_calls, run_policy

from ale.agents import AgentConfigError, load_agent
from iflow.models.tiny import build_tiny_model
from rock.cli import main as rock_main


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_model(tmp_path_factory.mktemp("tiny"), hidden_size=32, layers=1, heads=2)


@pytest.mark.parametrize(
    ("kwargs", "said"),
    [
        ({}, "needs a model directory"),
        ({"model_path": "/"}, "is not a model directory"),
        ({"model_path": "/nonexistent"}, "there is no model directory"),
        ({"temperature": -1}, "sampling arguments are invalid"),
        ({"top_p": 0}, "sampling arguments are invalid"),
        ({"max_output_tokens": "many"}, "sampling arguments are invalid"),
        ({"max_batch": 0}, "max_batch must be at least 1"),
        ({"max_turns": "lots"}, "iflow settings"),
        ({"server_url": "localhost:8000"}, "server_url must be an http(s) URL"),
    ],
)
def test_bad_arguments_are_one_sentence(tiny: Path, kwargs: dict, said: str) -> None:
    if "model_path" not in kwargs and kwargs:
        kwargs = {"model_path": str(tiny), **kwargs}
    with pytest.raises(AgentConfigError) as caught:
        load_agent("roll-policy", **kwargs)
    assert said in str(caught.value)
    assert "\n" not in str(caught.value)


@pytest.mark.docker
def test_cli_without_a_model_says_what_to_give(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        rock_main,
        ["bench", "run", "--dataset", str(TASKS), "--agent", "roll-policy",
         "--output", str(tmp_path / "run")],
    )  # fmt: skip
    assert result.exit_code != 0
    assert "model_path=DIR" in result.output
    assert "Traceback" not in result.output


@pytest.mark.docker
async def test_trials_share_one_batched_model(tiny: Path, tmp_path: Path) -> None:
    kwargs = {"model_path": str(tiny), "context_limit": 1024}
    _, shared = await run_policy(tmp_path / "run", kwargs, tasks=2, concurrent=4, attempts=2)
    assert recorded_calls(tmp_path / "run") == shared.queue.stats.requests
    await shared.queue.close()
