"""Custom slash commands from .iflow/commands and ~/.iflow/commands: found, expanded, run from
the TUI and from ``iflow -p``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from iflow.custom_commands import expand_line, load_commands
from iflow.sessions import SessionStore
from iflow.settings import Settings
from iflow.workspace import LocalWorkspace

REVIEW = """---
description: Review a file for bugs
argument-hint: FILE [FOCUS]
---
Review $1 carefully, looking at $2. (asked: $ARGUMENTS)
"""


def commands(root: Path, home: Path) -> None:
    project = root / ".iflow" / "commands"
    (project / "git").mkdir(parents=True)
    (project / "review.md").write_text(REVIEW)
    (project / "git" / "commit.md").write_text("Write a commit message for the staged changes.\n")
    user = home / ".iflow" / "commands"
    user.mkdir(parents=True)
    (user / "review.md").write_text("the user's review, shadowed by the project's\n")
    (user / "explain.md").write_text("Explain this code.\n")


def test_commands_are_found_named_and_expanded(tmp_path: Path) -> None:
    root, home = tmp_path / "repo", tmp_path / "home"
    (root / "src").mkdir(parents=True)
    (root / ".git").mkdir()
    commands(root, home)
    found = load_commands(root / "src", home)  # found from a subdirectory too
    assert set(found) == {"review", "git:commit", "explain"}
    review = found["review"]
    assert (review.description, review.argument_hint) == ("Review a file for bugs", "FILE [FOCUS]")
    assert review.expand("app.py 'error handling'") == (
        "Review app.py carefully, looking at error handling. (asked: app.py 'error handling')"
    )
    assert found["explain"].expand("the parser") == "Explain this code.\n\nthe parser"
    assert (
        expand_line("/git:commit", root, home) == "Write a commit message for the staged changes."
    )
    assert expand_line("/nope x", root, home) is None and expand_line("plain", root, home) is None


async def test_the_tui_runs_a_custom_command_and_lists_it_in_help(tmp_path: Path) -> None:
    from test_tui import blocks, run_prompt, wait_for

    from iflow.tui.app import IflowApp

    root, home = tmp_path / "repo", tmp_path / "home"
    root.mkdir()
    commands(root, home)
    script = tmp_path / "s.json"
    script.write_text(json.dumps(["Looked."]))
    settings = Settings(provider="scripted", script=str(script))
    async with LocalWorkspace(root) as workspace:
        app = IflowApp(settings=settings, workspace=workspace, cwd=root, home=home)
        async with app.run_test(size=(120, 40)) as pilot:
            await wait_for(pilot, lambda: app.agent is not None)
            await run_prompt(pilot, "/review main.py speed")
            assert app.agent is not None
            prompts = [s.content for s in app.agent.trajectory.steps if s.role.value == "user"]
            assert prompts == ["Review main.py carefully, looking at speed. (asked: main.py speed)"]
            app.prompt_input.value = "/help"
            await pilot.press("enter")
            await wait_for(pilot, lambda: blocks(app, "help"))
            assert "/review FILE [FOCUS] Review a file for bugs" in blocks(app, "help")[-1]
        await app.agent.aclose()


def test_headless_expands_a_custom_command(tmp_path: Path) -> None:
    root, home = tmp_path / "repo", tmp_path / "home"
    root.mkdir()
    commands(root, home)
    script = tmp_path / "s.json"
    script.write_text(json.dumps(["Done."]))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("IFLOW_", "OPENAI_"))}
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "iflow.cli",
            "-p",
            "/git:commit",
            "--provider",
            "scripted",
            "--script",
            str(script),
        ],
        env={**env, "HOME": str(home)},
        cwd=root,
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,  # (iflow reads a piped stdin)
    )
    assert r.returncode == 0, r.stderr
    data, _ = SessionStore(home / ".iflow" / "sessions").latest()
    prompt = next(s.content for s in data.trajectory.steps if s.role.value == "user")
    assert prompt == "Write a commit message for the staged changes."
