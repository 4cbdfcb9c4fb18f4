"""Synthesis throughput: verified tasks per minute on the warm pool vs a sandbox per episode.

Part 1 (always): the same candidates (rendered from every family, difficulties mixed) are
verified three times in one run (the oracle must pass and the no-op agent must fail), at
each concurrency: with sandboxes taken from a rock daemon's warm pool (the way `rock synth
run` works); with a sandbox started cold for each episode through the same daemon (the
baseline: the same HTTP path, only the pool missing); and with a sandbox started for each
episode by the in-process docker backend (`--sandboxes fresh`, no daemon hop). Figure:
verified tasks per minute of each, and warm pool / baseline.

Part 2 (--full): the whole of datasets/synth-mini regenerated from its config with
`rock synth run` (a private daemon, the warm pool); figure: the end-to-end time, its
sandbox episodes per minute against part 1's one-at-a-time rate, and whether the
digests match the committed dataset (the config regenerates it exactly).

    .venv/bin/python benchmarks/synth_throughput.py [--tasks 24] [--concurrency 4] [--full]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from _rockbench import machine

from ale.synth.family import draft_for, families
from ale.synth.render import render_task
from ale.task import Task, load_task
from rock.backends.docker import DockerBackend
from rock.bench.agents import NopAgent, OracleAgent
from rock.episode_runner import DaemonPool, FreshSandboxes, PoolRunner, sandbox_spec
from rock.pool_image import ensure_pool_image
from rock.synth.wiring import private_daemon

ROOT = Path(__file__).resolve().parents[1]
LEVELS = ("easy", "medium", "hard")


class DaemonCold:
    """A sandbox started for each episode through the daemon, not from a pool."""

    label = "daemon, cold"

    def __init__(self, client: object) -> None:
        self.client = client
        self.spec = sandbox_spec()

    def acquire(self) -> object:
        return self.client.create(self.spec, use_pools=False)

    def release(self, sandbox: object) -> None:
        sandbox.delete()

    def close(self) -> None:
        pass


def candidates(n: int, root: Path) -> list[Task]:
    names = list(families())
    out = []
    for i in range(n):
        name = names[i % len(names)]
        level = LEVELS[(i // len(names)) % 3]
        fam = families()[name]
        path = render_task(
            draft_for(name, 1000 + i, level),
            root / f"{name}-{i}",
            family=name,
            category=fam.category,
            difficulty=level,
            seed=1000 + i,
        )
        out.append(load_task(path))
    return out


async def verify_all(runner: PoolRunner, tasks: list[Task], concurrency: int) -> tuple[float, int]:
    gate = asyncio.Semaphore(concurrency)
    verified = 0

    async def one(task: Task) -> None:
        nonlocal verified
        async with gate:
            oracle = await runner.episode(task, OracleAgent(task))
            nop = await runner.episode(task, NopAgent())
            if oracle.passed and not nop.passed and nop.error is None:
                verified += 1
            else:
                print(
                    f"  not verified: {task.id}: oracle {oracle.reward} {oracle.error or ''} "
                    f"nop {nop.reward} {nop.error or ''}"
                )

    started = time.monotonic()
    await asyncio.gather(*(one(t) for t in tasks))
    return time.monotonic() - started, verified


def full_run() -> None:
    config = ROOT / "datasets" / "synth-mini.yaml"
    committed = json.loads((ROOT / "datasets" / "synth-mini" / "manifest.json").read_text())
    with tempfile.TemporaryDirectory(prefix="synth-mini-") as tmp:
        out = Path(tmp) / "synth-mini"
        started = time.monotonic()
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "rock.cli",
                "synth",
                "run",
                str(config),
                "--output",
                str(out),
                "--work",
                str(Path(tmp) / "work"),
                "--json",
            ],
            capture_output=True,
            text=True,
            check=False,
            cwd=ROOT,
        )
        wall = time.monotonic() - started
        if proc.returncode != 0:
            raise SystemExit(f"rock synth run failed:\n{proc.stderr[-3000:]}")
        manifest = json.loads(proc.stdout)
    episodes = manifest["run"]["episodes"]
    same = manifest["digests"]["dataset"] == committed["digests"]["dataset"]
    print(
        f"\nsynth-mini end to end: {wall / 60:.1f} min for {len(manifest['tasks'])} tasks "
        f"({episodes} sandbox episodes, {episodes / wall * 60:.0f} episodes/min)"
    )
    for stage, sec in manifest["run"]["seconds"].items():
        print(f"  {stage:14s} {sec:8.1f} s")
    print(f"  digests match the committed dataset: {'yes' if same else 'NO'}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tasks", type=int, default=24)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--full", action="store_true", help="Also regenerate synth-mini.")
    args = parser.parse_args()
    print(f"machine: {machine()}")
    image = ensure_pool_image()
    rows = []
    with tempfile.TemporaryDirectory(prefix="synth-bench-") as tmp:
        tasks = candidates(args.tasks, Path(tmp))
        print(f"{len(tasks)} candidates from {len(families())} families, image {image}")
        for concurrency in args.concurrency:
            with private_daemon() as client:
                pool = DaemonPool(client, "synth-bench", size=concurrency)
                pool.wait_ready()
                warm = asyncio.run(verify_all(PoolRunner(pool), tasks, concurrency))
                pool.close()
                cold = asyncio.run(verify_all(PoolRunner(DaemonCold(client)), tasks, concurrency))
            fresh = asyncio.run(
                verify_all(PoolRunner(FreshSandboxes(DockerBackend())), tasks, concurrency)
            )
            rows.append((concurrency, warm, cold, fresh))
    print()
    for concurrency, warm, cold, fresh in rows:
        rates = [ok / sec * 60 for sec, ok in (warm, cold, fresh)]
        print(
            f"concurrency {concurrency}: warm pool {rates[0]:.1f} tasks/min ({warm[1]}/{len(tasks)} "
            f"in {warm[0]:.1f} s); cold sandbox per episode through the daemon (baseline) "
            f"{rates[1]:.1f} tasks/min ({cold[0]:.1f} s); in-process sandbox per episode "
            f"{rates[2]:.1f} tasks/min ({fresh[0]:.1f} s); warm pool / baseline "
            f"{rates[0] / rates[1]:.2f}x"
        )
    if args.full:
        full_run()


if __name__ == "__main__":
    main()
