"""Loop detection: the same call again and again, or call after failing call.

The detector watches each (call, result) pair. When the same tool call with the same
arguments has been made ``threshold`` times in a row, or ``fail_threshold`` calls in a
row have failed, it answers ``"warn"`` once (the agent tells the model); if the pattern
goes on for ``grace`` more calls after the warning it answers ``"stop"`` (the agent
ends the run with the ``loop_detected`` failure mode). A different call that works
resets it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Literal

from ale.trajectory import ToolCall, ToolResult

Verdict = Literal["ok", "warn", "stop"]


@dataclass
class LoopDetector:
    threshold: int = 3
    """Identical consecutive calls before a warning."""
    fail_threshold: int = 5
    """Consecutive failing calls before a warning."""
    grace: int = 2
    """Further calls of the same pattern after the warning before the run stops."""
    _last: str | None = None
    _repeats: int = 0
    _failures: int = 0
    _warned_at: dict[str, int] = field(default_factory=dict)

    def observe(self, call: ToolCall, result: ToolResult) -> Verdict:
        key = f"{call.name}:{json.dumps(call.arguments, sort_keys=True, default=str)}"
        self._repeats = self._repeats + 1 if key == self._last else 1
        self._last = key
        self._failures = self._failures + 1 if result.is_error else 0
        if not result.is_error and self._repeats == 1:
            self._warned_at.clear()
        verdicts = [
            self._judge("repeat", self._repeats, self.threshold),
            self._judge("fail", self._failures, self.fail_threshold),
        ]
        if "stop" in verdicts:
            return "stop"
        return "warn" if "warn" in verdicts else "ok"

    def _judge(self, pattern: str, count: int, threshold: int) -> Verdict:
        if count < threshold:
            self._warned_at.pop(pattern, None)
            return "ok"
        warned = self._warned_at.get(pattern)
        if warned is None:
            self._warned_at[pattern] = count
            return "warn"
        return "stop" if count - warned >= self.grace else "ok"

    def describe(self) -> str:
        """The warning the model reads."""
        if self._repeats >= self.threshold:
            return (
                f"You have made the same tool call {self._repeats} times in a row with the same "
                "arguments and it will not give a different answer. Step back: read the last "
                "output carefully and try a different approach, or call finish if you are done. "
                "Repeating it again will stop the run."
            )
        return (
            f"Your last {self._failures} tool calls all failed. Stop and reconsider: check the "
            "error messages, the paths and the tool arguments before trying again. More failing "
            "calls in a row will stop the run."
        )

    def reset(self) -> None:
        self._last, self._repeats, self._failures = None, 0, 0
        self._warned_at.clear()
