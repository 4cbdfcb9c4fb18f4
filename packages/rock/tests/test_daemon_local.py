"""The daemon over the local backend: the same API and clients, no engine needed."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from rock_daemons import Running, start_daemon

from rock.backends.base import PathEscape
from rock.client import Client
from rock.models import SandboxSpec


@pytest.fixture
def local_daemon(tmp_path: Path) -> Iterator[Running]:
    running = start_daemon(tmp_path / "home", backend="local", cleanup=True)
    yield running
    running.daemon.stop()
    running.thread.join(30)


def test_local_daemon_verbs_pools_and_confinement(local_daemon: Running, tmp_path: Path) -> None:
    client: Client = local_daemon.client()
    assert client.health().backend == "local"
    with client.create(env={"WHO": "local"}) as sb:
        result = sb.exec('echo "$WHO"; pwd')
        assert result.stdout_text.splitlines()[0] == "local"
        sb.write_file("/a/b.txt", b"data", mode=0o600)
        assert sb.read_file("a/b.txt") == b"data"
        with pytest.raises(PathEscape, match="outside the sandbox root"):
            sb.read_file("../../etc/passwd")
        with sb.session() as session:
            session.run("cd a && export X=1")
            assert session.run("ls; echo $X").output == b"b.txt\n1\n"
        slow = sb.exec("sleep 30", timeout=0.5)
        assert slow.timed_out and slow.exit_code == 137
    client.set_pool("scratch", SandboxSpec(), min_idle=2, max_total=4)
    client.wait_pool("scratch", timeout=30)
    with client.acquire("scratch") as leased:
        assert leased.info.pool == "scratch" and leased.exec("true").exit_code == 0


def test_local_daemon_restart_reconciles(tmp_path: Path) -> None:
    home = tmp_path / "home"
    first = start_daemon(home, backend="local", daemon_id="pytest-local")
    client = first.client()
    kept = client.create(ttl_sec=600)
    kept.write_file("/note", b"still here")
    dropped = client.create()
    first.daemon.stop()
    first.thread.join(30)
    second = start_daemon(home, backend="local", daemon_id="pytest-local", cleanup=True)
    try:
        client = second.client()
        assert client.sandbox(kept.id).read_file("/note") == b"still here"
        assert client.info(dropped.id).state == "deleted"
    finally:
        second.daemon.stop()
        second.thread.join(30)
    assert not any((home / "sandboxes" / "pytest-local").glob("sb-*"))


def test_daemon_on_postgresql(tmp_path: Path, pg_url: str) -> None:
    running = start_daemon(tmp_path / "home", backend="local", database_url=pg_url, cleanup=True)
    try:
        client = running.client()
        with client.create(labels={"db": "pg"}) as sb:
            assert sb.exec("echo pg").stdout == b"pg\n"
            assert [s.id for s in client.list(labels={"db": "pg"})] == [sb.id]
        history = [h.to_state for h in client.info(sb.id).history]
        assert history == ["pending", "starting", "ready", "busy", "deleted"]
        assert client.logs(sb.id)[0].stdout_head == "pg\n"
        assert not (tmp_path / "home" / "rock.db").exists()  # the state went to PostgreSQL
    finally:
        running.daemon.stop()
        running.thread.join(30)


@pytest.mark.parametrize("database", ["postgresql", "sqlite"])
def test_daemons_sharing_a_database_need_their_own_ids_and_leave_each_other_alone(
    tmp_path: Path, database: str, request: pytest.FixtureRequest
) -> None:
    from rock.daemon.server import Daemon, ServeConfig
    from rock.errors import RockError

    url = (
        request.getfixturevalue("pg_url")
        if database == "postgresql"
        else f"sqlite:///{tmp_path / 'shared.db'}"
    )
    first = start_daemon(tmp_path / "a", backend="local", database_url=url, daemon_id="one")
    try:
        kept = first.client().create(ttl_sec=600)
        state = first.client().info(kept.id).state
        same = ServeConfig(
            home=tmp_path / "b", port=0, backend="local", database_url=url, daemon_id="one"
        )
        with pytest.raises(RockError, match="another rock daemon uses the daemon id 'one'"):
            Daemon(same)
        second = start_daemon(
            tmp_path / "c", backend="local", database_url=url, daemon_id="two", cleanup=True
        )
        second.daemon.stop()  # its reconciliation and its clean-up leave daemon one's alone
        second.thread.join(30)
        assert first.client().info(kept.id).state == state != "deleted"
        assert kept.exec("echo alive").stdout == b"alive\n"
    finally:
        first.daemon.stop()
        first.thread.join(30)


def test_an_unexpected_failure_in_an_e2b_route_is_e2b_s_500_and_the_connection_lives_on(
    local_daemon: Running, monkeypatch: pytest.MonkeyPatch
) -> None:
    """CI on record: a snapshot's delete failed inside the engine's client (not a rock
    error), the daemon answered in its own shape, on which the SDK failed with
    ``KeyError: 'code'``, and dropped the connection, so the SDK's next call was reset."""
    from e2b import Sandbox
    from e2b.exceptions import SandboxException

    monkeypatch.setenv("E2B_API_URL", local_daemon.url)
    monkeypatch.setenv("E2B_SANDBOX_URL", local_daemon.url)
    monkeypatch.setenv("E2B_API_KEY", local_daemon.token)
    monkeypatch.delenv("E2B_DEBUG", raising=False)
    backend = local_daemon.daemon.manager.backend

    def engine_gone() -> list[dict[str, object]]:
        raise RuntimeError("the engine went away")

    monkeypatch.setattr(backend, "images", engine_gone)
    for _ in range(2):  # (the second on the connection the first used)
        with pytest.raises(SandboxException, match="RuntimeError: the engine went away"):
            Sandbox.delete_snapshot("rock-e2b-snapshot:sb-x-first")
    assert Sandbox.list().next_items() == []
