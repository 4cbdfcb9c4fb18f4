"""Checkpoints and rewind: files and conversation back to before a turn, on this machine and
inside a rock sandbox, from the agent, the TUI and ``iflow --resume --rewind N``."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from iflow.checkpoints import RewindError
from iflow.errors import WorkspaceError
from iflow.models.scripted import ScriptedModel
from iflow.runner import build_agent
from iflow.sessions import SessionStore
from iflow.settings import Settings
from iflow.workspace import LocalWorkspace, Workspace


def shell(command: str) -> dict[str, Any]:
    return {"tool_calls": [{"name": "run_shell_command", "arguments": {"command": command}}]}


def write(path: str, content: str) -> dict[str, Any]:
    return {"tool_calls": [{"name": "write_file", "arguments": {"path": path, "content": content}}]}


def finish() -> dict[str, Any]:
    return {"tool_calls": [{"name": "finish", "arguments": {"summary": "done"}}]}


SCRIPT = [
    write("a.txt", "one\n"),
    finish(),
    shell("echo two > a.txt && echo new > b.txt && rm c.txt && mkdir -p d && echo deep > d/e.txt"),
    finish(),
    shell("echo third > a.txt"),
    finish(),
]


async def three_turns(workspace: Workspace, tmp_path: Path):  # type: ignore[no-untyped-def]
    store = SessionStore(tmp_path / "sessions")
    agent, recorder = build_agent(
        Settings(provider="scripted", approval_mode="yolo"),
        workspace,
        cwd=tmp_path,
        home=tmp_path,
        headless=True,
        model=ScriptedModel(SCRIPT),
        store=store,
        memory=False,
    )
    for prompt in ("make a", "change things", "a third time"):
        await agent.run(prompt)
    return agent, recorder


async def read(workspace: Workspace, name: str) -> str | None:
    try:
        return (await workspace.read_bytes(f"{workspace.root}/{name}")).decode()
    except WorkspaceError:
        return None


async def check_rewinds(workspace: Workspace, tmp_path: Path) -> None:
    await workspace.write_bytes(f"{workspace.root}/c.txt", b"keep me\n")
    agent, _ = await three_turns(workspace, tmp_path)
    assert await read(workspace, "a.txt") == "third\n" and await read(workspace, "b.txt") == "new\n"
    assert [t.number for t in agent.checkpoints.turns] == [1, 2, 3]
    report = await agent.rewind(2)
    assert await read(workspace, "a.txt") == "one\n"  # as turn 2 found it
    assert await read(workspace, "c.txt") == "keep me\n"  # removed in turn 2, back
    assert await read(workspace, "b.txt") is None and await read(workspace, "d/e.txt") is None
    assert sorted(report.removed) == ["b.txt", "d/e.txt"] and "a.txt" in report.written
    prompts = [s.content for s in agent.history if s.role.value == "user"]
    assert prompts == ["make a"]  # the conversation is back before turn 2's prompt
    assert [t.number for t in agent.checkpoints.turns] == [1]
    await agent.rewind(1)
    assert await read(workspace, "a.txt") is None and await read(workspace, "c.txt") == "keep me\n"
    assert [s.role.value for s in agent.history] == ["system"]
    with pytest.raises(RewindError, match="there is no turn to rewind to yet"):
        await agent.rewind(1)
    await agent.aclose()


async def test_rewind_on_this_machine(tmp_path: Path) -> None:
    (tmp_path / "ws").mkdir()
    async with LocalWorkspace(tmp_path / "ws") as ws:
        await check_rewinds(ws, tmp_path)


@pytest.mark.docker
async def test_rewind_inside_a_rock_sandbox(docker_sandbox: Any, tmp_path: Path) -> None:
    from iflow.workspace.sandbox import SandboxWorkspace

    root = f"/work/rw-{secrets.token_hex(4)}"
    docker_sandbox.exec(["mkdir", "-p", root])
    await check_rewinds(SandboxWorkspace(docker_sandbox, root), tmp_path)


async def test_a_turn_number_that_is_not_there_is_one_sentence(tmp_path: Path) -> None:
    (tmp_path / "ws").mkdir()
    async with LocalWorkspace(tmp_path / "ws") as ws:
        agent, _ = await three_turns(ws, tmp_path)
        for number in (0, 4):
            with pytest.raises(
                RewindError, match=r"there is no turn \d to rewind to; .* turns 1 to 3"
            ):
                await agent.rewind(number)
        await agent.aclose()


class Unreadable(LocalWorkspace):
    """A workspace where one file cannot be read (what a permission or a race does)."""

    async def read_bytes(self, path: str) -> bytes:
        if path.endswith("secret.bin"):
            raise WorkspaceError(f"{path} cannot be read: permission denied.")
        return await super().read_bytes(path)


async def test_a_file_that_cannot_be_read_is_named_and_left_alone(tmp_path: Path) -> None:
    (tmp_path / "ws").mkdir()
    (tmp_path / "ws" / "secret.bin").write_bytes(b"\x00 before")
    async with Unreadable(tmp_path / "ws") as ws:
        agent, _ = await three_turns(ws, tmp_path)
        assert agent.checkpoints.turns[0].skipped == ["secret.bin"]
        (tmp_path / "ws" / "secret.bin").write_bytes(b"changed after")
        report = await agent.rewind(1)
        assert report.skipped == ["secret.bin"]
        assert (tmp_path / "ws" / "secret.bin").read_bytes() == b"changed after"  # untouched
        assert not (tmp_path / "ws" / "a.txt").exists()
        await agent.aclose()


def test_headless_resume_with_rewind(tmp_path: Path) -> None:
    work, home = tmp_path / "work", tmp_path / "home"
    work.mkdir()
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("IFLOW_", "OPENAI_"))}
    env["HOME"] = str(home)

    def iflow(*args: str, script: list[Any]) -> subprocess.CompletedProcess[str]:
        path = tmp_path / f"s-{secrets.token_hex(3)}.json"
        path.write_text(json.dumps(script))
        return subprocess.run(
            [sys.executable, "-m", "iflow.cli", "--provider", "scripted", "--script", str(path),
             "-y", *args],
            env=env, cwd=work, capture_output=True, text=True, timeout=120,
            stdin=subprocess.DEVNULL,  # (not the test runner's: iflow reads a piped stdin)
        )  # fmt: skip

    assert iflow("-p", "first", script=[write("f.txt", "1\n"), finish()]).returncode == 0
    second = iflow("--resume", "-p", "second", script=[shell("echo 2 > f.txt"), finish()])
    assert second.returncode == 0, second.stderr
    assert (work / "f.txt").read_text() == "2\n"
    again = iflow("--resume", "--rewind", "2", "-p", "second, again", script=[finish()])
    assert again.returncode == 0, again.stderr
    assert "rewound to before turn 2: 1 file(s) restored, 0 removed" in again.stderr
    assert (work / "f.txt").read_text() == "1\n"
    data, _ = SessionStore(home / ".iflow" / "sessions").latest()
    prompts = [s.content for s in data.history if s.role.value == "user"]
    assert prompts == ["first", "second, again"]
    past = iflow("--resume", "--rewind", "9", "-p", "x", script=[finish()])
    assert past.returncode != 0 and "there is no turn 9 to rewind to" in past.stderr
    assert "Traceback" not in past.stderr
    alone = iflow("--rewind", "1", "-p", "x", script=[finish()])
    assert alone.returncode != 0 and "give --resume" in alone.stderr


async def test_the_tui_lists_turns_and_rewinds(tmp_path: Path) -> None:
    from test_tui import blocks, run_prompt, tui, wait_for

    responses = [write("t.txt", "v1\n"), finish(), shell("echo v2 > t.txt"), finish()]
    async with tui(tmp_path, responses, mode="yolo") as (app, pilot):
        await run_prompt(pilot, "create t")
        await run_prompt(pilot, "bump t")
        assert (tmp_path / "ws" / "t.txt").read_text() == "v2\n"
        app.prompt_input.value = "/rewind"
        await pilot.press("enter")
        await wait_for(pilot, lambda: blocks(app, "rewind"))
        listing = blocks(app, "rewind")[-1]
        assert "1  create t  files checkpointed" in listing and "2  bump t" in listing
        app.prompt_input.value = "/rewind 2"
        await pilot.press("enter")
        await wait_for(pilot, lambda: app.prompt_input.value == "bump t")
        assert app.prompt_input.cursor_position == len("bump t")  # typing goes on at its end
        assert (tmp_path / "ws" / "t.txt").read_text() == "v1\n"


async def test_rewind_shows_prompts_as_typed(tmp_path: Path) -> None:
    """Seen with a real model in the TUI: the list showed a pasted stack trace's lines and an
    @file prompt's attached file (``<file ...``) as turns of their own, and /rewind put the
    attached file's text back into the input. Now one line a turn, the prompt as typed."""
    from test_tui import blocks, run_prompt, tui, wait_for

    async with tui(tmp_path, [finish(), finish()], mode="yolo") as (app, pilot):
        (tmp_path / "ws" / "a.py").write_text("print('a')\n")
        await run_prompt(pilot, "explain @a.py")
        app.prompt_input.value = "why?\nTraceback (most recent call last):\nValueError"
        await pilot.press("enter")
        await wait_for(pilot, lambda: not app.busy and app.runs == 2)
        app.prompt_input.value = "/rewind"
        await pilot.press("enter")
        await wait_for(pilot, lambda: blocks(app, "rewind"))
        listing = blocks(app, "rewind")[-1]
        assert len(listing.splitlines()) == 3, listing
        assert "1  explain @a.py" in listing and "2  why? …" in listing
        assert "<file" not in listing and "Traceback" not in listing
        app.prompt_input.value = "/rewind 1"
        await pilot.press("enter")
        await wait_for(pilot, lambda: app.prompt_input.value == "explain @a.py")
