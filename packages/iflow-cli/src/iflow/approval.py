"""Approval modes: which tool calls may run without asking a person.

- ``default``: asks before shell commands and file writes;
- ``auto-edit``: file writes allowed, shell commands ask;
- ``plan``: read-only tools only (the others are not even offered to the model);
- ``yolo``: never asks.

Headless runs have no one to ask: :func:`headless_approver` denies what would need a
question, with a sentence saying how to allow it.
"""

from __future__ import annotations

import shlex
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal

Mode = Literal["default", "auto-edit", "plan", "yolo"]
MODES: tuple[Mode, ...] = ("default", "auto-edit", "plan", "yolo")
Decision = Literal["allow_once", "allow_always", "deny"]

_ALL_KINDS = frozenset({"read", "edit", "execute", "mcp", "other"})
_ASKS: Mapping[str, frozenset[str]] = MappingProxyType(
    {
        "default": frozenset({"edit", "execute", "mcp"}),
        "auto-edit": frozenset({"execute", "mcp"}),
        "plan": frozenset(),
        "yolo": frozenset(),
    }
)
_OFFERED: Mapping[str, frozenset[str]] = MappingProxyType(
    {
        "default": _ALL_KINDS,
        "auto-edit": _ALL_KINDS,
        "plan": frozenset({"read", "other"}),
        "yolo": _ALL_KINDS,
    }
)


@dataclass
class ApprovalRequest:
    """What the approval prompt shows."""

    tool: str
    kind: str
    title: str
    arguments: dict[str, Any]


Approver = Callable[[ApprovalRequest], Awaitable[Decision]]


def check_mode(mode: str) -> Mode:
    if mode not in MODES:
        raise ValueError(f"unknown approval mode {mode!r}; use one of {', '.join(MODES)}")
    return mode


def offered_kinds(mode: Mode) -> frozenset[str]:
    """The tool kinds the model is offered in ``mode``."""
    return _OFFERED[mode]


@dataclass
class ApprovalPolicy:
    """The mode plus what the person allowed "always" during this session."""

    mode: Mode = "default"
    always: set[str] = field(default_factory=set)
    """Keys allowed for the rest of the session: ``edit``, ``execute:<command root>`` or
    ``mcp:<tool>``."""

    def key(self, kind: str, arguments: dict[str, Any], tool: str = "") -> str:
        if kind == "execute":
            return f"execute:{_command_root(str(arguments.get('command', '')))}"
        if kind == "mcp":
            return f"mcp:{tool}"
        return kind

    def needs_approval(self, kind: str, arguments: dict[str, Any], tool: str = "") -> bool:
        if kind not in _ASKS[self.mode]:
            return False
        return self.key(kind, arguments, tool) not in self.always

    def remember(self, kind: str, arguments: dict[str, Any], tool: str = "") -> None:
        self.always.add(self.key(kind, arguments, tool))


def _command_root(command: str) -> str:
    """The program a command line starts with: ``ls`` for ``ls; rm x`` or ``ls|wc``."""
    lexer = shlex.shlex(command, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    try:
        first = next(iter(lexer), "")
    except ValueError:  # an unclosed quote: the first word as written
        first = command.split()[0] if command.split() else ""
    return first.rstrip(";&|")


async def headless_approver(request: ApprovalRequest) -> Decision:
    """Headless mode never asks: everything that would need a question is denied."""
    return "deny"


async def allow_all(request: ApprovalRequest) -> Decision:
    return "allow_once"


def denial_message(
    request: ApprovalRequest,
    *,
    headless: bool,
    mode: Mode = "default",
    hook_reason: str | None = None,
) -> str:
    """Why a call was not run, naming what decided: a hook that asked (and its reason), or
    the approval mode, with the mode that would allow it."""
    if not headless:
        return f"The user denied this {request.tool} call; it was not run. Ask or try another way."
    if hook_reason is not None:
        return (
            f"A PreToolUse hook asked for approval of this {request.tool} call "
            f"({hook_reason or 'no reason given'}), which a headless run cannot give; the "
            "call was not run."
        )
    how = (
        "--yolo allows it"
        if request.kind in ("execute", "mcp") or mode == "auto-edit"
        else "--approval-mode auto-edit or --yolo allows it"
    )
    return (
        f"{request.tool} needs approval in {mode} mode, which a headless run cannot ask for; "
        f"the call was not run ({how})."
    )
