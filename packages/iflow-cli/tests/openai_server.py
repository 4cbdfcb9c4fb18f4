"""A small OpenAI-compatible chat-completions server for tests, scriptable per request.

``with serve_openai() as server:`` starts it (uvicorn in a background thread on a free
loopback port); ``server.push(...)`` queues behaviours, one consumed per request:

- :class:`Reply` answers (streamed as SSE in several chunks, with a final usage chunk when
  the request asks for one; plain JSON when the request does not stream);
- :class:`Fail` answers an HTTP error with an OpenAI-style error body and headers;
- :class:`Hang` waits before answering with the next behaviour (to make the client time out);
- :class:`Raw` answers exactly the body given (garbage, HTML from a wrong URL);
- :class:`Endless` streams one line for ever, as a model that repeats itself does, until the
  client goes away (then ``server.gone`` is set).

``server.requests`` holds every request body it got, ``server.headers`` their headers. With
``server.reject_stream_options`` set, a request carrying ``stream_options`` is refused with a
400 (as some servers do) without consuming a behaviour. With the queue empty it answers 500.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse


@dataclass
class Reply:
    """A successful answer."""

    content: str = ""
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    """Each ``{"name": ..., "arguments": dict or raw str, "id": optional}``."""
    reasoning: str | None = None
    """Sent as ``reasoning_content`` deltas before the content."""
    usage: dict[str, Any] | None = field(
        default_factory=lambda: {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18}
    )
    chunks: int = 3
    """How many pieces the content and each call's arguments are streamed in."""
    finish_reason: str | None = None
    error_after: int | None = None
    """Stream this many content chunks, then an error event instead of the rest."""


@dataclass
class Fail:
    """An HTTP error answer."""

    status: int
    message: str = "something went wrong"
    code: str | None = None
    type: str = "server_error"
    param: str | None = None
    headers: dict[str, str] = field(default_factory=dict)
    openai_shape: bool = True
    """``{"error": {...}}`` like OpenAI; False gives vLLM's flat ``{"message": ...}`` body."""


@dataclass
class Hang:
    """Wait ``seconds`` before answering with the next behaviour in the queue."""

    seconds: float


@dataclass
class Raw:
    """An answer with exactly this body (for servers that answer garbage)."""

    body: str
    status: int = 200
    media_type: str = "text/event-stream"


@dataclass
class Endless:
    """Stream ``line`` every ``every`` seconds until the client disconnects."""

    line: str = "I will repeat this line.\n"
    every: float = 0.05


Behaviour = Reply | Fail | Hang | Raw | Endless


class FakeOpenAI:
    """The state of one server: the queue of behaviours and the requests seen."""

    def __init__(self) -> None:
        self.behaviours: deque[Behaviour] = deque()
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.reject_stream_options = False
        self.reasoning_model = False
        """Refuse ``max_tokens`` as OpenAI's reasoning models do."""
        self.base_url = ""
        self.gone = threading.Event()
        """Set when a client left an :class:`Endless` stream."""

    def push(self, *behaviours: Behaviour) -> None:
        self.behaviours.extend(behaviours)

    def reset(self) -> None:
        self.behaviours.clear()
        self.requests.clear()
        self.headers.clear()
        self.reject_stream_options = False
        self.reasoning_model = False
        self.gone.clear()

    def app(self) -> FastAPI:
        app = FastAPI()

        @app.post("/v1/chat/completions")
        async def chat(request: Request) -> Response:
            body = await request.json()
            self.requests.append(body)
            self.headers.append(dict(request.headers))
            if self.reject_stream_options and "stream_options" in body:
                return _error(
                    Fail(
                        400,
                        "Unrecognized request argument: stream_options",
                        param="stream_options",
                        type="invalid_request_error",
                    )
                )
            if self.reasoning_model and "max_tokens" in body:
                return _error(
                    Fail(
                        400,
                        "Unsupported parameter: 'max_tokens' is not supported with this model. "
                        "Use 'max_completion_tokens' instead.",
                        param="max_tokens",
                        type="invalid_request_error",
                        code="unsupported_parameter",
                    )
                )
            behaviour = self.behaviours.popleft() if self.behaviours else None
            while isinstance(behaviour, Hang):
                await asyncio.sleep(behaviour.seconds)
                behaviour = self.behaviours.popleft() if self.behaviours else None
            if behaviour is None:
                return _error(Fail(500, "the test server has no behaviour queued"))
            if isinstance(behaviour, Fail):
                return _error(behaviour)
            if isinstance(behaviour, Raw):
                return Response(behaviour.body, behaviour.status, media_type=behaviour.media_type)
            if isinstance(behaviour, Endless):
                return StreamingResponse(
                    self._endless(behaviour, body.get("model", "m")),
                    media_type="text/event-stream",
                )
            if body.get("stream"):
                usage = (body.get("stream_options") or {}).get("include_usage", False)
                return StreamingResponse(
                    _sse(behaviour, body.get("model", "m"), usage),
                    media_type="text/event-stream",
                )
            return JSONResponse(_completion(behaviour, body.get("model", "m")))

        return app

    async def _endless(self, endless: Endless, model: str) -> AsyncIterator[str]:
        try:
            yield _chunk(model, {"role": "assistant", "content": ""})
            while True:
                yield _chunk(model, {"content": endless.line})
                await asyncio.sleep(endless.every)
        finally:  # the client closed the connection (or the server stops)
            self.gone.set()


def _error(fail: Fail) -> JSONResponse:
    inner = {"message": fail.message, "type": fail.type, "param": fail.param, "code": fail.code}
    body = {"error": inner} if fail.openai_shape else {"object": "error", **inner}
    return JSONResponse(body, status_code=fail.status, headers=fail.headers)


def _split(text: str, parts: int) -> list[str]:
    if not text:
        return []
    size = max(1, -(-len(text) // max(1, parts)))
    return [text[i : i + size] for i in range(0, len(text), size)]


def _arguments(call: dict[str, Any]) -> str:
    arguments = call.get("arguments", {})
    return arguments if isinstance(arguments, str) else json.dumps(arguments)


def _chunk(model: str, delta: dict[str, Any], finish: str | None = None) -> str:
    data = {
        "id": "chatcmpl-test",
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    return f"data: {json.dumps(data)}\n\n"


async def _sse(reply: Reply, model: str, include_usage: bool) -> AsyncIterator[str]:
    yield _chunk(model, {"role": "assistant", "content": ""})
    for piece in _split(reply.reasoning or "", reply.chunks):
        yield _chunk(model, {"reasoning_content": piece})
    for number, piece in enumerate(_split(reply.content, reply.chunks)):
        if reply.error_after is not None and number >= reply.error_after:
            yield f"data: {json.dumps({'error': {'message': 'the stream broke', 'code': 500}})}\n\n"
            return
        yield _chunk(model, {"content": piece})
    for index, call in enumerate(reply.tool_calls):
        head = {
            "index": index,
            "id": call.get("id", f"call_srv{index}"),
            "type": "function",
            "function": {"name": call["name"], "arguments": ""},
        }
        yield _chunk(model, {"tool_calls": [head]})
        for piece in _split(_arguments(call), reply.chunks):
            yield _chunk(
                model, {"tool_calls": [{"index": index, "function": {"arguments": piece}}]}
            )
    finish = reply.finish_reason or ("tool_calls" if reply.tool_calls else "stop")
    yield _chunk(model, {}, finish)
    if include_usage and reply.usage is not None:
        data = {
            "id": "chatcmpl-test",
            "object": "chat.completion.chunk",
            "created": int(time.time()),
            "model": model,
            "choices": [],
            "usage": reply.usage,
        }
        yield f"data: {json.dumps(data)}\n\n"
    yield "data: [DONE]\n\n"


def _completion(reply: Reply, model: str) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": reply.content}
    if reply.tool_calls:
        message["tool_calls"] = [
            {
                "id": call.get("id", f"call_srv{i}"),
                "type": "function",
                "function": {"name": call["name"], "arguments": _arguments(call)},
            }
            for i, call in enumerate(reply.tool_calls)
        ]
    return {
        "id": "chatcmpl-test",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
        "usage": reply.usage,
    }


@contextmanager
def serve_openai(*behaviours: Behaviour) -> Iterator[FakeOpenAI]:
    """Run a :class:`FakeOpenAI` on 127.0.0.1 with a free port for the ``with`` block."""
    state = FakeOpenAI()
    state.push(*behaviours)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(
        state.app(), log_level="warning", lifespan="off", timeout_graceful_shutdown=1
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("the test OpenAI server did not start")
        time.sleep(0.01)
    state.base_url = f"http://127.0.0.1:{port}/v1"
    try:
        yield state
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()


def closed_port_url() -> str:
    """A base URL on a loopback port nothing listens on (connections are refused)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"
