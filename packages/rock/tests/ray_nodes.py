"""A real local Ray cluster whose nodes stand for machines: each node is a ``ray start``
of its own, bound to its own Docker engine (the first engine, and a second dockerd started by
scripts/ensure-second-engine.sh), in its own process group so that a test can lose it."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import ClassVar

import docker

from rock.backends.base import LABEL_DAEMON, LABEL_SANDBOX

REPO = Path(__file__).resolve().parents[3]
RAY = Path(sys.executable).parent / "ray"
FIRST_ENGINE = "unix:///var/run/docker.sock"


def second_engine() -> str:
    """The second engine's DOCKER_HOST (started, with the base image, if it was not)."""
    done = subprocess.run(
        [str(REPO / "scripts" / "ensure-second-engine.sh")], capture_output=True, text=True
    )
    if done.returncode != 0:
        raise RuntimeError(f"the second engine did not start: {done.stderr.strip()}")
    return done.stdout.strip().splitlines()[-1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _ports(*more: str) -> list[str]:
    """A node's ports: a range of 41 for its workers and its single ports (``more``: the
    head's too) outside it (the system hands out free ports in sequence, so one could fall in
    the range: Ray refuses, as it did in CI for a client-server port chosen before the range),
    each of them different (a port just released can be handed out again: Ray refused a
    metrics-export port equal to another of the node's in CI)."""
    low = free_port()
    workers = range(low, low + 41)
    taken: set[int] = set()

    def outside() -> int:
        while (port := free_port()) in workers or port in taken:
            pass
        taken.add(port)
        return port

    singles = ("node-manager", "object-manager", "metrics-export", "runtime-env-agent",
               "dashboard-agent-listen", "dashboard-agent-grpc", *more)  # fmt: skip
    return [f"--{name}-port={outside()}" for name in singles] + [
        f"--min-worker-port={workers[0]}",
        f"--max-worker-port={workers[-1]}",
    ]


class RayNodes:
    """Start with `head`, add nodes with `add`; `close` stops every node it started."""

    running: ClassVar[list[RayNodes]] = []
    """The clusters started and not closed yet (a failing test reports their workers' logs)."""

    def __init__(self) -> None:
        RayNodes.running.append(self)
        self.temp = Path(tempfile.mkdtemp(prefix="rock-ray-", dir="/tmp"))  # unix socket paths
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.nodes: list[subprocess.Popen[bytes]] = []

    def _start(
        self, args: list[str], docker_host: str, name: str, ports: tuple[str, ...] = ()
    ) -> subprocess.Popen[bytes]:
        env = {**os.environ, "RAY_AUTH_MODE": "disabled", "DOCKER_HOST": docker_host}
        log = (self.temp / f"{name}.log").open("wb")
        command = [
            str(RAY), "start", "--block", "--num-cpus=2", "--num-gpus=0",
            "--object-store-memory=100000000", "--disable-usage-stats", *_ports(*ports), *args,
        ]  # fmt: skip
        proc = subprocess.Popen(command, stdout=log, stderr=log, env=env, start_new_session=True)
        self.nodes.append(proc)
        return proc

    def head(self, docker_host: str = FIRST_ENGINE) -> None:
        proc = self._start(
            [
                "--head",
                f"--port={self.port}",
                "--include-dashboard=false",
                f"--temp-dir={self.temp}",
            ],
            docker_host,
            "head",
            ("ray-client-server", "dashboard"),
        )
        deadline = time.monotonic() + 90
        while True:
            with (
                contextlib.suppress(OSError),
                socket.create_connection(("127.0.0.1", self.port), 1),
            ):
                return
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"ray start failed: {(self.temp / 'head.log').read_text()}")
            time.sleep(0.2)

    def add(self, docker_host: str, *, wait_for: int | None = None) -> subprocess.Popen[bytes]:
        """Another node, bound to ``docker_host``; with ``wait_for``, until the cluster has
        that many alive nodes."""
        proc = self._start([f"--address={self.address}"], docker_host, f"node{len(self.nodes)}")
        if wait_for is not None:
            self.wait_nodes(wait_for)
        return proc

    def wait_nodes(self, count: int, timeout: float = 90) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            done = subprocess.run(
                [str(RAY), "status", f"--address={self.address}"],
                capture_output=True,
                text=True,
                env={**os.environ, "RAY_AUTH_MODE": "disabled"},
            )
            active = done.stdout.split("Active:", 1)[-1].split("Pending:", 1)[0]
            if active.count("node_") >= count:
                return
            time.sleep(1)
        raise RuntimeError(f"the cluster did not reach {count} nodes in {timeout:.0f}s")

    def workers_that_died(self) -> str:
        """What the logs of the cluster's workers say about one that ended abnormally (their
        last lines, newest first), for a failing test's report: a node agent that "died
        unexpectedly" was seen in CI, and its logs went with the cluster's temporary folder."""
        marks = ("Fatal", "SIGSEGV", "Segmentation", "Check failed", "Traceback", "Killed")
        logs = sorted(self.temp.glob("session_*/logs/*worker*"), key=lambda p: p.stat().st_mtime)
        found = []
        for log in reversed(logs):
            text = log.read_text(errors="replace")
            if any(mark in text for mark in marks):
                found.append(f"--- {log.name}\n" + "\n".join(text.splitlines()[-30:]))
            if len(found) == 4:
                break
        return "\n".join(found) or "(no worker log tells of a crash)"

    def close(self) -> None:
        for proc in reversed(self.nodes):
            proc.send_signal(signal.SIGTERM)  # --block: ray stops what it started
        for proc in self.nodes:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(60)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
        shutil.rmtree(self.temp, ignore_errors=True)
        with contextlib.suppress(ValueError):
            RayNodes.running.remove(self)


def agent_pids() -> dict[str, list[int]]:
    """The rock agents running on this machine, by the DOCKER_HOST of each (an agent of a
    daemon that just stopped may still be there beside the running daemon's)."""
    out: dict[str, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            title = (entry / "cmdline").read_bytes()
            if not title.startswith(b"ray::NodeAgent"):
                continue
            env = dict(
                item.split("=", 1)
                for item in (entry / "environ").read_bytes().decode(errors="replace").split("\0")
                if "=" in item
            )
        except OSError:
            continue
        out.setdefault(env.get("DOCKER_HOST", FIRST_ENGINE), []).append(int(entry.name))
    return out


def containers(host: str, daemon_id: str) -> set[str]:
    """The sandbox ids of ``daemon_id``'s containers on the engine at ``host``."""
    client = docker.DockerClient(base_url=host)
    try:
        rows = client.api.containers(all=True, filters={"label": f"{LABEL_DAEMON}={daemon_id}"})
        return {row["Labels"][LABEL_SANDBOX] for row in rows}
    finally:
        client.close()


def remove_containers(hosts: list[str] | tuple[str, ...], daemon_id: str) -> None:
    """Remove what ``daemon_id`` left on each engine (a killed daemon does not clean up)."""
    for host in hosts:
        client = docker.DockerClient(base_url=host)
        rows = client.api.containers(all=True, filters={"label": f"{LABEL_DAEMON}={daemon_id}"})
        for row in rows:
            with contextlib.suppress(docker.errors.NotFound):
                client.api.remove_container(row["Id"], force=True)
        client.close()
