"""Starting the TUI for ``iflow`` without ``-p``: the app in a local workspace of the
current directory until the person quits, and the agent it built closed after it."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import TYPE_CHECKING

from iflow.tui.app import IflowApp
from iflow.workspace.local import LocalWorkspace

if TYPE_CHECKING:
    from iflow.sessions import SessionData, SessionStore
    from iflow.settings import Settings


def run_tui(
    settings: Settings,
    *,
    cwd: Path,
    home: Path,
    store: SessionStore | None,
    resume: SessionData | None,
) -> int:
    """Open the TUI in ``cwd`` until the person quits; returns the exit code."""
    return asyncio.run(_run_tui(settings, cwd=cwd, home=home, store=store, resume=resume))


async def _run_tui(
    settings: Settings,
    *,
    cwd: Path,
    home: Path,
    store: SessionStore | None,
    resume: SessionData | None,
) -> int:
    async with LocalWorkspace(cwd) as workspace:
        app = IflowApp(
            settings=settings,
            workspace=workspace,
            cwd=cwd,
            home=home,
            store=store,
            resume=resume,
        )
        try:
            await app.run_async()
        finally:
            if app.agent is not None:
                await app.agent.aclose()
    return app.return_code or 0
