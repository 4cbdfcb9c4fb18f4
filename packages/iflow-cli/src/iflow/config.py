"""The agent's limits and behaviour: one validated model, a docstring per field."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from iflow.approval import Mode


class AgentConfig(BaseModel):
    """Limits and behaviour of a run."""

    model_config = ConfigDict(extra="forbid")

    max_turns: int = Field(default=100, ge=1)
    """Model calls per run before it ends with ``limits_exceeded``."""
    max_tokens: int | None = Field(default=None, ge=1)
    """Tokens (prompt + completion, summed over calls) per run."""
    max_wall_sec: float | None = Field(default=None, gt=0)
    """Wall-clock seconds per run before it ends with ``agent_timeout``."""
    max_cost_usd: float | None = Field(default=None, gt=0)
    """Cost per run, when the model reports costs."""
    compress_threshold: float = Field(default=0.8, gt=0, le=1)
    """Compress when the prompt passes this share of the context window."""
    keep_recent_turns: int = Field(default=4, ge=1)
    """Turns (assistant step + its observations) compression keeps verbatim."""
    loop_threshold: int = Field(default=3, ge=2)
    """Identical consecutive tool calls before the loop warning."""
    fail_threshold: int = Field(default=5, ge=2)
    """Consecutive failing tool calls before the loop warning."""
    max_format_errors: int = Field(default=3, ge=1)
    """Consecutive unreadable answers before the run ends with ``format_error``."""
    require_finish: bool = False
    """When True an answer without tool calls does not end the run; the model is told to call finish."""
    todo_reminder_every: int = Field(default=6, ge=1)
    """Turns without todo_write, while items are open, between reminders."""
    approval_mode: Mode = "default"
    """Which tool calls run without asking (:mod:`iflow.approval`): default, auto-edit, plan
    or yolo."""
    headless: bool = False
    """No person to ask: calls needing approval are denied with a sentence saying how to allow them."""
    prompt_profile: Literal["default", "compact"] = "default"
    """``compact``: a short system prompt, four tools (shell, read, write, finish) described in
    one line each without parameter notes: a prompt a small trained policy can afford."""
    tool_output_limit: int = Field(default=30_000, ge=1000)
    """Characters of a command's output the model sees (head and tail kept)."""
