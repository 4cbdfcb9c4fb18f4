"""What ``roll sft`` and ``roll train`` share: the run directory, the policy, resume, saving.

A :class:`Session` is opened on a config: it joins the process group (torchrun), seeds every
random generator, builds the tiny model when asked, loads the policy, makes the updater and,
with ``resume``, restores everything from the newest complete checkpoint. The loop of each
trainer calls :meth:`Session.checkpoint` and :meth:`Session.log`; :meth:`Session.finish`
saves the final model as ``RUN_DIR/model`` (a ``save_pretrained`` directory).

With ``run.parallel: fsdp`` under torchrun the policy is sharded when the updater is made
(:meth:`Session.start`): from then on ``Session.lm`` holds only this process's slices, and
checkpoints and the final model are written from whole states every process helps gather,
in the layout a single process writes (so a run can resume in either). Generation needs the
whole policy in each process: ``start(rollout_copy=True)`` keeps a full copy
(:attr:`Session.rollout_lm`) that :meth:`Session.sync_rollout` refreshes after updates.
"""

from __future__ import annotations

import contextlib
import copy
import random
import sys
from functools import partial
from pathlib import Path
from types import TracebackType
from typing import Any

import torch
import yaml

from iflow.errors import ConfigError as IflowConfigError
from iflow.models.directory import check_model_directory, context_window
from roll.algo.losses import LossSpec
from roll.checkpoint import latest_checkpoint, load_checkpoint, save_checkpoint
from roll.config import ModelConfig, SFTConfig, TrainConfig
from roll.demonstrations import iflow_tool_schemas, load_trajectories
from roll.distributed import (
    close_world,
    copy_full_weights,
    full_model_state,
    full_optimizer_state,
    init_world,
    load_full_model_state,
    load_full_optimizer_state,
)
from roll.errors import ConfigError
from roll.lora import apply_lora, is_lora, merged_copy
from roll.metrics import MetricsLogger, TrainProgress
from roll.models import load_policy, resolve_device, resolve_dtype
from roll.update import Updater


def ensure_model(model: ModelConfig) -> Path:
    """The model directory, built first when ``model.tiny`` is set and nothing is there."""
    path = Path(model.path)
    if (path / "config.json").is_file():
        return path
    if model.tiny is None:
        raise ConfigError(
            f"there is no model at {path}; point model.path at a save_pretrained directory, "
            "or set model.tiny: {} to build a tiny one there"
        )
    from iflow.models.tiny import build_tiny_model

    tiny = model.tiny
    build_tiny_model(
        path,
        seed=tiny.seed,
        vocab_size=tiny.vocab_size,
        hidden_size=tiny.hidden_size,
        layers=tiny.layers,
        heads=tiny.heads,
        corpus=corpus_texts(tiny.corpus) if tiny.corpus else (),
    )
    return path


def trained_temperature(config: TrainConfig | SFTConfig) -> float:
    """The temperature whose policy RL trains: the rollouts' (greedy rollouts, 0, train the
    model itself); SFT trains the model itself."""
    if isinstance(config, TrainConfig) and config.rollout.temperature > 0:
        return config.rollout.temperature
    return 1.0


def check_model(config: TrainConfig | SFTConfig) -> int | None:
    """Check the model directory is complete (with a chat template where trajectories or an
    agent's prompts are rendered); the model's context window, when its config names one."""
    chat = isinstance(config, SFTConfig) or config.tasks is not None
    return context_window(_checked(config.model.path, chat))


def _checked(path: str, chat: bool) -> Path:
    try:
        return check_model_directory(path, need_template=chat)
    except IflowConfigError as exc:
        raise ConfigError(str(exc)) from None


def corpus_texts(paths: list[str]) -> list[str]:
    """Texts for a tiny model's tokenizer: every step of the trajectories found at ``paths``
    (contents, call arguments, results) and the iflow agent's prompts in both profiles and
    tool formats."""
    import json

    from iflow.models.parsing import render_tools_prompt
    from iflow.prompts import system_prompt

    prompts: list[str] = []
    for compact in (True, False):
        profile = "compact" if compact else "default"
        prompts.append(system_prompt(workspace="sandbox", cwd="/app", mode="yolo", profile=profile))
        for brief in (True, False):
            prompts.append(render_tools_prompt(iflow_tool_schemas(compact=compact), brief=brief))
    texts: list[str] = []
    trajectories = load_trajectories(paths)
    for trajectory in trajectories:
        for step in trajectory.steps[1:]:  # the system prompt is counted below
            texts.append(step.content)
            texts += [json.dumps(c.arguments, ensure_ascii=False) for c in step.tool_calls]
            texts += [str(r.content) for r in step.tool_results]
    # every episode reads a prompt: weigh them as often as the trajectories hold one
    texts += prompts * max(1, len(trajectories))
    return [t for t in texts if t]


def seed_everything(seed: int) -> None:
    random.seed(seed)
    torch.manual_seed(seed)
    try:
        import numpy

        numpy.random.seed(seed % 2**32)
    except ImportError:  # pragma: no cover - numpy comes with torch's usual installs
        pass


class Session:
    """One training run's shared machinery (see the module docstring)."""

    def __init__(
        self,
        config: TrainConfig | SFTConfig,
        *,
        spec: LossSpec,
        resume: bool = False,
        log: Any = None,
    ) -> None:
        self.config = config
        self.run_dir = Path(config.run_dir)
        self.say = log or (lambda message: print(message, file=sys.stderr))
        device = resolve_device(config.model.device)
        self.world = init_world(device)
        if device.startswith("cuda") and self.world.distributed:
            device = f"cuda:{self.world.local_rank}"
        self.device = device
        self.sharded = self.world.distributed and config.run.parallel == "fsdp"
        """The policy is sharded between the processes once :meth:`start` has run."""
        existing = latest_checkpoint(self.run_dir)
        if existing is not None and not resume:
            raise ConfigError(
                f"{self.run_dir} already holds checkpoints of a run; pass --resume to continue "
                "it, or choose another run_dir"
            )
        seed_everything(config.seed)
        if self.world.is_main:
            ensure_model(config.model)
        self.world.barrier()
        self.context_window = check_model(config)
        """The model's context window (``max_position_embeddings``), when its config has one."""
        self.lm, self.tokenizer = load_policy(config.model.path, device=device, dtype="float32")
        if config.model.lora is not None:
            self.lm = apply_lora(self.lm, config.model.lora, base_path=config.model.path)
        self.rollout_lm: Any = self.lm
        """The module generation samples from: the policy itself, or a full copy of it when
        the policy is sharded (see :meth:`start`)."""
        if config.model.gradient_checkpointing:
            self.lm.gradient_checkpointing_enable()
        amp = resolve_dtype(config.model.dtype, device)
        self.amp_dtype = None if amp == torch.float32 else amp
        self.spec = spec
        self.resume = resume
        self.existing = existing
        self.start_step = 0
        self.state: dict[str, Any] = {}
        self.total_steps = config.run.steps
        self._updater: Updater | None = None
        self.metrics: MetricsLogger | None = None
        self.progress: TrainProgress | None = None

    @property
    def updater(self) -> Updater:
        if self._updater is None:
            raise RuntimeError("call Session.start(total_steps) first")
        return self._updater

    def start(
        self,
        total_steps: int,
        *,
        rollout_copy: bool = False,
        separate_rollout: bool = False,
        rollout_dtype: str | None = None,
    ) -> None:
        """Make the optimiser for ``total_steps`` steps, resume, open the logs.

        With ``rollout_copy`` and a sharded policy (or ``separate_rollout``: generation runs
        while the policy trains, or a ``rollout_dtype`` other than the policy's), a full copy
        is kept first as :attr:`rollout_lm` (eval mode, no gradients, in ``rollout_dtype``),
        for generation.
        """
        config = self.config
        self.total_steps = total_steps
        cast = resolve_dtype(rollout_dtype, self.device) if rollout_dtype else None
        recast = cast is not None and cast != next(self.lm.parameters()).dtype
        if rollout_copy and (self.sharded or separate_rollout or recast):
            self.rollout_lm = copy.deepcopy(self.lm).eval().requires_grad_(False)
            if cast is not None:
                self.rollout_lm.to(cast)
        self._updater = Updater(
            self.lm,
            config.optim,
            total_steps=total_steps,
            spec=self.spec,
            pad_id=int(self.tokenizer.pad_token_id),
            micro_batch_tokens=config.run.micro_batch_tokens,
            max_bad_steps=config.run.max_bad_steps,
            world=self.world,
            device=self.device,
            amp_dtype=self.amp_dtype,
            parallel=config.run.parallel,
            share_prefix=config.run.share_prefix,
            temperature=trained_temperature(config),
        )
        if self.resume:
            self._resume()
        if self.world.is_main:
            self.run_dir.mkdir(parents=True, exist_ok=True)
            (self.run_dir / "config.yaml").write_text(
                yaml.safe_dump(config.model_dump(mode="json"), sort_keys=False), encoding="utf-8"
            )
            self.metrics = MetricsLogger(
                self.run_dir, tensorboard=config.run.tensorboard, resume_from_step=self.start_step
            )
            self.metrics.__enter__()
        self.progress = TrainProgress(
            total_steps, enabled=config.run.progress and self.world.is_main
        )
        self.progress.__enter__()
        self.progress.update(self.start_step, {})

    def _resume(self) -> None:
        """Load the newest checkpoint of the run directory, when there is one, into the
        policy, the optimiser and the updater, and continue from its step."""
        if self.existing is None:
            self.say(f"no checkpoint in {self.run_dir} yet; starting from step 0")
            return
        set_model = set_optimizer = None
        if self.sharded:  # every process reads the whole states and keeps its slices
            set_model = partial(load_full_model_state, self.lm)
            set_optimizer = partial(load_full_optimizer_state, self.updater.optimizer)
        self.state = load_checkpoint(
            self.existing,
            model=self.lm,
            optimizer=self.updater.optimizer,
            scheduler=self.updater.scheduler,
            set_model_state=set_model,
            set_optimizer_state=set_optimizer,
        )
        self.start_step = int(self.state["step"])
        self.updater.load_state(self.state.get("updater", {}))
        self.say(f"resumed {self.run_dir} from step {self.start_step} ({self.existing.name})")

    def __enter__(self) -> Session:
        return self

    def enter(self, manager: Any) -> Any:
        """Enter a context manager for the session's lifetime (closed before the logs)."""
        if not hasattr(self, "_resources"):
            self._resources = contextlib.ExitStack()
        return self._resources.enter_context(manager)

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        resources = getattr(self, "_resources", None)
        if resources is not None:
            resources.close()
        if self.progress is not None:
            self.progress.__exit__(kind, error, tb)
        if self.metrics is not None:
            self.metrics.__exit__(kind, error, tb)
        close_world(self.world)

    def log(self, step: int, metrics: dict[str, float]) -> None:
        """Record ``metrics`` for the (1-based) step and move the progress bar."""
        if self.metrics is not None and step % self.config.run.log_every == 0:
            self.metrics.log(step, metrics)
        if self.progress is not None:
            self.progress.update(step, metrics)

    def sync_rollout(self, backend: Any) -> None:
        """Hand the current policy to the generation ``backend``; a sharded policy is first
        gathered into :attr:`rollout_lm` (a collective: every process calls this)."""
        if self.rollout_lm is not self.lm:
            copy_full_weights(self.lm, self.rollout_lm)
        backend.sync_weights(self.rollout_lm, self.updater.updates)

    def checkpoint(self, step: int, state: dict[str, Any], *, force: bool = False) -> None:
        """Save after ``step`` steps when it is time (every ``run.checkpoint_every``)."""
        if not force and step % self.config.run.checkpoint_every:
            return
        model_state = optimizer_state = None
        if self.sharded:
            model_state = full_model_state(self.lm, self.world)
            optimizer_state = full_optimizer_state(self.updater.optimizer, self.world)
        if self.world.is_main:
            save_checkpoint(
                self.run_dir,
                step,
                model=self.lm,
                tokenizer=self.tokenizer,
                optimizer=self.updater.optimizer,
                scheduler=self.updater.scheduler,
                extra_state={**state, "updater": self.updater.state()},
                keep_last=self.config.run.keep_checkpoints,
                model_state=model_state,
                optimizer_state=optimizer_state,
            )
        self.world.barrier()

    def finish(self) -> Path:
        """Save the trained policy as ``RUN_DIR/model`` and return that path (a LoRA policy
        with its adapters merged in: a plain model to serve)."""
        out = self.run_dir / "model"
        state = full_model_state(self.lm, self.world) if self.sharded else None
        if self.world.is_main:
            from iflow.models.local import quiet_progress

            lm = merged_copy(self.lm) if is_lora(self.lm) else self.lm
            with quiet_progress():
                lm.save_pretrained(out, safe_serialization=True, state_dict=state)
                self.tokenizer.save_pretrained(out)
        self.world.barrier()
        return out
