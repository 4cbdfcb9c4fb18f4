"""`Client`, `RemoteSandbox` and `RemoteSession`: the async client of
:mod:`rock.client.async_client`, waited for. Each verb waits for its async twin on an event loop
of the process's own (one thread, started on first use), so the two cannot drift and these
hold no logic of their own.
"""

from __future__ import annotations

import asyncio
import builtins
import os
import threading
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, Self, TypeVar

import httpx

from rock.api import Call
from rock.backends.base import Sandbox
from rock.client.async_client import AsyncClient, AsyncSandbox, AsyncSession
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

T = TypeVar("T")


class _Portal:
    """The event loop the sync client's calls run on: one thread of the process's own,
    started on first use (and again in a forked child, where the parent's is gone)."""

    _lock = threading.RLock()  # (a signal handler may use a client while get() holds it)
    _current: _Portal | None = None

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(
            target=self.loop.run_forever, name="rock-client", daemon=True
        )
        self.thread.start()

    @classmethod
    def get(cls) -> _Portal:
        with cls._lock:
            if cls._current is None or cls._current.pid != os.getpid():
                cls._current = _Portal()
            return cls._current

    def wait(self, coroutine: Coroutine[Any, Any, T]) -> T:
        """Run ``coroutine`` on the loop and wait for its result; interrupted (Ctrl+C), the
        request is cancelled too."""
        if threading.get_ident() == self.thread.ident:
            coroutine.close()
            raise RuntimeError("the sync rock client was called on its own event loop")
        future = asyncio.run_coroutine_threadsafe(coroutine, self.loop)
        try:
            return future.result()
        except BaseException:
            future.cancel()
            raise


def _wait(coroutine: Coroutine[Any, Any, T]) -> T:
    return _Portal.get().wait(coroutine)


class Client:
    """:class:`AsyncClient`, waited for: the same arguments, verbs and answers."""

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
        self.awaited = AsyncClient(
            url, token, home=home, retries=retries, backoff=backoff, timeout=timeout,
            max_connections=max_connections, transport=transport,
        )  # fmt: skip
        """The async client whose verbs this one waits for."""
        self.url, self.token = self.awaited.url, self.awaited.token

    def request(self, method: str, path: str, **options: Any) -> httpx.Response:
        return _wait(self.awaited.request(method, path, **options))

    def send(self, call: Call[T]) -> T:
        return _wait(self.awaited.send(call))

    def health(self) -> Health:
        return _wait(self.awaited.health())

    def metrics(self) -> str:
        return _wait(self.awaited.metrics())

    def create(
        self,
        spec: SandboxSpec | None = None,
        *,
        pool: str | None = None,
        use_pools: bool = True,
        **fields: Any,
    ) -> RemoteSandbox:
        """A sandbox from ``pool``, from a pool that fits ``spec``, or newly started.

        ``fields`` are `SandboxSpec` fields (``image=..., memory_mb=..., ttl_sec=...``).
        """
        made = _wait(self.awaited.create(spec, pool=pool, use_pools=use_pools, **fields))
        return RemoteSandbox(self, made.info)

    def acquire(self, pool: str, **fields: Any) -> RemoteSandbox:
        """Take a started sandbox from ``pool``."""
        return self.create(pool=pool, **fields)

    def sandbox(self, sandbox_id: str) -> RemoteSandbox:
        return RemoteSandbox(self, self.info(sandbox_id))

    def info(self, sandbox_id: str) -> SandboxInfo:
        return _wait(self.awaited.info(sandbox_id))

    def list(
        self,
        *,
        state: list[str] | None = None,
        labels: dict[str, str] | None = None,
        pool: str | None = None,
        include_deleted: bool = False,
    ) -> list[SandboxInfo]:
        return _wait(
            self.awaited.list(
                state=state, labels=labels, pool=pool, include_deleted=include_deleted
            )
        )

    def delete(self, sandbox_id: str) -> SandboxInfo:
        return _wait(self.awaited.delete(sandbox_id))

    def logs(self, sandbox_id: str, limit: int = 100) -> builtins.list[ExecLog]:
        return _wait(self.awaited.logs(sandbox_id, limit))

    def pools(self) -> builtins.list[PoolInfo]:
        return _wait(self.awaited.pools())

    def pool(self, name: str) -> PoolInfo:
        return _wait(self.awaited.pool(name))

    def set_pool(
        self,
        name: str,
        spec: SandboxSpec | None = None,
        *,
        min_idle: int = 1,
        max_total: int = 8,
    ) -> PoolInfo:
        return _wait(self.awaited.set_pool(name, spec, min_idle=min_idle, max_total=max_total))

    def delete_pool(self, name: str) -> None:
        _wait(self.awaited.delete_pool(name))

    def wait_pool(self, name: str, idle: int | None = None, timeout: float = 120.0) -> PoolInfo:
        """Wait until ``name`` has ``idle`` (default: its min_idle) sandboxes waiting."""
        return _wait(self.awaited.wait_pool(name, idle, timeout))

    def images(self) -> builtins.list[ImageInfo]:
        return _wait(self.awaited.images())

    def build_image(
        self, context: Path, *, dockerfile: str = "Dockerfile", name: str = "image"
    ) -> ImageBuild:
        """Build an image on the daemon's engine from the folder ``context`` (its
        Dockerfile at ``dockerfile``, relative to it); sandboxes start from its ``tag``."""
        return _wait(self.awaited.build_image(context, dockerfile=dockerfile, name=name))

    def close(self) -> None:
        _wait(self.awaited.aclose())

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class RemoteSandbox(Sandbox):
    """:class:`AsyncSandbox`, waited for: a sandbox behind the daemon with the verbs of an
    in-process one (``exec``, ``upload`` and ``download`` from :class:`Sandbox`)."""

    def __init__(self, client: Client, info: SandboxInfo) -> None:
        self.client = client
        self.awaited = AsyncSandbox(client.awaited, info)
        """The async sandbox whose verbs this one waits for."""
        self.id = info.id
        self.spec = info.spec

    @property
    def info(self) -> SandboxInfo:
        """What the daemon last said of the sandbox."""
        return self.awaited.info

    @property
    def daemon_lost(self) -> str | None:
        """See :attr:`AsyncSandbox.daemon_lost`."""
        return self.awaited.daemon_lost

    def send(self, call: Call[T]) -> T:
        return _wait(self.awaited.send(call))

    def run(self, request: ExecRequest) -> ExecResult:
        return _wait(self.awaited.run(request))

    def session(self, *, max_output_bytes: int = DEFAULT_MAX_OUTPUT) -> RemoteSession:
        return RemoteSession(self, _wait(self.awaited.session()))

    def interrupt(self, tag: str | None = None) -> int:
        return _wait(self.awaited.interrupt(tag))

    def read_file(self, path: str) -> bytes:
        return _wait(self.awaited.read_file(path))

    def write_file(self, path: str, data: bytes, mode: int = 0o644) -> None:
        _wait(self.awaited.write_file(path, data, mode))

    def put_archive(self, directory: str, data: bytes) -> None:
        _wait(self.awaited.put_archive(directory, data))

    def get_archive(self, path: str) -> bytes:
        return _wait(self.awaited.get_archive(path))

    def snapshot(self, tag: str) -> str:
        return _wait(self.awaited.snapshot(tag))

    def fork(self, count: int = 1) -> list[RemoteSandbox]:
        """``count`` new sandboxes with this one's files as they are now, from one snapshot
        (as E2B's ``Sandbox.fork``; see the daemon's fork)."""
        return [RemoteSandbox(self.client, box.info) for box in _wait(self.awaited.fork(count))]

    def status(self) -> dict[str, Any]:
        return _wait(self.awaited.status())

    def logs(self, limit: int = 100) -> list[ExecLog]:
        return _wait(self.awaited.logs(limit))

    def set_network(self, on: bool) -> None:
        _wait(self.awaited.set_network(on))

    def pause(self) -> None:
        """Freeze the sandbox (processes and memory kept) until :meth:`resume`."""
        _wait(self.awaited.pause())

    def resume(self) -> None:
        _wait(self.awaited.resume())

    def stop(self) -> None:
        _wait(self.awaited.stop())

    def delete(self) -> None:
        _wait(self.awaited.delete())


class RemoteSession:
    """:class:`AsyncSession`, waited for: a persistent bash session in a sandbox behind the
    daemon."""

    def __init__(self, sandbox: RemoteSandbox, awaited: AsyncSession) -> None:
        self.sandbox = sandbox
        self.awaited = awaited
        self.id = awaited.id

    @property
    def closed(self) -> bool:
        return self.awaited.closed

    def run(self, command: str, timeout: float | None = 60.0) -> SessionResult:
        return _wait(self.awaited.run(command, timeout))

    def interrupt(self) -> None:
        _wait(self.awaited.interrupt())

    def close(self) -> None:
        _wait(self.awaited.close())

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
