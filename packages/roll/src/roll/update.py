"""One optimiser update over a batch of samples: micro-batches, clipping, non-finite guard.

The batch's aggregation weights are fixed before it gets here (see
:func:`roll.algo.batch.set_weights`), so the micro-batches' gradients, accumulated, equal
the whole batch's gradient, whatever the token budget; with several processes each works on
its share and the loss is scaled by the world size to undo the averaging of DDP or FSDP. A
sharded (FSDP) model gathers parameters in every forward, so there all processes run as many
micro-batches, those with fewer filling up with a dummy of zero loss.
"""

from __future__ import annotations

import contextlib
import math
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import torch

from roll.algo.batch import Collated, Sample, collate, micro_batches
from roll.algo.losses import LossSpec, mismatch_log_ratio, mismatch_summary, policy_loss
from roll.config import OptimConfig
from roll.distributed import Parallel, World, wrap_model
from roll.errors import TrainingAborted
from roll.models import head_is_linear, scored_logprobs
from roll.prefix import ScoredForward, collate_shared, pack_groups, prefix_groups


def make_optimizer(lm: torch.nn.Module, optim: OptimConfig, total_steps: int) -> tuple[Any, Any]:
    """AdamW over the trainable parameters and its learning-rate schedule."""
    params = [p for p in lm.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(
        params, lr=optim.lr, betas=optim.betas, eps=optim.eps, weight_decay=optim.weight_decay
    )
    warmup = optim.warmup_steps
    total = max(total_steps, 1)

    def factor(step: int) -> float:
        if warmup and step < warmup:
            return (step + 1) / warmup
        if optim.schedule == "constant":
            return 1.0
        progress = min(1.0, (step - warmup) / max(1, total - warmup))
        if optim.schedule == "linear":
            return 1.0 - progress
        return 0.5 * (1.0 + math.cos(math.pi * progress))

    return optimizer, torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


@dataclass(slots=True)
class UpdateResult:
    """What one update did."""

    skipped: bool
    """The loss or gradient was not finite: nothing was applied."""
    metrics: dict[str, float] = field(default_factory=dict)


class Updater:
    """Owns the optimiser and turns batches of samples into parameter updates."""

    def __init__(
        self,
        lm: torch.nn.Module,
        optim: OptimConfig,
        *,
        total_steps: int,
        spec: LossSpec,
        pad_id: int,
        micro_batch_tokens: int,
        max_bad_steps: int,
        world: World | None = None,
        device: str = "cpu",
        amp_dtype: torch.dtype | None = None,
        parallel: Parallel = "ddp",
        share_prefix: bool = False,
        temperature: float = 1.0,
    ) -> None:
        """``temperature``: the rollouts' sampling temperature; the trained log-probs are
        those of ``lm``'s logits divided by it (the policy that sampled them)."""
        self.lm = lm
        self.temperature = temperature
        self.world = world or World()
        self.device = device
        self.spec = spec
        self.pad_id = pad_id
        self.micro_batch_tokens = micro_batch_tokens
        self.max_bad_steps = max_bad_steps
        self.max_grad_norm = optim.max_grad_norm
        self.amp_dtype = amp_dtype
        self.sharded = parallel == "fsdp" and self.world.distributed
        self.share_prefix = share_prefix and not self.sharded and head_is_linear(lm.config)
        """Group prefixes run once per micro-batch (see :mod:`roll.prefix`); not under FSDP,
        whose layers would be gathered twice per forward."""
        """The parameters are sharded between the processes (FSDP): ``lm``'s are DTensors."""
        self.module = wrap_model(ScoredForward(lm, temperature), self.world, device, parallel)
        self.optimizer, self.scheduler = make_optimizer(lm, optim, total_steps)
        self.bad_steps = 0
        self.updates = 0

    def autocast(self) -> Any:
        """The mixed-precision context the updater's forward passes run in (none without
        an ``amp_dtype``); a reference model scored beside the policy runs in it too."""
        if self.amp_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(device_type=self.device.split(":")[0], dtype=self.amp_dtype)

    def _forward(self, col: Collated, entropy: bool) -> tuple[torch.Tensor, Any]:
        with self.autocast(), warnings.catch_warnings():
            # FSDP warns that the log-probs are a view, in case they are modified in place
            # (the hook of its backward would be lost); the losses never modify them.
            warnings.filterwarnings("ignore", message="FSDP2-wrapped module .* view tensor")
            return self.module(col, entropy)

    def _micro_batches(self, samples: list[Sample]) -> list[Any]:
        """``samples`` by the token budget; sharded, as many as the busiest process has (the
        extra ones empty); never none. With prefix sharing, a micro-batch is a list of
        prefix groups (lists of samples), else a list of samples."""
        batches: list[Any]
        if self.share_prefix:
            batches = pack_groups(prefix_groups(samples), self.micro_batch_tokens)
        else:
            batches = micro_batches(samples, self.micro_batch_tokens)
        if self.sharded:
            batches += [[] for _ in range(self.world.max(len(batches)) - len(batches))]
        return batches or [[]]

    @contextlib.contextmanager
    def _gradient_sync(self, last: bool) -> Iterator[None]:
        """Exchange gradients only in the backward of the last micro-batch."""
        if not self.world.distributed:
            yield
        elif self.sharded:
            self.module.set_requires_gradient_sync(last)
            yield
        elif last:
            yield
        else:
            with self.module.no_sync():
                yield

    def step(self, samples: list[Sample]) -> UpdateResult:
        """Forward/backward ``samples`` (this process's share) in micro-batches, then update.

        A sample whose loss has no gradient (every scored token's advantage or weight zero,
        no imitation weight, no KL or entropy term: an IPA episode that failed, a GRPO group
        that all failed or all passed) is not run: the loss is a sum with fixed weights, so
        the gradient is the same without it (and the ``ratio``, ``weight`` and ``clip_frac``
        sums cover the samples that ran, as do the train-inference mismatch figures,
        ``train/mismatch/...``: see :func:`roll.algo.losses.mismatch_summary`)."""
        self.lm.train()
        self.optimizer.zero_grad(set_to_none=True)
        running = [s for s in samples if carries_gradient(s, self.spec)]
        idle, samples = len(samples) - len(running), running
        batches = self._micro_batches(samples)
        totals, log_ratios, tokens = self._backward(batches)
        grad_norm = torch.nn.utils.clip_grad_norm_(
            self.lm.parameters(), self.max_grad_norm or float("inf")
        )
        if hasattr(grad_norm, "full_tensor"):  # sharded: a DTensor, the same on every process
            grad_norm = grad_norm.full_tensor()
        metrics, finite = self._reduce(totals, grad_norm)
        metrics["train/lr"] = float(self.scheduler.get_last_lr()[0])
        metrics["train/micro_batches"] = float(sum(1 for b in batches if b))
        metrics["train/tokens"] = float(tokens)
        metrics["train/zero_gradient_samples"] = float(idle)
        every = self.world.gather(torch.cat(log_ratios).tolist() if log_ratios else [])
        mismatch = mismatch_summary(
            torch.tensor(every, dtype=torch.float64),
            metrics.get("train/masked_tokens", 0.0),
            metrics.get("train/rl_tokens", 0.0),
        )
        metrics |= {f"train/mismatch/{k}": v for k, v in mismatch.items()}
        if not finite:
            self._skip(metrics)
            return UpdateResult(skipped=True, metrics=metrics)
        self.optimizer.step()
        self.scheduler.step()
        self.updates += 1
        metrics["train/skipped_steps"] = float(self.bad_steps)
        return UpdateResult(skipped=False, metrics=metrics)

    def _backward(
        self, batches: list[Any]
    ) -> tuple[dict[str, torch.Tensor], list[torch.Tensor], int]:
        """Forward and backward every micro-batch, the gradients adding up; returns the sums
        of the loss statistics, each micro-batch's train-inference log-ratios and the tokens
        the model ran on."""
        entropy = bool(self.spec.entropy_coef)
        totals: dict[str, torch.Tensor] = {}
        log_ratios: list[torch.Tensor] = []
        tokens = 0
        for index, batch in enumerate(batches):
            with self._gradient_sync(last=index == len(batches) - 1):
                col = self._collate(batch)
                logp, ent = self._forward(col, entropy)
                loss, stats = policy_loss(logp, col.tokens, self.spec, entropy=ent)
                (loss * self.world.size).backward()
            tokens += col.model_tokens if batch else 0
            if batch:
                old = col.tokens.old if col.tokens.old is not None else logp.detach()
                log_ratios.append(mismatch_log_ratio(col.tokens, old).float().cpu())
            stats["loss"] = loss.detach()
            for key, value in stats.items():
                totals[key] = totals.get(key, torch.zeros((), device=value.device)) + value.float()
        return totals, log_ratios, tokens

    def _reduce(
        self, totals: dict[str, torch.Tensor], grad_norm: torch.Tensor
    ) -> tuple[dict[str, float], bool]:
        """The statistics summed over the processes (``train/...``) with the gradient norm,
        and whether every process's sums and norm are finite."""
        # a statistic only some processes have (imitation, KL) counts as 0 on the others
        keys = sorted(set(self.world.gather(sorted(totals))))
        zero = torch.zeros((), device=self.device)
        packed = torch.stack(
            [totals.get(k, zero).to(self.device) for k in keys]
            + [grad_norm.float().to(self.device)]
        )
        packed[:-1] = self.world.sum(packed[:-1].clone())
        finite = torch.isfinite(packed).all().to(torch.float32)
        finite = self.world.sum(finite.clone()) == self.world.size
        metrics = {f"train/{k}": float(v) for k, v in zip(keys, packed[:-1].tolist(), strict=True)}
        metrics["train/grad_norm"] = float(packed[-1])
        return metrics, bool(finite)

    def _skip(self, metrics: dict[str, float]) -> None:
        """Drop this update's NaN/inf gradients and count the step as bad; too many in all
        end the run."""
        self.optimizer.zero_grad(set_to_none=True)
        self.bad_steps += 1
        metrics["train/skipped_steps"] = float(self.bad_steps)
        if self.bad_steps >= self.max_bad_steps:
            raise TrainingAborted(
                f"{self.bad_steps} updates had a NaN/inf loss or gradient (the limit is "
                f"run.max_bad_steps={self.max_bad_steps}); lower optim.lr, check the rewards, "
                "or raise the limit"
            )

    def _collate(self, batch: list[Any]) -> Any:
        if batch and self.share_prefix:
            return collate_shared(batch, pad_id=self.pad_id, device=self.device)
        if batch:
            return collate(batch, pad_id=self.pad_id, device=self.device)
        # A process with nothing (more) to do still runs a forward and backward with a zero
        # loss: DDP exchanges gradients in it and FSDP gathers parameters. One scored token
        # of weight 0 runs the model as a real micro-batch does.
        dummy = Sample(
            input_ids=[self.pad_id, self.pad_id],
            rl_mask=[False, True],
            chunk_ids=[-1, 0],
            weight=[0.0, 0.0],
        )
        return collate([dummy], pad_id=self.pad_id, device=self.device)

    @torch.no_grad()
    def logprobs(self, samples: list[Sample]) -> list[list[float]]:
        """Current log-probs of every sample's scored tokens placed at their positions (0
        elsewhere): the old log-probs before several updates, or the reference's."""
        if not self.sharded:
            return scored_logprobs_of(
                self.lm,
                samples,
                self.pad_id,
                self.micro_batch_tokens,
                self.device,
                self.autocast,
                temperature=self.temperature,
            )
        # sharded: through the root module, every process as many micro-batches
        was_training = self.lm.training
        self.lm.eval()
        out: dict[int, list[float]] = {}
        try:
            for batch in self._micro_batches(samples):
                col = self._collate(batch)
                logp, _ = self._forward(col, entropy=False)
                if batch:
                    rows = [s for g in batch for s in g] if self.share_prefix else batch
                    plain = col.plain if self.share_prefix else col
                    out.update(_by_position(rows, plain, logp))
        finally:
            self.lm.train(was_training)
        return [out[id(s)] for s in samples]

    def state(self) -> dict[str, Any]:
        return {"bad_steps": self.bad_steps, "updates": self.updates}

    def load_state(self, state: dict[str, Any]) -> None:
        self.bad_steps = int(state.get("bad_steps", 0))
        self.updates = int(state.get("updates", 0))


def carries_gradient(sample: Sample, spec: LossSpec) -> bool:
    """Whether ``sample``'s loss under ``spec`` has a gradient: a KL or entropy term, an
    imitation weight, or a scored RL token with both an advantage and a weight."""
    if spec.kl_coef or spec.entropy_coef or any(sample.imitation):
        return True
    return any(
        scored and advantage != 0.0 and weight != 0.0
        for scored, advantage, weight in zip(
            sample.rl_mask, sample.advantages, sample.weight, strict=False
        )
    )


@torch.no_grad()
def scored_logprobs_of(
    lm: torch.nn.Module,
    samples: list[Sample],
    pad_id: int,
    micro_batch_tokens: int,
    device: str,
    autocast: Any = contextlib.nullcontext,
    *,
    temperature: float = 1.0,
) -> list[list[float]]:
    """Log-probs of each sample's scored tokens under ``lm`` (sampling at ``temperature``),
    laid out per position."""
    was_training = lm.training
    lm.eval()
    out: dict[int, list[float]] = {}
    try:
        for batch in micro_batches(samples, micro_batch_tokens):
            col = collate(batch, pad_id=pad_id, device=device)
            with autocast():
                logp, _ = scored_logprobs(lm, col, temperature=temperature)
            out.update(_by_position(batch, col, logp))
    finally:
        lm.train(was_training)
    return [out[id(s)] for s in samples]


def _by_position(batch: list[Sample], col: Collated, logp: torch.Tensor) -> dict[int, list[float]]:
    """Each sample's (by ``id``) scored log-probs at their positions, 0 elsewhere."""
    rows = col.rows.cpu().tolist()
    cols = col.cols.cpu().tolist()
    per_row = [[0.0] * len(s) for s in batch]
    for value, r, c in zip(logp.float().cpu().tolist(), rows, cols, strict=True):
        per_row[r][c] = value
    return {id(sample): row for sample, row in zip(batch, per_row, strict=True)}
