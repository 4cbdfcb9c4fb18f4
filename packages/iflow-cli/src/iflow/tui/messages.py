"""The messages the TUI app reacts to: the agent's events and approval questions, and what
the slash commands ask of it. The agent's worker and the commands post them; the app
(:class:`iflow.tui.app.IflowApp`) handles each in an ``@on`` handler, on its own loop, so
neither reaches into the app's widgets."""

from __future__ import annotations

from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any

from textual.message import Message

if TYPE_CHECKING:
    from iflow.approval import ApprovalRequest
    from iflow.events import Event
    from iflow.settings import Settings

# -- from the agent ----------------------------------------------------------------------------


class AgentEvent(Message):
    """One event of the agent, carried to the app's message queue."""

    def __init__(self, event: Event) -> None:
        super().__init__()
        self.event = event


class ApprovalAsked(Message):
    """The agent waits for an answer to ``request`` (``diff``: what an edit would change)."""

    def __init__(self, request: ApprovalRequest, diff: str | None = None) -> None:
        super().__init__()
        self.request = request
        self.diff = diff


# -- from the slash commands -------------------------------------------------------------------


class ShowNotice(Message):
    """Say something in the conversation: ``info``, ``warning`` or ``error``."""

    def __init__(self, text: str, level: str = "info") -> None:
        super().__init__()
        self.text = text
        self.level = level


class ShowText(Message):
    """Show plain text in the conversation (help, lists, the todo list), its CSS ``classes``
    saying which."""

    def __init__(self, text: str, classes: str = "info-block") -> None:
        super().__init__()
        self.text = text
        self.classes = classes


class ClearView(Message):
    """Empty the conversation's view; the agent keeps its history."""


class ShowHistory(Message):
    """The agent's history was put back (/rewind) or replaced (/resume): show it anew from its
    saved steps, and the status bar with it. ``prompt``, when given, goes back in the input to
    be edited or sent again."""

    def __init__(self, prompt: str | None = None) -> None:
        super().__init__()
        self.prompt = prompt


class RefreshStatus(Message):
    """The agent changed (its approval mode): the status bar shows it anew."""


class UseSettings(Message):
    """The session goes on with ``settings`` (/model switched the model): the app keeps them
    and the status bar shows the change."""

    def __init__(self, settings: Settings) -> None:
        super().__init__()
        self.settings = settings


class RunPrompt(Message):
    """Run ``prompt`` as if it had been typed (a custom command, expanded): now, or queued."""

    def __init__(self, prompt: str) -> None:
        super().__init__()
        self.prompt = prompt


class RunInBackground(Message):
    """A command's long job (/compress): the app runs ``work`` as the agent's worker and
    counts as busy until it ends, so prompts typed meanwhile are queued."""

    def __init__(self, work: Coroutine[Any, Any, None]) -> None:
        super().__init__()
        self.work = work


class QuitApp(Message):
    """Quit, interrupting a run that is going."""
