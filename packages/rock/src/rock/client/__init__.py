"""Clients of the rock daemon: `AsyncClient` (asyncio, on httpx), and `Client`, its sync face.

The client is written once, async-first: `AsyncClient`, `AsyncSandbox` and `AsyncSession`
send the calls :mod:`rock.api` describes, retrying only connection failures. `Client`,
`RemoteSandbox` and `RemoteSession` wrap them, each verb waiting for its async twin on an
event loop of the process's own (one thread, started on first use), so the two cannot drift
and hold no logic of their own. Both take an httpx transport as the seam for tests (an
``httpx.MockTransport`` answering with a plain function).

The sandboxes they hand out have the same verbs as in-process ones (`Sandbox`):
exec, sessions, files and trees, snapshot, pause and resume, stop, delete; use them as context managers
to delete on exit. Connection failures are retried (the request never reached the
daemon); nothing else is. A daemon that went away under a request raises `DaemonLost`
(the request may or may not have been carried out), and a sandbox remembers it in
``daemon_lost``. Errors from the daemon arrive as the exception class the daemon raised
(`SandboxNotFound`, `PathEscape`, `PoolExhausted`, ...) with its message.

The async client is :mod:`rock.client.async_client`; its sync face, :mod:`rock.client.sync_client`.
"""

from rock.client.async_client import AsyncClient, AsyncSandbox, AsyncSession
from rock.client.async_client import context_tar as context_tar
from rock.client.sync_client import Client, RemoteSandbox, RemoteSession

__all__ = [
    "AsyncClient",
    "AsyncSandbox",
    "AsyncSession",
    "Client",
    "RemoteSandbox",
    "RemoteSession",
]
