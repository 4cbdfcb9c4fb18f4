"""The daemon end to end: a real server on loopback, a real engine, the real clients."""

from __future__ import annotations

import asyncio
import stat
import time
from pathlib import Path

import docker
import httpx
import pytest
from rock_daemons import SMALL, Running

from rock.backends.base import (
    FORK_REPOSITORY,
    LABEL_FORKED_FROM,
    PoolNotFound,
    SandboxError,
    SandboxNotFound,
)
from rock.client import AsyncClient, Client
from rock.errors import (
    DaemonUnreachable,
    InvalidRequest,
    PoolExhausted,
    Unauthorized,
)
from rock.models import ExecRequest, SandboxSpec

pytestmark = pytest.mark.docker


# --- the token ---------------------------------------------------------------------------


def test_token_file_is_private_and_required(daemon: Running) -> None:
    token_file = daemon.home / "token"
    assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
    assert token_file.read_text().strip() == daemon.token and len(daemon.token) >= 32
    assert httpx.get(f"{daemon.url}/health").json()["status"] == "ok"  # no token needed
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "Basic abc"}):
        for method, path in [("GET", "/v1/sandboxes"), ("GET", "/metrics"), ("PUT", "/v1/pools/x")]:
            response = httpx.request(method, daemon.url + path, headers=headers)
            assert response.status_code == 401, (method, path, headers)
            assert response.json()["error"]["type"] == "Unauthorized"
    with pytest.raises(Unauthorized, match="token is wrong"):
        Client(daemon.url, "wrong").list()


def test_openapi_is_served_and_declares_the_bearer(daemon: Running) -> None:
    spec = httpx.get(f"{daemon.url}/openapi.json").json()
    assert "/v1/sandboxes/{sandbox_id}/exec" in spec["paths"]
    assert spec["components"]["securitySchemes"]["HTTPBearer"]["scheme"] == "bearer"


# --- bad input -------------------------------------------------------------------------


def test_malformed_json_and_wrong_types_name_the_field(daemon: Running, client: Client) -> None:
    headers = {"Authorization": f"Bearer {daemon.token}", "Content-Type": "application/json"}
    bad = httpx.post(f"{daemon.url}/v1/sandboxes", content=b"{not json", headers=headers)
    assert bad.status_code == 422 and bad.json()["error"]["type"] == "InvalidRequest"
    wrong = httpx.post(
        f"{daemon.url}/v1/sandboxes",
        json={"spec": {"memory_mb": "lots"}},
        headers=headers,
    )
    assert wrong.status_code == 422
    assert wrong.json()["error"]["fields"] == ["body.spec.memory_mb"]
    assert "body.spec.memory_mb" in wrong.json()["error"]["message"]
    huge = httpx.post(  # found by the fuzz test: 1e308 cores overflowed the nano-CPU count
        f"{daemon.url}/v1/sandboxes", json={"spec": {"cpus": 1.13e308}}, headers=headers
    )
    assert huge.status_code == 422 and huge.json()["error"]["fields"] == ["body.spec.cpus"]
    forever = httpx.post(
        f"{daemon.url}/v1/sandboxes", json={"spec": {"ttl_sec": 1e308}}, headers=headers
    )
    assert forever.status_code == 422 and forever.json()["error"]["fields"] == ["body.spec.ttl_sec"]
    with pytest.raises(InvalidRequest, match=r"body\.min_idle") as info:
        client.request("PUT", "/v1/pools/p", json={"min_idle": 5, "max_total": 2})
    assert info.value.fields == ["body.min_idle"]
    with pytest.raises(InvalidRequest, match="label filter"):
        client.request("GET", "/v1/sandboxes", params={"label": "noequals"})


def test_unknown_sandbox_session_and_pool_are_404(client: Client) -> None:
    with pytest.raises(SandboxNotFound, match="no sandbox sb-nope") as info:
        client.info("sb-nope")
    assert info.value.status == 404  # type: ignore[attr-defined]
    with pytest.raises(SandboxNotFound):
        client.request("POST", "/v1/sandboxes/sb-nope/exec", json={"command": "true"})
    with pytest.raises(PoolNotFound, match="no pool named nope") as pool_info:
        client.pool("nope")
    assert pool_info.value.status == 404  # type: ignore[attr-defined]
    with pytest.raises(PoolNotFound, match="no pool named nope"):
        client.create(pool="nope")


def test_missing_image_fails_at_once_with_the_engine_reason(client: Client) -> None:
    started = time.monotonic()
    with pytest.raises(SandboxError, match="does not exist") as info:
        client.create(image="rock/no-such-image:1")
    assert time.monotonic() - started < 10
    assert info.value.status == 400  # type: ignore[attr-defined]
    (row,) = [s for s in client.list(state=["error"]) if s.image == "rock/no-such-image:1"]
    assert "could not start" in (row.state_reason or "")


def test_unreachable_daemon_is_one_sentence() -> None:
    started = time.monotonic()
    with pytest.raises(DaemonUnreachable, match="start one with 'rock serve'"):
        Client("http://127.0.0.1:9", "t", retries=2, backoff=0.01).list()
    assert time.monotonic() - started < 5


# --- the verbs through the daemon ------------------------------------------------------------


def test_exec_session_files_and_trees(client: Client, tmp_path: Path) -> None:
    with client.create(**SMALL, env={"GREETING": "hi"}, workdir="/tmp") as sb:
        result = sb.exec('echo "$GREETING"; pwd; echo err >&2; exit 7')
        assert (result.exit_code, result.stdout, result.stderr) == (7, b"hi\n/tmp\n", b"err\n")
        payload = bytes(range(256)) * 100
        assert sb.exec("cat", stdin=payload).stdout == payload
        capped = sb.exec("head -c 100000 /dev/zero", max_output_bytes=10)
        assert capped.stdout_truncated and capped.stdout_total == 100000
        slow = sb.exec("sleep 100 & sleep 101; echo never", timeout=1)
        assert slow.timed_out and slow.exit_code == 137 and b"never" not in slow.stdout

        with sb.session() as session:
            session.run("cd /etc && export X=42 && f() { echo fn; }")
            after = session.run("pwd; echo $X; f")
            assert after.output == b"/etc\n42\nfn\n" and after.exit_code == 0
            interrupted = session.run("sleep 100", timeout=1)
            assert interrupted.timed_out
            assert session.run("echo $X").output == b"42\n"

        sb.write_file("/data/blob.bin", payload, mode=0o600)
        assert sb.read_file("/data/blob.bin") == payload
        tree = tmp_path / "tree"
        (tree / "sub").mkdir(parents=True)
        (tree / "run.sh").write_text("#!/bin/sh\necho ran\n")
        (tree / "run.sh").chmod(0o755)
        (tree / "sub" / "secret").write_bytes(b"\x00\xff")
        (tree / "sub" / "secret").chmod(0o600)
        sb.upload(tree, "/work")
        assert sb.exec("/work/run.sh").stdout == b"ran\n"
        back = tmp_path / "back"
        sb.download("/work", back)
        assert (back / "sub" / "secret").read_bytes() == b"\x00\xff"
        assert stat.S_IMODE((back / "run.sh").stat().st_mode) == 0o755
        assert stat.S_IMODE((back / "sub" / "secret").stat().st_mode) == 0o600
        with pytest.raises(SandboxError, match="does not exist"):
            sb.read_file("/no/such/file")

        logs = sb.logs()
        assert logs[0].command == "/work/run.sh" and logs[0].stdout_head == "ran\n"
        assert any(log.command == "echo $X" and log.session_id for log in logs)
        assert any(log.exit_code == 7 and log.stdout_head == "hi\n/tmp\n" for log in logs)
        image = sb.snapshot("rock/pytest-snapshot:1")
        assert image.startswith("sha256:")
    assert client.info(sb.id).state == "deleted"
    docker.from_env().images.remove("rock/pytest-snapshot:1", force=True)


def test_a_fork_has_the_parent_s_files_of_that_moment_and_nothing_after(client: Client) -> None:
    engine = docker.from_env()
    with client.create(**SMALL, env={"KIND": "parent"}, workdir="/srv", labels={"job": "fk"}) as sb:
        sb.exec("mkdir -p /srv/app && echo before > /srv/app/state && chmod 750 /srv/app")
        fork, twin = sb.fork(count=2)  # one snapshot, two sandboxes
        try:
            sb.exec("echo after > /srv/app/state && touch /srv/app/new")
            assert fork.read_file("/srv/app/state") == b"before\n"
            assert fork.exec("test -e /srv/app/new").exit_code == 1  # made after the fork
            seen = fork.exec('echo "$KIND $PWD"; stat -c %a /srv/app').stdout
            assert seen == b"parent /srv\n750\n"  # its spec's environment and workdir, modes
            fork.exec("echo fork > /srv/app/state")
            assert sb.read_file("/srv/app/state") == b"after\n"  # and the other way round
            info = client.info(fork.id)
            assert info.spec.memory_mb == SMALL["memory_mb"] and info.state == "busy"
            assert info.labels == {"job": "fk", LABEL_FORKED_FROM: sb.id}
            image = info.image
            assert (
                image.startswith(f"{FORK_REPOSITORY}/{sb.id}:")
                and client.info(twin.id).image == image
            )
            assert twin.read_file("/srv/app/state") == b"before\n"
            twin.delete()
            time.sleep(1.0)  # (the image is removed beside the delete: give it a moment)
            assert engine.images.list(image)  # the other fork still runs on it
        finally:
            fork.delete()
            twin.delete()
    for _ in range(60):  # the forks' image goes with the last of them
        if not engine.images.list(image):
            break
        time.sleep(0.5)
    assert engine.images.list(image) == []
    with pytest.raises(SandboxNotFound, match="no sandbox sb-000000000000"):
        client.sandbox("sb-000000000000").fork()


def test_a_fork_that_cannot_start_leaves_no_image_behind(
    daemon: Running, client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The engine refuses the fork's container after the snapshot was taken: the error
    comes back, and the snapshot image, which no container uses, goes."""
    engine = docker.from_env()
    backend = daemon.daemon.manager.backend

    def refused(*_args: object, **_kwargs: object) -> None:
        raise SandboxError("the engine refused the container: no space left on device.")

    with client.create(**SMALL) as sb:
        monkeypatch.setattr(backend, "create", refused)
        with pytest.raises(SandboxError, match="no space left on device"):
            sb.fork(count=2)
        monkeypatch.undo()
        left = engine.images.list(f"{FORK_REPOSITORY}/{sb.id}")
        assert left == [], [i.tags for i in left]


def test_a_stop_is_not_taken_for_a_death_by_the_liveness_check(
    daemon: Running, client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The liveness check runs between the container's exit and the row's move to stopped
    (it did under CI load: busy -> stopped -> error, the container removed)."""
    manager = daemon.daemon.manager
    sb = client.create(**SMALL)
    try:
        box = manager._boxes[sb.id]
        real_stop = box.stop

        def stop_then_check() -> None:
            real_stop()
            manager._check_liveness(force=True)  # the upkeep thread, landing in the window

        monkeypatch.setattr(box, "stop", stop_then_check)
        sb.stop()
        assert client.info(sb.id).state == "stopped"
    finally:
        sb.delete()
    history = [(h.from_state, h.to_state) for h in client.info(sb.id).history]
    assert history[-2:] == [("busy", "stopped"), ("stopped", "deleted")]


def test_faults_through_the_daemon(client: Client) -> None:
    with client.create(memory_mb=128, pids_limit=64) as sb:
        hog = sb.exec("python3 -c 'b = bytearray(1 << 30)'", timeout=60)
        assert hog.oom_killed and hog.exit_code == 137
        bomb = sb.exec("b() { b | b & }; b; sleep 2; echo done", timeout=20)
        assert bomb.exit_code in (0, 137, 124, 254) or bomb.timed_out
        assert sb.exec("echo alive", timeout=20).stdout == b"alive\n"
        net = sb.exec("curl -sS -m 3 http://deb.debian.org/ >/dev/null", timeout=20)
        assert net.exit_code != 0
    with client.create(**SMALL) as sb:  # the host is fine too: a new sandbox starts and runs
        assert sb.exec("true").exit_code == 0


def test_state_history_and_listing_filters(client: Client) -> None:
    sb = client.create(**SMALL, labels={"job": "hist"})
    try:
        assert [s.id for s in client.list(labels={"job": "hist"})] == [sb.id]
        assert client.list(labels={"job": "hist"}, state=["ready"]) == []
        sb.stop()
        with pytest.raises(SandboxError, match="is stopped"):
            sb.exec("true")
    finally:
        sb.delete()
    history = [(h.from_state, h.to_state) for h in client.info(sb.id).history]
    assert history == [
        (None, "pending"),
        ("pending", "starting"),
        ("starting", "ready"),
        ("ready", "busy"),
        ("busy", "stopped"),
        ("stopped", "deleted"),
    ]
    assert sb.id in [s.id for s in client.list(include_deleted=True)]
    assert sb.id not in [s.id for s in client.list()]


# --- pools -----------------------------------------------------------------------------------


def test_warm_pool_hands_over_started_sandboxes_and_replaces_released_ones(
    client: Client, docker_client: docker.DockerClient
) -> None:
    spec = SandboxSpec(**SMALL, labels={"pool": "test"})
    client.set_pool("warm", spec, min_idle=2, max_total=3)
    client.wait_pool("warm", timeout=60)
    idle_before = {s.id for s in client.list(pool="warm", state=["ready"])}
    assert len(idle_before) == 2

    sb = client.acquire("warm", env={"WHO": "me"}, ttl_sec=300)
    assert sb.id in idle_before and sb.info.state == "busy" and sb.info.pool == "warm"
    container = docker_client.containers.get(sb.info.container_id or "")
    assert container.status == "running"  # started before it was asked for
    assert sb.exec('echo "$WHO"').stdout == b"me\n"
    sb.exec("touch /dirty")

    same_shape = client.create(spec)  # no pool named: the matching pool is used
    assert same_shape.info.pool == "warm"
    with pytest.raises(PoolExhausted, match="maximum of 3"):
        client.acquire("warm")
        client.acquire("warm")

    sb.delete()
    same_shape.delete()
    assert client.info(sb.id).state == "deleted"
    client.wait_pool("warm", timeout=60)
    for leased in client.list(pool="warm", state=["busy"]):
        client.delete(leased.id)
    client.wait_pool("warm", timeout=60)
    fresh = client.list(pool="warm", state=["ready"])
    assert sb.id not in {s.id for s in fresh}  # never reused
    with client.acquire("warm") as again:
        assert again.exec("test -e /dirty").exit_code == 1

    resized = client.set_pool("warm", spec, min_idle=1, max_total=2)
    assert resized.min_idle == 1
    deadline = time.monotonic() + 30
    while client.pool("warm").idle != 1 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert client.pool("warm").idle == 1
    client.delete_pool("warm")
    deadline = time.monotonic() + 30  # a sandbox still starting is removed when it is up
    while time.monotonic() < deadline:
        left = [(s.id, s.state) for s in client.list(pool="warm")]
        if not left:
            break
        time.sleep(0.2)
    assert left == []


def test_async_client(daemon: Running) -> None:
    async def main() -> list[bytes]:
        async with AsyncClient(daemon.url, daemon.token) as client:
            boxes = [await client.create(**SMALL) for _ in range(2)]
            try:
                outs = await asyncio.gather(
                    *[box.exec(f"echo {i}") for i in range(6) for box in boxes]
                )
                session = await boxes[0].session()
                await session.run("cd /tmp")
                assert (await session.run("pwd")).output == b"/tmp\n"
                await session.close()
                await boxes[0].write_file("/f", b"x")
                assert await boxes[0].read_file("/f") == b"x"
                return [o.stdout for o in outs]
            finally:
                for box in boxes:
                    await box.delete()

    outs = asyncio.run(main())
    assert sorted(outs) == sorted(f"{i}\n".encode() for i in range(6) for _ in range(2))


def test_the_async_client_s_other_verbs(daemon: Running) -> None:
    """The verbs the async client lacked until the surface test: a pool waited on, a
    command interrupted by its tag, a session's command interrupted, the status, the exec
    log and the output handed on."""

    async def main() -> None:
        async with AsyncClient(daemon.url, daemon.token) as client:
            await client.set_pool("async-warm", SandboxSpec(**SMALL), min_idle=1, max_total=2)
            try:
                assert (await client.wait_pool("async-warm", timeout=120)).idle >= 1
            finally:
                await client.delete_pool("async-warm")
            box = await client.create(**SMALL)
            try:
                long = asyncio.create_task(
                    box.run(ExecRequest(command="sleep 60", tag="long", timeout=90))
                )
                while not await box.interrupt("long"):
                    await asyncio.sleep(0.1)
                assert (await long).exit_code == 137
                session = await box.session()
                slow = asyncio.create_task(session.run("sleep 60; echo late", timeout=90))
                await asyncio.sleep(1.0)
                await session.interrupt()
                assert b"late" not in (await slow).output
                await session.close()
                seen: list[tuple[int, bytes]] = []
                done = await box.run_streaming(
                    ExecRequest(command="echo out; echo err >&2"),
                    lambda stream, data: seen.append((stream, data)),
                )
                assert done.exit_code == 0 and sorted(seen) == [(1, b"out\n"), (2, b"err\n")]
                assert (await box.status())["state"] == "busy"  # (made for this client)
                assert any("echo out" in str(log.command) for log in await box.logs())
            finally:
                await box.delete()

    asyncio.run(main())


# --- reaping and dead containers -----------------------------------------------------------


def test_ttl_and_idle_timeout_are_reaped(
    client: Client, docker_client: docker.DockerClient
) -> None:
    ttl = client.create(**SMALL, ttl_sec=1)
    idle = client.create(**SMALL, idle_timeout_sec=1.5)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        states = {client.info(ttl.id).state, client.info(idle.id).state}
        if states == {"deleted"}:
            break
        time.sleep(0.2)
    assert client.info(ttl.id).state_reason == "its TTL ran out"
    assert "idle for more than 1.5s" in (client.info(idle.id).state_reason or "")
    assert not docker_client.containers.list(
        all=True, filters={"label": f"dev.ale.rock.sandbox={ttl.id}"}
    )


def test_a_dead_container_marks_its_sandbox_error(
    client: Client, docker_client: docker.DockerClient
) -> None:
    sb = client.create(**SMALL)
    docker_client.containers.get(sb.info.container_id or "").kill()
    deadline = time.monotonic() + 30
    while client.info(sb.id).state != "error" and time.monotonic() < deadline:
        time.sleep(0.2)
    info = client.info(sb.id)
    assert info.state == "error" and "exited" in (info.state_reason or ""), info.state_reason
    with pytest.raises(SandboxError, match="is error"):
        sb.exec("true")
    sb.delete()
    assert client.info(sb.id).state == "deleted"


def test_metrics(client: Client) -> None:
    with client.create(**SMALL) as sb:
        sb.exec("true")
    text = client.metrics()
    for name in (
        'rock_sandboxes{state="deleted"}',
        "rock_acquire_seconds_bucket",
        'rock_exec_seconds_count{kind="exec"}',
        "rock_http_requests_total",
    ):
        assert name in text, name
