"""Every error iflow raises, under one root, and the ends of an agent run.

Ends of a run are exceptions (the loop's control flow): :class:`AgentEnd` and its
subclasses. Each carries a message a person can act on and the
:class:`ale.trajectory.FailureMode` it is recorded as (``None`` for a clean finish).
"""

from __future__ import annotations

from ale.trajectory import FailureMode


class IflowError(Exception):
    """Root of iflow's errors. ``str(error)`` is one sentence saying what to do."""


class ConfigError(IflowError, ValueError):
    """A setting is missing or wrong."""


class WorkspaceError(IflowError, OSError):
    """The workspace could not do what a tool asked (missing file, no such directory...)."""


class ModelError(IflowError):
    """The model could not answer (server down, bad response, out of retries)."""


class ContextTooLong(ModelError):
    """The prompt does not fit the model's context window."""


class SessionError(IflowError):
    """A saved session cannot be read or written."""


# -- ends of a run ----------------------------------------------------------------------------


class AgentEnd(IflowError):
    """The run ended. Subclasses say how; ``failure_mode`` is what the trajectory records."""

    failure_mode: FailureMode | None = FailureMode.UNKNOWN
    exit_code: int = 1
    """What ``iflow -p`` exits with."""


class Finished(AgentEnd):
    """The agent finished: it called ``finish`` or answered without tool calls."""

    failure_mode = None
    exit_code = 0


class LimitsExceeded(AgentEnd):
    """A limit (turns, tokens, cost) was reached before the agent finished."""

    failure_mode = FailureMode.LIMITS_EXCEEDED


class AgentTimeout(AgentEnd):
    """The run's wall-clock limit passed."""

    failure_mode = FailureMode.AGENT_TIMEOUT


class FormatError(AgentEnd):
    """The model kept answering in a form no tool call could be read from."""

    failure_mode = FailureMode.FORMAT_ERROR


class LoopDetected(AgentEnd):
    """The model repeated the same call (or kept failing) after being warned."""

    failure_mode = FailureMode.LOOP_DETECTED


class ContextLengthExceeded(AgentEnd):
    """The prompt outgrew the model's context even after compression."""

    failure_mode = FailureMode.CONTEXT_LENGTH_EXCEEDED


class ModelFailed(AgentEnd):
    """The model could not be reached or answered garbage past its retries."""

    failure_mode = FailureMode.MODEL_ERROR


class StoppedByHook(AgentEnd):
    """A hook ended the run (a blocked prompt, ``continue: false``)."""

    failure_mode = FailureMode.INTERRUPTED
    exit_code = 1


class Interrupted(AgentEnd):
    """A person interrupted the run (Ctrl+C)."""

    failure_mode = FailureMode.INTERRUPTED
    exit_code = 130
