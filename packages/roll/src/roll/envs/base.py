"""The in-process environment contract.

An :class:`Env` is a multi-turn text task that runs in the trainer's own process: ``reset``
gives the opening chat messages, each ``step`` takes the assistant's decoded reply and answers
with an :class:`EnvStep` (the next observation, a reward, whether the episode is over). The
rollout engine (:mod:`roll.rollout`) drives many of them in lockstep and records trajectories.

Environments are found by name in :mod:`roll.envs.registry`.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field


class EnvStep(BaseModel):
    """What the environment answers to one action."""

    model_config = ConfigDict(extra="forbid")

    observation: str | None
    """Text shown to the agent next (as a user message); None when there is nothing to show."""
    reward: float = 0.0
    """Reward for this action; an episode's reward is the sum over its steps."""
    done: bool
    """True when the episode is over."""
    info: dict[str, Any] = Field(default_factory=dict)
    """Detail for logs and tests (the expected answer, whether the action parsed)."""


@runtime_checkable
class Env(Protocol):
    """A deterministic multi-turn text environment (one instance runs one episode at a time)."""

    max_turns: int
    """Most assistant turns an episode may take; the rollout engine enforces it."""
    task_id: str
    """Names the task family and its settings (e.g. ``guess:n=10``)."""

    def reset(self, seed: int) -> list[dict[str, str]]:
        """Start an episode; the opening messages (``{"role", "content"}``, system/user)."""
        ...

    def step(self, action: str) -> EnvStep:
        """Apply the assistant's decoded reply."""
        ...
