"""Token accounting: how much of the model's context window the prompt takes.

Models that tokenise locally count exactly (:meth:`Model.count_tokens`). For HTTP models
the meter uses the server's own count whenever it reports one (``usage.prompt_tokens``
covers every message up to that call) and adds the documented estimate
(:func:`iflow.models.base.estimate_tokens`: one token per 4 bytes) only for what was
appended since. Per-step estimates are cached, so counting stays flat as history grows.
"""

from __future__ import annotations

import json
from typing import Any

from ale.trajectory import Step
from iflow.models.base import Model, estimate_messages, estimate_tokens


class TokenMeter:
    """Counts the prompt's tokens for one model and one tool list.

    The history only grows between rewrites (compression, a mode change), so the meter
    keeps running sums over the prefix it has seen and estimates only the new steps:
    a count costs the same at turn 200 as at turn 2.
    """

    def __init__(self, model: Model, tools: list[dict[str, Any]], *, exact: bool) -> None:
        self.model = model
        self.tools = tools
        self.exact = exact
        self._tools_estimate = estimate_tokens(json.dumps(tools)) if tools else 0
        self._reported: tuple[int, int] | None = None
        """(number of messages the server's count covered, its prompt_tokens)."""
        self._list: list[Step] | None = None
        self._first: Step | None = None
        self._sums: list[int] = []
        self.reset()

    def count(self, history: list[Step]) -> int:
        if self.exact:
            return self.model.count_tokens(history, self.tools)
        if not (
            history is self._list
            and len(history) >= len(self._sums)
            and (not history or history[0] is self._first)
        ):
            self._list, self._sums = history, []
            self._first = history[0] if history else None
        running = self._sums[-1] if self._sums else 0
        for step in history[len(self._sums) :]:
            running += estimate_messages([step])
            self._sums.append(running)
        if self._reported is not None and 0 < self._reported[0] <= len(self._sums):
            covered, tokens = self._reported
            return tokens + running - self._sums[covered - 1]
        return self._tools_estimate + running

    def reported(self, covered: int, prompt_tokens: int | None) -> None:
        """The server said the first ``covered`` messages (with the tools) took ``prompt_tokens``."""
        if prompt_tokens:
            self._reported = (covered, prompt_tokens)

    def reset(self) -> None:
        """History was rewritten (compression): forget what the server said."""
        self._reported = None
        self._list = None
        self._first = None
        self._sums = []
