"""The expert model: a synthesis expert acting through the agent loop, and replays."""

from __future__ import annotations

from pathlib import Path

from ale.synth.expert import ExpertRun, shell, write
from ale.trajectory import Role, StepMark
from iflow.agent import Agent
from iflow.bench import IflowAgent
from iflow.config import AgentConfig
from iflow.models.expert import ExpertModel, replay_script
from iflow.workspace.local import LocalWorkspace


def _program():
    seen = yield shell("cat port.txt", "Which port is configured?")
    port = int(seen.output.strip())
    yield write("next.txt", f"{port + 1}\n", f"The port is {port}; writing the next one.")
    checked = yield shell("cat next.txt")
    return f"next port {checked.output.strip()}"


async def _run(tmp_path: Path, model: object) -> Agent:
    async with LocalWorkspace(tmp_path) as ws:
        agent = Agent(model, ws, config=AgentConfig(approval_mode="yolo", max_turns=10))
        await agent.run("Write the port after the configured one to next.txt")
        await agent.aclose()
    return agent


async def test_expert_acts_on_what_it_sees_through_the_loop(tmp_path: Path) -> None:
    (tmp_path / "port.txt").write_text("8080\n")
    agent = await _run(tmp_path, ExpertModel(ExpertRun(_program(), mistake=True)))
    assert (tmp_path / "next.txt").read_text() == "8081\n"
    t = agent.trajectory
    assert t.failure_mode is None
    turns = [s for s in t.steps if s.role is Role.ASSISTANT]
    names = [c.name for s in turns for c in s.tool_calls]
    assert names == [
        "run_shell_command",
        "run_shell_command",
        "write_file",
        "run_shell_command",
        "finish",
    ]
    assert turns[0].tool_calls[0].arguments == {"command": "catt port.txt"}
    assert turns[0].mark is StepMark.MISTAKE and turns[1].mark is StepMark.RECOVERY
    assert [c.id for s in turns for c in s.tool_calls][:2] == ["call_0001", "call_0002"]
    errors = next(s.tool_results[0] for s in t.steps if s.role is Role.TOOL)
    assert errors.is_error and "command not found" in errors.content
    assert t.steps[0].role is Role.SYSTEM  # the same system prompt a policy sees


async def test_replay_issues_the_same_calls_again(tmp_path: Path) -> None:
    first, second = tmp_path / "a", tmp_path / "b"
    for d in (first, second):
        d.mkdir()
        (d / "port.txt").write_text("41\n")
    recorded = (await _run(first, ExpertModel(ExpertRun(_program())))).trajectory
    agent = IflowAgent(replay=recorded)
    replayed = await _run(second, agent._model)
    assert (second / "next.txt").read_text() == "42\n"
    calls = lambda t: [(c.name, c.arguments) for s in t.steps for c in s.tool_calls]  # noqa: E731
    assert calls(replayed.trajectory) == calls(recorded)
    assert len(replay_script(recorded.steps)) == 4
