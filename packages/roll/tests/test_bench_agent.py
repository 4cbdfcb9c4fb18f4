"""The ``roll-policy`` bench agent: bad arguments are one sentence before any trial; a real
rock bench run in Docker shares one model (one queue) among all its trials, and every model
call of every trial goes through it with its tokens recorded."""

from __future__ import annotations

import json
from pathlib import Path

import docker
import pytest
from click.testing import CliRunner

from ale.agents import AgentConfigError, load_agent
from iflow.models.tiny import build_tiny_model
from rock.backends.docker import DockerBackend
from rock.bench.harness import BenchOptions, Harness
from rock.bench.images import ImageBuilder, ImageMap
from rock.cli import main as rock_main
from roll import bench_agent

REPO = Path(__file__).resolve().parents[3]
TASKS = REPO / "datasets" / "synth-mini" / "tasks"


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
    import asyncio

    client = docker.from_env()
    harness = Harness(
        DockerBackend(client),
        ImageBuilder(client, ImageMap.load(user_file=None)),
        BenchOptions(n_concurrent=4, n_attempts=2),
    )
    ids = sorted(p.name for p in TASKS.iterdir())[:2]
    kwargs = {
        "model_path": str(tiny),
        "temperature": 1.0,
        "max_output_tokens": 12,
        "context_limit": 1024,
        "max_turns": 2,
        "prompt_profile": "compact",
        "tool_format": "brief",
    }
    results = await harness.run(
        TASKS, tmp_path / "run", agent="roll-policy", agent_kwargs=kwargs, task_ids=ids
    )
    assert len(results.results) == 4
    assert all(r.error is None or "harness" not in r.error for r in results.results)
    served = bench_agent._SERVED[asyncio.get_running_loop()]
    assert len(served) == 1  # one model for every trial
    (shared,) = served.values()
    calls = 0
    for trajectory_file in (tmp_path / "run").rglob("trajectory.jsonl"):
        trajectory = json.loads(trajectory_file.read_text().splitlines()[0])
        steps = [s for s in trajectory["steps"] if s.get("token_ids")]
        assert steps, f"{trajectory_file}: no model call recorded its tokens"
        calls += len(steps)
    assert calls == shared.queue.stats.requests
    await shared.queue.close()
