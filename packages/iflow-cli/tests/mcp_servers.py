"""MCP servers written for the tests, with the official SDK: one over streamable HTTP on
loopback (a thread running uvicorn, with a bearer token), one over stdio (run as a script)."""

from __future__ import annotations

import asyncio
import os
import socket
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from mcp.server.mcpserver import MCPServer

TOKEN = "test-token-123"


def tools_server() -> MCPServer:
    server = MCPServer("test-tools", log_level="WARNING")

    @server.tool(description="Echo the text back.")
    def echo(text: str) -> str:
        return f"echo: {text}"

    @server.tool(description="A tool named like a built-in one.")
    def read_file(path: str) -> str:
        return f"remote content of {path}"

    @server.tool(description="Sleep, then answer.")
    async def slow(seconds: float) -> str:
        await asyncio.sleep(seconds)
        return "slept"

    @server.tool(description="Exit the server process at once.")
    def die() -> str:
        os._exit(3)

    return server


@contextmanager
def http_server() -> Iterator[str]:
    """The tools server over streamable HTTP; yields its URL. Requests without the bearer
    token are refused with 401."""
    import uvicorn
    from starlette.responses import PlainTextResponse
    from starlette.types import ASGIApp, Receive, Scope, Send

    inner: ASGIApp = tools_server().streamable_http_app()

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            headers = dict(scope["headers"])
            if headers.get(b"authorization") != f"Bearer {TOKEN}".encode():
                await PlainTextResponse("no token", status_code=401)(scope, receive, send)
                return
        await inner(scope, receive, send)

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="error", lifespan="on")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if time.monotonic() > deadline:
            raise RuntimeError("the test MCP server did not start")
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        server.should_exit = True
        thread.join(10)


if __name__ == "__main__":  # the stdio server: python mcp_servers.py
    if sys.argv[1:] == ["--fail"]:
        print("cannot open the database /nonexistent/db.sqlite", file=sys.stderr)
        raise SystemExit(1)
    tools_server().run("stdio")
