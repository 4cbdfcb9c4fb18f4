"""Where a training step's episodes come from: one interface over the rollout sources.

``roll train`` asks a :class:`RolloutSource` for each step's trajectories and pauses it while
the sampling weights change. Which source — in-process environments (:class:`EnvRollouts`,
their environments in this process or in Ray env workers), or agentic tasks in rock sandboxes
(:class:`~roll.agentic.collector.TaskRollouts`, its episodes in this process or in Ray rollout
workers) — is decided once, from the config, by :func:`open_source`; so is the generation
backend (:func:`make_backend`).
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any, Protocol, Self

from ale.trajectory import Trajectory
from roll.agentic.collector import TaskRollouts
from roll.agentic.ray_policy import RayPolicyBackend
from roll.agentic.ray_workers import RayTaskRollouts
from roll.config import TrainConfig
from roll.distributed import World
from roll.envs.base import Env
from roll.envs.registry import make_env
from roll.errors import ConfigError
from roll.generation.base import GenerationBackend, SamplingParams
from roll.generation.hf import HFBackend
from roll.generation.server import ServerBackend
from roll.generation.vllm import VLLMBackend
from roll.generation.vllm_server import VLLMServer
from roll.ray_engine import EnvWorkers, RemoteEnvEngine
from roll.resample import Experts
from roll.rollout import EpisodeRequest, RolloutEngine
from roll.schedule import Prompt, Round, TailBatching
from roll.session import Session


class RolloutSource(Protocol):
    """A stream of scored episodes for training (a context manager)."""

    def __enter__(self) -> Self: ...

    def __exit__(self, *exc: object) -> None: ...

    def take(self, version: int) -> list[Trajectory]:
        """This process's trajectories of the next step; ``version`` is the current policy's."""
        ...

    def metrics(self) -> dict[str, float]:
        """The source's own counters, logged with each step."""
        ...

    def paused(self) -> AbstractContextManager[Any]:
        """Nothing is generated inside (the trainer hands over new weights)."""
        ...

    def state(self) -> dict[str, Any]:
        """What a checkpoint keeps of the source (tail batching's deferred prompts)."""
        ...

    def load_state(self, state: dict[str, Any]) -> None:
        """Continue from a checkpoint's :meth:`state`."""
        ...


def derive_seed(*parts: object) -> int:
    """A 31-bit seed from any parts (stable across runs and Python versions)."""
    digest = hashlib.sha256(":".join(str(p) for p in parts).encode()).digest()
    return int.from_bytes(digest[:4], "big") >> 1


def make_backend(config: TrainConfig, session: Session) -> GenerationBackend:
    if config.ray is not None and config.tasks is not None:  # Ray: a generation actor
        server = _server_backend(config, session) if config.rollout.backend == "server" else None
        return RayPolicyBackend.start(session.rollout_lm, session.tokenizer, config.ray, server)
    if config.rollout.backend == "vllm":
        return VLLMBackend(config.model.path, seed=config.seed)
    if config.rollout.backend == "server":
        return _server_backend(config, session)
    return HFBackend(session.rollout_lm, session.tokenizer)


def _server_backend(config: TrainConfig, session: Session) -> ServerBackend:
    """The server backend; with ``rollout.server.launch`` it first starts the vLLM server,
    which the session stops when the run ends (however it ends)."""
    server = config.rollout.server
    assert server is not None  # the config requires it with backend: server
    if server.launch is None:
        assert server.url is not None
        return ServerBackend(
            server.url,
            model=server.model,
            api_key=server.api_key,
            reload=server.reload or "none",
            weights_dir=server.weights_dir,
        )
    launch = server.launch
    dtype = launch.dtype or config.rollout.dtype or config.model.dtype
    managed = session.enter(
        VLLMServer.launch(
            config.model.path,
            python=launch.python,
            dtype=dtype,
            threads=launch.threads,
            max_model_len=launch.max_model_len or config.rollout.max_seq_len,
            max_num_seqs=launch.max_num_seqs,
            kv_cache_gib=launch.kv_cache_gib,
            enforce_eager=launch.enforce_eager,
            chunked_prefill=launch.chunked_prefill,
            seed=config.seed,
            port=launch.port,
            log_path=session.run_dir / "vllm-server.log",
            start_timeout=launch.start_timeout,
            extra_args=launch.extra_args,
        )
    )
    return ServerBackend(
        managed.url,
        model=server.model,
        reload=server.reload or "vllm",
        weights_dir=server.weights_dir or session.run_dir / "server-weights",
        weights_dtype=None if dtype == "auto" else dtype,
        server=managed,
    )


def episode_requests(
    config: TrainConfig,
    step: int,
    experts: Experts | None,
    make: Callable[[], Env] | None = None,
) -> list[EpisodeRequest]:
    """The episodes of ``step``: ``groups_per_step`` groups of ``group_size``; ``make``
    gives each its environment (default: a new in-process one of ``env:``)."""
    env_cfg, rollout = config.env, config.rollout

    def new_env() -> Env:
        return make() if make is not None else make_env(env_cfg.name, **env_cfg.kwargs)

    requests: list[EpisodeRequest] = []
    for g in range(rollout.groups_per_step):
        if experts is None:
            seed = derive_seed(env_cfg.seed, step, g)
            for _ in range(rollout.group_size):
                requests.append(
                    EpisodeRequest(
                        env=new_env(),
                        seed=seed,
                        group_id=f"s{step}-g{g}",
                    )
                )
            continue
        index = (step * rollout.groups_per_step + g) % len(experts.trajectories)
        for anchor in experts.anchors(index):
            experts.group_expert[f"s{step}-g{g}-e{index}-a{anchor}"] = index
            for _ in range(rollout.group_size):
                requests.append(
                    EpisodeRequest(
                        env=new_env(),
                        seed=experts.seeds[index],
                        group_id=f"s{step}-g{g}-e{index}-a{anchor}",
                        prefix=experts.trajectories[index],
                        anchor=anchor,
                    )
                )
    return requests


class EnvRollouts:
    """Episodes of the in-process environments of ``env:``, a step at a time: each step's
    groups are drawn from (seed, step) and run in lockstep by :class:`RolloutEngine`; with
    ``workers`` the environments live in Ray env worker actors."""

    def __init__(
        self,
        config: TrainConfig,
        backend: GenerationBackend,
        tokenizer: Any,
        world: World,
        *,
        start_step: int,
        experts: Experts | None,
        workers: EnvWorkers | None = None,
    ) -> None:
        self.config = config
        self.backend = backend
        self.tokenizer = tokenizer
        self.world = world
        self.step = start_step
        self.experts = experts
        self.workers = workers

    def __enter__(self) -> Self:
        if self.workers is not None:
            self.workers.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.workers is not None:
            self.workers.__exit__(*exc)

    def take(self, version: int) -> list[Trajectory]:
        step, rollout = self.step, self.config.rollout
        self.step += 1
        params = SamplingParams(
            max_new_tokens=rollout.max_new_tokens,
            temperature=rollout.temperature,
            top_p=rollout.top_p,
            seed=derive_seed(self.config.seed, "sample", step, self.world.rank),
        )
        engine: RolloutEngine
        if self.workers is None:
            requests = episode_requests(self.config, step, self.experts)
            engine = RolloutEngine(
                self.backend, self.tokenizer, params, max_seq_len=rollout.max_seq_len
            )
        else:
            requests = episode_requests(self.config, step, self.experts, make=self.workers.make)
            engine = RemoteEnvEngine(
                self.workers, self.backend, self.tokenizer, params, max_seq_len=rollout.max_seq_len
            )
        return engine.run(self.world.shard(requests))

    def _engine(self, step: int) -> RolloutEngine:
        rollout = self.config.rollout
        params = SamplingParams(
            max_new_tokens=rollout.max_new_tokens,
            temperature=rollout.temperature,
            top_p=rollout.top_p,
            seed=derive_seed(self.config.seed, "sample", step, self.world.rank),
        )
        if self.workers is None:
            return RolloutEngine(
                self.backend, self.tokenizer, params, max_seq_len=rollout.max_seq_len
            )
        return RemoteEnvEngine(
            self.workers, self.backend, self.tokenizer, params, max_seq_len=rollout.max_seq_len
        )

    def fresh(self, step: int, indices: range) -> list[Prompt]:
        """Tail batching's new prompts: environment seeds drawn from (seed, step, index)."""
        seed = self.config.env.seed
        return [Prompt(key=f"s{step}-g{g}", seed=derive_seed(seed, step, g), step=step)
                for g in indices]  # fmt: skip

    def run_round(self, step: int, prompts: list[Prompt], keep: int | None) -> Round:
        """A group of each prompt, in lockstep (see :meth:`RolloutEngine.run`)."""
        env_cfg, size = self.config.env, self.config.rollout.group_size
        make = self.workers.make if self.workers is not None else None
        labels = [p.key if p.step == step else f"s{step}-{p.key}" for p in prompts]
        requests = [
            EpisodeRequest(
                env=make() if make is not None else make_env(env_cfg.name, **env_cfg.kwargs),
                seed=int(prompt.seed or 0),
                group_id=label,
            )
            for prompt, label in zip(prompts, labels, strict=True)
            for _ in range(size)
        ]
        trajectories = self._engine(step).run(requests, keep_groups=keep)
        kept = {t.group_id for t in trajectories}
        return Round(
            groups=[[t for t in trajectories if t.group_id == label] for label in labels
                    if label in kept],
            cut=[p for p, label in zip(prompts, labels, strict=True) if label not in kept],
        )  # fmt: skip

    def metrics(self) -> dict[str, float]:
        return {}

    def paused(self) -> AbstractContextManager[Any]:
        return contextlib.nullcontext()

    def state(self) -> dict[str, Any]:
        return {}

    def load_state(self, state: dict[str, Any]) -> None:
        pass


def _open_source(
    config: TrainConfig, session: Session, backend: GenerationBackend, experts: Experts | None
) -> EnvRollouts | TaskRollouts:
    world = session.world
    if config.tasks is None:
        workers = EnvWorkers(config.ray, config.env) if config.ray is not None else None
        return EnvRollouts(
            config,
            backend,
            session.tokenizer,
            world,
            start_step=session.start_step,
            experts=experts,
            workers=workers,
        )
    rollout = config.rollout
    args: dict[str, Any] = {
        "seed": derive_seed(config.seed, "tasks", world.rank),
        "backend": backend,
        "params": SamplingParams(
            max_new_tokens=rollout.max_new_tokens,
            temperature=rollout.temperature,
            top_p=rollout.top_p,
            seed=derive_seed(config.seed, "sample", world.rank),
        ),
        "group_size": rollout.group_size,
        "groups_per_step": len(world.shard(list(range(rollout.groups_per_step)))),
        "max_staleness": config.tasks.max_staleness,
        "refill_uniform": rollout.drop_uniform_groups,
    }
    if config.ray is not None:  # episodes in Ray rollout workers
        return RayTaskRollouts(config.tasks, session.tokenizer, ray_config=config.ray, **args)
    return TaskRollouts(config.tasks, session.tokenizer, experts=experts, **args)


def open_source(
    config: TrainConfig, session: Session, backend: GenerationBackend, experts: Experts | None
) -> RolloutSource:
    """The rollout source ``config`` asks for (not yet entered), in its schedule."""
    source = _open_source(config, session, backend, experts)
    if config.rollout.schedule == "plain":
        return source
    if session.world.size > 1:
        raise ConfigError(
            "rollout.schedule: tail_batching runs in one process (its short rounds decide "
            "which groups a step trains on); run without torchrun or set rollout.schedule: plain"
        )
    assert isinstance(source, EnvRollouts | TaskRollouts)
    return TailBatching(
        source,
        config.rollout.tail_batching,
        groups_per_step=config.rollout.groups_per_step,
        start_step=session.start_step,
    )
