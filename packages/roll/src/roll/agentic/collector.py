"""`roll train` on tasks: each step's groups are agentic episodes in rock sandboxes.

With ``tasks:`` in the config, a step draws ``rollout.groups_per_step`` tasks of the dataset
(seeded by (seed, step)), runs each as a group of ``rollout.group_size`` concurrent episodes
of the iflow agent with the policy (:mod:`roll.agentic.episodes`), their generation requests
batched by one :class:`~roll.agentic.policy.GenerationQueue`, and hands the scored
trajectories to the trainer. Sandboxes come from a warm pool of a private ``rock serve``
started for the run (or the daemon at ``tasks.url``), from the synthesis pool image.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import uuid
from pathlib import Path
from typing import Any

from ale.task import Task, load_task
from ale.trajectory import Trajectory
from roll.agentic.episodes import AgenticEpisodes, AgentSettings, EpisodeCounts
from roll.agentic.policy import GenerationQueue
from roll.config import TasksConfig
from roll.errors import ConfigError
from roll.generation.base import GenerationBackend, SamplingParams


def load_tasks(dataset: str | Path) -> list[Task]:
    """The tasks of a dataset directory (``DIR/tasks/*`` or ``DIR/*``), sorted by id."""
    root = Path(dataset)
    base = root / "tasks" if (root / "tasks").is_dir() else root
    if not base.is_dir():
        raise ConfigError(f"there is no task directory {base}; set tasks.dataset to a dataset")
    tasks = [load_task(d) for d in sorted(base.iterdir()) if d.is_dir()]
    if not tasks:
        raise ConfigError(f"{base} holds no tasks; set tasks.dataset to a dataset of tasks")
    return tasks


class TaskRollouts:
    """The rollout source of ``roll train`` when ``tasks:`` is set (a context manager)."""

    def __init__(self, config: TasksConfig, tokenizer: Any, *, seed: int) -> None:
        self.config = config
        self.tokenizer = tokenizer
        self.seed = seed
        self.tasks = load_tasks(config.dataset)
        self.counts = EpisodeCounts()
        self._stack = contextlib.ExitStack()
        self.runner: Any = None

    def __enter__(self) -> TaskRollouts:
        import docker

        from rock.client import Client
        from rock.synth.image import ensure_pool_image
        from rock.synth.runner import DaemonPool, PoolRunner
        from rock.synth.wiring import private_daemon

        ensure_pool_image(docker.from_env())
        if self.config.url:
            client = self._stack.enter_context(Client(self.config.url))
        else:
            client = self._stack.enter_context(private_daemon())
        source = DaemonPool(client, f"roll-{uuid.uuid4().hex[:6]}", size=self.config.pool_size)
        self._stack.callback(source.close)
        source.wait_ready()
        self.runner = PoolRunner(source)
        return self

    def __exit__(self, *exc: object) -> None:
        self._stack.close()

    def choose(self, step: int, groups: int) -> list[Task]:
        """The tasks of ``step``'s groups (without repeats while the dataset lasts)."""
        rng = random.Random(f"{self.seed}:tasks:{step}")
        if groups <= len(self.tasks):
            return rng.sample(self.tasks, groups)
        return [rng.choice(self.tasks) for _ in range(groups)]

    def collect(
        self,
        backend: GenerationBackend,
        params: SamplingParams,
        tasks: list[Task],
        group_size: int,
        step: int,
    ) -> list[Trajectory]:
        """Run a group of ``group_size`` episodes per task; the scored trajectories."""
        return asyncio.run(self._collect(backend, params, tasks, group_size, step))

    async def _collect(
        self,
        backend: GenerationBackend,
        params: SamplingParams,
        tasks: list[Task],
        group_size: int,
        step: int,
    ) -> list[Trajectory]:
        agent = AgentSettings(
            prompt_profile=self.config.prompt_profile,
            max_turns=self.config.max_turns,
            context_limit=self.config.context_limit,
            max_new_tokens=params.max_new_tokens,
        )
        seed = params.seed or 0
        async with GenerationQueue(backend, params, seed=seed) as queue:
            episodes = AgenticEpisodes(
                self.runner,
                queue,
                self.tokenizer,
                agent=agent,
                max_attempts=self.config.max_attempts,
            )
            episodes.counts = self.counts
            groups = await asyncio.gather(
                *(
                    episodes.group(task, group_size, f"s{step}-g{index}-{task.id}")
                    for index, task in enumerate(tasks)
                )
            )
        return [t for group in groups for t in group]
