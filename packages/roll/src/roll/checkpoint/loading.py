"""Reading a checkpoint back: every file checked against the manifest first, then the
weights, the optimizer and scheduler states and the generators restored exactly."""

from __future__ import annotations

import json
import os
import random
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from roll.checkpoint.layout import (
    ADAPTER_WEIGHTS,
    MODEL_DIR,
    MODEL_FILE,
    OPTIMIZER,
    RNG,
    SCHEDULER,
    STATE,
    _advice,
    _problem,
    _unwrap,
)
from roll.errors import CheckpointError

if TYPE_CHECKING:
    import torch


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
