"""The sync and async clients offer the same verbs: every public method of ``Client``,
``RemoteSandbox`` and ``RemoteSession`` has its awaited twin on ``AsyncClient``,
``AsyncSandbox`` and ``AsyncSession`` (they had drifted: the async sandbox had no
``interrupt``, ``status``, ``logs`` or ``run_streaming``, the async client no ``wait_pool``)."""

from __future__ import annotations

import inspect

import pytest

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
    return {name for name, _ in inspect.getmembers(cls) if not name.startswith("_")}


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
