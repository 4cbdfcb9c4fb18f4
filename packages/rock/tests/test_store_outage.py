"""The database restarted under a running daemon (PostgreSQL): while it is away a request is
answered 503 with one sentence, maintenance waits without tracebacks, and when it is back the
daemon answers, holds its daemon id again and its sandboxes are still there."""

from __future__ import annotations

import subprocess
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
DATA = Path("/var/lib/rock-pg")


def _pg_ctl() -> Path:
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/pg_ctl"))
    if not found or not DATA.is_dir():
        pytest.skip("the database is not the one scripts/ensure-postgres.sh runs here")
    return found[-1]


@pytest.fixture
def restartable(pg_url: str) -> Iterator[str]:
    """``pg_url`` on the server this test may stop; it is always started again."""
    pg_ctl = _pg_ctl()
    yield pg_url
    subprocess.run([REPO / "scripts" / "ensure-postgres.sh"], capture_output=True, check=False)
    assert pg_ctl.exists()


def test_a_database_restart_is_ridden_out(
    restartable: str,
    tmp_path: Path,
    docker_client: docker.DockerClient,
    caplog: pytest.LogCaptureFixture,
) -> None:
    running = start_daemon(tmp_path / "home", database_url=restartable)
    try:
        client = running.client(retries=1)
        sandbox = client.create(memory_mb=256)
        stop = [
            "runuser",
            "-u",
            "postgres",
            "--",
            str(_pg_ctl()),
            "stop",
            "-D",
            str(DATA),
            "-m",
            "fast",
            "-w",
        ]
        subprocess.run(stop, check=True, capture_output=True)
        with pytest.raises(DaemonError) as away:
            client.list()
        assert away.value.status == 503
        assert "cannot be reached" in str(away.value) and "goes on when it answers again" in str(
            away.value
        )
        time.sleep(1.0)  # a few maintenance passes while it is away
        subprocess.run([REPO / "scripts" / "ensure-postgres.sh"], check=True, capture_output=True)
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
            {"home": tmp_path / "other", "port": 0, "database_url": restartable,
             "daemon_id": running.daemon.config.daemon_id, "backend": "local"}
        )  # fmt: skip
        with pytest.raises(StoreError, match="another rock daemon uses the daemon id"):
            Daemon(other)
        assert not [r for r in caplog.records if r.levelname == "ERROR" and r.exc_info]
    finally:
        stop_daemon(running, docker_client)
