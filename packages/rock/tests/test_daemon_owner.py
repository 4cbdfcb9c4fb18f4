"""Daemons of two rock homes on one engine leave each other's sandboxes alone (issue 37).

Every daemon's id used to be ``default`` unless given, and a daemon takes the containers
labelled with its id for its own: a second home's start-up reconciliation removed the first
one's pooled and busy containers as leftovers of its own, and its ``--cleanup`` and
shutdown could too. These tests run real ``rock serve`` processes against the real engine
(and a shared PostgreSQL), as two users or two checkouts would.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest
from rock_daemons import Serve, start_daemon

from rock.backends._owner import LABEL_CLAIM, EngineClaim, Holder, process_started
from rock.backends.base import LABEL_DAEMON, LABEL_SANDBOX
from rock.client import Client
from rock.daemon.server import load_or_create_identity
from rock.errors import RockError
from rock.store import StateStore

SMALL = {"memory_mb": 256, "pids_limit": 128}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Home:
    """One rock home, its ``rock serve`` (a warm pool), and the sandboxes it must keep."""

    def __init__(
        self, root: Path, name: str, seen: set[str], args: list[str], daemon_id: str | None
    ) -> None:
        self.name = name
        self.daemon_id = daemon_id
        self.args = ["--pool", "warm=1:2", *args]
        if daemon_id is not None:
            self.args += ["--daemon-id", daemon_id]
        self.serve = Serve(root / name, _free_port(), self.args)
        self.seen = seen  # every sandbox id the test saw, to remove at the end
        self.busy = ""
        self.pooled: set[str] = set()

    def start(self, *extra: str) -> None:
        self.serve.args = [*self.args, *extra]
        self.serve.start()

    def client(self) -> Client:
        return Client(self.serve.url, home=self.serve.home, retries=1)

    def set_up(self) -> None:
        """A busy sandbox with TTL left (kept through its own daemon's restarts) holding a
        file, and a filled pool."""
        client = self.client()
        client.wait_pool("warm", timeout=120)
        busy = client.create(**SMALL, ttl_sec=600)
        busy.write_file("/owner", self.name.encode())
        self.busy = busy.id
        self.pooled = {s.id for s in client.list(pool="warm", state=["ready"])}
        self.seen |= {self.busy, *self.pooled}

    def own_restart(self, engine: docker.DockerClient, *extra: str) -> None:
        """Stop (or kill) and start its daemon: the busy sandbox is adopted again, and the
        pool refilled (a shutdown deletes the sandboxes waiting in pools)."""
        self.serve.stop()
        self.start(*extra)
        client = self.client()
        client.wait_pool("warm", timeout=120)
        self.pooled = {s.id for s in client.list(pool="warm", state=["ready"])}
        self.seen |= self.pooled
        self.assert_kept(engine, "its own restart")

    def identity(self) -> str:
        """The id its containers carry: the one given, else the one minted for its home."""
        return self.daemon_id or (self.serve.home / "daemon-id").read_text().strip()

    def assert_kept(self, engine: docker.DockerClient, when: str) -> None:
        """Every container this home's daemon made is still there and running, with the
        label of this home's identity; when the daemon runs, its busy sandbox answers."""
        for sandbox_id in {self.busy, *self.pooled}:
            rows = engine.api.containers(
                all=True, filters={"label": f"{LABEL_SANDBOX}={sandbox_id}"}
            )
            assert [r["State"] for r in rows] == ["running"], (
                f"{self.name}'s {sandbox_id} after {when}"
            )
            assert rows[0]["Labels"][LABEL_DAEMON] == self.identity()
        if self.serve.proc is not None and self.serve.proc.poll() is None:
            client = self.client()
            info = client.info(self.busy)
            assert info.state == "busy", f"{self.name}'s busy sandbox after {when}: {info}"
            assert client.sandbox(self.busy).read_file("/owner") == self.name.encode()
            assert {s.id for s in client.list(pool="warm", state=["ready"])} == self.pooled
            self.seen |= {s.id for s in client.list(include_deleted=True)}


@contextlib.contextmanager
def _homes(
    root: Path, engine: docker.DockerClient, args: list[str], daemon_id: str | None = None
) -> Iterator[tuple[Home, Home]]:
    seen: set[str] = set()
    a, b = (Home(root, name, seen, args, daemon_id) for name in ("a", "b"))
    try:
        yield a, b
    finally:
        for home in (a, b):
            home.serve.stop()
        for sandbox_id in seen:  # only what this test made: other daemons share the engine
            for row in engine.api.containers(
                all=True, filters={"label": f"{LABEL_SANDBOX}={sandbox_id}"}
            ):
                with contextlib.suppress(docker.errors.NotFound):
                    engine.api.remove_container(row["Id"], force=True)


@pytest.mark.docker
@pytest.mark.parametrize("database", ["sqlite", "postgresql"])
def test_two_homes_with_default_settings_keep_their_sandboxes_through_each_other(
    tmp_path: Path,
    docker_client: docker.DockerClient,
    database: str,
    request: pytest.FixtureRequest,
) -> None:
    """The fault as found: ``rock serve`` from a second home logged ``reconciled:
    {'removed': 2}`` and the first one's busy sandbox became an error."""
    engine = docker_client
    args = ["--database-url", request.getfixturevalue("pg_url")] if database == "postgresql" else []
    with _homes(tmp_path, engine, args) as (a, b):
        a.start()
        a.set_up()
        b.start()
        a.assert_kept(engine, "b's start")
        b.set_up()
        assert a.identity() != b.identity()

        a.serve.stop()
        b.assert_kept(engine, "a's shutdown")
        a.own_restart(engine)
        b.assert_kept(engine, "a's restart")

        b.own_restart(engine)
        a.assert_kept(engine, "b's restart")
        b.serve.kill()
        b.start()  # reconciles after a crash: adopts or removes what it left
        a.assert_kept(engine, "b's restart after a kill -9")
        b.assert_kept(engine, "its own restart after a kill -9")

        b.own_restart(engine, "--cleanup")
        a.assert_kept(engine, "b's restart with --cleanup")
        b.serve.stop()  # deletes every sandbox of b's, and only those
        a.assert_kept(engine, "b's --cleanup shutdown")
        left = engine.api.containers(all=True, filters={"label": f"{LABEL_DAEMON}={b.identity()}"})
        assert left == []

        b.start()
        b.set_up()
        a.own_restart(engine, "--cleanup")
        b.assert_kept(engine, "a's restart with --cleanup")
        a.serve.stop()
        b.assert_kept(engine, "a's --cleanup shutdown")
        left = engine.api.containers(all=True, filters={"label": f"{LABEL_DAEMON}={a.identity()}"})
        assert left == []


def _serve(home: Path, daemon_id: str) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "rock.cli", "serve", "--home", str(home)]
    argv += ["--port", str(_free_port()), "--daemon-id", daemon_id, "--log-level", "warning"]
    return subprocess.run(argv, capture_output=True, text=True, timeout=120)


@pytest.mark.docker
def test_a_daemon_id_live_on_the_engine_is_refused_and_a_dead_ones_sandboxes_stay(
    tmp_path: Path, docker_client: docker.DockerClient
) -> None:
    """``--daemon-id team`` while a daemon of another home runs as ``team``: refused in one
    sentence before it touches anything. Once that daemon is dead the id may be taken, but
    the containers the other home made are still not the new daemon's to remove."""
    engine = docker_client
    team = f"pytest-team-{uuid.uuid4().hex[:8]}"
    with _homes(tmp_path, engine, [], daemon_id=team) as (a, b):
        a.start()
        a.set_up()
        refused = _serve(tmp_path / "b", team)
        assert refused.returncode == 1
        assert "Traceback" not in refused.stderr
        (line,) = refused.stderr.strip().splitlines()
        assert line.startswith(f"rock: another rock daemon holds the daemon id '{team}'")
        assert str(a.serve.home) in line
        assert not (tmp_path / "b" / "rock.db").exists()  # refused before anything was opened
        a.assert_kept(engine, "a refused start with its id")

        a.serve.kill()
        b.start()  # the id is free now; a's containers are not b's
        a.assert_kept(engine, "b's start under a dead daemon's id")
        b.serve.stop()
        a.assert_kept(engine, "b's shutdown under a dead daemon's id")
        a.start()
        a.assert_kept(engine, "its own restart")


# --- the parts: no engine needed ---------------------------------------------------------


def test_an_identity_is_minted_once_per_home_and_never_shared(tmp_path: Path) -> None:
    first = load_or_create_identity(tmp_path)
    assert load_or_create_identity(tmp_path) == first  # kept: its sandboxes stay its own
    other = tmp_path / "other"
    other.mkdir()
    assert load_or_create_identity(other) != first
    (other / "daemon-id").write_text("../../etc\n")
    with pytest.raises(RockError, match=r"holds '../../etc', not a daemon id; put back"):
        load_or_create_identity(other)


def test_a_holder_is_alive_while_its_process_runs_on_this_machine() -> None:
    assert Holder.this_process("here:/home").alive()
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        holder = Holder("here:/home", socket.gethostname(), Holder.this_process("").boot,
                        sleeper.pid, process_started(sleeper.pid) or "")  # fmt: skip
        assert holder.alive()
        elsewhere = Holder("there:/home", "another-host", "boot", sleeper.pid, "1")
    finally:
        sleeper.kill()
        sleeper.wait()
    assert not holder.alive()  # killed: its marker is stale
    assert elsewhere.alive()  # a process on another machine cannot be judged from here


@pytest.mark.docker
def test_a_daemon_s_start_sweeps_the_markers_of_daemons_that_died(
    docker_client: docker.DockerClient,
) -> None:
    """A daemon killed with -9 leaves its id's marker behind; the next daemon to start on
    the engine, whatever its id, removes the markers of those that surely died."""
    gone = subprocess.Popen(["true"])
    gone.wait()
    dead = Holder("here:/old", socket.gethostname(), Holder.this_process("").boot, gone.pid, "1")
    living = Holder("there:/home", "another-host", "boot", 1, "1")  # cannot be judged: kept
    names = []
    for holder in (dead, living):
        name = f"rock-daemon-pytest-sweep-{uuid.uuid4().hex[:8]}"
        labels = {LABEL_CLAIM: f"pytest-sweep-{uuid.uuid4().hex[:6]}", **holder.labels()}
        docker_client.volumes.create(name=name, labels=labels)
        names.append(name)
    claim = EngineClaim(docker_client, f"pytest-sweeper-{uuid.uuid4().hex[:6]}", "here:/new")
    try:
        claim.take()
        left = {v.name for v in docker_client.volumes.list(filters={"label": LABEL_CLAIM})}
        assert names[0] not in left and names[1] in left
    finally:
        claim.release()
        with contextlib.suppress(docker.errors.NotFound):
            docker_client.volumes.get(names[1]).remove(force=True)


def test_a_home_from_before_homes_had_their_own_id_keeps_its_old_sandboxes_and_is_told(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """An upgraded home: its database records sandboxes of the id ``default``; the daemon
    (its id now minted) leaves them alone and says how to clean them up."""
    home = tmp_path / "home"
    with StateStore(home=home) as store:
        store.add_sandbox(
            "sb-earlier", daemon_id="default", backend="docker", image="rock/base:bookworm",
            spec={}, labels={}, state="busy",
        )  # fmt: skip
    with caplog.at_level(logging.WARNING, logger="rock.daemon"):
        running = start_daemon(home, backend="local", daemon_id=None)
        running.daemon.stop()
        running.thread.join(30)
    assert running.daemon.daemon_id == (home / "daemon-id").read_text().strip() != "default"
    assert "records 1 sandboxes of the daemon id 'default'" in caplog.text
    assert "run 'rock serve --daemon-id default --cleanup' once" in caplog.text
    with StateStore(home=home) as store:
        assert store.get("sb-earlier").state == "busy"
