"""Any OpenAI-compatible chat-completions server (OpenAI, vLLM, SGLang, llama.cpp, Ollama...).

Every call streams. The client library's own retries are off; :class:`OpenAIModel` retries
429, 5xx, 408, connection errors and timeouts itself with capped exponential backoff and
jitter, honouring the server's ``retry-after-ms`` / ``retry-after`` headers, and then raises a
:class:`ModelError` that names the server, the status and what to do.

Tool calls come natively (``tools`` parameter, streamed ``tool_calls`` deltas) or, with
``tool_format="text"``, as ``<tool_call>`` markup in the text: no ``tools`` parameter is sent,
the tool prompt is appended to the system message and earlier calls and results are written
in the same markup. Markup in the text is parsed in both formats, since servers run without a
tool parser return the model's markup as plain content; a server that refuses the ``tools``
parameter (vLLM without ``--enable-auto-tool-choice``) gets the text format from then on.
"""

from __future__ import annotations

import asyncio
import email.utils
import json
import os
import random
import re
import time
from dataclasses import dataclass, field
from typing import Any, Literal

import openai

from ale.trajectory import Step, ToolCall, Usage
from iflow.errors import ConfigError, ContextTooLong, ModelError
from iflow.models.base import (
    INVALID_JSON_KEY,
    DeltaCallback,
    ModelResponse,
    estimate_messages,
    to_openai_messages,
)
from iflow.models.parsing import (
    MarkupFilter,
    new_call_id,
    parse_tool_calls,
    text_tool_messages,
    with_tools_prompt,
)

ToolFormat = Literal["native", "text", "brief"]

_RETRY_STATUSES = {408, 409, 429}
_CONTEXT_PATTERN = re.compile(
    r"context[ _]length|context window|maximum context|max_model_len|model_max_length"
    r"|prompt is too long|too many tokens|maximum (?:input )?length",
    re.IGNORECASE,
)


DEFAULT_OUTPUT_TOKENS = 8192
"""The output cap sent when no ``max_output_tokens`` is set: without one a server may let a
model that repeats itself run until the context is full."""
DEFAULT_CALL_TIMEOUT_SEC = 600.0
"""The wall-clock bound of one model call when no ``model_timeout_sec`` is set."""


@dataclass
class _Attempt:
    """What one streamed answer accumulated."""

    content: list[str] = field(default_factory=list)
    reasoning: list[str] = field(default_factory=list)
    calls: dict[int, dict[str, Any]] = field(default_factory=dict)
    finish_reason: str | None = None
    usage: Usage | None = None


class OpenAIModel:
    """A model behind an OpenAI-compatible ``/chat/completions`` endpoint.

    ``api_key`` None falls back to ``OPENAI_API_KEY`` and then to a placeholder (local
    servers need none); ``base_url`` None means the client library's default (OpenAI, or
    ``OPENAI_BASE_URL``). ``extra_body`` is merged into every request (e.g. ``top_k`` for vLLM).
    Use it as an async context manager, or call :meth:`aclose`, to close its connections.
    """

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        context_limit: int = 131072,
        temperature: float | None = None,
        max_tokens: int | None = DEFAULT_OUTPUT_TOKENS,
        tool_format: ToolFormat = "native",
        max_retries: int = 4,
        backoff_base: float = 0.5,
        backoff_max: float = 20.0,
        timeout: float = 600.0,
        call_timeout: float | None = DEFAULT_CALL_TIMEOUT_SEC,
        extra_body: dict[str, Any] | None = None,
        name: str | None = None,
    ) -> None:
        """``max_tokens`` caps one answer (sent to the server; None sends none);
        ``timeout`` is the HTTP client's per-read limit; ``call_timeout`` bounds a whole
        model call, its stream included (None: no bound): past it the request is cancelled,
        which closes the connection and so stops the server's generation."""
        if tool_format not in ("native", "text", "brief"):
            raise ConfigError(
                f'tool_format must be "native", "text" or "brief" for an OpenAI-compatible server, '
                f"not {tool_format!r}."
            )
        self.model = model
        self.name = name or model
        self.context_limit = context_limit
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.tool_format: ToolFormat = tool_format
        self.max_retries = max_retries
        self.call_timeout = call_timeout
        self.backoff_base = backoff_base
        self.backoff_max = backoff_max
        self.extra_body = dict(extra_body or {})
        self._stream_options = True
        self.token_field = "max_tokens"
        """How the output cap is sent: ``max_tokens``, or ``max_completion_tokens`` once the
        server asked for it (OpenAI's reasoning models refuse ``max_tokens``)."""
        self._client = openai.AsyncOpenAI(
            api_key=api_key or os.environ.get("OPENAI_API_KEY") or "EMPTY",
            base_url=base_url,
            timeout=timeout,
            max_retries=0,
        )
        self.server = str(self._client.base_url).rstrip("/")
        """The base URL requests go to (named in error messages)."""

    async def __aenter__(self) -> OpenAIModel:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the HTTP connections."""
        await self._client.close()

    def count_tokens(self, messages: list[Step], tools: list[dict[str, Any]]) -> int:
        """The documented estimate (:func:`estimate_messages`); the server's tokenizer is not
        at hand."""
        return estimate_messages(messages, tools)

    def request_body(self, messages: list[Step], tools: list[dict[str, Any]]) -> dict[str, Any]:
        """The chat-completions request for ``messages`` (without the streaming options)."""
        chat = to_openai_messages(messages)
        body: dict[str, Any] = {"model": self.model}
        if self.tool_format in ("text", "brief"):
            brief = self.tool_format == "brief"
            body["messages"] = with_tools_prompt(text_tool_messages(chat), tools, brief=brief)
        else:
            body["messages"] = chat
            if tools:
                body["tools"] = tools
        if self.temperature is not None:
            body["temperature"] = self.temperature
        if self.max_tokens is not None:
            body[self.token_field] = self.max_tokens
        return body

    async def complete(
        self,
        messages: list[Step],
        tools: list[dict[str, Any]],
        *,
        on_delta: DeltaCallback | None = None,
    ) -> ModelResponse:
        try:
            return await asyncio.wait_for(
                self._complete(messages, tools, on_delta), self.call_timeout
            )
        except TimeoutError:
            raise ModelError(
                f"the model server at {self.server} did not finish one answer within "
                f"{self.call_timeout:g} s, so the request was cancelled; raise "
                "model_timeout_sec, or lower max_output_tokens if the model ran on."
            ) from None

    async def _complete(
        self,
        messages: list[Step],
        tools: list[dict[str, Any]],
        on_delta: DeltaCallback | None,
    ) -> ModelResponse:
        body = self.request_body(messages, tools)
        streamed = 0  # characters of content already streamed, so a retry does not repeat them
        failures = 0
        while True:
            attempt = _Attempt()
            try:
                await self._stream(body, attempt, on_delta, streamed)
                return _response(attempt)
            except openai.APIStatusError as exc:
                if exc.status_code in (400, 422) and self._stream_options and _about_stream(exc):
                    self._stream_options = False  # this server rejects stream_options
                    continue
                if (
                    exc.status_code == 400
                    and _asks_completion_tokens(exc)
                    and (self.token_field == "max_tokens")
                ):  # a reasoning model: the cap goes as max_completion_tokens from now on
                    self.token_field = "max_completion_tokens"
                    body = self.request_body(messages, tools)
                    continue
                if exc.status_code == 400 and "tools" in body and _refuses_tools(exc):
                    # a server without a tool parser (vLLM without --enable-auto-tool-choice):
                    # the tools go in the prompt and calls come as markup from now on
                    self.tool_format = "text"
                    body = self.request_body(messages, tools)
                    continue
                self._raise_final(exc, messages, tools)
                failures += 1
                if failures > self.max_retries:
                    raise ModelError(
                        f"the model server at {self.server} kept answering HTTP "
                        f"{exc.status_code} ({_message(exc)}) after {failures} attempts; check "
                        "the server's health and logs, then try again."
                    ) from exc
                delay = self._delay(failures, exc.response.headers)
            except (openai.APIError, json.JSONDecodeError) as exc:
                # connection errors, timeouts, errors mid-stream, garbled stream data
                failures += 1
                if failures > self.max_retries:
                    raise ModelError(_unreachable(self.server, exc, failures)) from exc
                delay = self._delay(failures, None)
            streamed = max(streamed, len("".join(attempt.content)))
            await asyncio.sleep(delay)

    async def _stream(
        self,
        body: dict[str, Any],
        attempt: _Attempt,
        on_delta: DeltaCallback | None,
        skip: int,
    ) -> None:
        """One streamed request, accumulated into ``attempt``; ``skip`` characters of content
        already shown by an earlier attempt are not shown again."""
        extra = dict(self.extra_body)
        if self._stream_options:
            extra["stream_options"] = {"include_usage": True}
        stream = await self._client.chat.completions.create(
            **body, stream=True, extra_body=extra or None
        )
        markup = MarkupFilter()
        seen = 0
        chunks = 0
        async with stream:
            async for chunk in stream:
                chunks += 1
                if chunk.usage is not None:
                    attempt.usage = _usage(chunk.usage)
                for choice in (chunk.choices or [])[:1]:
                    delta = choice.delta
                    if delta is not None:
                        piece = delta.content or ""
                        if piece:
                            attempt.content.append(piece)
                            visible = piece[max(0, skip - seen) :]
                            seen += len(piece)
                            shown = markup.feed(visible) if visible else ""
                            if shown and on_delta is not None:
                                on_delta(shown)
                        thought = getattr(delta, "reasoning_content", None) or getattr(
                            delta, "reasoning", None
                        )
                        if isinstance(thought, str) and thought:
                            attempt.reasoning.append(thought)
                        for call in delta.tool_calls or []:
                            _add_call_delta(attempt.calls, call)
                    if choice.finish_reason:
                        attempt.finish_reason = choice.finish_reason
        if not chunks:
            raise ModelError(
                f"the model server at {self.server} answered without any chat-completion "
                "chunks; check that the base URL points at an OpenAI-compatible API (usually "
                "ending in /v1)."
            )
        rest = markup.flush()
        if rest and on_delta is not None:
            on_delta(rest)

    def _raise_final(
        self, exc: openai.APIStatusError, messages: list[Step], tools: list[dict[str, Any]]
    ) -> None:
        """Raise at once for the statuses that retrying cannot fix."""
        status = exc.status_code
        message = _message(exc)
        if status in (400, 413, 422) and (
            exc.code == "context_length_exceeded" or _CONTEXT_PATTERN.search(message)
        ):
            tokens = estimate_messages(messages, tools)
            raise ContextTooLong(
                f"the prompt (about {tokens} tokens) is longer than {self.model}'s context "
                f"window (the server at {self.server} said: {message}); compress the "
                "conversation (/compress) or raise the server's context length."
            ) from exc
        if status == 401:
            raise ModelError(
                f"the model server at {self.server} refused the API key (HTTP 401: {message}); "
                'set a valid key with "apiKey" in settings.json, the IFLOW_API_KEY environment '
                "variable, or --api-key."
            ) from exc
        if status in _RETRY_STATUSES or status >= 500:
            return
        if status == 404:
            hint = f"check the model name {self.model!r} and the base URL"
        elif status == 403:
            hint = "check that the API key may use this model"
        else:
            hint = "check the model settings (model name, temperature, maxOutputTokens, toolFormat)"
        raise ModelError(
            f"the model server at {self.server} rejected the request with HTTP {status} "
            f"({message}); {hint}."
        ) from exc

    def _delay(self, failures: int, headers: Any) -> float:
        """Seconds to wait before retry number ``failures``: the server's Retry-After when it
        gives one, else exponential backoff with jitter; both capped at ``backoff_max``."""
        asked = _retry_after(headers) if headers is not None else None
        if asked is not None:
            return min(max(asked, 0.0), self.backoff_max)
        ceiling = min(self.backoff_max, self.backoff_base * 2 ** (failures - 1))
        return ceiling * (0.5 + random.random() / 2)


def _add_call_delta(calls: dict[int, dict[str, Any]], delta: Any) -> None:
    """Merge one streamed tool-call fragment; fragments of one call share an index."""
    index = delta.index if isinstance(delta.index, int) else len(calls)
    entry = calls.setdefault(index, {"id": None, "name": "", "arguments": []})
    if delta.id:
        entry["id"] = delta.id
    function = delta.function
    if function is None:
        return
    if function.name and function.name != entry["name"]:
        entry["name"] += function.name
    if function.arguments:
        entry["arguments"].append(function.arguments)


def _native_call(entry: dict[str, Any]) -> ToolCall:
    raw = "".join(entry["arguments"])
    arguments: Any
    try:
        arguments = json.loads(raw) if raw.strip() else {}
        if isinstance(arguments, str):  # some servers encode the object twice
            arguments = json.loads(arguments)
    except (json.JSONDecodeError, RecursionError):
        arguments = None
    if not isinstance(arguments, dict):
        arguments = {INVALID_JSON_KEY: raw}
    return ToolCall(id=entry["id"] or new_call_id(), name=entry["name"], arguments=arguments)


def _response(attempt: _Attempt) -> ModelResponse:
    raw = "".join(attempt.content)
    content, text_calls, errors = parse_tool_calls(raw)
    calls = [_native_call(attempt.calls[i]) for i in sorted(attempt.calls)] + text_calls
    return ModelResponse(
        content=content,
        tool_calls=calls,
        reasoning="".join(attempt.reasoning) or None,
        format_errors=errors,
        usage=attempt.usage,
        finish_reason=attempt.finish_reason,
        raw=raw if raw != content else None,
    )


def _usage(usage: Any) -> Usage:
    details = getattr(usage, "prompt_tokens_details", None)
    cached = getattr(details, "cached_tokens", None) if details is not None else None
    return Usage(
        prompt_tokens=usage.prompt_tokens,
        completion_tokens=usage.completion_tokens,
        cached_tokens=cached,
    )


def _message(exc: openai.APIError) -> str:
    """The server's own words about an error, shortened."""
    body = exc.body
    text = body.get("message") if isinstance(body, dict) else body
    if not isinstance(text, str) or not text.strip():
        text = exc.message
    text = " ".join(str(text).split())
    return text if len(text) <= 300 else text[:297] + "..."


def _asks_completion_tokens(exc: openai.APIStatusError) -> bool:
    """The 400 of a server that wants ``max_completion_tokens`` instead of ``max_tokens``."""
    return "max_completion_tokens" in _message(exc)


_TOOLS_REFUSED = re.compile(
    r"enable-auto-tool-choice|tool-call-parser|tool.choice|tools param|does not support tools",
    re.IGNORECASE,
)


def _refuses_tools(exc: openai.APIStatusError) -> bool:
    """The 400 of a server that takes no ``tools`` parameter (vLLM without a tool parser,
    llama.cpp without ``--jinja``, Ollama's models without tool support)."""
    return bool(_TOOLS_REFUSED.search(_message(exc))) or getattr(exc, "param", None) == "tools"


def _about_stream(exc: openai.APIStatusError) -> bool:
    return "stream_options" in _message(exc) or getattr(exc, "param", None) == "stream_options"


def _unreachable(server: str, exc: Exception, attempts: int) -> str:
    if isinstance(exc, openai.APITimeoutError):
        return (
            f"the model server at {server} did not answer in time, {attempts} times; check that "
            "it is not overloaded, or raise the timeout."
        )
    if isinstance(exc, openai.APIConnectionError):
        cause = exc.__cause__ or exc
        return (
            f"could not reach the model server at {server} ({cause}) after {attempts} attempts; "
            "check that it is running and that the base URL is right."
        )
    if isinstance(exc, json.JSONDecodeError):
        return (
            f"the model server at {server} streamed data that is not JSON ({exc.msg}) "
            f"{attempts} times; check that the base URL points at an OpenAI-compatible API."
        )
    assert isinstance(exc, openai.APIError)
    return (
        f"the model server at {server} failed while answering ({_message(exc)}) after "
        f"{attempts} attempts; check the server's logs, then try again."
    )


def _retry_after(headers: Any) -> float | None:
    """Seconds the server asked to wait (``retry-after-ms``, or ``retry-after`` as seconds or
    an HTTP date), or None."""
    millis = headers.get("retry-after-ms")
    if millis:
        try:
            return float(millis) / 1000
        except ValueError:
            pass
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return float(value)
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return when.timestamp() - time.time()
