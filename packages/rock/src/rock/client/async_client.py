"""`AsyncClient`, `AsyncSandbox` and `AsyncSession`: the rock daemon's client, written once,
async-first, on httpx (the sync client in :mod:`rock.client.sync_client` waits for it).

It finds the daemon and its token and sends the calls :mod:`rock.api` describes. Only a
connection that could not be made is retried (`DaemonUnreachable` when the retries run out);
one that broke under a request raises `DaemonLost`.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import itertools
import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any, Self, TypeVar

import httpx

from rock.api import DEFAULT_URL, Api, Call, raise_for
from rock.backends.base import (
    SandboxError,
    SandboxNotFound,
    hand_on,
    pack_upload,
    unpack_download,
)
from rock.errors import (
    DaemonLost,
    DaemonUnreachable,
    InvalidRequest,
    RockError,
    ShuttingDown,
)
from rock.models import (
    DEFAULT_MAX_OUTPUT,
    ExecLog,
    ExecRequest,
    ExecResult,
    Health,
    ImageBuild,
    ImageInfo,
    PoolInfo,
    SandboxInfo,
    SandboxSpec,
    SessionResult,
)
from rock.store import default_home

T = TypeVar("T")


def context_tar(context: Path) -> bytes:
    """A build context folder as the tar the daemon's image build takes."""
    if not Path(context).is_dir():
        raise InvalidRequest(f"build context {context} is not a folder; give the folder.")
    return pack_upload(Path(context), ".")[0]


def _settings(url: str | None, token: str | None, home: Path | None) -> tuple[str, str | None]:
    """URL and token: arguments, else $ROCK_URL/$ROCK_TOKEN, else the daemon's files in home."""
    home = home or default_home()
    if url is None:
        url = os.environ.get("ROCK_URL")
    if url is None:
        try:
            url = json.loads((home / "daemon.json").read_text())["url"]
        except (OSError, ValueError, KeyError):
            url = DEFAULT_URL
    if token is None:
        token = os.environ.get("ROCK_TOKEN")
    if token is None:
        try:
            token = (home / "token").read_text().strip() or None
        except OSError:
            token = None
    return str(url).rstrip("/"), token


def _unreachable(url: str, exc: Exception) -> DaemonUnreachable:
    return DaemonUnreachable(
        f"no rock daemon answers at {url} ({type(exc).__name__}); start one with 'rock serve' "
        "or point ROCK_URL at it."
    )


def _lost(url: str, exc: Exception) -> DaemonLost:
    what = "did not answer in time" if isinstance(exc, httpx.TimeoutException) else "went away"
    return DaemonLost(
        f"the rock daemon at {url} {what} while a request was under way "
        f"({type(exc).__name__}), so it may or may not have been carried out; check the "
        "daemon and run it again."
    )


def _pool_not_ready(name: str, info: PoolInfo, idle: int | None, timeout: float) -> RockError:
    wanted = idle if idle is not None else info.min_idle
    return RockError(
        f"pool {name} has {info.idle} idle sandboxes after {timeout:g}s (wanted {wanted}); "
        "check 'rock pool ls' and the daemon's log."
    )


class AsyncClient:
    """A connection to a rock daemon, for asyncio. ``AsyncClient()`` finds it through
    ``$ROCK_URL`` or ``<rock home>/daemon.json`` and reads the token from ``$ROCK_TOKEN`` or
    ``<rock home>/token``; :class:`Client` is the same, waited for."""

    def __init__(
        self,
        url: str | None = None,
        token: str | None = None,
        *,
        home: Path | None = None,
        retries: int = 5,
        backoff: float = 0.1,
        timeout: float = 60.0,
        max_connections: int = 100,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        """``retries`` and ``backoff``: how often, and after how long (doubled each time), a
        request that could not reach the daemon is sent again; ``transport``: the seam below
        the client (httpx's; a test's ``httpx.MockTransport``, say), by default HTTP."""
        self.url, self.token = _settings(url, token, home)
        self.retries = retries
        self.backoff = backoff
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        limits = httpx.Limits(
            max_connections=max_connections, max_keepalive_connections=max_connections
        )
        self._http = httpx.AsyncClient(
            base_url=self.url, headers=headers, timeout=timeout, limits=limits, transport=transport
        )

    def _retry_delay(self, exc: httpx.TransportError, attempt: int) -> float:
        """Seconds to wait before sending again; raises what ``exc`` means when not to."""
        if isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout):  # never reached it
            if attempt >= self.retries:
                raise _unreachable(self.url, exc) from None
            return self.backoff * 2**attempt
        raise _lost(self.url, exc) from None  # sent, and the connection broke

    async def request(self, method: str, path: str, **options: Any) -> httpx.Response:
        """Send one request; retry only when the connection could not be made."""
        for attempt in itertools.count():
            try:
                response = await self._http.request(method, path, **options)
            except httpx.TransportError as exc:
                await asyncio.sleep(self._retry_delay(exc, attempt))
                continue
            raise_for(response)
            return response
        raise AssertionError("unreachable")

    async def send(self, call: Call[T]) -> T:
        """Send ``call`` and read its answer."""
        return call.read(await self.request(call.method, call.path, **call.options))

    async def health(self) -> Health:
        return await self.send(Api.health())

    async def metrics(self) -> str:
        return await self.send(Api.metrics())

    async def create(
        self,
        spec: SandboxSpec | None = None,
        *,
        pool: str | None = None,
        use_pools: bool = True,
        **fields: Any,
    ) -> AsyncSandbox:
        return AsyncSandbox(self, await self.send(Api.create(spec, pool, use_pools, fields)))

    async def acquire(self, pool: str, **fields: Any) -> AsyncSandbox:
        return await self.create(pool=pool, **fields)

    async def sandbox(self, sandbox_id: str) -> AsyncSandbox:
        return AsyncSandbox(self, await self.info(sandbox_id))

    async def info(self, sandbox_id: str) -> SandboxInfo:
        return await self.send(Api.info(sandbox_id))

    async def list(
        self,
        *,
        state: list[str] | None = None,
        labels: dict[str, str] | None = None,
        pool: str | None = None,
        include_deleted: bool = False,
    ) -> list[SandboxInfo]:
        return await self.send(Api.list(state, labels, pool, include_deleted))

    async def delete(self, sandbox_id: str) -> SandboxInfo:
        return await self.send(Api.delete(sandbox_id))

    async def logs(self, sandbox_id: str, limit: int = 100) -> builtins.list[ExecLog]:
        return await self.send(Api.logs(sandbox_id, limit))

    async def pools(self) -> builtins.list[PoolInfo]:
        return await self.send(Api.pools())

    async def pool(self, name: str) -> PoolInfo:
        return await self.send(Api.pool(name))

    async def set_pool(
        self,
        name: str,
        spec: SandboxSpec | None = None,
        *,
        min_idle: int = 1,
        max_total: int = 8,
    ) -> PoolInfo:
        return await self.send(Api.set_pool(name, spec, min_idle, max_total))

    async def delete_pool(self, name: str) -> None:
        await self.send(Api.delete_pool(name))

    async def wait_pool(
        self, name: str, idle: int | None = None, timeout: float = 120.0
    ) -> PoolInfo:
        """Wait until ``name`` has ``idle`` (default: its min_idle) sandboxes waiting."""
        deadline = time.monotonic() + timeout
        while True:
            info = await self.pool(name)
            if info.idle >= (info.min_idle if idle is None else idle):
                return info
            if time.monotonic() > deadline:
                raise _pool_not_ready(name, info, idle, timeout)
            await asyncio.sleep(0.1)

    async def images(self) -> builtins.list[ImageInfo]:
        return await self.send(Api.images())

    async def build_image(
        self, context: Path, *, dockerfile: str = "Dockerfile", name: str = "image"
    ) -> ImageBuild:
        data = await asyncio.to_thread(context_tar, context)
        return await self.send(Api.build_image(data, dockerfile, name))

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


class AsyncSandbox:
    """A sandbox behind the daemon, with the verbs of an in-process one, awaited;
    ``async with`` deletes it on exit."""

    def __init__(self, client: AsyncClient, info: SandboxInfo) -> None:
        self.client = client
        self.id = info.id
        self.spec = info.spec
        self.info = info
        self.daemon_lost: str | None = None
        """Why the daemon could not be reached, or was shutting down, under a request of
        this sandbox (the first time), or None: since then a command may have been lost and
        sessions closed."""

    async def send(self, call: Call[T]) -> T:
        """Send ``call`` for this sandbox, remembering a daemon that went away."""
        try:
            return await self.client.send(call)
        except (DaemonUnreachable, ShuttingDown) as exc:
            self.daemon_lost = self.daemon_lost or str(exc)
            raise

    async def run(self, request: ExecRequest) -> ExecResult:
        return await self.send(Api.run(self.id, request))

    async def run_streaming(
        self, request: ExecRequest, on_output: Callable[[int, bytes], None] | None
    ) -> ExecResult:
        """:meth:`run`, the output handed to ``on_output(stream, bytes)`` when it ends (the
        daemon's API answers a command whole)."""
        result = await self.run(request)
        hand_on(result, on_output)
        return result

    async def interrupt(self, tag: str | None = None) -> int:
        return (await self.send(Api.interrupt(self.id, tag))).interrupted

    async def status(self) -> dict[str, Any]:
        self.info = await self.send(Api.info(self.id))
        return {"state": self.info.state, "reason": self.info.state_reason}

    async def logs(self, limit: int = 100) -> list[ExecLog]:
        return await self.client.logs(self.id, limit)

    async def exec(
        self,
        command: str | list[str],
        *,
        timeout: float | None = 60.0,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        stdin: bytes | None = None,
        max_output_bytes: int = DEFAULT_MAX_OUTPUT,
    ) -> ExecResult:
        return await self.run(
            ExecRequest(
                command=command,
                timeout=timeout,
                cwd=cwd,
                env=env or {},
                stdin=stdin,
                max_output_bytes=max_output_bytes,
            )
        )

    async def session(self) -> AsyncSession:
        info = await self.send(Api.open_session(self.id))
        return AsyncSession(self, info.id)

    async def read_file(self, path: str) -> bytes:
        return await self.send(Api.read_file(self.id, path))

    async def write_file(self, path: str, data: bytes, mode: int = 0o644) -> None:
        await self.send(Api.write_file(self.id, path, data, mode))

    async def put_archive(self, directory: str, data: bytes) -> None:
        await self.send(Api.put_archive(self.id, directory, data))

    async def get_archive(self, path: str) -> bytes:
        return await self.send(Api.get_archive(self.id, path))

    async def upload(self, local: Path, remote: str) -> None:
        local = Path(local)
        if not local.exists():
            raise SandboxError(f"{local} does not exist on this machine; check the path.")
        data, target = await asyncio.to_thread(pack_upload, local, remote)
        await self.put_archive(target, data)

    async def download(self, remote: str, local: Path) -> None:
        data = await self.get_archive(remote)
        await asyncio.to_thread(unpack_download, data, Path(local))

    async def snapshot(self, tag: str) -> str:
        return await self.send(Api.snapshot(self.id, tag))

    async def fork(self, count: int = 1) -> list[AsyncSandbox]:
        made = await self.send(Api.fork(self.id, count))
        return [AsyncSandbox(self.client, info) for info in made]

    async def set_network(self, on: bool) -> None:
        """Open or close the sandbox's network (one made with a network only)."""
        await self.send(Api.set_network(self.id, on))

    async def pause(self) -> None:
        self.info = await self.send(Api.pause(self.id))

    async def resume(self) -> None:
        self.info = await self.send(Api.resume(self.id))

    async def stop(self) -> None:
        self.info = await self.send(Api.stop(self.id))

    async def delete(self) -> None:
        with contextlib.suppress(SandboxNotFound):
            self.info = await self.client.delete(self.id)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.delete()


class AsyncSession:
    """A persistent bash session in a sandbox behind the daemon."""

    def __init__(self, sandbox: AsyncSandbox, session_id: str) -> None:
        self.sandbox = sandbox
        self.id = session_id
        self.closed = False

    async def run(self, command: str, timeout: float | None = 60.0) -> SessionResult:
        call = Api.session_run(self.sandbox.id, self.id, command, timeout)
        return await self.sandbox.send(call)

    async def interrupt(self) -> None:
        await self.sandbox.send(Api.session_interrupt(self.sandbox.id, self.id))

    async def close(self) -> None:
        if not self.closed:
            self.closed = True
            with contextlib.suppress(SandboxNotFound, SandboxError):
                await self.sandbox.send(Api.session_close(self.sandbox.id, self.id))

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
