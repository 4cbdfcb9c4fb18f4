"""Scale: hundreds of sandboxes alive at once on one machine.

Creates ``--n`` sandboxes through the daemon with ``--parallel`` creators, checks each
one runs a command, and reports the creation rate and the memory each idle sandbox
costs the host (drop in MemAvailable while they are all alive, divided by n; this
includes the engine's per-container shim). Baseline: the same number of bare
``docker run`` containers of the same image (``sleep infinity``, no limits, no
labels, no daemon) made with the same parallelism; the ratios compare rate and
memory per container.

Usage: python benchmarks/rock_scale.py [--n 200] [--parallel 8]
"""

from __future__ import annotations

import argparse
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import docker
from _rockbench import daemon, machine

from rock.images.base import BASE_IMAGE


def available_mib() -> float:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no MemAvailable in /proc/meminfo")


def settle() -> float:
    time.sleep(3)
    return available_mib()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=200)
    parser.add_argument("--parallel", type=int, default=8)
    args = parser.parse_args()
    engine = docker.from_env()
    with daemon() as (client, _):
        before = settle()
        started = time.perf_counter()
        with ThreadPoolExecutor(args.parallel) as pool:
            boxes = list(
                pool.map(lambda _: client.create(memory_mb=256, pids_limit=128), range(args.n))
            )
        rock_rate = args.n / (time.perf_counter() - started)
        alive = sum(1 for s in client.list() if s.state == "busy")
        with ThreadPoolExecutor(args.parallel) as pool:
            answers = list(pool.map(lambda b: b.exec("echo ok", timeout=300), boxes))
        working = sum(1 for a in answers if a.stdout == b"ok\n" and a.exit_code == 0)
        for box, a in zip(boxes, answers, strict=True):
            if a.stdout != b"ok\n" or a.exit_code != 0:
                print(
                    f"  {box.id} did not answer: exit {a.exit_code}, stdout {a.stdout[:100]!r}, "
                    f"stderr {a.stderr[:300]!r}, timed out {a.timed_out}, {a.duration_sec:.1f}s"
                )
        rock_mib = (before - settle()) / args.n
        with ThreadPoolExecutor(args.parallel) as pool:
            list(pool.map(lambda b: b.delete(), boxes))

    before = settle()
    started = time.perf_counter()
    with ThreadPoolExecutor(args.parallel) as pool:
        bare = list(
            pool.map(
                lambda _: engine.containers.run(
                    BASE_IMAGE, ["sleep", "infinity"], detach=True, network_mode="none"
                ),
                range(args.n),
            )
        )
    bare_rate = args.n / (time.perf_counter() - started)
    bare_mib = (before - settle()) / args.n
    with ThreadPoolExecutor(args.parallel) as pool:
        list(pool.map(lambda c: c.remove(force=True), bare))

    print(f"machine: {machine()}")
    print(
        f"rock: {args.n} sandboxes alive at once ({alive} busy per the daemon, {working} "
        f"answered a command), created at {rock_rate:.1f}/s with {args.parallel} creators, "
        f"{rock_mib:.1f} MiB of host memory each"
    )
    print(f"bare docker run: {args.n} containers at {bare_rate:.1f}/s, {bare_mib:.1f} MiB each")
    print(f"memory per sandbox / per bare container = {rock_mib / bare_mib:.2f}x")
    print(f"RATIO creation rate rock / bare docker run = {rock_rate / bare_rate:.2f}x")


if __name__ == "__main__":
    main()
