"""The iflow TUI: a conversation, tool panels, approvals, a prompt and a status bar.

The agent runs in an async worker on the app's own loop; its events come back as
:class:`~iflow.tui.messages.AgentEvent` messages, and its approval questions are answered
through the docked :class:`~iflow.tui.approval.ApprovalPanel`. The slash commands post what
they want shown or done as messages too, handled here. Imports here stay light so the first
frame comes fast: the model and the agent are built in a worker after the first paint.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from textual import on
from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.content import Content
from textual.css.query import NoMatches
from textual.reactive import reactive
from textual.widgets import Static, TextArea

from iflow import __version__
from iflow.approval import ApprovalRequest, Decision
from iflow.custom_commands import CustomCommand, load_commands
from iflow.errors import IflowError
from iflow.events import (
    AssistantDelta,
    AssistantMessage,
    Compressed,
    Event,
    Notice,
    RunEnded,
    RunStarted,
    TokensUpdated,
    ToolFinished,
    ToolStarted,
    TurnStarted,
)
from iflow.mentions import as_typed, expand_mentions, mentioned
from iflow.tui.approval import ApprovalPanel, edit_diff
from iflow.tui.commands import COMMAND_SUMMARY, SlashCommands
from iflow.tui.conversation import Conversation
from iflow.tui.messages import (
    AgentEvent,
    ApprovalAsked,
    ClearView,
    QuitApp,
    RefreshStatus,
    RunInBackground,
    RunPrompt,
    ShowHistory,
    ShowNotice,
    ShowText,
    UseSettings,
)
from iflow.tui.prompt import SLASH_SUGGESTIONS, PromptInput, PromptSuggester, SlashHints
from iflow.tui.widgets import StatusBar, ToolPanel

if TYPE_CHECKING:
    from iflow.agent import Agent
    from iflow.runner import SessionRecorder
    from iflow.sessions import SessionData, SessionStore
    from iflow.settings import Settings
    from iflow.workspace.base import Workspace

QUIT_WINDOW_SEC = 2.0
"""Ctrl+C pressed twice within this many seconds, while idle, quits."""


class IflowApp(App[int]):
    """The TUI. Give it an ``agent`` (tests) or the ``settings`` and ``workspace`` to build one."""

    CSS_PATH = "app.tcss"
    TITLE = "iflow"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("ctrl+c", "interrupt", "Interrupt / quit", priority=True, show=False),
        Binding("escape", "escape", "Interrupt", show=False),
        Binding("ctrl+d", "ctrl_d", "Quit", priority=True, show=False),
        Binding("ctrl+l", "clear_view", "Clear", priority=True, show=False),
        Binding("ctrl+q", "quit_app", "Quit", priority=True, show=False),
        Binding("pageup", "scroll_view(-1)", "Scroll up", show=False),
        Binding("pagedown", "scroll_view(1)", "Scroll down", show=False),
    ]

    busy: reactive[bool] = reactive(False, init=False)
    """A run (or a /compress) is going; prompts typed meanwhile are queued."""

    def __init__(
        self,
        *,
        agent: Agent | None = None,
        recorder: SessionRecorder | None = None,
        store: SessionStore | None = None,
        settings: Settings | None = None,
        workspace: Workspace | None = None,
        cwd: Path | None = None,
        home: Path | None = None,
        resume: SessionData | None = None,
    ) -> None:
        super().__init__()
        self.agent: Agent | None = None
        self.recorder = recorder
        self.store = store
        self.settings = settings
        self.workspace = workspace
        self.cwd = Path(cwd) if cwd else Path(agent.workspace.root if agent else ".")
        self.home = home or Path.home()
        self._custom: dict[str, CustomCommand] = {}
        self.resume = resume
        self.commands = SlashCommands(self)
        self.queue: list[str] = []
        self._given = agent
        self._approval: asyncio.Future[Decision] | None = None
        self._quit_armed = -QUIT_WINDOW_SEC
        self.failed: str | None = None
        """Why the model could not be built, when it could not."""
        self.runs = 0
        """Runs started (tests wait on it)."""

    # -- layout ----------------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        yield Conversation(id="conversation")
        yield ApprovalPanel(id="approval")
        yield SlashHints("", id="slash-hints")
        yield PromptInput(id="prompt", placeholder="Ask iflow to do something · /help")
        yield StatusBar(id="status")

    @property
    def conversation(self) -> Conversation:
        return self.query_one("#conversation", Conversation)

    @property
    def status_bar(self) -> StatusBar:
        return self.query_one("#status", StatusBar)

    @property
    def prompt_input(self) -> PromptInput:
        return self.query_one("#prompt", PromptInput)

    @property
    def approval_panel(self) -> ApprovalPanel:
        return self.query_one("#approval", ApprovalPanel)

    async def on_mount(self) -> None:
        self.approval_panel.display = False
        self._custom = load_commands(self.cwd, self.home)
        self.query_one("#slash-hints", Static).display = False
        custom = [f"/{name}" for name in self._custom]  # Tab completes the user's own too
        self.prompt_input.suggester = PromptSuggester([*SLASH_SUGGESTIONS, *custom], self.cwd)
        self.prompt_input.focus()
        banner = Content.assemble(
            ("iflow ", "bold $accent"),
            (__version__, "dim"),
            "  ",
            (str(self.cwd), "dim"),
            "\nType a task and press Enter. /help lists commands; Ctrl+C interrupts a run.",
        )
        await self.conversation.add(Static(banner, classes="banner"))
        if self._given is not None:
            await self._attach_agent(self._given, self.recorder)
        self.call_after_refresh(self._start)

    # -- building the agent ----------------------------------------------------------------

    def _start(self) -> None:
        """After the first frame: build the agent (unless given), then load the rest."""
        self.run_worker(self._build_and_preload(), group="start", exit_on_error=False)

    async def _build_and_preload(self) -> None:
        if self.agent is None:
            await self._build_agent()
        await asyncio.to_thread(importlib.import_module, "iflow.tui.assistant")

    async def _build_agent(self) -> None:
        settings, workspace = self.settings, self.workspace
        if settings is None or workspace is None:
            self.failed = "no settings or workspace were given to the app"
            await self.conversation.notice(
                f"The model could not be started: {self.failed}.", "error"
            )
            return
        mcp = None
        try:
            runner: Any = await asyncio.to_thread(importlib.import_module, "iflow.runner")
            model = await asyncio.to_thread(runner.model_from, settings)
            mcp = await runner.start_mcp(settings, cwd=self.cwd, home=self.home)
            for failure in mcp.failures() if mcp is not None else []:
                await self.conversation.notice(f"{failure} Going on without its tools.", "warning")
            agent, recorder = await runner.build_agent_owning(
                settings,
                workspace,
                mcp=mcp,
                cwd=self.cwd,
                home=self.home,
                headless=False,
                model=model,
                store=self.store,
                resume=self.resume,
            )
            mcp = None  # the agent owns the servers now
        except Exception as exc:  # any failure here is shown; the app stays open for /help etc.
            reason = str(exc) if isinstance(exc, IflowError) else f"{type(exc).__name__}: {exc}"
            if mcp is not None:
                await mcp.aclose()
            self.failed = reason
            self.status_bar.model_name = "no model"
            await self.conversation.notice(f"The model could not be started: {reason}", "error")
            self.queue.clear()
            self.status_bar.queued = 0
            return
        await self._attach_agent(agent, recorder)

    async def _attach_agent(self, agent: Agent, recorder: SessionRecorder | None) -> None:
        self.agent, self.recorder = agent, recorder
        agent.on_event = self.post_event
        agent.approver = self.ask
        self.refresh_status()
        if any(s.role.value == "user" for s in agent.trajectory.steps):
            await self.replay()
            if recorder is not None:
                await self.conversation.notice(
                    f"Resumed session {recorder.data.id} ({agent.turn} turns)."
                )
        if self.queue:
            self._next_queued()

    def post_event(self, event: Event) -> None:
        """The agent's event sink: never blocks, safe from any thread."""
        self.post_message(AgentEvent(event))

    def _describe(self, name: str, arguments: dict[str, Any]) -> str:
        tool = self.agent.all_tools.get(name) if self.agent else None
        return tool.describe(arguments) if tool else name

    async def replay(self) -> None:
        """Show the agent's saved steps (after a resume)."""
        if self.agent is not None:
            await self.conversation.replay(self.agent.trajectory.steps, self._describe)

    def refresh_status(self) -> None:
        agent, bar = self.agent, self.status_bar
        if agent is None:
            return
        bar.model_name = agent.model.name
        bar.mode = agent.policy.mode
        bar.used = agent.context_used()
        bar.limit = agent.model.context_limit
        bar.turn = sum(1 for step in agent.history if step.role.value == "user")
        bar.calls = agent.turn

    # -- prompts and runs ------------------------------------------------------------------

    @on(TextArea.Changed, "#prompt")
    def _typing(self, event: TextArea.Changed) -> None:
        """While a /command is being typed, the commands it may be, listed above the input."""
        known = {**COMMAND_SUMMARY, **{c.name: c.description for c in self._custom.values()}}
        self.query_one("#slash-hints", SlashHints).show_for(self.prompt_input.value, known)

    @on(PromptInput.Submitted, "#prompt")
    async def _submitted(self, event: PromptInput.Submitted) -> None:
        text = event.value.strip()
        self.prompt_input.value = ""
        if not text:
            return
        self.prompt_input.remember(text)
        first = text.split(maxsplit=1)[0]
        if first.startswith("/") and "/" not in first[1:]:
            await self.commands.run(text)
        else:
            await self.submit(text)

    async def submit(self, prompt: str) -> None:
        """Run ``prompt`` now, or queue it while a run is going or the model is starting."""
        if self.failed is not None:
            await self.conversation.notice(
                "No model is available (see above); fix the settings and start iflow again.",
                "error",
            )
            return
        if self.agent is None or self.busy:
            self.queue.append(prompt)
            self.status_bar.queued = len(self.queue)
            when = "the model is ready" if self.agent is None else "the current run ends"
            first = (prompt.splitlines() or [""])[0]  # (several lines: the first, cut)
            gist = first[:80] + (" …" if len(first) > 80 or "\n" in prompt else "")
            await self.conversation.notice(f"Queued; it runs when {when}: {gist}")
            return
        self.start_run(prompt)

    def start_run(self, prompt: str) -> None:
        self.busy = True
        self.runs += 1
        self.run_worker(self._run(prompt), group="agent", exit_on_error=False)

    async def _run(self, prompt: str) -> None:
        assert self.agent is not None
        try:
            prompt, notes = await asyncio.to_thread(expand_mentions, prompt, self.cwd)
            for ref in mentioned(as_typed(prompt), self.cwd):
                await self.conversation.notice(f"Attached @{ref[0]}")
            for note in notes:
                await self.conversation.notice(note, "warning")
            await self.agent.run(prompt)
        except Exception as exc:  # a bug rather than an end of the run: show it, keep the app
            await self.conversation.notice(f"The run failed unexpectedly: {exc!r}", "error")
        finally:
            self.busy = False
            self.refresh_status()

    def watch_busy(self, busy: bool) -> None:
        self.status_bar.working = busy
        if not busy and self.queue:
            self.call_later(self._next_queued)

    def _next_queued(self) -> None:
        if self.busy or not self.queue or self.agent is None:
            return
        prompt = self.queue.pop(0)
        self.status_bar.queued = len(self.queue)
        self.start_run(prompt)

    @on(AgentEvent)
    async def _agent_event(self, message: AgentEvent) -> None:
        ev, view, bar = message.event, self.conversation, self.status_bar
        if isinstance(ev, RunStarted):
            await view.user(ev.prompt)
            bar.turn += 1
        elif isinstance(ev, TurnStarted):
            bar.calls = ev.turn
        elif isinstance(ev, AssistantDelta):
            await view.delta(ev.text)
        elif isinstance(ev, AssistantMessage):
            await view.assistant(ev.content, ev.reasoning)
        elif isinstance(ev, ToolStarted):
            await view.tool_started(ev.call_id, ev.name, ev.title, ev.arguments)
        elif isinstance(ev, ToolFinished):
            await view.tool_finished(ev.call_id, ev.name, ev.content, ev.is_error, ev.metadata)
        elif isinstance(ev, Notice):
            await view.notice(ev.text, ev.level)
        elif isinstance(ev, TokensUpdated):
            bar.used, bar.limit = ev.used, ev.limit
        elif isinstance(ev, Compressed):
            bar.used = ev.after
        elif isinstance(ev, RunEnded):
            await view.run_ended(ev.outcome, ev.message, ev.turns, ev.result)
            self.refresh_status()

    # -- what the slash commands ask ------------------------------------------------------

    @on(ShowNotice)
    async def _show_notice(self, message: ShowNotice) -> None:
        await self.conversation.notice(message.text, message.level)

    @on(ShowText)
    async def _show_text(self, message: ShowText) -> None:
        await self.conversation.text_block(message.text, message.classes)

    @on(ClearView)
    async def _clear(self, message: ClearView) -> None:
        await self.conversation.clear_view()

    @on(ShowHistory)
    async def _show_history(self, message: ShowHistory) -> None:
        await self.conversation.clear_view()
        await self.replay()
        self.refresh_status()
        if message.prompt is not None:
            self.prompt_input.value = message.prompt
            self.prompt_input.cursor_position = len(message.prompt)  # (typing goes on at its end)

    @on(RefreshStatus)
    def _refresh_status(self, message: RefreshStatus) -> None:
        self.refresh_status()

    @on(UseSettings)
    def _use_settings(self, message: UseSettings) -> None:
        self.settings = message.settings
        self.refresh_status()

    @on(RunPrompt)
    async def _run_prompt(self, message: RunPrompt) -> None:
        await self.submit(message.prompt)

    @on(RunInBackground)
    def _run_in_background(self, message: RunInBackground) -> None:
        self.busy = True
        self.run_worker(self._background(message), group="agent", exit_on_error=False)

    async def _background(self, message: RunInBackground) -> None:
        try:
            await message.work
        finally:
            self.busy = False
            self.refresh_status()

    @on(QuitApp)
    def _quit(self, message: QuitApp) -> None:
        self.action_quit_app()

    # -- approvals -------------------------------------------------------------------------

    async def ask(self, request: ApprovalRequest) -> Decision:
        """The agent's approver: show the question, wait for the person's answer."""
        future: asyncio.Future[Decision] = asyncio.get_running_loop().create_future()
        self._approval = future
        diff = await edit_diff(self.agent, request) if request.kind == "edit" else None
        self.post_message(ApprovalAsked(request, diff))
        try:
            return await future
        finally:
            self._approval = None
            with contextlib.suppress(NoMatches):
                self.approval_panel.display = False
                self.prompt_input.focus()
                for panel in self.query(ToolPanel):
                    panel.waiting(False)

    @on(ApprovalAsked)
    def _show_approval(self, message: ApprovalAsked) -> None:
        if self._approval is None or self._approval.done():
            return
        r = message.request
        self.approval_panel.ask(r.tool, r.kind, r.title, r.arguments, diff=message.diff)
        running = [p for p in self.query(ToolPanel) if p.state == "running"]
        if running:
            running[-1].waiting(True)

    @on(ApprovalPanel.Decided)
    def _decided(self, message: ApprovalPanel.Decided) -> None:
        if self._approval is not None and not self._approval.done():
            self._approval.set_result(message.decision)  # type: ignore[arg-type]

    # -- keys ------------------------------------------------------------------------------

    async def action_interrupt(self) -> None:
        """Ctrl+C: copy a selection, else interrupt a run, else clear the prompt, else arm quit."""
        if self.screen.get_selected_text():
            self.screen.action_copy_text()
            return
        if self.busy:
            if self.agent is not None and self.agent.interrupt():
                await self.conversation.notice(
                    "Interrupting…"
                )  # in the conversation, not over the input
            return
        if self.prompt_input.value:
            self.prompt_input.value = ""
            return
        now = time.monotonic()
        if now - self._quit_armed < QUIT_WINDOW_SEC:
            self.exit(0)
            return
        self._quit_armed = now
        self.notify("Press Ctrl+C again to quit.", timeout=QUIT_WINDOW_SEC)

    async def action_escape(self) -> None:
        if self.busy and self.agent is not None:
            self.agent.interrupt()

    def action_ctrl_d(self) -> None:
        if self.prompt_input.value:
            self.prompt_input.action_delete_right()
        else:
            self.action_quit_app()

    def action_scroll_view(self, direction: int) -> None:
        view = self.conversation
        if direction < 0:
            view.scroll_page_up(animate=False)
        else:
            view.scroll_page_down(animate=False)

    async def action_clear_view(self) -> None:
        await self.commands.clear("")

    def action_quit_app(self) -> None:
        if self.agent is not None:
            self.agent.interrupt()
        self.exit(0)
