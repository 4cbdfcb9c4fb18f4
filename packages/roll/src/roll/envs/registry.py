"""Finding in-process environments by name.

Environments are named in configs either by a built-in name (``arithmetic``, ``guess``,
``echo``, ``letter``; see :func:`env_names`) or by an import path ``package.module:ClassName``.
"""

from __future__ import annotations

import difflib
import importlib
from typing import Any

from pydantic import ValidationError

from roll.envs.base import Env
from roll.envs.toy import ArithmeticEnv, EchoEnv, GuessEnv, LetterEnv
from roll.errors import ConfigError


def _builtins() -> dict[str, type]:
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
