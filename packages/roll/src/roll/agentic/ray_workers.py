"""Agentic rollouts on Ray: episode workers as async actors, and one generation actor.

With ``ray:`` and ``tasks:`` in the config, :class:`RayTaskRollouts` (a
:class:`~roll.agentic.collector.TaskRollouts`: the same ``take``, ``paused`` and
``metrics``, the same staleness and refill rules) hands each group of episodes to the least
busy of ``ray.rollout_workers`` :class:`EpisodeWorker` actors. A worker runs its groups'
episodes concurrently with :class:`~roll.agentic.episodes.AgenticEpisodes` (a sandbox of the
run's warm pool, the iflow agent loop, the verifier: the CPU-heavy part), talking to the rock
daemon at its URL with its token (the private daemon's, or ``tasks.url``'s).

The policy's generation requests from every worker go to one :class:`PolicyServer` actor,
whose :class:`~roll.policy.GenerationQueue` batches them across episodes and workers.
The trainer holds it as :class:`RayPolicyBackend`, a
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
from roll.config import RayConfig, TasksConfig
from roll.errors import ConfigError, GenerationError, PromptTooLong, RollError
from roll.generation.base import Generation, GenerationBackend, SamplingParams
from roll.generation.server import ServerBackend
from roll.policy import GenerationQueue
from roll.ray_engine import import_ray, kill_actors, remote_error, wait_started

WORKER_RESTARTS = 3
"""How often Ray restarts a rollout worker that died (its running groups are lost)."""


# -- the generation actor ----------------------------------------------------------------------


@dataclass(frozen=True)
class ServerTarget:
    """The inference server a generation actor sends its requests to (no model of its own)."""

    url: str
    model: str | None = None
    api_key: str | None = None


class PolicyServer:
    """The body of the generation actor: the policy behind one generation queue.

    Either a copy of the policy, built from the trainer's model config, which gets its
    weights with the first :meth:`set_weights` (the trainer syncs right after starting it);
    or, with ``server``, a client of the inference server that holds the policy, which only
    learns the version (:meth:`set_version`) once the trainer has had the server reload.
    """

    def __init__(
        self,
        model_config: Any,
        tokenizer: Any,
        *,
        device: str,
        dtype: str,
        server: ServerTarget | None = None,
    ) -> None:
        self.backend: GenerationBackend
        if server is not None:
            self.backend = ServerBackend(server.url, model=server.model, api_key=server.api_key)
        else:
            import torch
            from transformers import AutoModelForCausalLM

            from roll.generation.hf import HFBackend

            model = AutoModelForCausalLM.from_config(model_config)
            model = model.to(device=device, dtype=getattr(torch, dtype))
            self.backend = HFBackend(model.eval().requires_grad_(False), tokenizer)
        self.queue = GenerationQueue(self.backend, SamplingParams())

    async def ready(self) -> bool:
        return True

    async def open(self, params: SamplingParams, seed: int) -> None:
        """Sample with ``params`` from now on, batch seeds counting from ``seed``."""
        await self.queue.close()
        self.queue = GenerationQueue(self.backend, params, seed=seed)

    async def generate(self, prompt: list[int], max_new_tokens: int | None) -> Generation:
        return await self.queue.generate(prompt, max_new_tokens)

    async def generate_batch(
        self, prompts: list[list[int]], params: SamplingParams
    ) -> list[Generation]:
        async with self.queue.paused():
            return await asyncio.to_thread(self.backend.generate, prompts, params)

    async def set_weights(self, state: dict[str, Any], version: int) -> None:
        async with self.queue.paused():  # between two batches
            await asyncio.to_thread(self._load, state)
            self.backend.policy_version = version

    async def set_version(self, version: int) -> None:
        """The server now samples from the weights of ``version`` (the trainer reloaded it):
        requests sent from now on carry it."""
        self.backend.policy_version = version

    def _load(self, state: dict[str, Any]) -> None:
        model = getattr(self.backend, "model", None)
        if model is None:
            raise GenerationError(
                "the generation actor sends its requests to an inference server and holds no "
                "weights; the trainer has the server reload them, so report this."
            )
        try:
            model.load_state_dict(state, strict=True)
        except (RuntimeError, KeyError) as exc:
            raise GenerationError(
                f"the trainer's weights do not fit the generation actor's model ({exc}); "
                "both are built from the same model config, so report this."
            ) from None

    async def stats(self) -> dict[str, float]:
        stats = self.queue.stats
        return {
            "generation/mean_batch": stats.mean_batch,
            "generation/batches": float(stats.batches),
        }


class RayPolicyBackend:
    """The trainer's handle on the generation actor (a ``GenerationBackend``); with
    ``server``, the trainer's client of the inference server the actor sends to, which
    reloads the server's weights after each update."""

    def __init__(self, actor: Any, server: ServerBackend | None = None) -> None:
        self.actor = actor
        self.server = server
        self.name = "server-ray" if server is not None else "hf-ray"
        self.policy_version = 0

    @classmethod
    def start(
        cls, model: Any, tokenizer: Any, config: RayConfig, server: ServerBackend | None = None
    ) -> RayPolicyBackend:
        """Start the generation actor: with a copy of ``model``'s architecture (on CUDA when
        ``ray.generation_gpus`` is above 0), or, with ``server``, as a client of that
        inference server, on this node (a server roll launched answers on loopback)."""
        ray = import_ray()
        dtype = str(next(model.parameters()).dtype).removeprefix("torch.")
        device = "cuda" if config.generation_gpus > 0 else "cpu"
        options: dict[str, Any] = {"num_cpus": config.generation_cpus}
        target = None
        if server is None:
            options["num_gpus"] = config.generation_gpus
        else:  # no model here: no GPU; on this node, where a launched server answers
            from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

            here = ray.get_runtime_context().get_node_id()
            options["scheduling_strategy"] = NodeAffinitySchedulingStrategy(here, soft=False)
            target = ServerTarget(server.url, model=server.model, api_key=server.api_key)
        actor = (
            ray.remote(PolicyServer)
            .options(**options)
            .remote(model.config, tokenizer, device=device, dtype=dtype, server=target)
        )
        try:
            wait_started([actor], timeout=config.start_timeout, what="generation actor")
        except BaseException:
            kill_actors([actor])
            raise
        return cls(actor, server)

    def _get(self, ref: Any) -> Any:
        ray = import_ray()
        try:
            return ray.get(ref)
        except ray.exceptions.RayError as exc:
            raise remote_error(exc) from None

    def open(self, params: SamplingParams, seed: int) -> None:
        self._get(self.actor.open.remote(params, seed))

    def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[Generation]:
        return list(self._get(self.actor.generate_batch.remote(prompts, params)))

    def sync_weights(self, model: Any, version: int) -> None:
        if self.server is not None:  # the server reloads; then the actor's requests say so
            self.server.sync_weights(model, version)
            self._get(self.actor.set_version.remote(version))
        else:
            state = {key: value.detach().to("cpu") for key, value in model.state_dict().items()}
            self._get(self.actor.set_weights.remote(state, version))
        self.policy_version = version

    def stats(self) -> dict[str, float]:
        return dict(self._get(self.actor.stats.remote()))

    def close(self) -> None:
        kill_actors([self.actor])
        if self.server is not None:
            self.server.close()


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
        from rock.synth.runner import DaemonPool, PoolRunner

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
