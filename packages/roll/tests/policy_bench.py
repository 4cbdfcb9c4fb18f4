"""A real ``rock bench`` run of the ``roll-policy`` agent on synth-mini tasks, and what its
trials recorded: shared by the tests of the agent on roll's HF backend and on a vLLM server."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import docker

from rock.backends.docker import DockerBackend
from rock.bench.harness import Harness
from rock.bench.images import ImageBuilder, ImageMap
from rock.bench.options import BenchOptions
from rock.bench.results import BenchmarkResults
from roll import bench_agent

TASKS = Path(__file__).resolve().parents[3] / "datasets" / "synth-mini" / "tasks"
SMALL = {
    "temperature": 1.0,
    "max_output_tokens": 12,
    "max_turns": 2,
    "prompt_profile": "compact",
    "tool_format": "brief",
}
"""Short episodes of a tiny model: sampled, a dozen tokens a turn, two turns."""


async def run_policy(
    out: Path, kwargs: dict[str, Any], *, tasks: int, concurrent: int, attempts: int = 1
) -> tuple[BenchmarkResults, Any]:
    """The first ``tasks`` tasks run by ``roll-policy`` with ``kwargs`` (over :data:`SMALL`)
    into ``out``; the results and the one shared queue every trial used."""
    client = docker.from_env()
    harness = Harness(
        DockerBackend(client),
        ImageBuilder(client, ImageMap.load(user_file=None)),
        BenchOptions(n_concurrent=concurrent, n_attempts=attempts),
    )
    ids = sorted(p.name for p in TASKS.iterdir())[:tasks]
    results = await harness.run(
        TASKS, out, agent="roll-policy", agent_kwargs={**SMALL, **kwargs}, task_ids=ids
    )
    assert len(results.results) == tasks * attempts
    assert all(r.error is None or "harness" not in r.error for r in results.results)
    served = bench_agent._SERVED[asyncio.get_running_loop()]
    assert len(served) == 1  # one model for every trial
    (shared,) = served.values()
    return results, shared


def recorded_calls(out: Path) -> int:
    """The model calls the run's trajectories recorded with their tokens (each trial has)."""
    calls = 0
    for trajectory_file in out.rglob("trajectory.jsonl"):
        trajectory = json.loads(trajectory_file.read_text().splitlines()[0])
        steps = [s for s in trajectory["steps"] if s.get("token_ids")]
        assert steps, f"{trajectory_file}: no model call recorded its tokens"
        calls += len(steps)
    return calls
