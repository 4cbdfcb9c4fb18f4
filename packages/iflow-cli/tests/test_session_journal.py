"""Sessions saved after every turn as a journal: appends per turn, snapshots on rewrites."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from iflow.agent import Agent
from iflow.config import AgentConfig
from iflow.errors import SessionError
from iflow.models.scripted import ScriptedModel
from iflow.runner import SessionRecorder
from iflow.sessions import SessionData, SessionStore
from iflow.workspace.local import LocalWorkspace


def shell(command: str) -> dict:
    return {"tool_calls": [{"name": "run_shell_command", "arguments": {"command": command}}]}


def finish() -> dict:
    return {"tool_calls": [{"name": "finish", "arguments": {"summary": "done"}}]}


async def run_session(tmp_path: Path, script: list, **config) -> tuple[Agent, SessionStore, str]:
    store = SessionStore(tmp_path / "sessions")
    data = SessionData(id=store.new_id(), cwd=str(tmp_path))
    async with LocalWorkspace(tmp_path) as ws:
        agent = Agent(ScriptedModel(script), ws, config=AgentConfig(approval_mode="yolo", **config))
        agent.after_turn = SessionRecorder(store, data)
        await agent.run("first prompt")
        await agent.aclose()
    return agent, store, data.id


async def test_each_turn_appends_and_the_journal_reads_back(tmp_path: Path) -> None:
    agent, store, sid = await run_session(
        tmp_path, [shell("echo a"), shell("echo b"), shell("echo c"), finish()]
    )
    lines = store.path(sid).read_text().splitlines()
    kinds = [json.loads(line)["kind"] for line in lines]
    assert kinds[0] == "snapshot" and kinds.count("snapshot") == 1
    assert kinds.count("steps") == 3  # turns 2-4 (the end of the run adds only state)
    assert kinds[-1] == "state"
    loaded = store.load(sid)
    assert loaded.history == agent.history
    assert loaded.trajectory.steps == agent.trajectory.steps
    assert loaded.trajectory.failure_mode is None and loaded.trajectory.timings is not None
    assert loaded.turns == 4 and loaded.title == "first prompt"


async def test_compression_writes_a_fresh_snapshot(tmp_path: Path) -> None:
    big = "z" * 1200
    script = [shell(f"echo {big} {i}") for i in range(3)] + ["a summary", shell("echo d"), finish()]
    store = SessionStore(tmp_path / "sessions")
    data = SessionData(id=store.new_id(), cwd=str(tmp_path))
    async with LocalWorkspace(tmp_path) as ws:
        model = ScriptedModel(script)
        agent = Agent(model, ws, config=AgentConfig(approval_mode="yolo", keep_recent_turns=1))
        model.context_limit = int((agent.context_used() + 1500) / 0.8)
        agent.after_turn = SessionRecorder(store, data)
        await agent.run("go")
        await agent.aclose()
    assert any("summarised" in s.content for s in agent.history)
    loaded = store.load(data.id)
    assert loaded.history == agent.history
    assert loaded.trajectory.steps == agent.trajectory.steps
    kinds = [json.loads(x)["kind"] for x in store.path(data.id).read_text().splitlines()]
    assert kinds[0] == "snapshot" and kinds.count("snapshot") == 1  # the file was replaced


async def test_a_torn_last_line_is_ignored(tmp_path: Path) -> None:
    agent, store, sid = await run_session(tmp_path, [shell("echo a"), finish()])
    path = store.path(sid)
    path.write_text(path.read_text() + '{"kind":"steps","steps":[{"ro')
    assert store.load(sid).history == agent.history


async def test_a_broken_middle_line_is_a_clear_error(tmp_path: Path) -> None:
    _, store, sid = await run_session(tmp_path, [shell("echo a"), finish()])
    path = store.path(sid)
    lines = path.read_text().splitlines()
    lines[1] = "{broken"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(SessionError, match=r"line 2 is not JSON.*move or delete it"):
        store.load(sid)
