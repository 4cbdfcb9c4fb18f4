"""Asking the person before a tool call runs: the docked panel with the question and its
three answers, and the diff an edit is shown as (what it would change in its file)."""

from __future__ import annotations

import difflib
import shlex
from typing import TYPE_CHECKING, Any, ClassVar

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.content import Content
from textual.message import Message
from textual.widgets import Button, Static

from iflow.errors import IflowError
from iflow.tui.widgets import arguments_text, clip_lines

if TYPE_CHECKING:
    from iflow.agent import Agent
    from iflow.approval import ApprovalRequest


def command_root(command: str) -> str:
    """The program a shell command runs (its first word): what "always" allows."""
    try:
        words = shlex.split(command)
    except ValueError:
        words = command.split()
    return words[0] if words else ""


async def edit_diff(agent: Agent | None, request: ApprovalRequest) -> str | None:
    """What a write_file or replace call would change in its file, as a unified diff."""
    arguments = request.arguments
    path = arguments.get("path")
    if agent is None or not isinstance(path, str) or request.tool not in (
        "write_file", "replace"
    ):  # fmt: skip
        return None
    full = agent.workspace.resolve(path, agent.shell.cwd)
    try:
        before = (await agent.workspace.read_bytes(full)).decode("utf-8")
    except (IflowError, OSError, UnicodeDecodeError):
        before = ""  # a new file (or one that is not text: its new content is shown)
    if request.tool == "write_file":
        after = str(arguments.get("content", ""))
    else:
        old, new = str(arguments.get("old_string", "")), str(arguments.get("new_string", ""))
        after = before.replace(old, new) if old and old in before else before
    lines = difflib.unified_diff(
        before.splitlines(keepends=True),
        after.splitlines(keepends=True),
        fromfile=f"a/{path}",
        tofile=f"b/{path}",
    )
    return "".join(lines) or None


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
        shown = arguments_text(tool, arguments)
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
