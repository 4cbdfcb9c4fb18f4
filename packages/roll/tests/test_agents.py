"""The agent adapters roll registers (mini-swe-agent, command) without a sandbox: their
arguments, how their runs are read, and what a program is given (they run in Docker
sandboxes through the gateway in test_agentic_docker)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from ale.agents import AgentConfigError, load_agent
from ale.trajectory import FailureMode, Role
from roll.agents.mini_swe_agent import MiniSweAgent, to_trajectory


def test_it_is_registered_and_refuses_to_start_without_a_server_in_one_sentence() -> None:
    with pytest.raises(
        AgentConfigError, match=r"needs a model server: give --model and .*base_url"
    ):
        load_agent("mini-swe-agent")
    with pytest.raises(AgentConfigError, match="toolcall or text, not 'json'"):
        MiniSweAgent("policy", base_url="http://127.0.0.1:9/v1", actions="json")  # type: ignore[arg-type]
    agent = load_agent("mini-swe-agent", model="policy", base_url="http://127.0.0.1:9/v1")
    assert agent.name == "mini-swe-agent"


def _messages(exit_status: str) -> list[dict]:
    return [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": "Please solve this issue: list files"},
        {
            "role": "assistant",
            "content": "Looking.",
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "bash", "arguments": '{"command": "ls"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": '{"returncode": 0, "output": "a.txt"}'},
        {"role": "exit", "content": "", "extra": {"exit_status": exit_status, "submission": ""}},
    ]


@pytest.mark.parametrize(
    ("status", "failure"),
    [
        ("Submitted", None),
        ("LimitsExceeded", FailureMode.LIMITS_EXCEEDED),
        ("TimeExceeded", FailureMode.AGENT_TIMEOUT),
        ("RepeatedFormatError", FailureMode.FORMAT_ERROR),
        ("SomethingElse", FailureMode.AGENT_ERROR),
    ],
)
def test_its_messages_and_exit_status_become_a_trajectory(
    status: str, failure: FailureMode | None
) -> None:
    trajectory = to_trajectory(_messages(status))
    assert [s.role for s in trajectory.steps] == [Role.SYSTEM, Role.USER, Role.ASSISTANT, Role.TOOL]
    call = trajectory.steps[2].tool_calls[0]
    assert (call.id, call.name, call.arguments) == ("c1", "bash", {"command": "ls"})
    assert trajectory.steps[3].tool_results[0].call_id == "c1"
    assert trajectory.failure_mode == failure
    assert trajectory.extra["mini_swe_agent"]["exit_status"] == status


def test_a_model_call_that_failed_is_the_model_s_failure_and_a_crash_the_agent_s() -> None:
    import openai

    refused = openai.APIConnectionError(request=None)  # type: ignore[arg-type]
    assert to_trajectory(_messages("x")[:2], refused).failure_mode == FailureMode.MODEL_ERROR
    assert to_trajectory([], ValueError("bug")).failure_mode == FailureMode.AGENT_ERROR


class _DaemonSandbox:
    """What the command agent reads of a daemon's sandbox: its id and its client's address."""

    id = "sb-123"

    class client:
        url = "http://127.0.0.1:7480"
        token = "secret"


async def test_a_program_gets_the_model_server_and_the_sandbox_and_its_exit_says_how_it_ended(
    tmp_path: Path,
) -> None:
    import sys

    from roll.agents.command import CommandAgent

    show = "import os, sys; print(sys.stdin.read(), *(os.environ[k] for k in sys.argv[1:]))"
    names = ["OPENAI_BASE_URL", "OPENAI_API_KEY", "OPENAI_MODEL", "ROCK_URL", "ROCK_TOKEN"]
    agent = CommandAgent(
        "policy",
        command=[sys.executable, "-c", show, *names, "ROCK_SANDBOX_ID"],
        base_url="http://127.0.0.1:9/v1",
        api_key="k1",
    )
    trajectory = await agent.run("do it", _DaemonSandbox(), logs_dir=tmp_path)  # type: ignore[arg-type]
    assert trajectory.failure_mode is None
    expected = "do it http://127.0.0.1:9/v1 k1 policy http://127.0.0.1:7480 secret sb-123"
    assert (tmp_path / "command.log").read_text().strip() == expected
    failing = CommandAgent(command=[sys.executable, "-c", "raise SystemExit(3)"])
    ended = await failing.run("x", _DaemonSandbox())  # type: ignore[arg-type]
    assert (
        ended.failure_mode == FailureMode.AGENT_ERROR and ended.extra["command"]["exit_code"] == 3
    )
    slow = CommandAgent(command=["sh", "-c", "sleep 30 & sleep 30"])
    began = time.monotonic()
    late = await slow.run("x", _DaemonSandbox(), timeout_sec=0.5)  # type: ignore[arg-type]
    assert late.failure_mode == FailureMode.AGENT_TIMEOUT and time.monotonic() - began < 10


async def test_a_command_agent_without_a_command_or_with_a_missing_one_is_one_sentence() -> None:
    from roll.agents.command import CommandAgent

    with pytest.raises(AgentConfigError, match="needs the program to run"):
        load_agent("command")
    missing = CommandAgent(command="no-such-agent-program --fast")
    with pytest.raises(AgentConfigError, match="could not start 'no-such-agent-program'"):
        await missing.run("x", _DaemonSandbox())  # type: ignore[arg-type]
