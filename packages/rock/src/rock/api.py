"""The rock daemon's HTTP API, described once and without I/O.

Every endpoint is a :class:`Call` (method, path, request options with bodies from the shared
:mod:`rock.models`, and how to read the answer), made by :class:`Api`; :func:`raise_for` turns
an error answer into the exception class the daemon raised. :mod:`rock.client` sends these
calls, sync or async; anything else that speaks to the daemon (a test, another transport) can
send them too.
"""

from __future__ import annotations

import builtins
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import httpx
from pydantic import BaseModel, TypeAdapter

from rock.backends._shell import SessionError
from rock.backends.base import (
    ImageMissing,
    NodeLost,
    PathEscape,
    PathMissing,
    PoolNotFound,
    SandboxConflict,
    SandboxError,
    SandboxNotFound,
)
from rock.errors import (
    DaemonError,
    EngineUnavailable,
    ImageBuildError,
    InvalidRequest,
    PoolExhausted,
    ShuttingDown,
    Unauthorized,
)
from rock.models import (
    CreateSandboxRequest,
    ExecLog,
    ExecRequest,
    ExecResult,
    ForkRequest,
    Health,
    ImageBuild,
    ImageInfo,
    Interrupted,
    InterruptRequest,
    NetworkRequest,
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
from rock.store import IllegalTransition

M = TypeVar("M", bound=BaseModel)
T = TypeVar("T")

DEFAULT_URL = "http://127.0.0.1:7480"
_SLACK = 60.0
"""Seconds a command's HTTP request may outlive the command's own timeout: a daemon
reaping what a timed-out command left may take 30 s more (a fork bomb under gVisor), and
its engine answers late when loaded."""

_KINDS: dict[str, type[Exception]] = {
    "SandboxNotFound": SandboxNotFound,
    "UnknownSandbox": SandboxNotFound,
    "PoolNotFound": PoolNotFound,
    "PathEscape": PathEscape,
    "PathMissing": PathMissing,
    "SandboxError": SandboxError,
    "SandboxConflict": SandboxConflict,
    "NodeLost": NodeLost,
    "ImageMissing": ImageMissing,
    "IllegalTransition": IllegalTransition,
    "SessionError": SessionError,
    "InvalidRequest": InvalidRequest,
    "Unauthorized": Unauthorized,
    "PoolExhausted": PoolExhausted,
    "ShuttingDown": ShuttingDown,
    "EngineUnavailable": EngineUnavailable,
    "ImageBuildError": ImageBuildError,
}


def raise_for(response: httpx.Response) -> None:
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


def _command_timeout(timeout: float | None) -> httpx.Timeout:
    read = None if timeout is None else timeout + _SLACK
    return httpx.Timeout(30.0, read=read)


# --- the API, without I/O ----------------------------------------------------------------


@dataclass(frozen=True)
class Call(Generic[T]):
    """One request to the daemon and how to read its answer."""

    method: str
    path: str
    read: Callable[[httpx.Response], T]
    options: dict[str, Any] = field(default_factory=dict)
    """httpx request options: ``json``, ``content``, ``params``, ``headers``, ``timeout``."""


def _as(model: type[M]) -> Callable[[httpx.Response], M]:
    return lambda response: model.model_validate_json(response.content)


def _as_list(model: type[M]) -> Callable[[httpx.Response], list[M]]:
    adapter = TypeAdapter(list[model])  # type: ignore[valid-type]
    return lambda response: adapter.validate_json(response.content)


def _content(response: httpx.Response) -> bytes:
    return response.content


def _nothing(response: httpx.Response) -> None:
    return None


def _json_body(model: BaseModel, timeout: float | None) -> dict[str, Any]:
    return {
        "content": model.model_dump_json(),
        "headers": {"Content-Type": "application/json"},
        "timeout": _command_timeout(timeout),
    }


class Api:
    """Every endpoint of the daemon as a :class:`Call` (no I/O here)."""

    @staticmethod
    def health() -> Call[Health]:
        return Call("GET", "/health", _as(Health))

    @staticmethod
    def metrics() -> Call[str]:
        return Call("GET", "/metrics", lambda response: response.text)

    @staticmethod
    def create(
        spec: SandboxSpec | None, pool: str | None, use_pools: bool, fields: dict[str, Any]
    ) -> Call[SandboxInfo]:
        if spec is None:
            spec = SandboxSpec(**fields)
        elif fields:
            spec = spec.model_copy(update=fields)
        # built, not validated: the daemon validates requests (one place, one sentence)
        body = CreateSandboxRequest.model_construct(spec=spec, pool=pool, use_pools=use_pools)
        json_body = body.model_dump(mode="json", exclude_unset=True)
        return Call("POST", "/v1/sandboxes", _as(SandboxInfo), {"json": json_body})

    @staticmethod
    def info(sandbox_id: str) -> Call[SandboxInfo]:
        return Call("GET", f"/v1/sandboxes/{sandbox_id}", _as(SandboxInfo))

    @staticmethod
    def list(
        state: list[str] | None, labels: dict[str, str] | None, pool: str | None, deleted: bool
    ) -> Call[list[SandboxInfo]]:
        params: list[tuple[str, str]] = [("state", s) for s in state or []]
        params += [("label", f"{k}={v}") for k, v in (labels or {}).items()]
        if pool is not None:
            params.append(("pool", pool))
        if deleted:
            params.append(("all", "true"))
        return Call("GET", "/v1/sandboxes", _as_list(SandboxInfo), {"params": params})

    @staticmethod
    def delete(sandbox_id: str) -> Call[SandboxInfo]:
        return Call("DELETE", f"/v1/sandboxes/{sandbox_id}", _as(SandboxInfo))

    @staticmethod
    def logs(sandbox_id: str, limit: int) -> Call[builtins.list[ExecLog]]:
        path = f"/v1/sandboxes/{sandbox_id}/logs"
        return Call("GET", path, _as_list(ExecLog), {"params": {"limit": limit}})

    @staticmethod
    def pools() -> Call[builtins.list[PoolInfo]]:
        return Call("GET", "/v1/pools", _as_list(PoolInfo))

    @staticmethod
    def pool(name: str) -> Call[PoolInfo]:
        return Call("GET", f"/v1/pools/{name}", _as(PoolInfo))

    @staticmethod
    def set_pool(
        name: str, spec: SandboxSpec | None, min_idle: int, max_total: int
    ) -> Call[PoolInfo]:
        settings = PoolSettings(spec=spec or SandboxSpec(), min_idle=min_idle, max_total=max_total)
        body = {"json": settings.model_dump(mode="json")}
        return Call("PUT", f"/v1/pools/{name}", _as(PoolInfo), body)

    @staticmethod
    def delete_pool(name: str) -> Call[None]:
        return Call("DELETE", f"/v1/pools/{name}", _nothing)

    @staticmethod
    def images() -> Call[builtins.list[ImageInfo]]:
        return Call("GET", "/v1/images", _as_list(ImageInfo))

    @staticmethod
    def build_image(context: bytes, dockerfile: str, name: str) -> Call[ImageBuild]:
        options = {
            "params": {"dockerfile": dockerfile, "name": name},
            "content": context,
            "timeout": httpx.Timeout(30.0, read=None),  # a build may take many minutes
        }
        return Call("POST", "/v1/images/build", _as(ImageBuild), options)

    # a sandbox's verbs
    @staticmethod
    def run(sandbox_id: str, request: ExecRequest) -> Call[ExecResult]:
        path = f"/v1/sandboxes/{sandbox_id}/exec"
        return Call("POST", path, _as(ExecResult), _json_body(request, request.timeout))

    @staticmethod
    def open_session(sandbox_id: str) -> Call[SessionInfo]:
        return Call("POST", f"/v1/sandboxes/{sandbox_id}/sessions", _as(SessionInfo))

    @staticmethod
    def read_file(sandbox_id: str, path: str) -> Call[bytes]:
        options = {"params": {"path": path}}
        return Call("GET", f"/v1/sandboxes/{sandbox_id}/file", _content, options)

    @staticmethod
    def write_file(sandbox_id: str, path: str, data: bytes, mode: int) -> Call[None]:
        options = {"params": {"path": path, "mode": mode}, "content": data}
        return Call("PUT", f"/v1/sandboxes/{sandbox_id}/file", _nothing, options)

    @staticmethod
    def put_archive(sandbox_id: str, directory: str, data: bytes) -> Call[None]:
        options = {"params": {"path": directory}, "content": data}
        return Call("PUT", f"/v1/sandboxes/{sandbox_id}/archive", _nothing, options)

    @staticmethod
    def get_archive(sandbox_id: str, path: str) -> Call[bytes]:
        options = {"params": {"path": path}}
        return Call("GET", f"/v1/sandboxes/{sandbox_id}/archive", _content, options)

    @staticmethod
    def snapshot(sandbox_id: str, tag: str) -> Call[str]:
        body = {"json": SnapshotRequest(tag=tag).model_dump()}
        read = _as(SnapshotInfo)
        path = f"/v1/sandboxes/{sandbox_id}/snapshot"
        return Call("POST", path, lambda response: read(response).image, body)

    @staticmethod
    def set_network(sandbox_id: str, on: bool) -> Call[None]:
        body = {"json": NetworkRequest(on=on).model_dump()}
        return Call("POST", f"/v1/sandboxes/{sandbox_id}/network", _nothing, body)

    @staticmethod
    def fork(sandbox_id: str, count: int = 1) -> Call[builtins.list[SandboxInfo]]:
        body = {"json": ForkRequest(count=count).model_dump()}
        return Call("POST", f"/v1/sandboxes/{sandbox_id}/fork", _as_list(SandboxInfo), body)

    @staticmethod
    def pause(sandbox_id: str) -> Call[SandboxInfo]:
        return Call("POST", f"/v1/sandboxes/{sandbox_id}/pause", _as(SandboxInfo))

    @staticmethod
    def resume(sandbox_id: str) -> Call[SandboxInfo]:
        return Call("POST", f"/v1/sandboxes/{sandbox_id}/resume", _as(SandboxInfo))

    @staticmethod
    def stop(sandbox_id: str) -> Call[SandboxInfo]:
        return Call("POST", f"/v1/sandboxes/{sandbox_id}/stop", _as(SandboxInfo))

    @staticmethod
    def session_run(
        sandbox_id: str, session_id: str, command: str, timeout: float | None
    ) -> Call[SessionResult]:
        body = SessionRunRequest(command=command, timeout=timeout)
        path = f"/v1/sandboxes/{sandbox_id}/sessions/{session_id}/run"
        return Call("POST", path, _as(SessionResult), _json_body(body, timeout))

    @staticmethod
    def interrupt(sandbox_id: str, tag: str | None = None) -> Call[Interrupted]:
        body = {"json": InterruptRequest(tag=tag).model_dump()}
        return Call("POST", f"/v1/sandboxes/{sandbox_id}/interrupt", _as(Interrupted), body)

    @staticmethod
    def session_interrupt(sandbox_id: str, session_id: str) -> Call[None]:
        path = f"/v1/sandboxes/{sandbox_id}/sessions/{session_id}/interrupt"
        return Call("POST", path, _nothing)

    @staticmethod
    def session_close(sandbox_id: str, session_id: str) -> Call[None]:
        return Call("DELETE", f"/v1/sandboxes/{sandbox_id}/sessions/{session_id}", _nothing)


__all__ = ["DEFAULT_URL", "Api", "Call", "raise_for"]
