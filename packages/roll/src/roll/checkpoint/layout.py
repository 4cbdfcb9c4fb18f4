"""What a checkpoint directory holds, the file helpers saving and loading share, and how to
find the newest complete checkpoint of a run (the manifest's sizes and hashes decide)."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
from pathlib import Path
from typing import Any

CHECKPOINTS_DIR = "checkpoints"
"""The folder of a run directory that holds its checkpoints."""
LATEST = "latest"
"""The pointer file naming the newest complete checkpoint."""
MANIFEST = "manifest.json"
STATE = "state.json"
MODEL_DIR = "model"
MODEL_FILE = "model.safetensors"
ADAPTER_WEIGHTS = "adapter_model.safetensors"
"""A LoRA run's checkpoint holds only the adapters, in peft's format (``model/``)."""
ADAPTER_CONFIG = "adapter_config.json"
OPTIMIZER = "optimizer.pt"
SCHEDULER = "scheduler.pt"
RNG = "rng.pt"

_FORMAT = 1
_TMP = ".tmp-"  # unfinished writes and directories being deleted: removed by the next save
_OLD = ".old-"  # a checkpoint of the same step moved aside while it is being replaced
_STEP_RE = re.compile(r"step-(\d{8,})")
_CHUNK = 1 << 20


def step_dir_name(step: int) -> str:
    """The directory name of the checkpoint of ``step``: ``step-00000300``."""
    return f"step-{step:08d}"


def _unwrap(model: Any) -> Any:
    """The module whose weights to save: DDP/DataParallel and torch.compile wrappers removed."""
    import torch

    while True:
        if isinstance(model, torch.nn.DataParallel | torch.nn.parallel.DistributedDataParallel):
            model = model.module
        elif isinstance(getattr(model, "_orig_mod", None), torch.nn.Module):
            model = model._orig_mod
        else:
            return model


def _write_file(path: Path, data: bytes) -> None:
    with open(path, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _fsync_dir(path: Path) -> None:
    # Directories cannot be opened for fsync on every platform (Windows); there the rename
    # is as durable as the file system makes it.
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


# --------------------------------------------------------------------------- finding


def _step_dirs(root: Path) -> list[tuple[int, Path]]:
    found = []
    with contextlib.suppress(FileNotFoundError):
        for path in root.iterdir():
            match = _STEP_RE.fullmatch(path.name)
            if match and path.is_dir():
                found.append((int(match.group(1)), path))
    return found


def _candidates(root: Path) -> list[tuple[int, Path]]:
    """Checkpoint directories with their steps, newest first; a same-step copy moved aside
    comes after the checkpoint of that step."""
    ranked = [(step, 1, path) for step, path in _step_dirs(root)]
    for path in root.glob(f"{_OLD}step-*"):
        match = re.fullmatch(rf"{re.escape(_OLD)}step-(\d{{8,}})-\d+", path.name)
        if match and path.is_dir():
            ranked.append((int(match.group(1)), 0, path))
    ranked.sort(key=lambda r: (r[0], r[1]), reverse=True)
    return [(step, path) for step, _, path in ranked]


def latest_checkpoint(run_dir: str | os.PathLike[str]) -> Path | None:
    """The newest complete checkpoint of ``run_dir``, or None when it has none.

    Follows ``checkpoints/latest`` when it names a checkpoint whose files are all present with
    their recorded sizes; otherwise returns the highest step whose manifest hashes verify.
    """
    root = Path(run_dir) / CHECKPOINTS_DIR
    if not root.is_dir():
        return None
    try:
        name = (root / LATEST).read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError):
        name = ""
    if _STEP_RE.fullmatch(name) and _problem(root / name, hashes=False) is None:
        return root / name
    for _, path in _candidates(root):
        if _problem(path, hashes=True) is None:
            return path
    return None


def _problem(path: Path, *, hashes: bool) -> str | None:
    """What is wrong with the checkpoint at ``path`` (a phrase naming the file), or None."""
    try:
        manifest = json.loads((path / MANIFEST).read_text(encoding="utf-8"))
        files = manifest["files"]
        entries = [
            (str(rel), int(info["bytes"]), str(info["sha256"])) for rel, info in files.items()
        ]
    except FileNotFoundError:
        return f"{path} has no {MANIFEST}, so it was never completed"
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return f"{path / MANIFEST} is unreadable"
    for rel, size, digest in entries:
        file = path / rel
        if not file.is_file():
            return f"checkpoint file {file} is missing"
        if file.stat().st_size != size:
            return (
                f"checkpoint file {file} has {file.stat().st_size} bytes, not the {size} recorded"
            )
        if hashes and _sha256(file) != digest:
            return f"checkpoint file {file} is corrupt (its sha256 differs from {MANIFEST})"
    return None


def _previous(path: Path) -> Path | None:
    """The newest complete checkpoint beside ``path`` with a lower step."""
    match = _STEP_RE.fullmatch(path.name)
    if not match:
        return None
    for step, candidate in _candidates(path.parent):
        if step < int(match.group(1)) and _problem(candidate, hashes=False) is None:
            return candidate
    return None


def _advice(path: Path) -> str:
    previous = _previous(path)
    if previous is not None:
        return f"resume from the previous checkpoint {previous} or start fresh"
    return "no earlier checkpoint is left beside it, so start fresh in a new run directory"
