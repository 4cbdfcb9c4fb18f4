"""The OpenAI wire format of the policy gateway: what agents send and what they get back.

Requests are validated here (an unknown role, a missing field: a 422 that names it) and
turned into :class:`ale.trajectory.Step` messages, the form the policy's transcript
(:class:`roll.policy.PolicyModel`) and the recorded trajectory use. Answers go back as
chat completions (whole, or as server-sent chunks) with tool calls in OpenAI's form when the
request gave ``tools``, else as the model's text; text completions likewise.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from ale.trajectory import Role, Step, ToolCall, ToolResult
from iflow.models.base import INVALID_JSON_KEY, ModelResponse

MODEL_NAME = "policy"
"""The one model the gateway serves (``/v1/models``); any ``model`` a request names is it."""


class _Body(BaseModel):
    model_config = ConfigDict(extra="allow")  # OpenAI's many optional fields are accepted


class FunctionCall(BaseModel):
    name: str
    arguments: str | dict[str, Any] = "{}"


class MessageToolCall(BaseModel):
    id: str | None = None
    type: Literal["function"] = "function"
    function: FunctionCall


class ContentPart(_Body):
    type: str
    text: str | None = None


class ChatMessage(_Body):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[ContentPart] | None = None
    tool_calls: list[MessageToolCall] | None = None
    tool_call_id: str | None = None


class StreamOptions(_Body):
    include_usage: bool = False


class ChatRequest(_Body):
    model: str = MODEL_NAME
    messages: list[ChatMessage] = Field(min_length=1)
    tools: list[dict[str, Any]] | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    max_tokens: int | None = Field(default=None, ge=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    n: int = Field(default=1, ge=1, le=1)
    logprobs: bool = False

    def budget(self) -> int | None:
        return self.max_completion_tokens or self.max_tokens


class CompletionRequest(_Body):
    model: str = MODEL_NAME
    prompt: str
    stream: bool = False
    max_tokens: int | None = Field(default=None, ge=1)
    n: int = Field(default=1, ge=1, le=1)


def _text(content: str | list[ContentPart] | None) -> str:
    if content is None or isinstance(content, str):
        return content or ""
    return "".join(part.text or "" for part in content if part.type == "text")


def _arguments(value: str | dict[str, Any]) -> dict[str, Any]:
    if isinstance(value, dict):
        return value
    try:
        parsed = json.loads(value or "{}")
    except json.JSONDecodeError:
        return {INVALID_JSON_KEY: value}
    return parsed if isinstance(parsed, dict) else {INVALID_JSON_KEY: value}


def to_steps(messages: list[ChatMessage]) -> list[Step]:
    """Chat-completions messages as steps (the inverse of
    :func:`iflow.models.base.to_openai_messages`): ``developer`` is a system message, each
    ``tool`` message a tool step with its one result."""
    steps: list[Step] = []
    for message in messages:
        content = _text(message.content)
        if message.role == "tool":
            result = ToolResult(call_id=message.tool_call_id, content=content)
            steps.append(Step(role=Role.TOOL, tool_results=[result]))
            continue
        calls = [
            ToolCall(
                id=call.id or f"call_{index}",
                name=call.function.name,
                arguments=_arguments(call.function.arguments),
            )
            for index, call in enumerate(message.tool_calls or [])
        ]
        role = Role.SYSTEM if message.role == "developer" else Role(message.role)
        steps.append(Step(role=role, content=content, tool_calls=calls))
    return steps


def _call_json(call: ToolCall, index: int | None = None) -> dict[str, Any]:
    arguments = call.arguments.get(INVALID_JSON_KEY)
    body: dict[str, Any] = {
        "id": call.id,
        "type": "function",
        "function": {
            "name": call.name,
            "arguments": str(arguments) if arguments is not None else json.dumps(call.arguments),
        },
    }
    return body if index is None else {"index": index, **body}


def _finish_reason(response: ModelResponse, native: bool) -> str:
    if response.finish_reason == "length":
        return "length"
    return "tool_calls" if native and response.tool_calls else "stop"


def _usage(response: ModelResponse) -> dict[str, int]:
    prompt = len(response.prompt_token_ids or [])
    completion = len(response.token_ids or [])
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }


def answer_message(response: ModelResponse, native: bool) -> dict[str, Any]:
    """The assistant message: parsed tool calls when the request gave ``tools`` (``native``),
    else the model's text as it wrote it (tool-call markup included)."""
    if not native:
        return {"role": "assistant", "content": response.raw or response.content}
    message: dict[str, Any] = {"role": "assistant", "content": response.content or None}
    if response.tool_calls:
        message["tool_calls"] = [_call_json(call) for call in response.tool_calls]
    return message


def _logprobs(response: ModelResponse, tokenizer: Any) -> dict[str, Any]:
    ids = response.token_ids or []
    values = response.logprobs or []
    return {
        "content": [
            {"token": tokenizer.decode([i]), "logprob": lp, "top_logprobs": []}
            for i, lp in zip(ids, values, strict=False)
        ]
    }


def completion_id() -> str:
    return f"chatcmpl-{uuid.uuid4().hex[:24]}"


def chat_body(
    response: ModelResponse, request: ChatRequest, tokenizer: Any, call_id: str
) -> dict[str, Any]:
    """A whole ``chat.completion`` object."""
    native = bool(request.tools)
    choice: dict[str, Any] = {
        "index": 0,
        "message": answer_message(response, native),
        "finish_reason": _finish_reason(response, native),
    }
    if request.logprobs:
        choice["logprobs"] = _logprobs(response, tokenizer)
    return {
        "id": call_id,
        "object": "chat.completion",
        "created": int(time.time()),
        "model": MODEL_NAME,
        "choices": [choice],
        "usage": _usage(response),
    }


def chat_chunks(
    response: ModelResponse, request: ChatRequest, call_id: str
) -> list[dict[str, Any]]:
    """The same answer as ``chat.completion.chunk`` objects: the role, the text, each tool
    call, the finish reason, and the usage when ``stream_options.include_usage`` asks."""
    native = bool(request.tools)
    message = answer_message(response, native)
    created = int(time.time())

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {
            "id": call_id,
            "object": "chat.completion.chunk",
            "created": created,
            "model": MODEL_NAME,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }

    chunks = [chunk({"role": "assistant", "content": ""})]
    if message.get("content"):
        chunks.append(chunk({"content": message["content"]}))
    if native:
        for index, call in enumerate(response.tool_calls):
            chunks.append(chunk({"tool_calls": [_call_json(call, index)]}))
    chunks.append(chunk({}, _finish_reason(response, native)))
    if request.stream_options is not None and request.stream_options.include_usage:
        chunks.append({**chunk({}), "choices": [], "usage": _usage(response)})
    return chunks


def text_body(text: str, finish: str, usage: dict[str, int], *, chunk: bool) -> dict[str, Any]:
    """A ``text_completion`` object (or one streamed chunk of it)."""
    body: dict[str, Any] = {
        "id": f"cmpl-{uuid.uuid4().hex[:24]}",
        "object": "text_completion",
        "created": int(time.time()),
        "model": MODEL_NAME,
        "choices": [{"index": 0, "text": text, "finish_reason": finish, "logprobs": None}],
    }
    if not chunk:
        body["usage"] = usage
    return body


def error_body(
    message: str, kind: str, *, code: str | None = None, param: str | None = None
) -> dict[str, Any]:
    """OpenAI's error object."""
    return {"error": {"message": message, "type": kind, "code": code, "param": param}}
