"""The machine's CPU a sandbox command costs: a `docker exec` per command (the baseline)
vs rock's exec path, which starts each command through one long-lived agent in the sandbox
(`rock.backends._exec_agent`), and vs rock's shell session (a bash already in the sandbox).

`make demo` spent about a fifth of its time in the engine's machinery around its commands
(docs/demo.md, "Where the last 3.7 minutes are"): each `docker exec` has dockerd, containerd,
the container's shim and a fresh `runc` process do work before the command's own fork. The
agent (as E2B's envd) takes the engine out of a command's start. The three paths run the
same short command in sandboxes of the docker backend (no daemon, no HTTP), in alternating
blocks; the CPU is the whole machine's busy time from /proc/stat over each block (so run it
on a quiet machine), which counts the short-lived `runc` processes no per-process sampling
sees.

Printed: CPU-ms and wall-ms per command each way and the ratios against `docker exec`.

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
    client = docker.from_env()
    spec = SandboxSpec(memory_mb=256, pids_limit=128)
    blocks: dict[str, list[tuple[float, float]]] = {"exec": [], "agent": [], "session": []}
    with (
        DockerBackend(client, daemon_id="bench-exec-cpu", exec_agent=False).create(spec) as plain,
        DockerBackend(client, daemon_id="bench-exec-cpu", exec_agent=True).create(spec) as agent,
    ):
        session = plain.session()
        paths: dict[str, Callable[[], None]] = {
            "exec": lambda: check(plain.exec(args.command).exit_code),
            "agent": lambda: check(agent.exec(args.command).exit_code),
            "session": lambda: check(session.run(args.command).exit_code),
        }
        for warm_up in paths.values():
            block(warm_up, 10)
        for _ in range(args.rounds):
            for name, run in paths.items():
                blocks[name].append(block(run, args.n))
        session.close()
    cpu = {name: statistics.median(c for c, _ in b) for name, b in blocks.items()}
    wall = {name: statistics.median(w for _, w in b) for name, b in blocks.items()}
    print(f"machine: {machine()}")
    print(f"command: {args.command!r}, {args.rounds} blocks of {args.n} each way (medians)")
    for name, label in (
        ("exec", "docker exec a command (baseline)"),
        ("agent", "rock's exec agent             "),
        ("session", "rock's shell session          "),
    ):
        print(f"{label}: {cpu[name] * 1e3:.1f} CPU-ms, {wall[name] * 1e3:.1f} ms wall")
    for name in ("agent", "session"):
        print(
            f"RATIO CPU per command, docker exec (baseline) / {name} = "
            f"{cpu['exec'] / cpu[name]:.1f}x"
        )
        print(
            f"RATIO wall per command, docker exec (baseline) / {name} = "
            f"{wall['exec'] / wall[name]:.1f}x"
        )


def check(exit_code: int) -> None:
    if exit_code != 0:
        raise SystemExit(f"the benchmark's command failed (exit {exit_code}); pick another.")


if __name__ == "__main__":
    main()
