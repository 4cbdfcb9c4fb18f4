"""`rock serve`: the token, the daemon's identity, the discovery file and uvicorn with a
graceful SIGTERM."""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import re
import secrets
import socket
import threading
import time
from pathlib import Path
from types import FrameType
from typing import IO, Literal

import uvicorn
from pydantic import BaseModel, Field

from rock.backends._owner import origin_of
from rock.backends.base import Backend
from rock.daemon.app import create_app
from rock.daemon.manager import SandboxManager
from rock.daemon.metrics import Metrics
from rock.errors import RockError
from rock.models import PoolSettings
from rock.store import StateStore

log = logging.getLogger("rock.daemon")

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 7480
TOKEN_FILE = "token"
DAEMON_FILE = "daemon.json"
IDENTITY_FILE = "daemon-id"
LEGACY_ID = "default"
"""Every daemon's id before each rock home had its own."""
DAEMON_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


class ServeConfig(BaseModel):
    """How to run one daemon."""

    home: Path
    host: str = DEFAULT_HOST
    port: int = Field(default=DEFAULT_PORT, ge=0, le=65535)
    backend: Literal["docker", "local", "ray"] = "docker"
    ray_address: str | None = None
    """With backend ray: the cluster (``auto``, ``HOST:PORT`` of its head node)."""
    database_url: str | None = None
    daemon_id: str | None = Field(default=None, pattern=DAEMON_ID.pattern)
    """The daemon's identity: its containers carry it as a label and its rows in the state
    store as a column, and it takes only what carries it. None: the one minted for its rock
    home (``<home>/daemon-id``), so that daemons of different homes never share one. No two
    running daemons may hold one id on an engine, a Ray cluster or a database."""
    pools: dict[str, PoolSettings] = Field(default_factory=dict)
    grace_sec: float = Field(default=10.0, ge=0)
    cleanup: bool = False
    """Delete every sandbox at shutdown, even those with TTL left."""
    max_output_chars: int = 8192
    parent_pid: int | None = Field(default=None, gt=0)
    """Stop, as on SIGTERM, once this process is gone: a run's private daemon, so that a run
    killed outright (SIGKILL, a test's timeout) leaves no daemon and no sandbox running."""
    log_level: Literal["critical", "error", "warning", "info", "debug", "trace"] = "info"
    e2b_stand_ins: bool = False
    e2b_domain: str | None = None
    """The domain E2B's ``get_host(port)`` names a sandbox's ports under
    (``{port}-{id}.{domain}``); a name that reaches the daemon, such as ``localhost:7480``."""
    """E2B sandboxes made without a network get rock bench's offline stand-ins (pytest, and
    pip, uv, curl that install from its wheelhouse), first on a login shell's PATH."""


def load_or_create_token(home: Path) -> str:
    """The daemon's bearer token, made at first start into ``home/token`` (mode 0600)."""
    home.mkdir(mode=0o700, parents=True, exist_ok=True)
    path = home / TOKEN_FILE
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        if path.stat().st_mode & 0o077:
            os.chmod(path, 0o600)  # never leave it readable by others
        token = path.read_text().strip()
        if not token:
            raise RockError(
                f"{path} is empty; delete it and restart rock serve to make a new token."
            ) from None
        return token
    token = secrets.token_urlsafe(32)
    with os.fdopen(fd, "w") as fh:
        fh.write(token + "\n")
    return token


def load_or_create_identity(home: Path) -> str:
    """The daemon id of the rock home: minted at the first start of a daemon without
    ``--daemon-id`` (random, so no other home has it) into ``home/daemon-id``, then kept."""
    path = home / IDENTITY_FILE
    if not path.exists():
        minted = home / f".{IDENTITY_FILE}.{os.getpid()}.tmp"
        minted.write_text(f"rock-{secrets.token_hex(8)}\n")
        try:
            os.link(minted, path)  # never replaces one a concurrent start wrote first
        except FileExistsError:
            pass
        finally:
            minted.unlink()
    daemon_id = path.read_text().strip()
    if not DAEMON_ID.fullmatch(daemon_id):
        raise RockError(
            f"{path} holds {daemon_id[:80]!r}, not a daemon id; put back the id this home's "
            "daemon used (the dev.ale.rock.daemon label of its containers), or delete the "
            "file to mint a new one."
        )
    return daemon_id


LOCK_FILE = "daemon.lock"


def hold_home(home: Path) -> IO[str]:
    """Take the rock home for this daemon (an exclusive lock, released when the process
    ends): a second daemon on the same home is refused before it touches anything."""
    path = home / LOCK_FILE
    handle = path.open("a+")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        handle.close()
        holder = _daemon_file(home)
        who = f" (pid {holder.get('pid')}, {holder.get('url')})" if holder else ""
        raise RockError(
            f"another rock daemon already runs on the rock home {home}{who}; stop it first, "
            "or give this one another --home"
        ) from None
    return handle


def _daemon_file(home: Path) -> dict[str, object]:
    with contextlib.suppress(OSError, ValueError):
        data = json.loads((home / DAEMON_FILE).read_text())
        if isinstance(data, dict):
            return data
    return {}


def _bind(host: str, port: int) -> socket.socket:
    """The daemon's listening socket, bound now: a port in use is refused before the daemon
    reconciles (adopts or removes) any sandbox."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    # accepted connections inherit it: without it a response written in two parts waits
    # for the client's delayed ACK, 40 ms a request (uvicorn sets it only on sockets it made)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise RockError(
            f"the daemon cannot listen on {host}:{port} ({exc.strerror or exc}); stop what "
            "uses that port, or pick another with --port"
        ) from None
    sock.set_inheritable(True)
    return sock


def make_backend(
    name: str,
    daemon_id: str,
    home: Path,
    *,
    ray_address: str | None = None,
    origin: str | None = None,
) -> Backend:
    """The daemon's backend; ``origin`` (host and rock home) is written on what it makes."""
    if name == "ray":
        try:
            from rock.backends.cluster import RayBackend
        except ImportError:
            raise RockError(
                "the ray backend needs Ray: pip install 'rock[ray]' (on every node too)."
            ) from None
        return RayBackend(ray_address or "auto", daemon_id=daemon_id, origin=origin)
    if name == "docker":
        from rock.backends.docker import DockerBackend
        from rock.engine import connect

        client = connect()
        client.api.timeout = 300
        return DockerBackend(client, daemon_id=daemon_id, origin=origin)
    if name == "local":
        from rock.backends.local import LocalBackend

        return LocalBackend(home / "sandboxes", daemon_id=daemon_id)
    raise RockError(f"unknown backend {name!r}; use docker, local or ray.")


class _Server(uvicorn.Server):
    """uvicorn, plus: on SIGTERM/SIGINT refuse new work at once, and kill commands still
    running after the grace period so the server can finish its in-flight requests."""

    manager: SandboxManager
    grace_sec: float

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        self.shut_down(f"signal {sig}")
        super().handle_exit(sig, frame)

    def shut_down(self, why: str) -> None:
        """Refuse new work at once, kill commands still running after the grace period, and
        stop serving once the in-flight requests are answered (as a signal does, without
        uvicorn raising the signal again once :meth:`run` returns)."""
        if not self.manager.closing:
            log.info("%s: shutting down (grace %.0fs)", why, self.grace_sec)
            self.manager.begin_shutdown()
            timer = threading.Timer(self.grace_sec, self.manager.interrupt_inflight)
            timer.daemon = True
            timer.start()
        self.should_exit = True


def _claim(config: ServeConfig, daemon_id: str) -> tuple[Backend, StateStore]:
    """The daemon's backend and store, each holding ``daemon_id`` (one daemon per daemon id,
    on the engine and on the database) before either is touched: reconciliation comes at
    start-up. A failure releases what was taken."""
    backend: Backend | None = None
    store: StateStore | None = None
    try:
        backend = make_backend(
            config.backend,
            daemon_id,
            config.home,
            ray_address=config.ray_address,
            origin=origin_of(config.home),
        )
        backend.claim()
        store = StateStore(
            config.database_url, home=config.home, max_output_chars=config.max_output_chars
        )
        store.claim(daemon_id)
    except BaseException:
        if backend is not None:
            backend.release()
        if store is not None:
            store.close()
        raise
    return backend, store


class Daemon:
    """One daemon: its store, backend, manager, app and server. ``run()`` blocks until
    SIGTERM/SIGINT (main thread) or `stop()` (any thread)."""

    def __init__(self, config: ServeConfig) -> None:
        self.home = config.home
        self.token = load_or_create_token(self.home)
        self._lock = hold_home(self.home)  # before the store, the engine or any sandbox
        self._home_id = config.daemon_id is None
        try:
            self.daemon_id = config.daemon_id or load_or_create_identity(self.home)
            self.config = config = config.model_copy(update={"daemon_id": self.daemon_id})
            self._socket = _bind(config.host, config.port)  # before reconciliation too
        except BaseException:
            self._lock.close()
            raise
        try:
            self.backend, self.store = _claim(config, self.daemon_id)
        except BaseException:
            self._socket.close()
            self._lock.close()
            raise
        self.metrics = Metrics()
        self.manager = SandboxManager(
            self.backend, self.store, daemon_id=self.daemon_id, metrics=self.metrics
        )
        self.metrics.watch(self.manager)
        self.url: str | None = None
        self.ready = threading.Event()
        self.app = create_app(
            self.manager,
            self.token,
            metrics=self.metrics,
            start=self._start,
            stop=self._stop,
            e2b_stand_ins=config.e2b_stand_ins,
            e2b_domain=config.e2b_domain,
        )
        self.server = self._uvicorn()

    def _uvicorn(self) -> _Server:
        """The uvicorn server of the app, which says where it listens once it does."""
        config = self.config
        uv_config = uvicorn.Config(
            self.app,
            host=config.host,
            port=config.port,
            log_level=config.log_level,
            timeout_graceful_shutdown=int(config.grace_sec) + 5,
            access_log=False,
        )
        server = _Server(uv_config)
        server.manager = self.manager
        server.grace_sec = config.grace_sec
        original_startup = server.startup

        async def startup(sockets: list[socket.socket] | None = None) -> None:
            await original_startup(sockets=sockets)
            if server.started:
                self._listening()

        server.startup = startup  # type: ignore[method-assign]
        return server

    def _start(self) -> None:
        self.manager.start(self.config.pools)
        log.info("reconciled at start-up: %s", self.manager.reconciled)
        if self._home_id and self.config.database_url is None and self.daemon_id != LEGACY_ID:
            earlier = self.store.live(LEGACY_ID)  # this home's own database: its own daemon's
            if earlier:
                log.warning(
                    "this home's database records %s sandboxes of the daemon id %r, from before "
                    "each rock home had its own id, and this daemon leaves them alone; to adopt "
                    "and then delete them, run 'rock serve --daemon-id %s --cleanup' once and "
                    "stop it",
                    len(earlier),
                    LEGACY_ID,
                    LEGACY_ID,
                )

    def _stop(self) -> None:
        grace = 0.0 if self.manager.closing else self.config.grace_sec
        self.manager.close(grace_sec=grace, cleanup=self.config.cleanup)
        self._let_go()
        path = self.home / DAEMON_FILE
        with contextlib.suppress(OSError, ValueError):
            if json.loads(path.read_text()).get("pid") == os.getpid():
                path.unlink()

    def _listening(self) -> None:
        port = self.config.port
        for srv in self.server.servers:
            for sock in srv.sockets:
                port = sock.getsockname()[1]
        self.url = f"http://{self.config.host}:{port}"
        _write_daemon_file(self.home, self.url, self.daemon_id)
        log.info(
            "rock daemon %s listening on %s (token in %s)",
            self.daemon_id,
            self.url,
            self.home / TOKEN_FILE,
        )
        self.ready.set()

    def _let_go(self) -> None:
        """Release the daemon id (engine and database) and close the store (idempotent)."""
        self.backend.release()
        self.store.close()

    def run(self) -> None:
        if self.config.parent_pid is not None:
            threading.Thread(target=self._watch_parent, name="parent-watch", daemon=True).start()
        try:
            self.server.run(sockets=[self._socket])
        finally:
            self._let_go()
            self._socket.close()
            self._lock.close()

    def _watch_parent(self) -> None:
        """Stop once the parent process is gone (this process is then another's child)."""
        while os.getppid() == self.config.parent_pid:
            time.sleep(0.5)
        log.warning("the process that started this daemon is gone; stopping")
        self.stop()

    def stop(self) -> None:
        """Shut down as SIGTERM would, from any thread, and return from :meth:`run` (after a
        real SIGTERM uvicorn raises it again once it returns, which kills the process before
        what follows ``run`` in it, such as a private daemon removing its home)."""
        self.server.shut_down("asked to stop")


def serve(config: ServeConfig) -> None:
    """Run the daemon until SIGTERM or SIGINT."""
    logging.basicConfig(
        level=config.log_level.upper(), format="%(asctime)s %(name)s %(levelname)s %(message)s"
    )
    Daemon(config).run()


def _write_daemon_file(home: Path, url: str, daemon_id: str) -> None:
    path = home / DAEMON_FILE
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"url": url, "pid": os.getpid(), "daemon_id": daemon_id}) + "\n")
    tmp.replace(path)
