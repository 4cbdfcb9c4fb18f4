"""The seam between the synthesis stages and the sandboxes they run in.

Stages never start containers themselves: they are given a :class:`SandboxRunner`, which
runs one *episode* of a task (a fresh environment of the task, an agent working in it,
then the task's tests) and reports an :class:`Outcome`. rock provides runners over its
warm pool and over one-off sandboxes; tests may pass their own.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Protocol

from pydantic import BaseModel

from ale.agents import BenchAgent
from ale.task import Task
from ale.trajectory import FailureMode, Trajectory


class Outcome(BaseModel):
    """How one episode ended."""

    reward: float | None = None
    """The verifier's reward; None when no reward was read."""
    trajectory: Trajectory | None = None
    """What the agent did, with ``reward`` and ``verifier`` filled in."""
    failure: FailureMode | None = None
    """Why the episode has no trustworthy reward, as a value (what a caller decides by);
    None when it ran through."""
    error: str | None = None
    """The same for a person: one sentence (the sandbox failed, the verifier wrote
    nothing...); None when it ran through."""
    seconds: float = 0.0

    @property
    def passed(self) -> bool:
        return self.error is None and self.reward is not None and self.reward >= 1.0 - 1e-9


class SandboxRunner(Protocol):
    """Runs episodes of tasks in sandboxes (safe to call concurrently)."""

    async def episode(
        self,
        task: Task,
        agent: BenchAgent,
        *,
        logs_dir: Path | None = None,
        before_verifier: Callable[[], Awaitable[None]] | None = None,
    ) -> Outcome:
        """A fresh environment for ``task``, ``agent`` (an :class:`ale.agents.BenchAgent`)
        run on it under the task's agent timeout, then the task's tests. ``before_verifier``
        is awaited once the agent is done, before the tests run (before each step's, in a
        multi-step task): a caller that may not need this episode's reward holds it there,
        and cancelling it there costs no verifier run."""
        ...
