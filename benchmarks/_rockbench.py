"""Shared pieces of the rock benchmarks: a daemon in its own process, percentiles."""

from __future__ import annotations

import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import docker

from rock.client import Client

_SERVE = (
    "import sys; from pathlib import Path; from rock.daemon.server import ServeConfig, serve; "
    "serve(ServeConfig(home=Path(sys.argv[1]), port=0, daemon_id=sys.argv[2], "
    "log_level='warning', cleanup=True))"
)


@contextmanager
def daemon() -> Iterator[tuple[Client, str]]:
    """A `rock serve` process on loopback (its own process, as in production) and a client.

    Everything it made is removed afterwards (the daemon runs with cleanup on exit).
    """
    home = Path(tempfile.mkdtemp(prefix="rock-bench-"))
    daemon_id = f"bench-{uuid.uuid4().hex[:6]}"
    log = (home / "daemon.log").open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-c", _SERVE, str(home), daemon_id], stdout=log, stderr=log
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                info = json.loads((home / "daemon.json").read_text())
                if info["pid"] == proc.pid:
                    break
            except (OSError, ValueError, KeyError):
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"the daemon did not start; see {home / 'daemon.log'}")
            time.sleep(0.1)
        token = (home / "token").read_text().strip()
        with Client(info["url"], token) as client:
            yield client, daemon_id
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(120)
        except subprocess.TimeoutExpired:
            proc.kill()
        engine = docker.from_env()
        for c in engine.containers.list(
            all=True, filters={"label": f"dev.ale.rock.daemon={daemon_id}"}
        ):
            c.remove(force=True)


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
