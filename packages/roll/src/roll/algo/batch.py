"""From trajectories to training samples, aggregation weights and micro-batches.

A :class:`Sample` is one trajectory as a token sequence with, per token: whether it takes the
RL loss, its chunk, its advantage, the sampling engine's log-prob, and an imitation weight.
:func:`set_weights` fixes the aggregation weights over a whole mini-batch before it is split
into micro-batches (by a token budget) or shared between processes, so every split gives the
same gradient. :func:`collate` turns a micro-batch into padded ids plus the flat
:class:`~roll.algo.losses.ScoredTokens` of its scored tokens.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from ale.chunking import NO_CHUNK, Loss, chunk_ids, loss_of, token_view
from ale.trajectory import Trajectory
from roll.algo.advantages import Estimator, chunk_advantages

Aggregation = Literal[
    "token_mean", "seq_mean_token_mean", "seq_mean_token_sum", "seq_mean_token_sum_norm"
]


@dataclass(slots=True)
class Sample:
    """One trajectory as a token sequence ready for the loss."""

    input_ids: list[int]
    rl_mask: list[bool]
    chunk_ids: list[int]
    advantages: list[float] = field(default_factory=list)
    mu: list[float] = field(default_factory=list)
    expert_mask: list[bool] = field(default_factory=list)
    """Tokens an expert wrote (a replayed prefix, an SFT target): never RL, imitation when asked."""
    reward: float = 0.0
    positive: bool | None = None
    """IPA's split: the trajectory's return (after any baseline) is above zero; set by
    :func:`assign_advantages`, else taken from ``reward > 0``."""
    group: Hashable = None
    weight: list[float] = field(default_factory=list)
    imitation: list[float] = field(default_factory=list)
    old: list[float] | None = None
    ref: list[float] | None = None
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def num_chunks(self) -> int:
        """Chunks that take the RL loss."""
        return len({c for c, m in zip(self.chunk_ids, self.rl_mask, strict=True) if m})

    @property
    def rl_tokens(self) -> int:
        return sum(self.rl_mask)

    def __len__(self) -> int:
        return len(self.input_ids)


def sample_from_trajectory(trajectory: Trajectory) -> Sample:
    """A trajectory with token ids (an RL rollout) as a :class:`Sample` (no advantages yet).

    Policy tokens of steps marked erroneous/irrelevant and of a replayed expert prefix take no
    RL loss; chunks are renumbered over the tokens that do.
    """
    view = token_view(trajectory)
    steps = trajectory.steps
    rl: list[bool] = []
    prefix: list[bool] = []
    for generated, owner in zip(view.policy_mask, view.step_index, strict=True):
        if not generated:
            rl.append(False)
            prefix.append(False)
            continue
        loss = loss_of(steps[owner])  # the marks' one decision, shared with SFT
        prefix.append(loss is Loss.IMITATION)
        rl.append(loss is Loss.TARGET)
    mu = [math.nan if lp is None else float(lp) for lp in view.logprobs]
    return Sample(
        input_ids=list(view.token_ids),
        rl_mask=rl,
        chunk_ids=chunk_ids(view.token_ids, rl),
        mu=mu,
        expert_mask=prefix,
        reward=float(trajectory.reward or 0.0),
        group=trajectory.group_id or trajectory.trajectory_id,
        meta={"trajectory_id": trajectory.trajectory_id, "task_id": trajectory.task_id},
    )


def assign_advantages(
    samples: Sequence[Sample],
    estimator: Estimator,
    *,
    scale_by_std: bool = True,
    gamma: float = 1.0,
    baseline: Literal["none", "group_mean"] = "none",
) -> None:
    """Fill each sample's per-token advantages from its chunk's advantage."""
    per_chunk = chunk_advantages(
        estimator,
        [s.reward for s in samples],
        [s.group for s in samples],
        [s.num_chunks for s in samples],
        [s.rl_tokens for s in samples],
        scale_by_std=scale_by_std,
        gamma=gamma,
        baseline=baseline,
    )
    for sample, values in zip(samples, per_chunk, strict=True):
        sample.positive = values[-1] > 0 if values else sample.reward > 0
        sample.advantages = [values[c] if c != NO_CHUNK else 0.0 for c in sample.chunk_ids]


def set_weights(
    samples: Sequence[Sample],
    aggregation: Aggregation,
    *,
    norm_length: int | None = None,
    imitation_coef: float = 0.0,
    imitation_groups: set[Hashable] | None = None,
) -> None:
    """Fix each token's aggregation weight over the whole mini-batch ``samples``.

    - ``token_mean``: 1 / (RL tokens in the mini-batch);
    - ``seq_mean_token_mean``: 1 / (the sequence's RL tokens x sequences with any);
    - ``seq_mean_token_sum``: 1 / (sequences with any RL token);
    - ``seq_mean_token_sum_norm``: 1 / (sequences x ``norm_length``) (Dr. GRPO's constant).

    Imitation weights: ``imitation_coef`` / (prefix tokens of the samples whose group is in
    ``imitation_groups``), a token mean over the imitated tokens.
    """
    total_tokens = sum(s.rl_tokens for s in samples)
    active = sum(1 for s in samples if s.rl_tokens)
    if aggregation == "seq_mean_token_sum_norm" and not norm_length:
        raise ValueError("seq_mean_token_sum_norm needs norm_length (a fixed token count)")
    for s in samples:
        n = s.rl_tokens
        if not n:
            w = 0.0
        elif aggregation == "token_mean":
            w = 1.0 / total_tokens
        elif aggregation == "seq_mean_token_mean":
            w = 1.0 / (n * active)
        elif aggregation == "seq_mean_token_sum":
            w = 1.0 / active
        elif aggregation == "seq_mean_token_sum_norm":
            w = 1.0 / (active * float(norm_length or 1))
        else:
            raise ValueError(f"unknown aggregation {aggregation!r}")
        s.weight = [w if m else 0.0 for m in s.rl_mask]
    groups = imitation_groups or set()
    imitated = [s for s in samples if s.group in groups and any(s.expert_mask)]
    count = sum(sum(s.expert_mask) for s in imitated)
    for s in samples:
        if imitation_coef and count and s in imitated:
            s.imitation = [imitation_coef / count if p else 0.0 for p in s.expert_mask]
        else:
            s.imitation = []


def set_sft_weights(samples: Sequence[Sample]) -> None:
    """SFT: every unmasked expert token weighs 1 / (unmasked tokens in the mini-batch), so the
    loss is the mean NLL over the tokens that carry one."""
    total = sum(sum(s.expert_mask) for s in samples)
    for s in samples:
        s.weight = [0.0] * len(s.input_ids)
        s.imitation = [1.0 / total if m else 0.0 for m in s.expert_mask] if total else []


def micro_batches(samples: Sequence[Sample], token_budget: int) -> list[list[Sample]]:
    """Split into micro-batches whose padded size (rows x longest row) stays within the budget.

    Samples are taken longest first so rows of one micro-batch have similar lengths (little
    padding); a sample longer than the budget gets a micro-batch of its own.
    """
    ordered = sorted(samples, key=len, reverse=True)
    batches: list[list[Sample]] = []
    current: list[Sample] = []
    longest = 0
    for sample in ordered:
        size = max(longest, len(sample))
        if current and size * (len(current) + 1) > token_budget:
            batches.append(current)
            current, longest = [], 0
            size = len(sample)
        current.append(sample)
        longest = size
    if current:
        batches.append(current)
    return batches


@dataclass(slots=True)
class Collated:
    """A padded micro-batch and the flat description of its scored tokens."""

    input_ids: Any
    attention_mask: Any
    rows: Any
    """Row of each scored token (long, N)."""
    cols: Any
    """Position of each scored token (long, N); its log-prob is predicted at ``cols - 1``."""
    targets: Any
    tokens: Any
    """:class:`~roll.algo.losses.ScoredTokens`."""

    @property
    def model_tokens(self) -> int:
        """Positions the model runs on (without padding)."""
        return int(self.attention_mask.sum().item())


def collate(batch: Sequence[Sample], *, pad_id: int, device: Any = "cpu") -> Collated:
    """Right-pad ``batch`` and gather its scored tokens (RL loss or imitation weight)."""
    import torch

    from roll.algo.losses import ScoredTokens

    f32 = torch.float32
    width = max(len(s) for s in batch)
    ids = torch.full((len(batch), width), pad_id, dtype=torch.long)
    attn = torch.zeros((len(batch), width), dtype=torch.long)
    has_old = all(s.old is not None for s in batch)
    has_ref = all(s.ref is not None for s in batch)
    has_imitation = any(s.imitation for s in batch)
    parts: dict[str, list[Any]] = {
        k: []
        for k in ("rows", "cols", "chunk", "adv", "weight", "rl", "pos", "mu", "old", "ref", "imit")
    }
    chunk_base = 0
    for r, s in enumerate(batch):
        ids[r, : len(s)] = torch.tensor(s.input_ids, dtype=torch.long)
        attn[r, : len(s)] = 1
        chunk_base += _gather_row(s, r, chunk_base, parts, old=has_old, ref=has_ref)

    def cat(name: str, dtype: Any = None) -> Any:
        out = torch.cat(parts[name]) if parts[name] else torch.zeros(0)
        return out.to(device=device, dtype=dtype or out.dtype)

    rows, cols = cat("rows", torch.long), cat("cols", torch.long)
    tokens = ScoredTokens(
        seq=rows,
        chunk=cat("chunk", torch.long),
        advantage=cat("adv", f32),
        weight=cat("weight", f32),
        rl=cat("rl", torch.bool),
        positive=cat("pos", torch.bool),
        old=cat("old", f32) if has_old else None,
        mu=cat("mu", f32),
        ref=cat("ref", f32) if has_ref else None,
        imitation=cat("imit", f32) if has_imitation else None,
        num_chunks=max(chunk_base, 1),
        num_seqs=len(batch),
    )
    ids = ids.to(device)
    return Collated(
        input_ids=ids,
        attention_mask=attn.to(device),
        rows=rows,
        cols=cols,
        targets=ids[rows, cols],
        tokens=tokens,
    )


def _gather_row(
    s: Sample, r: int, chunk_base: int, parts: dict[str, list[Any]], *, old: bool, ref: bool
) -> int:
    """Append the scored tokens of row ``r`` (RL-masked or with an imitation weight, never the
    first) to ``parts``, their chunks numbered from ``chunk_base``; returns how many chunk ids
    the row used (its chunks, then one for each prefix token)."""
    import torch

    f32 = torch.float32
    n = len(s)
    rl = torch.tensor(s.rl_mask, dtype=torch.bool)
    imit = torch.tensor(s.imitation, dtype=f32) if s.imitation else torch.zeros(n, dtype=f32)
    scored = rl | (imit != 0)
    scored[0] = False  # the first token has no context to predict it from
    cols = scored.nonzero().squeeze(-1)
    chunks = torch.tensor(s.chunk_ids, dtype=torch.long)[cols]
    k = int(chunks.max().item()) + 1 if len(chunks) else 0
    lone = chunks < 0  # prefix tokens: each its own segment
    chunks[lone] = k + torch.arange(int(lone.sum().item()))
    parts["rows"].append(torch.full_like(cols, r))
    parts["cols"].append(cols)
    parts["chunk"].append(chunks + chunk_base)
    parts["adv"].append(_pick(s.advantages, cols, n))
    parts["weight"].append(_pick(s.weight, cols, n))
    parts["rl"].append(rl[cols])
    positive = s.positive if s.positive is not None else s.reward > 0
    parts["pos"].append(torch.full((len(cols),), positive, dtype=torch.bool))
    parts["mu"].append(_pick(s.mu, cols, n, math.nan))
    if old:
        parts["old"].append(_pick(s.old, cols, n))
    if ref:
        parts["ref"].append(_pick(s.ref, cols, n))
    parts["imit"].append(imit[cols])
    return int(chunks.max().item()) + 1 if len(chunks) else 0


def _pick(values: Sequence[float] | None, cols: Any, n: int, fill: float = 0.0) -> Any:
    import torch

    if not values:
        return torch.full((len(cols),), fill, dtype=torch.float32)
    return torch.tensor(values, dtype=torch.float32)[cols]
