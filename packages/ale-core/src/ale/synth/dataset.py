"""A synthesized dataset on disk: writing it, its digests, and its statistics.

::

    DIR/tasks/<id>/          Terminal-Bench 2.0 tasks
    DIR/trajectories.jsonl   one expert trajectory per task, sorted by task id
    DIR/manifest.json        counts per stage, rejections, proportions, seeds, digests
    DIR/config.yaml          the config that made it

Trajectories are written without what differs between two runs of the same config
(timestamps, durations, the verifier's timing lines), so regenerating a dataset gives the
same digests.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ale.jsonl import read_jsonl, write_jsonl
from ale.trajectory import Role, StepMark, Trajectory

MANIFEST = "manifest.json"
TRAJECTORIES = "trajectories.jsonl"
TASKS = "tasks"


def tree_digest(path: Path) -> str:
    """SHA-256 over a directory's files: relative paths, executable bits (what git keeps of
    a mode) and contents."""
    h = hashlib.sha256()
    for file in sorted(p for p in path.rglob("*") if p.is_file()):
        rel = file.relative_to(path).as_posix()
        executable = bool(file.stat().st_mode & 0o111)
        h.update(f"{rel}\0{'x' if executable else '-'}\0".encode())
        h.update(hashlib.sha256(file.read_bytes()).digest())
    return h.hexdigest()


def file_digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def normalise(trajectory: Trajectory) -> Trajectory:
    """A copy without run-to-run noise: timestamps, timings, verifier output."""
    t = trajectory.model_copy(deep=True)
    t.trajectory_id = f"{t.task_id}.{t.agent.name}"
    t.episode_id = None
    t.timings = None
    for step in t.steps:
        step.timestamp = None
        for result in step.tool_results:
            result.metadata.pop("duration_sec", None)
    if t.verifier is not None:
        t.verifier.stdout = None
        t.verifier.stderr = None
    end = t.extra.get("iflow", {}).get("end")
    if isinstance(end, dict):
        end.pop("seconds", None)
    return t


def write_dataset(
    out_dir: Path,
    tasks: Iterable[tuple[str, Path]],
    trajectories: Iterable[Trajectory],
    manifest: dict[str, Any],
    config_text: str,
) -> dict[str, str]:
    """Write the dataset into ``out_dir`` (replacing an earlier one); return its digests.

    The new dataset is assembled beside ``out_dir`` and swapped in, so an interrupted
    write leaves the old one whole.
    """
    out_dir = Path(out_dir)
    tmp = out_dir.with_name(f".{out_dir.name}.writing")
    if tmp.exists():
        shutil.rmtree(tmp)
    (tmp / TASKS).mkdir(parents=True)
    task_digests: dict[str, str] = {}
    for task_id, source in sorted(tasks):
        shutil.copytree(source, tmp / TASKS / task_id)
        task_digests[task_id] = tree_digest(tmp / TASKS / task_id)
    ordered = sorted((normalise(t) for t in trajectories), key=lambda t: t.task_id or "")
    write_jsonl(tmp / TRAJECTORIES, ordered)
    os.chmod(tmp / TRAJECTORIES, 0o644)
    (tmp / "config.yaml").write_text(config_text)
    digests = {
        "tasks": hashlib.sha256(json.dumps(task_digests, sort_keys=True).encode()).hexdigest(),
        "trajectories": file_digest(tmp / TRAJECTORIES),
    }
    digests["dataset"] = hashlib.sha256(
        (digests["tasks"] + digests["trajectories"]).encode()
    ).hexdigest()
    manifest = {**manifest, "digests": {**digests, "per_task": task_digests}}
    (tmp / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=False) + "\n")
    old = out_dir.with_name(f".{out_dir.name}.old")
    if old.exists():
        shutil.rmtree(old)
    if out_dir.exists():
        os.replace(out_dir, old)
    os.replace(tmp, out_dir)
    shutil.rmtree(old, ignore_errors=True)
    return digests


class DatasetError(ValueError):
    """The directory is not a synthesized dataset."""


def dataset_stats(path: Path) -> dict[str, Any]:
    """What ``rock synth stats`` prints: make-up, trajectory shape, digests checked."""
    path = Path(path)
    manifest_path = path / MANIFEST
    if not manifest_path.is_file():
        raise DatasetError(
            f"{path} has no {MANIFEST}, so it is not a dataset written by `rock synth run`; "
            "pass the dataset's directory."
        )
    try:
        manifest = json.loads(manifest_path.read_text())
    except json.JSONDecodeError as exc:
        raise DatasetError(
            f"{manifest_path} is not valid JSON ({exc.msg}); regenerate it."
        ) from None
    tasks = manifest.get("tasks", [])
    trajectories = list(read_jsonl(path / TRAJECTORIES)) if (path / TRAJECTORIES).exists() else []
    turns = [sum(s.role is Role.ASSISTANT for s in t.steps) for t in trajectories]
    mistakes = sum(any(s.mark is StepMark.MISTAKE for s in t.steps) for t in trajectories)
    by = {
        dim: dict(sorted(Counter(t[dim] for t in tasks).items()))
        for dim in ("family", "category", "difficulty")
    }
    per_task = manifest.get("digests", {}).get("per_task", {})
    changed = [
        tid
        for tid, digest in per_task.items()
        if not (path / TASKS / tid).is_dir() or tree_digest(path / TASKS / tid) != digest
    ]
    size = sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
    return {
        "name": manifest.get("name"),
        "tasks": len(tasks),
        "trajectories": len(trajectories),
        "by": by,
        "multi_turn_tasks": sum(bool(t.get("multi_turn")) for t in tasks),
        "turns": {
            "mean": round(sum(turns) / len(turns), 2) if turns else 0,
            "min": min(turns, default=0),
            "max": max(turns, default=0),
        },
        "with_mistake": mistakes,
        "rewards": dict(Counter(str(t.reward) for t in trajectories)),
        "counts": manifest.get("counts", {}),
        "rejections": manifest.get("rejections", {}),
        "proportions": manifest.get("proportions", {}),
        "digests_ok": not changed,
        "changed_tasks": changed,
        "bytes": size,
    }
