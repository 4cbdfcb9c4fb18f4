"""The daemon's own API (``/v1/...``), route by route as :class:`rock.api.Routes` describes
them, grouped by resource: sandboxes, their state and ports, commands, files, pools and images.

Route functions are plain ``def`` where they only call the manager: FastAPI runs them in worker
threads, where its blocking calls (docker, the database) belong. :func:`own_routes` adds them
all to the daemon's authenticated router (:mod:`rock.daemon.app`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, get_args

from fastapi import APIRouter, FastAPI, Path, Query, Request, Response
from starlette.concurrency import run_in_threadpool

from rock.api import Route, Routes
from rock.daemon.manager import SandboxManager
from rock.daemon.ports import forward
from rock.errors import InvalidRequest
from rock.models import (
    POOL_NAME,
    CreateSandboxRequest,
    ExecLog,
    ExecRequest,
    ExecResult,
    ForkRequest,
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

_OCTETS = {
    "content": {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}}
}
_TAR = {"content": {"application/x-tar": {"schema": {"type": "string", "format": "binary"}}}}


# Module level: with postponed annotations FastAPI resolves them from the module.
SandboxId = Annotated[str, Path(min_length=1, max_length=64)]
SessionId = Annotated[str, Path(min_length=1, max_length=64)]
PoolName = Annotated[str, Path(pattern=POOL_NAME)]
FilePath = Annotated[str, Query(min_length=1, max_length=4096, description="Path in the sandbox")]


def on(
    router: APIRouter | FastAPI, route: Route, **options: Any
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Serve ``route`` (its method and path as :class:`rock.api.Routes` describes them, which
    the client's calls take too) with the function decorated."""
    return router.api_route(route.path, methods=[route.method], **options)


def own_routes(api: APIRouter, manager: SandboxManager) -> None:
    """Add every route of the daemon's own API but health and metrics to ``api``."""
    _sandbox_routes(api, manager)
    _state_routes(api, manager)
    _port_routes(api, manager)
    _command_routes(api, manager)
    _file_routes(api, manager)
    _pool_routes(api, manager)


def _sandbox_routes(api: APIRouter, manager: SandboxManager) -> None:
    """Sandboxes: create, list, inspect, stop, snapshot, delete."""

    @on(api, Routes.create, response_model=SandboxInfo, status_code=201, tags=["sandboxes"])
    def create(request: CreateSandboxRequest) -> Response:
        """Start a sandbox or take one from a warm pool."""
        info = manager.create(request)
        return Response(info.model_dump_json(), status_code=201, media_type="application/json")

    @on(api, Routes.list, response_model=list[SandboxInfo], tags=["sandboxes"])
    def list_sandboxes(
        state: Annotated[list[str] | None, Query(description="Keep these states")] = None,
        label: Annotated[list[str] | None, Query(description="key=value, all must match")] = None,
        pool: Annotated[str | None, Query(max_length=64)] = None,
        all: Annotated[bool, Query(description="Include deleted sandboxes")] = False,
    ) -> list[SandboxInfo]:
        """Sandboxes of this daemon, oldest first."""
        labels = _label_filter(label or [])
        _check_states(state or [])
        return manager.list(states=state, labels=labels, pool=pool, include_deleted=all)

    @on(api, Routes.info, response_model=SandboxInfo, tags=["sandboxes"])
    def get(sandbox_id: SandboxId) -> SandboxInfo:
        """One sandbox with its state history."""
        return manager.get(sandbox_id)

    @on(api, Routes.delete, response_model=SandboxInfo, tags=["sandboxes"])
    def delete(sandbox_id: SandboxId) -> SandboxInfo:
        """Release a sandbox: it is deleted (a pool replaces it with a fresh one)."""
        return manager.delete(sandbox_id)

    @on(api, Routes.stop, response_model=SandboxInfo, tags=["sandboxes"])
    def stop_sandbox(sandbox_id: SandboxId) -> SandboxInfo:
        return manager.stop(sandbox_id)

    @on(api, Routes.snapshot, response_model=SnapshotInfo, tags=["sandboxes"])
    def snapshot(sandbox_id: SandboxId, request: SnapshotRequest) -> SnapshotInfo:
        """Save the sandbox's filesystem as a new image."""
        return manager.snapshot(sandbox_id, request.tag)

    @on(api, Routes.fork, response_model=list[SandboxInfo], tags=["sandboxes"])
    def fork(sandbox_id: SandboxId, request: ForkRequest) -> list[SandboxInfo]:
        """``count`` new sandboxes, leased to the caller, that start from this one's files as
        they are now (one snapshot; the same spec; running processes are not carried)."""
        return manager.fork(sandbox_id, request.count)

    @on(api, Routes.logs, response_model=list[ExecLog], tags=["sandboxes"])
    def logs(
        sandbox_id: SandboxId, limit: Annotated[int, Query(ge=1, le=10000)] = 100
    ) -> list[ExecLog]:
        """The sandbox's recorded commands, newest first."""
        return manager.logs(sandbox_id, limit)


def _label_filter(items: list[str]) -> dict[str, str]:
    """The ``label`` query of a sandbox listing (``key=value`` each) as a dict."""
    labels: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise InvalidRequest(
                f"label filter {item!r} is not key=value; write it as key=value.",
                fields=["query.label"],
            )
        labels[key] = value
    return labels


def _check_states(names: list[str]) -> None:
    """Refuse a ``state`` query of a sandbox listing that names no sandbox state."""
    known = set(get_args(SandboxStateName))
    for name in names:
        if name not in known:
            raise InvalidRequest(
                f"state {name!r} is not a sandbox state; use one of {', '.join(sorted(known))}.",
                fields=["query.state"],
            )


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

    @on(api, Routes.set_network, status_code=204, tags=["sandboxes"])
    def set_network(sandbox_id: SandboxId, request: NetworkRequest) -> Response:
        """Open or close a running sandbox's network (one made with a network only)."""
        manager.set_network(sandbox_id, request.on)
        return Response(status_code=204)

    @on(api, Routes.pause, response_model=SandboxInfo, tags=["sandboxes"])
    def pause(sandbox_id: SandboxId) -> SandboxInfo:
        """Freeze a sandbox in use, its processes and memory kept; it does not expire while
        paused, and every call but resume and delete is refused (409)."""
        return manager.pause(sandbox_id)

    @on(api, Routes.resume, response_model=SandboxInfo, tags=["sandboxes"])
    def resume(sandbox_id: SandboxId) -> SandboxInfo:
        """Let a paused sandbox go on; its timeout starts again."""
        return manager.resume(sandbox_id)


def _command_routes(api: APIRouter, manager: SandboxManager) -> None:
    """Commands: one-off exec and persistent sessions."""

    @on(api, Routes.run, response_model=ExecResult, tags=["commands"])
    def exec_(sandbox_id: SandboxId, request: ExecRequest) -> Response:
        """Run one command; bytes travel as base64."""
        result = manager.exec(sandbox_id, request)
        return Response(result.model_dump_json(), media_type="application/json")

    @on(
        api,
        Routes.open_session,
        response_model=SessionInfo,
        status_code=201,
        tags=["commands"],
    )
    def open_session(sandbox_id: SandboxId) -> SessionInfo:
        """Open a persistent bash session."""
        return manager.open_session(sandbox_id)

    @on(
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

    @on(api, Routes.interrupt, response_model=Interrupted, tags=["commands"])
    def interrupt(sandbox_id: SandboxId, request: InterruptRequest) -> Interrupted:
        """Stop the commands running now (or the one run with ``tag``), as Ctrl-C would."""
        return Interrupted(interrupted=manager.interrupt(sandbox_id, request.tag))

    @on(
        api,
        Routes.session_interrupt,
        status_code=204,
        tags=["commands"],
    )
    def interrupt_session(sandbox_id: SandboxId, session_id: SessionId) -> Response:
        """Stop the command running in the session; the session stays."""
        manager.interrupt_session(sandbox_id, session_id)
        return Response(status_code=204)

    @on(api, Routes.session_close, status_code=204, tags=["commands"])
    def close_session(sandbox_id: SandboxId, session_id: SessionId) -> Response:
        manager.close_session(sandbox_id, session_id)
        return Response(status_code=204)


def _file_routes(api: APIRouter, manager: SandboxManager) -> None:
    """Files and trees in and out of a sandbox."""

    @on(
        api,
        Routes.read_file,
        response_class=Response,
        responses={200: _OCTETS},
        tags=["files"],
    )
    def read_file(sandbox_id: SandboxId, path: FilePath) -> Response:
        return Response(manager.read_file(sandbox_id, path), media_type="application/octet-stream")

    @on(
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

    @on(
        api,
        Routes.get_archive,
        response_class=Response,
        responses={200: _TAR},
        tags=["files"],
    )
    def get_archive(sandbox_id: SandboxId, path: FilePath) -> Response:
        """A tar of a file or tree whose top member is the path's base name."""
        return Response(manager.get_archive(sandbox_id, path), media_type="application/x-tar")

    @on(
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

    @on(api, Routes.pools, response_model=list[PoolInfo], tags=["pools"])
    def pools() -> list[PoolInfo]:
        return manager.pools()

    @on(api, Routes.pool, response_model=PoolInfo, tags=["pools"])
    def pool(name: PoolName) -> PoolInfo:
        return manager.pool(name)

    @on(api, Routes.set_pool, response_model=PoolInfo, tags=["pools"])
    def set_pool(name: PoolName, settings: PoolSettings) -> PoolInfo:
        """Create a pool or change its spec and sizes; it fills in the background."""
        if settings.min_idle > settings.max_total:
            raise InvalidRequest(
                f"body.min_idle ({settings.min_idle}) cannot exceed max_total ({settings.max_total}); "
                "lower min_idle or raise max_total.",
                fields=["body.min_idle"],
            )
        return manager.set_pool(name, settings)

    @on(api, Routes.delete_pool, status_code=204, tags=["pools"])
    def delete_pool(name: PoolName) -> Response:
        """Forget a pool; its idle sandboxes are deleted, handed-out ones stay."""
        manager.delete_pool(name)
        return Response(status_code=204)

    @on(api, Routes.images, response_model=list[ImageInfo], tags=["images"])
    def images() -> list[ImageInfo]:
        return manager.images()

    @on(api, Routes.build_image, response_model=ImageBuild, tags=["images"])
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
