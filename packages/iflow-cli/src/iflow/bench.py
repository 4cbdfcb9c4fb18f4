"""The ``ale.agents`` entry point ``iflow``: the agent as harnesses (rock bench, synthesis,
rollouts) run it, on a rock sandbox, headless and in yolo mode.

``IflowAgent(model=..., **kwargs)`` takes the harness's ``--model`` and ``--agent-kwarg``
pairs: any setting of :class:`iflow.settings.Settings` (provider, base_url, api_key,
model_path, max_turns, context_limit, temperature...). Settings files and ``IFLOW_*``
variables of the machine running the harness apply below them.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ale.agents import AgentConfigError, TaskContext
from ale.sandbox import Attachable, SandboxVerbs
from ale.trajectory import Trajectory
from iflow.errors import ConfigError
from iflow.mcp.config import McpServerConfig
from iflow.models import check_model
from iflow.models.base import Model
from iflow.runner import build_agent_owning
from iflow.settings import Settings, load_settings
from iflow.skills import find_skills, render_skills

if TYPE_CHECKING:
    from iflow.mcp.hub import McpHub


class IflowAgent:
    """The iflow agent for harnesses."""

    name = "iflow"

    def __init__(
        self,
        model: str | None = None,
        *,
        model_obj: Model | None = None,
        expert: Any = None,
        replay: Trajectory | None = None,
        **kwargs: Any,
    ) -> None:
        """``expert`` (an :class:`ale.synth.expert.ExpertRun`) makes the agent act as that
        expert (synthesis); ``replay`` (a recorded trajectory) makes it issue that
        trajectory's calls again (execution replay). Either replaces the settings' model."""
        self.settings = self.settings_for(model, **kwargs)
        if expert is not None:
            from iflow.models.expert import ExpertModel

            model_obj = ExpertModel(expert)
        elif replay is not None:
            from iflow.models.expert import replay_script
            from iflow.models.scripted import ScriptedModel

            model_obj = ScriptedModel(replay_script(replay.steps), name=replay.model or "replay")
        self._model = model_obj
        """A model object to use instead of building one from settings (trainers, tests)."""

    def check(self) -> None:
        """Whether the agent can start (harnesses ask before their first trial): the model
        its settings name must be one that can be built; an :class:`AgentConfigError` of one
        sentence otherwise."""
        if self._model is not None:
            return
        settings = self.settings
        try:
            check_model(
                settings.provider,
                model=settings.model,
                model_path=settings.model_path,
                script=settings.script,
            )
        except ConfigError as exc:
            raise AgentConfigError(f"iflow cannot start: {exc}") from None

    @staticmethod
    def settings_for(model: str | None = None, **kwargs: Any) -> Settings:
        """The settings the agent runs with for these arguments (an
        :class:`iflow.errors.ConfigError` for a bad one); no model is needed yet."""
        flags = {"model": model, **kwargs, "approval_mode": "yolo"}
        return load_settings(cwd=Path.cwd(), env=os.environ, flags=flags)

    async def run(
        self,
        instruction: str,
        sandbox: SandboxVerbs,
        *,
        logs_dir: Path | None = None,
        timeout_sec: float | None = None,
        root: str | None = None,
        context: TaskContext | None = None,
    ) -> Trajectory:
        """Work on ``instruction`` inside ``sandbox`` (rock Sandbox verbs); return the
        trajectory. ``context`` (what the task gives its agent): its MCP servers' tools (a
        stdio server runs inside the sandbox), its skills in the system prompt, its prior
        conversation before the instruction."""
        from iflow.workspace.sandbox import SandboxWorkspace

        settings = self.settings
        if timeout_sec is not None:
            settings = settings.model_copy(update={"max_wall_sec": timeout_sec})
        workdir = root if root else await asyncio.to_thread(_workdir, sandbox)
        workspace = SandboxWorkspace(sandbox, root=workdir)
        context = context or TaskContext()
        skills = ""
        if context.skills_dir:
            skills = render_skills(await find_skills(workspace, context.skills_dir))
        mcp = await _task_mcp(context, sandbox, logs_dir)
        agent, _ = await build_agent_owning(
            settings,
            workspace,
            mcp=mcp,
            cwd=Path.cwd(),
            home=Path.home(),
            headless=True,
            model=self._model,
            memory=False,
            skills=skills,
        )
        if context.prior is not None:
            agent.seed(context.prior.steps)
        if context.prefix:
            agent.continue_from(context.prefix)
        if mcp is not None and mcp.failures():
            agent.trajectory.extra["mcp_failures"] = mcp.failures()
        try:
            await agent.run(instruction)
        finally:
            await agent.aclose()
        trajectory = agent.trajectory
        if logs_dir is not None:
            from ale.atif import write_atif
            from ale.jsonl import write_jsonl

            logs_dir.mkdir(parents=True, exist_ok=True)
            write_jsonl(logs_dir / "trajectory.jsonl", [trajectory])
            write_atif(trajectory, logs_dir / "trajectory.atif.json")
        return trajectory


async def _task_mcp(
    context: TaskContext, sandbox: SandboxVerbs, logs_dir: Path | None
) -> McpHub | None:
    """The task's MCP servers, connected: a stdio one inside the sandbox (when the sandbox
    can attach a program's streams, else it fails in one sentence), a URL one as it is."""
    if not context.mcp_servers:
        return None
    from iflow.mcp.hub import McpHub

    servers = {}
    for server in context.mcp_servers:
        if server.transport == "stdio":
            config = McpServerConfig(command=server.command, args=server.args)
        elif server.transport == "streamable-http":
            config = McpServerConfig(http_url=server.url, headers=server.headers)
        else:
            config = McpServerConfig(url=server.url, headers=server.headers)
        servers[server.name] = config
    launcher = sandbox.attach_argv if isinstance(sandbox, Attachable) else _cannot_attach
    hub = McpHub(servers, log_dir=logs_dir, launcher=launcher)
    await hub.connect()
    return hub


def _cannot_attach(argv: list[str]) -> list[str]:
    raise ConfigError(
        "this sandbox cannot attach a program's standard streams (a Docker sandbox can), so "
        "a stdio server cannot run in it"
    )


def _workdir(sandbox: SandboxVerbs) -> str:
    """The sandbox's working directory (the image's WORKDIR), ``/`` when it cannot be read."""
    try:
        result = sandbox.exec("pwd", timeout=30)
    except Exception:
        return "/"
    text = result.stdout.decode(errors="replace").strip() if result.exit_code == 0 else ""
    return text if text.startswith("/") else "/"
