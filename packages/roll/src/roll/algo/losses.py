"""Policy losses over scored tokens: PPO clip, GSPO and IPA, plus KL, entropy and imitation.

Everything here works on *flat* tensors, one entry per scored token (a token that carries a
loss): environment and prompt tokens are never scored, so they get exactly zero gradient by
construction, not by multiplying with a zero. Each scored token knows its sequence and its
chunk (``seq``, ``chunk``: small integer segment ids), its advantage (its chunk's), its
aggregation weight (fixed before the update, see :mod:`roll.algo.aggregate`), the trainer's
log-prob before the update (``old``) and the sampling engine's (``mu``, NaN where unknown).

The one abstraction (:class:`LossSpec`) that every algorithm fills:

- ``ratio_level``: the importance ratio per ``token`` (``exp(logp - old)``), per ``chunk``
  (``exp(mean over the chunk of logp - old)``) or per ``sequence`` (the same mean over the
  sequence's scored tokens: GSPO's length-normalised ratio);
- ``loss``: ``ppo`` — ``-min(r * A, clip(r, 1 - clip_low, 1 + clip_high) * A)`` with ``r`` at the
  chosen level (token-level PPO/GRPO with ``token``, GSPO with ``sequence``);
  ``ipa`` — a positive trajectory (its return is above zero: the reward, or the reward
  minus the group mean with ``baseline: group_mean``) gets ``-A * logp`` (REINFORCE weighted by its
  return, no importance sampling); a non-positive one ``-w_c * A * logp`` with
  ``w_c = clip(rho_c, 0, 1)`` taken as a constant weight (no gradient through it) and
  ``rho_c`` the chunk's geometric-mean ratio;
- ``mismatch_threshold`` H: a chunk with ``exp(mean over the chunk of old - mu) > H`` is masked
  whole (its tokens contribute nothing; the aggregation weights are not renormalised, so a
  masked chunk does not raise the weight of the others); :func:`mismatch_log_ratio` and
  :func:`mismatch_summary` give the per-token ``old - mu`` behind it and the step's figures
  (``train/mismatch/...``), whatever engine sampled and whether or not a mask is set;
- ``kl_coef``: ``+ beta * k3`` with ``k3 = exp(ref - logp) - (ref - logp) - 1`` per token;
- ``entropy_coef``: ``- coef * H(pi(.|context))`` per token;
- ``imitation``: ``- logp`` on tokens given an imitation weight (SFT, and IPA's imitation term
  on an expert prefix when a group has no positive).

The loss returned is ``sum(weight * per_token_loss)``: the weights already hold the
aggregation (token mean, sequence mean, ...) over the whole mini-batch, so micro-batches add up
to the same gradient as one big batch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import torch

RatioLevel = Literal["token", "chunk", "sequence"]
LossKind = Literal["ppo", "ipa"]


@dataclass(frozen=True, slots=True)
class LossSpec:
    """How the policy loss is formed (see the module docstring)."""

    loss: LossKind = "ppo"
    ratio_level: RatioLevel = "token"
    clip_low: float = 0.2
    clip_high: float = 0.2
    mismatch_threshold: float | None = None
    kl_coef: float = 0.0
    entropy_coef: float = 0.0


@dataclass(slots=True)
class ScoredTokens:
    """The flat, per-scored-token inputs of one micro-batch (all 1-D, same length ``N``).

    ``rl`` marks tokens that take the policy-gradient loss; ``imitation`` holds a weight for
    the NLL term (0 where none). A token may have both.
    """

    seq: torch.Tensor
    """Sequence index of each token (long)."""
    chunk: torch.Tensor
    """Chunk segment id of each token, unique over (sequence, chunk) in the micro-batch (long)."""
    advantage: torch.Tensor
    weight: torch.Tensor
    """Aggregation weight of the RL terms."""
    rl: torch.Tensor
    """Bool: the token takes the RL loss."""
    positive: torch.Tensor
    """Bool: the token's trajectory had a positive reward (IPA)."""
    old: torch.Tensor | None = None
    """Log-probs before the update; ``None`` means the current ones, detached (on-policy)."""
    mu: torch.Tensor | None = None
    """Sampling engine's log-probs, NaN where unknown; ``None`` when none are known."""
    ref: torch.Tensor | None = None
    """Reference model log-probs, for the KL term."""
    imitation: torch.Tensor | None = None
    """Weight of the NLL term per token (float), or ``None``."""
    num_chunks: int | None = None
    """How many chunk segments there are (``chunk.max() + 1``), when known: saves a device
    sync per segment reduction."""
    num_seqs: int | None = None
    """How many sequences (``seq.max() + 1``), when known."""


def segment_mean(
    values: torch.Tensor, segments: torch.Tensor, size: int | None = None
) -> torch.Tensor:
    """Each entry (row, for 2-D ``values``) replaced by the mean over its segment
    (differentiable). ``size`` is the number of segments when known (else read from ``segments``)."""
    if values.numel() == 0:
        return values
    if size is None:
        size = int(segments.max().item()) + 1
    sums = torch.zeros((size, *values.shape[1:]), dtype=values.dtype, device=values.device)
    sums = sums.index_add(0, segments, values)
    counts = torch.zeros(size, dtype=values.dtype, device=values.device).index_add(
        0, segments, torch.ones(segments.shape, dtype=values.dtype, device=values.device)
    )
    counts = counts.clamp(min=1).reshape(size, *([1] * (values.dim() - 1)))
    return (sums / counts)[segments]


def _ratio_log(
    log_ratio: torch.Tensor, tokens: ScoredTokens, level: RatioLevel, rl: torch.Tensor
) -> torch.Tensor:
    if level == "token":
        return log_ratio
    if level == "chunk":
        return segment_mean(log_ratio, tokens.chunk, tokens.num_chunks)
    # sequence: mean over the sequence's RL tokens only (prefix and masked chunks excluded,
    # so they neither move the ratio nor receive gradient through it)
    seg = torch.where(rl, tokens.seq, tokens.seq.new_zeros(()))
    masked = torch.where(rl, log_ratio, log_ratio.new_zeros(()))
    if tokens.num_seqs is not None:
        size = max(tokens.num_seqs, 1)
    else:
        size = int(seg.max().item()) + 1 if seg.numel() else 1
    sums = torch.zeros(size, dtype=masked.dtype, device=masked.device).index_add(0, seg, masked)
    counts = torch.zeros(size, dtype=masked.dtype, device=masked.device).index_add(
        0, seg, rl.to(masked.dtype)
    )
    return (sums / counts.clamp(min=1))[seg]


def mismatch_mask(tokens: ScoredTokens, old: torch.Tensor, threshold: float) -> torch.Tensor:
    """Bool per token: its chunk's ``exp(mean(old - mu))`` exceeds ``threshold``.

    Chunks whose sampling log-probs are unknown (NaN) are never masked.
    """
    if tokens.mu is None:
        return torch.zeros_like(tokens.rl)
    known = ~torch.isnan(tokens.mu)
    diff = torch.where(known, old - torch.nan_to_num(tokens.mu), old.new_zeros(()))
    both = segment_mean(
        torch.stack([diff, known.to(old.dtype)], dim=-1), tokens.chunk, tokens.num_chunks
    )
    return (both[:, 1] >= 1.0) & (both[:, 0] > math.log(threshold))


def mismatch_log_ratio(tokens: ScoredTokens, old: torch.Tensor) -> torch.Tensor:
    """``old - mu`` (log pi_train - log mu_sampler) at the RL tokens whose sampling log-prob
    is known, before any mask: 1-D and detached, the values the mismatch mask averages per
    chunk. Empty when no sampling log-probs are known."""
    if tokens.mu is None:
        return old.new_zeros(0)
    known = tokens.rl & ~torch.isnan(tokens.mu)
    return (old.detach() - tokens.mu)[known]


def mismatch_summary(
    log_ratio: torch.Tensor, masked_tokens: float, rl_tokens: float
) -> dict[str, float]:
    """The step's train-inference mismatch figures, from every scored token's ``old - mu``
    (:func:`mismatch_log_ratio`, concatenated) and the counts of RL tokens the mask dropped
    and of all RL tokens:

    - ``masked_share``: the share of RL tokens the mismatch mask dropped (0 without a mask);
    - ``tokens``: the tokens whose sampling log-prob is known (the rest of the figures' base);
    - ``log_ratio_mean``: the mean of ``log pi_train - log mu`` (its sign says which engine
      puts more mass on the sampled tokens);
    - ``log_ratio_abs_mean``, ``log_ratio_abs_p99``, ``log_ratio_abs_max``: the spread of
      ``|log pi_train - log mu|``.

    The spread figures are left out when no token's sampling log-prob is known."""
    out = {
        "masked_share": masked_tokens / rl_tokens if rl_tokens else 0.0,
        "tokens": float(log_ratio.numel()),
    }
    if log_ratio.numel():
        values = log_ratio.double()
        size = values.abs()
        out |= {
            "log_ratio_mean": float(values.mean()),
            "log_ratio_abs_mean": float(size.mean()),
            "log_ratio_abs_p99": float(torch.quantile(size, 0.99)),
            "log_ratio_abs_max": float(size.max()),
        }
    return out


def policy_loss(
    logp: torch.Tensor,
    tokens: ScoredTokens,
    spec: LossSpec,
    *,
    entropy: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The micro-batch's loss and its statistics (weighted sums, to be added across micro-batches).

    ``logp`` holds the current log-prob of each scored token (with gradient); ``entropy`` the
    current per-token entropy when ``spec.entropy_coef`` is set.
    """
    old = tokens.old if tokens.old is not None else logp.detach()
    rl = tokens.rl
    if spec.mismatch_threshold is not None:
        masked = mismatch_mask(tokens, old, spec.mismatch_threshold) & rl
        rl = rl & ~masked
    else:
        masked = torch.zeros_like(rl)
    weight = torch.where(rl, tokens.weight, tokens.weight.new_zeros(()))
    log_ratio = _ratio_log(logp - old, tokens, spec.ratio_level, rl)
    ratio = torch.exp(log_ratio)

    per_token, clipped = _surrogate(logp, old, ratio, tokens, spec)

    terms = torch.where(rl, per_token, per_token.new_zeros(()))
    total = (weight * terms).sum()
    stats: dict[str, torch.Tensor] = {
        "pg_loss": total.detach(),
        "clip_frac": (weight * clipped).sum().detach(),
        "ratio": (weight * ratio.detach()).sum(),
        "weight": weight.sum().detach(),
        "masked_tokens": masked.sum().to(logp.dtype),
        "rl_tokens": tokens.rl.sum().to(logp.dtype),
    }
    if spec.kl_coef and tokens.ref is not None:
        delta = tokens.ref - logp
        kl = torch.exp(delta) - delta - 1.0
        kl_term = (weight * torch.where(rl, kl, kl.new_zeros(()))).sum()
        total = total + spec.kl_coef * kl_term
        stats["kl"] = kl_term.detach()
    if spec.entropy_coef and entropy is not None:
        ent_term = (weight * torch.where(rl, entropy, entropy.new_zeros(()))).sum()
        total = total - spec.entropy_coef * ent_term
        stats["entropy"] = ent_term.detach()
    if tokens.imitation is not None:
        nll = (tokens.imitation * -logp).sum()
        total = total + nll
        stats["imitation_loss"] = nll.detach()
    return total, stats


def _surrogate(
    logp: torch.Tensor,
    old: torch.Tensor,
    ratio: torch.Tensor,
    tokens: ScoredTokens,
    spec: LossSpec,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Each token's policy-gradient loss under ``spec.loss`` (``ppo``: the clipped surrogate;
    ``ipa``: REINFORCE weighted by the clipped chunk ratio on non-positive trajectories) and
    whether its ratio was clipped (1) or not (0)."""
    adv = tokens.advantage
    if spec.loss == "ppo":
        clipped_ratio = torch.clamp(ratio, 1.0 - spec.clip_low, 1.0 + spec.clip_high)
        per_token = -torch.minimum(ratio * adv, clipped_ratio * adv)
        clipped = (ratio * adv > clipped_ratio * adv).to(logp.dtype)
    elif spec.loss == "ipa":
        if spec.ratio_level == "chunk":
            chunk_ratio = ratio.detach()
        else:
            chunk_ratio = torch.exp(
                segment_mean((logp - old).detach(), tokens.chunk, tokens.num_chunks)
            )
        is_weight = torch.where(
            tokens.positive, torch.ones_like(chunk_ratio), chunk_ratio.clamp(0.0, 1.0)
        )
        per_token = -is_weight * adv * logp
        clipped = ((~tokens.positive) & (chunk_ratio > 1.0)).to(logp.dtype)
    else:
        raise ValueError(f"unknown loss {spec.loss!r}")
    return per_token, clipped
