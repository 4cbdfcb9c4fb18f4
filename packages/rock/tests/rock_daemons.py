"""Start and stop real daemons for tests: in a thread of the test process, on port 0."""

from __future__ import annotations

import contextlib
import threading
import uuid
from pathlib import Path

import docker

from rock.backends.base import LABEL_DAEMON
from rock.client import Client
from rock.daemon.server import Daemon, ServeConfig

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
    label = f"{LABEL_DAEMON}={running.daemon.config.daemon_id}"
    for row in docker_client.api.containers(all=True, filters={"label": label}):
        with contextlib.suppress(docker.errors.NotFound):
            docker_client.api.remove_container(row["Id"], force=True)
