"""Slash commands typed at the prompt: ``/help``, ``/mode plan``, ``/resume ID``...

A command reads the app's state through :class:`CommandHost` and works on the agent and the
session itself; what it wants shown or done in the TUI it posts to the app as a message of
:mod:`iflow.tui.messages` (attributes down, messages up, as Textual has it)."""

from __future__ import annotations

import asyncio
import importlib
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from textual.message import Message

from iflow.approval import MODES, check_mode
from iflow.context.memory import MEMORY_FILE_NAMES, load_memory
from iflow.custom_commands import load_commands
from iflow.errors import IflowError
from iflow.mentions import as_typed
from iflow.tui.messages import (
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
from iflow.tui.widgets import human_tokens

if TYPE_CHECKING:
    from iflow.agent import Agent
    from iflow.runner import SessionRecorder
    from iflow.sessions import SessionStore
    from iflow.settings import Settings


class CommandHost(Protocol):
    """What the slash commands see of the TUI app (:class:`iflow.tui.app.IflowApp`): its
    agent and session, read-only, and its message queue. The app's module is not imported,
    nor its widgets reached: a command posts what it wants, the app's handlers do it."""

    @property
    def agent(self) -> Agent | None: ...

    @property
    def recorder(self) -> SessionRecorder | None: ...

    @property
    def store(self) -> SessionStore | None: ...

    @property
    def settings(self) -> Settings | None: ...

    @property
    def cwd(self) -> Path: ...

    @property
    def home(self) -> Path: ...

    @property
    def failed(self) -> str | None:
        """Why the model could not be built, when it could not."""

    @property
    def busy(self) -> bool:
        """A run (or a /compress) is going."""

    def post_message(self, message: Message) -> bool: ...


HELP = """\
Commands
  /help            this help
  /clear           clear the view (Ctrl+L); the agent keeps its history, /compress shrinks it
  /compress        summarise older turns now to free context (shows tokens before -> after)
  /mode [MODE]     show or set the approval mode: default, auto-edit, plan, yolo
  /model [NAME]    the model, its provider and where each setting came from; with NAME switch
                   to that model (a directory for a local one), the conversation kept
  /todo            the agent's todo list
  /mcp             the MCP servers: their state and tools, or why they are not running
  /memory          the memory files read into the prompt (IFLOW.md, AGENTS.md, CLAUDE.md,
                   GEMINI.md, ...), in the order they were read
  /rewind [N]      list the turns; with N put the files and the conversation back to before turn N
  /save [PATH]     write the trajectory: ALE JSONL, or ATIF when PATH ends in .atif.json
                   (default: the sessions directory)
  /resume [ID]     list this directory's saved sessions; with an ID (or a unique prefix)
                   resume that one (another directory's asks first: /resume ID! goes ahead)
  /quit            quit (also Ctrl+D on an empty prompt, or Ctrl+C twice when idle)
Keys
  Enter            send the prompt; while a run is going, prompts are queued and run in turn
  Ctrl+J           start a new line in the prompt (Shift+Enter too, where the terminal
                   tells it from Enter); a paste goes in whole, all its lines
  Up / Down        move between the prompt's lines; on its first or last line, recall
                   earlier prompts of this session
  PgUp / PgDn      scroll the conversation (the mouse wheel too)
  Tab              complete a /command, or the path after an @ (@app.py, @src/: the file or
                   folder goes to the model with the prompt)
  Ctrl+C or Esc    interrupt the running turn; the session is kept and you can go on
  Ctrl+L           clear the view
  y / a / n        answer an approval: allow once, always allow, deny (also 1 / 2 / 3; Esc denies)"""

COMMAND_SUMMARY = {
    "help": "the commands and keys",
    "clear": "clear the view",
    "compress": "summarise older turns now",
    "mode": "show or set the approval mode",
    "model": "the model; /model NAME switches",
    "todo": "the agent's todo list",
    "mcp": "the MCP servers and their tools",
    "memory": "the memory files read",
    "rewind": "list turns; /rewind N goes back",
    "save": "write the trajectory",
    "resume": "list or resume saved sessions",
    "quit": "quit",
}
"""One line per built-in command, for the list shown while one is typed."""

MODE_HELP = {
    "default": "asks before shell commands and file writes",
    "auto-edit": "file writes run without asking, shell commands ask",
    "plan": "read-only: only tools that change nothing are offered",
    "yolo": "every tool call runs without asking",
}


class SlashCommands:
    """Runs one command line against the app (and its agent)."""

    def __init__(self, app: CommandHost) -> None:
        self.app = app
        self.table: dict[str, Callable[[str], Awaitable[None]]] = {
            "help": self.help,
            "clear": self.clear,
            "compress": self.compress,
            "mode": self.mode,
            "model": self.model,
            "todo": self.todo,
            "mcp": self.mcp,
            "memory": self.memory,
            "rewind": self.rewind,
            "save": self.save,
            "resume": self.resume,
            "quit": self.quit,
            "exit": self.quit,
        }

    async def run(self, line: str) -> None:
        words = line.strip()[1:].split(maxsplit=1)  # (its argument may be on a new line)
        name, arg = [*words, "", ""][:2]
        handler = self.table.get(name.lower())
        if handler is not None:
            await handler(arg.strip())
            return
        custom = load_commands(self.app.cwd, self.app.home).get(name)
        if custom is None:
            self._say(f"Unknown command /{name}; type /help to see the commands.", "warning")
            return
        self.app.post_message(RunPrompt(custom.expand(arg.strip())))

    def _say(self, text: str, level: str = "info") -> None:
        self.app.post_message(ShowNotice(text, level))

    def _show(self, text: str, classes: str = "info-block") -> None:
        self.app.post_message(ShowText(text, classes))

    def _agent(self) -> Agent | None:
        if self.app.agent is None:
            why = "could not be started (see above)" if self.app.failed else "is still starting"
            self._say(f"The model {why}; this command needs it.", "warning")
        return self.app.agent

    def _idle(self, what: str) -> bool:
        if self.app.busy:
            self._say(
                f"{what} cannot run while the agent is working; wait for it or press Ctrl+C.",
                "warning",
            )
            return False
        return True

    # -- the commands ----------------------------------------------------------------------

    async def help(self, arg: str) -> None:
        custom = load_commands(self.app.cwd, self.app.home)
        lines = [HELP]
        if custom:
            lines.append("Your commands (.iflow/commands, ~/.iflow/commands)")
            for command in custom.values():
                usage = f"/{command.name} {command.argument_hint}".rstrip()
                lines.append(f"  {usage:<16} {command.description}")
        self._show("\n".join(lines), "help")

    async def clear(self, arg: str) -> None:
        self.app.post_message(ClearView())
        self._say("View cleared; the agent still remembers the conversation.")

    async def quit(self, arg: str) -> None:
        self.app.post_message(QuitApp())

    async def todo(self, arg: str) -> None:
        agent = self._agent()
        if agent is not None:
            self._show(agent.todos.render(), "todo")

    async def mode(self, arg: str) -> None:
        agent = self._agent()
        if agent is None:
            return
        if not arg:
            current = agent.policy.mode
            lines = [f"Approval mode: {current} ({MODE_HELP[current]})."]
            lines += [f"  /mode {m:<10} {MODE_HELP[m]}" for m in MODES]
            self._show("\n".join(lines))
            return
        try:
            mode = check_mode(arg)
        except ValueError:
            self._say(f"Unknown mode {arg!r}; use one of {', '.join(MODES)}.", "warning")
            return
        agent.set_mode(mode)
        self.app.post_message(RefreshStatus())
        self._say(f"Approval mode set to {mode}: {MODE_HELP[mode]}.")

    async def model(self, arg: str) -> None:
        agent = self._agent()
        if agent is None:
            return
        if arg:
            await self._switch_model(agent, arg)
            return
        settings = self.app.settings
        limit = human_tokens(agent.model.context_limit)
        if settings is None:
            self._show(f"Model: {agent.model.name} (context {limit})")
            return
        lines = [
            f"Model: {agent.model.name} (provider {settings.provider}, context {limit})",
            f"  provider from: {settings.source('provider')}",
            f"  model from:    {settings.source('model')}",
        ]
        if settings.base_url:
            lines.append(f"  base URL:      {settings.base_url} ({settings.source('base_url')})")
        others = sorted(set(settings.sources) - {"provider", "model", "base_url", "api_key"})
        for name in others:
            lines.append(f"  {name} from {settings.source(name)}")
        self._show("\n".join(lines))

    async def memory(self, arg: str) -> None:
        """The memory files this session's prompt was built from, most general first."""
        files = load_memory(self.app.cwd, self.app.home)
        if not files:
            places = ", ".join(MEMORY_FILE_NAMES)
            self._show(
                f"No memory file was read. iflow reads {places} from ~/.iflow (and "
                "~/.claude/CLAUDE.md, ~/.gemini/GEMINI.md), the repository root and the "
                "folders down to this one."
            )
            return
        lines = ["Memory files, most general first"]
        for f in files:
            cut = f" (cut: {f.cut} characters left out)" if f.cut else ""
            lines.append(f"  {f.scope:<9} {f.path}  {len(f.text)} characters{cut}")
        self._show("\n".join(lines))

    async def mcp(self, arg: str) -> None:
        agent = self._agent()
        if agent is None:
            return
        if agent.mcp is None:
            self._show(
                'No MCP servers are configured. Add them under "mcpServers" in '
                "~/.iflow/settings.json or .iflow/settings.json, e.g.\n"
                '  "mcpServers": {"git": {"command": "mcp-server-git", "args": ["-r", "."]}}'
            )
            return
        offered: dict[str, list[str]] = {}
        for tool in agent.all_tools:
            server = getattr(tool, "server", None)  # an MCP tool names its server
            if isinstance(server, str):
                offered.setdefault(server, []).append(tool.name)
        lines = ["MCP servers"]
        for entry in agent.mcp.status():
            state = entry["state"]
            lines.append(f"  {entry['name']}  {state}  ({entry['transport']}: {entry['endpoint']})")
            if state == "ready":
                tools = offered.get(entry["name"]) or []
                lines.append(f"    tools: {', '.join(tools) if tools else '(none)'}")
            elif entry["error"]:
                lines.append(f"    {entry['error']}")
        self._show("\n".join(lines), "mcp")

    async def rewind(self, arg: str) -> None:
        agent = self._agent()
        if agent is None or not self._idle("/rewind"):
            return
        turns = agent.checkpoints.turns if agent.checkpoints is not None else []
        if not arg:
            if not turns:
                self._say("There is no turn to rewind to yet.")
                return
            lines = ["Turns (/rewind N goes back to before turn N)"]
            for turn in turns:
                files = "  files checkpointed" if turn.checkpoint else ""
                typed = as_typed(turn.prompt).strip()  # (not the @files it attached)
                first = (typed.splitlines() or [""])[0]
                more = " …" if len(first) > 70 or "\n" in typed else ""
                lines.append(f"  {turn.number:>3}  {first[:70]}{more}{files}")
            self._show("\n".join(lines), "rewind")
            return
        if not arg.isdigit():
            self._say(f"/rewind takes a turn number, not {arg!r}; /rewind lists them.", "warning")
            return
        prompt = as_typed(turns[int(arg) - 1].prompt) if 1 <= int(arg) <= len(turns) else ""
        try:
            report = await agent.rewind(int(arg))
        except IflowError as exc:
            self._say(str(exc), "warning")
            return
        if self.app.recorder is not None:
            await asyncio.to_thread(self.app.recorder.save, agent)
        self.app.post_message(
            ShowHistory(prompt)
        )  # (its prompt back in the input, to edit or send)
        self._say(
            f"Rewound to before turn {arg}: {len(report.written)} file(s) restored, "
            f"{len(report.removed)} removed"
            + (f", {len(report.skipped)} left as they were (unreadable)" if report.skipped else "")
            + "."
        )

    async def _switch_model(self, agent: Agent, name: str) -> None:
        """``/model NAME``: the same provider with another model (a model name for a server,
        a model directory for a local model); the conversation goes on with it."""
        settings = self.app.settings
        if settings is None or not self._idle("/model"):
            return
        field = "model_path" if settings.provider == "local" else "model"
        if settings.provider == "scripted":
            self._say("A scripted model cannot be switched; it replays its script.", "warning")
            return
        changed = settings.model_copy(update={field: name})
        changed._sources = {**settings.sources, field: "/model, in this session"}
        try:
            runner: Any = importlib.import_module("iflow.runner")
            model = await asyncio.to_thread(runner.model_from, changed)
        except IflowError as exc:
            self._say(f"The model stays {agent.model.name}: {exc}", "warning")
            return
        old = agent.model
        agent.set_model(model)
        self.app.post_message(UseSettings(changed))
        closing = getattr(old, "aclose", None)
        if callable(closing):
            await closing()
        self._say(f"Model switched to {model.name}; the conversation goes on with it.")

    async def compress(self, arg: str) -> None:
        agent = self._agent()
        if agent is None or not self._idle("/compress"):
            return
        self.app.post_message(RunInBackground(self._compress(agent)))

    async def _compress(self, agent: Agent) -> None:
        """The app runs this as the agent's worker, busy meanwhile (then the status bar
        shows what is left)."""
        before = agent.context_used()
        try:
            done = await agent.compress(force=True)
        except IflowError as exc:
            self._say(f"Compression failed: {exc}", "error")
            return
        if not done:
            self._say(
                f"Nothing to compress yet ({human_tokens(before)} tokens): the conversation "
                f"is no longer than the {agent.config.keep_recent_turns} recent turns kept."
            )

    async def save(self, arg: str) -> None:
        agent = self._agent()
        if agent is None:
            return
        path = self._save_path(agent, arg)
        trajectory = agent.trajectory.model_copy(deep=True)
        try:
            await asyncio.to_thread(_write_trajectory, trajectory, path)
        except (OSError, ValueError) as exc:
            self._say(f"Could not write {path}: {exc}; choose another path.", "error")
            return
        kind = "ATIF" if path.name.endswith(".atif.json") else "ALE JSONL"
        self._say(f"Trajectory saved to {path} ({kind}, {len(trajectory.steps)} steps).")

    def _save_path(self, agent: Agent, arg: str) -> Path:
        if arg:
            path = Path(arg).expanduser()
            return path if path.is_absolute() else self.app.cwd / path
        recorder, store = self.app.recorder, self.app.store
        name = recorder.data.id if recorder is not None else agent.trajectory.trajectory_id
        folder = store.root if store is not None else self.app.cwd
        return folder / f"{name}.jsonl"

    async def resume(self, arg: str) -> None:
        agent = self._agent()
        store = self.app.store
        if agent is None:
            return
        if store is None:
            self._say("Sessions are not saved in this run, so none can be resumed.")
            return
        if not arg:
            await self._list_sessions()
            return
        if not self._idle("/resume"):
            return
        confirmed = arg.endswith("!")
        try:
            data = await asyncio.to_thread(store.load, arg.rstrip("!"))
        except IflowError as exc:
            self._say(str(exc), "error")
            return
        started = Path(data.cwd).expanduser().resolve()
        if started != self.app.cwd.resolve() and not confirmed:
            self._say(
                f"Session {data.id} belongs to {started}, not to this directory "
                f"({self.app.cwd}); /resume {data.id}! resumes it here anyway.",
                "warning",
            )
            return
        agent.restore(
            history=data.history,
            trajectory=data.trajectory,
            todos=data.todos,
            turns=data.turns,
            tokens_used=data.tokens_used,
            extra=data.extra,
        )
        if self.app.recorder is not None:
            self.app.recorder.data = data
        self.app.post_message(ShowHistory())
        self._say(f"Resumed session {data.id} ({data.turns} turns): {data.title}")

    async def _list_sessions(self) -> None:
        store = self.app.store
        assert store is not None
        summaries, warnings = await asyncio.to_thread(store.list, self.app.cwd)
        for warning in warnings:
            self._say(warning, "warning")
        if not summaries:
            self._say(f"No saved sessions of {self.app.cwd} in {store.root}.")
            return
        current = self.app.recorder.data.id if self.app.recorder else None
        lines = [f"Saved sessions of {self.app.cwd} (newest first); /resume ID resumes one:"]
        for s in summaries[:20]:
            mark = "*" if s.id == current else " "
            lines.append(
                f"{mark} {s.id}  {s.updated_at:%Y-%m-%d %H:%M}  {s.turns:>3} turns  {s.title}"
            )
        if len(summaries) > 20:
            lines.append(f"  … and {len(summaries) - 20} older")
        self._show("\n".join(lines))


def _write_trajectory(trajectory: object, path: Path) -> None:
    from ale.atif import write_atif
    from ale.jsonl import write_jsonl
    from ale.trajectory import Trajectory

    assert isinstance(trajectory, Trajectory)
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.name.endswith(".atif.json"):
        write_atif(trajectory, path)
    else:
        write_jsonl(path, [trajectory])
