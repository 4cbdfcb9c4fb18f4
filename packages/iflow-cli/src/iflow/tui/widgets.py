"""The TUI's widgets: messages of the conversation, tool panels, the prompt, the status bar
and the approval prompt. They hold no agent logic; the app and the conversation feed them."""

from __future__ import annotations

import json
import re
import shlex
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from textual import events, on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.content import Content
from textual.message import Message
from textual.reactive import reactive
from textual.widget import Widget
from textual.widgets import Button, Collapsible, Static, TextArea
from textual.widgets.text_area import Selection

OUTPUT_LINES = 40
"""Lines of a tool's output a panel shows (the model saw more; see ``tool_output_limit``)."""
OUTPUT_CHARS = 4000
ARG_LINES = 12
_SPINNER = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"


def clip_lines(text: str, lines: int = OUTPUT_LINES, chars: int = OUTPUT_CHARS) -> str:
    """``text`` cut to its first ``lines`` lines and ``chars`` characters, saying what was cut."""
    rows = text.rstrip("\n").splitlines()
    shown = rows[:lines]
    body = "\n".join(shown)
    if len(body) > chars:
        body = body[:chars].rstrip() + " …"
    hidden = len(rows) - len(shown)
    if hidden > 0:
        body += f"\n… {hidden} more line{'s' if hidden > 1 else ''}"
    return body


def human_tokens(n: int) -> str:
    """``950``, ``12.3k``, ``128k``, ``1.2M``."""
    if n < 1000:
        return str(n)
    value, unit = (n / 1_000_000, "M") if n >= 1_000_000 else (n / 1000, "k")
    return f"{value:.1f}".rstrip("0").rstrip(".") + unit


def command_root(command: str) -> str:
    try:
        words = shlex.split(command)
    except ValueError:
        words = command.split()
    return words[0] if words else ""


class UserMessage(Static):
    """What the person typed; a prompt of several lines keeps them, under its first."""

    def __init__(self, text: str) -> None:
        shown = text.replace("\n", "\n  ")
        super().__init__(Content.assemble(("› ", "bold $accent"), shown), classes="user")


class NoticeLine(Static):
    """Something the person should know: ``info``, ``warning`` or ``error``."""

    def __init__(self, text: str, level: str = "info") -> None:
        marks = {"info": "• ", "warning": "⚠ ", "error": "✗ "}
        super().__init__(Content(marks.get(level, "• ") + text), classes=f"notice -{level}")
        self.level = level
        self.text = text


def _cut(row: str, chars: int = 300) -> str:
    """One line of an argument, cut with an ellipsis when longer than ``chars``."""
    return row if len(row) <= chars else row[:chars].rstrip() + " …"


def _arguments_text(name: str, arguments: dict[str, Any]) -> str:
    lines: list[str] = []
    for key, value in arguments.items():
        if name == "run_shell_command" and key == "command":
            lines.append(f"$ {value}")
            continue
        text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
        rows = text.splitlines() or [""]
        if len(rows) == 1:
            lines.append(f"{key}: {_cut(rows[0])}")
        else:
            lines.append(f"{key}:")
            lines += ["  " + _cut(row) for row in rows[:ARG_LINES]]
            if len(rows) > ARG_LINES:
                lines.append(f"  … {len(rows) - ARG_LINES} more lines")
    return "\n".join(lines)


def _duration(metadata: dict[str, Any]) -> float | None:
    for key in ("duration", "duration_sec", "duration_s", "seconds"):
        value = metadata.get(key)
        if isinstance(value, int | float):
            return float(value)
    return None


class ToolPanel(Collapsible):
    """One tool call: its title, arguments, output, exit code and duration."""

    def __init__(self, *, name: str, title: str, arguments: dict[str, Any]) -> None:
        self.tool_name = name
        self.call_title = title
        self.state = "running"
        self.output = ""
        self.exit_code: int | None = None
        self.args_view = Static(Content(_arguments_text(name, arguments)), classes="tool-args")
        self.output_view = Static("", classes="tool-output")
        self.meta_view = Static(Content("running…"), classes="tool-meta")
        super().__init__(
            self.args_view,
            self.output_view,
            self.meta_view,
            title=self._label(),  # type: ignore[arg-type]
            collapsed=False,
            classes="tool -running",
        )
        self.output_view.display = False

    def waiting(self, waiting: bool) -> None:
        """Say that the call waits for the person's approval (or runs again)."""
        if self.state == "running":
            self.meta_view.update(Content("waiting for your approval…" if waiting else "running…"))

    def _label(self) -> Content:
        icon, style = {
            "running": ("⋯", "$warning"),
            "ok": ("✓", "$success"),
            "error": ("✗", "$error"),
            "denied": ("⊘", "$error"),
        }[self.state]
        return Content.assemble((icon, f"bold {style}"), " ", (self.call_title, "bold"))

    def finish(self, content: str, is_error: bool, metadata: dict[str, Any]) -> None:
        """Show the result; errors and denials are styled as such."""
        self.output = content
        denied = bool(metadata.get("denied"))
        self.state = "denied" if denied else "error" if is_error else "ok"
        self.remove_class("-running")
        self.add_class(f"-{self.state}")
        shown = content
        if "exit_code" in metadata and content.rstrip().endswith(
            f"Exit code: {metadata['exit_code']}"
        ):
            shown = content.rstrip().rpartition("\n")[0]  # the meta line below says it
        if shown.strip():
            self.output_view.update(Content(clip_lines(shown)))
            self.output_view.display = True
        parts: list[str] = []
        code = metadata.get("exit_code")
        if isinstance(code, int):
            self.exit_code = code
            parts.append(f"exit {code}")
        if metadata.get("timed_out"):
            parts.append("timed out")
        seconds = _duration(metadata)
        if seconds is not None:
            parts.append(f"{seconds:.2f} s")
        if denied:
            parts.append("denied")
        elif is_error and not parts:
            parts.append("failed")
        elif not parts:
            parts.append("done")
        self.meta_view.update(Content(" · ".join(parts)))
        self.title = self._label()  # type: ignore[assignment]
        if len(content.splitlines()) > 12 and not is_error:
            self.collapsed = True


class StatusBar(Widget):
    """The bottom line: model, approval mode, context use, the turn (prompts, as /rewind counts
    them) and the model calls, and whether a run is going."""

    model_name: reactive[str] = reactive("starting…")
    mode: reactive[str] = reactive("default")
    used: reactive[int] = reactive(0)
    limit: reactive[int] = reactive(0)
    turn: reactive[int] = reactive(0)
    calls: reactive[int] = reactive(0)
    working: reactive[bool] = reactive(False)
    queued: reactive[int] = reactive(0)
    frame: reactive[int] = reactive(0)

    def on_mount(self) -> None:
        self._started = time.monotonic()
        self._timer = self.set_interval(0.1, self._tick, pause=True)

    def watch_working(self, working: bool) -> None:
        if not hasattr(self, "_timer"):
            return
        if working:
            self._started = time.monotonic()
            self._timer.resume()
        else:
            self._timer.pause()

    def _tick(self) -> None:
        self.frame += 1

    @property
    def tokens_text(self) -> str:
        if not self.limit:
            return f"{human_tokens(self.used)} tokens"
        share = round(100 * self.used / self.limit)
        return f"{human_tokens(self.used)}/{human_tokens(self.limit)} ({share}%)"

    @property
    def plain(self) -> str:
        """The bar as text (what tests and the benchmark look for)."""
        return self.render().plain

    def render(self) -> Content:
        mode_style = {"plan": "$primary", "auto-edit": "$warning", "yolo": "bold $error"}
        left = Content.assemble(
            ("◆ ", "$accent"),
            (self.model_name, "bold"),
            "  ",
            (f"mode {self.mode}", mode_style.get(self.mode, "")),
            "  ",
            f"ctx {self.tokens_text}",
            "  ",
            f"turn {self.turn} · {self.calls} model call{'' if self.calls == 1 else 's'}",
        )
        if self.working:
            seconds = int(time.monotonic() - self._started) if hasattr(self, "_started") else 0
            spin = _SPINNER[self.frame % len(_SPINNER)]
            extra = f" · {self.queued} queued" if self.queued else ""
            right = Content.assemble(
                (f"{spin} working… {seconds}s{extra}", "bold $warning"), "  ctrl+c interrupts"
            )
        else:
            right = Content("/help · ctrl+c twice quits")
        gap = max(2, self.size.width - left.cell_length - right.cell_length)
        return Content.assemble(left, " " * gap, right)


SLASH_SUGGESTIONS = [
    "/help",
    "/clear",
    "/compress",
    "/mode",
    "/mode default",
    "/mode auto-edit",
    "/mode plan",
    "/mode yolo",
    "/model",
    "/todo",
    "/mcp",
    "/rewind",
    "/save",
    "/resume",
    "/quit",
]


class PromptSuggester:
    """What Tab completes: a slash command at the start of the prompt, or the path after an
    ``@`` at its end (a folder's name ends with ``/``; dot files only when asked for).

    It answers synchronously: the prompt asks it after each edit, and a directory listing of
    the workspace is quick enough to be read there."""

    def __init__(self, commands: list[str], cwd: Path | None = None) -> None:
        self.commands = commands
        self.cwd = cwd

    def suggest(self, value: str) -> str | None:
        """The whole prompt as completed, or None when nothing completes ``value``."""
        if value.startswith("/") and not any(ch.isspace() for ch in value):
            low = value.lower()
            return next((c for c in self.commands if c.lower().startswith(low)), None)
        last = re.search(r"\S*\Z", value)
        if self.cwd is None or last is None or not last.group().startswith("@"):
            return None
        head = value[: last.start()]
        partial = last.group()[1:]
        folder, _, stem = partial.rpartition("/")
        where = (self.cwd / folder).resolve()
        if not where.is_dir() or not where.is_relative_to(self.cwd.resolve()):
            return None
        try:
            names = sorted(p.name + ("/" if p.is_dir() else "") for p in where.iterdir())
        except OSError:
            return None
        for name in names:
            if name.startswith(stem) and (stem.startswith(".") or not name.startswith(".")):
                return f"{head}@{folder + '/' if folder else ''}{name}"
        return None


def _offset_to_location(lines: list[str], offset: int) -> tuple[int, int]:
    """The (row, column) of character ``offset`` in the text of ``lines`` joined by newlines
    (clamped to the text)."""
    offset = max(0, offset)
    for row, line in enumerate(lines):
        if offset <= len(line):
            return row, offset
        offset -= len(line) + 1
    return len(lines) - 1, len(lines[-1])


class PromptInput(TextArea):
    """The prompt, several lines when needed: a paste (a stack trace, a diff) goes in whole and
    the prompt grows to show it. Enter sends; Ctrl+J or Shift+Enter starts a new line; Up and
    Down move between its lines and, on its first or last line, recall this session's earlier
    prompts; Tab completes a slash command or the path after an ``@`` (shown greyed after the
    cursor while the cursor is at the end).

    It keeps the one-line input's ``value`` and ``cursor_position`` (an offset in the text), so
    that the app and the tests read and set it as before."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("up", "line_or_history(-1)", "Previous prompt", show=False),
        Binding("down", "line_or_history(1)", "Next prompt", show=False),
        Binding("tab", "complete", "Complete", show=False),
        Binding("pageup", "app.scroll_view(-1)", "Scroll up", show=False),
        Binding("pagedown", "app.scroll_view(1)", "Scroll down", show=False),
    ]
    NEWLINE_KEYS: ClassVar[frozenset[str]] = frozenset({"ctrl+j", "shift+enter"})
    """Keys that start a new line (Enter sends)."""

    @dataclass
    class Submitted(Message):
        """Enter was pressed: ``value`` is the prompt's text."""

        prompt_input: PromptInput
        value: str

        @property
        def control(self) -> PromptInput:
            return self.prompt_input

    def __init__(self, *, placeholder: str = "", id: str | None = None) -> None:
        super().__init__(
            id=id,
            placeholder=placeholder,
            soft_wrap=True,
            show_line_numbers=False,
            tab_behavior="focus",
            highlight_cursor_line=False,
        )
        self.suggester = PromptSuggester(SLASH_SUGGESTIONS)
        self.prompts: list[str] = []
        """This session's prompts, oldest first (Up recalls them)."""
        self._index = 0
        self._draft = ""

    # -- the one-line input's interface ----------------------------------------------------

    @property
    def value(self) -> str:
        """The text, its lines joined by newlines (whatever line ends were pasted)."""
        return "\n".join(self.document.lines)

    @value.setter
    def value(self, text: str) -> None:
        self.load_text(text)
        self.move_cursor(self.document.end)

    @property
    def cursor_position(self) -> int:
        """Where the cursor is, as an offset in :attr:`value`."""
        row, column = self.cursor_location
        return sum(len(line) + 1 for line in self.document.lines[:row]) + column

    @cursor_position.setter
    def cursor_position(self, offset: int) -> None:
        self.move_cursor(_offset_to_location(self.document.lines, offset))

    # -- keys ------------------------------------------------------------------------------

    async def _on_key(self, event: events.Key) -> None:
        # Handled here rather than by bindings: a binding runs once the key has bubbled up to
        # the app, after the keys that came in the same read were typed ("\nmore" from the
        # terminal would give "more" and then the newline).
        if event.key == "enter":  # sends (TextArea would start a new line)
            event.stop()
            event.prevent_default()
            self.post_message(self.Submitted(self, self.value))
        elif event.key in self.NEWLINE_KEYS:
            event.stop()
            event.prevent_default()
            self.action_newline()

    async def _on_paste(self, event: events.Paste) -> None:
        """Insert the paste whole, its line ends (CR from tmux and some terminals, CRLF)
        made newlines."""
        event.stop()
        event.prevent_default()  # (instead of TextArea's own insertion)
        if self.read_only or not event.text:
            return
        text = event.text.replace("\r\n", "\n").replace("\r", "\n")
        result = self.replace(text, *self.selection)
        self.move_cursor(result.end_location)
        self.focus()

    def action_newline(self) -> None:
        if not self.read_only:
            self.replace("\n", *self.selection, maintain_selection_offset=False)

    def action_line_or_history(self, step: int) -> None:
        """Up (-1) or Down (1): within the prompt's lines, move; at its edge, recall."""
        at_edge = (
            self.navigator.is_first_wrapped_line(self.cursor_location)
            if step < 0
            else self.navigator.is_last_wrapped_line(self.cursor_location)
        )
        if not at_edge:
            if step < 0:
                self.action_cursor_up()
            else:
                self.action_cursor_down()
            return
        self.action_history(step)

    def remember(self, text: str) -> None:
        if not self.prompts or self.prompts[-1] != text:
            self.prompts.append(text)
        self._index = len(self.prompts)
        self._draft = ""

    def action_history(self, step: int) -> None:
        """The previous (-1) or next (1) prompt of this session; past the newest, the draft
        that was being typed."""
        if not self.prompts:
            return
        if self._index == len(self.prompts):
            self._draft = self.value
        index = max(0, min(len(self.prompts), self._index + step))
        if index == self._index:
            return
        self._index = index
        self.value = self._draft if index == len(self.prompts) else self.prompts[index]

    # -- completion ------------------------------------------------------------------------

    def update_suggestion(self) -> None:
        """What Tab (or Right) would add, shown after the cursor: only with the cursor at the
        end of the prompt and nothing selected."""
        if not self.selection.is_empty or self.cursor_location != self.document.end:
            self.suggestion = ""
            return
        value = self.value
        full = self.suggester.suggest(value) if value else None
        self.suggestion = full[len(value) :] if full and full.startswith(value) else ""

    def _watch_selection(self, previous_selection: Selection, selection: Selection) -> None:
        super()._watch_selection(previous_selection, selection)
        self.update_suggestion()  # (the cursor moved: at the end or not any more)

    def action_complete(self) -> None:
        """Tab: take the suggestion; with none, nothing (no tab character, no focus move)."""
        if self.suggestion:
            self.insert(self.suggestion)


class ApprovalPanel(Vertical, can_focus=True):
    """Asks whether a tool call may run: allow once (y/1), always (a/2), deny (n/3/Esc)."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("y,1", "decide('allow_once')", "Allow once"),
        Binding("a,2", "decide('allow_always')", "Always allow"),
        Binding("n,3,escape", "decide('deny')", "Deny"),
    ]

    class Decided(Message):
        def __init__(self, decision: str) -> None:
            super().__init__()
            self.decision = decision

    def compose(self) -> ComposeResult:
        yield Static("", id="approval-question")
        yield Static("", id="approval-detail")
        with Horizontal(id="approval-buttons"):
            yield Button(
                Content("Allow once (y)"), id="allow_once", variant="success", compact=True
            )
            yield Button(Content("Always (a)"), id="allow_always", variant="primary", compact=True)
            yield Button(Content("Deny (n)"), id="deny", variant="error", compact=True)

    def ask(
        self,
        tool: str,
        kind: str,
        title: str,
        arguments: dict[str, Any],
        diff: str | None = None,
    ) -> None:
        """Show the question for one call (an edit as the ``diff`` it makes against the file)
        and focus the first answer."""
        verb = {"execute": "run this command", "edit": "make this change"}.get(kind, "run this")
        self.query_one("#approval-question", Static).update(
            Content.assemble(("? ", "bold $warning"), f"Allow {tool} to {verb}?")
        )
        shown = _arguments_text(tool, arguments)
        detail = shown if kind == "execute" else f"{title}\n{diff or shown}"
        self.query_one("#approval-detail", Static).update(Content(clip_lines(detail, 14, 1200)))
        if kind == "execute":
            root = command_root(str(arguments.get("command", "")))
            always = f"Always allow `{root}` (a)" if root else "Always (a)"
        elif kind == "edit":
            always = "Always allow edits (a)"
        else:  # an MCP tool, say: always this tool
            always = f"Always allow {tool} (a)"
        self.query_one("#allow_always", Button).label = Content(always)
        self.display = True
        self.query_one("#allow_once", Button).focus()

    def action_decide(self, decision: str) -> None:
        self.post_message(self.Decided(decision))

    @on(Button.Pressed)
    def _pressed(self, event: Button.Pressed) -> None:
        event.stop()
        if event.button.id:
            self.post_message(self.Decided(event.button.id))
