"""Training configurations: validated models, read from YAML with ``key=value`` overrides.

Every section forbids unknown keys; a mistyped key is one sentence naming it and the
closest valid key (``algorithm.clip_hgh: did you mean 'clip_high'?``). ``algorithm.name``
picks a preset (GRPO, Dr. GRPO, RLOO, REINFORCE++, GSPO, IPA); any field set explicitly
overrides the preset.
"""

from __future__ import annotations

from roll.config.algorithm import PRESETS, Algorithm, AlgorithmConfig
from roll.config.commands import SFTConfig, TrainConfig
from roll.config.episodes import AgentConfig, EnvConfig, ResampleConfig, TasksConfig
from roll.config.loading import apply_overrides, load_config
from roll.config.model import LoraConfig, ModelConfig, TinyModel
from roll.config.rollout import (
    LaunchConfig,
    RayConfig,
    RolloutConfig,
    ServerConfig,
    TailBatchingConfig,
)
from roll.config.run import OptimConfig, RunConfig

__all__ = [
    "PRESETS",
    "AgentConfig",
    "Algorithm",
    "AlgorithmConfig",
    "EnvConfig",
    "LaunchConfig",
    "LoraConfig",
    "ModelConfig",
    "OptimConfig",
    "RayConfig",
    "ResampleConfig",
    "RolloutConfig",
    "RunConfig",
    "SFTConfig",
    "ServerConfig",
    "TailBatchingConfig",
    "TasksConfig",
    "TinyModel",
    "TrainConfig",
    "apply_overrides",
    "load_config",
]
