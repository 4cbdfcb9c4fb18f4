"""The E2B API, served by the daemon beside its own: E2B's REST API (create, connect, list,
kill, timeouts) and the part of its in-sandbox API (envd) that the official ``e2b`` SDK uses
for commands and files, so that E2B clients drive rock sandboxes unchanged.

A client points the SDK at the daemon with its own settings: ``E2B_API_URL`` and
``E2B_SANDBOX_URL`` both the daemon's URL, ``E2B_API_KEY`` the daemon's token. The REST
routes check the key (``X-API-Key``); every envd call names its sandbox in the
``E2b-Sandbox-Id`` header and carries the access token that create and connect handed out
for that sandbox (``X-Access-Token``, derived from the daemon's token). Errors take E2B's
shapes: ``{"code": 404, "message": ...}`` for the REST API, Connect's
``{"code": "not_found", "message": ...}`` for envd.

Served besides: pause and resume, snapshots (:mod:`rock.daemon.e2b_snapshots`), metrics and
network updates (:mod:`rock.daemon.e2b_usage`), a sandbox's ports (host names
``{port}-{id}.{domain}``, :mod:`rock.daemon.ports`), processes with stdin and pty (a FIFO in
the sandbox, ``script``'s terminal), listing and reconnecting to processes
(:mod:`rock.daemon.e2b_processes`), directory watches (by polling), and templates
(:mod:`rock.daemon.e2b_templates`).

What rock does differently: a sandbox's network is closed unless the create request sets
``allow_internet_access`` (E2B opens it by default), and its ports need the traffic token
unless public traffic is asked for; the template ``base`` is rock's base image and any
other template not built here names a local image; commands run as the image's user (root)
unless the call names one; envd's version is reported as 0.5.7 (no file metadata). A call
to a route rock does not serve is answered in the shape of the API it was meant for
(:func:`unserved`).
"""

from __future__ import annotations

import hmac
import re
from collections.abc import Callable
from typing import Any

from fastapi import FastAPI, Request, Response
from fastapi.responses import JSONResponse
from pydantic import ValidationError
from starlette.concurrency import run_in_threadpool

from rock.backends.base import SandboxError
from rock.daemon.e2b_gate import (
    LABEL,
    META,
    Failed,
    Gate,
    TemplateImage,
    access_token,
    connect_error,
    read_json,
    rest,
    running,
    traffic_token,
)
from rock.daemon.e2b_snapshots import snapshot_routes
from rock.daemon.e2b_usage import usage_routes
from rock.daemon.manager import SandboxManager
from rock.daemon.ports import NothingListens, forward
from rock.images.base import BASE_IMAGE
from rock.models import CreateSandboxRequest, ExecRequest, SandboxSpec
from rock.verifier import toolchain

DEFAULT_TIMEOUT_SEC = 300
"""E2B's sandbox timeout when a create request gives none."""
_PORT_HOST = re.compile(r"^(\d{1,5})-(sb-[0-9a-f]{6,32})\.")
"""E2B's host name of a sandbox's port: ``{port}-{sandbox id}.{domain}``."""


def e2b_routes(
    app: FastAPI,
    manager: SandboxManager,
    token: str,
    *,
    stand_ins: bool = False,
    domain: str | None = None,
) -> Gate:
    """Add the E2B routes to the daemon's ``app``, with envd's health check of a sandbox
    (the daemon's own ``/health`` answers the calls that name no sandbox)."""
    gate = Gate(manager, token)
    gate.stand_ins, gate.domain = stand_ins, domain
    _port_middleware(app, gate)
    _envd_health_middleware(app, gate)
    _rest_routes(app, gate)
    _lifetime_routes(app, gate)
    _fork_route(app, gate)
    usage_routes(app, gate)
    _pause_routes(app, gate)
    snapshot_routes(app, gate)
    return gate


def _port_middleware(app: FastAPI, gate: Gate) -> None:
    """A sandbox's ports by E2B's host names."""

    @app.middleware("http")
    async def ports(request: Request, call_next: Callable[[Request], Any]) -> Response:
        """``{port}-{id}.{domain}`` (E2B's ``get_host``): the request goes to that port of
        that sandbox, with its traffic token unless the sandbox allows public traffic."""
        found = _PORT_HOST.match(request.headers.get("host", ""))
        if found is None:
            response: Response = await call_next(request)
            return response
        port, sandbox_id = int(found[1]), found[2]

        async def answer() -> Response:
            info = await run_in_threadpool(running, gate.manager, sandbox_id)
            given = request.headers.get("e2b-traffic-access-token", "")
            wanted = traffic_token(gate.token, sandbox_id)
            public = info.labels.get(f"{LABEL}.public") == "1"
            if not public and not hmac.compare_digest(given.encode(), wanted.encode()):
                raise Failed(
                    403,
                    f"sandbox {sandbox_id}'s ports need its traffic access token in the "
                    "e2b-traffic-access-token header (or a sandbox made with public traffic).",
                )
            try:
                return await forward(gate.manager, sandbox_id, port, request.url.path, request)
            except NothingListens as exc:
                raise Failed(502, str(exc)) from None

        return await rest(answer)


def _envd_health_middleware(app: FastAPI, gate: Gate) -> None:
    """envd's health check of one sandbox."""

    @app.middleware("http")
    async def envd_health(request: Request, call_next: Callable[[Request], Any]) -> Response:
        """``Sandbox.is_running``: envd's ``GET /health`` of the sandbox the call names,
        204 while it runs and 502 (as E2B's proxy answers) once it is gone."""
        if request.url.path != "/health" or "e2b-sandbox-id" not in request.headers:
            response: Response = await call_next(request)
            return response
        try:
            await run_in_threadpool(gate.sandbox_of, request)
        except Failed as failed:
            return JSONResponse(
                {"code": failed.status, "message": failed.message}, status_code=failed.status
            )
        return Response(status_code=204)


def from_e2b(request: Request) -> bool:
    """Whether a call came from an E2B client: it carries E2B's key or names a sandbox."""
    return "x-api-key" in request.headers or "e2b-sandbox-id" in request.headers


def unserved(request: Request) -> Response:
    """An E2B call to a route rock does not serve: 501 in the shape of the API it was meant
    for (E2B's REST ``{"code", "message"}``, or Connect's ``unimplemented`` for envd), never
    FastAPI's ``detail`` (on which the SDK failed with a KeyError) nor a 404 (which the SDK
    reports as a sandbox not found)."""
    what = f"{request.method} {request.url.path}"
    if "e2b-sandbox-id" in request.headers:
        return connect_error(
            Failed(501, f"rock's E2B API does not serve {what} of envd.", "unimplemented")
        )
    return JSONResponse(
        {"code": 501, "message": f"rock's E2B API does not serve {what}."}, status_code=501
    )


def _rest_routes(app: FastAPI, gate: Gate) -> None:
    """Create, connect and list sandboxes."""

    @app.post("/v2/sandboxes", include_in_schema=False)
    async def create(request: Request) -> Response:
        async def answer() -> Response:
            gate.api_key(request)
            body = await read_json(request)
            found = await run_in_threadpool(gate.template_image, str(body.get("templateID") or ""))
            spec = _spec_of(body, found)
            try:
                info = await run_in_threadpool(gate.manager.create, CreateSandboxRequest(spec=spec))
            except SandboxError as exc:  # an image that is not here, say
                raise Failed(400, str(exc)) from None
            if gate.stand_ins and spec.network == "none":
                await run_in_threadpool(_give_stand_ins, gate.manager, info.id)
            return JSONResponse(gate.described(info), status_code=201)

        return await rest(answer)

    @app.post("/v2/sandboxes/{sandbox_id}/connect", include_in_schema=False)
    async def connect(sandbox_id: str, request: Request) -> Response:
        async def answer() -> Response:
            gate.api_key(request)
            body = await read_json(request)
            info = await run_in_threadpool(running, gate.manager, sandbox_id, True)
            if info.state == "paused":  # connecting resumes it, as E2B's connect does
                seconds = body.get("timeout")
                ttl = float(seconds) if seconds is not None else DEFAULT_TIMEOUT_SEC
                info = await run_in_threadpool(gate.manager.resume, sandbox_id, ttl)
                return JSONResponse(gate.described(info), status_code=201)
            if body.get("timeout") is not None:
                info = await run_in_threadpool(
                    gate.manager.set_timeout, sandbox_id, float(body["timeout"])
                )
            return JSONResponse(gate.described(info), status_code=200)

        return await rest(answer)

    @app.get("/v2/sandboxes", include_in_schema=False)
    async def list_(request: Request) -> Response:
        async def answer() -> Response:
            gate.api_key(request)
            infos = await run_in_threadpool(gate.manager.list, states=["busy", "paused"])
            return gate.page([gate.listed(i) for i in infos], request)

        return await rest(answer)


def _lifetime_routes(app: FastAPI, gate: Gate) -> None:
    """Inspect, kill and time out one sandbox (forks: :func:`_fork_route`)."""

    @app.get("/sandboxes/{sandbox_id}", include_in_schema=False)
    async def info(sandbox_id: str, request: Request) -> Response:
        async def answer() -> Response:
            gate.api_key(request)
            found = await run_in_threadpool(running, gate.manager, sandbox_id, True)
            return JSONResponse(
                {**gate.listed(found), "envdAccessToken": access_token(gate.token, found.id)}
            )

        return await rest(answer)

    @app.delete("/sandboxes/{sandbox_id}", include_in_schema=False)
    async def kill(sandbox_id: str, request: Request) -> Response:
        async def answer() -> Response:
            gate.api_key(request)
            await run_in_threadpool(running, gate.manager, sandbox_id, True)
            await run_in_threadpool(gate.manager.delete, sandbox_id, "killed through the E2B API")
            return Response(status_code=204)

        return await rest(answer)

    @app.post("/sandboxes/{sandbox_id}/timeout", include_in_schema=False)
    async def set_timeout(sandbox_id: str, request: Request) -> Response:
        async def answer() -> Response:
            gate.api_key(request)
            body = await read_json(request)
            try:
                seconds = float(body["timeout"])
            except (KeyError, TypeError, ValueError):
                raise Failed(400, 'give the timeout in seconds: {"timeout": 60}.') from None
            await run_in_threadpool(running, gate.manager, sandbox_id)
            await run_in_threadpool(gate.manager.set_timeout, sandbox_id, seconds)
            return Response(status_code=204)

        return await rest(answer)


def _fork_route(app: FastAPI, gate: Gate) -> None:
    """Fork one sandbox into several."""

    @app.post("/sandboxes/{sandbox_id}/fork", include_in_schema=False)
    async def fork(sandbox_id: str, request: Request) -> Response:
        """``Sandbox.fork``: ``count`` sandboxes from one snapshot of this one's files (rock
        carries the file system, not the memory: see the manager's fork), each with the
        given ``timeout``; all start or none does."""

        async def answer() -> Response:
            gate.api_key(request)
            body = await read_json(request)
            try:
                count = int(body.get("count") or 1)
                timeout = None if body.get("timeout") is None else float(body["timeout"])
            except (TypeError, ValueError):
                raise Failed(
                    400, 'give count and timeout as numbers: {"count": 2, "timeout": 300}.'
                ) from None
            if not 1 <= count <= 20:
                raise Failed(400, f"count must be between 1 and 20, not {count}.")
            await run_in_threadpool(running, gate.manager, sandbox_id)
            try:
                made = await run_in_threadpool(gate.manager.fork, sandbox_id, count)
            except SandboxError as exc:
                raise Failed(500, str(exc)) from None
            if timeout is not None:
                made = [
                    await run_in_threadpool(gate.manager.set_timeout, info.id, timeout)
                    for info in made
                ]
            return JSONResponse([{"sandbox": gate.described(i)} for i in made], status_code=201)

        return await rest(answer)


def _pause_routes(app: FastAPI, gate: Gate) -> None:
    """Pause and resume: Docker's pause freezes the processes where they are, memory kept
    (E2B snapshots memory to disk instead); a paused sandbox does not expire."""

    @app.post("/sandboxes/{sandbox_id}/pause", include_in_schema=False)
    async def pause(sandbox_id: str, request: Request) -> Response:
        async def answer() -> Response:
            gate.api_key(request)
            info = await run_in_threadpool(running, gate.manager, sandbox_id, True)
            if info.state == "paused":
                raise Failed(409, f"sandbox {sandbox_id} is already paused")
            await run_in_threadpool(gate.manager.pause, sandbox_id)
            return Response(status_code=204)

        return await rest(answer)

    @app.post("/sandboxes/{sandbox_id}/resume", include_in_schema=False)
    async def resume(sandbox_id: str, request: Request) -> Response:
        """The older resume call (the SDK's connect resumes too)."""

        async def answer() -> Response:
            gate.api_key(request)
            body = await read_json(request)
            info = await run_in_threadpool(running, gate.manager, sandbox_id, True)
            if info.state != "paused":
                raise Failed(409, f"sandbox {sandbox_id} is not paused")
            seconds = body.get("timeout")
            ttl = float(seconds) if seconds is not None else DEFAULT_TIMEOUT_SEC
            info = await run_in_threadpool(gate.manager.resume, sandbox_id, ttl)
            return JSONResponse(gate.described(info), status_code=201)

        return await rest(answer)


def _spec_of(body: dict[str, Any], built: TemplateImage | None = None) -> SandboxSpec:
    """The rock spec of an E2B create request (template, envVars, metadata, timeout): a
    template built here starts from its image with its limits; ``base`` is rock's base
    image, any other name a local image."""
    template = str(body.get("templateID") or "base")
    metadata = body.get("metadata") or {}
    labels = {LABEL: "1", f"{LABEL}.template": template}
    if (body.get("network") or {}).get("allowPublicTraffic") is True:
        labels[f"{LABEL}.public"] = "1"  # its ports answer without the traffic token
    limits: dict[str, Any] = {}
    if built is not None:
        limits = {"cpus": built.cpus, "memory_mb": built.memory_mb}
        limits = {k: v for k, v in limits.items() if v}
    try:
        labels.update({f"{META}{k}": str(v) for k, v in metadata.items()})
        return SandboxSpec(
            **limits,
            image=built.image if built else BASE_IMAGE if template == "base" else template,
            env={str(k): str(v) for k, v in (body.get("envVars") or {}).items()},
            network="bridge" if body.get("allow_internet_access") is True else "none",
            ttl_sec=float(body.get("timeout") or DEFAULT_TIMEOUT_SEC),
            labels=labels,
        )
    except (ValidationError, ValueError, TypeError, AttributeError) as exc:
        raise Failed(400, f"the sandbox cannot be made as asked: {exc}") from None


def _give_stand_ins(manager: SandboxManager, sandbox_id: str) -> None:
    """rock bench's offline verifier toolchain in the sandbox, importable and first on a
    login shell's PATH (the SDK runs commands with ``bash -l``)."""
    manager.put_archive(sandbox_id, toolchain.TOOLCHAIN_DIR, toolchain.archive())
    profile = f'export PATH="{toolchain.TOOLCHAIN_DIR}/bin:$PATH"\n'.encode()
    manager.write_file(sandbox_id, "/etc/profile.d/rock-stand-ins.sh", profile, 0o644)
    manager.exec(sandbox_id, ExecRequest(command=toolchain.PTH_SETUP, timeout=60))
