"""The episode seam: one episode of a task (a fresh environment of it, an agent working in
it, then its tests), and how it ended as one result.

Whatever needs episodes run in sandboxes — RL training (roll), the synthesis stages
(:mod:`ale.synth`) — is given an :class:`EpisodeRunner` and never starts a container itself;
each episode comes back as an :class:`EpisodeResult`, its failure one
:class:`~ale.trajectory.FailureMode` value whose meaning (``is_infrastructure``) is decided
with the enum, not again by each caller. rock provides runners over its warm pool and over
one-off sandboxes; tests may pass their own.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Protocol

from pydantic import BaseModel

from ale.agents import BenchAgent
from ale.task import Task
from ale.trajectory import FailureMode, Trajectory


class EpisodeResult(BaseModel):
    """How one episode ended: what every caller of an :class:`EpisodeRunner` gets."""

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

    @property
    def unscored(self) -> FailureMode | None:
        """None when the reward stands as the agent's result (whatever the agent did: a
        format error, turns or time used up, a loop); else why it cannot — an
        infrastructure failure (:attr:`FailureMode.is_infrastructure`, the episode's or the
        one its trajectory ended with), an agent that timed out or raised without returning
        what it did, or :attr:`FailureMode.UNKNOWN` for no reward or an error with no
        failure named. Decided by values only, never by the error's wording: what RL drops
        and runs again."""
        trajectory = self.trajectory
        ended = trajectory.failure_mode if trajectory is not None else None
        if ended is not None and ended.is_infrastructure:
            return ended
        if self.failure is None:
            clean = self.error is None and self.reward is not None
            return None if clean else FailureMode.UNKNOWN
        if self.failure == FailureMode.AGENT_TIMEOUT and trajectory is not None:
            return None  # the agent's own time ran out and it said what it did: its result
        return self.failure


class EpisodeRunner(Protocol):
    """Runs episodes of tasks in sandboxes (safe to call concurrently)."""

    async def episode(
        self,
        task: Task,
        agent: BenchAgent,
        *,
        logs_dir: Path | None = None,
        before_verifier: Callable[[], Awaitable[None]] | None = None,
    ) -> EpisodeResult:
        """A fresh environment for ``task``, ``agent`` (an :class:`ale.agents.BenchAgent`)
        run on it under the task's agent timeout, then the task's tests. ``before_verifier``
        is awaited once the agent is done, before the tests run (before each step's, in a
        multi-step task): a caller that may not need this episode's reward holds it there,
        and cancelling it there costs no verifier run."""
        ...
