"""The episode's middle, written once: an agent run under its timeout, and the verifier's
verdict as the trajectory records it.

``rock bench`` (a trial: built image, fresh sandbox, recorded commands) and rock's synthesis
runner (a materialised task in a pooled sandbox; what roll trains on) differ in how a task
gets its sandbox and where logs go, not in how the agent is run or how a failure is named:
both call :func:`run_agent` and :func:`verifier_result`, and failures come back as the one
:class:`ale.trajectory.FailureMode`, with a sentence for people beside it.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol

from ale.agents import BenchAgent
from ale.sandbox import SandboxVerbs
from ale.trajectory import FailureMode, Trajectory, VerifierResult, VerifierTest
from rock.backends.base import SandboxError
from rock.bench.verify import VerifierOutcome

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
        detail={"failure_mode": failure.value} if failure is not None else {},
    )


TestStatus = Literal["passed", "failed", "error", "skipped"]
_STATUSES: dict[str, TestStatus] = {s: s for s in ("passed", "failed", "error", "skipped")}


def _status(value: str) -> TestStatus:
    return _STATUSES.get(value.lower(), "error")


__all__ = ["AGENT_GRACE_SEC", "AgentRun", "episode_threads", "run_agent", "verifier_result"]
