"""The rock daemon's HTTP API, described once and without I/O.

Every endpoint is a :class:`Route` of :class:`Routes` (its method and path, which the
daemon's routes take too) and a :class:`Call` of it (request options with bodies from the
shared :mod:`rock.models`, and how to read the answer), made by :class:`Api`; :func:`raise_for` turns
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
_SLACK = 90.0
"""Seconds a command's HTTP request may outlive the command's own timeout: a daemon ending
what a timed-out command left may take 70 s more (a fork bomb under gVisor: 50 s for the
keeper's freeze and the reaper, ``rock.backends._docker_reap``; 19 s for the last of the
output and the exit status, ``rock.backends.docker_sandbox.ANSWER_AFTER_REAP``), and its
engine answers late when loaded."""

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
class Route:
    """One endpoint: its method and path template. The client's calls (:class:`Api`) and
    the daemon's routes (:mod:`rock.daemon.routes`) both take it from :class:`Routes`."""

    method: str
    path: str

    def at(self, **params: str) -> str:
        """The path with its ``{...}`` parts filled in."""
        return self.path.format(**params)


_SANDBOX = "/v1/sandboxes/{sandbox_id}"
_SESSION = _SANDBOX + "/sessions/{session_id}"


class Routes:
    """Every endpoint of the daemon's own API (the E2B one and the port relay aside)."""

    health = Route("GET", "/health")
    metrics = Route("GET", "/metrics")
    create = Route("POST", "/v1/sandboxes")
    list = Route("GET", "/v1/sandboxes")
    info = Route("GET", _SANDBOX)
    delete = Route("DELETE", _SANDBOX)
    stop = Route("POST", _SANDBOX + "/stop")
    snapshot = Route("POST", _SANDBOX + "/snapshot")
    fork = Route("POST", _SANDBOX + "/fork")
    logs = Route("GET", _SANDBOX + "/logs")
    set_network = Route("POST", _SANDBOX + "/network")
    pause = Route("POST", _SANDBOX + "/pause")
    resume = Route("POST", _SANDBOX + "/resume")
    run = Route("POST", _SANDBOX + "/exec")
    interrupt = Route("POST", _SANDBOX + "/interrupt")
    open_session = Route("POST", _SANDBOX + "/sessions")
    session_run = Route("POST", _SESSION + "/run")
    session_interrupt = Route("POST", _SESSION + "/interrupt")
    session_close = Route("DELETE", _SESSION)
    read_file = Route("GET", _SANDBOX + "/file")
    write_file = Route("PUT", _SANDBOX + "/file")
    get_archive = Route("GET", _SANDBOX + "/archive")
    put_archive = Route("PUT", _SANDBOX + "/archive")
    pools = Route("GET", "/v1/pools")
    pool = Route("GET", "/v1/pools/{name}")
    set_pool = Route("PUT", "/v1/pools/{name}")
    delete_pool = Route("DELETE", "/v1/pools/{name}")
    images = Route("GET", "/v1/images")
    build_image = Route("POST", "/v1/images/build")

    @classmethod
    def every(cls) -> builtins.list[Route]:
        return [value for value in vars(cls).values() if isinstance(value, Route)]


@dataclass(frozen=True)
class Call(Generic[T]):
    """One request to the daemon and how to read its answer."""

    method: str
    path: str
    read: Callable[[httpx.Response], T]
    options: dict[str, Any] = field(default_factory=dict)
    """httpx request options: ``json``, ``content``, ``params``, ``headers``, ``timeout``."""

    @classmethod
    def to(
        cls,
        route: Route,
        read: Callable[[httpx.Response], T],
        options: dict[str, Any] | None = None,
        **params: str,
    ) -> Call[T]:
        """The call of ``route`` (its path filled with ``params``)."""
        return cls(route.method, route.at(**params), read, options or {})


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
        return Call.to(Routes.health, _as(Health))

    @staticmethod
    def metrics() -> Call[str]:
        return Call.to(Routes.metrics, lambda response: response.text)

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
        return Call.to(Routes.create, _as(SandboxInfo), {"json": json_body})

    @staticmethod
    def info(sandbox_id: str) -> Call[SandboxInfo]:
        return Call.to(Routes.info, _as(SandboxInfo), sandbox_id=sandbox_id)

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
        return Call.to(Routes.list, _as_list(SandboxInfo), {"params": params})

    @staticmethod
    def delete(sandbox_id: str) -> Call[SandboxInfo]:
        return Call.to(Routes.delete, _as(SandboxInfo), sandbox_id=sandbox_id)

    @staticmethod
    def logs(sandbox_id: str, limit: int) -> Call[builtins.list[ExecLog]]:
        options = {"params": {"limit": limit}}
        return Call.to(Routes.logs, _as_list(ExecLog), options, sandbox_id=sandbox_id)

    @staticmethod
    def pools() -> Call[builtins.list[PoolInfo]]:
        return Call.to(Routes.pools, _as_list(PoolInfo))

    @staticmethod
    def pool(name: str) -> Call[PoolInfo]:
        return Call.to(Routes.pool, _as(PoolInfo), name=name)

    @staticmethod
    def set_pool(
        name: str, spec: SandboxSpec | None, min_idle: int, max_total: int
    ) -> Call[PoolInfo]:
        settings = PoolSettings(spec=spec or SandboxSpec(), min_idle=min_idle, max_total=max_total)
        body = {"json": settings.model_dump(mode="json")}
        return Call.to(Routes.set_pool, _as(PoolInfo), body, name=name)

    @staticmethod
    def delete_pool(name: str) -> Call[None]:
        return Call.to(Routes.delete_pool, _nothing, name=name)

    @staticmethod
    def images() -> Call[builtins.list[ImageInfo]]:
        return Call.to(Routes.images, _as_list(ImageInfo))

    @staticmethod
    def build_image(context: bytes, dockerfile: str, name: str) -> Call[ImageBuild]:
        options = {
            "params": {"dockerfile": dockerfile, "name": name},
            "content": context,
            "timeout": httpx.Timeout(30.0, read=None),  # a build may take many minutes
        }
        return Call.to(Routes.build_image, _as(ImageBuild), options)

    # a sandbox's verbs
    @staticmethod
    def run(sandbox_id: str, request: ExecRequest) -> Call[ExecResult]:
        options = _json_body(request, request.timeout)
        return Call.to(Routes.run, _as(ExecResult), options, sandbox_id=sandbox_id)

    @staticmethod
    def open_session(sandbox_id: str) -> Call[SessionInfo]:
        return Call.to(Routes.open_session, _as(SessionInfo), sandbox_id=sandbox_id)

    @staticmethod
    def read_file(sandbox_id: str, path: str) -> Call[bytes]:
        options = {"params": {"path": path}}
        return Call.to(Routes.read_file, _content, options, sandbox_id=sandbox_id)

    @staticmethod
    def write_file(sandbox_id: str, path: str, data: bytes, mode: int) -> Call[None]:
        options = {"params": {"path": path, "mode": mode}, "content": data}
        return Call.to(Routes.write_file, _nothing, options, sandbox_id=sandbox_id)

    @staticmethod
    def put_archive(sandbox_id: str, directory: str, data: bytes) -> Call[None]:
        options = {"params": {"path": directory}, "content": data}
        return Call.to(Routes.put_archive, _nothing, options, sandbox_id=sandbox_id)

    @staticmethod
    def get_archive(sandbox_id: str, path: str) -> Call[bytes]:
        options = {"params": {"path": path}}
        return Call.to(Routes.get_archive, _content, options, sandbox_id=sandbox_id)

    @staticmethod
    def snapshot(sandbox_id: str, tag: str) -> Call[str]:
        body = {"json": SnapshotRequest(tag=tag).model_dump()}
        read = _as(SnapshotInfo)
        return Call.to(
            Routes.snapshot, lambda response: read(response).image, body, sandbox_id=sandbox_id
        )

    @staticmethod
    def set_network(sandbox_id: str, on: bool) -> Call[None]:
        body = {"json": NetworkRequest(on=on).model_dump()}
        return Call.to(Routes.set_network, _nothing, body, sandbox_id=sandbox_id)

    @staticmethod
    def fork(sandbox_id: str, count: int = 1) -> Call[builtins.list[SandboxInfo]]:
        body = {"json": ForkRequest(count=count).model_dump()}
        return Call.to(Routes.fork, _as_list(SandboxInfo), body, sandbox_id=sandbox_id)

    @staticmethod
    def pause(sandbox_id: str) -> Call[SandboxInfo]:
        return Call.to(Routes.pause, _as(SandboxInfo), sandbox_id=sandbox_id)

    @staticmethod
    def resume(sandbox_id: str) -> Call[SandboxInfo]:
        return Call.to(Routes.resume, _as(SandboxInfo), sandbox_id=sandbox_id)

    @staticmethod
    def stop(sandbox_id: str) -> Call[SandboxInfo]:
        return Call.to(Routes.stop, _as(SandboxInfo), sandbox_id=sandbox_id)

    @staticmethod
    def session_run(
        sandbox_id: str, session_id: str, command: str, timeout: float | None
    ) -> Call[SessionResult]:
        body = SessionRunRequest(command=command, timeout=timeout)
        return Call.to(
            Routes.session_run, _as(SessionResult), _json_body(body, timeout),
            sandbox_id=sandbox_id, session_id=session_id,
        )  # fmt: skip

    @staticmethod
    def interrupt(sandbox_id: str, tag: str | None = None) -> Call[Interrupted]:
        body = {"json": InterruptRequest(tag=tag).model_dump()}
        return Call.to(Routes.interrupt, _as(Interrupted), body, sandbox_id=sandbox_id)

    @staticmethod
    def session_interrupt(sandbox_id: str, session_id: str) -> Call[None]:
        return Call.to(
            Routes.session_interrupt, _nothing, sandbox_id=sandbox_id, session_id=session_id
        )

    @staticmethod
    def session_close(sandbox_id: str, session_id: str) -> Call[None]:
        return Call.to(Routes.session_close, _nothing, sandbox_id=sandbox_id, session_id=session_id)


__all__ = ["DEFAULT_URL", "Api", "Call", "Route", "Routes", "raise_for"]
