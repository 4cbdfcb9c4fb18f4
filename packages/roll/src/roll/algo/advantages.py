"""Advantage estimators: from episode rewards to one advantage per interaction chunk.

Every estimator returns, for each trajectory, a list with one advantage per chunk of that
trajectory (its policy-generated runs, see :mod:`ale.chunking`). The outcome estimators give
all chunks of a trajectory the same value; IPA discounts the reward back over the chunks.
The trainer broadcasts a chunk's advantage to each of its tokens.

Formulas (``R_i`` the reward of trajectory ``i``, ``g`` its group of ``G`` trajectories):

- GRPO: ``A_i = (R_i - mean_g R) / (std_g R + eps)``, or ``R_i - mean_g R`` without std scaling
  (Dr. GRPO). ``std`` is the unbiased sample standard deviation (``G - 1`` in the
  denominator); a group of one has std 0.
- RLOO: ``A_i = R_i - mean_{j in g, j != i} R_j`` (leave-one-out baseline); 0 for a group of one.
- REINFORCE++: ``A_i = (R_i - mu) / (sigma + eps)`` with ``mu`` and ``sigma`` the mean and
  (population) standard deviation of the rewards over every policy token of the batch, so a
  trajectory counts as many times as it has policy tokens (whitening over the global batch of
  tokens, as the method prescribes); with ``group_baseline`` the group mean is subtracted first.
- IPA: chunk return ``G_k = gamma^(K-k) * R`` for chunks ``k = 1..K``: the last chunk gets the
  reward, each chunk before it one more factor of ``gamma``. With ``baseline="group_mean"`` the
  group's mean reward is subtracted from ``R`` first.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Hashable, Sequence
from typing import Literal

EPS = 1e-6
"""Added to standard deviations before dividing."""


def _groups(group_ids: Sequence[Hashable]) -> dict[Hashable, list[int]]:
    members: dict[Hashable, list[int]] = defaultdict(list)
    for index, group in enumerate(group_ids):
        members[group].append(index)
    return members


def _check(rewards: Sequence[float], *others: Sequence[object]) -> None:
    for other in others:
        if len(other) != len(rewards):
            raise ValueError(
                f"got {len(rewards)} rewards but {len(other)} entries in a parallel list; "
                "give one entry per trajectory"
            )
    for index, reward in enumerate(rewards):
        if not math.isfinite(reward):
            raise ValueError(
                f"reward {index} is {reward}; rewards must be finite numbers (check the verifier)"
            )


def grpo(
    rewards: Sequence[float],
    group_ids: Sequence[Hashable],
    *,
    scale_by_std: bool = True,
) -> list[float]:
    """Group-normalised outcome advantage per trajectory."""
    _check(rewards, group_ids)
    out = [0.0] * len(rewards)
    for members in _groups(group_ids).values():
        values = [rewards[i] for i in members]
        mean = sum(values) / len(values)
        if scale_by_std:
            if len(values) > 1:
                var = sum((v - mean) ** 2 for v in values) / (len(values) - 1)
            else:
                var = 0.0
            denom = math.sqrt(var) + EPS
        else:
            denom = 1.0
        for i in members:
            out[i] = (rewards[i] - mean) / denom
    return out


def rloo(rewards: Sequence[float], group_ids: Sequence[Hashable]) -> list[float]:
    """Leave-one-out advantage per trajectory."""
    _check(rewards, group_ids)
    out = [0.0] * len(rewards)
    for members in _groups(group_ids).values():
        if len(members) < 2:
            continue
        total = sum(rewards[i] for i in members)
        for i in members:
            out[i] = rewards[i] - (total - rewards[i]) / (len(members) - 1)
    return out


def reinforce_pp(
    rewards: Sequence[float],
    token_counts: Sequence[int],
    group_ids: Sequence[Hashable] | None = None,
    *,
    group_baseline: bool = False,
) -> list[float]:
    """Batch-normalised (token-weighted) advantage per trajectory."""
    _check(rewards, token_counts)
    values = list(rewards)
    if group_baseline:
        if group_ids is None:
            raise ValueError("group_baseline needs group_ids")
        _check(rewards, group_ids)
        for members in _groups(group_ids).values():
            mean = sum(rewards[i] for i in members) / len(members)
            for i in members:
                values[i] = rewards[i] - mean
    total = sum(token_counts)
    if total == 0:
        return [0.0] * len(values)
    mu = sum(v * n for v, n in zip(values, token_counts, strict=True)) / total
    var = sum(n * (v - mu) ** 2 for v, n in zip(values, token_counts, strict=True)) / total
    sigma = math.sqrt(var)
    return [(v - mu) / (sigma + EPS) for v in values]


def lite_ppo(rewards: Sequence[float], group_ids: Sequence[Hashable]) -> list[float]:
    """Lite PPO's advantage ("Tricks or Traps?", arXiv 2508.08221): the reward minus its
    group's mean, divided by the standard deviation of the whole batch's rewards (more
    robust than a group's own when a group's rewards are all nearly the same)."""
    _check(rewards, group_ids)
    n = len(rewards)
    if n == 0:
        return []
    mean_all = sum(rewards) / n
    var = sum((r - mean_all) ** 2 for r in rewards) / (n - 1) if n > 1 else 0.0
    denom = math.sqrt(var) + EPS
    out = [0.0] * n
    for members in _groups(group_ids).values():
        mean = sum(rewards[i] for i in members) / len(members)
        for i in members:
            out[i] = (rewards[i] - mean) / denom
    return out


def ipa_returns(reward: float, num_chunks: int, gamma: float) -> list[float]:
    """``G_k = gamma^(K-k) * R`` for the ``K`` chunks of one trajectory, first chunk first."""
    return [reward * gamma ** (num_chunks - k) for k in range(1, num_chunks + 1)]


Estimator = Literal["grpo", "rloo", "reinforce_pp", "lite_ppo", "ipa"]
"""The advantage estimators, by the name ``algorithm.advantage`` takes."""


def chunk_advantages(
    estimator: Estimator,
    rewards: Sequence[float],
    group_ids: Sequence[Hashable],
    num_chunks: Sequence[int],
    token_counts: Sequence[int],
    *,
    scale_by_std: bool = True,
    gamma: float = 1.0,
    baseline: Literal["none", "group_mean"] = "none",
) -> list[list[float]]:
    """One advantage per chunk of each trajectory, for the named estimator.

    ``baseline`` applies to ``ipa`` (subtract the group mean before discounting) and to
    ``reinforce_pp`` (``group_mean`` subtracts the group mean before whitening).
    """
    _check(rewards, group_ids, num_chunks, token_counts)
    if estimator == "ipa":
        values = list(rewards)
        if baseline == "group_mean":
            for members in _groups(group_ids).values():
                mean = sum(rewards[i] for i in members) / len(members)
                for i in members:
                    values[i] = rewards[i] - mean
        return [ipa_returns(v, k, gamma) for v, k in zip(values, num_chunks, strict=True)]
    if estimator == "grpo":
        per_traj = grpo(rewards, group_ids, scale_by_std=scale_by_std)
    elif estimator == "rloo":
        per_traj = rloo(rewards, group_ids)
    elif estimator == "lite_ppo":
        per_traj = lite_ppo(rewards, group_ids)
    elif estimator == "reinforce_pp":
        per_traj = reinforce_pp(
            rewards, token_counts, group_ids, group_baseline=baseline == "group_mean"
        )
    else:
        raise ValueError(f"unknown advantage estimator {estimator!r}")
    return [[a] * k for a, k in zip(per_traj, num_chunks, strict=True)]
