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

Served besides: pause and resume, snapshots, metrics, network updates, a sandbox's ports
(host names ``{port}-{id}.{domain}``, :mod:`rock.daemon.ports`), processes with stdin and
pty (a FIFO in the sandbox, ``script``'s terminal), listing and reconnecting to processes,
directory watches (by polling), and templates (:mod:`rock.daemon.e2b_templates`).

What rock does differently: a sandbox's network is closed unless the create request sets
``allow_internet_access`` (E2B opens it by default), and its ports need the traffic token
unless public traffic is asked for; the template ``base`` is rock's base image and any
other template not built here names a local image; commands run as the image's user (root)
unless the call names one; envd's version is reported as 0.5.7 (no file metadata). A call
to a route rock does not serve is answered in the shape of the API it was meant for
(:func:`unserved`).
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import itertools
import json
import posixpath
import re
import secrets
import shlex
import struct
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import parse_qsl, unquote

from fastapi import FastAPI, Request, Response
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import ValidationError
from starlette.concurrency import run_in_threadpool

from rock.backends.base import PathMissing, SandboxConflict, SandboxError, SandboxNotFound
from rock.bench.verifier import toolchain
from rock.daemon.manager import SandboxManager
from rock.daemon.ports import NothingListens, forward
from rock.errors import PoolExhausted, RockError, ShuttingDown
from rock.images.base import BASE_IMAGE
from rock.models import CreateSandboxRequest, ExecRequest, ExecResult, SandboxInfo, SandboxSpec
from rock.store import UnknownSandbox

ENVD_VERSION = "0.5.7"
"""The envd version reported: commands without stdin, uploads as octet-stream."""
DEFAULT_TIMEOUT_SEC = 300
"""E2B's sandbox timeout when a create request gives none."""
LABEL = "dev.ale.rock.e2b"
SNAPSHOTS = "rock-e2b-snapshot"
"""The repository of E2B snapshots: ``rock-e2b-snapshot:<sandbox id>-<name>``."""
_SNAPSHOT_NAME = re.compile(r"[A-Za-z0-9_.-]{1,60}")
WATCH_POLL_SEC = 0.5
"""How often the async WatchDir stream looks at its folder."""
META = "e2b.metadata."
_PORT_HOST = re.compile(r"^(\d{1,5})-(sb-[0-9a-f]{6,32})\.")
"""E2B's host name of a sandbox's port: ``{port}-{sandbox id}.{domain}``."""
"""Labels holding a sandbox's E2B metadata, one per key."""
_MISSING = (SandboxNotFound, UnknownSandbox)
_CONNECT_STATUS = {
    "invalid_argument": 400,
    "unauthenticated": 401,
    "permission_denied": 403,
    "not_found": 404,
    "already_exists": 409,
    "resource_exhausted": 429,
    "internal": 500,
    "unimplemented": 501,
    "unavailable": 503,
    "deadline_exceeded": 504,
}


class _Failed(Exception):
    """An answer other than success, in the shape of the API that was called."""

    def __init__(self, status: int, message: str, code: str = "") -> None:
        super().__init__(message)
        self.status, self.message, self.code = status, message, code


def access_token(token: str, sandbox_id: str) -> str:
    """The envd access token of one sandbox: only the daemon's token holder can make it."""
    return hmac.new(token.encode(), sandbox_id.encode(), hashlib.sha256).hexdigest()[:40]


def traffic_token(token: str, sandbox_id: str) -> str:
    """The token a request to one of a sandbox's ports carries (``e2b-traffic-access-token``)
    unless the sandbox was made with public traffic allowed."""
    return access_token(token, f"traffic:{sandbox_id}")


@dataclass(frozen=True)
class TemplateImage:
    """What a template name stands for: the local image and the limits it was built for."""

    image: str
    cpus: float | None = None
    memory_mb: int | None = None


class _Gate:
    """What every E2B route needs: the manager, the key, and the shapes of answers."""

    def __init__(self, manager: SandboxManager, token: str) -> None:
        self.manager, self.token = manager, token
        self.stand_ins = False
        """Whether sandboxes made without a network get the offline stand-ins."""
        self.domain: str | None = None
        """The domain E2B's ``get_host`` names ports under: ``{port}-{id}.{domain}``."""
        self.template_image: Callable[[str], TemplateImage | None] = lambda name: None
        """The image of a template built through the template routes (None: not one)."""
        self.expected = token.encode()
        self.pids = itertools.count(1000)
        self.processes: dict[tuple[str, int], _Process] = {}
        """The processes started through Start and not ended yet, by (sandbox, pid)."""

    def api_key(self, request: Request) -> None:
        given = request.headers.get("x-api-key", "")
        if not hmac.compare_digest(given.encode(), self.expected):
            raise _Failed(401, "the API key is wrong; set E2B_API_KEY to the rock daemon's token.")

    def sandbox_of(self, request: Request) -> str:
        """The sandbox an envd call is for, its access token checked."""
        sandbox_id = request.headers.get("e2b-sandbox-id", "")
        if not sandbox_id:
            raise _Failed(400, "no E2b-Sandbox-Id header names the sandbox.", "invalid_argument")
        given = request.headers.get("x-access-token", "")
        if not hmac.compare_digest(given.encode(), access_token(self.token, sandbox_id).encode()):
            raise _Failed(401, "the sandbox's access token is wrong.", "unauthenticated")
        try:
            state = self.manager.get(sandbox_id).state
        except _MISSING:
            raise _Failed(502, f"sandbox {sandbox_id} was not found", "unavailable") from None
        if state != "busy":
            raise _Failed(502, f"sandbox {sandbox_id} was not found ({state})", "unavailable")
        return sandbox_id

    def described(self, info: SandboxInfo) -> dict[str, Any]:
        template = info.labels.get(f"{LABEL}.template", "base")
        return {
            "templateID": template,
            "sandboxID": info.id,
            "clientID": self.manager.daemon_id,
            "envdVersion": ENVD_VERSION,
            "envdAccessToken": access_token(self.token, info.id),
            "trafficAccessToken": traffic_token(self.token, info.id),
            "alias": template,
            "domain": self.domain,
        }

    def listed(self, info: SandboxInfo) -> dict[str, Any]:
        ends = info.expires_at or (datetime.now(UTC) + timedelta(days=3650))
        short = {
            k: v for k, v in self.described(info).items() if k not in ("envdAccessToken", "domain")
        }
        return {
            **short,
            "startedAt": info.created_at.isoformat(),
            "endAt": ends.isoformat(),
            "cpuCount": max(1, round(info.spec.cpus)),
            "memoryMB": info.spec.memory_mb,
            "diskSizeMB": 0,
            "state": "paused" if info.state == "paused" else "running",
            "metadata": {k[len(META) :]: v for k, v in info.labels.items() if k.startswith(META)},
        }

    def page(self, rows: list[dict[str, Any]], request: Request) -> Response:
        """One page of a listing, filtered by the SDK's ``metadata`` and ``state`` queries,
        with ``x-next-token`` when more follow."""
        query = request.query_params
        wanted = _metadata_query(query.get("metadata", ""))
        states = (query.get("state") or "running,paused").split(",")
        rows = [r for r in rows if r["state"] in states]
        rows = [r for r in rows if all(r["metadata"].get(k) == v for k, v in wanted.items())]
        start = int(query.get("nextToken") or 0)
        limit = int(query.get("limit") or 0) or len(rows) or 1
        more = start + limit < len(rows)
        headers = {"x-next-token": str(start + limit)} if more else {}
        return JSONResponse(rows[start : start + limit], headers=headers)


def e2b_routes(
    app: FastAPI,
    manager: SandboxManager,
    token: str,
    *,
    stand_ins: bool = False,
    domain: str | None = None,
) -> _Gate:
    """Add the E2B routes to the daemon's ``app``, with envd's health check of a sandbox
    (the daemon's own ``/health`` answers the calls that name no sandbox)."""
    gate = _Gate(manager, token)
    gate.stand_ins, gate.domain = stand_ins, domain

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
            info = await run_in_threadpool(_running, gate.manager, sandbox_id)
            given = request.headers.get("e2b-traffic-access-token", "")
            wanted = traffic_token(gate.token, sandbox_id)
            public = info.labels.get(f"{LABEL}.public") == "1"
            if not public and not hmac.compare_digest(given.encode(), wanted.encode()):
                raise _Failed(
                    403,
                    f"sandbox {sandbox_id}'s ports need its traffic access token in the "
                    "e2b-traffic-access-token header (or a sandbox made with public traffic).",
                )
            try:
                return await forward(gate.manager, sandbox_id, port, request.url.path, request)
            except NothingListens as exc:
                raise _Failed(502, str(exc)) from None

        return await _rest(answer)

    @app.middleware("http")
    async def envd_health(request: Request, call_next: Callable[[Request], Any]) -> Response:
        """``Sandbox.is_running``: envd's ``GET /health`` of the sandbox the call names,
        204 while it runs and 502 (as E2B's proxy answers) once it is gone."""
        if request.url.path != "/health" or "e2b-sandbox-id" not in request.headers:
            response: Response = await call_next(request)
            return response
        try:
            await run_in_threadpool(gate.sandbox_of, request)
        except _Failed as failed:
            return JSONResponse(
                {"code": failed.status, "message": failed.message}, status_code=failed.status
            )
        return Response(status_code=204)

    _rest_routes(app, gate)
    _lifetime_routes(app, gate)
    _usage_routes(app, gate)
    _pause_routes(app, gate)
    _snapshot_routes(app, gate)
    _file_routes(app, gate)
    _filesystem_routes(app, gate)
    _filesystem_change_routes(app, gate)
    _process_routes(app, gate)
    _process_follow_routes(app, gate)
    _process_input_routes(app, gate)
    _watch_routes(app, gate)
    _watch_stream_route(app, gate)
    return gate


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
        return _connect_error(
            _Failed(501, f"rock's E2B API does not serve {what} of envd.", "unimplemented")
        )
    return JSONResponse(
        {"code": 501, "message": f"rock's E2B API does not serve {what}."}, status_code=501
    )


def _rest_routes(app: FastAPI, gate: _Gate) -> None:
    """Create, connect and list sandboxes."""

    @app.post("/v2/sandboxes", include_in_schema=False)
    async def create(request: Request) -> Response:
        async def answer() -> Response:
            gate.api_key(request)
            body = await _json(request)
            found = await run_in_threadpool(gate.template_image, str(body.get("templateID") or ""))
            spec = _spec_of(body, found)
            try:
                info = await run_in_threadpool(gate.manager.create, CreateSandboxRequest(spec=spec))
            except SandboxError as exc:  # an image that is not here, say
                raise _Failed(400, str(exc)) from None
            if gate.stand_ins and spec.network == "none":
                await run_in_threadpool(_give_stand_ins, gate.manager, info.id)
            return JSONResponse(gate.described(info), status_code=201)

        return await _rest(answer)

    @app.post("/v2/sandboxes/{sandbox_id}/connect", include_in_schema=False)
    async def connect(sandbox_id: str, request: Request) -> Response:
        async def answer() -> Response:
            gate.api_key(request)
            body = await _json(request)
            info = await run_in_threadpool(_running, gate.manager, sandbox_id, True)
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

        return await _rest(answer)

    @app.get("/v2/sandboxes", include_in_schema=False)
    async def list_(request: Request) -> Response:
        async def answer() -> Response:
            gate.api_key(request)
            infos = await run_in_threadpool(gate.manager.list, states=["busy", "paused"])
            return gate.page([gate.listed(i) for i in infos], request)

        return await _rest(answer)


def _lifetime_routes(app: FastAPI, gate: _Gate) -> None:
    """Inspect, kill and time out one sandbox."""

    @app.get("/sandboxes/{sandbox_id}", include_in_schema=False)
    async def info(sandbox_id: str, request: Request) -> Response:
        async def answer() -> Response:
            gate.api_key(request)
            found = await run_in_threadpool(_running, gate.manager, sandbox_id, True)
            return JSONResponse(
                {**gate.listed(found), "envdAccessToken": access_token(gate.token, found.id)}
            )

        return await _rest(answer)

    @app.delete("/sandboxes/{sandbox_id}", include_in_schema=False)
    async def kill(sandbox_id: str, request: Request) -> Response:
        async def answer() -> Response:
            gate.api_key(request)
            await run_in_threadpool(_running, gate.manager, sandbox_id, True)
            await run_in_threadpool(gate.manager.delete, sandbox_id, "killed through the E2B API")
            return Response(status_code=204)

        return await _rest(answer)

    @app.post("/sandboxes/{sandbox_id}/fork", include_in_schema=False)
    async def fork(sandbox_id: str, request: Request) -> Response:
        """``Sandbox.fork``: ``count`` sandboxes from one snapshot of this one's files (rock
        carries the file system, not the memory: see the manager's fork), each with the
        given ``timeout``; all start or none does."""

        async def answer() -> Response:
            gate.api_key(request)
            body = await _json(request)
            try:
                count = int(body.get("count") or 1)
                timeout = None if body.get("timeout") is None else float(body["timeout"])
            except (TypeError, ValueError):
                raise _Failed(
                    400, 'give count and timeout as numbers: {"count": 2, "timeout": 300}.'
                ) from None
            if not 1 <= count <= 20:
                raise _Failed(400, f"count must be between 1 and 20, not {count}.")
            await run_in_threadpool(_running, gate.manager, sandbox_id)
            try:
                made = await run_in_threadpool(gate.manager.fork, sandbox_id, count)
            except SandboxError as exc:
                raise _Failed(500, str(exc)) from None
            if timeout is not None:
                made = [
                    await run_in_threadpool(gate.manager.set_timeout, info.id, timeout)
                    for info in made
                ]
            return JSONResponse([{"sandbox": gate.described(i)} for i in made], status_code=201)

        return await _rest(answer)

    @app.post("/sandboxes/{sandbox_id}/timeout", include_in_schema=False)
    async def set_timeout(sandbox_id: str, request: Request) -> Response:
        async def answer() -> Response:
            gate.api_key(request)
            body = await _json(request)
            try:
                seconds = float(body["timeout"])
            except (KeyError, TypeError, ValueError):
                raise _Failed(400, 'give the timeout in seconds: {"timeout": 60}.') from None
            await run_in_threadpool(_running, gate.manager, sandbox_id)
            await run_in_threadpool(gate.manager.set_timeout, sandbox_id, seconds)
            return Response(status_code=204)

        return await _rest(answer)


def _usage_routes(app: FastAPI, gate: _Gate) -> None:
    """What a running sandbox uses, and its network."""

    @app.get("/sandboxes/{sandbox_id}/metrics", include_in_schema=False)
    async def metrics(sandbox_id: str, request: Request) -> Response:
        """``get_metrics``: one sample taken now (rock keeps no history of them), whatever
        ``start`` and ``end`` ask: CPU over half a second and memory from the sandbox's
        cgroup, disk from its root file system."""

        async def answer() -> Response:
            gate.api_key(request)
            info = await run_in_threadpool(_running, gate.manager, sandbox_id)
            probe = ExecRequest(command=["sh", "-c", _SAMPLE], timeout=30)
            done = await run_in_threadpool(gate.manager.exec, sandbox_id, probe)
            return JSONResponse([_metric(info, done.stdout_text)])

        return await _rest(answer)

    @app.put("/sandboxes/{sandbox_id}/network", include_in_schema=False)
    async def network(sandbox_id: str, request: Request) -> Response:
        """``update_network``: ``allow_internet_access`` opens or closes the sandbox's
        network as a whole (rock filters no egress: allow/deny lists and rules are refused
        in one sentence); a sandbox made closed has no network to open."""

        async def answer() -> Response:
            gate.api_key(request)
            body = await _json(request)
            filters = [k for k in _EGRESS if body.get(k)]
            if filters:
                raise _Failed(
                    400,
                    f"rock opens or closes a sandbox's network as a whole and filters no egress "
                    f"({', '.join(filters)}); give allow_internet_access only.",
                )
            await run_in_threadpool(_running, gate.manager, sandbox_id)
            if "allow_internet_access" in body:
                on = bool(body["allow_internet_access"])
                try:
                    await run_in_threadpool(gate.manager.set_network, sandbox_id, on)
                except SandboxError as exc:
                    raise _Failed(400, str(exc)) from None
            return Response(status_code=204)

        return await _rest(answer)


def _pause_routes(app: FastAPI, gate: _Gate) -> None:
    """Pause and resume: Docker's pause freezes the processes where they are, memory kept
    (E2B snapshots memory to disk instead); a paused sandbox does not expire."""

    @app.post("/sandboxes/{sandbox_id}/pause", include_in_schema=False)
    async def pause(sandbox_id: str, request: Request) -> Response:
        async def answer() -> Response:
            gate.api_key(request)
            info = await run_in_threadpool(_running, gate.manager, sandbox_id, True)
            if info.state == "paused":
                raise _Failed(409, f"sandbox {sandbox_id} is already paused")
            await run_in_threadpool(gate.manager.pause, sandbox_id)
            return Response(status_code=204)

        return await _rest(answer)

    @app.post("/sandboxes/{sandbox_id}/resume", include_in_schema=False)
    async def resume(sandbox_id: str, request: Request) -> Response:
        """The older resume call (the SDK's connect resumes too)."""

        async def answer() -> Response:
            gate.api_key(request)
            body = await _json(request)
            info = await run_in_threadpool(_running, gate.manager, sandbox_id, True)
            if info.state != "paused":
                raise _Failed(409, f"sandbox {sandbox_id} is not paused")
            seconds = body.get("timeout")
            ttl = float(seconds) if seconds is not None else DEFAULT_TIMEOUT_SEC
            info = await run_in_threadpool(gate.manager.resume, sandbox_id, ttl)
            return JSONResponse(gate.described(info), status_code=201)

        return await _rest(answer)


def _snapshot_routes(app: FastAPI, gate: _Gate) -> None:
    """Snapshots: a commit of the sandbox's file system as a local image, which
    ``Sandbox.create(template=snapshot_id)`` starts from (memory and processes are not kept:
    E2B's memory snapshots are not served)."""

    @app.post("/sandboxes/{sandbox_id}/snapshots", include_in_schema=False)
    async def snapshot(sandbox_id: str, request: Request) -> Response:
        async def answer() -> Response:
            gate.api_key(request)
            name = str((await _json(request)).get("name") or "")
            if name and not _SNAPSHOT_NAME.fullmatch(name):
                raise _Failed(
                    400,
                    f"snapshot name {name!r} is not allowed; use up to 60 letters, digits, "
                    "'.', '_' or '-'.",
                )
            await run_in_threadpool(_running, gate.manager, sandbox_id, True)
            tag = f"{SNAPSHOTS}:{sandbox_id}-{name or secrets.token_hex(6)}"
            await run_in_threadpool(gate.manager.snapshot, sandbox_id, tag)
            return JSONResponse({"snapshotID": tag, "names": [tag]}, status_code=201)

        return await _rest(answer)

    @app.get("/snapshots", include_in_schema=False)
    async def snapshots(request: Request) -> Response:
        async def answer() -> Response:
            gate.api_key(request)
            query = request.query_params
            of = query.get("sandboxID") or ""
            name = query.get("name") or ""
            tags = sorted(await run_in_threadpool(_snapshot_tags, gate.manager))
            tags = [
                t
                for t in tags
                if t.split(":", 1)[1].startswith(f"{of}-" if of else "")
                and (not name or t.endswith(f"-{name}"))
            ]
            start = int(query.get("nextToken") or 0)
            limit = int(query.get("limit") or 0) or len(tags) or 1
            more = start + limit < len(tags)
            rows = [{"snapshotID": t, "names": [t]} for t in tags[start : start + limit]]
            return JSONResponse(rows, headers={"x-next-token": str(start + limit)} if more else {})

        return await _rest(answer)

    @app.delete("/templates/{template_id}", include_in_schema=False)
    async def delete_snapshot(template_id: str, request: Request) -> Response:
        async def answer() -> Response:
            gate.api_key(request)
            if template_id not in await run_in_threadpool(_snapshot_tags, gate.manager):
                raise _Failed(404, f"snapshot {template_id!r} does not exist")
            try:
                await run_in_threadpool(gate.manager.remove_image, template_id)
            except SandboxConflict as exc:
                raise _Failed(409, str(exc)) from None
            return Response(status_code=204)

        return await _rest(answer)


def _snapshot_tags(manager: SandboxManager) -> set[str]:
    return {t for image in manager.images() for t in image.tags if t.startswith(f"{SNAPSHOTS}:")}


def _file_routes(app: FastAPI, gate: _Gate) -> None:
    """envd's plain HTTP file routes: read and write."""

    @app.get("/files", include_in_schema=False)
    async def read(request: Request) -> Response:
        async def answer() -> Response:
            sandbox_id = gate.sandbox_of(request)
            path = _path(request.query_params.get("path", ""))
            try:
                data = await run_in_threadpool(gate.manager.read_file, sandbox_id, path)
            except PathMissing:
                raise _Failed(404, f"path '{path}' does not exist") from None
            return Response(data, media_type="application/octet-stream")

        return await _rest(answer)

    @app.post("/files", include_in_schema=False)
    async def write(request: Request) -> Response:
        async def answer() -> Response:
            sandbox_id = gate.sandbox_of(request)
            files: list[tuple[str, bytes]] = []
            if request.headers.get("content-type", "").startswith("multipart/form-data"):
                form = await request.form()
                for part in form.getlist("file"):
                    if isinstance(part, str):
                        continue
                    files.append((_path(part.filename or ""), await part.read()))
            else:
                files.append((_path(request.query_params.get("path", "")), await request.body()))
            if not files:
                raise _Failed(400, "no file was sent; send a multipart field named 'file'.")
            user = request.query_params.get("username")
            written = []
            for path, data in files:
                await run_in_threadpool(gate.manager.write_file, sandbox_id, path, data, 0o644)
                if user and user != "root":
                    chown = ExecRequest(command=["chown", user, path], timeout=30)
                    await run_in_threadpool(gate.manager.exec, sandbox_id, chown)
                written.append({"name": posixpath.basename(path), "type": "file", "path": path})
            return JSONResponse(written)

        return await _rest(answer)


def _filesystem_routes(app: FastAPI, gate: _Gate) -> None:
    """envd's filesystem RPCs that read: ListDir, Stat."""

    @app.post("/filesystem.Filesystem/ListDir", include_in_schema=False)
    async def list_dir(request: Request) -> Response:
        async def answer() -> Response:
            sandbox_id = gate.sandbox_of(request)
            body = await _json(request)
            path = _path(str(body.get("path", "")))
            depth = int(body.get("depth") or 1)
            entries = await run_in_threadpool(_entries, gate.manager, sandbox_id, path, depth)
            return JSONResponse({"entries": entries})

        return await _rpc(answer)

    @app.post("/filesystem.Filesystem/Stat", include_in_schema=False)
    async def stat(request: Request) -> Response:
        async def answer() -> Response:
            sandbox_id = gate.sandbox_of(request)
            path = _path(str((await _json(request)).get("path", "")))
            entries = await run_in_threadpool(_entries, gate.manager, sandbox_id, path, 0)
            return JSONResponse({"entry": entries[0]})

        return await _rpc(answer)


def _filesystem_change_routes(app: FastAPI, gate: _Gate) -> None:
    """envd's filesystem RPCs that change: MakeDir, Move, Remove."""

    @app.post("/filesystem.Filesystem/Move", include_in_schema=False)
    async def move(request: Request) -> Response:
        """``files.rename``: the source must exist, and the destination's folder; the
        destination is replaced as ``mv`` replaces it."""

        async def answer() -> Response:
            sandbox_id = gate.sandbox_of(request)
            body = await _json(request)
            source = _path(str(body.get("source", "")))
            target = _path(str(body.get("destination", "")))
            script = 'test -e "$1" -o -L "$1" || exit 3; mv -T -- "$1" "$2"'
            done = await run_in_threadpool(
                gate.manager.exec,
                sandbox_id,
                ExecRequest(command=["sh", "-c", script, "mv", source, target], timeout=60),
            )
            if done.exit_code == 3:
                raise _Failed(404, f"path '{source}' does not exist", "not_found")
            if done.exit_code != 0:
                raise _Failed(400, done.stderr_text.strip() or "mv failed", "invalid_argument")
            entries = await run_in_threadpool(_entries, gate.manager, sandbox_id, target, 0)
            return JSONResponse({"entry": entries[0]})

        return await _rpc(answer)

    @app.post("/filesystem.Filesystem/MakeDir", include_in_schema=False)
    async def make_dir(request: Request) -> Response:
        async def answer() -> Response:
            sandbox_id, path, made = await _on_path(
                gate, request, "test -e {p} && exit 3; mkdir -p {p}"
            )
            if made.exit_code == 3:
                raise _Failed(409, f"path '{path}' already exists", "already_exists")
            if made.exit_code != 0:
                raise _Failed(400, made.stderr_text.strip() or "mkdir failed", "invalid_argument")
            entries = await run_in_threadpool(_entries, gate.manager, sandbox_id, path, 0)
            return JSONResponse({"entry": entries[0]})

        return await _rpc(answer)

    @app.post("/filesystem.Filesystem/Remove", include_in_schema=False)
    async def remove(request: Request) -> Response:
        async def answer() -> Response:
            _, path, done = await _on_path(
                gate, request, "test -e {p} -o -L {p} || exit 3; rm -rf {p}"
            )
            if done.exit_code == 3:
                raise _Failed(404, f"path '{path}' does not exist", "not_found")
            return JSONResponse({})

        return await _rpc(answer)


@dataclass
class _Process:
    """A process started through Start: what it was started as, and its events so far (its
    output and its end), for every stream that follows it (Start's, Connect's)."""

    config: dict[str, Any]
    tag: str | None
    stdin: str | None = None
    """The FIFO its stdin reads (started with ``stdin=True``; see :data:`_STDIN_HOLDER`)."""
    pty: bool = False
    """Started in a terminal: its output is the terminal's (see :data:`_PTY_HOLDER`)."""
    events: list[tuple[str, Any]] = field(default_factory=list)
    followers: list[asyncio.Queue[tuple[str, Any]]] = field(default_factory=list)

    def publish(self, kind: str, value: Any) -> None:
        self.events.append((kind, value))
        for queue in self.followers:
            queue.put_nowait((kind, value))

    def follow(self) -> asyncio.Queue[tuple[str, Any]]:
        queue: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()
        for event in self.events:  # what it printed before, first
            queue.put_nowait(event)
        self.followers.append(queue)
        return queue


_STDIN_HOLDER = r"""
f=$1; shift
mkfifo -m 600 "$f" || exit 126
echo $$ > "$f.pid"
exec 3<>"$f"  # a writer held open: the command sees no end of input between two inputs
trap 'exec 3>&-' USR1  # CloseStdin: the last writer goes, the command reads its end
"$@" <"$f" 3>&- &
child=$!
while :; do wait "$child"; rc=$?; kill -0 "$child" 2>/dev/null || break; done
rm -f "$f" "$f.pid"
exit $rc
"""
"""How a command started with ``stdin=True`` runs: reading a FIFO in the sandbox, which
each SendInput appends to (a command of its own, so any backend serves it) and CloseStdin
ends."""
_PTY_HOLDER = r"""
f=$1 rows=$2 cols=$3; shift 3
mkfifo -m 600 "$f" || exit 126
echo $$ > "$f.pid"
exec 3<>"$f"
trap 'exec 3>&-' USR1
cmd=$(printf '%q ' "$@")
script -qfec "tty > $f.tty; stty rows $rows cols $cols; exec $cmd" /dev/null <"$f" 3>&- &
child=$!
while :; do wait "$child"; rc=$?; kill -0 "$child" 2>/dev/null || break; done
rm -f "$f" "$f.pid" "$f.tty"
exit $rc
"""
"""How a pty runs: the program in a terminal ``script`` makes (util-linux, in any Debian
image), its input the FIFO as above, its size set with ``stty`` (Update resizes it the same
way, and the kernel tells the program with SIGWINCH)."""


def _process_input_routes(app: FastAPI, gate: _Gate) -> None:
    """envd's process RPCs that feed a command's stdin: SendInput and CloseStdin."""

    @app.post("/process.Process/SendInput", include_in_schema=False)
    async def send_input(request: Request) -> Response:
        async def answer() -> Response:
            body = await _json(request)
            sandbox_id, process = _fed(gate, request, body)
            given = body.get("input") or {}
            data = base64.b64decode(str(given.get("stdin") or given.get("pty") or ""))
            feed = ExecRequest(
                command=["sh", "-c", 'cat >> "$1"', "rock-input", str(process.stdin)],
                stdin=data,
                timeout=30,
            )
            await run_in_threadpool(gate.manager.exec, sandbox_id, feed)
            return JSONResponse({})

        return await _rpc(answer)

    @app.post("/process.Process/Update", include_in_schema=False)
    async def update(request: Request) -> Response:
        """``pty.resize``: the terminal's rows and columns."""

        async def answer() -> Response:
            body = await _json(request)
            sandbox_id, process = _fed(gate, request, body)
            size = (body.get("pty") or {}).get("size") or {}
            if not process.pty or not size:
                raise _Failed(400, "only a pty's size can be updated.", "invalid_argument")
            rows, cols = int(size.get("rows") or 24), int(size.get("cols") or 80)
            resize = ExecRequest(
                command=["sh", "-c", f'stty -F "$(cat "$1.tty")" rows {rows} cols {cols}',
                         "rock-resize", str(process.stdin)],
                timeout=30,
            )  # fmt: skip
            await run_in_threadpool(gate.manager.exec, sandbox_id, resize)
            return JSONResponse({})

        return await _rpc(answer)

    @app.post("/process.Process/CloseStdin", include_in_schema=False)
    async def close_stdin(request: Request) -> Response:
        async def answer() -> Response:
            sandbox_id, process = _fed(gate, request, await _json(request))
            close = ExecRequest(
                command=[
                    "sh",
                    "-c",
                    'kill -USR1 "$(cat "$1.pid")"',
                    "rock-close",
                    str(process.stdin),
                ],
                timeout=30,
            )
            await run_in_threadpool(gate.manager.exec, sandbox_id, close)
            return JSONResponse({})

        return await _rpc(answer)


def _fed(gate: _Gate, request: Request, body: dict[str, Any]) -> tuple[str, _Process]:
    """The sandbox and the running process an input call names, started with stdin."""
    sandbox_id = gate.sandbox_of(request)
    pid = int((body.get("process") or {}).get("pid") or 0)
    process = gate.processes.get((sandbox_id, pid))
    if process is None:
        raise _Failed(404, f"process with pid {pid} not found", "not_found")
    if process.stdin is None:
        raise _Failed(
            400,
            f"process {pid} was started without stdin; start it with stdin=True to send it input.",
            "invalid_argument",
        )
    return sandbox_id, process


_SNAPSHOT = (
    'p=$1; [ -d "$p" ] || exit 3; '
    'find "$p" -mindepth 1 $2 -printf "%y %s %T@ %m %P\\n" 2>/dev/null; exit 0'
)
"""What a watch compares: each entry under the folder (to depth 1 unless recursive) with its
kind, size, modification time and mode."""


@dataclass
class _Watch:
    """A folder watched by polling: its entries when last looked at."""

    sandbox_id: str
    path: str
    recursive: bool
    seen: dict[str, tuple[str, str, str]] = field(default_factory=dict)


def _look(gate: _Gate, watch: _Watch) -> list[dict[str, Any]]:
    """The events since the last look (CREATE, WRITE, CHMOD, REMOVE; a rename shows as a
    REMOVE and a CREATE, as polling sees it), names relative to the folder."""
    depth = "" if watch.recursive else "-maxdepth 1"
    done = gate.manager.exec(
        watch.sandbox_id,
        ExecRequest(command=["sh", "-c", _SNAPSHOT, "rock-watch", watch.path, depth], timeout=30),
    )
    if done.exit_code == 3:
        raise _Failed(404, f"path '{watch.path}' does not exist", "not_found")
    now: dict[str, tuple[str, str, str]] = {}
    for line in done.stdout_text.splitlines():
        parts = line.split(" ", 4)
        if len(parts) == 5:
            now[parts[4]] = (parts[1], parts[2], parts[3])
    events = []
    for name, (size, mtime, mode) in sorted(now.items()):
        before = watch.seen.get(name)
        if before is None:
            events.append({"name": name, "type": "EVENT_TYPE_CREATE"})
        elif before[:2] != (size, mtime):
            events.append({"name": name, "type": "EVENT_TYPE_WRITE"})
        elif before[2] != mode:
            events.append({"name": name, "type": "EVENT_TYPE_CHMOD"})
    events += [{"name": n, "type": "EVENT_TYPE_REMOVE"} for n in sorted(watch.seen.keys() - now)]
    watch.seen = now
    return events


def _watch_routes(app: FastAPI, gate: _Gate) -> None:
    """envd's directory watches, by polling the folder's listing: the sync SDK's
    CreateWatcher, GetWatcherEvents and RemoveWatcher."""
    watches: dict[str, _Watch] = {}

    @app.post("/filesystem.Filesystem/CreateWatcher", include_in_schema=False)
    async def create_watcher(request: Request) -> Response:
        async def answer() -> Response:
            sandbox_id = gate.sandbox_of(request)
            body = await _json(request)
            watch = _Watch(
                sandbox_id, _path(str(body.get("path", ""))), bool(body.get("recursive"))
            )
            await run_in_threadpool(_look, gate, watch)  # the starting point
            watcher_id = f"w-{secrets.token_hex(8)}"
            watches[watcher_id] = watch
            return JSONResponse({"watcherId": watcher_id})

        return await _rpc(answer)

    @app.post("/filesystem.Filesystem/GetWatcherEvents", include_in_schema=False)
    async def watcher_events(request: Request) -> Response:
        async def answer() -> Response:
            sandbox_id = gate.sandbox_of(request)
            watch = watches.get(str((await _json(request)).get("watcherId") or ""))
            if watch is None or watch.sandbox_id != sandbox_id:
                raise _Failed(404, "watcher not found", "not_found")
            return JSONResponse({"events": await run_in_threadpool(_look, gate, watch)})

        return await _rpc(answer)

    @app.post("/filesystem.Filesystem/RemoveWatcher", include_in_schema=False)
    async def remove_watcher(request: Request) -> Response:
        async def answer() -> Response:
            sandbox_id = gate.sandbox_of(request)
            key = str((await _json(request)).get("watcherId") or "")
            if key not in watches or watches[key].sandbox_id != sandbox_id:
                raise _Failed(404, "watcher not found", "not_found")
            del watches[key]
            return JSONResponse({})

        return await _rpc(answer)


def _watch_stream_route(app: FastAPI, gate: _Gate) -> None:
    """The async SDK's directory watch: the WatchDir stream."""

    @app.post("/filesystem.Filesystem/WatchDir", include_in_schema=False)
    async def watch_dir(request: Request) -> Response:
        try:
            sandbox_id = gate.sandbox_of(request)
            body = _unenvelope(await request.body())
            watch = _Watch(
                sandbox_id, _path(str(body.get("path", ""))), bool(body.get("recursive"))
            )
            await run_in_threadpool(_look, gate, watch)
        except _Failed as failed:
            return _connect_error(failed)

        async def events() -> AsyncIterator[bytes]:
            yield _envelope({"start": {}})  # (a oneof: its member is the field)
            while True:
                await asyncio.sleep(WATCH_POLL_SEC)
                try:
                    found = await run_in_threadpool(_look, gate, watch)
                except (_Failed, RockError) as exc:
                    yield _end_of_stream("not_found", str(exc))
                    return
                for event in found:
                    yield _envelope({"filesystem": event})
                if not found:
                    yield _envelope({"keepalive": {}})

        return StreamingResponse(events(), media_type="application/connect+json")


def _process_follow_routes(app: FastAPI, gate: _Gate) -> None:
    """envd's process RPCs about processes already started: List and Connect."""

    @app.post("/process.Process/List", include_in_schema=False)
    async def list_processes(request: Request) -> Response:
        """``commands.list``: the processes started through Start that still run."""

        async def answer() -> Response:
            sandbox_id = gate.sandbox_of(request)
            rows = [
                {"config": p.config, "pid": pid, **({"tag": p.tag} if p.tag else {})}
                for (box, pid), p in sorted(gate.processes.items())
                if box == sandbox_id
            ]
            return JSONResponse({"processes": rows})

        return await _rpc(answer)

    @app.post("/process.Process/Connect", include_in_schema=False)
    async def connect(request: Request) -> Response:
        """``commands.connect(pid)``: the process's output so far, then as it comes, then
        its end, as Start streams them."""
        try:
            sandbox_id = gate.sandbox_of(request)
            selector = _unenvelope(await request.body()).get("process") or {}
            pid = int(selector.get("pid") or 0)
            process = gate.processes.get((sandbox_id, pid))
            if process is None:
                raise _Failed(404, f"process with pid {pid} not found", "not_found")
        except _Failed as failed:
            return _connect_error(failed)
        except (ValueError, TypeError) as exc:
            return _connect_error(
                _Failed(400, f"the request is not valid: {exc}", "invalid_argument")
            )
        return StreamingResponse(
            _follow(process.follow(), sandbox_id, pid, None),
            media_type="application/connect+json",
        )


def _process_routes(app: FastAPI, gate: _Gate) -> None:
    """envd's process RPCs that start and stop: Start (streamed) and SendSignal."""

    @app.post("/process.Process/SendSignal", include_in_schema=False)
    async def send_signal(request: Request) -> Response:
        async def answer() -> Response:
            sandbox_id = gate.sandbox_of(request)
            body = await _json(request)
            pid = int((body.get("process") or {}).get("pid") or 0)
            stopped = await run_in_threadpool(gate.manager.interrupt, sandbox_id, f"e2b-{pid}")
            for _ in range(30):  # a process just started may not be running in the sandbox yet
                if stopped or (sandbox_id, pid) not in gate.processes:
                    break
                await asyncio.sleep(0.1)
                stopped = await run_in_threadpool(gate.manager.interrupt, sandbox_id, f"e2b-{pid}")
            if not stopped:
                raise _Failed(404, f"process with pid {pid} not found", "not_found")
            return JSONResponse({})

        return await _rpc(answer)

    @app.post("/process.Process/Start", include_in_schema=False)
    async def start(request: Request) -> Response:
        try:
            sandbox_id = gate.sandbox_of(request)
            message = _unenvelope(await request.body())
            config = message.get("process") or {}
            argv = [str(config.get("cmd") or "")] + [str(a) for a in config.get("args") or []]
            if not argv[0]:
                raise _Failed(400, "the process has no cmd.", "invalid_argument")
            given = argv
            pid = next(gate.pids)
            pty = message.get("pty")
            fifo = f"/tmp/.rock-e2b-stdin-{pid}" if message.get("stdin") or pty else None
            if pty:  # a terminal (script's), reading a FIFO that SendInput writes
                size = pty.get("size") or {}
                rows, cols = str(int(size.get("rows") or 24)), str(int(size.get("cols") or 80))
                argv = ["bash", "-c", _PTY_HOLDER, "rock-pty", str(fifo), rows, cols, *argv]
            elif fifo is not None:  # the command reads a FIFO that SendInput writes
                argv = ["bash", "-c", _STDIN_HOLDER, "rock-stdin", fifo, *argv]
            limit = request.headers.get("connect-timeout-ms")
            exec_request = ExecRequest(
                command=argv,
                env={str(k): str(v) for k, v in (config.get("envs") or {}).items()},
                cwd=config.get("cwd") or None,
                user=_user(request),
                timeout=int(limit) / 1000 if limit and int(limit) > 0 else None,
                tag=f"e2b-{pid}",
            )
        except _Failed as failed:
            return _connect_error(failed)
        except (ValueError, ValidationError) as exc:
            return _connect_error(
                _Failed(400, f"the request is not valid: {exc}", "invalid_argument")
            )
        started = {
            "cmd": given[0],
            "args": given[1:],
            "envs": exec_request.env,
            **({"cwd": exec_request.cwd} if exec_request.cwd else {}),
        }
        process = _Process(
            config=started, tag=message.get("tag") or None, stdin=fifo, pty=bool(pty)
        )
        return StreamingResponse(
            _process_events(gate, sandbox_id, exec_request, pid, process),
            media_type="application/connect+json",
        )


async def _on_path(gate: _Gate, request: Request, script: str) -> tuple[str, str, ExecResult]:
    """Run ``script`` (``{p}`` the request's quoted ``path``) in the call's sandbox: the
    sandbox, the path and what the script did."""
    sandbox_id = gate.sandbox_of(request)
    path = _path(str((await _json(request)).get("path", "")))
    command = script.format(p=shlex.quote(path))
    done = await run_in_threadpool(
        gate.manager.exec, sandbox_id, ExecRequest(command=command, timeout=60)
    )
    return sandbox_id, path, done


async def _process_events(
    gate: _Gate, sandbox_id: str, request: ExecRequest, pid: int, process: _Process
) -> AsyncIterator[bytes]:
    """Start's Connect stream of one process: start, its output as it comes, its end (the
    same events go to whoever connects to it meanwhile)."""
    manager = gate.manager
    loop = asyncio.get_running_loop()

    def publish(kind: str, value: Any) -> None:
        process.publish(kind, value)
        if kind in ("end", "failed"):
            gate.processes.pop((sandbox_id, pid), None)

    out = "pty" if process.pty else "stdout"

    def on_output(stream: int, data: bytes) -> None:
        loop.call_soon_threadsafe(publish, out if stream == 1 else "stderr", data)

    def work() -> None:
        try:
            result = manager.exec(sandbox_id, request, on_output)
        except Exception as exc:  # the sandbox's failure travels as the stream's error
            loop.call_soon_threadsafe(publish, "failed", exc)
        else:
            loop.call_soon_threadsafe(publish, "end", result)

    gate.processes[(sandbox_id, pid)] = process
    queue = process.follow()
    # a client that goes away leaves the command running, as E2B does
    loop.run_in_executor(None, work)
    async for chunk in _follow(queue, sandbox_id, pid, request.timeout):
        yield chunk


async def _follow(
    queue: asyncio.Queue[tuple[str, Any]], sandbox_id: str, pid: int, timeout: float | None
) -> AsyncIterator[bytes]:
    """The Connect events of a followed process."""
    yield _envelope({"event": {"start": {"pid": pid}}})
    while True:
        kind, value = await queue.get()
        if kind in ("stdout", "stderr", "pty"):
            data = base64.b64encode(value).decode()
            yield _envelope({"event": {"data": {kind: data}}})
        elif kind == "end":
            if value.timed_out:
                yield _end_of_stream(
                    "deadline_exceeded",
                    f"the command ran past its timeout of {timeout or 0:g} s and was killed",
                )
                return
            code = value.exit_code
            end: dict[str, Any] = {
                "exitCode": code,
                "exited": True,
                "status": f"exit status {code}",
            }
            if code != 0:
                end["error"] = f"exit status {code}"
            yield _envelope({"event": {"end": end}})
            yield _end_of_stream()
            return
        else:
            missing = isinstance(value, _MISSING)
            yield _end_of_stream(
                "unavailable" if missing else "internal",
                f"sandbox {sandbox_id} was not found" if missing else str(value),
            )
            return


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
        raise _Failed(400, f"the sandbox cannot be made as asked: {exc}") from None


def _envelope(message: dict[str, Any], flags: int = 0) -> bytes:
    data = json.dumps(message, separators=(",", ":")).encode()
    return struct.pack(">BI", flags, len(data)) + data


def _end_of_stream(code: str = "", message: str = "") -> bytes:
    body: dict[str, Any] = {"error": {"code": code, "message": message}} if code else {}
    return _envelope(body, flags=0x02)


def _unenvelope(body: bytes) -> dict[str, Any]:
    if len(body) < 5:
        raise _Failed(400, "the request has no message envelope.", "invalid_argument")
    flags, size = struct.unpack(">BI", body[:5])
    if flags & 0x01:
        raise _Failed(400, "compressed messages are not accepted.", "invalid_argument")
    message = json.loads(body[5 : 5 + size] or b"{}")
    if not isinstance(message, dict):
        raise _Failed(400, "the message is not a JSON object.", "invalid_argument")
    return message


async def _json(request: Request) -> dict[str, Any]:
    raw = await request.body()
    if not raw:
        return {}
    try:
        data = json.loads(raw)
    except json.JSONDecodeError:
        raise _Failed(400, "the body is not JSON.", "invalid_argument") from None
    if not isinstance(data, dict):
        raise _Failed(400, "the body is not a JSON object.", "invalid_argument")
    return data


def _path(path: str) -> str:
    if not path.startswith("/"):
        raise _Failed(
            400, f"path '{path}' is not absolute; give an absolute path.", "invalid_argument"
        )
    return posixpath.normpath(path)


def _user(request: Request) -> str | None:
    """The user of an envd call: ``Authorization: Basic base64("<user>:")``."""
    header = request.headers.get("authorization", "")
    if not header.lower().startswith("basic "):
        return None
    try:
        decoded = base64.b64decode(header[6:]).decode()
    except (ValueError, UnicodeDecodeError):
        raise _Failed(
            401, "the Authorization header is not valid Basic.", "unauthenticated"
        ) from None
    user = decoded.partition(":")[0]
    return None if user in ("", "root") else user


def _metadata_query(raw: str) -> dict[str, str]:
    """The SDK's metadata filter: ``k=v&k2=v2``, each key and value quoted once more."""
    return {unquote(k): unquote(v) for k, v in parse_qsl(raw)}


def _give_stand_ins(manager: SandboxManager, sandbox_id: str) -> None:
    """rock bench's offline verifier toolchain in the sandbox, importable and first on a
    login shell's PATH (the SDK runs commands with ``bash -l``)."""
    manager.put_archive(sandbox_id, toolchain.TOOLCHAIN_DIR, toolchain.archive())
    profile = f'export PATH="{toolchain.TOOLCHAIN_DIR}/bin:$PATH"\n'.encode()
    manager.write_file(sandbox_id, "/etc/profile.d/rock-stand-ins.sh", profile, 0o644)
    manager.exec(sandbox_id, ExecRequest(command=toolchain.PTH_SETUP, timeout=60))


def _running(manager: SandboxManager, sandbox_id: str, paused_too: bool = False) -> SandboxInfo:
    """The sandbox, in use (or paused, with ``paused_too``); E2B's 404 otherwise."""
    try:
        info = manager.get(sandbox_id)
    except _MISSING:
        raise _Failed(
            404, f"sandbox \"{sandbox_id}\" doesn't exist or you don't have access to it"
        ) from None
    if info.state != "busy" and not (paused_too and info.state == "paused"):
        raise _Failed(404, f'sandbox "{sandbox_id}" is not running ({info.state})')
    return info


_SAMPLE = (
    "c=/sys/fs/cgroup; cpu() { if [ -r $c/cpu.stat ]; then "
    "echo $(( $(sed -n 's/^usage_usec //p' $c/cpu.stat) * 1000 )); "
    "else cat $c/cpuacct/cpuacct.usage; fi 2>/dev/null; }; "
    "u1=$(cpu); t1=$(date +%s%N); sleep 0.5; u2=$(cpu); t2=$(date +%s%N); "
    "m=$(cat $c/memory.current || cat $c/memory/memory.usage_in_bytes) 2>/dev/null; "
    "f=$(sed -n 's/^file //p' $c/memory.stat || sed -n 's/^cache //p' $c/memory/memory.stat) "
    "2>/dev/null; "
    'echo "${u1:-0} $t1 ${u2:-0} $t2 ${m:-0} ${f:-0} $(df -B1 --output=used,size / | tail -1)"'
)
"""A sandbox's usage, read inside it from its cgroup (v2, or v1's cpuacct and memory): CPU
nanoseconds and the clock twice half a second apart, memory in use and of it the page
cache, then the root file system's used and size."""


def _metric(info: SandboxInfo, sample: str) -> dict[str, Any]:
    """E2B's SandboxMetric from one :data:`_SAMPLE` (zeros where the sandbox has no
    cgroup files to read)."""
    try:
        u1, t1, u2, t2, mem, cache, used, size = (int(x) for x in sample.split()[:8])
    except ValueError:
        u1 = t1 = u2 = t2 = mem = cache = used = size = 0
    cpus = max(1, round(info.spec.cpus))
    busy = (u2 - u1) / max(t2 - t1, 1) / cpus * 100
    now = datetime.now(UTC)
    return {
        "timestamp": now.isoformat(),
        "timestampUnix": int(now.timestamp()),
        "cpuCount": cpus,
        "cpuUsedPct": round(min(max(busy, 0.0), 100.0), 2),
        "memUsed": mem,
        "memTotal": info.spec.memory_mb * 1024 * 1024,
        "memCache": cache,
        "diskUsed": used,
        "diskTotal": size,
    }


_EGRESS = ("allowOut", "denyOut", "rules", "egressProxy", "dnsServers")
"""The egress filters of E2B's network update, which rock does not serve."""
_TYPES = {"f": "FILE_TYPE_FILE", "d": "FILE_TYPE_DIRECTORY", "l": "FILE_TYPE_SYMLINK"}
_FIND = (
    'p={path}; [ -e "$p" ] || [ -L "$p" ] || exit 3; '
    'find "$p" -mindepth {low} -maxdepth {high} '
    "-printf '%y\\t%s\\t%m\\t%u\\t%g\\t%T@\\t%l\\t%M\\t%p\\n' 2>/dev/null; exit 0"
)


def _entries(
    manager: SandboxManager, sandbox_id: str, path: str, depth: int
) -> list[dict[str, Any]]:
    """EntryInfo objects of ``path``'s tree to ``depth`` (0: the path itself)."""
    low, high = (0, 0) if depth == 0 else (1, depth)
    script = _FIND.format(path=shlex.quote(path), low=low, high=high)
    done = manager.exec(sandbox_id, ExecRequest(command=script, timeout=60))
    if done.exit_code == 3:
        raise _Failed(404, f"path '{path}' does not exist", "not_found")
    entries = []
    for line in done.stdout_text.splitlines():
        kind, size, mode, owner, group, mtime, target, perms, full = line.split("\t", 8)
        mode_bits = int(mode, 8) | (1 << 31 if kind == "d" else 0)
        entry: dict[str, Any] = {
            "name": posixpath.basename(full) or full,
            "type": _TYPES.get(kind, "FILE_TYPE_FILE"),
            "path": full,
            "size": int(size),
            "mode": mode_bits,
            "permissions": perms,
            "owner": owner,
            "group": group,
            "modifiedTime": datetime.fromtimestamp(float(mtime), UTC)
            .isoformat()
            .replace("+00:00", "Z"),
        }
        if kind == "l":
            entry["isSymlink"] = True
            entry["symlinkTarget"] = target
        entries.append(entry)
    return entries


async def _rest(answer: Callable[[], Any]) -> Response:
    """Run a REST route: its failures as E2B's ``{"code", "message"}``."""
    try:
        response: Response = await answer()
        return response
    except _Failed as failed:
        status, message = failed.status, failed.message
    except PoolExhausted as exc:
        status, message = 429, str(exc)
    except ShuttingDown as exc:
        status, message = 503, str(exc)
    except _MISSING as exc:
        status, message = 404, str(exc)
    except RockError as exc:
        status, message = 500, str(exc)
    headers = {"should-retry": "false"} if status in (429, 502, 503, 504) else {}
    return JSONResponse({"code": status, "message": message}, status_code=status, headers=headers)


async def _rpc(answer: Callable[[], Any]) -> Response:
    """Run a unary Connect RPC: its failures as Connect's ``{"code", "message"}``."""
    try:
        response: Response = await answer()
        return response
    except _Failed as failed:
        return _connect_error(failed)
    except _MISSING as exc:
        return _connect_error(_Failed(503, str(exc), "unavailable"))
    except RockError as exc:
        return _connect_error(_Failed(500, str(exc), "internal"))


def _connect_error(failed: _Failed) -> Response:
    code = failed.code or {404: "not_found", 401: "unauthenticated"}.get(failed.status, "internal")
    return JSONResponse(
        {"code": code, "message": failed.message}, status_code=_CONNECT_STATUS.get(code, 500)
    )
