"""A trial's sandbox: the task's built image under its limits and network policy, its side
services beside it, a separate verifier's own, each given back when the trial ends; the
:class:`rock.episode.TaskEnv` of a ``rock bench`` trial."""

from __future__ import annotations

import asyncio
import contextlib
import os

from ale.task import Task, TaskEnvironment, TaskVerifier
from rock.backends.base import Backend, Sandbox, SandboxError
from rock.bench.compose import Compose, ComposeError, read_compose
from rock.bench.images import ImageBuilder, TaskImageError
from rock.bench.options import BenchOptions
from rock.bench.results import FailureMode
from rock.bench.services import ServiceGroup
from rock.models import SandboxSpec
from rock.task_phases import Services
from rock.verifier.run import stage

DEFAULT_MEMORY_MB = 2048


def sandbox_spec(
    task: Task,
    image: str,
    labels: dict[str, str],
    options: BenchOptions,
    phases: tuple[bool | None, ...] = (),
) -> SandboxSpec:
    """The sandbox of ``task``: with a network when the environment or one of
    ``phases`` (the agent's, the tests') asks for it; --internet/--no-internet rule."""
    env = task.environment
    wanted = options.allow_internet
    internet = env.allow_internet or any(phases) if wanted is None else wanted
    return SandboxSpec(
        image=image,
        cpus=min(env.cpus or 1.0, float(os.cpu_count() or 1)),
        memory_mb=env.memory_mb or DEFAULT_MEMORY_MB,
        pids_limit=2048,
        network="bridge" if internet else "none",
        capabilities=options.capabilities,
        workdir=env.workdir,
        env=dict(env.env),
        labels=dict(labels),
    )


class TrialEnv:
    """A trial's :class:`rock.episode.TaskEnv`: a fresh sandbox of the task's built image
    (its cpus, memory and network policy), deleted after the trial unless asked to keep it."""

    def __init__(
        self,
        backend: Backend,
        builder: ImageBuilder,
        options: BenchOptions,
        image: str,
        labels: dict[str, str],
    ) -> None:
        """``labels``: what each of the trial's containers, networks and volumes carries."""
        self.backend, self.builder, self.options = backend, builder, options
        self.image, self.labels = image, labels
        self.services_of: dict[str, ServiceGroup] = {}
        """The side services of each open sandbox (compose tasks), by sandbox id."""

    async def open(self, task: Task) -> tuple[Sandbox, str]:
        phases = (
            task.agent_network,
            task.verifier_network if task.verifier is None else None,
            *(s.agent_network for s in task.steps),
            *(s.verifier_network for s in task.steps if s.verifier is None),
        )
        compose = await asyncio.to_thread(read_compose, task)
        group = await self._side_services(task, compose) if compose else None
        try:
            sandbox = await self._create(
                task, self.image, "/logs/agent /logs/verifier", phases, compose, group
            )
        except BaseException:
            if group is not None:
                await asyncio.shield(asyncio.to_thread(group.stop))
            raise
        if group is not None:
            self.services_of[sandbox.id] = group
        return sandbox, task.environment.workdir or "/app"

    async def _side_services(self, task: Task, compose: Compose) -> ServiceGroup | None:
        """The compose file's other services, up and on a network of the trial's own."""
        if not compose.side:
            return None
        builder = self.builder
        images = {
            s.name: await asyncio.to_thread(builder.service_image, task, s) for s in compose.side
        }
        wanted = self.options.allow_internet
        group = ServiceGroup(
            builder.client,
            compose,
            images,
            internet=task.environment.allow_internet if wanted is None else wanted,
            labels=dict(self.labels),
        )
        await asyncio.to_thread(group.start)
        return group

    async def _create(
        self,
        task: Task,
        image: str,
        dirs: str,
        phases: tuple[bool | None, ...] = (),
        compose: Compose | None = None,
        services: ServiceGroup | None = None,
    ) -> Sandbox:
        """A sandbox of ``image`` under ``task``'s limits (the compose main service's
        environment under the task's), with ``dirs`` made in it; made with a network for a
        later phase or for ``services`` (joined, answering to its service name), it starts
        with the environment's (closed)."""
        spec = sandbox_spec(task, image, self.labels, self.options, phases)
        if compose is not None:
            spec.env = {**compose.main.environment, **spec.env}
        if services is not None:
            spec.network = "bridge"  # joined to the services' network below, bridge cut after
        sandbox = await asyncio.to_thread(self.backend.create, spec)
        try:
            if services is not None:
                container = getattr(sandbox, "container", None)
                if container is None:
                    raise ComposeError("a task with side services needs a Docker sandbox.")
                await asyncio.to_thread(services.attach, container.id)
                await asyncio.to_thread(services.ready_for_main)
            await self.network(task, sandbox, None)
            await asyncio.to_thread(sandbox.exec, f"mkdir -p {dirs}", timeout=30)
        except BaseException:
            await asyncio.shield(self.close(sandbox))
            raise
        return sandbox

    async def network(self, task: Task, sandbox: Sandbox, on: bool | None) -> None:
        wanted = self.options.allow_internet  # --internet / --no-internet: every phase
        if wanted is None:
            wanted = task.environment.allow_internet if on is None else on
        if sandbox.spec.network == "none" and not wanted:
            return  # made closed, and staying so
        await asyncio.to_thread(sandbox.set_network, wanted)

    def services(self, sandbox: Sandbox) -> Services:
        group = self.services_of.get(sandbox.id)
        return group.ports() if group is not None else {}

    async def stage_tests(self, task: Task, sandbox: Sandbox) -> None:
        await asyncio.to_thread(stage, task, sandbox, stand_ins=not self.options.strict)

    async def close(self, sandbox: Sandbox) -> None:
        if self.options.keep_sandboxes:
            return
        try:
            await asyncio.to_thread(_delete, sandbox)
        finally:
            group = self.services_of.pop(sandbox.id, None)
            if group is not None:
                await asyncio.to_thread(group.stop)

    async def open_verifier(
        self, task: Task, verifier: TaskVerifier, network: bool | None = None
    ) -> Sandbox:
        """The separate verifier's sandbox: its own image (a prebuilt one, or built from the
        tests' Dockerfile) or the agent's, under its own limits and network, or the task's
        (``network``, the verifier phase's, over either)."""
        image = self.image
        if verifier.bundled:
            own = TaskEnvironment(
                image=verifier.image,
                dockerfile=verifier.dockerfile,
                build_context=verifier.dockerfile.parent if verifier.dockerfile else None,
                build_timeout_sec=task.environment.build_timeout_sec,
            )
            checking = task.model_copy(update={"id": f"{task.id}-verifier", "environment": own})
            image = (await asyncio.to_thread(self.builder.build, checking)).tag
        own = verifier.environment or task.environment
        if network is not None:
            own = own.model_copy(update={"allow_internet": network})
        limits = task.model_copy(update={"environment": own})
        return await self._create(limits, image, "/logs/verifier")

    def failure_of(self, exc: Exception) -> FailureMode | None:
        if isinstance(exc, TaskImageError):  # a side service's image
            return FailureMode.BUILD_FAILED
        return FailureMode.SANDBOX_ERROR if isinstance(exc, SandboxError) else None


def _delete(sandbox: Sandbox) -> None:
    with contextlib.suppress(Exception):  # already gone: the engine's clean-up covers it
        sandbox.delete()
