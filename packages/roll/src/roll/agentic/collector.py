"""`roll train` on tasks: each step's groups are agentic episodes in rock sandboxes.

With ``tasks:`` in the config, a step draws ``rollout.groups_per_step`` tasks of the dataset
(seeded by (seed, step)), runs each as a group of ``rollout.group_size`` concurrent episodes
of the iflow agent with the policy (:mod:`roll.agentic.episodes`), their generation requests
batched by one :class:`~roll.generation.queue.GenerationQueue`, and hands the scored
trajectories to the trainer. Sandboxes come from a warm pool of a private ``rock serve``
started for the run (or the daemon at ``tasks.url``), from the synthesis pool image. That
daemon may restart under the run: the episodes it broke run again (``infra/daemon_unavailable``)
once it answers, within ``tasks.daemon_wait`` seconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import threading
import uuid
from collections import deque
from pathlib import Path
from typing import Any, Literal, Self

from ale.task import Task
from ale.trajectory import Trajectory
from roll.agentic.admission import Admission, GroupGate
from roll.agentic.episodes import AgenticEpisodes, AgentSettings, EpisodeCounts, Start
from roll.config import TasksConfig
from roll.errors import ConfigError, RollError, TrainingAborted
from roll.gateway import Gateway, GatewayEpisodes
from roll.generation.base import GenerationBackend, SamplingParams
from roll.generation.queue import GenerationQueue
from roll.resample import Experts
from roll.schedule import Prompt, Round


def load_tasks(dataset: str | Path) -> list[Task]:
    """The tasks of a dataset directory (``DIR/tasks/*`` or ``DIR/*``), in name order."""
    from ale.task import TaskFormatError
    from ale.task import load_tasks as load_dataset

    root = Path(dataset)
    base = root / "tasks" if (root / "tasks").is_dir() else root
    try:
        tasks = load_dataset(base)
    except TaskFormatError as exc:
        raise ConfigError(f"tasks.dataset: {exc}") from None
    if not tasks:
        raise ConfigError(f"{base} holds no tasks; set tasks.dataset to a dataset of tasks")
    return tasks


UNSOLVED_WINDOW = 4
"""``unsolved`` draws: a kind's weight is its failure share over this many recent groups."""
UNSOLVED_FLOOR = 0.1
"""``unsolved`` draws: the least weight of a kind, so a solved kind is still drawn now and then."""
UNSOLVED_PRIOR = 0.5
"""``unsolved`` draws: the weight of a kind no group of which has finished yet."""


class TaskDraw:
    """The tasks groups are run on, one draw at a time, reproducibly from ``seed``: uniform
    with replacement (``random``), ``balanced`` over kinds, or over kinds weighted by how
    often their recent groups failed (``unsolved``; see ``TasksConfig.draw``)."""

    def __init__(
        self, tasks: list[Task], how: Literal["random", "balanced", "unsolved"], seed: int
    ) -> None:
        self.how = how
        self._rng = random.Random(f"{seed}:tasks")
        self.tasks = tasks
        kinds: dict[tuple[str, ...], list[Task]] = {}
        for task in tasks:
            kinds.setdefault(tuple(sorted(task.metadata.tags)) or (task.id,), []).append(task)
        self.kinds = list(kinds.values())
        self._kind_of = {task.id: k for k, members in enumerate(self.kinds) for task in members}
        self._recent: list[deque[float]] = [deque(maxlen=UNSOLVED_WINDOW) for _ in self.kinds]
        self._turns: list[int] = []
        self._decks: list[list[Task]] = [[] for _ in self.kinds]

    def weights(self) -> list[float]:
        """Each kind's weight in an ``unsolved`` draw: the share of failed episodes over its
        last :data:`UNSOLVED_WINDOW` finished groups (at least :data:`UNSOLVED_FLOOR`;
        :data:`UNSOLVED_PRIOR` before any)."""
        return [
            max(UNSOLVED_FLOOR, 1.0 - sum(r) / len(r)) if r else UNSOLVED_PRIOR
            for r in self._recent
        ]

    def record(self, task_id: str, rewards: list[float]) -> None:
        """A finished group of ``task_id``: its episodes' rewards (each clipped to [0, 1])."""
        kind = self._kind_of.get(task_id)
        if kind is not None and rewards:
            share = sum(min(1.0, max(0.0, r)) for r in rewards) / len(rewards)
            self._recent[kind].append(share)

    def __call__(self) -> Task:
        if self.how == "random":
            return self._rng.choice(self.tasks)
        if self.how == "unsolved":
            kind = self._rng.choices(range(len(self.kinds)), weights=self.weights())[0]
        else:
            if not self._turns:
                self._turns = list(range(len(self.kinds)))
                self._rng.shuffle(self._turns)
            kind = self._turns.pop()
        deck = self._decks[kind]
        if not deck:
            deck.extend(self.kinds[kind])
            self._rng.shuffle(deck)
        return deck.pop()


REFILL_LIMIT = 3
"""At most this many refills per group of a step: while the policy solves nothing (or
everything), uniform groups are taken after that rather than waiting forever."""


class TaskRollouts:
    """The rollout source of ``roll train`` when ``tasks:`` is set (a context manager).

    Episodes run on an event loop in a background thread, so with ``max_staleness`` above 0
    the groups of the next steps keep running while the trainer updates: :meth:`take` waits
    for ``groups_per_step`` groups (starting what is missing), starts the groups of the next
    ``max_staleness`` steps, and drops (and replaces) a group sampled by a policy more than
    ``max_staleness`` versions older than the current one. With 0 it is synchronous: a
    step's groups start after the previous update and nothing runs during an update. With
    ``refill_uniform``, a group whose rewards are all equal (no group-relative signal) is
    dropped and another started in its place, up to :data:`REFILL_LIMIT` per group.
    """

    def __init__(
        self,
        config: TasksConfig,
        tokenizer: Any,
        *,
        seed: int,
        backend: GenerationBackend,
        params: SamplingParams,
        group_size: int,
        groups_per_step: int,
        max_staleness: int = 0,
        refill_uniform: bool = False,
        experts: Experts | None = None,
    ) -> None:
        self.config = config
        self.experts = experts
        """Expert trajectories of tasks: their groups start from an expert's first turns,
        in forks of a sandbox they were replayed in (:class:`roll.agentic.episodes.Start`)."""
        self._starts = 0
        self.self_experts = 0
        """Successful trajectories of the policy taken as their task's expert."""
        self.refill_uniform = refill_uniform
        self.uniform_refilled = 0
        self.tokenizer = tokenizer
        self.seed = seed
        self.backend = backend
        self.params = params
        self.group_size = group_size
        self.groups_per_step = groups_per_step
        self.max_staleness = max_staleness
        self.tasks = load_tasks(config.dataset)
        self.counts = EpisodeCounts()
        self.stale_dropped = 0
        self.launched = 0
        self.draw = TaskDraw(self.tasks, config.draw, seed)
        self._stack = contextlib.ExitStack()
        self.runner: Any = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._queue: GenerationQueue | None = None
        self._episodes: AgenticEpisodes | None = None
        self._ready: asyncio.Queue[list[Trajectory]] | None = None
        self._inflight = 0
        self._cutting: set[asyncio.Task[list[Trajectory]]] = set()
        """Groups cut by a round, stopping (their sandboxes going back) in the background."""
        self._gateway: Gateway | None = None

    # -- life cycle ----------------------------------------------------------------------------

    def __enter__(self) -> Self:
        from rock.episode import episode_threads
        from rock.episode_runner import PoolRunner
        from rock.pool_image import ensure_pool_image

        ensure_pool_image()
        try:
            self.runner = PoolRunner(self._pool())
            self._loop = asyncio.new_event_loop()
            self._loop.set_default_executor(episode_threads(self.config.pool_size))
            self._thread = threading.Thread(
                target=self._loop.run_forever, name="roll-rollouts", daemon=True
            )
            self._thread.start()
            try:
                self._call(self._setup())
            finally:
                self._stack.callback(self._stop)  # after what _setup put on the stack
        except BaseException:
            self._stack.close()  # __exit__ is not called when __enter__ fails
            raise
        return self

    def _pool(self) -> Any:
        """The run's warm pool, ready, on the daemon of ``tasks.url`` or ``tasks.home`` (else
        on a private one); a daemon that cannot serve it is an error of one sentence."""
        from rock.client import Client
        from rock.episode_runner import DaemonPool
        from rock.errors import DaemonUnreachable, RockError, Unauthorized
        from rock.synth.wiring import private_daemon

        home = Path(self.config.home).expanduser() if self.config.home else None
        where = "the run's private rock daemon"
        try:
            if self.config.url or home is not None:
                client = self._stack.enter_context(Client(self.config.url, home=home))
                where = f"the rock daemon at {client.url}"
            else:
                client = self._stack.enter_context(private_daemon())
            source = DaemonPool(
                client,
                f"roll-{uuid.uuid4().hex[:6]}",
                size=self.config.pool_size,
                reconnect_timeout=self.config.daemon_wait,
            )
            self._stack.callback(source.close)
            source.wait_ready()
        except DaemonUnreachable:
            raise ConfigError(
                f"{where} does not answer; start it with `rock serve`, fix tasks.url or "
                "tasks.home, or leave both unset for a private daemon"
            ) from None
        except Unauthorized:
            raise ConfigError(
                f"{where} refused the token; set tasks.home to the rock home it runs with "
                "(where its token is) or export ROCK_TOKEN"
            ) from None
        except RockError as exc:
            raise RollError(f"{where} cannot keep the run's sandboxes: {exc}") from None
        return source

    def __exit__(self, *exc: object) -> None:
        self._stack.close()

    def _call(self, coroutine: Any) -> Any:
        assert self._loop is not None
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result()

    def _agent_settings(self) -> AgentSettings:
        agent = self.config.agent
        return AgentSettings(
            prompt_profile=self.config.prompt_profile,
            tool_format=self.config.tool_format,
            max_turns=self.config.max_turns,
            context_limit=self.config.context_limit,
            max_new_tokens=self.params.max_new_tokens,
            name=agent.name,
            extra=dict(agent.kwargs),
            gateway=self._gateway,
        )

    async def _setup(self) -> None:
        self._queue = GenerationQueue(self.backend, self.params, seed=self.params.seed or 0)
        if self.config.agent.transport == "gateway":
            episodes = GatewayEpisodes(
                self._queue,
                self.tokenizer,
                context_limit=self.config.context_limit,
                max_new_tokens=self.params.max_new_tokens,
                tool_format=self.config.tool_format,
            )
            self._gateway = Gateway(episodes)
            await self._gateway.start()
        self._episodes = AgenticEpisodes(
            self.runner,
            self._queue,
            self.tokenizer,
            agent=self._agent_settings(),
            max_attempts=self.config.max_attempts,
        )
        self._episodes.counts = self.counts
        self._ready = asyncio.Queue()

    def _stop(self) -> None:
        if self._loop is None:
            return

        async def cancel() -> None:
            if self._gateway is not None:  # first: its server's tasks end on their own
                await self._gateway.stop()
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            # what the cancellations started (a cut episode's shielded sandbox release) ends too
            rest = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            if rest:
                await asyncio.wait(rest, timeout=60)
            if self._queue is not None:
                await self._queue.close()

        with contextlib.suppress(Exception):
            self._call(cancel())
        self._loop.call_soon_threadsafe(self._loop.stop)
        if self._thread is not None:
            self._thread.join(timeout=30)
        self._loop.close()
        self._loop = None

    # -- groups --------------------------------------------------------------------------------

    def _launch(self) -> None:
        assert self._ready is not None
        task = self.draw()
        index = self.launched
        self.launched += 1
        self._inflight += 1
        ready = self._ready

        async def run() -> None:
            try:
                group = await self._guarded(task, f"l{index}-{task.id}")
            finally:
                self._inflight -= 1
            await ready.put(group)

        asyncio.get_running_loop().create_task(run())

    async def _run_group(
        self, task: Task, group_id: str, gate: GroupGate | None = None
    ) -> list[Trajectory]:
        """One group's scored trajectories (the seam the Ray rollout workers replace); with
        ``gate`` (a short round's), its episodes verify once the group is admitted."""
        assert self._episodes is not None
        start = None
        picked = self.experts.start(task.id, self._starts) if self.experts else None
        if picked is not None and self.experts is not None:
            self._starts += 1
            index, anchor = picked
            group_id = f"{group_id}-e{index}-a{anchor}"
            self.experts.group_expert[group_id] = index
            start = Start(self.experts.trajectories[index], anchor, index)
        trajectories = await self._episodes.group(task, self.group_size, group_id, gate, start)
        if self.experts is not None:  # self-sampling: a success of a task without an expert
            self.self_experts += self.experts.learn_from(trajectories)
        return trajectories

    # -- rounds (tail batching, roll.schedule) --------------------------------------------------

    def fresh(self, step: int, indices: range) -> list[Prompt]:
        """New prompts: tasks drawn as ``tasks.draw`` says."""
        return [Prompt(key=self.draw().id, step=step) for _ in indices]

    def run_round(self, step: int, prompts: list[Prompt], keep: int | None) -> Round:
        """A group of each prompt's task, concurrently: with ``keep``, until that many have
        finished (the others are cancelled: their episodes stop and their sandboxes go back
        to the pool in the background, while the trainer updates), only groups admitted by
        :mod:`roll.agentic.admission` running their verifiers; else until all have. A group
        whose every episode failed for infrastructure reasons is ``failed``, not finished."""
        return self._call(self._round(prompts, keep))

    async def _round(self, prompts: list[Prompt], keep: int | None) -> Round:
        by_id = {task.id: task for task in self.tasks}
        loop = asyncio.get_running_loop()
        admission = Admission(keep, self._cut_waiting) if keep is not None else None
        jobs: dict[asyncio.Task[list[Trajectory]], int] = {}
        gates: dict[asyncio.Task[list[Trajectory]], GroupGate] = {}
        for position, prompt in enumerate(prompts):
            task = by_id.get(prompt.key)
            if task is None:  # a deferred task no longer in the dataset (a resumed run)
                continue
            index = self.launched
            self.launched += 1
            gate = admission.group(self.group_size) if admission is not None else None
            job = loop.create_task(self._guarded(task, f"l{index}-{task.id}", gate))
            jobs[job] = position
            if gate is not None:
                gates[job] = gate
        finished: list[tuple[int, list[Trajectory]]] = []
        failed: list[int] = []
        pending = set(jobs)
        while pending and (keep is None or len(finished) < keep):
            done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            for job in sorted(done, key=jobs.__getitem__):
                group = job.result()
                if group:
                    finished.append((jobs[job], group))
                else:
                    failed.append(jobs[job])
                    if admission is not None:  # its place goes to the next group ready
                        admission.failed(gates[job])
        for job in pending:  # their sandboxes go back in the background, during the update
            job.cancel()
        self._cutting |= pending
        for job in pending:
            job.add_done_callback(self._cutting.discard)
        kept = finished[:keep] if keep is not None else finished
        cut = [jobs[job] for job in pending] + [position for position, _ in finished[len(kept) :]]
        return Round(
            groups=[group for _, group in kept],
            cut=[prompts[position] for position in sorted(cut)],
            failed=[prompts[position] for position in failed],
        )

    def _cut_waiting(self) -> None:
        self.counts.cut_unverified += 1

    async def _guarded(
        self, task: Task, group_id: str, gate: GroupGate | None = None
    ) -> list[Trajectory]:
        """A group's trajectories; none when it failed as a whole (counted as abandoned)."""
        try:
            group = await self._run_group(task, group_id, gate)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self.counts.abandoned += self.group_size
            self.counts.last_error = f"{type(exc).__name__}: {exc}"
            return []
        self.draw.record(task.id, [float(t.reward or 0.0) for t in group])
        return group

    def state(self) -> dict[str, Any]:
        return {}

    def load_state(self, state: dict[str, Any]) -> None:
        pass

    def take(self, version: int) -> list[Trajectory]:
        """The next step's scored trajectories: ``groups_per_step`` groups not more than
        ``max_staleness`` policy versions old (``version`` is the current one)."""
        return self._call(self._take(version))

    async def _take(self, version: int) -> list[Trajectory]:
        assert self._ready is not None
        abandoned = self.counts.abandoned
        while self._inflight + self._ready.qsize() < self.groups_per_step:
            self._launch()
        out: list[Trajectory] = []
        taken = 0
        refills = 0
        while taken < self.groups_per_step:
            group = await self._ready.get()
            rewards = {t.reward for t in group}
            uniform = len(group) < 2 or len(rewards) == 1
            if self.refill_uniform and uniform and refills < REFILL_LIMIT * self.groups_per_step:
                # no group-relative signal: another group of another task takes its place
                refills += 1
                self.uniform_refilled += 1
                self._launch()
                continue
            versions = [
                s.policy_version for t in group for s in t.steps if s.policy_version is not None
            ]
            if versions and version - min(versions) > self.max_staleness:
                self.stale_dropped += 1
                self._launch()
                continue
            out.extend(group)
            taken += 1
        # the next steps' groups start now and run during the update; no more than can be
        # trained on within max_staleness versions, so few turn stale
        ahead = self.groups_per_step * self.max_staleness
        while self._inflight + self._ready.qsize() < ahead:
            self._launch()
        if not out and self.counts.abandoned > abandoned:
            raise TrainingAborted(self._nothing_ran(self.counts.abandoned - abandoned))
        return out

    def _nothing_ran(self, abandoned: int) -> str:
        reasons = ", ".join(f"{r} {n}" for r, n in self.counts.reasons.most_common())
        last = f"; the last: {self.counts.last_error}" if self.counts.last_error else ""
        return (
            f"no episode of this step could be run: {abandoned} were abandoned after "
            f"{self.config.max_attempts} attempts each for infrastructure reasons"
            f"{f' ({reasons})' if reasons else ''}{last}"
        )

    @contextlib.contextmanager
    def paused(self) -> Any:
        """No generation runs inside (the trainer changes the sampling weights)."""
        assert self._queue is not None and self._loop is not None
        lock = self._queue._lock
        self._call(lock.acquire())
        try:
            yield
        finally:
            self._loop.call_soon_threadsafe(lock.release)

    def metrics(self) -> dict[str, float]:
        out = self.counts.as_metrics()
        out["episodes/stale_dropped_groups"] = float(self.stale_dropped)
        out["episodes/uniform_refilled_groups"] = float(self.uniform_refilled)
        out["episodes/groups_in_flight"] = float(self._inflight)
        if self.experts is not None:
            out["resample/self_experts"] = float(self.self_experts)
            out["resample/tasks_with_experts"] = float(len(self.experts.by_task))
        if self._queue is not None:
            out["generation/mean_batch"] = self._queue.stats.mean_batch
        if self._gateway is not None:
            out["gateway/undelivered"] = float(self._gateway.episodes.undelivered)
            out["gateway/restarts"] = float(self._gateway.restarts)
        return out
