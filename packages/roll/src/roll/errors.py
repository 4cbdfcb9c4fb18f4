"""The exceptions roll raises, under one root: each carries a sentence a user can act on."""

from __future__ import annotations


class RollError(Exception):
    """Root of roll's errors."""


class ConfigError(RollError, ValueError):
    """A configuration is invalid (unknown key, bad value, missing model...)."""


class CheckpointError(RollError):
    """A checkpoint cannot be written or read back."""


class GenerationError(RollError):
    """A generation backend cannot serve a request."""


class TrainingAborted(RollError):
    """Training stopped on purpose (too many non-finite steps, a signal)."""


def first_line(exc: BaseException, limit: int = 300) -> str:
    """The first line of an exception's message (its type's name when it has none), for the
    one sentence roll says about a failure it wraps."""
    text = str(exc).strip().splitlines()
    return text[0][:limit] if text else type(exc).__name__
