"""The ray backend for real: `rock serve --backend ray` on a local Ray cluster of two nodes,
each bound to its own Docker engine (a second dockerd with its own socket, data root and
bridge), the state in PostgreSQL: placement over both, verbs reaching the owner, a node's
agent killed under load, a node that joins, and the daemon killed -9."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest

pytest.importorskip("ray", reason="ray is not installed (pip install 'rock[ray]')")

from ray_nodes import (
    FIRST_ENGINE,
    RayNodes,
    agent_pids,
    containers,
    free_port,
    remove_containers,
    second_engine,
)
from rock_daemons import Serve

from rock.backends.base import ImageMissing, NodeLost, SandboxConflict
from rock.backends.cluster_sandbox import Node
from rock.client import Client, RemoteSandbox
from rock.errors import DaemonError
from rock.models import ExecRequest, SandboxSpec

ENV = {**os.environ, "RAY_AUTH_MODE": "disabled"}
ONLY_FIRST = "rock-test/only-first-node:1"


# one worker runs every Ray test in turn: each starts Ray clusters of its own
pytestmark = pytest.mark.xdist_group("ray")


@pytest.fixture(scope="module")
def engines() -> tuple[str, str]:
    return FIRST_ENGINE, second_engine()


@pytest.fixture(scope="module")
def only_first(engines: tuple[str, str]) -> Iterator[str]:
    """An image the first engine has and the second has not."""
    first = docker.DockerClient(base_url=engines[0])
    first.images.get("rock/base:bookworm").tag(ONLY_FIRST)
    yield ONLY_FIRST
    with contextlib.suppress(docker.errors.ImageNotFound):
        first.images.remove(ONLY_FIRST)
    first.close()


@pytest.fixture(scope="module")
def cluster(engines: tuple[str, str]) -> Iterator[RayNodes]:
    nodes = RayNodes()
    try:
        nodes.head(engines[0])
        nodes.add(engines[1], wait_for=2)
        yield nodes
    finally:
        nodes.close()


def _wait(predicate: object, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return
        time.sleep(0.3)
    raise AssertionError(f"timed out waiting for {what}")


@contextlib.contextmanager
def _daemon(
    tmp_path: Path, address: str, pg_url: str, engines: tuple[str, ...], *pools: str
) -> Iterator[Serve]:
    daemon_id = f"pytest-ray-{os.urandom(3).hex()}"
    args = ["--backend", "ray", "--ray-address", address, "--database-url", pg_url]
    args += ["--daemon-id", daemon_id, "--cleanup", "--log-level", "debug"]
    for pool in pools:
        args += ["--pool", pool]
    serve = Serve(tmp_path / "home", free_port(), args)
    serve.start(env=ENV)
    try:
        yield serve
    except BaseException:  # what the daemon saw (its joins and placements), in the report
        print((serve.home / "daemon.log").read_text(errors="replace")[-20000:])
        for nodes in RayNodes.running:
            if nodes.address == address:
                print(nodes.workers_that_died())
        raise
    finally:
        serve.stop()
        remove_containers(engines, daemon_id)


def _daemon_id(serve: Serve) -> str:
    return serve.args[serve.args.index("--daemon-id") + 1]


def _node_of(client: Client, sandbox_id: str) -> str:
    started = [h.reason for h in client.info(sandbox_id).history if h.to_state == "ready"]
    assert started and started[0] and started[0].startswith("started on node ")
    return started[0].removeprefix("started on node ")


def test_a_pool_spreads_over_both_nodes_and_each_verb_reaches_the_owner(
    cluster: RayNodes, only_first: str, engines: tuple[str, str], pg_url: str, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    with _daemon(tmp_path, cluster.address, pg_url, engines, "warm=4:8") as serve:
        client = Client(serve.url, home=serve.home)
        client.wait_pool("warm", idle=4, timeout=120)
        daemon_id = _daemon_id(serve)
        first, second = (containers(host, daemon_id) for host in engines)
        assert len(first) == 2 and len(second) == 2  # spread by free capacity

        boxes = [client.acquire("warm") for _ in range(4)]
        assert len({_node_of(client, box.id) for box in boxes}) == 2
        for box in boxes:  # each verb reaches the node that owns the sandbox
            assert box.exec("cat /etc/hostname").stdout.decode().strip() == box.id
            box.write_file("/tmp/note", b"kept\n")
            assert box.read_file("/tmp/note") == b"kept\n"
            session = box.session()
            session.run("cd /tmp && export MARK=7")
            assert session.run("pwd; echo $MARK").output == b"/tmp\n7\n"
            session.close()

        # an interrupt reaches the command on its node while the call runs there
        box = boxes[-1]
        began = time.monotonic()
        stopper = threading.Timer(1.0, lambda: box.interrupt("long"))
        stopper.start()
        cut = box.run(ExecRequest(command="sleep 30; echo never", tag="long", timeout=60))
        stopper.join()
        assert time.monotonic() - began < 20 and b"never" not in cut.stdout
        assert cut.exit_code != 0

        # an image only the first node has: its sandboxes go there, though it is fuller
        only_first = [client.create(SandboxSpec(image=ONLY_FIRST, memory_mb=256)) for _ in "ab"]
        assert {b.id for b in only_first} <= containers(engines[0], daemon_id)
        with pytest.raises(ImageMissing) as missing:
            client.create(SandboxSpec(image="rock-test/on-no-node:1"))
        assert str(missing.value) == (
            "image rock-test/on-no-node:1 is on no node of the cluster that can start it; build "
            "or load it on the nodes (each node's engine has its own images)."
        )

        # an image the daemon builds (a Harbor task's Dockerfile, say) goes to a node, and
        # its sandboxes are placed on that node
        context = tmp_path / "ctx"
        context.mkdir()
        (context / "Dockerfile").write_text("FROM rock/base:bookworm\nRUN echo on-a-node > /m\n")
        built = client.build_image(context, name="ray-built")
        with client.create(SandboxSpec(image=built.tag, memory_mb=256)) as on_node:
            assert on_node.exec("cat /m").stdout == b"on-a-node\n"

        # streamed output crosses the cluster too (the E2B API streams)
        from e2b import Sandbox

        monkeypatch.setenv("E2B_API_URL", serve.url)
        monkeypatch.setenv("E2B_SANDBOX_URL", serve.url)
        monkeypatch.setenv("E2B_API_KEY", (serve.home / "token").read_text().strip())
        e2b_box = Sandbox.create()
        seen: list[tuple[float, str]] = []
        done = e2b_box.commands.run(
            "for i in 1 2 3; do echo $i; sleep 0.3; done",
            on_stdout=lambda line: seen.append((time.monotonic(), line)),
        )
        assert done.exit_code == 0 and [line.strip() for _, line in seen] == ["1", "2", "3"]
        assert seen[-1][0] - seen[0][0] > 0.4  # as it came, not at the end
        assert e2b_box.pause() is True and e2b_box.is_running() is False  # on its node
        assert Sandbox.connect(e2b_box.sandbox_id).commands.run("echo on").stdout == "on\n"
        e2b_box.kill()


def test_a_node_lost_under_load_leaves_no_sandbox_unaccounted_and_the_pool_refills(
    cluster: RayNodes, engines: tuple[str, str], pg_url: str, tmp_path: Path
) -> None:
    with _daemon(tmp_path, cluster.address, pg_url, engines, "warm=4:16") as serve:
        client = Client(serve.url, home=serve.home)
        client.wait_pool("warm", idle=4, timeout=120)
        daemon_id = _daemon_id(serve)
        stop = threading.Event()
        failures: list[str] = []
        served = [0]

        def load() -> None:  # acquire, run, release, over and over
            while not stop.is_set():
                try:
                    box = client.acquire("warm")
                    box.exec("echo $HOSTNAME")
                    box.delete()
                    served[0] += 1
                except (SandboxConflict, DaemonError) as exc:  # NodeLost is one
                    failures.append(f"{type(exc).__name__}: {exc}")
                    time.sleep(0.1)

        workers = [threading.Thread(target=load) for _ in range(3)]
        for worker in workers:
            worker.start()
        _wait(lambda: served[0] >= 6, 120, "load before the loss")
        # one sandbox held on the second node, so that the node surely has one when it goes
        # (the load's sandboxes come and go: it may have none at that moment)
        others: list[RemoteSandbox] = []
        while (held := client.create(SandboxSpec(memory_mb=256))).id not in containers(
            engines[1], daemon_id
        ):
            others.append(held)
            assert len(others) < 8, "no sandbox placed on the second node"
        lost = agent_pids()[engines[1]]
        for pid in lost:  # the second node's agent dies mid-load (and any left from before)
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        _wait(lambda: served[0] >= 20, 120, "load after the loss")
        stop.set()
        for worker in workers:
            worker.join(60)

        # the node's sandboxes went to error as lost (one idle in the pool when the node
        # went may since have been cleared from the pool: its history still says so)
        def went_as_lost(sandbox_id: str) -> bool:
            return any(
                h.to_state == "error" and "was lost" in (h.reason or "")
                for h in client.info(sandbox_id).history
            )

        _wait(lambda: went_as_lost(held.id), 60, "the held sandbox to go as lost")
        with pytest.raises((NodeLost, SandboxConflict), match="was lost"):
            held.exec("true")
        errors = client.list(state=["error"])
        assert all("was lost" in (s.state_reason or "") for s in errors), errors
        for box in others:
            box.delete()
        assert all(
            f.startswith(("NodeLost: ", "SandboxConflict: ")) and "was lost" in f for f in failures
        ), failures
        # the agent comes back on the node (it is still there) and gets work again
        _wait(lambda: set(agent_pids().get(engines[1], [])) - set(lost), 60,
              "a new agent on the node")  # fmt: skip
        client.wait_pool("warm", idle=4, timeout=120)

        def accounted() -> bool:
            live = {s.id for s in client.list(state=["ready", "busy", "starting", "pending"])}
            found = containers(engines[0], daemon_id) | containers(engines[1], daemon_id)
            return live == found

        _wait(accounted, 60, "every container to be a live sandbox and each live one a container")
        fresh = [client.create(SandboxSpec(memory_mb=256)) for _ in range(4)]
        assert containers(engines[1], daemon_id) & {box.id for box in fresh}  # work again


def test_a_node_that_joins_gets_work(engines: tuple[str, str], pg_url: str, tmp_path: Path) -> None:
    nodes = RayNodes()
    try:
        nodes.head(engines[0])
        with _daemon(tmp_path, nodes.address, pg_url, engines) as serve:
            client = Client(serve.url, home=serve.home)
            daemon_id = _daemon_id(serve)
            before = [client.create(SandboxSpec(memory_mb=256)) for _ in range(2)]
            assert {b.id for b in before} <= containers(engines[0], daemon_id)
            # a node whose engine does not answer gets no sandboxes, and the daemon goes on
            nodes.add("unix:///run/rock-no-engine.sock", wait_for=2)
            log = serve.home / "daemon.log"
            _wait(lambda: "gets no sandboxes" in log.read_text(), 60, "the engineless node")
            assert "No Docker engine answers at unix:///run/rock-no-engine.sock" in log.read_text()
            assert client.create(SandboxSpec(memory_mb=256)).id in containers(engines[0], daemon_id)
            nodes.add(engines[1], wait_for=3)
            _wait(lambda: engines[1] in agent_pids(), 60, "an agent on the new node")
            # the agent's process runs before the daemon has asked it what the node holds
            joined = f"joined: engine {engines[1]},"
            _wait(lambda: joined in log.read_text(), 60, "the daemon to take the new node")
            after = [client.create(SandboxSpec(memory_mb=256)) for _ in range(2)]
            assert {b.id for b in after} <= containers(engines[1], daemon_id)  # emptier
            assert after[0].exec("true").exit_code == 0
    finally:
        nodes.close()


def test_a_daemon_killed_9_reconciles_on_both_nodes(
    cluster: RayNodes, engines: tuple[str, str], pg_url: str, tmp_path: Path
) -> None:
    with _daemon(tmp_path, cluster.address, pg_url, engines, "warm=2:6") as serve:
        client = Client(serve.url, home=serve.home, retries=3)
        client.wait_pool("warm", idle=2, timeout=120)
        daemon_id = _daemon_id(serve)
        held = [_create(client) for _ in range(2)]
        for box in held:
            box.write_file("/tmp/state", b"before\n")
        before = containers(engines[0], daemon_id), containers(engines[1], daemon_id)
        assert all(len(found) == 2 for found in before)

        serve.kill()
        serve.start(env=ENV)
        client.wait_pool("warm", idle=2, timeout=120)
        assert (containers(engines[0], daemon_id), containers(engines[1], daemon_id)) == before
        for box in held:  # adopted on both nodes, files and all
            again = client.sandbox(box.id)
            assert again.read_file("/tmp/state") == b"before\n"
            assert client.info(box.id).state == "busy"
        log = (serve.home / "daemon.log").read_text()
        assert "reconciled: {'adopted': 4" in log


def test_a_daemon_id_is_held_on_the_cluster_while_its_daemon_lives(
    pg_url: str, tmp_path: Path
) -> None:
    """A second daemon with a running one's id is refused before it touches a sandbox; the
    hold of a daemon killed -9 goes with it, and the daemon starts again (one node)."""
    nodes = RayNodes()
    try:
        nodes.head(FIRST_ENGINE)
        with _daemon(tmp_path, nodes.address, pg_url, (FIRST_ENGINE,)) as serve:
            client = Client(serve.url, home=serve.home, retries=3)
            held = client.create(SandboxSpec(memory_mb=256, ttl_sec=600))
            argv = [sys.executable, "-m", "rock.cli", "serve", "--home", str(tmp_path / "b")]
            argv += ["--port", str(free_port()), "--backend", "ray", "--ray-address"]
            argv += [nodes.address, "--daemon-id", _daemon_id(serve)]
            second = subprocess.run(argv, env=ENV, capture_output=True, text=True, timeout=180)
            assert second.returncode == 1 and "Traceback" not in second.stderr
            assert "another rock daemon holds the daemon id" in second.stderr
            assert held.exec("echo kept").stdout == b"kept\n"
            serve.kill()
            serve.start(env=ENV)
            assert client.sandbox(held.id).exec("echo adopted").stdout == b"adopted\n"
    finally:
        nodes.close()


def test_placement_prefers_the_node_with_the_most_room() -> None:
    small = SandboxSpec(cpus=1, memory_mb=1024)
    busy = Node("a", "a", None, cpus=4, memory_mb=8192, runtimes=["runc"])
    idle = Node("b", "b", None, cpus=4, memory_mb=8192, runtimes=["runc"])
    busy.sandboxes = {"sb-1": small, "sb-2": small}
    assert max([busy, idle], key=lambda n: n.free(small)) is idle
    idle.starting = 2  # two on their way count as placed
    big = Node("c", "c", None, cpus=16, memory_mb=65536, runtimes=["runc"])
    big.sandboxes = {f"sb-{i}": small for i in range(3)}
    assert max([busy, idle, big], key=lambda n: n.free(small)) is big  # more room, more boxes


def test_the_ray_backend_refuses_a_cluster_that_is_not_there(tmp_path: Path) -> None:
    port = free_port()
    for extra, expected in [
        (["--backend", "ray", "--ray-address", f"127.0.0.1:{port}"],
         f"rock: no Ray cluster answers at 127.0.0.1:{port} (Connection refused); start one "
         "with 'ray start --head' and give its HOST:PORT, or use --backend docker."),
        (["--ray-address", f"127.0.0.1:{port}"],
         "rock: --ray-address is for the ray backend, and this daemon uses docker; add "
         "--backend ray, or leave the address out."),
    ]:  # fmt: skip
        done = subprocess.run(
            [sys.executable, "-m", "rock.cli", "serve", "--home", str(tmp_path), "--port", "0",
             *extra],
            capture_output=True, text=True, timeout=120, env=ENV,
        )  # fmt: skip
        assert done.returncode != 0
        assert done.stderr.strip().splitlines()[-1] == expected
        assert "Traceback" not in done.stderr


def test_a_machine_that_leaves_the_cluster_has_its_pool_share_refilled_elsewhere(
    cluster: RayNodes, engines: tuple[str, str], pg_url: str, tmp_path: Path
) -> None:
    """The whole second node goes (its raylet and agent killed -9, as a machine that dies),
    not only its agent: its sandboxes become errors, the pool refills on the node left, and
    when the machine is back its leftover containers are removed."""
    with _daemon(tmp_path, cluster.address, pg_url, engines, "warm=4:8") as serve:
        client = Client(serve.url, home=serve.home)
        client.wait_pool("warm", idle=4, timeout=120)
        daemon_id = _daemon_id(serve)
        gone = containers(engines[1], daemon_id)
        assert len(gone) == 2
        node = cluster.nodes[1]
        os.killpg(node.pid, signal.SIGKILL)
        node.wait(10)
        cluster.nodes.remove(node)

        def refilled() -> bool:
            errors = {s.id for s in client.list(state=["error"])}
            ready = {s.id for s in client.list(state=["ready"])}
            return errors == gone and len(ready) == 4

        _wait(refilled, 120, "the lost node's sandboxes closed and the pool refilled")
        assert {s.id for s in client.list(state=["ready"])} <= containers(engines[0], daemon_id)
        reasons = {s.state_reason for s in client.list(state=["error"])}
        assert all(r and "was lost" in r for r in reasons), reasons

        cluster.add(engines[1], wait_for=2)  # the machine is back: what it left is removed
        _wait(lambda: not containers(engines[1], daemon_id) & gone, 120, "leftovers removed")


def _create(client: Client) -> RemoteSandbox:
    """A sandbox, made again when its node's actor died under it (NodeLost says to): a node
    agent lost once under a full parallel test run, before this test's kill."""
    for attempt in range(3):
        try:
            return client.create(SandboxSpec(memory_mb=256, ttl_sec=600))
        except NodeLost:
            if attempt == 2:
                raise
    raise AssertionError("unreachable")
