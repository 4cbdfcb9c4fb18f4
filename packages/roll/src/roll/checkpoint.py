"""Checkpoints a run resumes from exactly, written so that a crash never leaves a broken one.

A run directory holds its checkpoints like this::

    RUN_DIR/checkpoints/
        latest                 # "step-00000300": the newest complete checkpoint
        step-00000300/
            model/             # save_pretrained() output, for models that have it (a LoRA
                               # run's: adapter_model.safetensors + adapter_config.json) ...
            model.safetensors  # ... or the state dict of a plain nn.Module
            optimizer.pt
            scheduler.pt       # when a scheduler was given
            rng.pt             # python, numpy, torch CPU and every CUDA device's generator
            state.json         # {"step": 300, ...extra_state}: data cursor, counters, config
            manifest.json      # written last: size and sha256 of every other file

How a save stays atomic: everything is written into ``checkpoints/.tmp-step-...-PID``, each
file and directory is fsynced, the manifest goes in last, and the directory is renamed to its
final name in one ``os.replace``. Only then is ``latest`` rewritten (a temporary file renamed
over it) and older checkpoints pruned. A writer killed at any moment therefore leaves the
previous ``latest`` or the new one complete; its ``.tmp-*`` leftovers are ignored by the
readers and removed by the next save. When the pointer itself is missing or names something
incomplete, :func:`latest_checkpoint` takes the highest step whose manifest verifies.

Exactness: the weights, the optimizer and scheduler states and the generators are restored bit
for bit, so that training on after :func:`load_checkpoint` repeats what the first run did. The
generators saved are the process-wide ones (``random``, ``numpy.random``, torch); a
``numpy.random.Generator`` or ``torch.Generator`` the caller owns belongs in its own state.

Distributed runs: one process writes (pass ``is_main=False`` elsewhere, and wait on a barrier
after the save); every process may load. A sharded model (FSDP) is saved from its whole states,
gathered by every process and passed as ``model_state``/``optimizer_state``, in the same layout
as an unsharded one; loading hands the whole states to ``set_model_state`` and
``set_optimizer_state``, which scatter them (see :mod:`roll.distributed`). The generator states are those of the writer, so
ranks that must draw differently should load with ``restore_rng=False`` and reseed from
``(seed, step, rank)``. One writer per run directory: a save removes the temporary
directories of any other writer.

torch and safetensors are imported inside the functions: importing this module is cheap.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import random
import re
import shutil
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from roll.errors import CheckpointError, ConfigError

if TYPE_CHECKING:
    import torch

log = logging.getLogger(__name__)

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


# --------------------------------------------------------------------------- saving


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

    root.mkdir(parents=True, exist_ok=True)
    _remove_strays(root)
    tmp = root / f"{_TMP}{final.name}-{os.getpid()}"
    aside = root / f"{_OLD}{final.name}-{os.getpid()}"
    try:
        tmp.mkdir()
        _save_model(_unwrap(model), tmp, tokenizer, model_state)
        if optimizer_state is not None or optimizer is not None:
            _save_optimizer(
                optimizer_state if optimizer_state is not None else optimizer, tmp / OPTIMIZER
            )
        if scheduler is not None:
            _save_scheduler(scheduler, tmp / SCHEDULER)
        _save_rng(tmp / RNG)
        _write_file(tmp / STATE, state_json)
        _write_manifest(tmp, step)
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
    _prune(root, step, keep_last)
    return final


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


def _write_file(path: Path, data: bytes) -> None:
    with open(path, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())


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


# --------------------------------------------------------------------------- loading


def load_checkpoint(
    path: str | os.PathLike[str],
    *,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer | None = None,
    scheduler: Any = None,
    restore_rng: bool = True,
    set_model_state: Callable[[dict[str, Any]], None] | None = None,
    set_optimizer_state: Callable[[dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """Restore the checkpoint directory ``path`` and return its ``extra_state`` with ``"step"``.

    Every file is checked against the manifest before anything is touched. The weights are
    copied into ``model`` in place (strictly: every key must match; weights tied to another
    are restored through it); optimizer and scheduler states are loaded when those are given,
    onto the model's device; with ``restore_rng`` the generators continue where they were.

    ``set_model_state`` and ``set_optimizer_state`` replace ``load_state_dict`` for a sharded
    model: they receive the whole states (the weights checked against ``model``'s keys and
    without the twins of tied weights, the optimizer's on the CPU) and put them in place. The
    optimizer state is read only when ``optimizer`` or ``set_optimizer_state`` is given.
    """
    import torch

    path = Path(path)
    if not path.is_dir():
        raise CheckpointError(
            f"checkpoint directory {path} does not exist; pass a step directory such as the one "
            "latest_checkpoint(run_dir) returns."
        )
    problem = _problem(path, hashes=True)
    if problem is not None:
        raise CheckpointError(f"{problem}; {_advice(path)}.")

    module = _unwrap(model)
    param = next(iter(module.parameters()), None)
    device = param.device if param is not None else torch.device("cpu")
    if (path / MODEL_DIR / ADAPTER_WEIGHTS).is_file():
        _load_adapters(module, path / MODEL_DIR)
    else:
        _load_weights(module, path, set_model_state)
    if set_optimizer_state is not None:
        opt_state = _torch_load(path / OPTIMIZER, torch.device("cpu"), what="optimizer")
        _apply(set_optimizer_state, opt_state, path / OPTIMIZER, "optimizer")
    elif optimizer is not None:
        opt_state = _torch_load(path / OPTIMIZER, device, what="optimizer")
        _apply(optimizer.load_state_dict, opt_state, path / OPTIMIZER, "optimizer")
    if scheduler is not None:
        sched_state = _torch_load(path / SCHEDULER, device, what="scheduler")
        _apply(scheduler.load_state_dict, sched_state, path / SCHEDULER, "scheduler")
    if restore_rng:
        _restore_rng(_torch_load(path / RNG, torch.device("cpu"), what="random generator"))
    return json.loads((path / STATE).read_text(encoding="utf-8"))


def _torch_load(file: Path, device: torch.device, *, what: str) -> Any:
    import pickle

    import torch

    if not file.is_file():
        raise CheckpointError(
            f"checkpoint {file.parent} has no {what} state ({file.name}); load it without "
            f"passing a {what}, or resume from a checkpoint saved with one."
        )
    try:
        try:
            return torch.load(file, map_location=device, weights_only=True)
        except pickle.UnpicklingError:
            if what != "scheduler":
                raise
            # A scheduler's state may hold plain Python objects (callable lr lambdas); the file
            # is one save_checkpoint wrote into this run directory and the manifest vouched for.
            return torch.load(file, map_location=device, weights_only=False)
    except (pickle.UnpicklingError, RuntimeError, EOFError) as exc:
        raise CheckpointError(
            f"could not read the {what} state in {file} ({exc}); it was written by another "
            f"version of torch or roll, so {_advice(file.parent)}."
        ) from exc


def _apply(load: Callable[[Any], Any], state: Any, file: Path, what: str) -> None:
    try:
        load(state)
    except (ValueError, KeyError, IndexError, RuntimeError, TypeError) as exc:
        raise CheckpointError(
            f"the {what} state in {file} does not fit this {what} ({exc}); build the {what} "
            "the same way as the run that saved it."
        ) from exc


def _load_adapters(module: Any, directory: Path) -> None:
    """Put the LoRA adapters saved in ``directory`` (peft's format) into the peft ``module``."""
    from safetensors.torch import load_file

    try:
        from peft import set_peft_model_state_dict
    except ImportError as exc:
        raise CheckpointError(
            f"{directory.parent} holds LoRA adapters; install peft to load them"
        ) from exc
    if not hasattr(module, "peft_config"):
        raise CheckpointError(
            f"{directory.parent} holds LoRA adapters but the model has none; resume with the "
            "model.lora settings the run saved with."
        )
    result = set_peft_model_state_dict(module, load_file(directory / ADAPTER_WEIGHTS, device="cpu"))
    unexpected = list(getattr(result, "unexpected_keys", None) or [])
    if unexpected:
        raise CheckpointError(
            f"the adapters in {directory} do not fit this model (unexpected {_some(unexpected)}); "
            "resume with the model.lora settings the run saved with."
        )


def _weight_files(path: Path) -> list[Path]:
    directory = path / MODEL_DIR
    if (path / MODEL_FILE).is_file():
        return [path / MODEL_FILE]
    index = directory / "model.safetensors.index.json"
    if index.is_file():
        weight_map = json.loads(index.read_text(encoding="utf-8"))["weight_map"]
        return [directory / name for name in sorted(set(weight_map.values()))]
    if (directory / MODEL_FILE).is_file():
        return [directory / MODEL_FILE]
    raise CheckpointError(
        f"checkpoint {path} holds no safetensors weights ({MODEL_FILE} or {MODEL_DIR}/); "
        f"{_advice(path)}."
    )


def _load_weights(
    module: torch.nn.Module,
    path: Path,
    set_state: Callable[[dict[str, Any]], None] | None = None,
) -> None:
    from safetensors.torch import load_file

    loaded: dict[str, Any] = {}
    for file in _weight_files(path):
        loaded.update(load_file(file, device="cpu"))
    expected = module.state_dict()
    missing = _missing_keys(module, expected, loaded)
    unexpected = sorted(set(loaded) - set(expected))
    if missing or unexpected:
        parts = []
        if missing:
            parts.append(f"missing {_some(missing)}")
        if unexpected:
            parts.append(f"unexpected {_some(unexpected)}")
        raise CheckpointError(
            f"the weights in {path} do not fit this model ({'; '.join(parts)}); load them into "
            "the same architecture the run saved."
        )
    try:
        if set_state is not None:
            set_state(loaded)
        else:
            module.load_state_dict(loaded, strict=False)
    except (RuntimeError, ValueError) as exc:
        raise CheckpointError(
            f"the weights in {path} do not fit this model ({exc}); load them into the same "
            "architecture the run saved."
        ) from exc


def _some(keys: list[str]) -> str:
    shown = ", ".join(keys[:3])
    return shown + (f" and {len(keys) - 3} more" if len(keys) > 3 else "")


def _restore_rng(state: dict[str, Any]) -> None:
    import torch

    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    torch.set_rng_state(state["torch"])
    if "numpy" in state:
        try:
            import numpy as np
        except ImportError:
            pass
        else:
            saved = state["numpy"]
            np.random.set_state(
                {
                    "bit_generator": saved["bit_generator"],
                    "state": {"key": np.array(saved["key"], dtype=np.uint32), "pos": saved["pos"]},
                    "has_gauss": saved["has_gauss"],
                    "gauss": saved["gauss"],
                }
            )
    cuda = state.get("cuda") or []
    if cuda and torch.cuda.is_available():
        for index in range(min(len(cuda), torch.cuda.device_count())):
            torch.cuda.set_rng_state(cuda[index], index)


def _missing_keys(
    module: torch.nn.Module, expected: dict[str, Any], loaded: dict[str, Any]
) -> list[str]:
    """Keys of ``expected`` that ``loaded`` does not cover. Tied weights are saved once
    (save_pretrained and safetensors drop the twins): a key is covered when a loaded key
    shares its storage, or its parameter, in this model."""
    twins: dict[Any, list[str]] = {}
    marks: dict[str, list[Any]] = {key: [] for key in expected}
    for key, tensor in expected.items():
        local = tensor.to_local() if hasattr(tensor, "to_local") else tensor  # sharded: DTensor
        if local.numel():
            marks[key].append((local.data_ptr(), tuple(tensor.shape)))
    for name, parameter in module.named_parameters(remove_duplicate=False):
        if name in marks:
            marks[name].append(id(parameter))
    for key, found in marks.items():
        for mark in found:
            twins.setdefault(mark, []).append(key)
    return [
        key
        for key in expected
        if key not in loaded
        and not any(twin in loaded for mark in marks[key] for twin in twins[mark])
    ]
