"""The database restarted under a running daemon (PostgreSQL): while it is away a request is
answered 503 with one sentence, maintenance waits without tracebacks, and when it is back the
daemon answers, holds its daemon id again and its sandboxes are still there."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest
from rock_daemons import start_daemon, stop_daemon

from rock.daemon.server import Daemon, ServeConfig
from rock.errors import DaemonError
from rock.store import StoreError

pytestmark = pytest.mark.docker

REPO = Path(__file__).resolve().parents[3]
ENSURE = REPO / "scripts" / "ensure-postgres.sh"


def _pg_ctl() -> Path:
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/pg_ctl"))
    if not found:
        pytest.skip("no PostgreSQL server here to stop and start (scripts/ensure-postgres.sh)")
    return found[-1]


@dataclasses.dataclass
class Private:
    """A PostgreSQL server of this test's own, which it stops and starts: stopping the one
    the other tests share would cut their connections (they run beside it under xdist)."""

    url: str
    env: dict[str, str]
    data: Path

    def stop(self) -> None:
        command = ["runuser", "-u", "postgres", "--", str(_pg_ctl()), "stop", "-D"]
        subprocess.run([*command, str(self.data), "-m", "fast", "-w"], check=True,
                       capture_output=True)  # fmt: skip

    def start(self) -> None:
        subprocess.run([ENSURE], check=True, capture_output=True, env=self.env)


@pytest.fixture
def restartable(pg_server_url: str) -> Iterator[Private]:
    """A server of the test's own (started as scripts/ensure-postgres.sh starts the shared
    one, on a free port), stopped and removed after it."""
    _pg_ctl()
    data = Path(tempfile.mkdtemp(prefix="rock-pg-", dir="/tmp"))
    data.chmod(0o755)  # the cluster goes one level down, owned by the postgres user
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "ROCK_PG_PORT": str(port), "ROCK_PG_DIR": str(data / "cluster"),
           "ROCK_PG_LOG": str(data / "server.log")}  # fmt: skip
    done = subprocess.run([ENSURE], capture_output=True, text=True, env=env, check=False)
    private = Private(done.stdout.strip().splitlines()[-1] if done.stdout.strip() else "", env,
                      data / "cluster")  # fmt: skip
    try:
        assert done.returncode == 0, done.stderr
        yield private
    finally:
        with contextlib.suppress(subprocess.CalledProcessError):
            private.stop()
        shutil.rmtree(data, ignore_errors=True)


def test_a_database_restart_is_ridden_out(
    restartable: Private,
    tmp_path: Path,
    docker_client: docker.DockerClient,
    caplog: pytest.LogCaptureFixture,
) -> None:
    running = start_daemon(tmp_path / "home", database_url=restartable.url)
    try:
        client = running.client(retries=1)
        sandbox = client.create(memory_mb=256)
        restartable.stop()
        with pytest.raises(DaemonError) as away:
            client.list()
        assert away.value.status == 503
        assert "cannot be reached" in str(away.value) and "goes on when it answers again" in str(
            away.value
        )
        time.sleep(1.0)  # a few maintenance passes while it is away
        restartable.start()
        deadline = time.monotonic() + 30
        while True:
            try:
                ids = [s.id for s in client.list()]
                break
            except DaemonError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
        assert sandbox.id in ids
        assert sandbox.exec("echo back").stdout == b"back\n"
        time.sleep(1.0)  # the next maintenance pass takes the daemon id again
        other = ServeConfig.model_validate(  # (local: the engine's own claim is not asked)
            {"home": tmp_path / "other", "port": 0, "database_url": restartable.url,
             "daemon_id": running.daemon.config.daemon_id, "backend": "local"}
        )  # fmt: skip
        with pytest.raises(StoreError, match="another rock daemon uses the daemon id"):
            Daemon(other)
        assert not [r for r in caplog.records if r.levelname == "ERROR" and r.exc_info]
    finally:
        stop_daemon(running, docker_client)
