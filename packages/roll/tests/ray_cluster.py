"""A local Ray cluster for roll's tests, started by ``ray start --head`` as a user would: the
Ray tests and the signal test of `roll train` on Ray share how it starts and stops."""

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
from collections.abc import Iterator
from pathlib import Path

RAY = Path(sys.executable).parent / "ray"


def free_ports(count: int) -> list[int]:
    """``count`` free ports, all different: each socket stays bound until all are chosen
    (a port just released can be handed out again, and Ray refuses two equal ports)."""
    with contextlib.ExitStack() as stack:
        sockets = [stack.enter_context(socket.socket()) for _ in range(count)]
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [int(s.getsockname()[1]) for s in sockets]


@contextlib.contextmanager
def local_ray_cluster() -> Iterator[str]:
    """A local Ray cluster of 2 CPUs on free ports, in its own process group; its address
    inside, and after it the cluster stopped (its processes gone)."""
    temp = Path(tempfile.mkdtemp(prefix="roll-ray-", dir="/tmp"))  # short: unix sockets
    port, client, dashboard, agent, metrics, runtime_env = free_ports(6)
    command = [
        str(RAY), "start", "--head", "--block", f"--port={port}", "--num-cpus=2",
        "--num-gpus=0", "--include-dashboard=false", "--disable-usage-stats",
        f"--temp-dir={temp}", f"--ray-client-server-port={client}",
        f"--dashboard-port={dashboard}", f"--dashboard-agent-listen-port={agent}",
        f"--metrics-export-port={metrics}", f"--runtime-env-agent-port={runtime_env}",
    ]  # fmt: skip
    log = (temp / "ray-start.log").open("wb")
    # no token authentication, whatever ~/.ray holds: the test's driver connects by address
    env = {**os.environ, "RAY_AUTH_MODE": "disabled"}
    proc = subprocess.Popen(command, stdout=log, stderr=log, env=env, start_new_session=True)
    try:
        deadline = time.monotonic() + 90
        while True:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 1):
                break
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"ray start failed: {(temp / 'ray-start.log').read_text()}")
            time.sleep(0.2)
        yield f"127.0.0.1:{port}"
    finally:
        proc.send_signal(signal.SIGTERM)  # --block: ray stops what it started
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(60)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        log.close()
        shutil.rmtree(temp, ignore_errors=True)
