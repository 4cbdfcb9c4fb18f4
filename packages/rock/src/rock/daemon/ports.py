"""A sandbox's ports served through the daemon: an HTTP request to a port inside a sandbox,
however closed its network, answered by whatever listens there.

Each request is relayed inside the sandbox: the daemon runs ``bash`` in it, which opens
``127.0.0.1:PORT`` (bash's own ``/dev/tcp``, so no tool is needed in the image), writes the
request as HTTP/1.0 with ``Connection: close`` and reads the answer until the server closes.
So a sandbox needs no network, no published port and no address the host can reach; the
cost is one ``exec`` a request (about a command's round trip) and no streaming: the answer
comes whole, at most :data:`MAX_ANSWER` bytes, and WebSockets are not served.

Two doors lead here: rock's own route ``/v1/sandboxes/{id}/ports/{port}/{path}`` (the bearer
token), and E2B's host names ``{port}-{id}.{domain}`` (see :mod:`rock.daemon.e2b`).
"""

from __future__ import annotations

from urllib.parse import quote

from fastapi import Request, Response
from starlette.concurrency import run_in_threadpool

from rock.daemon.manager import SandboxManager
from rock.errors import InvalidRequest, RockError
from rock.models import ExecRequest

MAX_ANSWER = 64 * 2**20
"""The largest answer relayed (bytes)."""
TIMEOUT_SEC = 60.0
"""How long a request may take inside the sandbox."""
NOTHING_LISTENS = 7
"""The relay's exit status when nothing accepts the connection."""
_RELAY = 'exec 3<>"/dev/tcp/127.0.0.1/$1" 2>/dev/null || exit 7; cat <&3 & cat >&3; wait'
"""The relay: the reader in the background (a background job's stdin would be /dev/null)."""
_HOP = {
    "connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailer",
    "transfer-encoding", "upgrade", "host", "content-length",
}  # fmt: skip
_DROPPED = {"authorization", "x-api-key", "e2b-traffic-access-token"}
"""The daemon's credentials, which the sandbox's server never sees."""


class NothingListens(RockError):
    """No server answers HTTP on the port (the daemon answers 502)."""


async def forward(
    manager: SandboxManager, sandbox_id: str, port: int, path: str, request: Request
) -> Response:
    """Relay ``request`` (its method, ``path`` with the query, headers and body) to
    ``port`` in the sandbox; the server's answer as it gave it."""
    if not 1 <= port <= 65535:
        raise InvalidRequest(f"port {port} is not a TCP port; give one from 1 to 65535.")
    body = await request.body()
    where = quote("/" + path.lstrip("/"), safe="/:@!$&'()*+,;=-._~%")  # (as the wire wants it)
    target = where + (f"?{request.url.query}" if request.url.query else "")
    lines = [f"{request.method} {target} HTTP/1.0", f"Host: localhost:{port}"]
    for name, value in request.headers.items():
        if name.lower() not in _HOP | _DROPPED:
            lines.append(f"{name}: {value}")
    lines += ["Connection: close", f"Content-Length: {len(body)}", "", ""]
    raw = "\r\n".join(lines).encode("latin-1", errors="replace") + body
    relay = ExecRequest(
        command=["bash", "-c", _RELAY, "rock-port", str(port)],
        stdin=raw,
        timeout=TIMEOUT_SEC,
        max_output_bytes=MAX_ANSWER,
    )
    done = await run_in_threadpool(manager.exec, sandbox_id, relay)
    if done.exit_code == NOTHING_LISTENS or (not done.stdout and done.exit_code != 0):
        raise NothingListens(
            f"nothing listens on port {port} in sandbox {sandbox_id}; start the server "
            "there first (listening on 127.0.0.1 or 0.0.0.0)."
        )
    return _answer(done.stdout, port, sandbox_id)


def _answer(raw: bytes, port: int, sandbox_id: str) -> Response:
    head, sep, body = raw.partition(b"\r\n\r\n")
    if not sep:
        head, sep, body = raw.partition(b"\n\n")
    lines = head.decode("latin-1").splitlines()
    try:
        status = int(lines[0].split()[1])
    except (IndexError, ValueError):
        raise NothingListens(
            f"the server on port {port} in sandbox {sandbox_id} did not answer in HTTP."
        ) from None
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, colon, value = line.partition(":")
        if colon and name.strip().lower() not in _HOP:
            headers[name.strip()] = value.strip()
    return Response(content=body, status_code=status, headers=headers)
