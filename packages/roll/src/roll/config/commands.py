"""The configs of roll's commands, each made of the sections: ``roll train`` and ``roll sft``,
with the checks that span sections."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from roll.config.algorithm import AlgorithmConfig
from roll.config.base import _Section
from roll.config.episodes import EnvConfig, ResampleConfig, TasksConfig
from roll.config.model import ModelConfig
from roll.config.rollout import RayConfig, RolloutConfig
from roll.config.run import OptimConfig, RunConfig


class TrainConfig(_Section):
    """``roll train``: RL on environment episodes."""

    run_dir: str = "runs/train"
    """Directory of the run: its config, checkpoints, logs and final ``model/``."""
    seed: int = 0
    """Seeds torch, ``random`` and numpy; each step's sampling seeds are drawn from it."""
    model: ModelConfig
    """The policy."""
    optim: OptimConfig = Field(default_factory=OptimConfig)
    """AdamW and its schedule."""
    run: RunConfig = Field(default_factory=RunConfig)
    """The loop, checkpoints and logs."""
    algorithm: AlgorithmConfig = Field(default_factory=AlgorithmConfig)
    """Credit assignment and loss (a preset by name)."""
    env: EnvConfig = Field(default_factory=EnvConfig)
    """The in-process environment episodes come from (unless ``tasks`` is set)."""
    tasks: TasksConfig | None = None
    """Set to train the iflow agent on tasks in sandboxes (``env`` is then not used)."""
    rollout: RolloutConfig = Field(default_factory=RolloutConfig)
    """Sampling."""
    updates_per_batch: int = Field(default=1, ge=1)
    """Optimiser updates per rollout batch (the batch split in this many mini-batches);
    above 1 the old log-probs come from an extra forward pass before the first update."""
    reference: bool | None = None
    """Keep a frozen copy of the initial policy for the KL term (default: when kl_coef > 0)."""
    resample: ResampleConfig | None = None
    """Start groups from expert trajectories (see :class:`ResampleConfig`); None: from the
    start."""
    ray: RayConfig | None = None
    """Run environments or agentic episodes in Ray actors (see :class:`RayConfig`)."""

    @model_validator(mode="after")
    def _check_server(self) -> TrainConfig:
        if self.rollout.backend == "server" and self.rollout.server is None:
            raise ValueError(
                "rollout.backend: server needs rollout.server.url (the inference server's "
                "OpenAI-compatible base URL) or rollout.server.launch: {} (a vLLM server roll "
                "starts)"
            )
        return self

    @model_validator(mode="after")
    def _check_schedule(self) -> TrainConfig:
        if self.rollout.schedule != "tail_batching":
            return self
        if self.tasks is not None and self.tasks.max_staleness > 0:
            raise ValueError(
                "rollout.schedule: tail_batching is synchronous, it does not mix with "
                "asynchronous rollouts; set tasks.max_staleness: 0 or rollout.schedule: plain"
            )
        if self.resample is not None:
            raise ValueError(
                "rollout.schedule: tail_batching does not start groups from expert prefixes; "
                "remove the resample: section or set rollout.schedule: plain"
            )
        return self

    @model_validator(mode="after")
    def _check_resample(self) -> TrainConfig:
        if self.resample is None:
            return self
        if self.tasks is None and self.resample.self_experts:
            raise ValueError(
                "resample.self_experts is for tasks: (sandboxes that can be forked); "
                "in-process environments replay experts recorded with their seeds"
            )
        if self.resample.experts is None and not (self.resample.self_experts and self.tasks):
            raise ValueError(
                "resample: needs experts: (a JSONL of expert trajectories), or, with tasks:, "
                "self_experts: true (the policy's own successes become the experts)"
            )
        if self.tasks is None:
            if self.resample.mode == "start":
                raise ValueError(
                    "resample.mode: start imitates whole expert trajectories rendered as the "
                    "iflow agent sees a task; it needs tasks: (or choose sequential or parallel)"
                )
            return self
        if self.tasks.agent.transport == "gateway":
            raise ValueError(
                "resample: with tasks: continues the in-process iflow agent from an expert's "
                "turns; an agent behind the gateway cannot be given them (set tasks.agent."
                "transport: in-process or remove the resample: section)"
            )
        if self.ray is not None:
            raise ValueError(
                "resample: with tasks: runs its forked groups without Ray rollout workers; "
                "remove the ray: section or the resample: section"
            )
        return self

    @model_validator(mode="after")
    def _check_ray(self) -> TrainConfig:
        if (
            self.ray is not None
            and self.tasks is not None
            and self.tasks.agent.transport == "gateway"
        ):
            raise ValueError(
                "with ray: the episodes run in Ray actors, which do not serve the policy "
                "gateway yet; remove the ray: section or use tasks.agent: iflow in-process"
            )
        if self.ray is not None and self.tasks is not None and self.rollout.backend == "vllm":
            raise ValueError(
                "with ray: and tasks: the policy samples in a Ray actor (rollout.backend: hf) "
                "or in an inference server (rollout.backend: server), not in vLLM inside the "
                "trainer; set rollout.backend: hf or server, or remove the ray: section"
            )
        return self


class SFTConfig(_Section):
    """``roll sft``: supervised fine-tuning on trajectories, per-turn masks applied."""

    run_dir: str = "runs/sft"
    """Directory of the run: its config, checkpoints, logs and final ``model/``."""
    seed: int = 0
    """Seeds torch, ``random`` and numpy, and the order of the data in each epoch."""
    model: ModelConfig
    """The model to fine-tune."""
    optim: OptimConfig = Field(default_factory=lambda: OptimConfig(lr=1e-4))
    """AdamW and its schedule (learning rate 1e-4 by default)."""
    run: RunConfig = Field(default_factory=RunConfig)
    """The loop, checkpoints and logs."""
    data: list[str]
    """Trajectory JSONL files or dataset directories (every ``*.jsonl`` under ``trajectories/``)."""
    batch_size: int = Field(default=8, ge=1)
    """Trajectories per optimiser step."""
    epochs: float | None = Field(default=None, gt=0)
    """Passes over the data; sets ``run.steps`` when given."""
    max_seq_len: int = Field(default=4096, ge=16)
    """Longer trajectories are cut at an assistant-turn boundary (their tail dropped)."""
    tools: Literal["iflow", "iflow-compact", "iflow-brief", "none"] = "iflow"
    """The tool descriptions in the system prompt: the iflow agent's (as its local model
    renders them); ``iflow-compact``: the compact profile's (its system prompt replaces the
    recorded one), as agentic RL with ``tasks.prompt_profile: compact`` sees them;
    ``iflow-brief``: the compact profile with each tool in one line, as with
    ``tasks.tool_format: brief`` (tiny models); or none."""
    only_successful: bool = True
    """Train only on trajectories with a positive reward (or no reward recorded)."""
