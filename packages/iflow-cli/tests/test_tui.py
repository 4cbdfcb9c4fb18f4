"""The TUI through Textual's pilot: a scripted model, a real local workspace, a real session
store. Waits poll a condition with a generous upper bound; nothing asserts on timing."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import struct
import subprocess
import sys
import termios
import threading
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from textual import events
from textual.pilot import Pilot
from textual.widgets import Button, Static

from ale.atif import read_atif
from ale.jsonl import read_jsonl
from iflow.models.scripted import ScriptedModel
from iflow.runner import build_agent
from iflow.sessions import SessionStore
from iflow.settings import Settings
from iflow.tui.app import IflowApp
from iflow.tui.assistant import AssistantView
from iflow.tui.widgets import NoticeLine, ToolPanel, UserMessage
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


async def test_prompt_shows_the_shell_call_with_output_exit_code_and_status(
    tmp_path: Path,
) -> None:
    responses = [shell("echo hello-from-tui", "Let me look."), "All **done**."]
    async with tui(tmp_path, responses, mode="yolo") as (app, pilot):
        end = await run_prompt(pilot, "say hello")
        assert "done" in end and "2 turns" in end
        assert [str(u.content) for u in app.query(UserMessage)] == ["› say hello"]
        (panel,) = panels(app)
        assert "echo hello-from-tui" in panel.call_title
        assert "hello-from-tui" in panel.output and panel.state == "ok"
        assert panel.exit_code == 0
        assert str(panel.meta_view.content).startswith("exit 0 · ")
        assert texts(app) == ["Let me look.", "All **done**."]
        status = app.status_bar.plain
        assert "scripted" in status and "mode yolo" in status and "turn 1 · 2 model calls" in status
        assert f"/{app.status_bar.tokens_text.split('/')[1]}" in status
        assert app.status_bar.limit == 32768 and "/32.8k (" in status
        assert app.status_bar.used == app.agent.context_used() > 0  # type: ignore[union-attr]


async def test_failing_command_is_styled_as_an_error(tmp_path: Path) -> None:
    async with tui(tmp_path, [shell("exit 3"), "It failed."], mode="yolo") as (app, pilot):
        await run_prompt(pilot, "fail")
        (panel,) = panels(app)
        assert panel.state == "error" and panel.exit_code == 3
        assert panel.has_class("-error") and "exit 3" in str(panel.meta_view.content)


async def test_approval_allow_once_runs_the_command_and_gives_focus_back(tmp_path: Path) -> None:
    async with tui(tmp_path, [shell("touch allowed.txt"), "Made it."]) as (app, pilot):
        await send(pilot, "make a file")
        await wait_for(pilot, lambda: app.approval_panel.display)
        question = str(app.query_one("#approval-detail", Static).content)
        assert "touch allowed.txt" in question
        assert app.busy and not (tmp_path / "ws" / "allowed.txt").exists()
        await pilot.press("y")
        await wait_for(pilot, lambda: ends(app) and not app.busy)
        assert (tmp_path / "ws" / "allowed.txt").exists()
        assert panels(app)[0].state == "ok"
        assert not app.approval_panel.display
        assert app.focused is app.prompt_input


async def test_approval_deny_shows_the_denial_and_the_run_goes_on(tmp_path: Path) -> None:
    async with tui(tmp_path, [shell("touch denied.txt"), "Understood."]) as (app, pilot):
        await send(pilot, "make a file")
        await wait_for(pilot, lambda: app.approval_panel.display)
        await pilot.press("n")
        await wait_for(pilot, lambda: ends(app) and not app.busy)
        (panel,) = panels(app)
        assert panel.state == "denied" and panel.has_class("-denied")
        assert "denied" in panel.output and "denied" in str(panel.meta_view.content)
        assert not (tmp_path / "ws" / "denied.txt").exists()
        assert texts(app)[-1] == "Understood."


async def test_approval_always_lets_the_same_command_root_run_without_asking(
    tmp_path: Path,
) -> None:
    responses = [shell("echo first"), shell("echo second"), "Both ran."]
    async with tui(tmp_path, responses) as (app, pilot):
        await send(pilot, "echo twice")
        await wait_for(pilot, lambda: app.approval_panel.display)
        await pilot.press("a")
        # A second question would leave the run waiting and this wait would fail.
        await wait_for(pilot, lambda: ends(app) and not app.busy)
        assert [p.state for p in panels(app)] == ["ok", "ok"]
        assert "second" in panels(app)[1].output
        assert "execute:echo" in app.agent.policy.always  # type: ignore[union-attr]


async def test_prompt_sent_during_a_run_is_queued_and_runs_next(tmp_path: Path) -> None:
    responses = [shell("echo waiting"), "First done.", "Second done."]
    async with tui(tmp_path, responses) as (app, pilot):
        await send(pilot, "first")
        await wait_for(pilot, lambda: app.approval_panel.display)
        app.prompt_input.focus()
        await send(pilot, "second")
        assert app.queue == ["second"] and any("Queued" in n for n in notices(app))
        app.approval_panel.focus()
        await pilot.press("escape")  # deny
        await wait_for(pilot, lambda: len(ends(app)) == 2 and not app.busy)
        assert [str(u.content) for u in app.query(UserMessage)] == ["› first", "› second"]
        assert texts(app)[-1] == "Second done."


@pytest.mark.parametrize("key", ["ctrl+c", "escape"])
async def test_interrupt_stops_a_running_command_and_the_session_goes_on(
    tmp_path: Path, key: str
) -> None:
    responses = [shell("sleep 30"), "Back again."]
    async with tui(tmp_path, responses, mode="yolo") as (app, pilot):
        await send(pilot, "wait a while")
        await wait_for(pilot, lambda: panels(app) and app.busy)
        await pilot.press(key)
        await wait_for(pilot, lambda: ends(app) and not app.busy)
        assert "interrupted" in ends(app)[-1]
        assert panels(app)[0].state == "error"
        assert app.is_running and app.focused is app.prompt_input
        end = await run_prompt(pilot, "go on")
        assert "done" in end and texts(app)[-1] == "Back again."


async def test_ctrl_c_twice_when_idle_quits(tmp_path: Path) -> None:
    async with tui(tmp_path, []) as (app, pilot):
        app.prompt_input.value = "draft"
        await pilot.press("ctrl+c")
        assert app.prompt_input.value == "" and app.is_running
        await pilot.press("ctrl+c")
        assert app.is_running
        await pilot.press("ctrl+c")
        await pilot.pause()
    assert app.return_code == 0


async def test_mode_command_changes_the_status_bar_and_the_agent(tmp_path: Path) -> None:
    async with tui(tmp_path, []) as (app, pilot):
        assert "mode default" in app.status_bar.plain
        await send(pilot, "/mode plan")
        await pilot.pause()
        assert app.agent is not None and app.agent.policy.mode == "plan"
        assert "mode plan" in app.status_bar.plain
        assert any("set to plan" in n for n in notices(app))
        await send(pilot, "/mode")
        assert "Approval mode: plan" in blocks(app, "info-block")[-1]
        await send(pilot, "/mode bogus")
        assert any("Unknown mode 'bogus'" in n for n in notices(app))


async def test_help_todo_model_and_unknown_commands(tmp_path: Path) -> None:
    async with tui(tmp_path, []) as (app, pilot):
        await send(pilot, "/help")
        (help_text,) = blocks(app, "help")
        for name in ("/clear", "/compress", "/mode", "/model", "/todo", "/save", "/resume"):
            assert name in help_text
        await send(pilot, "/todo")
        assert blocks(app, "todo") == ["The todo list is empty."]
        await send(pilot, "/model")
        assert "provider scripted" in blocks(app, "info-block")[-1]
        await send(pilot, "/frobnicate now")
        assert notices(app)[-1] == "Unknown command /frobnicate; type /help to see the commands."
        await send(pilot, "/clear")
        assert not blocks(app, "help") and not blocks(app, "todo")
        await send(pilot, "/help")
        await pilot.press("ctrl+l")
        await pilot.pause()
        assert not blocks(app, "help")


async def test_memory_lists_the_files_read_most_general_first(tmp_path: Path) -> None:
    """/memory: each file read into the prompt with its scope and size, a Claude Code
    user's CLAUDE.md among them; with none, where iflow looks."""
    async with tui(tmp_path, []) as (app, pilot):
        await send(pilot, "/memory")
        assert "No memory file was read" in blocks(app, "info-block")[-1]
    (tmp_path / ".claude").mkdir()
    (tmp_path / ".claude" / "CLAUDE.md").write_text("Prefer small commits.\n")
    (tmp_path / "ws").mkdir(exist_ok=True)
    (tmp_path / "ws" / "GEMINI.md").write_text("Run make test.\n")
    async with tui(tmp_path, []) as (app, pilot):
        await send(pilot, "/memory")
        listing = blocks(app, "info-block")[-1].splitlines()
        assert listing[1].split()[:2] == ["global", str(tmp_path / ".claude" / "CLAUDE.md")]
        assert listing[2].split()[:2] == ["project", str(tmp_path / "ws" / "GEMINI.md")]


async def test_an_at_path_is_completed_attached_and_shown_as_typed(tmp_path: Path) -> None:
    """Tab completes the path after ``@``; the conversation shows the prompt as typed and
    says what was attached; the model's turn holds the file."""
    (tmp_path / "ws").mkdir()
    (tmp_path / "ws" / "notes.md").write_text("remember the milk\n")
    async with tui(tmp_path, ["Read it."]) as (app, pilot):
        app.prompt_input.value = "summarize @no"
        await pilot.pause(0.2)
        await pilot.press("tab")
        assert app.prompt_input.value == "summarize @notes.md"
        await pilot.press("enter")
        await wait_for(pilot, lambda: not app.busy and app.query(UserMessage))
        assert [str(u.content) for u in app.query(UserMessage)] == ["› summarize @notes.md"]
        assert "Attached @notes.md" in notices(app)
        assert app.agent is not None
        sent = [str(step.content) for step in app.agent.history if step.role.value == "user"]
        assert "remember the milk" in sent[-1]


async def test_ctrl_d_deletes_then_quits(tmp_path: Path) -> None:
    async with tui(tmp_path, []) as (app, pilot):
        app.prompt_input.value = "ab"
        app.prompt_input.cursor_position = 0
        await pilot.press("ctrl+d")
        assert app.prompt_input.value == "b" and app.is_running
        app.prompt_input.value = ""
        await pilot.press("ctrl+d")
        await pilot.pause()
    assert app.return_code == 0


async def test_quit_command_quits(tmp_path: Path) -> None:
    async with tui(tmp_path, []) as (app, pilot):
        await send(pilot, "/quit")
    assert app.return_code == 0


async def test_ctrl_c_during_an_approval_interrupts_and_hides_it(tmp_path: Path) -> None:
    async with tui(tmp_path, [shell("touch never.txt"), "Again."]) as (app, pilot):
        await send(pilot, "make a file")
        await wait_for(pilot, lambda: app.approval_panel.display)
        await pilot.press("ctrl+c")
        await wait_for(pilot, lambda: ends(app) and not app.busy)
        assert "interrupted" in ends(app)[-1] and not app.approval_panel.display
        assert app.focused is app.prompt_input
        assert not (tmp_path / "ws" / "never.txt").exists()
        assert "done" in await run_prompt(pilot, "go on")


async def test_prompt_history_with_up_and_down(tmp_path: Path) -> None:
    async with tui(tmp_path, []) as (app, pilot):
        await send(pilot, "/todo")
        await send(pilot, "/help")
        await pilot.press("up")
        assert app.prompt_input.value == "/help"
        await pilot.press("up")
        assert app.prompt_input.value == "/todo"
        await pilot.press("down", "down")
        assert app.prompt_input.value == ""


async def test_compress_shows_before_and_after(tmp_path: Path) -> None:
    responses = [
        "A first answer that is long enough to be worth summarising later on.",
        "A second answer, also with some words in it.",
        "Short summary.",
    ]
    async with tui(tmp_path, responses, keep_recent_turns=1) as (app, pilot):
        await send(pilot, "/compress")
        await wait_for(pilot, lambda: not app.busy and notices(app))
        assert notices(app)[-1].startswith("Nothing to compress yet")
        await run_prompt(pilot, "first question")
        await run_prompt(pilot, "second question")
        await send(pilot, "/compress")
        await wait_for(pilot, lambda: any("compressed" in n for n in notices(app)))
        (note,) = [n for n in notices(app) if "compressed" in n]
        assert "->" in note and "summary" in note


async def test_session_is_saved_and_resume_rerenders_it(tmp_path: Path) -> None:
    responses = [shell("echo saved-output", "Checking."), "Finished the check."]
    async with tui(tmp_path, responses, mode="yolo") as (app, pilot):
        await run_prompt(pilot, "check something")
        assert app.recorder is not None and app.recorder.saves > 0
        session_id = app.recorder.data.id
    assert (tmp_path / "sessions" / f"{session_id}.json").is_file()

    async with tui(tmp_path, []) as (app, pilot):
        await send(pilot, "/resume")
        listing = blocks(app, "info-block")[-1]
        assert session_id in listing and "check something" in listing
        await send(pilot, f"/resume {session_id[:17]}")
        await wait_for(pilot, lambda: app.query(UserMessage))
        assert [str(u.content) for u in app.query(UserMessage)] == ["› check something"]
        (panel,) = panels(app)
        assert "saved-output" in panel.output and panel.exit_code == 0
        assert texts(app) == ["Checking.", "Finished the check."]
        assert "turn 1 · 2 model calls" in app.status_bar.plain  # (as /rewind counts turns)
        assert app.recorder is not None and app.recorder.data.id == session_id
        await send(pilot, "/resume nosuchsession")
        assert "no saved session matches" in notices(app)[-1]


async def test_resume_of_another_directory_s_session_says_which_and_asks(tmp_path: Path) -> None:
    """/resume lists this directory's sessions; a session of another directory is not
    resumed until asked again with ``!``."""
    async with tui(tmp_path, ["Done there."], mode="yolo", folder="proj2") as (app, pilot):
        await run_prompt(pilot, "work in proj2")
        assert app.recorder is not None
        session_id = app.recorder.data.id
    async with tui(tmp_path, [], folder="proj") as (app, pilot):
        await send(pilot, "/resume")
        assert session_id not in "\n".join(blocks(app, "info-block"))
        await send(pilot, f"/resume {session_id}")
        assert notices(app)[-1].startswith(f"Session {session_id} belongs to {tmp_path / 'proj2'}")
        assert not app.query(UserMessage)
        await send(pilot, f"/resume {session_id}!")
        await wait_for(pilot, lambda: app.query(UserMessage))
        assert [str(u.content) for u in app.query(UserMessage)] == ["› work in proj2"]


async def test_save_writes_ale_jsonl_by_default_and_atif_by_suffix(tmp_path: Path) -> None:
    async with tui(tmp_path, ["Hello."]) as (app, pilot):
        await run_prompt(pilot, "hi")
        await send(pilot, "/save")
        await wait_for(pilot, lambda: any("saved to" in n for n in notices(app)))
        assert app.recorder is not None
        saved = tmp_path / "sessions" / f"{app.recorder.data.id}.jsonl"
        (trajectory,) = list(read_jsonl(saved))
        assert [s.role.value for s in trajectory.steps] == ["system", "user", "assistant"]
        await send(pilot, "/save out/run.atif.json")
        await wait_for(pilot, lambda: any("ATIF" in n for n in notices(app)))
        atif = tmp_path / "ws" / "out" / "run.atif.json"
        assert json.loads(atif.read_text())
        assert read_atif(atif).steps[-1].content == "Hello."


async def test_app_builds_its_agent_from_settings_after_the_first_frame(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    root.mkdir()
    script = tmp_path / "script.json"
    script.write_text(json.dumps(["Built from settings."]))
    settings = Settings(provider="scripted", script=str(script))
    store = SessionStore(tmp_path / "sessions")
    async with LocalWorkspace(root) as workspace:
        app = IflowApp(settings=settings, workspace=workspace, cwd=root, home=tmp_path, store=store)
        async with app.run_test(size=(100, 30)) as pilot:
            await send(pilot, "hello")  # typed before the model is ready: queued or run
            await wait_for(pilot, lambda: ends(app) and not app.busy)
            assert texts(app) == ["Built from settings."]
            assert app.recorder is not None and app.recorder.saves > 0


async def test_a_session_given_at_start_is_rerendered(tmp_path: Path) -> None:
    async with tui(tmp_path, [shell("echo earlier"), "Earlier answer."], mode="yolo") as (
        app,
        pilot,
    ):
        await run_prompt(pilot, "an earlier task")
        assert app.recorder is not None
        session_id = app.recorder.data.id
    store = SessionStore(tmp_path / "sessions")
    script = tmp_path / "script.json"
    script.write_text(json.dumps(["Continued."]))
    settings = Settings(provider="scripted", script=str(script), approval_mode="yolo")
    root = tmp_path / "ws"
    async with LocalWorkspace(root) as workspace:
        app = IflowApp(
            settings=settings,
            workspace=workspace,
            cwd=root,
            home=tmp_path,
            store=store,
            resume=store.load(session_id),
        )
        async with app.run_test(size=(100, 30)) as pilot:
            await wait_for(pilot, lambda: any("Resumed session" in n for n in notices(app)))
            assert notices(app)[-1].startswith(f"Resumed session {session_id} (2 turns)")
            assert [str(u.content) for u in app.query(UserMessage)] == ["› an earlier task"]
            assert "earlier" in panels(app)[0].output
            await run_prompt(pilot, "and now?")
            assert texts(app)[-1] == "Continued."
            assert app.recorder is not None and app.recorder.data.id == session_id


async def test_a_model_that_cannot_start_is_explained(tmp_path: Path) -> None:
    settings = Settings(provider="scripted")  # no script: the model cannot be built
    async with LocalWorkspace(tmp_path) as workspace:
        app = IflowApp(settings=settings, workspace=workspace, cwd=tmp_path, home=tmp_path)
        async with app.run_test() as pilot:
            await wait_for(pilot, lambda: app.failed)
            assert "no script is set" in notices(app)[-1]
            assert "no model" in app.status_bar.plain
            await send(pilot, "hello")
            assert notices(app)[-1].startswith("No model is available")
            await send(pilot, "/help")
            assert blocks(app, "help")


async def test_an_edit_asks_with_a_diff_against_the_file_and_the_panel_waits(
    tmp_path: Path,
) -> None:
    (tmp_path / "ws").mkdir(exist_ok=True)
    (tmp_path / "ws" / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    call = {
        "tool_calls": [
            {
                "name": "replace",
                "arguments": {"path": "calc.py", "old_string": "a - b", "new_string": "a + b"},
            }
        ]
    }
    async with tui(tmp_path, [call, "Fixed."]) as (app, pilot):
        await send(pilot, "fix calc.py")
        await wait_for(pilot, lambda: app.approval_panel.display)
        question = str(app.query_one("#approval-detail", Static).content)
        assert "--- a/calc.py" in question and "+++ b/calc.py" in question
        assert "-    return a - b" in question and "+    return a + b" in question
        assert "new_string: a + b" not in question  # the diff, not the raw arguments
        (panel,) = panels(app)
        assert str(panel.meta_view.content) == "waiting for your approval…"
        await pilot.press("y")
        await wait_for(pilot, lambda: ends(app) and not app.busy)
        assert (tmp_path / "ws" / "calc.py").read_text().endswith("return a + b\n")


async def test_model_switches_the_model_and_keeps_the_conversation(tmp_path: Path) -> None:
    from openai_server import Reply, serve_openai

    root = tmp_path / "ws"
    root.mkdir()
    with serve_openai() as server:
        server.push(Reply("First answer."), Reply("Second answer."))
        settings = Settings(
            provider="openai", model="model-a", base_url=server.base_url, api_key="k"
        )
        async with LocalWorkspace(root) as workspace:
            app = IflowApp(settings=settings, workspace=workspace, cwd=root, home=tmp_path)
            async with app.run_test(size=(110, 40)) as pilot:
                await wait_for(pilot, lambda: app.agent is not None)
                await run_prompt(pilot, "hello")
                await send(pilot, "/model model-b")
                await wait_for(pilot, lambda: any("switched to model-b" in n for n in notices(app)))
                assert "model-b" in app.status_bar.plain
                await run_prompt(pilot, "and again")
                assert [r["model"] for r in server.requests] == ["model-a", "model-b"]
                assert len(server.requests[1]["messages"]) > len(server.requests[0]["messages"])
                await send(pilot, "/model")
                await wait_for(
                    pilot, lambda: any("Model: model-b" in b for b in blocks(app, "info-block"))
                )
                shown = [b for b in blocks(app, "info-block") if "Model: model-b" in b][-1]
                assert "model from:    /model, in this session" in shown
            assert app.agent is not None
            await app.agent.aclose()


async def test_an_approval_names_what_always_allows_and_cuts_long_arguments_visibly(
    tmp_path: Path,
) -> None:
    """An MCP tool's "always" names the tool (not "edits"); an argument line longer than the
    panel shows ends with an ellipsis."""
    async with tui(tmp_path, []) as (app, pilot):
        panel = app.approval_panel
        panel.ask("git_status", "mcp", "git_status", {"repo": "r" * 400})
        await pilot.pause()
        label = str(panel.query_one("#allow_always", Button).label)
        assert label == "Always allow git_status (a)"
        detail = str(panel.query_one("#approval-detail", Static).render())
        assert "r" * 300 + " …" in detail


async def test_typing_a_slash_lists_the_commands_it_may_be(tmp_path: Path) -> None:
    async with tui(tmp_path, ["ok"]) as (app, pilot):
        hints = app.query_one("#slash-hints", Static)
        assert not hints.display
        await pilot.press("/", "r", "e")
        await pilot.pause()
        assert hints.display
        shown = str(hints.content)
        assert "/resume" in shown and "/rewind" in shown and "/help" not in shown
        await pilot.press("s", "u", "m", "e", "space")
        await pilot.pause()
        assert not hints.display  # past the name: the list goes


TRACE = 'Traceback (most recent call last):\n  File "app.py", line 3, in <module>\nValueError: boom'


def user_prompts(app: IflowApp) -> list[str]:
    """The user messages the agent was given."""
    assert app.agent is not None
    return [str(step.content) for step in app.agent.history if step.role.value == "user"]


async def test_a_pasted_stack_trace_is_kept_whole_and_sent_with_what_follows(
    tmp_path: Path,
) -> None:
    """A bracketed paste of several lines goes into the prompt whole (the prompt grows to
    show it); what is typed after it follows its last line; Enter sends all of it."""
    async with tui(tmp_path, ["Explained."]) as (app, pilot):
        prompt = app.prompt_input
        prompt.post_message(events.Paste(TRACE))
        await pilot.pause()
        await pilot.press("space", *"explain")
        await pilot.pause()
        assert prompt.value == TRACE + " explain"
        assert prompt.size.height >= 3  # every line in view, not one line scrolled sideways
        assert app.runs == 0
        await pilot.press("enter")
        await wait_for(pilot, lambda: ends(app) and not app.busy)
        assert user_prompts(app) == [TRACE + " explain"]
        (shown,) = [str(u.content) for u in app.query(UserMessage)]
        assert shown.splitlines()[0] == "› Traceback (most recent call last):"
        assert [row.strip() for row in shown.splitlines()[1:]] == [
            'File "app.py", line 3, in <module>',
            "ValueError: boom explain",
        ]  # the conversation keeps the prompt's lines
        assert prompt.value == ""


async def test_a_pasted_text_with_carriage_returns_keeps_its_lines(tmp_path: Path) -> None:
    """tmux's paste-buffer (and some terminals) end pasted lines with CR: still lines."""
    async with tui(tmp_path, ["Seen."]) as (app, pilot):
        app.prompt_input.post_message(events.Paste("one\rtwo\r\nthree"))
        await pilot.pause()
        assert app.prompt_input.value == "one\ntwo\nthree"
        await pilot.press("enter")
        await wait_for(pilot, lambda: ends(app) and not app.busy)
        assert user_prompts(app) == ["one\ntwo\nthree"]


@pytest.mark.parametrize("newline_key", ["ctrl+j", "shift+enter"])
async def test_a_newline_key_adds_a_line_and_enter_sends(tmp_path: Path, newline_key: str) -> None:
    async with tui(tmp_path, ["Two lines."]) as (app, pilot):
        await pilot.press("a", newline_key, "b")
        await pilot.pause()
        assert app.prompt_input.value == "a\nb"
        assert app.runs == 0 and not app.query(UserMessage)
        await pilot.press("enter")
        await wait_for(pilot, lambda: ends(app) and not app.busy)
        assert user_prompts(app) == ["a\nb"]


async def test_up_and_down_move_between_lines_and_recall_prompts_at_the_edges(
    tmp_path: Path,
) -> None:
    """Inside a prompt of several lines Up and Down move the cursor; on its first (last) line
    they recall the previous (next) prompt; past the newest comes back the draft."""
    async with tui(tmp_path, ["One.", "Two."]) as (app, pilot):
        prompt = app.prompt_input
        await run_prompt(pilot, "first")
        await run_prompt(pilot, "one\ntwo")
        await pilot.press(*"draft")
        await pilot.press("up")
        assert prompt.value == "one\ntwo" and prompt.cursor_location == (1, 3)
        await pilot.press("up")
        assert prompt.value == "one\ntwo" and prompt.cursor_location[0] == 0
        await pilot.press("up")
        assert prompt.value == "first"
        await pilot.press("up")
        assert prompt.value == "first"  # the oldest: it stays
        await pilot.press("down")
        assert prompt.value == "one\ntwo" and prompt.cursor_location == (1, 3)
        await pilot.press("down")
        assert prompt.value == "draft"
        await pilot.press("ctrl+j", *"more", "up")
        assert prompt.value == "draft\nmore" and prompt.cursor_location[0] == 0


async def test_tab_completes_only_at_the_end_and_otherwise_does_nothing(tmp_path: Path) -> None:
    async with tui(tmp_path, []) as (app, pilot):
        prompt = app.prompt_input
        await pilot.press("/", "m", "o")
        await pilot.press("tab")
        assert prompt.value == "/mode" and prompt.cursor_position == len("/mode")
        await pilot.press("tab")  # nothing more to complete: no tab character either
        assert prompt.value == "/mode" and app.focused is prompt
        prompt.value = "/mo"
        prompt.cursor_position = 1
        await pilot.press("tab")
        assert prompt.value == "/mo" and app.focused is prompt


async def test_a_slash_command_and_its_argument_on_separate_lines_still_run(
    tmp_path: Path,
) -> None:
    async with tui(tmp_path, []) as (app, pilot):
        await pilot.press(*"/mode", "ctrl+j", *"plan")
        await pilot.press("enter")
        await pilot.pause()
        assert app.agent is not None and app.agent.policy.mode == "plan"


def _winsize(fd: int, rows: int, cols: int) -> None:
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))


def test_a_bracketed_paste_in_a_real_terminal_is_sent_whole(tmp_path: Path) -> None:
    """The real ``iflow`` TUI in a pseudo-terminal (xterm-256color, 100x30), its model an
    OpenAI-compatible server on loopback: a bracketed paste of three lines, Ctrl+J and a
    line, Shift+Enter (as a terminal speaking the kitty keyboard protocol sends it) and a line,
    then Enter, reach the model as one prompt holding the five lines."""
    from openai_server import Reply, serve_openai

    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    with serve_openai() as server:
        server.push(Reply("Three lines seen."))
        keep = {k: v for k, v in os.environ.items() if not k.startswith(("IFLOW_", "OPENAI_"))}
        env = {
            **keep,
            "HOME": str(home),
            "TERM": "xterm-256color",
            "IFLOW_PROVIDER": "openai",
            "IFLOW_MODEL": "pty-model",
            "IFLOW_BASE_URL": server.base_url,
            "IFLOW_API_KEY": "k",
        }
        for name in ("COLUMNS", "LINES", "TEXTUAL", "NO_COLOR"):
            env.pop(name, None)
        master, slave = os.openpty()
        _winsize(slave, 30, 100)
        proc = subprocess.Popen(
            [sys.executable, "-m", "iflow.cli"],
            stdin=slave,
            stdout=slave,
            stderr=slave,
            cwd=work,
            env=env,
            start_new_session=True,
        )
        os.close(slave)
        screen = bytearray()

        def drain() -> None:  # the terminal's output, read so that the app never blocks
            while True:
                try:
                    chunk = os.read(master, 65536)
                except OSError:
                    return
                if not chunk:
                    return
                screen.extend(chunk)

        reader = threading.Thread(target=drain, daemon=True)
        reader.start()

        def wait(condition: Callable[[], object], what: str, limit: float = 60) -> None:
            deadline = time.monotonic() + limit
            while not condition():
                if proc.poll() is not None:
                    raise AssertionError(f"iflow exited ({proc.returncode}) before {what}")
                if time.monotonic() > deadline:
                    raise AssertionError(f"gave up waiting for {what} after {limit} s")
                time.sleep(0.05)

        try:
            wait(lambda: b"?2004h" in screen and b"/help" in screen, "the TUI to draw")
            drawn = len(screen)
            os.write(master, b"\x1b[200~line1\nline2\nline3\x1b[201~")
            wait(lambda: b"line3" in screen[drawn:], "the pasted lines to show")
            drawn = len(screen)
            os.write(master, b"\nmore\x1b[13;2ulast")  # Ctrl+J, a line, Shift+Enter, a line
            wait(lambda: b"last" in screen[drawn:], "the typed lines to show")
            os.write(master, b"\r")  # Enter
            wait(lambda: server.requests, "a request to the model")
            users = [m for m in server.requests[0]["messages"] if m["role"] == "user"]
            content = users[-1]["content"]
            text = content if isinstance(content, str) else json.dumps(content)
            assert "line1\nline2\nline3\nmore\nlast" in text, text[-500:]
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
            os.close(master)
            reader.join(timeout=5)
