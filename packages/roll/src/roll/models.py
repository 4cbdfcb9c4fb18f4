"""Loading a policy and computing the log-probs of scored tokens.

:func:`scored_logprobs` runs the transformer body over a padded micro-batch, takes the
hidden state *before* each scored token, and applies the output head to those positions only, so the vocabulary projection
and the softmax are spent on the tokens that carry a loss, not on prompts, observations or
padding. Models whose head does more than a linear map (logit soft-capping, logit scaling)
take the plain full forward instead.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from roll.errors import ConfigError


def resolve_device(device: str) -> str:
    """``auto`` -> ``cuda`` when a GPU is usable, else ``cpu``."""
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError(
            f"device {device!r} was asked for but no CUDA GPU is usable here; "
            "set model.device=cpu or auto"
        )
    return device


def resolve_dtype(dtype: str, device: str) -> Any:
    """``auto`` -> bfloat16 on a GPU that supports it, else float32."""
    if dtype == "auto":
        if device.startswith("cuda") and torch.cuda.is_bf16_supported():
            return torch.bfloat16
        return torch.float32
    table = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
    if dtype not in table:
        raise ConfigError(f"dtype {dtype!r} is not one of auto, {', '.join(table)}")
    return table[dtype]


def load_policy(path: str | Path, *, device: str = "auto", dtype: str = "auto") -> tuple[Any, Any]:
    """The causal LM and tokenizer saved in ``path`` (a ``save_pretrained`` directory)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from iflow.models.local import quiet_progress

    directory = Path(path)
    if not (directory / "config.json").is_file():
        raise ConfigError(
            f"there is no model at {directory} (no config.json); give a directory written by "
            "save_pretrained, or set model.tiny to build a tiny model there"
        )
    dev = resolve_device(device)
    torch_dtype = resolve_dtype(dtype, dev)
    with quiet_progress():
        tokenizer = AutoTokenizer.from_pretrained(directory)
        model = AutoModelForCausalLM.from_pretrained(directory, dtype=torch_dtype)
    model.to(dev)  # type: ignore[arg-type]  # transformers types .to as taking a model
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return model, tokenizer


def head_is_linear(config: Any) -> bool:
    """The output head is a plain linear map (no soft-capping or scaling of the logits)."""
    return _head_is_linear(config)


def _head_is_linear(config: Any) -> bool:
    return not (
        getattr(config, "final_logit_softcapping", None) or getattr(config, "logit_scale", None)
    )


def tempered_logprobs(logits: Any, temperature: float = 1.0) -> Any:
    """``log_softmax`` of ``logits / temperature`` in float32: the log-probs of the policy that
    samples at ``temperature`` (RL trains that policy; 1 is the model itself)."""
    logits = logits.float()
    if temperature != 1.0:
        logits = logits / temperature
    return torch.log_softmax(logits, dim=-1)


def _scored_logprobs(
    lm: Any,
    input_ids: Any,
    attention_mask: Any,
    rows: Any,
    cols: Any,
    targets: Any,
    entropy: bool,
    temperature: float = 1.0,
) -> tuple[Any, Any]:
    if rows.numel() == 0:
        zero = sum(p.sum() for p in lm.parameters()) * 0.0  # keeps every parameter in the graph
        empty = zero.new_zeros(0) + zero
        return empty, (empty if entropy else None)
    body = lm.get_decoder() if hasattr(lm, "get_decoder") else None
    head = lm.get_output_embeddings()
    if body is not None and head is not None and _head_is_linear(lm.config):
        hidden = body(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        logits = head(hidden[rows, cols - 1])
    else:
        logits = lm(input_ids=input_ids, attention_mask=attention_mask).logits[rows, cols - 1]
    logps = tempered_logprobs(logits, temperature)
    chosen = logps.gather(-1, targets[:, None]).squeeze(-1)
    ent = None
    if entropy:
        ent = -(logps.exp() * logps).sum(-1)
    return chosen, ent


def scored_logprobs(
    lm: Any, collated: Any, *, entropy: bool = False, temperature: float = 1.0
) -> tuple[Any, Any]:
    """Log-probs (and entropies) of a collated micro-batch's scored tokens under ``lm``
    sampling at ``temperature``."""
    return _scored_logprobs(
        lm,
        collated.input_ids,
        collated.attention_mask,
        collated.rows,
        collated.cols,
        collated.targets,
        entropy,
        temperature,
    )
