"""The machine's CPU a sandbox command costs: a `docker exec` per command (rock's exec path)
vs a process already inside the sandbox starting it (rock's shell session; the baseline).

`make demo` spends about a fifth of its time in the engine's machinery around its commands
(docs/demo.md, "Where the last 3.7 minutes are"): each `docker exec` has dockerd, containerd,
the container's shim and a fresh `runc` process do work before the command's own fork. This
script puts a figure on what an exec path through a long-lived process in the sandbox (as
E2B's envd is) could save. Both paths run the same short command in one sandbox of the
docker backend (no daemon, no HTTP), in alternating blocks; the CPU is the whole machine's
busy time from /proc/stat over each block (so run it on a quiet machine), which counts the
short-lived `runc` processes no per-process sampling sees. The session is the baseline: its
per-command cost is about what a process inside the sandbox would pay.

Printed: CPU-ms and wall-ms per command each way and their ratio.

Usage: .venv/bin/python benchmarks/rock_exec_cpu.py [--n 100] [--rounds 3] [--command /bin/true]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import docker
from _rockbench import machine

from rock.backends.docker import DockerBackend
from rock.models import SandboxSpec

HZ = os.sysconf("SC_CLK_TCK")


def busy_seconds() -> float:
    """The machine's CPU time spent busy so far, in seconds (every core, /proc/stat)."""
    fields = [int(f) for f in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
    return (sum(fields) - fields[3] - fields[4]) / HZ  # (less idle and iowait)


def block(run: Callable[[], None], n: int) -> tuple[float, float]:
    """CPU seconds and wall seconds per command over ``n`` calls of ``run``."""
    cpu, wall = busy_seconds(), time.perf_counter()
    for _ in range(n):
        run()
    return (busy_seconds() - cpu) / n, (time.perf_counter() - wall) / n


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=100, help="commands a block")
    parser.add_argument("--rounds", type=int, default=3, help="blocks each way, alternating")
    parser.add_argument(
        "--command",
        default="/bin/true",
        help="the shell command run each time (a program, not a shell builtin: a fork and exec)",
    )
    args = parser.parse_args()
    backend = DockerBackend(docker.from_env(), daemon_id="bench-exec-cpu")
    execs: list[tuple[float, float]] = []
    sessions: list[tuple[float, float]] = []
    with backend.create(SandboxSpec(memory_mb=256, pids_limit=128)) as sandbox:
        session = sandbox.session()

        def by_exec() -> None:
            assert sandbox.exec(args.command).exit_code == 0

        def by_session() -> None:
            assert session.run(args.command).exit_code == 0

        for warm_up in (by_exec, by_session):
            block(warm_up, 10)
        for _ in range(args.rounds):
            execs.append(block(by_exec, args.n))
            sessions.append(block(by_session, args.n))
        session.close()
    exec_cpu = statistics.median(c for c, _ in execs)
    session_cpu = statistics.median(c for c, _ in sessions)
    exec_wall = statistics.median(w for _, w in execs)
    session_wall = statistics.median(w for _, w in sessions)
    print(f"machine: {machine()}")
    print(f"command: {args.command!r}, {args.rounds} blocks of {args.n} each way (medians)")
    print(
        f"docker exec a command       : {exec_cpu * 1e3:.1f} CPU-ms, {exec_wall * 1e3:.1f} ms wall"
    )
    print(
        f"session in the sandbox      : {session_cpu * 1e3:.1f} CPU-ms, {session_wall * 1e3:.1f} ms wall"
    )
    print(
        f"RATIO CPU per command, docker exec / session (baseline) = {exec_cpu / session_cpu:.1f}x"
    )
    print(
        f"RATIO wall per command, docker exec / session (baseline) = {exec_wall / session_wall:.1f}x"
    )


if __name__ == "__main__":
    main()
