"""The daemon's own life: a graceful shutdown, a crash (kill -9 under load) and the
restart after it, its listening socket. Each test starts the daemons it needs."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import docker
import pytest
from rock_daemons import SMALL, start_daemon, stop_daemon

from rock.backends.base import (
    LABEL_DAEMON,
)
from rock.client import Client
from rock.models import SandboxSpec

pytestmark = pytest.mark.docker


# --- graceful shutdown -----------------------------------------------------------------------


def test_sigterm_cancels_inflight_commands_and_keeps_sandboxes_with_ttl(
    tmp_path: Path, docker_client: docker.DockerClient
) -> None:
    running = start_daemon(tmp_path / "home", grace_sec=1)
    client = running.client(retries=0)
    keep = client.create(**SMALL, ttl_sec=600)
    drop = client.create(**SMALL)
    errors: list[BaseException] = []

    def long_command() -> None:
        try:
            drop.exec("sleep 60", timeout=120)
        except BaseException as exc:
            errors.append(exc)

    worker = threading.Thread(target=long_command)
    worker.start()
    time.sleep(1.0)
    started = time.monotonic()
    running.daemon.stop()
    worker.join(30)
    running.thread.join(30)
    assert not running.thread.is_alive() and time.monotonic() - started < 20
    assert errors and "shut down while this command ran" in str(errors[0])
    daemon_id = running.daemon.config.daemon_id
    left = docker_client.containers.list(all=True, filters={"label": f"{LABEL_DAEMON}={daemon_id}"})
    assert [c.labels["dev.ale.rock.sandbox"] for c in left] == [keep.id]

    again = start_daemon(tmp_path / "home", daemon_id=daemon_id)
    try:
        adopted = again.client().sandbox(keep.id)
        assert adopted.exec("echo adopted").stdout == b"adopted\n"
        assert again.client().info(drop.id).state == "deleted"
    finally:
        stop_daemon(again, docker_client)


# --- crash: kill -9 under load ----------------------------------------------------------------

_SERVE = (
    "import sys; from pathlib import Path; from rock.daemon.server import ServeConfig, serve; "
    "serve(ServeConfig(home=Path(sys.argv[1]), port=0, daemon_id=sys.argv[2], "
    "log_level='warning', cleanup=sys.argv[3] == '1'))"
)


def _spawn(
    home: Path, daemon_id: str, cleanup: bool = False
) -> tuple[subprocess.Popen[bytes], str]:
    (home / "daemon.json").unlink(missing_ok=True)
    proc = subprocess.Popen(
        [sys.executable, "-c", _SERVE, str(home), daemon_id, "1" if cleanup else "0"],
        stdout=subprocess.DEVNULL,
        stderr=open(home / f"daemon-{proc_count()}.log", "wb"),  # noqa: SIM115
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            info = json.loads((home / "daemon.json").read_text())
            if info["pid"] == proc.pid:
                return proc, info["url"]
        except (OSError, ValueError, KeyError):
            pass
        assert proc.poll() is None, "the daemon exited at start-up"
        time.sleep(0.1)
    proc.kill()
    raise AssertionError("the daemon did not start in 60s")


_COUNT = [0]


def proc_count() -> int:
    _COUNT[0] += 1
    return _COUNT[0]


def test_kill_9_under_load_then_restart_leaks_nothing(
    tmp_path: Path, docker_client: docker.DockerClient
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    daemon_id = f"pytest-crash-{uuid.uuid4().hex[:6]}"
    proc, url = _spawn(home, daemon_id)
    token = (home / "token").read_text().strip()
    client = Client(url, token, retries=0)
    client.set_pool("crash", SandboxSpec(**SMALL), min_idle=3, max_total=12)
    stop = threading.Event()
    done = [0]

    def load() -> None:
        worker = Client(url, token, retries=0)
        while not stop.is_set():
            try:
                sb = worker.create(**SMALL)
                sb.exec("echo hi")
                if done[0] % 2:
                    sb.delete()  # leave every other one alive
                done[0] += 1
            except Exception:
                return  # the daemon is gone

    workers = [threading.Thread(target=load) for _ in range(4)]
    for w in workers:
        w.start()
    time.sleep(4)
    proc.send_signal(signal.SIGKILL)
    proc.wait(10)
    stop.set()
    for w in workers:
        w.join(30)
    assert done[0] > 0
    label = {"label": f"{LABEL_DAEMON}={daemon_id}"}
    assert docker_client.api.containers(all=True, filters=label)  # the crash left containers

    proc, url = _spawn(home, daemon_id, cleanup=True)
    try:
        client = Client(url, token, retries=0)
        client.wait_pool("crash", timeout=60)
        live = {s.id: s for s in client.list() if s.state != "error"}
        # the raw listing: containers.list would inspect each one, racing the pool's work
        containers = {
            c["Labels"]["dev.ale.rock.sandbox"]: c
            for c in docker_client.api.containers(all=True, filters=label)
        }
        assert set(containers) == set(live), "every container has a row and every row a container"
        assert all(c["State"] == "running" for c in containers.values())
        for info in live.values():
            assert info.state in ("ready", "busy")
            if info.state == "busy":
                assert client.sandbox(info.id).exec("echo ok").stdout == b"ok\n"
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
    assert docker_client.api.containers(all=True, filters=label) == []


def test_the_listening_socket_sends_small_answers_at_once() -> None:
    """Accepted connections inherit TCP_NODELAY from the daemon's own listening socket
    (uvicorn sets it only on sockets it made): without it every answer written in two
    parts waited for the client's delayed ACK."""
    import socket as sockets

    from rock.daemon.server import _bind

    listening = _bind("127.0.0.1", 0)
    try:
        listening.listen()
        client = sockets.create_connection(listening.getsockname())
        accepted, _ = listening.accept()
        assert accepted.getsockopt(sockets.IPPROTO_TCP, sockets.TCP_NODELAY) == 1
        accepted.close()
        client.close()
    finally:
        listening.close()
