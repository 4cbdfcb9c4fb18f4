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
