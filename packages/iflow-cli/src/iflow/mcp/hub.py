"""The MCP servers of a session, connected, and their tools as the agent's tools.

Servers are configured as Gemini CLI and iFlow CLI users already write them, under
``mcpServers`` in settings: a ``command`` (with ``args``, ``env``, ``cwd``) runs a server
over stdio; ``httpUrl`` (or ``url`` with ``"type": "http"``) reaches one over streamable
HTTP, ``url`` alone over SSE, both with ``headers``. ``includeTools`` / ``excludeTools``
choose tools, ``timeout`` (milliseconds) bounds one call, ``trust`` skips the approval
question. ``$VAR`` and ``${VAR}`` in ``env`` and ``headers`` are read from the environment.

The :class:`McpHub` connects every server through the official ``mcp`` SDK, each in its own
task (the SDK's transports must be entered and left in one task). A server that fails to
start, hangs or dies mid-session is one sentence (:attr:`McpServer.error`) and the session
goes on without it. Its tools become :class:`McpTool` objects that the agent's registry holds
like any other tool: a name clash with a built-in tool or another server's tool is resolved by
naming the later one ``<server>__<tool>``.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import json
import os
import re
import shutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import httpx2
import mcp_types
from mcp import Client
from mcp.client import Transport
from mcp.client.sse import sse_client
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from pydantic import BaseModel, ConfigDict

from iflow.mcp.config import McpServerConfig
from iflow.tools.base import Params, Tool, ToolContext, ToolFailed, ToolOutput
from iflow.tools.truncate import head_tail

START_TIMEOUT_SEC = 30.0
"""Seconds a server has to start and list its tools."""
_NAME = re.compile(r"[^A-Za-z0-9_-]")
Launcher = Callable[[list[str]], list[str]]
"""Turns a stdio server's command line into the one run on this machine."""
_ENV_REF = re.compile(r"\$\{(\w+)\}|\$(\w+)")


class ServerState(enum.StrEnum):
    """Where a server is: ``/mcp`` shows it, the agent offers the tools of ready ones."""

    CONNECTING = "connecting"
    READY = "ready"
    FAILED = "failed"
    """It did not start (its :attr:`McpServer.error` says why)."""
    STOPPED = "stopped"
    """It was ready and then died or stopped answering."""
    DISABLED = "disabled"


@dataclass
class McpServer:
    """One configured server and what became of it."""

    name: str
    config: McpServerConfig
    state: ServerState = ServerState.CONNECTING
    error: str = ""
    tools: list[mcp_types.Tool] = field(default_factory=list)
    client: Client | None = None
    log: Path | None = None
    _ready: asyncio.Event = field(default_factory=asyncio.Event)
    _stop: asyncio.Event = field(default_factory=asyncio.Event)
    _task: asyncio.Task[None] | None = None

    def stderr_tail(self) -> str:
        """The last line the stdio server wrote to stderr (often its reason for failing)."""
        if self.log is None:
            return ""
        try:
            lines = self.log.read_text(errors="replace").strip().splitlines()
        except OSError:
            return ""
        return lines[-1].strip()[:300] if lines else ""


class McpHub:
    """The MCP servers of one session, connected, with their tools."""

    def __init__(
        self,
        servers: Mapping[str, McpServerConfig],
        *,
        cwd: Path | None = None,
        log_dir: Path | None = None,
        env: Mapping[str, str] | None = None,
        start_timeout: float = START_TIMEOUT_SEC,
        launcher: Launcher | None = None,
    ) -> None:
        """``launcher`` turns a stdio server's command line into the one to run here (a
        sandbox's :meth:`~ale.sandbox.Attachable.attach_argv`: the server then runs inside
        the sandbox); None: servers run on this machine, in ``cwd``. Call :meth:`connect`."""
        self.servers = {name: McpServer(name, config) for name, config in servers.items()}
        self.cwd = cwd
        self.log_dir = log_dir
        self.env = os.environ if env is None else env
        self.start_timeout = start_timeout
        self.launcher = launcher

    async def connect(self) -> None:
        """Connect every enabled server, concurrently; return when each is ready or failed."""
        waits = []
        for server in self.servers.values():
            if server.config.disabled:
                server.state = ServerState.DISABLED
                continue
            server._task = asyncio.create_task(self._serve(server), name=f"mcp:{server.name}")
            waits.append(self._await_ready(server))
        await asyncio.gather(*waits)

    async def _await_ready(self, server: McpServer) -> None:
        try:
            await asyncio.wait_for(server._ready.wait(), self.start_timeout)
        except TimeoutError:
            server.state = ServerState.FAILED
            server.error = (
                f"MCP server '{server.name}' did not start within {self.start_timeout:g} s "
                f"({server.config.endpoint}); check that it runs on its own, or raise its timeout."
            )
            await self._cancel(server)

    def _target(self, server: McpServer, argv: list[str], errlog: TextIO) -> Transport:
        config = server.config
        if config.transport == "stdio":
            env = {k: self._expand(v) for k, v in config.env.items()}
            params = StdioServerParameters(
                command=argv[0],
                args=argv[1:],
                env=env or None,
                cwd=None if self.launcher else config.cwd or (str(self.cwd) if self.cwd else None),
            )
            return stdio_client(params, errlog=errlog)
        headers = {k: self._expand(v) for k, v in config.headers.items()}
        url = str(config.http_url or config.url)
        if config.transport == "sse":
            return sse_client(url, headers=headers or None)
        http = httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30.0, read=300.0))
        return streamable_http_client(url, http_client=http)

    def _expand(self, value: str) -> str:
        return _ENV_REF.sub(lambda m: self.env.get(m.group(1) or m.group(2), ""), value)

    async def _serve(self, server: McpServer) -> None:
        """The server's own task: connect, list tools, wait for the end of the session."""
        config = server.config
        try:
            argv: list[str] = []
            if config.transport == "stdio":
                argv = self._argv(server)
                if not argv:
                    return
            with contextlib.ExitStack() as files:
                if self.log_dir is not None:
                    self.log_dir.mkdir(parents=True, exist_ok=True)
                    server.log = self.log_dir / f"mcp-{_NAME.sub('_', server.name)}.log"
                    errlog = files.enter_context(server.log.open("w"))
                else:
                    errlog = files.enter_context(open(os.devnull, "w"))
                client = Client(self._target(server, argv, errlog))
                async with client:
                    listed: list[mcp_types.Tool] = []
                    cursor: str | None = None
                    while True:
                        page = await client.list_tools(cursor=cursor)
                        listed.extend(page.tools)
                        cursor = page.next_cursor
                        if not cursor:
                            break
                    server.tools = [t for t in listed if _chosen(t.name, config)]
                    server.client = client
                    server.state = ServerState.READY
                    server._ready.set()
                    await server._stop.wait()
        except asyncio.CancelledError:
            raise
        except BaseException as exc:
            if server.state is ServerState.READY:
                server.state = ServerState.STOPPED
                server.error = f"MCP server '{server.name}' stopped: {_reason(exc)}."
            else:
                server.state = ServerState.FAILED
                tail = server.stderr_tail()
                server.error = (
                    f"MCP server '{server.name}' failed to start ({_reason(exc)}"
                    + (f"; it said: {tail}" if tail else "")
                    + f"); fix its entry in mcpServers ({config.endpoint})."
                )
        finally:
            server.client = None
            server._ready.set()

    def _argv(self, server: McpServer) -> list[str]:
        """The command line of a stdio server, as run here; [] with the server failed (its
        error set) when it cannot run."""
        config = server.config
        assert config.command is not None
        argv = [config.command, *config.args]
        if self.launcher is not None:
            try:
                argv = self.launcher(argv)
            except Exception as exc:
                server.state = ServerState.FAILED
                server.error = f"MCP server '{server.name}' cannot run in the sandbox: {exc}"
                return []
        path = config.env.get("PATH") or self.env.get("PATH")
        if shutil.which(argv[0], path=path) is None:
            server.state = ServerState.FAILED
            server.error = (
                f"MCP server '{server.name}' cannot start: the command {argv[0]!r} was not "
                "found; install it or fix its path in mcpServers."
            )
            return []
        return argv

    # -- what the agent sees ---------------------------------------------------------------

    def tools(self, taken: set[str] | frozenset[str] = frozenset()) -> list[Tool]:
        """A tool per tool of every ready server; a clash gets ``<server>__<tool>``."""
        out: list[Tool] = []
        used = set(taken)
        for server in self.servers.values():
            if server.state is not ServerState.READY:
                continue
            for spec in server.tools:
                name = _NAME.sub("_", spec.name)[:64]
                if name in used:
                    name = f"{_NAME.sub('_', server.name)}__{name}"[:64]
                used.add(name)
                out.append(McpTool(self, server.name, spec, name))
        return out

    def failures(self) -> list[str]:
        """One sentence per server that is not usable."""
        return [
            s.error
            for s in self.servers.values()
            if s.state in (ServerState.FAILED, ServerState.STOPPED)
        ]

    def status(self) -> list[dict[str, Any]]:
        """What ``/mcp`` shows: each server, its state, its tools or its error."""
        return [
            {
                "name": s.name,
                "state": s.state.value,
                "transport": s.config.transport,
                "endpoint": s.config.endpoint,
                "tools": [t.name for t in s.tools] if s.state is ServerState.READY else [],
                "error": s.error,
            }
            for s in self.servers.values()
        ]

    async def call(self, server_name: str, tool: str, arguments: dict[str, Any]) -> ToolOutput:
        """Call ``tool`` on its server; every failure is a :class:`ToolFailed` of one sentence."""
        server = self.servers[server_name]
        client = server.client
        if server.state is not ServerState.READY or client is None:
            raise ToolFailed(
                server.error
                or f"MCP server '{server_name}' is not running; its tools cannot be used now."
            )
        limit = server.config.call_timeout_sec
        try:
            result = await asyncio.wait_for(client.call_tool(tool, arguments), limit)
        except TimeoutError:
            raise ToolFailed(
                f"MCP server '{server_name}' did not answer {tool} within {limit:g} s; the call "
                "was abandoned (raise the server's timeout in mcpServers if it needs longer)."
            ) from None
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            if (server._task is not None and server._task.done()) or _closed(exc):
                server.state = ServerState.STOPPED
                server.error = (
                    f"MCP server '{server_name}' stopped ({_reason(exc)}); its tools are "
                    "unavailable for the rest of the session."
                )
                raise ToolFailed(server.error) from None
            raise ToolFailed(
                f"{tool} on MCP server '{server_name}' failed: {_reason(exc)}."
            ) from None
        return _output(result)

    async def aclose(self) -> None:
        """Stop every server (stdio processes are ended by the SDK)."""
        for server in self.servers.values():
            await self._cancel(server)

    async def _cancel(self, server: McpServer) -> None:
        server._stop.set()
        task = server._task
        if task is None or task.done():
            return
        try:
            # a ready server leaves in order (the SDK ends a stdio process politely); one that
            # never came up is cancelled at once
            limit = 5.0 if server.state is ServerState.READY else 0.0
            await asyncio.wait_for(asyncio.shield(task), limit)
        except (TimeoutError, Exception):
            task.cancel()
            with contextlib.suppress(BaseException):
                await task


class McpArguments(Params):
    """An MCP tool's arguments pass through as given: its server checks them against its
    own schema (what the model sees) and answers a bad call with an error."""

    model_config = ConfigDict(extra="allow")


class McpTool(Tool):
    """One tool of an MCP server, as the agent's registry holds tools."""

    params = McpArguments

    def __init__(self, hub: McpHub, server: str, spec: mcp_types.Tool, name: str) -> None:
        self.hub = hub
        self.server = server
        self.spec = spec
        self.name = name
        read_only = bool(spec.annotations and spec.annotations.read_only_hint)
        self.kind = "read" if read_only else "mcp"
        self.trusted = hub.servers[server].config.trust
        text = (spec.description or spec.title or spec.name).strip()
        self.description = f"{text}\n(MCP tool {spec.name} of server {server})"

    def parameters_schema(self) -> dict[str, Any]:
        """The server's own input schema of the tool."""
        parameters = dict(self.spec.input_schema or {"type": "object", "properties": {}})
        parameters.setdefault("type", "object")
        return parameters

    async def run(self, params: Any, ctx: ToolContext) -> ToolOutput:
        arguments = params.model_dump() if isinstance(params, BaseModel) else dict(params)
        return await self.hub.call(self.server, self.spec.name, arguments)

    def describe(self, arguments: dict[str, Any]) -> str:
        inner = ", ".join(f"{k}={json.dumps(v)[:60]}" for k, v in arguments.items())
        return f"{self.server}:{self.spec.name}({inner})"


def _chosen(name: str, config: McpServerConfig) -> bool:
    if config.include_tools is not None and name not in config.include_tools:
        return False
    return name not in config.exclude_tools


OUTPUT_LIMIT = 30_000


def _output(result: mcp_types.CallToolResult) -> ToolOutput:
    """The text the model reads for a tool's result (images and blobs as one line each)."""
    parts: list[str] = []
    for block in result.content:
        if isinstance(block, mcp_types.TextContent):
            parts.append(block.text)
        elif isinstance(block, mcp_types.ImageContent | mcp_types.AudioContent):
            parts.append(f"[{block.type}: {block.mime_type}, {len(block.data) * 3 // 4} bytes]")
        elif isinstance(block, mcp_types.EmbeddedResource):
            inner = block.resource
            if isinstance(inner, mcp_types.TextResourceContents):
                parts.append(inner.text)
            else:
                parts.append(f"[resource {inner.uri}: {inner.mime_type or 'binary'}]")
        elif isinstance(block, mcp_types.ResourceLink):
            parts.append(f"[resource link {block.uri}]")
    if not parts and result.structured_content is not None:
        parts.append(json.dumps(result.structured_content, ensure_ascii=False))
    text, cut = head_tail("\n".join(parts), OUTPUT_LIMIT)
    return ToolOutput(
        text or "(no output)",
        is_error=bool(result.is_error),
        metadata={"mcp": True, "truncated_chars": cut},
    )


def _closed(exc: BaseException) -> bool:
    code = getattr(getattr(exc, "error", None), "code", None)
    return code == mcp_types.CONNECTION_CLOSED or isinstance(
        exc, (BrokenPipeError, ConnectionError, httpx2.TransportError)
    )


def _reason(exc: BaseException) -> str:
    """The innermost failure of an exception (group) in a few words."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
