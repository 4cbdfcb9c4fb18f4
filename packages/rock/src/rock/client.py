"""Clients of the rock daemon: `Client` (sync) and `AsyncClient` (asyncio), both on httpx.

The sandboxes they hand out have the same verbs as in-process ones (`Sandbox`):
exec, sessions, files and trees, snapshot, stop, delete; use them as context managers
to delete on exit. Connection failures are retried (the request never reached the
daemon); nothing else is. A daemon that went away under a request raises `DaemonLost`
(the request may or may not have been carried out), and a sandbox remembers it in
``daemon_lost``. Errors from the daemon arrive as the exception class the daemon raised
(`SandboxNotFound`, `PathEscape`, `PoolExhausted`, ...) with its message.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import time
from pathlib import Path
from types import TracebackType
from typing import Any, Self, TypeVar

import httpx
from pydantic import BaseModel, TypeAdapter

from rock.backends._shell import SessionError
from rock.backends.base import (
    PathEscape,
    PoolNotFound,
    Sandbox,
    SandboxConflict,
    SandboxError,
    SandboxNotFound,
    pack_upload,
    unpack_download,
)
from rock.errors import (
    DaemonError,
    DaemonLost,
    DaemonUnreachable,
    EngineUnavailable,
    InvalidRequest,
    PoolExhausted,
    RockError,
    ShuttingDown,
    Unauthorized,
)
from rock.models import (
    DEFAULT_MAX_OUTPUT,
    ExecLog,
    ExecRequest,
    ExecResult,
    Health,
    ImageInfo,
    PoolInfo,
    PoolSettings,
    SandboxInfo,
    SandboxSpec,
    SessionInfo,
    SessionResult,
    SessionRunRequest,
    SnapshotInfo,
    SnapshotRequest,
)
from rock.store import IllegalTransition, default_home

M = TypeVar("M", bound=BaseModel)
T = TypeVar("T")

DEFAULT_URL = "http://127.0.0.1:7480"
_SLACK = 30.0
"""Seconds a command's HTTP request may outlive the command's own timeout."""

_KINDS: dict[str, type[Exception]] = {
    "SandboxNotFound": SandboxNotFound,
    "UnknownSandbox": SandboxNotFound,
    "PoolNotFound": PoolNotFound,
    "PathEscape": PathEscape,
    "SandboxError": SandboxError,
    "SandboxConflict": SandboxConflict,
    "IllegalTransition": IllegalTransition,
    "SessionError": SessionError,
    "InvalidRequest": InvalidRequest,
    "Unauthorized": Unauthorized,
    "PoolExhausted": PoolExhausted,
    "ShuttingDown": ShuttingDown,
    "EngineUnavailable": EngineUnavailable,
}


def _raise_for(response: httpx.Response) -> None:
    if response.status_code < 400:
        return
    try:
        detail = response.json()["error"]
        kind, message = str(detail["type"]), str(detail["message"])
        fields = list(detail.get("fields") or [])
    except (ValueError, KeyError, TypeError):
        kind, message, fields = "DaemonError", response.text[:500] or response.reason_phrase, []
    cls = _KINDS.get(kind)
    exc: Exception
    if cls is None:
        exc = DaemonError(f"{message} ({kind})", status=response.status_code)
    elif cls is InvalidRequest:
        exc = InvalidRequest(message, fields=fields)
    else:
        exc = cls(message)
    exc.status = response.status_code  # type: ignore[attr-defined]
    exc.kind = kind  # type: ignore[attr-defined]
    raise exc


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


def _command_timeout(timeout: float | None) -> httpx.Timeout:
    read = None if timeout is None else timeout + _SLACK
    return httpx.Timeout(30.0, read=read)


def _spec_body(spec: SandboxSpec | None, fields: dict[str, Any]) -> dict[str, Any]:
    if spec is not None and fields:
        spec = spec.model_copy(update=fields)
    elif spec is None:
        spec = SandboxSpec(**fields)
    return spec.model_dump(mode="json", exclude_unset=True)


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


# --- sync ---------------------------------------------------------------------------------


class Client:
    """A connection to a rock daemon. ``Client()`` finds it through ``$ROCK_URL`` or
    ``<rock home>/daemon.json`` and reads the token from ``$ROCK_TOKEN`` or ``<rock home>/token``."""

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
    ) -> None:
        self.url, self.token = _settings(url, token, home)
        self.retries = retries
        self.backoff = backoff
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        self._http = httpx.Client(
            base_url=self.url,
            headers=headers,
            timeout=timeout,
            limits=httpx.Limits(
                max_connections=max_connections, max_keepalive_connections=max_connections
            ),
        )

    def request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        """Send one request; retry only when the connection could not be made."""
        attempt = 0
        while True:
            try:
                response = self._http.request(method, path, **kwargs)
                break
            except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
                if attempt >= self.retries:
                    raise _unreachable(self.url, exc) from None
                time.sleep(self.backoff * 2**attempt)
                attempt += 1
            except httpx.TransportError as exc:  # sent, and the connection broke
                raise _lost(self.url, exc) from None
        _raise_for(response)
        return response

    def _model(self, model: type[M], method: str, path: str, **kwargs: Any) -> M:
        return model.model_validate_json(self.request(method, path, **kwargs).content)

    def _models(self, model: type[M], method: str, path: str, **kwargs: Any) -> list[M]:
        return TypeAdapter(list[model]).validate_json(self.request(method, path, **kwargs).content)  # type: ignore[valid-type]

    # daemon
    def health(self) -> Health:
        return self._model(Health, "GET", "/health")

    def metrics(self) -> str:
        return self.request("GET", "/metrics").text

    # sandboxes
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
        body = {"spec": _spec_body(spec, fields), "pool": pool, "use_pools": use_pools}
        info = self._model(SandboxInfo, "POST", "/v1/sandboxes", json=body)
        return RemoteSandbox(self, info)

    def acquire(self, pool: str, **fields: Any) -> RemoteSandbox:
        """Take a started sandbox from ``pool``."""
        return self.create(pool=pool, **fields)

    def sandbox(self, sandbox_id: str) -> RemoteSandbox:
        return RemoteSandbox(self, self.info(sandbox_id))

    def info(self, sandbox_id: str) -> SandboxInfo:
        return self._model(SandboxInfo, "GET", f"/v1/sandboxes/{sandbox_id}")

    def list(
        self,
        *,
        state: list[str] | None = None,
        labels: dict[str, str] | None = None,
        pool: str | None = None,
        include_deleted: bool = False,
    ) -> list[SandboxInfo]:
        params: list[tuple[str, str]] = [("state", s) for s in state or []]
        params += [("label", f"{k}={v}") for k, v in (labels or {}).items()]
        if pool is not None:
            params.append(("pool", pool))
        if include_deleted:
            params.append(("all", "true"))
        return self._models(SandboxInfo, "GET", "/v1/sandboxes", params=params)

    def delete(self, sandbox_id: str) -> SandboxInfo:
        return self._model(SandboxInfo, "DELETE", f"/v1/sandboxes/{sandbox_id}")

    def logs(self, sandbox_id: str, limit: int = 100) -> list[ExecLog]:
        return self._models(
            ExecLog, "GET", f"/v1/sandboxes/{sandbox_id}/logs", params={"limit": limit}
        )

    # pools
    def pools(self) -> list[PoolInfo]:
        return self._models(PoolInfo, "GET", "/v1/pools")

    def pool(self, name: str) -> PoolInfo:
        return self._model(PoolInfo, "GET", f"/v1/pools/{name}")

    def set_pool(
        self,
        name: str,
        spec: SandboxSpec | None = None,
        *,
        min_idle: int = 1,
        max_total: int = 8,
    ) -> PoolInfo:
        settings = PoolSettings(spec=spec or SandboxSpec(), min_idle=min_idle, max_total=max_total)
        return self._model(
            PoolInfo, "PUT", f"/v1/pools/{name}", json=settings.model_dump(mode="json")
        )

    def delete_pool(self, name: str) -> None:
        self.request("DELETE", f"/v1/pools/{name}")

    def wait_pool(self, name: str, idle: int | None = None, timeout: float = 120.0) -> PoolInfo:
        """Wait until ``name`` has ``idle`` (default: its min_idle) sandboxes waiting."""
        deadline = time.monotonic() + timeout
        while True:
            info = self.pool(name)
            if info.idle >= (info.min_idle if idle is None else idle):
                return info
            if time.monotonic() > deadline:
                raise RockError(
                    f"pool {name} has {info.idle} idle sandboxes after {timeout:g}s "
                    f"(wanted {idle if idle is not None else info.min_idle}); check 'rock pool ls' "
                    "and the daemon's log."
                )
            time.sleep(0.1)

    def images(self) -> list[ImageInfo]:
        return self._models(ImageInfo, "GET", "/v1/images")

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class RemoteSandbox(Sandbox):
    """A sandbox behind the daemon, with the verbs of an in-process one."""

    def __init__(self, client: Client, info: SandboxInfo) -> None:
        self.client = client
        self.id = info.id
        self.spec = info.spec
        self.info = info
        self._path = f"/v1/sandboxes/{info.id}"
        self.daemon_lost: str | None = None
        """Why the daemon could not be reached, or was shutting down, under a request of
        this sandbox (the first time), or None: since then a command may have been lost and
        sessions closed."""

    def _request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        try:
            return self.client.request(method, path, **kwargs)
        except (DaemonUnreachable, ShuttingDown) as exc:
            self.daemon_lost = self.daemon_lost or str(exc)
            raise

    def _model(self, model: type[M], method: str, path: str, **kwargs: Any) -> M:
        return model.model_validate_json(self._request(method, path, **kwargs).content)

    def run(self, request: ExecRequest) -> ExecResult:
        response = self._request(
            "POST",
            f"{self._path}/exec",
            content=request.model_dump_json(),
            headers={"Content-Type": "application/json"},
            timeout=_command_timeout(request.timeout),
        )
        return ExecResult.model_validate_json(response.content)

    def session(self, *, max_output_bytes: int = DEFAULT_MAX_OUTPUT) -> RemoteSession:
        info = self._model(SessionInfo, "POST", f"{self._path}/sessions")
        return RemoteSession(self, info.id)

    def read_file(self, path: str) -> bytes:
        return self._request("GET", f"{self._path}/file", params={"path": path}).content

    def write_file(self, path: str, data: bytes, mode: int = 0o644) -> None:
        self._request(
            "PUT", f"{self._path}/file", params={"path": path, "mode": mode}, content=data
        )

    def put_archive(self, directory: str, data: bytes) -> None:
        self._request("PUT", f"{self._path}/archive", params={"path": directory}, content=data)

    def get_archive(self, path: str) -> bytes:
        return self._request("GET", f"{self._path}/archive", params={"path": path}).content

    def snapshot(self, tag: str) -> str:
        body = SnapshotRequest(tag=tag).model_dump()
        return self._model(SnapshotInfo, "POST", f"{self._path}/snapshot", json=body).image

    def status(self) -> dict[str, Any]:
        self.info = self._model(SandboxInfo, "GET", self._path)
        return {"state": self.info.state, "reason": self.info.state_reason}

    def logs(self, limit: int = 100) -> list[ExecLog]:
        return self.client.logs(self.id, limit)

    def stop(self) -> None:
        self.info = self._model(SandboxInfo, "POST", f"{self._path}/stop")

    def delete(self) -> None:
        with contextlib.suppress(SandboxNotFound):
            self.info = self._model(SandboxInfo, "DELETE", self._path)


class RemoteSession:
    """A persistent bash session in a sandbox behind the daemon."""

    def __init__(self, sandbox: RemoteSandbox, session_id: str) -> None:
        self.sandbox = sandbox
        self.id = session_id
        self._path = f"{sandbox._path}/sessions/{session_id}"
        self.closed = False

    def run(self, command: str, timeout: float | None = 60.0) -> SessionResult:
        body = SessionRunRequest(command=command, timeout=timeout).model_dump_json()
        response = self.sandbox._request(
            "POST",
            f"{self._path}/run",
            content=body,
            headers={"Content-Type": "application/json"},
            timeout=_command_timeout(timeout),
        )
        return SessionResult.model_validate_json(response.content)

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            with contextlib.suppress(SandboxNotFound, SandboxError):
                self.sandbox._request("DELETE", self._path)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# --- async ----------------------------------------------------------------------------


class AsyncClient:
    """`Client` for asyncio: the same methods, awaited."""

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
    ) -> None:
        self.url, self.token = _settings(url, token, home)
        self.retries = retries
        self.backoff = backoff
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        self._http = httpx.AsyncClient(
            base_url=self.url,
            headers=headers,
            timeout=timeout,
            limits=httpx.Limits(
                max_connections=max_connections, max_keepalive_connections=max_connections
            ),
        )

    async def request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        attempt = 0
        while True:
            try:
                response = await self._http.request(method, path, **kwargs)
                break
            except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
                if attempt >= self.retries:
                    raise _unreachable(self.url, exc) from None
                await asyncio.sleep(self.backoff * 2**attempt)
                attempt += 1
            except httpx.TransportError as exc:  # sent, and the connection broke
                raise _lost(self.url, exc) from None
        _raise_for(response)
        return response

    async def _model(self, model: type[M], method: str, path: str, **kwargs: Any) -> M:
        return model.model_validate_json((await self.request(method, path, **kwargs)).content)

    async def _models(self, model: type[M], method: str, path: str, **kwargs: Any) -> list[M]:
        response = await self.request(method, path, **kwargs)
        return TypeAdapter(list[model]).validate_json(response.content)  # type: ignore[valid-type]

    async def health(self) -> Health:
        return await self._model(Health, "GET", "/health")

    async def metrics(self) -> str:
        return (await self.request("GET", "/metrics")).text

    async def create(
        self,
        spec: SandboxSpec | None = None,
        *,
        pool: str | None = None,
        use_pools: bool = True,
        **fields: Any,
    ) -> AsyncSandbox:
        body = {"spec": _spec_body(spec, fields), "pool": pool, "use_pools": use_pools}
        info = await self._model(SandboxInfo, "POST", "/v1/sandboxes", json=body)
        return AsyncSandbox(self, info)

    async def acquire(self, pool: str, **fields: Any) -> AsyncSandbox:
        return await self.create(pool=pool, **fields)

    async def sandbox(self, sandbox_id: str) -> AsyncSandbox:
        return AsyncSandbox(self, await self.info(sandbox_id))

    async def info(self, sandbox_id: str) -> SandboxInfo:
        return await self._model(SandboxInfo, "GET", f"/v1/sandboxes/{sandbox_id}")

    async def list(
        self,
        *,
        state: list[str] | None = None,
        labels: dict[str, str] | None = None,
        pool: str | None = None,
        include_deleted: bool = False,
    ) -> list[SandboxInfo]:
        params: list[tuple[str, str]] = [("state", s) for s in state or []]
        params += [("label", f"{k}={v}") for k, v in (labels or {}).items()]
        if pool is not None:
            params.append(("pool", pool))
        if include_deleted:
            params.append(("all", "true"))
        return await self._models(SandboxInfo, "GET", "/v1/sandboxes", params=params)

    async def delete(self, sandbox_id: str) -> SandboxInfo:
        return await self._model(SandboxInfo, "DELETE", f"/v1/sandboxes/{sandbox_id}")

    async def pools(self) -> list[PoolInfo]:
        return await self._models(PoolInfo, "GET", "/v1/pools")

    async def pool(self, name: str) -> PoolInfo:
        return await self._model(PoolInfo, "GET", f"/v1/pools/{name}")

    async def set_pool(
        self,
        name: str,
        spec: SandboxSpec | None = None,
        *,
        min_idle: int = 1,
        max_total: int = 8,
    ) -> PoolInfo:
        settings = PoolSettings(spec=spec or SandboxSpec(), min_idle=min_idle, max_total=max_total)
        return await self._model(
            PoolInfo, "PUT", f"/v1/pools/{name}", json=settings.model_dump(mode="json")
        )

    async def delete_pool(self, name: str) -> None:
        await self.request("DELETE", f"/v1/pools/{name}")

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


class AsyncSandbox:
    """`RemoteSandbox` for asyncio; ``async with`` deletes it on exit."""

    def __init__(self, client: AsyncClient, info: SandboxInfo) -> None:
        self.client = client
        self.id = info.id
        self.spec = info.spec
        self.info = info
        self._path = f"/v1/sandboxes/{info.id}"

    async def run(self, request: ExecRequest) -> ExecResult:
        response = await self.client.request(
            "POST",
            f"{self._path}/exec",
            content=request.model_dump_json(),
            headers={"Content-Type": "application/json"},
            timeout=_command_timeout(request.timeout),
        )
        return ExecResult.model_validate_json(response.content)

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
        info = await self.client._model(SessionInfo, "POST", f"{self._path}/sessions")
        return AsyncSession(self, info.id)

    async def read_file(self, path: str) -> bytes:
        response = await self.client.request("GET", f"{self._path}/file", params={"path": path})
        return response.content

    async def write_file(self, path: str, data: bytes, mode: int = 0o644) -> None:
        await self.client.request(
            "PUT", f"{self._path}/file", params={"path": path, "mode": mode}, content=data
        )

    async def put_archive(self, directory: str, data: bytes) -> None:
        await self.client.request(
            "PUT", f"{self._path}/archive", params={"path": directory}, content=data
        )

    async def get_archive(self, path: str) -> bytes:
        response = await self.client.request("GET", f"{self._path}/archive", params={"path": path})
        return response.content

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
        body = SnapshotRequest(tag=tag).model_dump()
        info = await self.client._model(SnapshotInfo, "POST", f"{self._path}/snapshot", json=body)
        return info.image

    async def stop(self) -> None:
        self.info = await self.client._model(SandboxInfo, "POST", f"{self._path}/stop")

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
    def __init__(self, sandbox: AsyncSandbox, session_id: str) -> None:
        self.sandbox = sandbox
        self.id = session_id
        self._path = f"{sandbox._path}/sessions/{session_id}"
        self.closed = False

    async def run(self, command: str, timeout: float | None = 60.0) -> SessionResult:
        body = SessionRunRequest(command=command, timeout=timeout).model_dump_json()
        response = await self.sandbox.client.request(
            "POST",
            f"{self._path}/run",
            content=body,
            headers={"Content-Type": "application/json"},
            timeout=_command_timeout(timeout),
        )
        return SessionResult.model_validate_json(response.content)

    async def close(self) -> None:
        if not self.closed:
            self.closed = True
            with contextlib.suppress(SandboxNotFound, SandboxError):
                await self.sandbox.client.request("DELETE", self._path)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


__all__ = [
    "AsyncClient",
    "AsyncSandbox",
    "AsyncSession",
    "Client",
    "RemoteSandbox",
    "RemoteSession",
]
