"""The ``ale.agents`` entry point: harnesses load iflow by name and run it on a rock sandbox;
and the agent loop driven by a real (tiny, random) transformers model."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ale.agents import AgentNotFound, load_agent, parse_agent_kwargs
from ale.trajectory import FailureMode, Role
from iflow.agent import Agent
from iflow.bench import IflowAgent
from iflow.config import AgentConfig
from iflow.models.scripted import ScriptedModel
from iflow.workspace.local import LocalWorkspace


def test_the_entry_point_is_registered() -> None:
    agent = load_agent("iflow", model="some-model", max_turns=7)
    assert isinstance(agent, IflowAgent)
    assert agent.settings.max_turns == 7 and agent.settings.approval_mode == "yolo"
    with pytest.raises(AgentNotFound, match=r"installed agents: .*iflow"):
        load_agent("no-such-agent")
    assert parse_agent_kwargs(["max_turns=30", "provider=scripted"]) == {
        "max_turns": 30,
        "provider": "scripted",
    }
    with pytest.raises(ValueError, match="key=value"):
        parse_agent_kwargs(["oops"])


@pytest.mark.docker
async def test_iflow_solves_a_task_in_a_docker_sandbox(docker_sandbox: Any, tmp_path: Path) -> None:
    docker_sandbox.exec(["mkdir", "-p", "/app"])
    script = tmp_path / "script.json"
    script.write_text(
        json.dumps(
            [
                {
                    "tool_calls": [
                        {
                            "name": "run_shell_command",
                            "arguments": {"command": "cd /app && echo 42 > answer.txt"},
                        }
                    ]
                },
                {"tool_calls": [{"name": "read_file", "arguments": {"path": "/app/answer.txt"}}]},
                {"tool_calls": [{"name": "finish", "arguments": {"summary": "wrote 42"}}]},
            ]
        )
    )
    agent = load_agent("iflow", provider="scripted", script=str(script))
    trajectory = await agent.run(
        "Write 42 into /app/answer.txt", docker_sandbox, logs_dir=tmp_path / "logs", timeout_sec=120
    )
    assert trajectory.failure_mode is None
    assert docker_sandbox.exec("cat /app/answer.txt").stdout_text == "42\n"
    assert trajectory.agent.extra["workspace"] == "sandbox"
    assert (tmp_path / "logs" / "trajectory.jsonl").exists()
    assert (tmp_path / "logs" / "trajectory.atif.json").exists()
    read = [s for s in trajectory.steps if s.role is Role.TOOL][1].tool_results[0]
    assert "42" in read.content


async def test_a_tiny_random_model_drives_the_loop_without_crashing(tmp_path: Path) -> None:
    from iflow.models.local import LocalModel
    from iflow.models.tiny import build_tiny_model

    # the system prompt and tool schemas take ~5.5k tokens with a 512-token vocabulary
    path = build_tiny_model(tmp_path / "tiny", seed=3, max_position_embeddings=16384)
    model = LocalModel(path, max_new_tokens=24, temperature=1.0, seed=0)
    async with LocalWorkspace(tmp_path) as ws:
        agent = Agent(model, ws, config=AgentConfig(approval_mode="yolo", max_turns=4))
        end = await agent.run("list the files")
        await agent.aclose()
    # a random model writes garbage: the run ends by a limit or a format error, never a crash
    assert end.failure_mode in (None, FailureMode.FORMAT_ERROR, FailureMode.LIMITS_EXCEEDED)
    sampled = [s for s in agent.trajectory.steps if s.role is Role.ASSISTANT]
    assert sampled and all(s.token_ids and len(s.logprobs) == len(s.token_ids) for s in sampled)
    assert all(s.prompt_token_ids for s in sampled)
    assert agent.context_used() == model.count_tokens(agent.history, agent.schemas)


@pytest.mark.docker
async def test_model_object_for_trainers(tmp_path: Path, docker_sandbox: Any) -> None:
    agent = IflowAgent(model_obj=ScriptedModel([{"content": "nothing to do"}]))
    trajectory = await agent.run("say hi", docker_sandbox, root="/tmp")
    assert trajectory.failure_mode is None and trajectory.model == "scripted"
