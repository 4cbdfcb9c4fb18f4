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

from roll.checkpoint.layout import (
    ADAPTER_CONFIG,
    ADAPTER_WEIGHTS,
    CHECKPOINTS_DIR,
    LATEST,
    MANIFEST,
    MODEL_DIR,
    MODEL_FILE,
    OPTIMIZER,
    RNG,
    SCHEDULER,
    STATE,
    latest_checkpoint,
    step_dir_name,
)
from roll.checkpoint.loading import load_checkpoint
from roll.checkpoint.saving import save_checkpoint

__all__ = [
    "ADAPTER_CONFIG",
    "ADAPTER_WEIGHTS",
    "CHECKPOINTS_DIR",
    "LATEST",
    "MANIFEST",
    "MODEL_DIR",
    "MODEL_FILE",
    "OPTIMIZER",
    "RNG",
    "SCHEDULER",
    "STATE",
    "latest_checkpoint",
    "load_checkpoint",
    "save_checkpoint",
    "step_dir_name",
]
