"""The model seam: messages and tool schemas in, one :class:`ModelResponse` out.

Three implementations: :mod:`iflow.models.openai_http` (any OpenAI-compatible server),
:mod:`iflow.models.local` (transformers in-process; how the trainer's policy acts) and
:mod:`iflow.models.scripted` (replays a list of responses; tests and demos).

Messages are :class:`ale.trajectory.Step` objects, the same ones the trajectory
records; :func:`to_openai_messages` turns them into chat-completions form.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from ale.trajectory import Role, Step, StepMark, ToolCall, Usage

INVALID_JSON_KEY = "_invalid_json"
"""Where a model layer puts tool-call arguments it could not parse as JSON (raw text)."""

DeltaCallback = Callable[[str], None]
"""Called with each piece of streamed assistant text as it arrives."""


@dataclass
class ModelResponse:
    """One answer of the model."""

    content: str = ""
    """The text besides tool calls (tool-call markup removed)."""
    tool_calls: list[ToolCall] = field(default_factory=list)
    reasoning: str | None = None
    format_errors: list[str] = field(default_factory=list)
    """Tool calls written in text that could not be parsed, each a sentence for the model."""
    usage: Usage | None = None
    finish_reason: str | None = None
    prompt_token_ids: list[int] | None = None
    """Set by models that tokenise locally (the trainer needs them)."""
    token_ids: list[int] | None = None
    logprobs: list[float] | None = None
    policy_version: int | None = None
    """The version of the weights that sampled the answer (a trainer's policy)."""
    raw: str | None = None
    """The raw generated text, when it differs from ``content``."""
    mark: StepMark | None = None
    """The recorded step's mark (an expert's mistake or recovery)."""
    extra: dict[str, Any] = field(default_factory=dict)
    """Copied into the recorded step's ``extra``."""


@runtime_checkable
class Model(Protocol):
    """What the agent needs from a model."""

    name: str
    """Shown in the status bar and recorded in the trajectory."""
    context_limit: int
    """Tokens the model accepts in one prompt (prompt + completion budget)."""

    async def complete(
        self,
        messages: list[Step],
        tools: list[dict[str, Any]],
        *,
        on_delta: DeltaCallback | None = None,
    ) -> ModelResponse:
        """One model call. Raise :class:`iflow.errors.ContextTooLong` when the prompt does not
        fit and :class:`iflow.errors.ModelError` for anything else that is not an answer."""
        ...

    def count_tokens(self, messages: list[Step], tools: list[dict[str, Any]]) -> int:
        """Tokens the prompt made of ``messages`` and ``tools`` takes (exact or estimated)."""
        ...


def estimate_tokens(text: str) -> int:
    """The documented estimate used when no tokenizer is at hand: one token per 4 bytes of
    UTF-8, rounded up (close for English and code with BPE tokenizers; errs high on CJK)."""
    return (len(text.encode("utf-8")) + 3) // 4


def estimate_messages(messages: list[Step], tools: list[dict[str, Any]] | None = None) -> int:
    """:func:`estimate_tokens` over a whole prompt, with 4 tokens of framing per message."""
    total = 0
    for step in messages:
        total += 4 + estimate_tokens(step.content)
        for call in step.tool_calls:
            total += estimate_tokens(call.name) + estimate_tokens(json.dumps(call.arguments))
        for result in step.tool_results:
            total += 4 + estimate_tokens(result.content)
    if tools:
        total += estimate_tokens(json.dumps(tools))
    return total


def to_openai_messages(messages: list[Step]) -> list[dict[str, Any]]:
    """Steps in chat-completions form. A tool step becomes one ``tool`` message per result;
    results not tied to a call (e.g. an unparseable call) become a ``user`` message."""
    out: list[dict[str, Any]] = []
    for step in messages:
        if step.role is Role.TOOL:
            loose: list[str] = []
            for result in step.tool_results:
                if result.call_id is None:
                    loose.append(result.content)
                else:
                    out.append(
                        {"role": "tool", "tool_call_id": result.call_id, "content": result.content}
                    )
            if step.content:
                loose.append(step.content)
            if loose:
                out.append({"role": "user", "content": "\n\n".join(loose)})
            continue
        message: dict[str, Any] = {"role": step.role.value, "content": step.content}
        if step.tool_calls:
            message["tool_calls"] = [
                {
                    "id": call.id,
                    "type": "function",
                    "function": {"name": call.name, "arguments": _arguments_text(call)},
                }
                for call in step.tool_calls
            ]
        out.append(message)
    return out


def _arguments_text(call: ToolCall) -> str:
    if INVALID_JSON_KEY in call.arguments:
        return str(call.arguments[INVALID_JSON_KEY])
    return json.dumps(call.arguments)
