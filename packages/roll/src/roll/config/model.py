"""The policy's config section: which model, on which device, with which adapters."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from roll.config.base import _Section


class TinyModel(_Section):
    """A tiny model built from nothing at ``model.path`` when nothing is there yet."""

    vocab_size: int = Field(default=512, ge=263)
    """Size of the BPE vocabulary (at least 263: the 256 bytes and 7 added tokens)."""
    hidden_size: int = Field(default=64, ge=8)
    """Width of the hidden states (a multiple of ``heads``; the MLP is twice as wide)."""
    layers: int = Field(default=2, ge=1)
    """Decoder layers (a Llama architecture)."""
    heads: int = Field(default=4, ge=1)
    """Attention heads per layer."""
    seed: int = 0
    """Seed of the random weights."""
    corpus: list[str] = Field(default_factory=list)
    """Datasets (directories with ``trajectories.jsonl``, or JSONL files of trajectories)
    whose texts, with the iflow agent's prompts, train the tokenizer too: what the model
    will mostly read and write takes fewer tokens."""


_LLAMA_LINEAR = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


class LoraConfig(_Section):
    """LoRA adapters (through peft): only the adapters train; checkpoints hold only them."""

    r: int = Field(default=16, ge=1)
    """Rank of each adapter."""
    alpha: float = Field(default=32.0, gt=0)
    """Scale numerator: the adapter's output is multiplied by ``alpha / r``."""
    dropout: float = Field(default=0.0, ge=0, lt=1)
    """Dropout on the adapters' input while training; 0: none."""
    target_modules: list[str] = Field(default_factory=lambda: list(_LLAMA_LINEAR))
    """Names of the linear layers to adapt (a module matches when its name ends with one)."""


class ModelConfig(_Section):
    """The policy."""

    path: str
    """A directory written by ``save_pretrained`` (any transformers causal LM)."""
    tiny: TinyModel | None = None
    """Build a tiny model at ``path`` first when ``path`` holds no model."""
    device: str = "auto"
    """``auto`` (a GPU when there is one), ``cpu``, ``cuda``, ``cuda:1``..."""
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto"
    """``auto``: bfloat16 on a GPU that supports it, float32 otherwise."""
    gradient_checkpointing: bool = False
    """Recompute activations in the backward pass instead of keeping them: less memory,
    slower steps."""
    lora: LoraConfig | None = None
    """Train LoRA adapters instead of every weight (``{}`` for the defaults); the run's final
    ``model/`` is the base with the adapters merged in, ready to serve."""
