"""A teacher model behind an OpenAI-compatible endpoint produces synthesis trajectories
through the iflow agent; a task the teacher fails goes to the family's expert."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from ale.synth.config import parse_config
from ale.synth.pipeline import Pipeline
from ale.synth.plan import plan
from rock.backends.docker import DockerBackend
from rock.episode_runner import FreshSandboxes, PoolRunner
from rock.pool_image import ensure_pool_image
from rock.synth.wiring import SynthAgents

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "packages/iflow-cli/tests"))
from openai_server import Reply, serve_openai

pytestmark = pytest.mark.docker


def _solve_with(solution: Path) -> list[Reply]:
    """What a teacher that knows the answer says: write the script, run it, finish."""
    body = solution.read_text()
    return [
        Reply(
            tool_calls=[{"name": "write_file", "arguments": {"path": "/tmp/s.sh", "content": body}}]
        ),
        Reply(
            tool_calls=[{"name": "run_shell_command", "arguments": {"command": "bash /tmp/s.sh"}}]
        ),
        Reply(tool_calls=[{"name": "finish", "arguments": {"summary": "done"}}]),
    ]


async def test_teacher_trajectories_and_expert_fallback(tmp_path: Path) -> None:
    ensure_pool_image()
    data = {
        "name": "teach",
        "seed": 5,
        "target": 2,
        "oversample": 1.0,
        "concurrency": 1,
        "families": ["csv-aggregate"],
        "mistake_rate": 0.0,
        "decontamination": {"sets": []},
        "teacher": {"base_url": "http://unused", "model": "teacher-m", "share": 1.0},
    }
    first, second = plan(parse_config(data))
    with serve_openai() as server:
        data["teacher"]["base_url"] = server.base_url
        config = parse_config(data)
        pipe = Pipeline(
            config,
            PoolRunner(FreshSandboxes(DockerBackend())),
            SynthAgents(config),
            work_dir=tmp_path / "work",
            output=tmp_path / "out",
        )
        # generate first so the oracle scripts exist, then script the teacher
        pipe_candidates = tmp_path / "work" / "candidates"
        from ale.synth.family import draft_for
        from ale.synth.render import render_task

        for c in (first, second):
            render_task(
                draft_for(c.family, c.seed, c.difficulty),
                pipe_candidates / c.id,
                family=c.family,
                category=c.category,
                difficulty=c.difficulty,
                seed=c.seed,
            )
        server.push(*_solve_with(pipe_candidates / first.id / "solution" / "solve.sh"))
        server.push(Reply(tool_calls=[{"name": "finish", "arguments": {"summary": "gave up"}}]))
        manifest = await pipe.run()
    sources = {t["id"]: t["source"] for t in manifest["tasks"]}
    assert sources == {first.id: "teacher", second.id: "expert"}
    assert all(r["model"] == "teacher-m" for r in server.requests)
    assert manifest["counts"]["replay"]["kept"] == 2
