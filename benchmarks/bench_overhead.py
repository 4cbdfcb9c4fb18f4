"""rock bench: harness overhead per trial, and scaling with concurrent trials.

Overhead: every task of datasets/terminal-bench-local runs with the oracle, images warm
(built before timing). A trial's overhead is its wall time minus the agent's and the
verifier's own time (results.json's ``overhead_sec``: image lookup by digest, sandbox
start, staging tests and toolchain, reading the reward, writing the records, deleting
the sandbox). Baseline, same tasks in the same run: the bare minimum on the docker SDK
with no harness (start the container, copy solution and tests in, run both, remove it);
its overhead is counted the same way (wall time minus the two commands).
Goal (issue 5): overhead under 2 s per trial.

Scaling: the whole set (at least 15 tasks) with the oracle at --n-concurrent 1 and 4;
the figure is the speed-up of the wall time.

Usage: python benchmarks/bench_overhead.py [--tasks N]
"""

from __future__ import annotations

import argparse
import asyncio
import io
import statistics
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any

from _rockbench import machine

from ale.task import Task
from rock.backends.docker import DockerBackend
from rock.bench.dataset import scan_dataset
from rock.bench.harness import Harness
from rock.bench.images import ImageBuilder, ImageMap
from rock.bench.options import BenchOptions
from rock.bench.results import read_run
from rock.engine import connect
from rock.verifier import toolchain

DATASET = Path(__file__).resolve().parents[1] / "datasets" / "terminal-bench-local"


def bare_trial(client: Any, task: Task, tag: str) -> tuple[float, float]:
    """(wall, command time) of the least a harness must do, straight on the SDK."""
    t0 = time.monotonic()
    box = client.containers.run(
        tag, ["sleep", "infinity"], detach=True, network_mode="none", mem_limit="1g"
    )
    try:
        box.put_archive("/", _tar_at("solution", task.solution.parent))
        box.put_archive("/", _tar_at("tests", task.tests_dir))
        box.exec_run(["mkdir", "-p", toolchain.TOOLCHAIN_DIR])
        box.put_archive(toolchain.TOOLCHAIN_DIR, toolchain.archive())
        t = time.monotonic()
        box.exec_run(["bash", "/solution/solve.sh"])
        cmd = time.monotonic() - t
        box.exec_run(["mkdir", "-p", "/logs/verifier"])
        t = time.monotonic()
        box.exec_run(
            [
                "bash",
                "-c",
                f"export PATH={toolchain.TOOLCHAIN_DIR}/bin:$PATH; "
                f"{toolchain.PTH_SETUP}; bash /tests/test.sh",
            ]
        )
        cmd += time.monotonic() - t
        box.get_archive("/logs/verifier/reward.txt")
    finally:
        box.remove(force=True)
    return time.monotonic() - t0, cmd


def _tar_at(name: str, directory: Path) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        tar.add(directory, arcname=name)
    return buf.getvalue()


def run(harness: Harness, out: Path, ids: list[str]) -> float:
    t = time.monotonic()
    asyncio.run(harness.run(DATASET, out, agent="oracle", task_ids=ids))
    return time.monotonic() - t


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tasks", type=int, default=0, help="Use the first N tasks (0 = all).")
    args = parser.parse_args()
    client = connect()
    builder = ImageBuilder(client, ImageMap.load(user_file=None))
    tasks = scan_dataset(DATASET).tasks
    if args.tasks:
        tasks = tasks[: args.tasks]
    ids = [t.id for t in tasks]
    print(f"machine: {machine()}")
    print(f"tasks: {len(tasks)} from {DATASET.name}; warming images and toolchain")
    tags = {t.id: builder.build(t).tag for t in tasks}
    toolchain.archive()

    def harness(n: int) -> Harness:
        return Harness(DockerBackend(client), builder, BenchOptions(n_concurrent=n))

    with tempfile.TemporaryDirectory(prefix="bench-overhead-") as tmp:
        root = Path(tmp)
        wall_1 = run(harness(1), root / "c1", ids)
        wall_4 = run(harness(4), root / "c4", ids)
        trials = read_run(root / "c1").results
        assert all(r.is_resolved for r in trials), "the oracle must pass every task"
        overhead = [r.overhead_sec or 0.0 for r in trials]
        bare = []
        for task in tasks:
            wall, cmd = bare_trial(client, task, tags[task.id])
            bare.append(wall - cmd)
    p50, mean = statistics.median(overhead), statistics.fmean(overhead)
    b50 = statistics.median(bare)
    print(
        f"harness overhead per trial (warm images): p50 {p50:.2f} s, mean {mean:.2f} s, "
        f"max {max(overhead):.2f} s  (goal < 2 s: {'met' if mean < 2 else 'NOT met'})"
    )
    print(
        f"baseline, bare docker SDK doing the same container work: p50 {b50:.2f} s; "
        f"harness / bare = {p50 / b50:.2f}x"
    )
    print(
        f"{len(tasks)}-task oracle run: 1 concurrent {wall_1:.1f} s, 4 concurrent "
        f"{wall_4:.1f} s; speed-up {wall_1 / wall_4:.2f}x"
    )


if __name__ == "__main__":
    main()
