"""Shared pieces of the rock benchmarks: a daemon in its own process, percentiles, a command
timed in a container."""

from __future__ import annotations

import os
import platform
import statistics
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from rock.client import Client
from rock.synth.wiring import private_daemon


@contextmanager
def daemon() -> Iterator[tuple[Client, str]]:
    """A `rock serve` process on loopback (its own process, as in production) and a client.

    Everything it made is removed afterwards (the daemon runs with cleanup on exit).
    """
    daemon_id = f"bench-{uuid.uuid4().hex[:6]}"
    with private_daemon(daemon_id=daemon_id) as client:
        yield client, daemon_id


def pct(values: list[float], q: float) -> float:
    """The q-th percentile (0-100), nearest rank."""
    ordered = sorted(values)
    index = max(0, min(len(ordered) - 1, round(q / 100 * len(ordered) + 0.5) - 1))
    return ordered[index]


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f} ms"


def machine() -> str:
    cpu = "unknown cpu"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return f"{os.cpu_count()} cores ({cpu}), {mem:.0f} GiB, Python {platform.python_version()}"


def summary(values: list[float]) -> str:
    return (
        f"p50 {ms(pct(values, 50))}, p99 {ms(pct(values, 99))}, "
        f"mean {ms(statistics.fmean(values))} (n={len(values)})"
    )


def timed_in_container(box: Any, loop: str, runs: int, failed: str) -> tuple[float, float]:
    """(wall seconds, the container's CPU seconds) a run of ``loop``, a bash script of
    ``runs`` runs run in the docker-py container ``box`` (its CPU: user + system of its
    children, from bash's `times` after it); exits with ``failed`` and the output when the
    script fails."""
    began = time.monotonic()
    code, out = box.exec_run(["bash", "-c", f"{loop}; times"])
    wall = time.monotonic() - began
    if code != 0:
        raise SystemExit(f"{failed}: {out!r}")
    children = out.decode().strip().splitlines()[-1].split()  # "XmY.YYYs XmZ.ZZZs"

    def seconds(field: str) -> float:
        minutes, rest = field.rstrip("s").split("m")
        return int(minutes) * 60 + float(rest)

    return wall / runs, (seconds(children[0]) + seconds(children[1])) / runs


def interleaved(
    time_one: Callable[[str, int], tuple[float, float]], names: tuple[str, ...], runs: int
) -> dict[str, tuple[float, float]]:
    """Each variant of ``names`` timed by ``time_one(name, runs)`` (wall, CPU a run): two
    warm-up runs each, then ``runs`` in two interleaved blocks, averaged."""
    for name in names:
        time_one(name, 2)
    rows = {name: (0.0, 0.0) for name in names}
    for _ in range(2):
        for name in names:
            wall, cpu = time_one(name, max(1, runs // 2))
            rows[name] = (rows[name][0] + wall / 2, rows[name][1] + cpu / 2)
    return rows
