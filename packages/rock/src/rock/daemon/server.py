"""`rock serve`: the token, the discovery file and uvicorn with a graceful SIGTERM."""

from __future__ import annotations

import json
import logging
import os
import secrets
import threading
from pathlib import Path
from types import FrameType

import uvicorn
from pydantic import BaseModel, Field

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


class ServeConfig(BaseModel):
    """How to run one daemon."""

    home: Path
    host: str = DEFAULT_HOST
    port: int = Field(default=DEFAULT_PORT, ge=0, le=65535)
    backend: str = "docker"
    database_url: str | None = None
    daemon_id: str = "default"
    pools: dict[str, PoolSettings] = Field(default_factory=dict)
    grace_sec: float = Field(default=10.0, ge=0)
    cleanup: bool = False
    """Delete every sandbox at shutdown, even those with TTL left."""
    max_output_chars: int = 8192
    log_level: str = "info"


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


def make_backend(name: str, daemon_id: str, home: Path) -> Backend:
    if name == "docker":
        from rock.backends.docker import DockerBackend
        from rock.engine import connect

        client = connect()
        client.api.timeout = 300
        return DockerBackend(client, daemon_id=daemon_id)
    if name == "local":
        from rock.backends.local import LocalBackend

        return LocalBackend(home / "sandboxes", daemon_id=daemon_id)
    raise RockError(f"unknown backend {name!r}; use docker or local.")


class _Server(uvicorn.Server):
    """uvicorn, plus: on SIGTERM/SIGINT refuse new work at once, and kill commands still
    running after the grace period so the server can finish its in-flight requests."""

    manager: SandboxManager
    grace_sec: float

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if not self.manager.closing:
            log.info("signal %s: shutting down (grace %.0fs)", sig, self.grace_sec)
            self.manager.begin_shutdown()
            timer = threading.Timer(self.grace_sec, self.manager.interrupt_inflight)
            timer.daemon = True
            timer.start()
        super().handle_exit(sig, frame)


def serve(config: ServeConfig, *, ready: threading.Event | None = None) -> None:
    """Run the daemon until SIGTERM or SIGINT."""
    logging.basicConfig(
        level=config.log_level.upper(), format="%(asctime)s %(name)s %(levelname)s %(message)s"
    )
    home = config.home
    token = load_or_create_token(home)
    metrics = Metrics()
    store = StateStore(config.database_url, home=home, max_output_chars=config.max_output_chars)
    backend = make_backend(config.backend, config.daemon_id, home)
    manager = SandboxManager(backend, store, daemon_id=config.daemon_id, metrics=metrics)
    metrics.watch(manager)

    def start() -> None:
        manager.start(config.pools)
        log.info("reconciled at start-up: %s", manager.reconciled)

    def stop() -> None:
        manager.close(
            grace_sec=0.0 if manager.closing else config.grace_sec, cleanup=config.cleanup
        )
        store.close()
        with_file = home / DAEMON_FILE
        try:
            if json.loads(with_file.read_text()).get("pid") == os.getpid():
                with_file.unlink()
        except (OSError, ValueError):
            pass

    app = create_app(manager, token, metrics=metrics, start=start, stop=stop)
    uv_config = uvicorn.Config(
        app,
        host=config.host,
        port=config.port,
        log_level=config.log_level,
        timeout_graceful_shutdown=int(config.grace_sec) + 5,
        access_log=False,
    )
    server = _Server(uv_config)
    server.manager = manager
    server.grace_sec = config.grace_sec

    original_startup = server.startup

    async def startup(sockets: list | None = None) -> None:  # type: ignore[type-arg]
        await original_startup(sockets=sockets)
        if server.started:
            port = config.port
            for srv in server.servers:
                for sock in srv.sockets:
                    port = sock.getsockname()[1]
            url = f"http://{config.host}:{port}"
            _write_daemon_file(home, url)
            log.info(
                "rock daemon %s listening on %s (token in %s)",
                config.daemon_id,
                url,
                home / TOKEN_FILE,
            )
            if ready is not None:
                ready.set()

    server.startup = startup  # type: ignore[method-assign]
    server.run()


def _write_daemon_file(home: Path, url: str) -> None:
    path = home / DAEMON_FILE
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"url": url, "pid": os.getpid()}) + "\n")
    tmp.replace(path)
