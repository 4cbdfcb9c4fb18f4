"""roll's algorithms: advantage estimators, policy losses and the batch they work on."""

from roll.algo.advantages import (
    Estimator,
    chunk_advantages,
    grpo,
    ipa_returns,
    lite_ppo,
    reinforce_pp,
    rloo,
)
from roll.algo.losses import LossSpec, ScoredTokens, policy_loss, segment_mean

__all__ = [
    "Estimator",
    "LossSpec",
    "ScoredTokens",
    "chunk_advantages",
    "grpo",
    "ipa_returns",
    "lite_ppo",
    "policy_loss",
    "reinforce_pp",
    "rloo",
    "segment_mean",
]
