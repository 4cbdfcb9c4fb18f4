"""The TUI tests' pilot: an app on a scripted agent in a real local workspace, and what
they read off its screen."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from textual.pilot import Pilot
from textual.widgets import Static

from iflow.models.scripted import ScriptedModel
from iflow.runner import build_agent
from iflow.sessions import SessionStore
from iflow.settings import Settings
from iflow.tui.app import IflowApp
from iflow.tui.assistant import AssistantView
from iflow.tui.widgets import NoticeLine, ToolPanel
from iflow.workspace.local import LocalWorkspace


def shell(command: str, content: str = "") -> dict[str, Any]:
    return {
        "content": content,
        "tool_calls": [{"name": "run_shell_command", "arguments": {"command": command}}],
    }


@asynccontextmanager
async def tui(
    tmp_path: Path,
    responses: list[Any],
    *,
    mode: str = "default",
    folder: str = "ws",
    **settings: Any,
) -> AsyncIterator[tuple[IflowApp, Pilot[int]]]:
    """An app on a scripted agent working in ``tmp_path/ws`` (or ``folder``), sessions in
    ``tmp_path/sessions``."""
    root = tmp_path / folder
    root.mkdir(exist_ok=True)
    config = Settings(provider="scripted", approval_mode=mode, **settings)
    store = SessionStore(tmp_path / "sessions")
    async with LocalWorkspace(root) as workspace:
        agent, recorder = build_agent(
            config,
            workspace,
            cwd=root,
            home=tmp_path,
            headless=False,
            model=ScriptedModel(responses),
            store=store,
        )
        app = IflowApp(
            agent=agent, recorder=recorder, store=store, settings=config, cwd=root, home=tmp_path
        )
        try:
            async with app.run_test(size=(110, 40)) as pilot:
                await pilot.pause()
                yield app, pilot
        finally:
            await agent.aclose()


async def wait_for(pilot: Pilot[int], condition: Callable[[], object], limit: float = 30) -> None:
    deadline = time.monotonic() + limit
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting after {limit} s")
        await pilot.pause(0.02)


async def send(pilot: Pilot[int], text: str) -> None:
    app = pilot.app
    assert isinstance(app, IflowApp)
    app.prompt_input.value = text
    await pilot.press("enter")
    await pilot.pause()


def ends(app: IflowApp) -> list[str]:
    return [str(w.content) for w in app.query(".run-end").results(Static)]


async def run_prompt(pilot: Pilot[int], text: str) -> str:
    """Send a prompt and wait for its run to end; the end line."""
    app = pilot.app
    assert isinstance(app, IflowApp)
    before = len(ends(app))
    await send(pilot, text)
    await wait_for(pilot, lambda: len(ends(app)) > before and not app.busy)
    return ends(app)[-1]


def panels(app: IflowApp) -> list[ToolPanel]:
    return list(app.query(ToolPanel))


def notices(app: IflowApp) -> list[str]:
    return [n.text for n in app.query(NoticeLine)]


def blocks(app: IflowApp, cls: str) -> list[str]:
    return [str(w.content) for w in app.query(f".{cls}").results(Static)]


def texts(app: IflowApp) -> list[str]:
    return [v.text for v in app.query(AssistantView)]
