"""A warm pool that outlasts its daemon: `rock serve` killed (SIGKILL) and started again on
the same port, over the local backend (no engine needed)."""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from rock_daemons import Serve

from rock.backends.base import PoolNotFound
from rock.client import Client
from rock.episode_runner import DaemonPool
from rock.errors import DaemonLost, DaemonUnreachable
from rock.models import SandboxSpec


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Serve]:
    daemon = Serve(
        tmp_path / "home",
        _free_port(),
        ["--backend", "local", "--daemon-id", "pytest-restart", "--cleanup"],
    )
    daemon.start()
    yield daemon
    daemon.stop()


def _later(seconds: float, action: Callable[[], object]) -> threading.Thread:
    def run() -> None:
        time.sleep(seconds)
        action()

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def test_a_pool_outlasts_its_daemon_killed_and_started_again(serve: Serve) -> None:
    client = Client(serve.url, home=serve.home, retries=1)
    pool = DaemonPool(client, "restart", size=1, spec=SandboxSpec(), reconnect_timeout=30)
    pool.wait_ready(timeout=30)
    sandbox = pool.acquire()
    assert sandbox.exec("echo up").stdout == b"up\n" and sandbox.daemon_lost is None

    killer = _later(0.5, serve.kill)
    with pytest.raises(DaemonLost, match="went away while a request was under way"):
        sandbox.exec("sleep 5", timeout=30)  # in flight when the daemon dies
    killer.join()
    assert sandbox.daemon_lost is not None and "may or may not" in sandbox.daemon_lost
    pool.release(sandbox)  # the daemon is away: deleted once it answers again

    restarter = _later(1.0, serve.start)
    again = pool.acquire()  # waits for it: the same token, the pool kept in its store
    restarter.join()
    assert again.exec("echo back").stdout == b"back\n" and again.daemon_lost is None
    assert client.info(sandbox.id).state == "deleted"  # the one released while it was away
    pool.release(again)
    pool.close()
    with pytest.raises(PoolNotFound):
        client.pool("restart")
    assert not client.list(state=["ready", "busy"])


def test_a_pool_the_daemon_forgot_is_declared_again(serve: Serve, tmp_path: Path) -> None:
    client = Client(serve.url, home=serve.home, retries=1)
    pool = DaemonPool(client, "forgotten", size=1, spec=SandboxSpec(), reconnect_timeout=30)
    pool.wait_ready(timeout=30)
    serve.kill()
    fresh = tmp_path / "fresh"  # started again without its state store, with the same token
    fresh.mkdir()
    shutil.copy(serve.home / "token", fresh / "token")
    (fresh / "token").chmod(0o600)
    serve.start(fresh)
    with pool.acquire() as sandbox:
        assert sandbox.exec("true").exit_code == 0
    assert client.pool("forgotten").min_idle == 1
    pool.close()


def test_a_daemon_that_does_not_come_back_fails_acquire_in_one_sentence(serve: Serve) -> None:
    client = Client(serve.url, home=serve.home, retries=0)
    pool = DaemonPool(client, "gone", size=1, spec=SandboxSpec(), reconnect_timeout=1.5)
    serve.kill()
    began = time.monotonic()
    with pytest.raises(DaemonUnreachable) as caught:
        pool.acquire()
    assert 1.5 <= time.monotonic() - began < 10
    message = str(caught.value)
    assert message == (
        f"no rock daemon took requests at {serve.url} for 1.5 s; start it again "
        "(the same home and port)."
    )
    pool.close()  # nothing to reach: returns quietly


def test_a_full_pool_makes_acquire_wait_for_a_release(serve: Serve) -> None:
    """More episodes than sandboxes slow down rather than fail: acquire waits for one to come
    back, and gives up (PoolExhausted, one sentence) only after ``full_timeout``."""
    from rock.errors import PoolExhausted

    client = Client(serve.url, home=serve.home, retries=1)
    pool = DaemonPool(client, "full", size=1, spec=SandboxSpec(), full_timeout=30)
    pool.wait_ready(timeout=30)
    held = [pool.acquire() for _ in range(3)]  # size 1: at most 3 (max_total), all out now
    releaser = _later(1.0, lambda: pool.release(held.pop()))
    began = time.monotonic()
    third = pool.acquire()
    releaser.join()
    assert time.monotonic() - began >= 0.9  # it waited for the release
    assert third.exec("echo ok").stdout == b"ok\n"
    pool.full_timeout = 0.5
    with pytest.raises(PoolExhausted, match="maximum of 3"):
        pool.acquire()
    for sandbox in [*held, third]:
        pool.release(sandbox)
    pool.close()


def test_a_second_daemon_on_the_same_home_refuses_and_touches_nothing(
    serve: Serve, tmp_path: Path
) -> None:
    """The fault as found: a second `rock serve` on the home of a running one adopted its
    pool's sandboxes, failed to bind its port and, shutting down, deleted them."""
    client = Client(serve.url, home=serve.home, retries=1)
    pool = DaemonPool(client, "warm", size=2, spec=SandboxSpec(), reconnect_timeout=30)
    pool.wait_ready(timeout=30)
    before = {s.id: s.state for s in client.list()}
    assert len(before) == 2
    for port in (serve.port, _free_port()):  # the same port, or another one
        second = subprocess.run(
            [
                sys.executable,
                "-m",
                "rock.cli",
                "serve",
                "--home",
                str(serve.home),
                "--port",
                str(port),
                "--backend",
                "local",
                "--daemon-id",
                "pytest-restart",
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert second.returncode != 0
        assert "another rock daemon already runs on the rock home" in second.stderr
        assert "Traceback" not in second.stderr
    assert {s.id: s.state for s in client.list()} == before  # nothing adopted or deleted
    busy = subprocess.run(  # another home, the running daemon's port: refused before anything
        [
            sys.executable,
            "-m",
            "rock.cli",
            "serve",
            "--home",
            str(tmp_path / "other"),
            "--port",
            str(serve.port),
            "--backend",
            "local",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert busy.returncode != 0 and f"cannot listen on 127.0.0.1:{serve.port}" in busy.stderr
    assert not (tmp_path / "other" / "rock.db").exists()  # no store opened, nothing reconciled
    pool.close()


@pytest.mark.docker
def test_a_paused_sandbox_stays_paused_through_its_daemon_s_restart(tmp_path: Path) -> None:
    """Killed and started again, the daemon adopts a paused container as paused (not as a
    container that stopped running), and it resumes where it was."""
    daemon = Serve(tmp_path / "home", _free_port(), ["--daemon-id", "pytest-paused"])
    daemon.start()
    try:
        client = Client(daemon.url, home=daemon.home, retries=1)
        box = client.create()
        box.exec("echo kept > /tmp/f")
        box.pause()
        daemon.kill()
        daemon.start()
        client = Client(daemon.url, home=daemon.home, retries=1)
        assert client.info(box.id).state == "paused"
        again = client.sandbox(box.id)
        again.resume()
        assert again.exec("cat /tmp/f").stdout == b"kept\n"
        again.delete()
    finally:
        daemon.stop()
