"""The config sections both trainers share: the optimiser and the loop, checkpoints and logs."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from roll.config.base import _Section


class OptimConfig(_Section):
    """AdamW and its schedule."""

    lr: float = Field(default=1e-5, gt=0)
    """The peak learning rate (reached after ``warmup_steps``)."""
    weight_decay: float = Field(default=0.0, ge=0)
    """AdamW's decoupled weight decay; 0: none."""
    betas: tuple[float, float] = (0.9, 0.999)
    """AdamW's decay rates of the first and second moment estimates."""
    eps: float = Field(default=1e-8, gt=0)
    """AdamW's term added to the denominator for stability."""
    schedule: Literal["constant", "linear", "cosine"] = "constant"
    """The learning rate after warm-up: ``constant``, or decaying to 0 by the run's last step
    (``linear`` or ``cosine``)."""
    warmup_steps: int = Field(default=0, ge=0)
    """Steps over which the learning rate rises linearly to ``lr``; 0: no warm-up."""
    max_grad_norm: float | None = Field(default=1.0, gt=0)
    """Clip the global gradient norm to this; ``null`` to not clip (the norm is still logged)."""


class RunConfig(_Section):
    """What both trainers share: the loop, checkpoints and logs."""

    steps: int = Field(default=10, ge=1)
    """Optimiser updates (SFT) or rollout batches (RL) to run."""
    micro_batch_tokens: int = Field(default=8192, ge=16)
    """Token budget of one forward/backward (rows x longest row): larger batches are
    processed in micro-batches whose gradients add up to the whole batch's."""
    share_prefix: bool = True
    """Run the prompt the episodes of a group share once per micro-batch, not once per
    episode (same gradients; not under FSDP)."""
    checkpoint_every: int = Field(default=10, ge=1)
    """Save a checkpoint every this many steps (and after the last step)."""
    keep_checkpoints: int = Field(default=2, ge=1)
    """How many of the newest checkpoints to keep; older ones are deleted."""
    max_bad_steps: int = Field(default=5, ge=1)
    """Stop after this many steps whose loss or gradient was NaN/inf (each is skipped)."""
    log_every: int = Field(default=1, ge=1)
    """Record the metrics every this many steps (the progress bar moves every step)."""
    tensorboard: bool | None = None
    """Write TensorBoard events too; ``null``: when tensorboard is installed."""
    progress: bool = True
    """Show a progress bar (only on a terminal)."""
    parallel: Literal["ddp", "fsdp"] = "ddp"
    """How several processes (torchrun, more than one) train together; ignored in a single
    process. ``ddp``: every process holds the whole model and optimiser and the gradients are
    averaged. ``fsdp``: parameters, gradients and optimiser state are sharded between the
    processes (FSDP2, ``fully_shard`` per decoder layer), for models that do not fit one GPU
    with DDP; meant for GPUs, works on CPU with gloo. With the HF rollout backend each process
    then also keeps a full copy of the policy to generate with."""
