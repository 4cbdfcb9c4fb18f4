"""The daemon's HTTP API: FastAPI over a `SandboxManager`, bearer token on every route but /health.

Route functions are plain ``def``: FastAPI runs them in worker threads, where the
manager's blocking calls (docker, the database) belong. Errors leave as
``{"error": {"type", "message", "fields"}}`` with a status chosen by their type, so
`rock.Client` can raise the same exception class the manager raised.
"""

from __future__ import annotations

import hmac
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Annotated, Any, get_args

import anyio.to_thread
from fastapi import APIRouter, Depends, FastAPI, Path, Query, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import ValidationError
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException

from rock import __version__
from rock.api import Route, Routes
from rock.backends._shell import SessionError
from rock.backends.base import (
    PathEscape,
    PoolNotFound,
    SandboxConflict,
    SandboxError,
    SandboxNotFound,
)
from rock.daemon.e2b import e2b_routes, from_e2b, unserved
from rock.daemon.e2b_envd import envd_routes
from rock.daemon.e2b_templates import template_routes
from rock.daemon.manager import SandboxManager
from rock.daemon.metrics import Metrics
from rock.daemon.ports import NothingListens, forward
from rock.errors import (
    DaemonError,
    EngineUnavailable,
    ImageBuildError,
    InvalidRequest,
    PoolExhausted,
    RockError,
    ShuttingDown,
    Unauthorized,
)
from rock.models import (
    POOL_NAME,
    CreateSandboxRequest,
    ErrorDetail,
    ErrorResponse,
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
    SandboxStateName,
    SessionInfo,
    SessionResult,
    SessionRunRequest,
    SnapshotInfo,
    SnapshotRequest,
)
from rock.store import IllegalTransition, StoreError, StoreUnavailable, UnknownSandbox

log = logging.getLogger("rock.daemon")

THREADS = 256
"""Worker threads for blocking route functions (each running command holds one)."""

# Most specific first: the first matching class decides the status.
STATUS: list[tuple[type[BaseException], int]] = [
    (Unauthorized, 401),
    (PathEscape, 403),
    (SandboxNotFound, 404),
    (UnknownSandbox, 404),
    (PoolNotFound, 404),
    (SandboxConflict, 409),
    (IllegalTransition, 409),
    (SessionError, 409),
    (NothingListens, 502),
    (InvalidRequest, 422),
    (ImageBuildError, 422),
    (PoolExhausted, 429),
    (ShuttingDown, 503),
    (StoreUnavailable, 503),
    (EngineUnavailable, 503),
    (DaemonError, 500),
    (SandboxError, 400),
    (StoreError, 503),
]

_ERRORS: dict[int | str, dict[str, Any]] = {
    status: {"model": ErrorResponse, "description": description}
    for status, description in [
        (401, "Missing or wrong bearer token"),
        (404, "No such sandbox, session or pool"),
        (409, "The sandbox cannot do this in its state"),
        (422, "Invalid request"),
        (503, "The daemon is shutting down"),
    ]
}

_OCTETS = {
    "content": {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}}
}
_TAR = {"content": {"application/x-tar": {"schema": {"type": "string", "format": "binary"}}}}


# Module level: with postponed annotations FastAPI resolves them from the module.
_bearer = HTTPBearer(auto_error=False, description="The token in <rock home>/token.")
Bearer = Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]
SandboxId = Annotated[str, Path(min_length=1, max_length=64)]
SessionId = Annotated[str, Path(min_length=1, max_length=64)]
PoolName = Annotated[str, Path(pattern=POOL_NAME)]
FilePath = Annotated[str, Query(min_length=1, max_length=4096, description="Path in the sandbox")]


def _error(status: int, kind: str, message: str, fields: list[str] | None = None) -> JSONResponse:
    body = ErrorResponse(error=ErrorDetail(type=kind, message=message, fields=fields or []))
    return JSONResponse(body.model_dump(), status_code=status)


def _validation_message(errors: list[Any]) -> tuple[str, list[str]]:
    fields, parts = [], []
    for err in errors[:5]:
        where = ".".join(str(p) for p in err.get("loc", ())) or "request"
        fields.append(where)
        parts.append(f"{where}: {err.get('msg', 'invalid')}")
    more = f" (and {len(errors) - 5} more)" if len(errors) > 5 else ""
    return "invalid request: " + "; ".join(parts) + more + "; fix it and send it again.", fields


def create_app(
    manager: SandboxManager,
    token: str,
    *,
    metrics: Metrics | None = None,
    start: Callable[[], None] | None = None,
    stop: Callable[[], None] | None = None,
    e2b_stand_ins: bool = False,
    e2b_domain: str | None = None,
) -> FastAPI:
    """The API for ``manager``. ``start``/``stop`` run at the server's start and end."""
    metrics = metrics or manager.metrics or Metrics()
    expected = token.encode()

    def require_token(
        credentials: Bearer,
    ) -> None:
        if credentials is None:
            raise Unauthorized(
                "this route needs a bearer token; send 'Authorization: Bearer <token>' "
                "with the token from <rock home>/token."
            )
        if not hmac.compare_digest(credentials.credentials.encode(), expected):
            raise Unauthorized(
                "the bearer token is wrong; use the one in the daemon's <rock home>/token."
            )

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        anyio.to_thread.current_default_thread_limiter().total_tokens = THREADS
        if start is not None:
            await run_in_threadpool(start)
        try:
            yield
        finally:
            if stop is not None:
                await run_in_threadpool(stop)

    app = FastAPI(
        title="rock daemon",
        version=__version__,
        description="Sandboxes, warm pools and sessions of one rock daemon.",
        lifespan=lifespan,
    )

    _answer_errors(app, metrics)

    @app.middleware("http")
    async def count(request: Request, call_next: Callable[[Request], Any]) -> Response:
        response: Response = await call_next(request)
        metrics.requests.labels(status=f"{response.status_code // 100}xx").inc()
        return response

    @_on(app, Routes.health, response_model=Health, tags=["daemon"])
    def health() -> Health:
        """Liveness; the only route without a token."""
        return Health(
            status="shutting-down" if manager.closing else "ok",
            version=__version__,
            daemon_id=manager.daemon_id,
            backend=manager.backend.name,
        )

    api = APIRouter(dependencies=[Depends(require_token)], responses=_ERRORS)

    @_on(api, Routes.metrics, tags=["daemon"], response_class=Response)
    def prometheus() -> Response:
        """Prometheus text format: sandboxes by state, pools, acquire and exec latency, errors."""
        return Response(metrics.render(), media_type="text/plain; version=0.0.4")

    _sandbox_routes(api, manager)
    _state_routes(api, manager)
    _port_routes(api, manager)
    _command_routes(api, manager)
    _file_routes(api, manager)
    _pool_routes(api, manager)
    app.include_router(api)
    gate = e2b_routes(app, manager, token, stand_ins=e2b_stand_ins, domain=e2b_domain)
    envd_routes(app, gate)
    template_routes(app, gate)
    return app


def _answer_errors(app: FastAPI, metrics: Metrics) -> None:
    """Every failure as one JSON error body; 5xx ones counted."""

    @app.exception_handler(HTTPException)
    async def no_route(request: Request, exc: HTTPException) -> Response:
        """A route that is not here (404) or not for this method (405): for an E2B client
        in E2B's shape, for the others in the daemon's."""
        if exc.status_code in (404, 405) and from_e2b(request):
            return unserved(request)
        kind = {404: "NotFound", 405: "MethodNotAllowed"}.get(exc.status_code, "HTTPError")
        message = f"{exc.detail}: {request.method} {request.url.path}"
        return _error(exc.status_code, kind, message + " (the routes are listed at /docs).")

    @app.exception_handler(RequestValidationError)
    async def invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        message, fields = _validation_message(list(exc.errors()))
        return _error(422, "InvalidRequest", message, fields)

    @app.exception_handler(ValidationError)
    async def invalid_model(_: Request, exc: ValidationError) -> JSONResponse:
        message, fields = _validation_message(list(exc.errors()))
        return _error(422, "InvalidRequest", message, fields)

    async def failed(_: Request, exc: Exception) -> JSONResponse:
        status = next((code for cls, code in STATUS if isinstance(exc, cls)), 500)
        if status == 500:
            log.error("unexpected error", exc_info=exc)
        if status >= 500:
            metrics.error(type(exc).__name__)
        fields = getattr(exc, "fields", None)
        return _error(status, type(exc).__name__, str(exc) or type(exc).__name__, fields)

    # RockError and SessionError are answered by the inner exception middleware; anything
    # else reaches Starlette's outer error middleware, which answers and logs it.
    for kind in (RockError, SessionError, Exception):
        app.add_exception_handler(kind, failed)


def _on(
    router: APIRouter | FastAPI, route: Route, **options: Any
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Serve ``route`` (its method and path as :class:`rock.api.Routes` describes them, which
    the client's calls take too) with the function decorated."""
    return router.api_route(route.path, methods=[route.method], **options)


def _sandbox_routes(api: APIRouter, manager: SandboxManager) -> None:
    """Sandboxes: create, list, inspect, stop, snapshot, delete."""

    @_on(api, Routes.create, response_model=SandboxInfo, status_code=201, tags=["sandboxes"])
    def create(request: CreateSandboxRequest) -> Response:
        """Start a sandbox or take one from a warm pool."""
        info = manager.create(request)
        return Response(info.model_dump_json(), status_code=201, media_type="application/json")

    @_on(api, Routes.list, response_model=list[SandboxInfo], tags=["sandboxes"])
    def list_sandboxes(
        state: Annotated[list[str] | None, Query(description="Keep these states")] = None,
        label: Annotated[list[str] | None, Query(description="key=value, all must match")] = None,
        pool: Annotated[str | None, Query(max_length=64)] = None,
        all: Annotated[bool, Query(description="Include deleted sandboxes")] = False,
    ) -> list[SandboxInfo]:
        """Sandboxes of this daemon, oldest first."""
        labels: dict[str, str] = {}
        for item in label or []:
            key, sep, value = item.partition("=")
            if not sep or not key:
                raise InvalidRequest(
                    f"label filter {item!r} is not key=value; write it as key=value.",
                    fields=["query.label"],
                )
            labels[key] = value
        known = set(get_args(SandboxStateName))
        for name in state or []:
            if name not in known:
                raise InvalidRequest(
                    f"state {name!r} is not a sandbox state; use one of {', '.join(sorted(known))}.",
                    fields=["query.state"],
                )
        return manager.list(states=state, labels=labels, pool=pool, include_deleted=all)

    @_on(api, Routes.info, response_model=SandboxInfo, tags=["sandboxes"])
    def get(sandbox_id: SandboxId) -> SandboxInfo:
        """One sandbox with its state history."""
        return manager.get(sandbox_id)

    @_on(api, Routes.delete, response_model=SandboxInfo, tags=["sandboxes"])
    def delete(sandbox_id: SandboxId) -> SandboxInfo:
        """Release a sandbox: it is deleted (a pool replaces it with a fresh one)."""
        return manager.delete(sandbox_id)

    @_on(api, Routes.stop, response_model=SandboxInfo, tags=["sandboxes"])
    def stop_sandbox(sandbox_id: SandboxId) -> SandboxInfo:
        return manager.stop(sandbox_id)

    @_on(api, Routes.snapshot, response_model=SnapshotInfo, tags=["sandboxes"])
    def snapshot(sandbox_id: SandboxId, request: SnapshotRequest) -> SnapshotInfo:
        """Save the sandbox's filesystem as a new image."""
        return manager.snapshot(sandbox_id, request.tag)

    @_on(api, Routes.fork, response_model=list[SandboxInfo], tags=["sandboxes"])
    def fork(sandbox_id: SandboxId, request: ForkRequest) -> list[SandboxInfo]:
        """``count`` new sandboxes, leased to the caller, that start from this one's files as
        they are now (one snapshot; the same spec; running processes are not carried)."""
        return manager.fork(sandbox_id, request.count)

    @_on(api, Routes.logs, response_model=list[ExecLog], tags=["sandboxes"])
    def logs(
        sandbox_id: SandboxId, limit: Annotated[int, Query(ge=1, le=10000)] = 100
    ) -> list[ExecLog]:
        """The sandbox's recorded commands, newest first."""
        return manager.logs(sandbox_id, limit)


def _port_routes(api: APIRouter, manager: SandboxManager) -> None:
    """A sandbox's ports, relayed through the daemon (:mod:`rock.daemon.ports`)."""

    async def port(sandbox_id: SandboxId, port: int, path: str, request: Request) -> Response:
        """An HTTP request to ``port`` inside the sandbox (its network may be closed): the
        server's answer as it gave it; 502 when nothing listens there."""
        return await forward(manager, sandbox_id, port, path, request)

    async def port_root(sandbox_id: SandboxId, port: int, request: Request) -> Response:
        """:func:`port` at the path ``/``."""
        return await forward(manager, sandbox_id, port, "", request)

    base = Routes.info.path + "/ports/{port}"
    for method in ("GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"):
        name = method.lower()
        api.add_api_route(
            base + "/{path:path}", port, methods=[method], tags=["ports"],
            operation_id=f"port_{name}",
        )  # fmt: skip
        api.add_api_route(
            base, port_root, methods=[method], tags=["ports"], operation_id=f"port_root_{name}"
        )


def _state_routes(api: APIRouter, manager: SandboxManager) -> None:
    """A running sandbox's state: its network, paused or not."""

    @_on(api, Routes.set_network, status_code=204, tags=["sandboxes"])
    def set_network(sandbox_id: SandboxId, request: NetworkRequest) -> Response:
        """Open or close a running sandbox's network (one made with a network only)."""
        manager.set_network(sandbox_id, request.on)
        return Response(status_code=204)

    @_on(api, Routes.pause, response_model=SandboxInfo, tags=["sandboxes"])
    def pause(sandbox_id: SandboxId) -> SandboxInfo:
        """Freeze a sandbox in use, its processes and memory kept; it does not expire while
        paused, and every call but resume and delete is refused (409)."""
        return manager.pause(sandbox_id)

    @_on(api, Routes.resume, response_model=SandboxInfo, tags=["sandboxes"])
    def resume(sandbox_id: SandboxId) -> SandboxInfo:
        """Let a paused sandbox go on; its timeout starts again."""
        return manager.resume(sandbox_id)


def _command_routes(api: APIRouter, manager: SandboxManager) -> None:
    """Commands: one-off exec and persistent sessions."""

    @_on(api, Routes.run, response_model=ExecResult, tags=["commands"])
    def exec_(sandbox_id: SandboxId, request: ExecRequest) -> Response:
        """Run one command; bytes travel as base64."""
        result = manager.exec(sandbox_id, request)
        return Response(result.model_dump_json(), media_type="application/json")

    @_on(
        api,
        Routes.open_session,
        response_model=SessionInfo,
        status_code=201,
        tags=["commands"],
    )
    def open_session(sandbox_id: SandboxId) -> SessionInfo:
        """Open a persistent bash session."""
        return manager.open_session(sandbox_id)

    @_on(
        api,
        Routes.session_run,
        response_model=SessionResult,
        tags=["commands"],
    )
    def run_in_session(
        sandbox_id: SandboxId,
        session_id: SessionId,
        request: SessionRunRequest,
    ) -> Response:
        result = manager.run_in_session(sandbox_id, session_id, request)
        return Response(result.model_dump_json(), media_type="application/json")

    @_on(api, Routes.interrupt, response_model=Interrupted, tags=["commands"])
    def interrupt(sandbox_id: SandboxId, request: InterruptRequest) -> Interrupted:
        """Stop the commands running now (or the one run with ``tag``), as Ctrl-C would."""
        return Interrupted(interrupted=manager.interrupt(sandbox_id, request.tag))

    @_on(
        api,
        Routes.session_interrupt,
        status_code=204,
        tags=["commands"],
    )
    def interrupt_session(sandbox_id: SandboxId, session_id: SessionId) -> Response:
        """Stop the command running in the session; the session stays."""
        manager.interrupt_session(sandbox_id, session_id)
        return Response(status_code=204)

    @_on(api, Routes.session_close, status_code=204, tags=["commands"])
    def close_session(sandbox_id: SandboxId, session_id: SessionId) -> Response:
        manager.close_session(sandbox_id, session_id)
        return Response(status_code=204)


def _file_routes(api: APIRouter, manager: SandboxManager) -> None:
    """Files and trees in and out of a sandbox."""

    @_on(
        api,
        Routes.read_file,
        response_class=Response,
        responses={200: _OCTETS},
        tags=["files"],
    )
    def read_file(sandbox_id: SandboxId, path: FilePath) -> Response:
        return Response(manager.read_file(sandbox_id, path), media_type="application/octet-stream")

    @_on(
        api,
        Routes.write_file,
        status_code=204,
        openapi_extra={"requestBody": {"required": True, **_OCTETS}},
        tags=["files"],
    )
    async def write_file(
        sandbox_id: SandboxId,
        path: FilePath,
        request: Request,
        mode: Annotated[int, Query(ge=0, le=0o7777)] = 0o644,
    ) -> Response:
        data = await request.body()
        await run_in_threadpool(manager.write_file, sandbox_id, path, data, mode)
        return Response(status_code=204)

    @_on(
        api,
        Routes.get_archive,
        response_class=Response,
        responses={200: _TAR},
        tags=["files"],
    )
    def get_archive(sandbox_id: SandboxId, path: FilePath) -> Response:
        """A tar of a file or tree whose top member is the path's base name."""
        return Response(manager.get_archive(sandbox_id, path), media_type="application/x-tar")

    @_on(
        api,
        Routes.put_archive,
        status_code=204,
        openapi_extra={"requestBody": {"required": True, **_TAR}},
        tags=["files"],
    )
    async def put_archive(sandbox_id: SandboxId, path: FilePath, request: Request) -> Response:
        """Unpack a tar into the directory ``path``, keeping modes."""
        data = await request.body()
        await run_in_threadpool(manager.put_archive, sandbox_id, path, data)
        return Response(status_code=204)


def _pool_routes(api: APIRouter, manager: SandboxManager) -> None:
    """Warm pools and the images the daemon knows."""

    @_on(api, Routes.pools, response_model=list[PoolInfo], tags=["pools"])
    def pools() -> list[PoolInfo]:
        return manager.pools()

    @_on(api, Routes.pool, response_model=PoolInfo, tags=["pools"])
    def pool(name: PoolName) -> PoolInfo:
        return manager.pool(name)

    @_on(api, Routes.set_pool, response_model=PoolInfo, tags=["pools"])
    def set_pool(name: PoolName, settings: PoolSettings) -> PoolInfo:
        """Create a pool or change its spec and sizes; it fills in the background."""
        if settings.min_idle > settings.max_total:
            raise InvalidRequest(
                f"body.min_idle ({settings.min_idle}) cannot exceed max_total ({settings.max_total}); "
                "lower min_idle or raise max_total.",
                fields=["body.min_idle"],
            )
        return manager.set_pool(name, settings)

    @_on(api, Routes.delete_pool, status_code=204, tags=["pools"])
    def delete_pool(name: PoolName) -> Response:
        """Forget a pool; its idle sandboxes are deleted, handed-out ones stay."""
        manager.delete_pool(name)
        return Response(status_code=204)

    @_on(api, Routes.images, response_model=list[ImageInfo], tags=["images"])
    def images() -> list[ImageInfo]:
        return manager.images()

    @_on(api, Routes.build_image, response_model=ImageBuild, tags=["images"])
    async def build_image(
        request: Request,
        name: Annotated[str, Query(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$")] = "image",
        dockerfile: str = "Dockerfile",
    ) -> ImageBuild:
        """Build an image from a build context sent as a tar (gzipped or not) with its
        Dockerfile at ``dockerfile``: base images mapped to local ones as for a task, no
        pulls unless the engine can reach a registry; cached by digest. The image is named
        ``rock-bench/<name>:<digest>``; a build that fails is a 422 with its last lines."""
        data = await request.body()
        return await run_in_threadpool(manager.build_image, data, dockerfile, name)
