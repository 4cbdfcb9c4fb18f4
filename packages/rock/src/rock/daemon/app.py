"""The daemon's HTTP API: FastAPI over a `SandboxManager`, bearer token on every route but /health.

Here the app is put together: the token check, the server's life, the daemon's health and
metrics, its own routes (:mod:`rock.daemon.routes`) and E2B's. Errors leave as
``{"error": {"type", "message", "fields"}}`` with a status chosen by their type, so
`rock.Client` can raise the same exception class the manager raised.
"""

from __future__ import annotations

import hmac
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Annotated, Any

import anyio.to_thread
from fastapi import APIRouter, Depends, FastAPI, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import ValidationError
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException

from rock import __version__
from rock.api import Routes
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
from rock.daemon.ports import NothingListens
from rock.daemon.routes import on, own_routes
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
from rock.models import ErrorDetail, ErrorResponse, Health
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


# Module level: with postponed annotations FastAPI resolves them from the module.
_bearer = HTTPBearer(auto_error=False, description="The token in <rock home>/token.")
Bearer = Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]


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
    app = FastAPI(
        title="rock daemon",
        version=__version__,
        description="Sandboxes, warm pools and sessions of one rock daemon.",
        lifespan=_lifespan(start, stop),
    )
    _answer_errors(app, metrics)
    api = APIRouter(dependencies=[Depends(_token_check(token))], responses=_ERRORS)
    _daemon_routes(app, api, manager, metrics)
    own_routes(api, manager)
    app.include_router(api)
    gate = e2b_routes(app, manager, token, stand_ins=e2b_stand_ins, domain=e2b_domain)
    envd_routes(app, gate)
    template_routes(app, gate)
    return app


def _token_check(token: str) -> Callable[[HTTPAuthorizationCredentials | None], None]:
    """The dependency every route but /health takes: the bearer token must be ``token``."""
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

    return require_token


def _lifespan(
    start: Callable[[], None] | None, stop: Callable[[], None] | None
) -> Callable[[FastAPI], AbstractAsyncContextManager[None]]:
    """The server's life: worker threads sized, ``start`` run before the first request and
    ``stop`` after the last."""

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

    return lifespan


def _daemon_routes(app: FastAPI, api: APIRouter, manager: SandboxManager, metrics: Metrics) -> None:
    """The daemon itself: requests counted, its health (on ``app``, without a token) and its
    metrics (on ``api``)."""

    @app.middleware("http")
    async def count(request: Request, call_next: Callable[[Request], Any]) -> Response:
        response: Response = await call_next(request)
        metrics.requests.labels(status=f"{response.status_code // 100}xx").inc()
        return response

    @on(app, Routes.health, response_model=Health, tags=["daemon"])
    def health() -> Health:
        """Liveness; the only route without a token."""
        return Health(
            status="shutting-down" if manager.closing else "ok",
            version=__version__,
            daemon_id=manager.daemon_id,
            backend=manager.backend.name,
        )

    @on(api, Routes.metrics, tags=["daemon"], response_class=Response)
    def prometheus() -> Response:
        """Prometheus text format: sandboxes by state, pools, acquire and exec latency, errors."""
        return Response(metrics.render(), media_type="text/plain; version=0.0.4")


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
