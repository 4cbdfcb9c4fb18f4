"""Harbor's environment on rock: Harbor users run Terminal-Bench (or any Harbor task) on rock
sandboxes without changing a task or an agent.

    harbor run --path TASKS --agent oracle \
        --environment-import-path rock.harbor:RockEnvironment

Each trial's environment is one rock sandbox made through a rock daemon (the one of this
machine's rock home, or ``url=`` and ``home=`` in ``--environment-kwarg``s; a daemon in front of
a Ray cluster places it on a node): the task's Dockerfile is built by the daemon (base images
mapped to local ones, offline, cached by digest), or its ``docker_image`` is used as it is;
the task's cpus and memory are the sandbox's limits; its network is closed unless a phase of
the trial asks for the internet, and opened or closed as the phases change. Commands run with
``bash -c`` as Harbor's docker environment runs them; files and folders travel as tar archives.

A sandbox without a network also gets the offline stand-ins ``rock bench`` gives its
verifiers (:mod:`rock.verifier.toolchain`: pytest and its plugins importable, and
``pip``, ``uv``, ``uvx``, ``curl``, ``wget`` that install from its wheelhouse), first on every
command's PATH, so a task whose tests fetch pytest or uv passes offline as it does under
``rock bench run`` (``stand_ins=false`` leaves them out; ``true`` adds them to an open one).

This module imports Harbor, so it is loaded by Harbor (in Harbor's own environment, with rock
installed beside it), never by rock itself.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any, Literal

from harbor.environments.base import BaseEnvironment, ExecResult, SandboxBuildFailedError
from harbor.environments.capabilities import (
    EnvironmentCapabilities,
    EnvironmentResourceCapabilities,
)
from harbor.environments.definition import require_agent_environment_definition
from harbor.environments.options import EnvironmentOptions
from harbor.models.task.config import NetworkMode, NetworkPolicy

from rock.client import AsyncClient, AsyncSandbox
from rock.errors import ImageBuildError
from rock.models import ExecRequest, SandboxSpec
from rock.verifier import toolchain

MAX_OUTPUT = 32 * 2**20
"""The most of a command's stdout and of its stderr returned to Harbor (agents' logs)."""
DEFAULT_MEMORY_MB = 2048


class RockOptions(EnvironmentOptions):
    """``--environment-kwarg`` options of the rock environment."""

    url: str | None = None
    """The daemon's URL; default: ``$ROCK_URL``, else the rock home's ``daemon.json``."""
    home: str | None = None
    """The rock home whose token (and daemon) to use; default: ``$ROCK_HOME`` or ``~/.rock``."""
    runtime: Literal["runc", "runsc"] = "runc"
    """The container runtime of the sandboxes (``runsc``: gVisor)."""
    stand_ins: bool | None = None
    """rock's offline stand-ins on every command's PATH; default: when the network is
    closed."""


class RockEnvironment(BaseEnvironment):
    """One Harbor trial environment as one rock sandbox."""

    options_model = RockOptions
    options: RockOptions

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._client: AsyncClient | None = None
        self._box: AsyncSandbox | None = None
        self._path = ""
        """What every command puts first on its PATH (the stand-ins' folder, when given)."""

    @staticmethod
    def type() -> str:
        return "rock"

    @classmethod
    def resource_capabilities(cls) -> EnvironmentResourceCapabilities:
        return EnvironmentResourceCapabilities(
            cpu_limit=True, memory_limit=True, fractional_cpus=True
        )

    @property
    def capabilities(self) -> EnvironmentCapabilities:
        return EnvironmentCapabilities(disable_internet=True, dynamic_network_policy=True)

    def _validate_definition(self) -> None:
        require_agent_environment_definition(
            self.environment_dir, docker_image=self.task_env_config.docker_image
        )
        if not self.task_env_config.docker_image and not self._dockerfile.is_file():
            raise ValueError(
                f"the rock environment builds {self.environment_dir.name}/Dockerfile, and "
                "this task has none (compose environments are not served); give the task a "
                "Dockerfile or a docker_image."
            )

    @property
    def _dockerfile(self) -> Path:
        return self.environment_dir / "Dockerfile"

    # -- life --------------------------------------------------------------------------
    async def start(self, force_build: bool) -> None:
        home = Path(self.options.home).expanduser() if self.options.home else None
        self._client = AsyncClient(self.options.url, home=home)
        image = self.task_env_config.docker_image
        if not image:
            try:
                built = await self._client.build_image(
                    self.environment_dir, name=self.environment_name
                )
            except ImageBuildError as exc:
                raise SandboxBuildFailedError(str(exc)) from None
            image = built.tag
        public = [self._network_policy, *self._phase_network_policies]
        opened = any(p.network_mode == NetworkMode.PUBLIC for p in public)
        spec = SandboxSpec(
            image=image,
            cpus=float(self._effective_cpus or 1),
            memory_mb=int(self._effective_memory_mb or DEFAULT_MEMORY_MB),
            network="bridge" if opened else "none",
            runtime=self.options.runtime,
            workdir=self.task_env_config.workdir,
            env=dict(self._startup_env()),
            labels={"dev.ale.rock.harbor.session": self.session_id[:60]},
        )
        self._box = await self._client.create(spec=spec, use_pools=False)
        try:
            if opened and self._network_policy.network_mode != NetworkMode.PUBLIC:
                await self._box.set_network(False)  # a later phase opens it
            wanted = self.options.stand_ins
            if wanted or (wanted is None and not opened):
                await self._box.put_archive(
                    toolchain.TOOLCHAIN_DIR, await asyncio.to_thread(toolchain.archive)
                )
                await self._box.exec(toolchain.PTH_SETUP, timeout=60)
                self._path = f'export PATH="{toolchain.TOOLCHAIN_DIR}/bin:$PATH"; '
            await self.ensure_dirs(self._mount_targets(writable_only=True))
            await self._upload_environment_dir_after_start()
        except BaseException:
            await self.stop(delete=True)
            raise

    async def stop(self, delete: bool) -> None:
        box, client = self._box, self._client
        self._box = self._client = None
        try:
            if box is not None and delete:
                await box.delete()
        finally:
            if client is not None:
                await client.aclose()

    async def _apply_network_policy(self, network_policy: NetworkPolicy) -> None:
        await self._sandbox().set_network(network_policy.network_mode == NetworkMode.PUBLIC)

    # -- commands and files --------------------------------------------------------------
    async def exec(
        self,
        command: str,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        timeout_sec: int | None = None,
        user: str | int | None = None,
    ) -> ExecResult:
        who = self._resolve_user(user)
        done = await self._sandbox().run(
            ExecRequest(
                command=["bash", "-c", self._path + command],
                cwd=cwd or self.task_env_config.workdir,
                env=self._merge_env(env) or {},
                timeout=float(timeout_sec) if timeout_sec else None,
                user=None if who is None else str(who),
                max_output_bytes=MAX_OUTPUT,
            )
        )
        if done.timed_out:  # as Harbor's docker environment reports it
            raise RuntimeError(f"Command timed out after {timeout_sec} seconds")
        return ExecResult(
            stdout=done.stdout_text, stderr=done.stderr_text, return_code=done.exit_code
        )

    async def upload_file(self, source_path: Path | str, target_path: str) -> None:
        await self._sandbox().upload(Path(source_path), target_path)

    async def upload_dir(self, source_dir: Path | str, target_dir: str) -> None:
        await self._sandbox().upload(Path(source_dir), target_dir)

    async def download_file(self, source_path: str, target_path: Path | str) -> None:
        await self._sandbox().download(source_path, Path(target_path))

    async def download_dir(self, source_dir: str, target_dir: Path | str) -> None:
        await self._sandbox().download(source_dir, Path(target_dir))

    def _sandbox(self) -> AsyncSandbox:
        if self._box is None:
            raise RuntimeError("the rock environment is not started; call start() first.")
        return self._box
