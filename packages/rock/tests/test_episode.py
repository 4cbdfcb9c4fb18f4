"""The episode room's own rules, over the TaskEnv seam (the sandboxes are real local ones):
every opened sandbox is given back once, a failure of the infrastructure is a value, a fault
of the caller's own propagates, and the agent's failure is kept apart from the sandbox's.
rock bench's and the synthesis runner's episodes are tested end to end in their own files."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ale.sandbox import SandboxVerbs
from ale.task import Task, load_task
from ale.trajectory import AgentInfo, FailureMode, Trajectory
from rock.backends.base import Sandbox, SandboxError
from rock.backends.local import LocalBackend
from rock.episode import run_episode
from rock.models import SandboxSpec

TASK = (
    Path(__file__).resolve().parents[3] / "datasets" / "terminal-bench-local" / "csv-sales-report"
)


class Env:
    """Local sandboxes; ``break_at`` names the step that raises ``error``."""

    def __init__(self, root: Path, *, break_at: str = "", error: Exception | None = None) -> None:
        self.backend = LocalBackend(root)
        self.break_at, self.error = break_at, error or SandboxError("the engine went away")
        self.closed: list[str] = []

    async def open(self, task: Task) -> tuple[Sandbox, str]:
        if self.break_at == "open":
            raise self.error
        return self.backend.create(SandboxSpec()), "/app"

    async def stage_tests(self, task: Task, sandbox: Sandbox) -> None:
        if self.break_at == "stage":
            raise self.error

    async def close(self, sandbox: Sandbox) -> None:
        self.closed.append(sandbox.id)
        sandbox.delete()

    def failure_of(self, exc: Exception) -> FailureMode | None:
        return FailureMode.SANDBOX_ERROR if isinstance(exc, SandboxError) else None


class Echo:
    name = "echo"

    async def run(self, instruction: str, sandbox: SandboxVerbs, **_: Any) -> Trajectory:
        sandbox.exec("echo hi > note.txt", timeout=10)
        return Trajectory(agent=AgentInfo(name="echo"), model="none")


class Raises:
    name = "raises"

    async def run(self, instruction: str, sandbox: SandboxVerbs, **_: Any) -> Trajectory:
        raise RuntimeError("the agent's own bug")


async def _episode(env: Env, agent: Any, tmp_path: Path) -> Any:
    return await run_episode(
        load_task(TASK), agent, env, agent_timeout_sec=30, test_timeout_sec=30,
        verifier_dir=tmp_path / "verifier", traceback_dir=tmp_path / "agent",
    )  # fmt: skip


async def test_a_sandbox_that_cannot_be_had_is_a_value_and_nothing_ran(tmp_path: Path) -> None:
    env = Env(tmp_path / "root", break_at="open")
    episode = await _episode(env, Echo(), tmp_path)
    assert episode.failure == episode.infrastructure_failure == FailureMode.SANDBOX_ERROR
    assert episode.error == "no sandbox could be had: the engine went away"
    assert not episode.opened and episode.trajectory is None and env.closed == []


async def test_a_sandbox_failing_after_the_agent_keeps_its_trajectory_and_is_given_back(
    tmp_path: Path,
) -> None:
    env = Env(tmp_path / "root", break_at="stage")
    seen: list[Sandbox] = []
    episode = await run_episode(
        load_task(TASK), Echo(), env, agent_timeout_sec=30, test_timeout_sec=30,
        verifier_dir=tmp_path / "verifier", on_sandbox=seen.append,
    )  # fmt: skip
    assert episode.failure == FailureMode.SANDBOX_ERROR and episode.agent_failure is None
    assert episode.trajectory is not None and episode.verdict is None
    assert env.closed == [seen[0].id]  # given back once, after on_sandbox saw it


async def test_an_agent_that_raises_is_its_failure_not_the_sandboxes(tmp_path: Path) -> None:
    env = Env(tmp_path / "root", break_at="stage")
    episode = await _episode(env, Raises(), tmp_path)
    assert episode.agent_failure == FailureMode.AGENT_ERROR
    assert episode.infrastructure_failure == FailureMode.SANDBOX_ERROR  # staging broke after
    assert "the agent's own bug" in (tmp_path / "agent" / "agent-error.txt").read_text()
    assert len(env.closed) == 1


async def test_a_fault_of_the_callers_own_propagates_and_the_sandbox_is_still_given_back(
    tmp_path: Path,
) -> None:
    env = Env(tmp_path / "root", break_at="stage", error=KeyError("a harness bug"))
    with pytest.raises(KeyError, match="a harness bug"):
        await _episode(env, Echo(), tmp_path)
    assert len(env.closed) == 1
