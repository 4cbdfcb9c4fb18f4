"""Exec round trip of `true` through the daemon vs the docker SDK's exec_run directly.

Both run in the same container, interleaved, one at a time. The daemon's path:
HTTP on loopback -> FastAPI -> docker exec (with process-tree tracking and output
caps) -> an exec record in SQLite -> the JSON reply. Baseline: ``container.exec_run``.
The same for a command in a persistent session through the daemon, against the
same baseline (exec_run), and, to show what the daemon hop itself costs, against
the docker backend's in-process `ShellSession` (no HTTP, no database).
Goal (issue 3): ratio at most 1.3 for both against exec_run.

Usage: python benchmarks/rock_exec.py [--n 200]
"""

from __future__ import annotations

import argparse
import time

import docker
from _rockbench import daemon, machine, pct, summary

from rock.backends.docker import DockerBackend


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=200)
    args = parser.parse_args()
    engine = docker.from_env()
    via_daemon: list[float] = []
    direct: list[float] = []
    session_daemon: list[float] = []
    session_direct: list[float] = []
    with daemon() as (client, daemon_id):
        sb = client.create(memory_mb=256, pids_limit=128)
        container = engine.containers.get(sb.info.container_id or "")
        local = DockerBackend(engine, daemon_id=daemon_id).get(sb.id)
        for _ in range(10):  # warm both paths up
            sb.exec("true")
            container.exec_run(["true"])
        for _ in range(args.n):
            started = time.perf_counter()
            result = sb.exec("true")
            via_daemon.append(time.perf_counter() - started)
            assert result.exit_code == 0
            started = time.perf_counter()
            code, _ = container.exec_run(["true"])
            direct.append(time.perf_counter() - started)
            assert code == 0
        remote_session = sb.session()
        local_session = local.session()
        for _ in range(10):
            remote_session.run("true")
            local_session.run("true")
        for _ in range(args.n):
            started = time.perf_counter()
            assert remote_session.run("true").exit_code == 0
            session_daemon.append(time.perf_counter() - started)
            started = time.perf_counter()
            assert local_session.run("true").exit_code == 0
            session_direct.append(time.perf_counter() - started)
        remote_session.close()
        local_session.close()
        sb.delete()
    exec_ratio = pct(via_daemon, 50) / pct(direct, 50)
    session_ratio = pct(session_daemon, 50) / pct(direct, 50)
    hop = pct(session_daemon, 50) / pct(session_direct, 50)
    print(f"machine: {machine()}")
    print(f"exec via daemon        : {summary(via_daemon)}")
    print(f"exec_run (docker SDK)  : {summary(direct)}")
    print(f"session via daemon     : {summary(session_daemon)}")
    print(f"session in-process     : {summary(session_direct)}")
    print(
        f"goal: both ratios <= 1.3 ({'met' if max(exec_ratio, session_ratio) <= 1.3 else 'NOT met'})"
    )
    print(
        f"daemon hop: session via daemon / in-process session p50 = {hop:.1f}x "
        f"(+{(pct(session_daemon, 50) - pct(session_direct, 50)) * 1000:.1f} ms)"
    )
    print(f"RATIO session command via daemon / exec_run p50 = {session_ratio:.2f}x")
    print(f"RATIO exec via daemon / exec_run p50 = {exec_ratio:.2f}x")


if __name__ == "__main__":
    main()
