"""Agentic rollouts on Ray: episode workers as async actors, and one generation actor.

With ``ray:`` and ``tasks:`` in the config, :class:`RayTaskRollouts` (a
:class:`~roll.agentic.collector.TaskRollouts`: the same ``take``, ``paused`` and
``metrics``, the same staleness and refill rules) hands each group of episodes to the least
busy of ``ray.rollout_workers`` :class:`EpisodeWorker` actors. A worker runs its groups'
episodes concurrently with :class:`~roll.agentic.episodes.AgenticEpisodes` (a sandbox of the
run's warm pool, the iflow agent loop, the verifier: the CPU-heavy part), talking to the rock
daemon at its URL with its token (the private daemon's, or ``tasks.url``'s).

The policy's generation requests from every worker go to one
:class:`~roll.agentic.ray_policy.PolicyServer` actor, whose
:class:`~roll.generation.queue.GenerationQueue` batches them across episodes and workers.
The trainer holds it as :class:`~roll.agentic.ray_policy.RayPolicyBackend`, a
:class:`~roll.generation.base.GenerationBackend`: ``Session.sync_rollout`` hands it the
weights after each update (they load between two batches), and the workers learn the new
policy version before their next turn, so trajectories record the version as in one process.
With ``rollout.backend: server`` the actor holds no model: it sends the requests to the
inference server (vLLM, SGLang), and the trainer's own
:class:`~roll.generation.server.ServerBackend` writes each update where the server reloads
it; the actor takes the new version only once the server has loaded it, so a request sent
before then keeps the old one (off-policy, never counted as the new policy's sample).

A tail-batching short round's groups are held before their verifiers in their workers
(:mod:`roll.agentic.admission`): a worker tells when a group is done acting
(:meth:`EpisodeWorker.acted`), and the trainer, which decides the admissions, tells it when
the group may verify (:meth:`EpisodeWorker.admit`).

Each group comes back with the counts of its episodes (started, scored, retried, abandoned),
added up in the trainer, so the accounting stays whole; a group lost with its worker (Ray
restarts a worker that dies) counts as abandoned episodes.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from ale.task import Task
from ale.trajectory import Trajectory
from roll.agentic.admission import GroupGate
from roll.agentic.collector import TaskRollouts, load_tasks
from roll.agentic.episodes import AgenticEpisodes, AgentSettings, EpisodeCounts
from roll.agentic.ray_policy import RayPolicyBackend
from roll.config import RayConfig, TasksConfig
from roll.errors import ConfigError, GenerationError, PromptTooLong, RollError
from roll.generation.base import Generation, SamplingParams
from roll.ray_engine import import_ray, kill_actors, remote_error, wait_started

WORKER_RESTARTS = 3
"""How often Ray restarts a rollout worker that died (its running groups are lost)."""


# -- the episode workers -----------------------------------------------------------------------


@dataclass
class _Version:
    policy_version: int


@dataclass
class _Hold:
    """A held group on its worker: done acting (told to the trainer, with how many episodes
    wait before their verifiers), and its gate while the group runs (opened when admitted)."""

    acted: asyncio.Event = field(default_factory=asyncio.Event)
    arrived: int = 0
    gate: GroupGate | None = None


class _RemoteQueue:
    """What :class:`~roll.policy.PolicyModel` uses of a generation queue, served by
    the generation actor: ``generate``, ``params`` and ``backend.policy_version`` (the
    newest version this worker has been told of)."""

    def __init__(self, policy: Any, params: SamplingParams, version: int) -> None:
        self.policy = policy
        self.params = params
        self.backend = _Version(version)

    async def generate(self, prompt: list[int], max_new_tokens: int | None = None) -> Generation:
        ray = import_ray()
        try:
            return await self.policy.generate.remote(list(prompt), max_new_tokens)
        except ray.exceptions.RayError as exc:
            error = remote_error(exc)
            if isinstance(error, PromptTooLong):  # the agent's to handle, not a failure
                raise error from None
            raise GenerationError(f"the generation actor failed: {error}") from None


class EpisodeWorker:
    """The body of a rollout worker (an async actor): groups of agentic episodes against the
    rock daemon at ``url``, sandboxes from the run's warm pool ``pool``."""

    def __init__(
        self,
        *,
        dataset: str,
        task_ids: list[str],
        url: str,
        token: str | None,
        pool: str,
        pool_size: int,
        spec: Any,
        reconnect_timeout: float,
        tokenizer: Any,
        agent: AgentSettings,
        max_attempts: int,
        policy: Any,
        params: SamplingParams,
        version: int,
    ) -> None:
        from rock.client import Client
        from rock.episode_runner import DaemonPool, PoolRunner

        self.queue = _RemoteQueue(policy, params, version)
        self.tokenizer = tokenizer
        self.agent = agent
        self.max_attempts = max_attempts
        self.failed: Exception | None = None
        self._holds: dict[str, _Hold] = {}
        try:
            self.tasks = load_tasks(dataset)
            if [t.id for t in self.tasks] != task_ids:
                raise ConfigError(
                    f"a rollout worker finds other tasks in {dataset} than the trainer; give "
                    "every node of the Ray cluster the same tasks.dataset."
                )
            self.client = Client(url, token)
            # the trainer made the pool; the same settings again leave it as it is (and
            # declare it again should the daemon restart without it)
            source = DaemonPool(
                self.client,
                pool,
                size=pool_size,
                spec=spec,
                reconnect_timeout=reconnect_timeout,
            )
            self.runner = PoolRunner(source)
        except Exception as exc:  # raised by ready(): Ray keeps a method's error whole
            self.failed = exc

    async def ready(self) -> bool:
        if self.failed is not None:
            raise self.failed
        return True

    async def set_version(self, version: int) -> None:
        self.queue.backend.policy_version = max(self.queue.backend.policy_version, version)

    async def acted(self, group_id: str) -> int:
        """Once the held group ``group_id`` is done acting (or over): how many of its
        episodes wait before their verifiers."""
        hold = self._holds.setdefault(group_id, _Hold())  # the group may not have started
        try:
            await hold.acted.wait()
            return hold.arrived
        finally:  # cancelled before its group started: no entry left behind
            if hold.gate is None and self._holds.get(group_id) is hold:
                del self._holds[group_id]

    async def admit(self, group_id: str) -> None:
        """The held group ``group_id`` may run its verifiers (asked once :meth:`acted` has
        answered, so while the group runs, or after it ended)."""
        hold = self._holds.get(group_id)
        if hold is not None and hold.gate is not None:
            hold.gate.opened.set()

    async def group(
        self, index: int, task_id: str, size: int, group_id: str, version: int, held: bool = False
    ) -> tuple[list[Trajectory], EpisodeCounts]:
        """``size`` concurrent episodes of the dataset's task ``index``: the scored
        trajectories and what happened to every episode started. ``held`` (a tail-batching
        short round's group): its episodes wait before their verifiers until :meth:`admit`;
        :meth:`acted` tells when they all do."""
        await self.set_version(version)
        task = self.tasks[index]
        if task.id != task_id:
            raise ConfigError(f"task {task_id} is not at position {index} of this worker's tasks")
        episodes = AgenticEpisodes(
            self.runner,
            self.queue,  # type: ignore[arg-type]
            self.tokenizer,
            agent=self.agent,
            max_attempts=self.max_attempts,
        )
        hold = self._holds.setdefault(group_id, _Hold()) if held else None
        gate = None
        if hold is not None:

            def ready(acted: GroupGate) -> None:
                hold.arrived = acted.arrived
                hold.acted.set()

            def cut_waiting() -> None:
                episodes.counts.cut_unverified += 1

            gate = hold.gate = GroupGate(size, on_ready=ready, on_cut_waiting=cut_waiting)
        try:
            trajectories = await episodes.group(task, size, group_id, gate)
        except asyncio.CancelledError:
            raise
        except Exception:  # a group that failed as a whole counts as abandoned episodes
            episodes.counts.abandoned += size
            trajectories = []
        finally:
            if hold is not None:  # over: a trainer still waiting hears it; the entry goes
                hold.acted.set()
                hold.gate = None
                self._holds.pop(group_id, None)
        return trajectories, episodes.counts


# -- the trainer's side ------------------------------------------------------------------------


class RayTaskRollouts(TaskRollouts):
    """:class:`~roll.agentic.collector.TaskRollouts` whose groups run in Ray rollout workers
    (see the module docstring); ``backend`` is the run's :class:`RayPolicyBackend`."""

    def __init__(
        self,
        config: TasksConfig,
        tokenizer: Any,
        *,
        ray_config: RayConfig,
        backend: RayPolicyBackend,
        **kwargs: Any,
    ) -> None:
        super().__init__(config, tokenizer, backend=backend, **kwargs)
        self.ray_config = ray_config
        self.policy = backend
        self.workers: list[Any] = []
        self._busy: list[int] = []
        self._told = backend.policy_version

    async def _setup(self) -> None:
        self._ready = asyncio.Queue()
        await asyncio.to_thread(self._start_workers)

    def _start_workers(self) -> None:
        ray = import_ray()
        source = self.runner.source
        client, pool = getattr(source, "client", None), getattr(source, "pool", None)
        if client is None or pool is None:
            raise RollError("Ray rollout workers need the run's sandboxes from a rock daemon pool")
        nodes = [node for node in ray.nodes() if node.get("Alive")]
        if len(nodes) > 1 and _loopback(client.url):
            raise ConfigError(
                f"the Ray cluster has {len(nodes)} nodes but the rock daemon at {client.url} "
                "listens on loopback, out of reach of rollout workers on other nodes; run "
                "`rock serve` on an address every node reaches and set tasks.url to it."
            )
        self.policy.open(self.params, seed=self.params.seed or 0)
        worker = ray.remote(EpisodeWorker).options(
            num_cpus=self.ray_config.worker_cpus, max_restarts=WORKER_RESTARTS
        )
        tokenizer = ray.put(self.tokenizer)  # sent once, not once per worker
        self.workers = [
            worker.remote(
                dataset=str(Path(self.config.dataset).resolve()),
                task_ids=[t.id for t in self.tasks],
                url=client.url,
                token=client.token,
                pool=pool,
                pool_size=self.config.pool_size,
                spec=source.spec,
                reconnect_timeout=source.reconnect_timeout,
                tokenizer=tokenizer,
                agent=self._agent_settings(),
                max_attempts=self.config.max_attempts,
                policy=self.policy.actor,
                params=self.params,
                version=self.policy.policy_version,
            )
            for _ in range(self.ray_config.rollout_workers)
        ]
        self._busy = [0] * len(self.workers)
        self._told = self.policy.policy_version
        self._stack.callback(kill_actors, self.workers)
        wait_started(self.workers, timeout=self.ray_config.start_timeout, what="rollout workers")

    def _tell_version(self) -> None:
        """Tell the workers the policy version the generation actor now samples with."""
        version = self.policy.policy_version
        if version == self._told or not self.workers:
            return
        ray = import_ray()
        with contextlib.suppress(ray.exceptions.RayError):  # a restarting one learns per group
            ray.get([w.set_version.remote(version) for w in self.workers])
        self._told = version

    async def _run_group(
        self, task: Task, group_id: str, gate: GroupGate | None = None
    ) -> list[Trajectory]:
        ray = import_ray()
        index = min(range(len(self.workers)), key=self._busy.__getitem__)
        position = next(i for i, t in enumerate(self.tasks) if t is task)
        self._busy[index] += 1
        worker = self.workers[index]
        version = self.policy.policy_version
        held = gate is not None
        call = worker.group.remote(position, task.id, self.group_size, group_id, version, held)
        relay = (
            asyncio.ensure_future(self._relay(worker, group_id, gate)) if gate is not None else None
        )
        try:
            trajectories, counts = await call
        except asyncio.CancelledError:  # cut (tail batching): the worker stops the episodes
            ray.cancel(call)  # and gives their sandboxes back
            self.counts.started += self.group_size
            self.counts.cut += self.group_size
            if gate is not None and not gate.admitted:  # those waiting never verified
                self.counts.cut_unverified += gate.arrived
            raise
        except ray.exceptions.RayError:  # the worker was lost: so is its group
            self.counts.started += self.group_size
            self.counts.reasons["worker_lost"] += self.group_size
            raise  # counted as abandoned by the caller
        finally:
            self._busy[index] -= 1
            if relay is not None:
                relay.cancel()
        self._add(counts)
        return list(trajectories)

    async def _relay(self, worker: Any, group_id: str, gate: GroupGate) -> None:
        """A held group's gate on the trainer's side: ready when its worker says the group
        is done acting; once the round admits it, the worker hears so."""
        ray = import_ray()
        acted = worker.acted.remote(group_id)
        try:
            arrived = await acted
        except asyncio.CancelledError:
            ray.cancel(acted)
            raise
        except ray.exceptions.RayError:  # the worker was lost: its group call says so
            return
        gate.acted(arrived)
        await gate.opened.wait()
        with contextlib.suppress(ray.exceptions.RayError):
            await worker.admit.remote(group_id)

    def _add(self, counts: EpisodeCounts) -> None:
        self.counts.started += counts.started
        self.counts.scored += counts.scored
        self.counts.retried += counts.retried
        self.counts.abandoned += counts.abandoned
        self.counts.cut += counts.cut
        self.counts.cut_unverified += counts.cut_unverified
        self.counts.reasons.update(counts.reasons)

    def take(self, version: int) -> list[Trajectory]:
        self._tell_version()
        return super().take(version)

    @contextlib.contextmanager
    def paused(self) -> Any:
        """Weights change between two batches of the generation actor (it holds its queue
        while it loads them); after, the workers learn the new version."""
        yield
        self._tell_version()

    def metrics(self) -> dict[str, float]:
        out = super().metrics()
        with contextlib.suppress(RollError):
            out |= self.policy.stats()
        out["ray/rollout_workers"] = float(len(self.workers))
        return out


def _loopback(url: str) -> bool:
    host = urlsplit(url).hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
