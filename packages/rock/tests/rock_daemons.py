"""Start and stop real daemons for tests: in a thread of the test process, on port 0."""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
import threading
import uuid
from pathlib import Path

import docker

from rock.backends.base import LABEL_DAEMON
from rock.client import Client
from rock.daemon.server import Daemon, ServeConfig
from rock.synth.wiring import wait_for_daemon

SMALL = {"memory_mb": 256, "pids_limit": 128}


class Running:
    def __init__(self, daemon: Daemon, thread: threading.Thread) -> None:
        self.daemon = daemon
        self.thread = thread
        self.url = daemon.url or ""
        self.token = daemon.token
        self.home = daemon.home

    def client(self, **kwargs: object) -> Client:
        return Client(self.url, self.token, **kwargs)  # type: ignore[arg-type]


def start_daemon(home: Path, **overrides: object) -> Running:
    settings: dict[str, object] = {
        "home": home,
        "port": 0,
        "daemon_id": f"pytest-{uuid.uuid4().hex[:8]}",
        "log_level": "warning",
        "grace_sec": 2,
        **overrides,
    }
    config = ServeConfig.model_validate(settings)
    daemon = Daemon(config)
    daemon.manager.maintenance_interval = 0.2
    daemon.manager.liveness_interval = 0.5
    thread = threading.Thread(target=daemon.run, daemon=True)
    thread.start()
    assert daemon.ready.wait(60), "the daemon did not start"
    return Running(daemon, thread)


def stop_daemon(running: Running, docker_client: docker.DockerClient) -> None:
    running.daemon.stop()
    running.thread.join(60)
    label = f"{LABEL_DAEMON}={running.daemon.daemon_id}"
    for row in docker_client.api.containers(all=True, filters={"label": label}):
        with contextlib.suppress(docker.errors.NotFound):
            docker_client.api.remove_container(row["Id"], force=True)


class Serve:
    """``rock serve ARGS`` in a subprocess, on one port, started and killed at will."""

    def __init__(self, home: Path, port: int, args: list[str]) -> None:
        self.home = home
        self.port = port
        self.args = args
        self.url = f"http://127.0.0.1:{port}"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, home: Path | None = None, env: dict[str, str] | None = None) -> None:
        self.home = home or self.home
        self.home.mkdir(parents=True, exist_ok=True)
        (self.home / "daemon.json").unlink(missing_ok=True)  # a killed daemon leaves it
        argv = [sys.executable, "-m", "rock.cli", "serve", "--home", str(self.home)]
        argv += ["--port", str(self.port), "--log-level", "warning", *self.args]
        with (self.home / "daemon.log").open("ab") as log:
            self.proc = subprocess.Popen(argv, stdout=log, stderr=log, env=env)
        wait_for_daemon(self.home, self.proc, timeout=120)

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
