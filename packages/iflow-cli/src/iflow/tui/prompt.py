"""The prompt the person types in: several lines, its history, Tab completion of a slash
command or of the path after an ``@``, and the commands listed above it while one is typed."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from textual import events
from textual.binding import Binding, BindingType
from textual.content import Content
from textual.message import Message
from textual.widgets import Static, TextArea
from textual.widgets.text_area import Selection

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


class SlashHints(Static):
    """Above the prompt while a ``/command`` is typed: the commands it may be, each with what it
    does (eight at most); hidden once the name is followed by a space, or when none matches."""

    def show_for(self, text: str, commands: dict[str, str]) -> None:
        """Show the ``commands`` (name: summary) that ``text``, the prompt, may be the start of."""
        if not text.startswith("/") or any(ch.isspace() for ch in text):
            self.display = False
            return
        matches = [(n, d) for n, d in commands.items() if n.startswith(text[1:])]
        if not matches:
            self.display = False
            return
        lines = [f"/{name:<12} {summary}" for name, summary in matches[:8]]
        if len(matches) > 8:
            lines.append(f"… {len(matches) - 8} more (Tab completes)")
        self.update(Content("\n".join(lines)))
        self.display = True
