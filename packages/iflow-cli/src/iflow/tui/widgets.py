"""The TUI's widgets: messages of the conversation, tool panels and the status bar (the
prompt typed in is in :mod:`iflow.tui.prompt`, the approval question in
:mod:`iflow.tui.approval`). They hold no agent logic; the app and the conversation feed them."""

from __future__ import annotations

import json
import time
from typing import Any

from textual.content import Content
from textual.reactive import reactive
from textual.widget import Widget
from textual.widgets import Collapsible, Static

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


def arguments_text(name: str, arguments: dict[str, Any]) -> str:
    """A tool call's arguments as lines for people: a shell command as ``$ command``, each
    other argument as ``key: value``, long values cut."""
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
        self.args_view = Static(Content(arguments_text(name, arguments)), classes="tool-args")
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
