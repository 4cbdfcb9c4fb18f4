"""The algorithm's config section: credit assignment and loss, filled from a preset by name."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from roll.config.base import _Section
from roll.errors import ConfigError


class AlgorithmConfig(_Section):
    """Credit assignment and loss. Unset fields come from the preset ``name``, filled in
    as the config is read (so a run's saved config shows every value it trained with);
    :meth:`resolved` is what training reads: every field set, nothing optional."""

    name: Literal["grpo", "dr_grpo", "rloo", "reinforce_pp", "gspo", "lite_ppo", "ipa"] = "ipa"
    """The preset (:data:`PRESETS`) that fills every field left unset."""
    advantage: Literal["grpo", "rloo", "reinforce_pp", "lite_ppo", "ipa"] | None = None
    """The advantage estimator (:mod:`roll.algo.advantages`)."""
    scale_by_std: bool | None = None
    """GRPO: divide by the group's reward std."""
    gamma: float | None = Field(default=None, gt=0, le=1)
    """IPA: chunk discount."""
    baseline: Literal["none", "group_mean"] | None = None
    """IPA / REINFORCE++: subtract the group mean reward first."""
    loss: Literal["ppo", "ipa"] | None = None
    """``ppo``: the clipped surrogate; ``ipa``: REINFORCE on positive trajectories, clipped
    ratio weights on the others (:mod:`roll.algo.losses`)."""
    ratio_level: Literal["token", "chunk", "sequence"] | None = None
    """The importance ratio per ``token``, per ``chunk`` or per ``sequence`` (GSPO), the latter
    two as the geometric mean over their tokens."""
    aggregation: (
        Literal[
            "token_mean", "seq_mean_token_mean", "seq_mean_token_sum", "seq_mean_token_sum_norm"
        ]
        | None
    ) = None
    """How the token losses are averaged over a mini-batch: over all tokens (``token_mean``),
    or per sequence and then over sequences (see :func:`roll.algo.batch.set_weights`)."""
    norm_length: int | None = Field(default=None, ge=1)
    """The constant of ``seq_mean_token_sum_norm`` (default: rollout.max_new_tokens)."""
    clip_low: float | None = Field(default=None, ge=0)
    """PPO clips the ratio from below at ``1 - clip_low``."""
    clip_high: float | None = Field(default=None, ge=0)
    """PPO clips the ratio from above at ``1 + clip_high``."""
    mismatch_threshold: float | None = Field(default=None, gt=1)
    """H: mask a chunk whose exp(mean log(pi_old / mu)) exceeds it; ``null`` to never mask."""
    kl_coef: float = Field(default=0.0, ge=0)
    """Weight of the KL penalty (k3 per token) against the initial policy; 0: none."""
    entropy_coef: float = Field(default=0.0)
    """Weight of the entropy bonus (subtracted from the loss); 0: none."""

    @model_validator(mode="before")
    @classmethod
    def _fill(cls, data: Any) -> Any:
        """The preset's values for the keys the config leaves out (a key given as null stays
        null: ``mismatch_threshold: null`` never masks)."""
        if not isinstance(data, dict):
            return data
        preset = PRESETS.get(data.get("name", "ipa"), {})  # an unknown name: the field says
        return {**_DEFAULTS, **preset, **data}

    def resolved(self, max_new_tokens: int) -> Algorithm:
        """The algorithm as training runs it: every field set (``norm_length`` defaults to
        ``max_new_tokens``), checked once here instead of at each use."""
        values = self.model_dump(exclude={"name"})
        values["norm_length"] = self.norm_length or max_new_tokens
        try:
            return Algorithm(**values)
        except ValidationError as exc:
            key = ".".join(str(part) for part in exc.errors()[0]["loc"])
            raise ConfigError(
                f"algorithm.{key} is null and preset {self.name!r} has no value for it; "
                "give it a value or leave it out"
            ) from None


class Algorithm(BaseModel):
    """An :class:`AlgorithmConfig` with its preset resolved: what training reads, every
    field set (each one's meaning is the config's)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    advantage: Literal["grpo", "rloo", "reinforce_pp", "lite_ppo", "ipa"]
    """See :attr:`AlgorithmConfig.advantage`."""
    scale_by_std: bool
    """See :attr:`AlgorithmConfig.scale_by_std`."""
    gamma: float
    """See :attr:`AlgorithmConfig.gamma`."""
    baseline: Literal["none", "group_mean"]
    """See :attr:`AlgorithmConfig.baseline`."""
    loss: Literal["ppo", "ipa"]
    """See :attr:`AlgorithmConfig.loss`."""
    ratio_level: Literal["token", "chunk", "sequence"]
    """See :attr:`AlgorithmConfig.ratio_level`."""
    aggregation: Literal[
        "token_mean", "seq_mean_token_mean", "seq_mean_token_sum", "seq_mean_token_sum_norm"
    ]
    """See :attr:`AlgorithmConfig.aggregation`."""
    norm_length: int
    """See :attr:`AlgorithmConfig.norm_length` (here: never unset)."""
    clip_low: float
    """See :attr:`AlgorithmConfig.clip_low`."""
    clip_high: float
    """See :attr:`AlgorithmConfig.clip_high`."""
    mismatch_threshold: float | None
    """See :attr:`AlgorithmConfig.mismatch_threshold` (None: never mask)."""
    kl_coef: float
    """See :attr:`AlgorithmConfig.kl_coef`."""
    entropy_coef: float
    """See :attr:`AlgorithmConfig.entropy_coef`."""


PRESETS: dict[str, dict[str, Any]] = {
    "grpo": {"advantage": "grpo", "scale_by_std": True, "loss": "ppo", "ratio_level": "token",
             "aggregation": "seq_mean_token_mean", "clip_low": 0.2, "clip_high": 0.2},
    "dr_grpo": {"advantage": "grpo", "scale_by_std": False, "loss": "ppo", "ratio_level": "token",
                "aggregation": "seq_mean_token_sum_norm", "clip_low": 0.2, "clip_high": 0.2},
    "rloo": {"advantage": "rloo", "loss": "ppo", "ratio_level": "token",
             "aggregation": "token_mean", "clip_low": 0.2, "clip_high": 0.2},
    "reinforce_pp": {"advantage": "reinforce_pp", "baseline": "none", "loss": "ppo",
                     "ratio_level": "token", "aggregation": "token_mean", "clip_low": 0.2,
                     "clip_high": 0.2},
    "gspo": {"advantage": "grpo", "scale_by_std": True, "loss": "ppo", "ratio_level": "sequence",
             "aggregation": "seq_mean_token_mean", "clip_low": 3e-4, "clip_high": 4e-4},
    "lite_ppo": {"advantage": "lite_ppo", "loss": "ppo", "ratio_level": "token",
                 "aggregation": "token_mean", "clip_low": 0.2, "clip_high": 0.2},
    "ipa": {"advantage": "ipa", "gamma": 0.95, "baseline": "none", "loss": "ipa",
            "ratio_level": "chunk", "aggregation": "token_mean", "clip_low": 0.2,
            "clip_high": 0.2, "mismatch_threshold": 2.0},
}  # fmt: skip
"""Each algorithm as a filling of the one abstraction."""

_DEFAULTS = {"scale_by_std": True, "gamma": 1.0, "baseline": "none"}
