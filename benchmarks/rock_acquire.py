"""Acquire a sandbox from a warm pool vs start one cold through the docker SDK.

Pool: the daemon keeps ``--idle`` started sandboxes; each acquire is one HTTP call
that hands over a running container. Two patterns: a *burst* (acquires back to back,
as a training step asking for a batch of sandboxes; the pool refills once the burst
pauses) and *steady* (one acquire every 0.4 s, so replacements are being started
while the next acquire runs). Baseline: ``containers.run`` of the same image with
the same limits, directly on the engine (no daemon, no database). Rounds interleave
them. Figures: p50/p99 of each and the ratio cold p50 / acquire p50.
Goal (issue 3): acquire p50 under 20 ms and at least 20x faster than cold.

Usage: python benchmarks/rock_acquire.py [--rounds 5] [--idle 10]
"""

from __future__ import annotations

import argparse
import time

import docker
from _rockbench import daemon, machine, ms, pct, summary

from rock.backends._reap import KEEPALIVE
from rock.images.base import BASE_IMAGE
from rock.models import SandboxSpec

SPEC = SandboxSpec(memory_mb=256, pids_limit=128)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--idle", type=int, default=10, help="pool size = acquires per round")
    args = parser.parse_args()
    engine = docker.from_env()
    acquire: list[float] = []
    steady: list[float] = []
    cold: list[float] = []
    with daemon() as (client, daemon_id):
        client.set_pool("bench", SPEC, min_idle=args.idle, max_total=args.idle * 3)
        for _ in range(args.rounds):
            client.wait_pool("bench", timeout=300)
            time.sleep(1.0)  # let the engine settle after the refill
            leased = []
            for _ in range(args.idle):
                started = time.perf_counter()
                leased.append(client.acquire("bench"))
                acquire.append(time.perf_counter() - started)
            made = []
            for _ in range(args.idle):
                started = time.perf_counter()
                made.append(
                    engine.containers.run(
                        BASE_IMAGE,
                        KEEPALIVE,
                        detach=True,
                        init=True,
                        network_mode="none",
                        mem_limit="256m",
                        memswap_limit="256m",
                        nano_cpus=1_000_000_000,
                        pids_limit=128,
                        security_opt=["no-new-privileges"],
                        labels={"dev.ale.rock.bench": daemon_id},
                    )
                )
                cold.append(time.perf_counter() - started)
            for container in made:
                container.remove(force=True)
            for sb in leased:
                sb.delete()
            client.wait_pool("bench", timeout=300)
            time.sleep(1.0)
            leased = []
            for _ in range(args.idle):
                started = time.perf_counter()
                leased.append(client.acquire("bench"))
                steady.append(time.perf_counter() - started)
                time.sleep(0.4)
            for sb in leased:
                sb.delete()
    print(f"machine: {machine()}")
    print(f"acquire, burst         : {summary(acquire)}")
    print(f"acquire, steady        : {summary(steady)}")
    print(f"cold containers.run    : {summary(cold)}")
    print(f"steady: cold p50 / acquire p50 = {pct(cold, 50) / pct(steady, 50):.1f}x")
    ratio = pct(cold, 50) / pct(acquire, 50)
    print(
        f"goal: acquire p50 < 20 ms ({'met' if pct(acquire, 50) < 0.020 else 'NOT met'}: "
        f"{ms(pct(acquire, 50))}), >= 20x faster ({'met' if ratio >= 20 else 'NOT met'})"
    )
    print(f"RATIO cold p50 / warm acquire (burst) p50 = {ratio:.1f}x")


if __name__ == "__main__":
    main()
