"""A model that replays a fixed list of responses: for tests, demos and reproducible runs.

Each response is one of

- a ``str``: the answer text; ``<tool_call>`` markup in it is parsed as a text model's would be;
- a ``dict`` ``{"content": str, "tool_calls": [{"name": ..., "arguments": {...}}],
  "reasoning": str, "finish_reason": str}`` (every key optional; ``tool_calls`` may also carry
  ``id``; ``arguments`` may be a JSON string), or ``{"error": "message"}`` to fail that call
  with a :class:`ModelError` (``"context_too_long": true`` makes it a :class:`ContextTooLong`);
- a :class:`ModelResponse`, returned as it is;
- an exception instance, raised at that call (to test error paths).

Usage is the documented estimate (:func:`estimate_messages`), so token accounting can be
tested against it.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ale.trajectory import Step, ToolCall, Usage
from iflow.errors import ConfigError, ContextTooLong, ModelError
from iflow.models.base import (
    INVALID_JSON_KEY,
    DeltaCallback,
    ModelResponse,
    estimate_messages,
    estimate_tokens,
)
from iflow.models.parsing import new_call_id, parse_tool_calls

Response = str | dict[str, Any] | ModelResponse | BaseException
"""What a script holds: see the module docstring."""

_RESPONSE_KEYS = {
    "content",
    "tool_calls",
    "reasoning",
    "finish_reason",
    "error",
    "context_too_long",
}
_DELTA_CHUNKS = 3


class ScriptedModel:
    """Replays ``responses`` in order, one per :meth:`complete` call.

    ``calls`` holds a copy of the messages shown at each call and ``tool_lists`` the tool
    schemas, so tests can assert what the agent sent.
    """

    def __init__(
        self,
        responses: Sequence[Response],
        *,
        name: str = "scripted",
        context_limit: int = 32768,
    ) -> None:
        self.name = name
        self.context_limit = context_limit
        self._responses = [_check(r, i) for i, r in enumerate(responses)]
        self._next = 0
        self.calls: list[list[Step]] = []
        self.tool_lists: list[list[dict[str, Any]]] = []

    @classmethod
    def from_file(
        cls, path: str | Path, *, name: str = "scripted", context_limit: int = 32768
    ) -> ScriptedModel:
        """A script from a JSON file holding a list of responses, or a JSONL file with one
        response (a JSON string or object) per line."""
        path = Path(path)
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError(
                f"cannot read the script {path} ({exc.strerror or exc}); "
                "check the path given as the scripted model's script."
            ) from exc
        try:
            if path.suffix == ".jsonl":
                responses = [json.loads(line) for line in text.splitlines() if line.strip()]
            else:
                responses = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ConfigError(
                f"the script {path} is not valid JSON ({exc.msg} at line {exc.lineno}); "
                "write a JSON list of responses, or one JSON response per line in a .jsonl file."
            ) from exc
        if not isinstance(responses, list):
            raise ConfigError(
                f"the script {path} holds a JSON {type(responses).__name__}, not a list; "
                "write a JSON list of responses (strings or objects)."
            )
        return cls(responses, name=name, context_limit=context_limit)

    @property
    def remaining(self) -> int:
        """Responses not yet replayed."""
        return len(self._responses) - self._next

    async def complete(
        self,
        messages: list[Step],
        tools: list[dict[str, Any]],
        *,
        on_delta: DeltaCallback | None = None,
    ) -> ModelResponse:
        # a shallow copy: steps are never changed once made, and copying them deeply
        # would make a long session's calls quadratic in this test double
        self.calls.append(list(messages))
        self.tool_lists.append(list(tools))
        if self._next >= len(self._responses):
            raise ModelError(
                f"the scripted model has no more responses (it was given "
                f"{len(self._responses)}); add responses to the script, or end the run "
                "sooner with a lower max_turns."
            )
        item = self._responses[self._next]
        self._next += 1
        if isinstance(item, BaseException):
            raise item
        response = item if isinstance(item, ModelResponse) else _build(item)
        if response.usage is None:
            completion = response.content + "".join(
                c.name + json.dumps(c.arguments) for c in response.tool_calls
            )
            # no prompt count: the agent's own meter counts the prompt incrementally
            usage = Usage(completion_tokens=estimate_tokens(completion))
            response = dataclasses.replace(response, usage=usage)
        if on_delta is not None and response.content:
            for piece in _chunks(response.content, _DELTA_CHUNKS):
                on_delta(piece)
        return response

    def count_tokens(self, messages: list[Step], tools: list[dict[str, Any]]) -> int:
        """The documented estimate (:func:`estimate_messages`)."""
        return estimate_messages(messages, tools)


def _check(item: Any, index: int) -> Response:
    """Reject what cannot be replayed now rather than at the call that reaches it."""
    if isinstance(item, str | ModelResponse | BaseException):
        return item
    if isinstance(item, dict):
        unknown = set(item) - _RESPONSE_KEYS
        if unknown:
            raise ConfigError(
                f"response #{index + 1} of the script has unknown keys {sorted(unknown)}; "
                f"use only {sorted(_RESPONSE_KEYS)}."
            )
        calls = item.get("tool_calls") or []
        if not isinstance(calls, list) or not all(
            isinstance(c, dict) and isinstance(c.get("name"), str) for c in calls
        ):
            raise ConfigError(
                f"response #{index + 1} of the script has tool_calls that are not a list of "
                '{"name": ..., "arguments": {...}} objects; fix that response.'
            )
        return item
    raise ConfigError(
        f"response #{index + 1} of the script is a {type(item).__name__}; give a string, "
        "an object with content/tool_calls, a ModelResponse or an exception."
    )


def _build(item: str | dict[str, Any]) -> ModelResponse:
    if isinstance(item, str):
        content, calls, errors = parse_tool_calls(item)
        return ModelResponse(
            content=content,
            tool_calls=calls,
            format_errors=errors,
            finish_reason="tool_calls" if calls else "stop",
            raw=item if content != item else None,
        )
    if "error" in item:
        kind = ContextTooLong if item.get("context_too_long") else ModelError
        raise kind(str(item["error"]))
    text = str(item.get("content") or "")
    content, calls, errors = parse_tool_calls(text)
    calls += [_call(c) for c in item.get("tool_calls") or []]
    return ModelResponse(
        content=content,
        tool_calls=calls,
        reasoning=item.get("reasoning"),
        format_errors=errors,
        finish_reason=item.get("finish_reason") or ("tool_calls" if calls else "stop"),
        raw=text if content != text else None,
    )


def _call(spec: dict[str, Any]) -> ToolCall:
    arguments = spec.get("arguments") or {}
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError:
            arguments = {INVALID_JSON_KEY: arguments}
    if not isinstance(arguments, dict):
        arguments = {INVALID_JSON_KEY: json.dumps(arguments)}
    return ToolCall(id=str(spec.get("id") or new_call_id()), name=spec["name"], arguments=arguments)


def _chunks(text: str, count: int) -> list[str]:
    size = max(1, -(-len(text) // count))
    return [text[i : i + size] for i in range(0, len(text), size)]
