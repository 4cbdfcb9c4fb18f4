"""The TUI through Textual's pilot: runs, approvals, interrupts and slash commands, on a
scripted model, a real local workspace and a real session store. Waits poll a condition
with a generous upper bound; nothing asserts on timing."""

from __future__ import annotations

from pathlib import Path

import pytest
from textual.widgets import Static
from tui_pilot import blocks, ends, notices, panels, run_prompt, send, shell, texts, tui, wait_for

from iflow.tui.widgets import UserMessage


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
