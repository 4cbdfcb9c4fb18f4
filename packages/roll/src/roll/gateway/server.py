"""The policy gateway's HTTP server: OpenAI's chat and text completions on loopback.

``/v1/chat/completions`` (whole or streamed), ``/v1/completions`` and ``/v1/models``, each
call authorised by the bearer key of one open episode (:class:`GatewayEpisodes`). The server
runs on the event loop of the rollouts, beside the generation queue it feeds, so a call's
generation joins the other episodes' batches. Errors come back in OpenAI's error form with
the status a client expects: 401 for a missing or unknown key, 409 for a finished episode,
422 naming the field of a malformed body, 400 ``context_length_exceeded`` for a prompt that
does not fit. A client that goes away while its answer is generated or streamed gets nothing
recorded (the episode's transcript is left as it was).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import socket
from collections.abc import AsyncIterator, Awaitable, Iterator
from typing import Any

import uvicorn
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, StreamingResponse

from roll.gateway.episodes import Answer, CallRefused, GatewayEpisodes, Refusal
from roll.gateway.openai_api import (
    MODEL_NAME,
    ChatRequest,
    CompletionRequest,
    chat_body,
    chat_chunks,
    completion_id,
    error_body,
    text_body,
    to_steps,
)

log = logging.getLogger(__name__)

_STATUS = {Refusal.UNKNOWN_KEY: 401, Refusal.FINISHED: 409, Refusal.CONTEXT_TOO_LONG: 400}
_KIND = {
    Refusal.UNKNOWN_KEY: "authentication_error",
    Refusal.FINISHED: "invalid_request_error",
    Refusal.CONTEXT_TOO_LONG: "invalid_request_error",
}


def _key(request: Request) -> str | None:
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    return token.strip() if scheme.lower() == "bearer" and token.strip() else None


def _sse(payload: dict[str, Any] | str) -> bytes:
    data = payload if isinstance(payload, str) else json.dumps(payload)
    return f"data: {data}\n\n".encode()


def create_app(episodes: GatewayEpisodes) -> FastAPI:
    """The gateway's routes over ``episodes``."""
    app = FastAPI(title="roll policy gateway", docs_url=None, redoc_url=None, openapi_url=None)

    @app.exception_handler(RequestValidationError)
    async def invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        first = exc.errors()[0] if exc.errors() else {"loc": (), "msg": "invalid body"}
        where = ".".join(str(p) for p in first.get("loc", ()) if p != "body") or "body"
        message = f"{where}: {first.get('msg', 'invalid')}; send a chat-completions body as OpenAI documents it"
        return JSONResponse(error_body(message, "invalid_request_error", param=where), 422)

    @app.exception_handler(CallRefused)
    async def refused(_: Request, exc: CallRefused) -> JSONResponse:
        body = error_body(str(exc), _KIND[exc.reason], code=exc.reason.value)
        return JSONResponse(body, _STATUS[exc.reason])

    @app.exception_handler(_ClientGone)
    async def gone(_: Request, exc: _ClientGone) -> JSONResponse:
        return JSONResponse(error_body("the client went away", "client_gone"), 499)

    @app.get("/v1/models")
    async def models(request: Request) -> dict[str, Any]:
        episodes.check(_key(request))
        return {
            "object": "list",
            "data": [{"id": MODEL_NAME, "object": "model", "owned_by": "roll"}],
        }

    @app.post("/v1/chat/completions", response_model=None)
    async def chat(body: ChatRequest, request: Request) -> JSONResponse | StreamingResponse:
        call = episodes.chat(
            _key(request), to_steps(body.messages), body.tools or [], max_tokens=body.budget()
        )
        answer = await _unless_gone(request, call)
        call_id = completion_id()
        if not body.stream:
            answer.commit()
            return JSONResponse(chat_body(answer.response, body, episodes.tokenizer, call_id))
        return _streamed(answer, [_sse(c) for c in chat_chunks(answer.response, body, call_id)])

    @app.post("/v1/completions", response_model=None)
    async def completions(
        body: CompletionRequest, request: Request
    ) -> JSONResponse | StreamingResponse:
        call = episodes.complete_text(_key(request), body.prompt, max_tokens=body.max_tokens)
        answer = await _unless_gone(request, call)
        out = answer.response
        prompt, sampled = out.prompt_token_ids or [], out.token_ids or []
        usage = {
            "prompt_tokens": len(prompt),
            "completion_tokens": len(sampled),
            "total_tokens": len(prompt) + len(sampled),
        }
        finish = out.finish_reason or "stop"
        if not body.stream:
            answer.commit()
            return JSONResponse(text_body(out.content, finish, usage, chunk=False))
        return _streamed(answer, [_sse(text_body(out.content, finish, usage, chunk=True))])

    return app


async def _unless_gone(request: Request, call: Awaitable[Answer]) -> Answer:
    """``call``'s answer; cancelled (its generation with it) if the client disconnects first."""
    work = asyncio.ensure_future(call)
    while True:
        done, _ = await asyncio.wait({work}, timeout=0.25)
        if done:
            return work.result()
        if await request.is_disconnected():
            work.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await work
            raise _ClientGone


class _ClientGone(Exception):
    """The client went away before its answer was ready (nothing to send, nothing recorded)."""


def _streamed(answer: Answer, chunks: list[bytes]) -> StreamingResponse:
    """``chunks`` as server-sent events; the answer is recorded once the last was sent."""

    async def stream() -> AsyncIterator[bytes]:
        try:
            for chunk in chunks:
                yield chunk
            yield _sse("[DONE]")
            answer.commit()
        finally:
            answer.discard()  # no-op once committed

    return StreamingResponse(stream(), media_type="text/event-stream")


class _QuietServer(uvicorn.Server):
    """uvicorn without its signal handlers: the gateway lives inside another program."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


class Gateway:
    """The gateway on loopback, on the running event loop: ``await start()``, then give each
    episode ``url`` and a key from ``episodes.open()``; ``await stop()`` at the end."""

    def __init__(self, episodes: GatewayEpisodes, *, host: str = "127.0.0.1", port: int = 0):
        self.episodes = episodes
        self.host = host
        self.port = port
        self.restarts = 0
        self._server: uvicorn.Server | None = None
        self._task: asyncio.Task[None] | None = None

    @property
    def url(self) -> str:
        """The OpenAI base URL (``http://127.0.0.1:PORT/v1``)."""
        return f"http://{self.host}:{self.port}/v1"

    async def start(self) -> None:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self.host, self.port))
        self.port = sock.getsockname()[1]
        config = uvicorn.Config(
            create_app(self.episodes),
            log_level="warning",
            access_log=False,
            lifespan="off",
            timeout_graceful_shutdown=2,
        )
        server = _QuietServer(config)
        self._server = server
        self._task = asyncio.create_task(server.serve(sockets=[sock]), name="roll-gateway")
        while not server.started:
            if self._task.done():
                await self._task  # its error
            await asyncio.sleep(0.01)

    async def stop(self) -> None:
        if self._server is None or self._task is None:
            return
        self._server.should_exit = True
        with contextlib.suppress(asyncio.CancelledError):
            await self._task
        self._server = None
        self._task = None

    async def restart(self) -> None:
        """Stop and start again on the same port; the open episodes are lost (their agents'
        keys stop working, and their records say so)."""
        await self.stop()
        self.episodes.lose_all()
        self.restarts += 1
        await self.start()
