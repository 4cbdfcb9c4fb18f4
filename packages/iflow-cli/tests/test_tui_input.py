"""The TUI's prompt editor through Textual's pilot and a real terminal: completion, pastes,
new lines, history, slash commands (see test_tui.py)."""

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
from collections.abc import Callable
from pathlib import Path

import pytest
from textual import events
from textual.widgets import Static
from tui_pilot import ends, run_prompt, tui, wait_for

from iflow.tui.app import IflowApp
from iflow.tui.widgets import UserMessage


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
