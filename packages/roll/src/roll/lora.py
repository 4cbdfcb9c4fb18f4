"""LoRA adapters on the policy: CPU-sized training of real models, small checkpoints.

With ``model.lora`` set, :func:`apply_lora` wraps the loaded policy in a peft model whose only
trainable weights are the adapters, so the optimiser state, the gradients and the
checkpoints are those of a few million parameters instead of the whole model (a SmolLM2-135M
checkpoint with AdamW state: tens of MB instead of 2.1 GB). Checkpoints hold the adapters in
peft's own format (``adapter_model.safetensors`` + ``adapter_config.json``), which
:mod:`roll.checkpoint` reads back on resume; :func:`merged_copy` and
:func:`export_merged` give a plain model with the adapters folded into the base weights, for
serving with anything that loads an HF directory.
"""

from __future__ import annotations

import copy
import json
import warnings
from pathlib import Path
from typing import Any

from roll.checkpoint import ADAPTER_CONFIG, MODEL_DIR, latest_checkpoint
from roll.config import LoraConfig
from roll.errors import ConfigError
from roll.models import load_policy


def is_lora(module: Any) -> bool:
    """``module`` is a peft model (its trainable weights are adapters)."""
    try:
        from peft import PeftModel
    except ImportError:
        return False
    return isinstance(module, PeftModel)


def apply_lora(lm: Any, config: LoraConfig, *, base_path: str | Path) -> Any:
    """``lm`` with LoRA adapters on ``config.target_modules``; only the adapters train."""
    try:
        from peft import LoraConfig as PeftLoraConfig
        from peft import get_peft_model
    except ImportError as exc:
        raise ConfigError("model.lora needs peft; install it with pip install peft") from exc
    import torch

    linear = sorted(
        {
            name.rsplit(".", 1)[-1]
            for name, m in lm.named_modules()
            if isinstance(m, torch.nn.Linear)
        }
    )
    absent = [t for t in config.target_modules if t not in linear]
    if absent:
        raise ConfigError(
            f"model.lora.target_modules names {', '.join(absent)}, which this model has no "
            f"linear layer called; its linear layers are {', '.join(linear)}"
        )
    peft_config = PeftLoraConfig(
        r=config.r,
        lora_alpha=config.alpha,  # type: ignore[arg-type]  # peft annotates int; floats work
        lora_dropout=config.dropout,
        target_modules=list(config.target_modules),
        task_type="CAUSAL_LM",
    )
    with warnings.catch_warnings():  # peft 0.18 reads a property transformers 5 deprecated
        warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*")
        wrapped = get_peft_model(lm, peft_config)
    # peft records where the base came from, so an exported adapter names its base model
    wrapped.peft_config["default"].base_model_name_or_path = str(Path(base_path).resolve())
    return wrapped


def merged_copy(module: Any) -> Any:
    """A plain transformers model: a copy of ``module`` with its adapters merged in."""
    return copy.deepcopy(module).merge_and_unload()


def export_merged(source: Path, output: Path) -> Path:
    """Write the LoRA checkpoint (or run directory) ``source`` as a merged model at ``output``."""
    from peft import PeftModel

    from iflow.models.local import quiet_progress

    source = Path(source)
    checkpoint = latest_checkpoint(source) if (source / "checkpoints").is_dir() else source
    adapters = (checkpoint / MODEL_DIR) if checkpoint is not None else source
    if checkpoint is None or not (adapters / ADAPTER_CONFIG).is_file():
        raise ConfigError(
            f"{source} holds no LoRA checkpoint (no {MODEL_DIR}/{ADAPTER_CONFIG}); give a run "
            "directory of a run with model.lora, or one of its checkpoints"
        )
    if output.exists() and any(output.iterdir()):
        raise ConfigError(f"{output} exists and is not empty; give a new directory")
    base = json.loads((adapters / ADAPTER_CONFIG).read_text())["base_model_name_or_path"]
    lm, tokenizer = load_policy(base, device="cpu", dtype="float32")
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*")
        model = PeftModel.from_pretrained(lm, adapters)
    with quiet_progress():
        model.merge_and_unload().save_pretrained(output, safe_serialization=True)
        tokenizer.save_pretrained(output)
    return output


__all__ = ["apply_lora", "export_merged", "is_lora", "merged_copy"]
