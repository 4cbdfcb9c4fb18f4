"""Wiring shared by every surface: settings -> model, workspace, memory, agent, session.

The TUI, headless runs and the ``ale.agents`` entry point all build their agent here,
so the system prompt, tools and context engineering are the same everywhere.
"""

from __future__ import annotations

import asyncio
import importlib
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ale.trajectory import Role, Step
from iflow.agent import Agent
from iflow.approval import Approver
from iflow.checkpoints import Checkpoints
from iflow.config import AgentConfig
from iflow.context.memory import load_memory, render_memory
from iflow.events import EventSink
from iflow.hooks import HookRunner
from iflow.models import make_model
from iflow.models.base import Model
from iflow.sessions import SessionData, SessionStore, clip_title, sessions_root
from iflow.settings import Settings
from iflow.workspace.base import Workspace

if TYPE_CHECKING:
    from iflow.mcp.hub import McpHub


async def start_mcp(settings: Settings, *, cwd: Path, home: Path) -> McpHub | None:
    """The settings' MCP servers, connected (None when there are none). Servers that failed
    are in the hub's :meth:`~iflow.mcp.hub.McpHub.failures`; their logs in
    ``<home>/.iflow/logs``. The SDK is imported only here: a session without MCP does not
    pay for it."""
    if not settings.mcp_servers:
        return None
    hub_module: Any = await asyncio.to_thread(importlib.import_module, "iflow.mcp.hub")
    hub: McpHub = hub_module.McpHub(settings.mcp_servers, cwd=cwd, log_dir=home / ".iflow" / "logs")
    await hub.connect()
    return hub


def agent_config(settings: Settings, *, headless: bool) -> AgentConfig:
    """The agent's limits and behaviour from settings."""
    return AgentConfig(
        max_turns=settings.max_turns,
        max_tokens=settings.max_tokens,
        max_wall_sec=settings.max_wall_sec,
        max_cost_usd=settings.max_cost_usd,
        compress_threshold=settings.compress_threshold,
        keep_recent_turns=max(1, settings.keep_recent_turns),
        loop_threshold=settings.loop_threshold,
        approval_mode=settings.approval_mode,
        headless=headless,
        tool_output_limit=max(1000, settings.tool_output_limit),
        prompt_profile=settings.prompt_profile,
    )


def model_from(settings: Settings) -> Model:
    """The model the settings name; a :class:`ConfigError` naming what is missing."""
    uncapped = "max_output_tokens" in settings.model_fields_set and (
        settings.max_output_tokens is None
    )  # "maxOutputTokens": null: no cap is sent
    model = make_model(
        settings.provider,
        model=settings.model,
        base_url=settings.base_url,
        api_key=settings.api_key.get_secret_value() if settings.api_key else None,
        model_path=settings.model_path,
        script=settings.script,
        context_limit=settings.context_limit,
        temperature=settings.temperature,
        max_tokens=settings.max_output_tokens,
        tool_format=settings.tool_format,
        **({"call_timeout": settings.model_timeout_sec} if settings.model_timeout_sec else {}),
    )
    if uncapped and hasattr(model, "max_tokens"):
        model.max_tokens = None
    return model


@dataclass
class SessionRecorder:
    """Saves the agent's session after every turn (the agent's ``after_turn`` hook).

    The first save, and any save after the history was rewritten (compression, a mode
    change, a resume), writes a whole snapshot; every other save appends the new steps
    and the changed state to the session's journal, so a turn costs the same to save at
    turn 200 as at turn 2.
    """

    store: SessionStore
    data: SessionData
    saves: int = 0
    _history: list[Step] | None = None
    _head: Step | None = None
    _saved_history: int = 0
    _saved_steps: int = 0

    async def __call__(self, agent: Agent) -> None:
        await asyncio.to_thread(self.save, agent)

    def save(self, agent: Agent) -> None:
        history, steps = agent.history, agent.trajectory.steps
        state = agent.state()
        session = {
            "todos": state["todos"],
            "turns": state["turns"],
            "tokens_used": state["tokens_used"],
            "extra": state["extra"],
            "approval_mode": agent.policy.mode,
            "model": agent.model.name,
        }
        if not self.data.title:
            first = next((s.content for s in steps if s.role is Role.USER), "")
            session["title"] = clip_title(first)
        grown = len(history) - self._saved_history
        appendable = self._appendable(history, steps, grown)
        for name, value in session.items():
            setattr(self.data, name, value)
        self.data.history = history
        self.data.trajectory = agent.trajectory
        if appendable:
            new = steps[len(steps) - grown :] if grown else []
            self.store.append(self.data.id, _journal_records(agent, session, new))
        else:
            self.store.save(self.data)
        self._history, self._head = history, (history[0] if history else None)
        self._saved_history, self._saved_steps = len(history), len(steps)
        self.saves += 1

    def _appendable(self, history: list[Step], steps: list[Step], grown: int) -> bool:
        """Whether the last save's history only grew since, by the same steps as the
        trajectory: then the journal takes the new steps, else a whole snapshot is saved."""
        return (
            self.saves > 0
            and history is self._history
            and bool(history)
            and history[0] is self._head
            and grown == len(steps) - self._saved_steps
            and all(
                a is b
                for a, b in zip(
                    history[len(history) - grown :], steps[len(steps) - grown :], strict=True
                )
            )
        )


def _journal_records(
    agent: Agent, session: dict[str, Any], new: list[Step]
) -> list[dict[str, Any]]:
    """What a save appends to the session's journal: the new steps (when any), then the
    session's and the trajectory's changed state."""
    records: list[dict[str, Any]] = []
    if new:
        records.append(
            {
                "kind": "steps",
                "steps": [s.model_dump(mode="json", exclude_none=True) for s in new],
            }
        )
    t = agent.trajectory
    records.append(
        {
            "kind": "state",
            "session": {**session, "updated_at": datetime.now(UTC).isoformat()},
            "trajectory": {
                "failure_mode": t.failure_mode.value if t.failure_mode else None,
                "usage": t.usage.model_dump(mode="json") if t.usage else None,
                "timings": t.timings.model_dump(mode="json") if t.timings else None,
                "extra": t.extra,
            },
        }
    )
    return records


def build_agent(
    settings: Settings,
    workspace: Workspace,
    *,
    cwd: Path,
    home: Path,
    headless: bool,
    approver: Approver | None = None,
    on_event: EventSink | None = None,
    model: Model | None = None,
    store: SessionStore | None = None,
    resume: SessionData | None = None,
    memory: bool = True,
    mcp: McpHub | None = None,
    skills: str = "",
) -> tuple[Agent, SessionRecorder | None]:
    """An agent for ``workspace``; with ``store`` its session is saved after every turn
    (resuming ``resume`` when given); with ``mcp`` (:func:`start_mcp`) it gets the tools of
    those servers and stops them when it closes; ``skills`` (:func:`iflow.skills.render_skills`)
    goes into the system prompt after the memory files."""
    mem = render_memory(load_memory(cwd, home)) if memory else ""
    mem = "\n\n".join(part for part in (mem, skills) if part)
    agent = Agent(
        model or model_from(settings),
        workspace,
        config=agent_config(settings, headless=headless),
        approver=approver,
        on_event=on_event,
        memory=mem,
        mcp=mcp,
        hooks=HookRunner(settings.hooks, cwd=cwd) if settings.hooks else None,
    )
    recorder: SessionRecorder | None = None
    if store is not None:
        recorder = _record_session(agent, settings, workspace, cwd, store, resume)
    if agent.hooks is not None:  # (hooks read the conversation as a transcript file)
        agent.hooks.transcript = lambda: agent.history
        agent.hooks.transcript_dir = agent.hooks.transcript_dir or (
            sessions_root(settings, home) / "transcripts"
        )
    return agent, recorder


def _record_session(
    agent: Agent,
    settings: Settings,
    workspace: Workspace,
    cwd: Path,
    store: SessionStore,
    resume: SessionData | None,
) -> SessionRecorder:
    """Give ``agent`` a saved session (``resume``, restored into it, or a new one): a
    recorder saving it after every turn, file checkpoints, and the session's id for hooks."""
    if resume is not None:
        agent.restore(
            history=resume.history,
            trajectory=resume.trajectory,
            todos=resume.todos,
            turns=resume.turns,
            tokens_used=resume.tokens_used,
            extra=resume.extra,
        )
        data = resume
    else:
        data = SessionData(
            id=store.new_id(),
            cwd=str(cwd),
            model=agent.model.name,
            provider=settings.provider,
            approval_mode=settings.approval_mode,
        )
    recorder = SessionRecorder(store, data)
    agent.after_turn = recorder
    agent.checkpoints = Checkpoints(workspace, store.root / f"{data.id}.checkpoints")
    if agent.hooks is not None:
        agent.hooks.session_id = data.id
        agent.hooks.transcript_dir = store.root / "transcripts"
    return recorder


async def build_agent_owning(
    settings: Settings, workspace: Workspace, *, mcp: McpHub | None, **options: Any
) -> tuple[Agent, SessionRecorder | None]:
    """:func:`build_agent` for an agent that takes ``mcp`` over; when the agent cannot be
    built, the servers are stopped here rather than left running."""
    try:
        return build_agent(settings, workspace, mcp=mcp, **options)
    except BaseException:
        if mcp is not None:
            await mcp.aclose()
        raise
