"""The episode room: a task's sandbox readied, any agent run under its timeout, the tests
put in, the verifier run, and how it ended as one value.

``rock bench`` (a trial: built image, fresh sandbox, recorded commands) and rock's synthesis
runner (a materialised task in a pooled sandbox; what roll trains on, and the synthesis
stages) differ only in how a task gets its sandbox, how the tests go in and how the sandbox
is given back: each says so in a :class:`TaskEnv`, and both run :func:`run_episode`.
Failures come back as the one :class:`ale.trajectory.FailureMode` (what callers decide by,
roll's "resample or score" included), with a sentence for people beside it.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import time
import traceback
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal, Protocol

from ale.agents import BenchAgent
from ale.sandbox import SandboxVerbs
from ale.task import Task
from ale.trajectory import FailureMode, Trajectory, VerifierResult, VerifierTest
from rock.backends.base import Sandbox, SandboxError
from rock.bench.verify import VerifierOutcome, run_verifier

AGENT_GRACE_SEC = 5.0
"""How long past its timeout an agent may take to return its trajectory before it is
cancelled."""
AGENT_TRACEBACK = "agent-error.txt"
"""Where, in the traceback directory, the traceback of an agent that raised is written."""


def episode_threads(episodes: int) -> ThreadPoolExecutor:
    """Threads for the blocking sandbox calls of ``episodes`` concurrent episodes, to make
    an event loop's default executor: each episode may hold one at a time for a command, a
    container start or removal, or a verifier run of seconds, and asyncio's own default has
    ``cpu_count + 4`` — six on a 2-core machine, behind which the others' calls would wait."""
    return ThreadPoolExecutor(max(8, 2 * episodes + 4), thread_name_prefix="rock-episode")


@dataclass
class AgentRun:
    """How the agent's part of an episode ended."""

    trajectory: Trajectory | None
    failure: FailureMode | None = None
    """``AGENT_TIMEOUT`` or ``AGENT_ERROR`` when the agent returned no trajectory."""
    error: str | None = None
    seconds: float = 0.0


class EpisodeSandbox(SandboxVerbs, Protocol):
    """The sandbox an episode lends its agent, and can interrupt at the agent's timeout."""

    def interrupt(self) -> int:
        """Stop the commands running in the sandbox; how many were."""
        ...


async def run_agent(
    agent: BenchAgent,
    instruction: str,
    sandbox: EpisodeSandbox,
    *,
    timeout_sec: float,
    traceback_dir: Path | None = None,
    **options: Any,
) -> AgentRun:
    """Run ``agent`` on ``instruction`` in ``sandbox``: cancelled (and the sandbox's running
    command interrupted) :data:`AGENT_GRACE_SEC` past its timeout; an agent that raises is
    an ``AGENT_ERROR`` with its traceback in ``traceback_dir``. A :class:`SandboxError` is not
    the agent's: it propagates. ``options`` go to ``agent.run`` as they are."""
    started = time.monotonic()
    try:
        trajectory = await asyncio.wait_for(
            agent.run(instruction, sandbox, timeout_sec=timeout_sec, **options),
            timeout_sec + AGENT_GRACE_SEC,
        )
    except TimeoutError:
        with contextlib.suppress(Exception):
            await asyncio.to_thread(sandbox.interrupt)
        return AgentRun(
            None,
            FailureMode.AGENT_TIMEOUT,
            f"the agent ran past its timeout of {timeout_sec:g} s and was stopped",
            round(time.monotonic() - started, 3),
        )
    except SandboxError:
        raise
    except Exception as exc:
        if traceback_dir is not None:
            traceback_dir.mkdir(parents=True, exist_ok=True)
            (traceback_dir / AGENT_TRACEBACK).write_text(traceback.format_exc())
        return AgentRun(
            None,
            FailureMode.AGENT_ERROR,
            f"the agent raised {type(exc).__name__}: {exc}",
            round(time.monotonic() - started, 3),
        )
    return AgentRun(trajectory, seconds=round(time.monotonic() - started, 3))


class TaskEnv(Protocol):
    """Where an episode's task lives: how its sandbox is had with the task in place, how the
    tests go in after the agent, how the sandbox is given back, and which exceptions of
    those steps are the infrastructure's (a failure of the episode, not of the caller)."""

    async def open(self, task: Task) -> tuple[Sandbox, str]:
        """A sandbox holding ``task``, and the directory the agent starts in."""
        ...

    async def stage_tests(self, task: Task, sandbox: Sandbox) -> None:
        """Put the task's tests (and the verifier's tools) into ``sandbox``."""
        ...

    async def close(self, sandbox: Sandbox) -> None:
        """Give ``sandbox`` back (delete it, return it to its pool, or keep it)."""
        ...

    def failure_of(self, exc: Exception) -> FailureMode | None:
        """The failure ``exc`` (raised while opening, staging or verifying) means; None for a
        fault of the caller's own, which propagates."""
        ...


@dataclass
class Episode:
    """How one episode went: the agent's part, the verifier's, and the first failure."""

    trajectory: Trajectory | None = None
    verdict: VerifierOutcome | None = None
    verifier_stdout: str = ""
    failure: FailureMode | None = None
    """The first thing that failed: the sandbox, the agent (timeout, error) or the verifier;
    None when it ran through (the trajectory's own end, a turn limit say, is not one)."""
    error: str | None = None
    """The same for a person, one sentence."""
    opened: bool = False
    """Whether a sandbox was had (a failure before it: nothing ran)."""
    setup_sec: float = 0.0
    agent_sec: float = 0.0
    agent_started_at: datetime | None = None
    agent_ended_at: datetime | None = None
    test_started_at: datetime | None = None
    agent_failure: FailureMode | None = None
    """The agent's part alone: ``AGENT_TIMEOUT`` or ``AGENT_ERROR`` when it returned no
    trajectory."""
    infrastructure_failure: FailureMode | None = None
    """What an exception of the sandbox (or the daemon) ended the episode with, if one did."""

    @property
    def reward(self) -> float | None:
        return self.verdict.reward if self.verdict is not None else None


async def run_episode(
    task: Task,
    agent: BenchAgent,
    env: TaskEnv,
    *,
    agent_timeout_sec: float,
    test_timeout_sec: float,
    verifier_dir: Path,
    logs_dir: Path | None = None,
    traceback_dir: Path | None = None,
    agent_sandbox: Callable[[Sandbox], EpisodeSandbox] | None = None,
    on_sandbox: Callable[[Sandbox], None] | None = None,
) -> Episode:
    """One episode of ``task`` with ``agent`` in ``env``: open, run the agent under its
    timeout (through ``agent_sandbox``, a recorder say, when given), stage the tests, run the
    verifier into ``verifier_dir`` (also after an agent timeout or error), and give the
    sandbox back. Infrastructure failures (``env.failure_of``) end the episode as values;
    ``on_sandbox`` sees the sandbox before it is given back."""
    episode = Episode()
    started = time.monotonic()
    try:
        sandbox, workdir = await env.open(task)
    except Exception as exc:
        episode.failure = episode.infrastructure_failure = _infrastructure(env, exc)
        episode.error = f"no sandbox could be had: {exc}"
        return episode
    episode.opened = True
    episode.setup_sec = round(time.monotonic() - started, 3)
    try:
        await _agent_and_verifier(
            episode, task, agent, env, sandbox, workdir, agent_timeout_sec, test_timeout_sec,
            verifier_dir, logs_dir, traceback_dir, agent_sandbox,
        )  # fmt: skip
    except Exception as exc:
        episode.failure = episode.infrastructure_failure = _infrastructure(env, exc)
        episode.error = str(exc) if isinstance(exc, SandboxError) else (
            f"the episode failed: {type(exc).__name__}: {exc}"
        )  # fmt: skip
    finally:
        if on_sandbox is not None:
            on_sandbox(sandbox)
        await asyncio.shield(env.close(sandbox))
    return episode


async def _agent_and_verifier(
    episode: Episode,
    task: Task,
    agent: BenchAgent,
    env: TaskEnv,
    sandbox: Sandbox,
    workdir: str,
    agent_timeout_sec: float,
    test_timeout_sec: float,
    verifier_dir: Path,
    logs_dir: Path | None,
    traceback_dir: Path | None,
    agent_sandbox: Callable[[Sandbox], EpisodeSandbox] | None,
) -> None:
    options: dict[str, Any] = {}
    if logs_dir is not None:
        options["logs_dir"] = logs_dir
    if workdir != "/app" and "root" in inspect.signature(agent.run).parameters:
        options["root"] = workdir  # agents that can start elsewhere start in the task's WORKDIR
    episode.agent_started_at = datetime.now(UTC)
    ran = await run_agent(
        agent,
        task.instruction,
        agent_sandbox(sandbox) if agent_sandbox is not None else sandbox,
        timeout_sec=agent_timeout_sec,
        traceback_dir=traceback_dir,
        **options,
    )
    episode.agent_ended_at = datetime.now(UTC)
    episode.agent_sec = ran.seconds
    episode.trajectory = ran.trajectory
    episode.agent_failure = episode.failure = ran.failure
    episode.error = ran.error
    await env.stage_tests(task, sandbox)
    episode.test_started_at = datetime.now(UTC)
    verdict = await asyncio.to_thread(
        run_verifier, task, sandbox, verifier_dir, timeout_sec=test_timeout_sec
    )
    episode.verdict = verdict
    stdout = verifier_dir / "stdout.txt"
    episode.verifier_stdout = stdout.read_text(errors="replace") if stdout.is_file() else ""
    if episode.failure is None and verdict.failure_mode != FailureMode.NONE:
        episode.failure = verdict.failure_mode
        episode.error = verdict.error or f"the verifier failed ({verdict.failure_mode})"


def _infrastructure(env: TaskEnv, exc: Exception) -> FailureMode:
    failure = env.failure_of(exc)
    if failure is None:
        raise exc
    return failure


def verifier_result(
    verdict: VerifierOutcome, *, stdout: str | None = None, failure: FailureMode | None = None
) -> VerifierResult:
    """The verifier's verdict as a trajectory records it (``failure``: how the episode
    failed, when it did)."""
    return VerifierResult(
        reward=verdict.reward,
        passed=verdict.is_resolved,
        exit_code=verdict.exit_code,
        tests=[
            VerifierTest(name=name, status=_status(status))
            for name, status in (verdict.parser_results or {}).items()
        ],
        stdout=stdout[-4000:] if stdout else None,
        detail={
            **({"failure_mode": failure.value} if failure is not None else {}),
            **({"rewards": verdict.rewards} if set(verdict.rewards or {}) - {"reward"} else {}),
        },
    )


TestStatus = Literal["passed", "failed", "error", "skipped"]
_STATUSES: dict[str, TestStatus] = {s: s for s in ("passed", "failed", "error", "skipped")}


def _status(value: str) -> TestStatus:
    return _STATUSES.get(value.lower(), "error")


__all__ = [
    "AGENT_GRACE_SEC",
    "AgentRun",
    "Episode",
    "EpisodeSandbox",
    "TaskEnv",
    "episode_threads",
    "run_agent",
    "run_episode",
    "verifier_result",
]
