"""The ray backend over 2 nodes vs 1: warm-pool acquire, creation rate, 200 sandboxes.

A local Ray cluster whose nodes are each bound to their own Docker engine (the first
engine, and the second dockerd of scripts/ensure-second-engine.sh), with `rock serve
--backend ray` in its own process. First the cluster has one node (baseline), then the
second node joins and a fresh daemon measures again, in the same run:

- acquire: a pool of ``--idle`` started sandboxes, acquired back to back, ``--rounds`` times;
- creation rate: ``--create`` sandboxes started cold by 8 parallel creators;
- scale: ``--n`` sandboxes (200) alive at once, each checked with a command, and how they
  spread over the nodes.

On one machine both nodes share its CPUs, so 2 nodes cannot make containers faster here;
the ratios show what spreading over nodes costs or gains at the daemon. On separate
machines the engines' work would run in parallel.

Usage: python benchmarks/rock_cluster.py [--rounds 3] [--idle 10] [--create 40] [--n 200]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from _rockbench import machine, pct, summary

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "packages" / "rock" / "tests"))
from ray_nodes import (
    FIRST_ENGINE,
    RayNodes,
    containers,
    free_port,
    remove_containers,
    second_engine,
)
from rock_daemons import Serve

from rock.client import Client
from rock.models import SandboxSpec

SPEC = SandboxSpec(memory_mb=256, pids_limit=128)
ENV = {**os.environ, "RAY_AUTH_MODE": "disabled"}


def measure(address: str, engines: list[str], args: argparse.Namespace) -> dict[str, Any]:
    daemon_id = f"bench-cluster-{len(engines)}-{os.urandom(2).hex()}"
    home = Path(tempfile.mkdtemp(prefix="rock-cluster-"))
    serve = Serve(home, free_port(), ["--backend", "ray", "--ray-address", address,
                                      "--daemon-id", daemon_id, "--cleanup"])  # fmt: skip
    serve.start(env=ENV)
    out: dict[str, Any] = {"acquire": []}
    try:
        client = Client(serve.url, home=home)
        client.set_pool("bench", SPEC, min_idle=args.idle, max_total=args.idle * 3)
        for _ in range(args.rounds):
            client.wait_pool("bench", idle=args.idle, timeout=300)
            time.sleep(1.0)
            leased = []
            for _ in range(args.idle):
                started = time.perf_counter()
                leased.append(client.acquire("bench"))
                out["acquire"].append(time.perf_counter() - started)
            for box in leased:
                box.delete()
        client.delete_pool("bench")
        time.sleep(2.0)

        started = time.perf_counter()
        with ThreadPoolExecutor(8) as pool:
            made = list(pool.map(lambda _: client.create(SPEC), range(args.create)))
        out["rate"] = args.create / (time.perf_counter() - started)
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(lambda box: box.delete(), made))

        started = time.perf_counter()
        with ThreadPoolExecutor(8) as pool:
            many = list(pool.map(lambda _: client.create(SPEC), range(args.n)))
        out["n_sec"] = time.perf_counter() - started
        with ThreadPoolExecutor(8) as pool:
            ok = sum(pool.map(lambda box: box.exec("true").exit_code == 0, many))
        out["n_ok"] = ok
        out["spread"] = [len(containers(host, daemon_id)) for host in engines]
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(lambda box: box.delete(), many))
    finally:
        serve.stop()
        remove_containers(engines, daemon_id)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--idle", type=int, default=10)
    parser.add_argument("--create", type=int, default=40)
    parser.add_argument("--n", type=int, default=200)
    args = parser.parse_args()
    engines = [FIRST_ENGINE, second_engine()]
    nodes = RayNodes()
    try:
        nodes.head(engines[0])
        one = measure(nodes.address, engines[:1], args)
        nodes.add(engines[1], wait_for=2)
        two = measure(nodes.address, engines, args)
    finally:
        nodes.close()
    print(f"machine: {machine()}; both nodes on it, each with its own dockerd")
    for name, r in (("1 node ", one), ("2 nodes", two)):
        print(f"{name}: acquire {summary(r['acquire'])}")
        print(
            f"{name}: creation {r['rate']:.1f} sandboxes/s; {args.n} alive in {r['n_sec']:.1f} s "
            f"({args.n / r['n_sec']:.1f}/s), {r['n_ok']} answered, per node {r['spread']}"
        )
    print(
        f"2 nodes / 1 node: acquire p50 {pct(two['acquire'], 50) / pct(one['acquire'], 50):.2f}x, "
        f"p99 {pct(two['acquire'], 99) / pct(one['acquire'], 99):.2f}x (lower is better); "
        f"creation rate {two['rate'] / one['rate']:.2f}x, {args.n} sandboxes "
        f"{one['n_sec'] / two['n_sec']:.2f}x (higher is better)"
    )


if __name__ == "__main__":
    main()
