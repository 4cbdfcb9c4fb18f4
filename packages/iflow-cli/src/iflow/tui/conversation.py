"""The scrolling conversation: user prompts, assistant Markdown, tool panels, notices and
the end of each run, built live from the agent's events or replayed from saved steps."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from textual.containers import VerticalScroll
from textual.content import Content
from textual.widget import Widget
from textual.widgets import Collapsible, Static

from ale.trajectory import Role, Step
from iflow.mentions import as_typed
from iflow.tui.widgets import NoticeLine, ToolPanel, UserMessage

if TYPE_CHECKING:
    from iflow.tui.assistant import AssistantView

Describe = Callable[[str, dict[str, Any]], str]
"""A tool call's one-line title from its name and arguments."""

_HIDDEN_TOOLS = {"finish"}
"""Calls shown by what they produce rather than as a panel (finish: its summary)."""


def assistant_view(text: str = "") -> AssistantView:
    """A new assistant message (its module, and markdown-it, load on first use)."""
    from iflow.tui.assistant import AssistantView

    return AssistantView(text)


class Conversation(VerticalScroll):
    """What was said and done, newest at the bottom; it follows new output until the person
    scrolls up."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._stream: AssistantView | None = None
        self._panels: dict[str, ToolPanel] = {}
        self._last_text = ""

    def follow(self) -> None:
        """Keep the newest output in view once the conversation overflows (until the person
        scrolls up); short conversations stay at the top."""
        self.call_after_refresh(self._maybe_anchor)

    def _maybe_anchor(self) -> None:
        if (
            not self.is_anchored
            and self.virtual_size.height > self.scrollable_content_region.height
        ):
            self.anchor()

    async def add(self, widget: Widget, *, before: Widget | None = None) -> Widget:
        await self.mount(widget, before=before)
        self.follow()
        return widget

    # -- live ------------------------------------------------------------------------------

    async def user(self, text: str) -> None:
        if self.is_anchored:
            self.anchor()
        self._last_text = ""
        await self.add(UserMessage(as_typed(text)))  # (the files of its @paths not shown)

    async def notice(self, text: str, level: str = "info") -> None:
        await self.add(NoticeLine(text, level))

    async def text_block(self, text: str, classes: str = "info-block") -> None:
        """Plain, unstyled text (help, lists, the todo list)."""
        await self.add(Static(Content(text), classes=classes))

    async def delta(self, text: str) -> None:
        if self._stream is None:
            self._stream = assistant_view()
            await self.add(self._stream)
        self._stream.add(text)
        self.follow()

    async def assistant(self, content: str, reasoning: str | None = None) -> None:
        stream, self._stream = self._stream, None
        if reasoning and reasoning.strip():
            thought = Collapsible(
                Static(Content(reasoning.strip()), classes="reasoning-text"),
                title="Thinking",
                collapsed=True,
                classes="reasoning",
            )
            await self.add(thought, before=stream)
        if not content.strip():
            if stream is not None:
                await stream.remove()
            return
        self._last_text = content
        if stream is not None:
            stream.finish(content)
        else:
            await self.add(assistant_view(content))

    async def tool_started(
        self, call_id: str | None, name: str, title: str, arguments: dict[str, Any]
    ) -> None:
        if name in _HIDDEN_TOOLS:
            return
        panel = ToolPanel(name=name, title=title, arguments=arguments)
        if call_id:
            self._panels[call_id] = panel
        await self.add(panel)

    async def tool_finished(
        self,
        call_id: str | None,
        name: str,
        content: str,
        is_error: bool,
        metadata: dict[str, Any],
    ) -> None:
        panel = self._panels.pop(call_id, None) if call_id else None
        if panel is None:
            if name in _HIDDEN_TOOLS and not is_error:
                return
            panel = ToolPanel(name=name, title=name, arguments={})
            await self.add(panel)
        panel.finish(content, is_error, metadata)
        self.follow()

    async def run_ended(self, outcome: str, message: str, turns: int, result: str) -> None:
        if self._stream is not None:
            await self.assistant(self._stream.text)
        for panel in self._panels.values():
            panel.finish("", True, {"interrupted": True})
        self._panels.clear()
        if outcome == "finished":
            if result.strip() and result.strip() != self._last_text.strip():
                await self.add(assistant_view(result))
            plural = "s" if turns != 1 else ""
            await self.add(Static(Content(f"✓ done · {turns} turn{plural}"), classes="run-end -ok"))
        elif outcome == "interrupted":
            await self.add(
                Static(
                    Content(f"⏹ interrupted: {message}"),
                    classes="run-end -interrupted",
                )
            )
        else:
            await self.add(Static(Content(f"✗ {outcome}: {message}"), classes="run-end -failed"))

    async def clear_view(self) -> None:
        """Empty the view (the agent's history is untouched)."""
        self._stream = None
        self._panels.clear()
        await self.remove_children()
        self.anchor(False)
        self.scroll_home(animate=False)

    # -- replay ----------------------------------------------------------------------------

    async def replay(self, steps: Iterable[Step], describe: Describe) -> None:
        """Show saved steps as they looked live: prompts, answers, tool calls and results."""
        finish_summaries: dict[str, str] = {}
        for step in steps:
            if step.role is Role.SYSTEM:
                continue
            if step.role is Role.USER:
                marker = (step.extra or {}).get("iflow", {}).get("compression")
                if marker:
                    await self.notice(f"Earlier turns were compressed here ({marker}).")
                else:
                    await self.user(step.content)
            elif step.role is Role.ASSISTANT:
                await self.assistant(step.content, step.reasoning)
                for call in step.tool_calls:
                    if call.name in _HIDDEN_TOOLS:
                        finish_summaries[call.id] = str(call.arguments.get("summary", ""))
                        continue
                    title = describe(call.name, call.arguments)
                    await self.tool_started(call.id, call.name, title, call.arguments)
            elif step.role is Role.TOOL:
                for result in step.tool_results:
                    summary = finish_summaries.pop(result.call_id or "", None)
                    if summary is not None and not result.is_error:
                        if summary.strip():
                            await self.add(assistant_view(summary))
                        continue
                    await self.tool_finished(
                        result.call_id, "tool", result.content, result.is_error, result.metadata
                    )
        for panel in self._panels.values():
            panel.finish("", True, {"interrupted": True})
        self._panels.clear()
