"""Writing a checkpoint: into a temporary directory, fsynced and hashed, renamed into place
in one step, then the ``latest`` pointer rewritten and older checkpoints pruned."""

from __future__ import annotations

import json
import logging
import os
import random
import shutil
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from roll.checkpoint.layout import (
    _FORMAT,
    _OLD,
    _TMP,
    CHECKPOINTS_DIR,
    LATEST,
    MANIFEST,
    MODEL_DIR,
    MODEL_FILE,
    OPTIMIZER,
    RNG,
    SCHEDULER,
    STATE,
    _fsync_dir,
    _sha256,
    _step_dirs,
    _unwrap,
    _write_file,
    step_dir_name,
)
from roll.errors import CheckpointError, ConfigError

if TYPE_CHECKING:
    import torch

log = logging.getLogger(__name__)


def save_checkpoint(
    run_dir: str | os.PathLike[str],
    step: int,
    *,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer | None,
    scheduler: Any = None,
    extra_state: dict[str, Any] | None = None,
    keep_last: int | None = 3,
    is_main: bool = True,
    tokenizer: Any = None,
    model_state: dict[str, Any] | None = None,
    optimizer_state: dict[str, Any] | None = None,
) -> Path:
    """Write the checkpoint of ``step`` under ``run_dir/checkpoints`` and return its directory.

    ``model`` may be wrapped in DistributedDataParallel (its ``.module`` is saved). Models with
    ``save_pretrained`` are saved with it into ``model/`` (with ``tokenizer`` beside them when
    one is given, so the directory loads with ``from_pretrained``); other modules as a
    safetensors state dict. ``extra_state`` must be JSON-serialisable; it is returned by
    :func:`load_checkpoint` together with ``"step"``. Once the new checkpoint is in place, the
    ``keep_last`` newest checkpoints up to ``step`` (this one included) are kept and older ones
    deleted; ``None`` keeps all. Checkpoints of higher steps, left when a run resumed from an
    older one, are not touched.
    With ``is_main=False`` nothing is written and the path the main process writes is returned.

    ``model_state`` and ``optimizer_state`` are saved instead of ``model.state_dict()`` and
    ``optimizer.state_dict()`` when given: the whole states of a sharded model, gathered
    (tied weights sharing one tensor, as in a ``state_dict()``); ``model`` still decides how
    they are written (``save_pretrained`` with its config, or a safetensors file).
    """
    if step < 0:
        raise ConfigError(f"checkpoint step must be 0 or more, got {step}.")
    if keep_last is not None and keep_last < 1:
        raise ConfigError(f"keep_last must be at least 1 or None (keep all), got {keep_last}.")
    root = Path(run_dir) / CHECKPOINTS_DIR
    final = root / step_dir_name(step)
    if not is_main:
        return final
    state_json = _encode_state(step, extra_state)
    saved_optimizer = optimizer_state if optimizer_state is not None else optimizer
    _write_atomically(
        root,
        final,
        lambda tmp: _write_step(
            tmp, step, state_json, model, saved_optimizer, scheduler, tokenizer, model_state
        ),
    )
    _prune(root, step, keep_last)
    return final


def _write_atomically(root: Path, final: Path, fill: Callable[[Path], None]) -> None:
    """Have ``fill`` write a checkpoint into a temporary directory, rename that to ``final``
    in one step and point ``latest`` at it. On any failure the temporary directory is removed
    and a checkpoint of the same step that was being replaced is put back."""
    root.mkdir(parents=True, exist_ok=True)
    _remove_strays(root)
    tmp = root / f"{_TMP}{final.name}-{os.getpid()}"
    aside = root / f"{_OLD}{final.name}-{os.getpid()}"
    try:
        tmp.mkdir()
        fill(tmp)
        if final.exists():
            # os.replace cannot rename onto a non-empty directory; a reader that finds
            # `final` gone in between falls back to this complete copy.
            os.replace(final, aside)
        os.replace(tmp, final)
        _fsync_dir(root)
        _write_pointer(root, final.name)
    except BaseException as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        if aside.exists() and not final.exists():
            os.replace(aside, final)
        if isinstance(exc, OSError):
            raise CheckpointError(
                f"could not write checkpoint {final} ({exc.strerror or exc}); "
                f"check the free disk space and permissions of {root}."
            ) from exc
        raise


def _write_step(
    tmp: Path,
    step: int,
    state_json: bytes,
    model: torch.nn.Module,
    optimizer: Any,
    scheduler: Any,
    tokenizer: Any,
    model_state: dict[str, Any] | None,
) -> None:
    """Every file of the checkpoint of ``step`` into the empty directory ``tmp``, the manifest
    last; ``optimizer`` is the optimizer or the state dict saved in its place (None: none)."""
    _save_model(_unwrap(model), tmp, tokenizer, model_state)
    if optimizer is not None:
        _save_optimizer(optimizer, tmp / OPTIMIZER)
    if scheduler is not None:
        _save_scheduler(scheduler, tmp / SCHEDULER)
    _save_rng(tmp / RNG)
    _write_file(tmp / STATE, state_json)
    _write_manifest(tmp, step)


def _encode_state(step: int, extra_state: dict[str, Any] | None) -> bytes:
    extra = dict(extra_state or {})
    if extra.get("step", step) != step:
        raise CheckpointError(
            f"extra_state['step'] is {extra['step']} but the checkpoint is for step {step}; "
            "leave 'step' out of extra_state (it is stored for you)."
        )
    try:
        return json.dumps({**extra, "step": step}, indent=2, sort_keys=True).encode() + b"\n"
    except (TypeError, ValueError) as exc:
        raise CheckpointError(
            f"extra_state cannot be stored as JSON ({exc}); "
            "pass only dicts, lists, strings, numbers, booleans and None."
        ) from exc


def _save_model(
    module: Any, directory: Path, tokenizer: Any, state: dict[str, Any] | None = None
) -> None:
    if hasattr(module, "save_pretrained"):
        from iflow.models.local import quiet_progress

        # safetensors is the only format transformers 5 writes (and the default of 4.35+);
        # its progress bar would draw over the trainer's.
        with quiet_progress():
            module.save_pretrained(directory / MODEL_DIR, state_dict=state)
            if tokenizer is not None:
                tokenizer.save_pretrained(directory / MODEL_DIR)
        return
    from safetensors.torch import save_file, save_model

    if state is None:
        save_model(module, str(directory / MODEL_FILE))
        return
    # as save_model does: a tensor shared by several keys is written once, under its first
    unique: dict[str, Any] = {}
    seen: set[tuple[int, tuple[int, ...]]] = set()
    for key, tensor in state.items():
        mark = (tensor.data_ptr(), tuple(tensor.shape))
        if tensor.numel() and mark in seen:
            continue
        seen.add(mark)
        unique[key] = tensor.contiguous()
    save_file(unique, str(directory / MODEL_FILE), metadata={"format": "pt"})


def _save_optimizer(optimizer: Any, path: Path) -> None:
    """Save ``optimizer``'s state, or the state dict passed in its place."""
    import torch

    torch.save(optimizer if isinstance(optimizer, dict) else optimizer.state_dict(), path)


def _save_scheduler(scheduler: Any, path: Path) -> None:
    import torch

    torch.save(scheduler.state_dict(), path)


def _save_rng(path: Path) -> None:
    import torch

    version, internal, gauss = random.getstate()
    state: dict[str, Any] = {
        "python": [version, list(internal), gauss],
        "torch": torch.get_rng_state(),
    }
    try:
        import numpy as np
    except ImportError:
        pass
    else:
        np_state = np.random.get_state(legacy=False)
        state["numpy"] = {
            "bit_generator": np_state["bit_generator"],
            "key": [int(k) for k in np_state["state"]["key"]],
            "pos": int(np_state["state"]["pos"]),
            "has_gauss": int(np_state["has_gauss"]),
            "gauss": float(np_state["gauss"]),
        }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    torch.save(state, path)


def _write_manifest(directory: Path, step: int) -> None:
    """Fsync and hash every file under ``directory``, then write the manifest and fsync dirs."""
    files: dict[str, dict[str, Any]] = {}
    for path in _files_under(directory):
        with open(path, "rb") as fh:
            os.fsync(fh.fileno())
        files[path.relative_to(directory).as_posix()] = {
            "bytes": path.stat().st_size,
            "sha256": _sha256(path),
        }
    manifest = {
        "format": _FORMAT,
        "step": step,
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "files": files,
    }
    _write_file(directory / MANIFEST, json.dumps(manifest, indent=2).encode() + b"\n")
    for sub in sorted({p.parent for p in _files_under(directory)}, reverse=True):
        _fsync_dir(sub)


def _files_under(directory: Path) -> Iterator[Path]:
    for path in sorted(directory.rglob("*")):
        if path.is_file() and path.relative_to(directory).as_posix() != MANIFEST:
            yield path


def _write_pointer(root: Path, name: str) -> None:
    tmp = root / f"{_TMP}{LATEST}-{os.getpid()}"
    _write_file(tmp, name.encode() + b"\n")
    os.replace(tmp, root / LATEST)
    _fsync_dir(root)


def _remove_strays(root: Path) -> None:
    """Remove what killed writers left: temporary directories and pointer files."""
    for path in root.glob(f"{_TMP}*"):
        _remove(path)


def _prune(root: Path, step: int, keep_last: int | None) -> None:
    for path in root.glob(f"{_OLD}*"):
        _remove(path)
    if keep_last is None:
        return
    # Only checkpoints of lower steps count: ones above `step` belong to a branch the caller
    # left by resuming from an older checkpoint, and deleting those is the caller's decision.
    older = sorted((s, p) for s, p in _step_dirs(root) if s < step)
    for _, path in older[: max(0, len(older) - (keep_last - 1))]:
        _remove(path)


def _remove(path: Path) -> None:
    """Delete a file or directory; directories are first renamed to a ``.tmp-`` name so that a
    deletion cut short leaves a stray the next save removes, not a half checkpoint."""
    try:
        if path.is_dir():
            if not path.name.startswith(_TMP):
                doomed = path.with_name(f"{_TMP}del-{path.name}-{os.getpid()}")
                os.replace(path, doomed)
                path = doomed
            shutil.rmtree(path)
        else:
            path.unlink(missing_ok=True)
    except OSError as exc:
        log.warning("could not remove %s (%s); delete it by hand", path, exc.strerror or exc)
