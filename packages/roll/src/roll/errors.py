"""The exceptions roll raises, under one root: each carries a sentence a user can act on."""

from __future__ import annotations

from enum import StrEnum


class RollError(Exception):
    """Root of roll's errors."""


class ConfigError(RollError, ValueError):
    """A configuration is invalid (unknown key, bad value, missing model...)."""


class CheckpointError(RollError):
    """A checkpoint cannot be written or read back."""


class GenerationError(RollError):
    """A generation backend cannot serve a request."""


class EngineFailure(StrEnum):
    """Why a managed inference engine could not start or went away."""

    MISSING_ENV = "missing_env"
    """No python at the engine environment's path."""
    BROKEN_ENV = "broken_env"
    """The environment's python runs but cannot import the engine."""
    MODEL_UNLOADABLE = "model_unloadable"
    """The model directory holds no loadable model (no config, no weights)."""
    PORT_IN_USE = "port_in_use"
    """The port asked for is taken."""
    EXITED = "exited"
    """The server process ended before it answered."""
    NEVER_READY = "never_ready"
    """The server did not answer within its start-up timeout."""
    NO_DEV_ROUTES = "no_dev_routes"
    """The server lacks vLLM's dev-mode routes (``/pause``, ``/collective_rpc``...)."""
    DIED = "died"
    """The server process ended while it was serving."""


class EngineError(GenerationError):
    """A managed inference engine cannot start or serve; :attr:`reason` says which way."""

    def __init__(self, reason: EngineFailure, message: str) -> None:
        super().__init__(message)
        self.reason = reason


class PromptTooLong(GenerationError):
    """A prompt leaves no room for a single new token in the server's context window."""

    def __init__(self, message: str, *, tokens: int, limit: int) -> None:
        super().__init__(message)
        self.tokens = tokens
        self.limit = limit


class TrainingAborted(RollError):
    """Training stopped on purpose (too many non-finite steps, a signal)."""


def first_line(exc: BaseException, limit: int = 300) -> str:
    """The first line of an exception's message (its type's name when it has none), for the
    one sentence roll says about a failure it wraps."""
    text = str(exc).strip().splitlines()
    return text[0][:limit] if text else type(exc).__name__
