"""The in-process environment contract, and finding environments by name.

An :class:`Env` is a multi-turn text task that runs in the trainer's own process: ``reset``
gives the opening chat messages, each ``step`` takes the assistant's decoded reply and answers
with an :class:`EnvStep` (the next observation, a reward, whether the episode is over). The
rollout engine (:mod:`roll.rollout`) drives many of them in lockstep and records trajectories.

Environments are named in configs either by a built-in name (``arithmetic``, ``guess``,
``echo``; see :func:`env_names`) or by an import path ``package.module:ClassName``.
"""

from __future__ import annotations

import difflib
import importlib
from typing import Any, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from roll.errors import ConfigError


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


def _builtins() -> dict[str, type]:
    # imported here: toy.py imports this module
    from roll.envs.toy import ArithmeticEnv, EchoEnv, GuessEnv, LetterEnv

    return {"arithmetic": ArithmeticEnv, "echo": EchoEnv, "guess": GuessEnv, "letter": LetterEnv}


def env_names() -> list[str]:
    """The built-in environment names, sorted."""
    return sorted(_builtins())


def make_env(spec: str, **kwargs: Any) -> Env:
    """A new environment from a built-in name or a ``package.module:ClassName`` path.

    ``kwargs`` go to the class's constructor (the built-ins validate them and reject unknown
    ones). Raises :class:`ConfigError` for an unknown name, an import path that does not
    resolve, or options the class refuses.
    """
    builtins = _builtins()
    if spec in builtins:
        cls: Any = builtins[spec]
    elif ":" in spec:
        cls = _import(spec)
    else:
        close = difflib.get_close_matches(spec, list(builtins), n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        raise ConfigError(
            f"unknown environment {spec!r}; {hint}the built-ins are {', '.join(sorted(builtins))}, "
            "or name a class by import path as 'package.module:ClassName'."
        )
    try:
        env = cls(**kwargs)
    except (TypeError, ValidationError) as exc:
        raise ConfigError(f"environment {spec!r} refused its options {kwargs}: {exc}") from exc
    if not isinstance(env, Env):
        raise ConfigError(
            f"{spec!r} is not an environment: it needs reset(seed), step(action), max_turns "
            "and task_id (see roll.envs.Env)."
        )
    return env


def _import(spec: str) -> Any:
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise ConfigError(
            f"environment path {spec!r} must have the form 'package.module:ClassName'"
        )
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(
            f"cannot import module {module_name!r} for environment {spec!r} ({exc}); check the "
            "path and that its package is installed."
        ) from exc
    try:
        return getattr(module, attr)
    except AttributeError:
        raise ConfigError(
            f"module {module_name!r} has no {attr!r}; check the class name in {spec!r}."
        ) from None
