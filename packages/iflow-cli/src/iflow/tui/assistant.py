"""The assistant's messages as Markdown. A module of its own because Textual's Markdown
widget imports markdown-it, which is slow to import: the app loads it after the first frame."""

from __future__ import annotations

from textual.widgets import Markdown


class AssistantView(Markdown):
    """An assistant message as Markdown, updated while it streams."""

    def __init__(self, text: str = "") -> None:
        super().__init__(text, classes="assistant")
        self.text = text
        self._flush_pending = False

    def add(self, piece: str) -> None:
        """Append streamed text; the rendering catches up at most every 50 ms."""
        self.text += piece
        if not self._flush_pending:
            self._flush_pending = True
            self.set_timer(0.05, self._flush)

    def _flush(self) -> None:
        self._flush_pending = False
        self.update(self.text)

    def finish(self, content: str) -> None:
        """Replace what streamed with the final message."""
        self.text = content
        self.update(content)
