"""What a run tells the surfaces (TUI, stream-json, logs) as it goes.

Events are pydantic models with a ``type`` tag; ``iflow -p --output-format stream-json``
writes each as one JSON line, the TUI turns each into widgets.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

from pydantic import BaseModel, Field


class _Event(BaseModel):
    pass


class RunStarted(_Event):
    type: Literal["run_started"] = "run_started"
    prompt: str
    model: str
    workspace: str
    mode: str


class TurnStarted(_Event):
    type: Literal["turn_started"] = "turn_started"
    turn: int


class AssistantDelta(_Event):
    """A piece of assistant text as it streams in."""

    type: Literal["assistant_delta"] = "assistant_delta"
    text: str


class AssistantMessage(_Event):
    type: Literal["assistant_message"] = "assistant_message"
    content: str
    reasoning: str | None = None
    tool_calls: list[dict[str, Any]] = Field(default_factory=list)


class ToolStarted(_Event):
    type: Literal["tool_started"] = "tool_started"
    call_id: str
    name: str
    arguments: dict[str, Any]
    title: str
    """One line for people, e.g. ``$ ls -la`` or ``read_file(src/app.py)``."""


class ToolFinished(_Event):
    type: Literal["tool_finished"] = "tool_finished"
    call_id: str | None
    name: str
    content: str
    is_error: bool
    metadata: dict[str, Any] = Field(default_factory=dict)


class Notice(_Event):
    """Something the person should know (compression, loop warning, reminders, denials)."""

    type: Literal["notice"] = "notice"
    level: Literal["info", "warning", "error"] = "info"
    text: str


class TokensUpdated(_Event):
    type: Literal["tokens"] = "tokens"
    used: int
    """Tokens the prompt takes now."""
    limit: int
    """The model's context window."""
    total: int
    """Tokens spent over the session (prompt + completion of every call)."""


class Compressed(_Event):
    type: Literal["compressed"] = "compressed"
    method: Literal["summary", "fallback"]
    before: int
    after: int
    dropped_steps: int


class RunEnded(_Event):
    type: Literal["run_ended"] = "run_ended"
    outcome: str
    """``finished`` or the failure mode (limits_exceeded, loop_detected, interrupted...)."""
    message: str
    exit_code: int
    turns: int
    result: str = ""
    """The agent's final answer (the finish summary or its last message)."""


Event = (
    RunStarted
    | TurnStarted
    | AssistantDelta
    | AssistantMessage
    | ToolStarted
    | ToolFinished
    | Notice
    | TokensUpdated
    | Compressed
    | RunEnded
)
EventSink = Callable[[Event], None]
"""Where a run sends its events; it must not block (the TUI posts a message, stream-json writes a line)."""
