"""The sync and async clients offer the same verbs: every public method of ``Client``,
``RemoteSandbox`` and ``RemoteSession`` has its awaited twin on ``AsyncClient``,
``AsyncSandbox`` and ``AsyncSession`` (they had drifted: the async sandbox had no
``interrupt``, ``status``, ``logs`` or ``run_streaming``, the async client no ``wait_pool``)."""

from __future__ import annotations

import asyncio
import inspect

import httpx
import pytest

from rock.backends.base import SandboxNotFound
from rock.client import (
    AsyncClient,
    AsyncSandbox,
    AsyncSession,
    Client,
    RemoteSandbox,
    RemoteSession,
)

ONLY_SYNC = {"close", "placement", "origin"}
"""``close`` is ``aclose`` when awaited; ``placement`` and ``origin`` are what an in-process
sandbox says of itself, which a remote one leaves unset."""
ONLY_ASYNC = {"aclose", "exec", "upload", "download"}
"""``aclose``; ``exec``, ``upload`` and ``download`` come to the sync sandbox from rock's
``Sandbox``."""


def _public(cls: type) -> set[str]:
    """Public methods and attributes of the class (the sync side's properties read what the
    async side keeps as plain attributes: ``info``, ``daemon_lost``, ``closed``)."""
    return {
        name
        for name, _ in inspect.getmembers(cls)
        if not name.startswith("_") and not isinstance(inspect.getattr_static(cls, name), property)
    }


@pytest.mark.parametrize(
    ("sync", "awaited"),
    [(Client, AsyncClient), (RemoteSandbox, AsyncSandbox), (RemoteSession, AsyncSession)],
)
def test_the_async_client_has_every_verb_of_the_sync_one(sync: type, awaited: type) -> None:
    assert _public(sync) - ONLY_SYNC - _public(awaited) == set()
    assert _public(awaited) - ONLY_ASYNC - _public(sync) - {"exec"} == set()
    for name in _public(sync) & _public(awaited):
        method = getattr(awaited, name)
        if callable(method) and not isinstance(method, type):
            assert inspect.iscoroutinefunction(method), f"{awaited.__name__}.{name} is not async"


def _daemon_of_one_sandbox(request: httpx.Request) -> httpx.Response:
    """A stand-in daemon at the transport seam: it knows one sandbox and one error."""
    assert request.headers["authorization"] == "Bearer secret"
    if request.url.path == "/v1/sandboxes/sb-1":
        at = "2026-01-01T00:00:00Z"
        info = {"id": "sb-1", "state": "busy", "backend": "local", "image": "/", "spec": {}}
        times = {"created_at": at, "updated_at": at, "last_used_at": at}
        return httpx.Response(200, json={**info, **times})
    message = f"no sandbox {request.url.path.rsplit('/', 1)[-1]}"
    return httpx.Response(404, json={"error": {"type": "SandboxNotFound", "message": message}})


def test_both_clients_take_a_transport_as_their_seam() -> None:
    """Tests (and other transports) plug in below the client, as httpx's own clients allow:
    the same calls, answers read and errors raised as over HTTP."""
    client = Client(
        "http://rock.test", "secret", transport=httpx.MockTransport(_daemon_of_one_sandbox)
    )
    assert client.info("sb-1").id == "sb-1"
    with pytest.raises(SandboxNotFound, match="no sandbox sb-2"):
        client.info("sb-2")

    async def awaited() -> str:
        seam = httpx.MockTransport(_daemon_of_one_sandbox)
        async with AsyncClient("http://rock.test", "secret", transport=seam) as client:
            with pytest.raises(SandboxNotFound):
                await client.info("sb-2")
            return (await client.info("sb-1")).id

    assert asyncio.run(awaited()) == "sb-1"
