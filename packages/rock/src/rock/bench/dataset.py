"""A dataset as a run takes it: its tasks that rock can run, and those it cannot, each with
its reason."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from pydantic import BaseModel

from ale.task import Task, TaskFormatError, detect_format, load_task
from rock.bench.options import BenchError
from rock.bench.results import InvalidTask


class DatasetScan(BaseModel):
    tasks: list[Task]
    invalid: list[InvalidTask]


def unrunnable(task: Task) -> str | None:
    """Why rock's sandboxes cannot run ``task`` (a Windows container, GPUs, a TPU), or None."""
    env = task.environment
    if env.os != "linux":
        return (
            f'it is a {env.os.title()} task ([environment] os = "{env.os}"), and rock runs '
            "Linux containers only"
        )
    if env.gpus:
        return f"it asks for {env.gpus} GPU(s) ([environment] gpus), and rock's sandboxes have none"
    if env.tpu:
        return "it asks for a TPU ([environment] tpu), and rock's sandboxes have none"
    return None


def scan_dataset(path: Path, task_ids: Sequence[str] = ()) -> DatasetScan:
    """The valid tasks of dataset ``path`` (or the single task it is) and the invalid ones
    with their reasons; ``task_ids`` selects tasks and must all exist."""
    root = Path(path).resolve()
    if not root.is_dir():
        raise BenchError(f"dataset {root} is not a directory; pass a directory of tasks.")
    candidates = (
        [root]
        if detect_format(root)
        else [
            c
            for c in sorted(root.iterdir(), key=lambda p: p.name)
            if c.is_dir() and not c.name.startswith(".") and not c.name.startswith("_")
        ]
    )
    tasks: list[Task] = []
    invalid: list[InvalidTask] = []
    for child in candidates:
        if detect_format(child) is None:
            if any(child.iterdir()) and (child / "instruction.md").exists():
                invalid.append(
                    InvalidTask(path=str(child), reason="it has neither task.toml nor task.yaml")
                )
            continue
        try:
            task = load_task(child)
        except TaskFormatError as exc:
            invalid.append(InvalidTask(path=str(child), reason=str(exc)))
            continue
        reason = unrunnable(task)
        if reason is not None:
            invalid.append(InvalidTask(path=str(child), reason=reason))
        else:
            tasks.append(task)
    if task_ids:
        known = {t.id: t for t in tasks}
        bad_ids = {Path(i.path).name for i in invalid}
        missing = [i for i in task_ids if i not in known and i not in bad_ids]
        if missing:
            raise BenchError(
                f"no task named {', '.join(missing)} in {root} (it has "
                f"{', '.join(sorted(known)) or 'no valid tasks'}); check --task."
            )
        tasks = [known[i] for i in task_ids if i in known]
        invalid = [i for i in invalid if Path(i.path).name in set(task_ids)]
    if not tasks and not invalid:
        raise BenchError(f"{root} holds no tasks (no subdirectory with task.toml or task.yaml).")
    return DatasetScan(tasks=tasks, invalid=invalid)
