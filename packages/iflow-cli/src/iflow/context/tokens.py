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
    """Counts the prompt's tokens for one model and one tool list."""

    def __init__(self, model: Model, tools: list[dict[str, Any]], *, exact: bool) -> None:
        self.model = model
        self.tools = tools
        self.exact = exact
        self._tools_estimate = estimate_tokens(json.dumps(tools)) if tools else 0
        self._cache: dict[int, tuple[Step, int]] = {}
        self._reported: tuple[int, int] | None = None
        """(number of messages the server's count covered, its prompt_tokens)."""

    def count(self, history: list[Step]) -> int:
        if self.exact:
            return self.model.count_tokens(history, self.tools)
        start, total = 0, self._tools_estimate
        if self._reported is not None and self._reported[0] <= len(history):
            start, total = self._reported
        for step in history[start:]:
            hit = self._cache.get(id(step))
            if hit is None or hit[0] is not step:  # the step is held, so its id is not reused
                hit = self._cache[id(step)] = (step, estimate_messages([step]))
            total += hit[1]
        return total

    def reported(self, covered: int, prompt_tokens: int | None) -> None:
        """The server said the first ``covered`` messages took ``prompt_tokens``."""
        if prompt_tokens:
            self._reported = (covered, prompt_tokens)

    def reset(self) -> None:
        """History was rewritten (compression): forget what the server said."""
        self._reported = None
        self._cache.clear()
