"""iflow's checkpoint cost per turn on a 1,000-file repository, incremental, against a
shadow git repository (what Gemini CLI's checkpointing does: ``git add -A && git commit``
of the workspace into a repository of its own), in one run.

A repository of 1,000 small files (40 directories); then 30 turns, each changing 5 files
and adding one, each checkpointed once before its change, by iflow's checkpoints through
the local workspace (a listing of sizes and modification times, only changed files read)
and by the shadow-git baseline. The first checkpoint (every file read) is reported apart.
Goal (issue 22): p50 under 50 ms a turn, incremental.

Usage: python benchmarks/iflow_checkpoints.py [--files 1000] [--turns 30]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from _rockbench import machine

from iflow.checkpoints import Checkpoints
from iflow.workspace.local import LocalWorkspace


def make_repo(root: Path, files: int) -> None:
    for i in range(files):
        path = root / f"pkg{i % 40}" / f"mod{i}.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"def f{i}():\n    return {i}\n" * 20)


def change(root: Path, turn: int, files: int) -> None:
    for k in range(5):
        i = (turn * 37 + k * 101) % files
        (root / f"pkg{i % 40}" / f"mod{i}.py").write_text(f"# turn {turn}\n" * 30)
    (root / f"new{turn}.txt").write_text(f"turn {turn}\n")


def shadow_git(root: Path, git_dir: Path) -> None:
    base = [
        "git",
        f"--git-dir={git_dir}",
        f"--work-tree={root}",
        "-c",
        "user.email=b@x",
        "-c",
        "user.name=b",
    ]
    subprocess.run([*base, "add", "-A"], check=True, capture_output=True)
    subprocess.run(
        [*base, "commit", "-q", "--allow-empty", "-m", "cp"], check=True, capture_output=True
    )


async def main(files: int, turns: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        ours_root, git_root = Path(tmp) / "ours", Path(tmp) / "git"
        make_repo(ours_root, files)
        make_repo(git_root, files)
        git_dir = Path(tmp) / "shadow.git"
        subprocess.run(["git", "init", "-q", "--bare", str(git_dir)], check=True)
        async with LocalWorkspace(ours_root) as ws:
            checkpoints = Checkpoints(ws, Path(tmp) / "checkpoints")
            checkpoints.begin("turn 0", 1, 1)
            t = time.perf_counter()
            await checkpoints.before_change()
            first = time.perf_counter() - t
            t = time.perf_counter()
            shadow_git(git_root, git_dir)
            git_first = time.perf_counter() - t
            ours, theirs = [], []
            for turn in range(1, turns + 1):
                change(ours_root, turn, files)
                change(git_root, turn, files)
                checkpoints.begin(f"turn {turn}", 1, 1)
                t = time.perf_counter()
                await checkpoints.before_change()
                ours.append(time.perf_counter() - t)
                t = time.perf_counter()
                shadow_git(git_root, git_dir)
                theirs.append(time.perf_counter() - t)
    p50, git_p50 = statistics.median(ours), statistics.median(theirs)
    print(
        f"first checkpoint ({files} files read): iflow {first * 1000:.1f} ms, shadow git {git_first * 1000:.1f} ms"
    )
    print(
        f"per turn, incremental (5 changed, 1 new): iflow p50 {p50 * 1000:.1f} ms "
        f"(p99 {max(ours) * 1000:.1f}), shadow git p50 {git_p50 * 1000:.1f} ms: "
        f"{p50 / git_p50:.2f}x the baseline"
    )
    print(f"goal: p50 under 50 ms ({'met' if p50 < 0.05 else 'not met'})")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=1000)
    parser.add_argument("--turns", type=int, default=30)
    args = parser.parse_args()
    print(machine())
    asyncio.run(main(args.files, args.turns))
