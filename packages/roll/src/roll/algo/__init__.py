"""roll's algorithms: advantage estimators, policy losses and the batch they work on."""

from roll.algo.advantages import chunk_advantages, grpo, ipa_returns, reinforce_pp, rloo
from roll.algo.losses import LossSpec, ScoredTokens, policy_loss, segment_mean

__all__ = [
    "LossSpec",
    "ScoredTokens",
    "chunk_advantages",
    "grpo",
    "ipa_returns",
    "policy_loss",
    "reinforce_pp",
    "rloo",
    "segment_mean",
]
