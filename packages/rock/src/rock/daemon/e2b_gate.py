"""What every E2B route shares: the gate a call passes (the API key, a sandbox's access and
traffic tokens), the state it reaches (the manager, the processes started through envd), and
the shapes of answers (E2B's REST errors; Connect's envelopes and errors).

:mod:`rock.daemon.e2b` (the REST API, with :mod:`~rock.daemon.e2b_usage` and
:mod:`~rock.daemon.e2b_snapshots`), :mod:`rock.daemon.e2b_envd` and
:mod:`rock.daemon.e2b_processes` (the in-sandbox API) and :mod:`rock.daemon.e2b_templates`
(template builds) each import what they need from here, :func:`running` among it.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import itertools
import json
import logging
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import parse_qsl, unquote

from fastapi import Request, Response
from fastapi.responses import JSONResponse

from rock.backends.base import SandboxNotFound
from rock.daemon.manager import SandboxManager
from rock.errors import PoolExhausted, RockError, ShuttingDown
from rock.models import SandboxInfo
from rock.store import UnknownSandbox

log = logging.getLogger("rock.daemon")
ENVD_VERSION = "0.5.7"
"""The envd version reported: commands without stdin, uploads as octet-stream."""
LABEL = "dev.ale.rock.e2b"
META = "e2b.metadata."
"""Labels holding a sandbox's E2B metadata, one per key."""
MISSING = (SandboxNotFound, UnknownSandbox)
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


class Failed(Exception):
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


class Gate:
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
        self.processes: dict[tuple[str, int], Process] = {}
        """The processes started through Start and not ended yet, by (sandbox, pid)."""

    def api_key(self, request: Request) -> None:
        given = request.headers.get("x-api-key", "")
        if not hmac.compare_digest(given.encode(), self.expected):
            raise Failed(401, "the API key is wrong; set E2B_API_KEY to the rock daemon's token.")

    def sandbox_of(self, request: Request) -> str:
        """The sandbox an envd call is for, its access token checked."""
        sandbox_id = request.headers.get("e2b-sandbox-id", "")
        if not sandbox_id:
            raise Failed(400, "no E2b-Sandbox-Id header names the sandbox.", "invalid_argument")
        given = request.headers.get("x-access-token", "")
        if not hmac.compare_digest(given.encode(), access_token(self.token, sandbox_id).encode()):
            raise Failed(401, "the sandbox's access token is wrong.", "unauthenticated")
        try:
            state = self.manager.get(sandbox_id).state
        except MISSING:
            raise Failed(502, f"sandbox {sandbox_id} was not found", "unavailable") from None
        if state != "busy":
            raise Failed(502, f"sandbox {sandbox_id} was not found ({state})", "unavailable")
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
        wanted = metadata_query(query.get("metadata", ""))
        states = (query.get("state") or "running,paused").split(",")
        rows = [r for r in rows if r["state"] in states]
        rows = [r for r in rows if all(r["metadata"].get(k) == v for k, v in wanted.items())]
        start = int(query.get("nextToken") or 0)
        limit = int(query.get("limit") or 0) or len(rows) or 1
        more = start + limit < len(rows)
        headers = {"x-next-token": str(start + limit)} if more else {}
        return JSONResponse(rows[start : start + limit], headers=headers)


@dataclass
class Process:
    """A process started through Start: what it was started as, and its events so far (its
    output and its end), for every stream that follows it (Start's, Connect's)."""

    config: dict[str, Any]
    tag: str | None
    stdin: str | None = None
    """The FIFO its stdin reads (started with ``stdin=True``; see ``_STDIN_HOLDER`` in :mod:`rock.daemon.e2b_envd`)."""
    pty: bool = False
    """Started in a terminal: its output is the terminal's (see ``_PTY_HOLDER`` there)."""
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


def envelope(message: dict[str, Any], flags: int = 0) -> bytes:
    data = json.dumps(message, separators=(",", ":")).encode()
    return struct.pack(">BI", flags, len(data)) + data


def end_of_stream(code: str = "", message: str = "") -> bytes:
    body: dict[str, Any] = {"error": {"code": code, "message": message}} if code else {}
    return envelope(body, flags=0x02)


def unenvelope(body: bytes) -> dict[str, Any]:
    if len(body) < 5:
        raise Failed(400, "the request has no message envelope.", "invalid_argument")
    flags, size = struct.unpack(">BI", body[:5])
    if flags & 0x01:
        raise Failed(400, "compressed messages are not accepted.", "invalid_argument")
    message = json.loads(body[5 : 5 + size] or b"{}")
    if not isinstance(message, dict):
        raise Failed(400, "the message is not a JSON object.", "invalid_argument")
    return message


async def read_json(request: Request) -> dict[str, Any]:
    raw = await request.body()
    if not raw:
        return {}
    try:
        data = json.loads(raw)
    except json.JSONDecodeError:
        raise Failed(400, "the body is not JSON.", "invalid_argument") from None
    if not isinstance(data, dict):
        raise Failed(400, "the body is not a JSON object.", "invalid_argument")
    return data


def metadata_query(raw: str) -> dict[str, str]:
    """The SDK's metadata filter: ``k=v&k2=v2``, each key and value quoted once more."""
    return {unquote(k): unquote(v) for k, v in parse_qsl(raw)}


async def rest(answer: Callable[[], Any]) -> Response:
    """Run a REST route: its failures as E2B's ``{"code", "message"}``."""
    try:
        response: Response = await answer()
        return response
    except Failed as failed:
        status, message = failed.status, failed.message
    except PoolExhausted as exc:
        status, message = 429, str(exc)
    except ShuttingDown as exc:
        status, message = 503, str(exc)
    except MISSING as exc:
        status, message = 404, str(exc)
    except RockError as exc:
        status, message = 500, str(exc)
    except Exception as exc:
        status, message = 500, unexpected(exc)
    headers = {"should-retry": "false"} if status in (429, 502, 503, 504) else {}
    return JSONResponse({"code": status, "message": message}, status_code=status, headers=headers)


async def rpc(answer: Callable[[], Any]) -> Response:
    """Run a unary Connect RPC: its failures as Connect's ``{"code", "message"}``."""
    try:
        response: Response = await answer()
        return response
    except Failed as failed:
        return connect_error(failed)
    except MISSING as exc:
        return connect_error(Failed(503, str(exc), "unavailable"))
    except RockError as exc:
        return connect_error(Failed(500, str(exc), "internal"))
    except Exception as exc:
        return connect_error(Failed(500, unexpected(exc), "internal"))


def unexpected(exc: Exception) -> str:
    """A failure no route foresaw (the engine's client, a bug), logged with its traceback and
    answered here as a 500 in the API's shape: left to the app's outer handler, it was
    answered in the daemon's own shape (the SDK failed on it with ``KeyError: 'code'``) and
    the connection was dropped under the client's next call."""
    log.error("unexpected error in an E2B route", exc_info=exc)
    return f"{type(exc).__name__}: {exc}"


def connect_error(failed: Failed) -> Response:
    code = failed.code or {404: "not_found", 401: "unauthenticated"}.get(failed.status, "internal")
    return JSONResponse(
        {"code": code, "message": failed.message}, status_code=_CONNECT_STATUS.get(code, 500)
    )


def running(manager: SandboxManager, sandbox_id: str, paused_too: bool = False) -> SandboxInfo:
    """The sandbox, in use (or paused, with ``paused_too``); E2B's 404 otherwise."""
    try:
        info = manager.get(sandbox_id)
    except MISSING:
        raise Failed(
            404, f"sandbox \"{sandbox_id}\" doesn't exist or you don't have access to it"
        ) from None
    if info.state != "busy" and not (paused_too and info.state == "paused"):
        raise Failed(404, f'sandbox "{sandbox_id}" is not running ({info.state})')
    return info
