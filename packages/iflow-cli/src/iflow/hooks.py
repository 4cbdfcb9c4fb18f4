"""Hooks: commands run on the agent's events, in Claude Code's shape so its users' hooks work.

Configured under ``hooks`` in settings, exactly as Claude Code writes them::

    {"hooks": {"PreToolUse": [{"matcher": "Bash|Write",
                               "hooks": [{"type": "command", "command": "./check.sh",
                                          "timeout": 30}]}]}}

Events: ``PreToolUse`` and ``PostToolUse`` (matched against the tool's name: iflow's own,
``run_shell_command``, or Claude Code's for the same tool, ``Bash``; a regular expression,
``*`` or empty for all), ``UserPromptSubmit``, ``Stop`` and ``SessionStart``. Each command
gets the event as JSON on stdin (``session_id``, ``cwd``, ``hook_event_name``, ``tool_name``,
``tool_input``, ``tool_response``, ``prompt``, ``stop_hook_active``, ``source``) and runs with
bash in the working directory, under its ``timeout`` (seconds, 60 by default).

What a hook says back, as Claude Code reads it: exit 0 is success, and JSON on stdout may
decide (``hookSpecificOutput.permissionDecision`` ``allow``/``deny``/``ask`` with a reason for
PreToolUse; ``decision: "block"`` with a ``reason`` for PostToolUse, UserPromptSubmit and Stop;
``additionalContext`` for UserPromptSubmit and SessionStart, where plain stdout is context
too; ``continue: false`` with a ``stopReason`` ends the run). Exit 2 blocks, its stderr the
reason (the model reads it for a tool call or a stop). Any other failure (another exit code,
a timeout, output that is not the JSON it claims to be) is one sentence for the person and
changes nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from ale.trajectory import Step
from iflow.errors import StoppedByHook

HookEvent = Literal["PreToolUse", "PostToolUse", "UserPromptSubmit", "Stop", "SessionStart"]
EVENTS: tuple[HookEvent, ...] = (
    "PreToolUse",
    "PostToolUse",
    "UserPromptSubmit",
    "Stop",
    "SessionStart",
)
DEFAULT_TIMEOUT_SEC = 60.0
CLAUDE_NAMES = {
    "run_shell_command": "Bash",
    "write_file": "Write",
    "replace": "Edit",
    "read_file": "Read",
    "glob": "Glob",
    "search_file_content": "Grep",
    "list_directory": "LS",
    "task": "Task",
    "todo_write": "TodoWrite",
}
"""iflow's tools by the names Claude Code gives the same tools (hooks may match either)."""
_OUTPUT_LIMIT = 10_000


class HookCommand(BaseModel):
    model_config = ConfigDict(extra="forbid")

    type: Literal["command"] = "command"
    command: str = Field(min_length=1)
    timeout: float | None = Field(default=None, gt=0)
    """Seconds the command may take; 60 when unset."""


class HookMatcher(BaseModel):
    model_config = ConfigDict(extra="forbid")

    matcher: str = ""
    """Tool names (a regular expression; ``*`` or empty: every tool). Only the tool events
    read it."""
    hooks: list[HookCommand] = Field(default_factory=list)


Warn = Callable[[str], None]
"""Where a hook's failure, one sentence, is said."""
HooksConfig = dict[str, list[HookMatcher]]
"""Hooks by event name; an event iflow does not have (Claude Code's ``Notification``, say)
is kept and never fires."""


@dataclass
class HookVerdict:
    """What the hooks of one event said, together."""

    decision: Literal["allow", "deny", "ask", "block"] | None = None
    reason: str = ""
    context: list[str] = field(default_factory=list)
    """Text for the model (UserPromptSubmit, SessionStart)."""
    stop: str | None = None
    """``continue: false``: the run ends, with this reason."""
    problems: list[str] = field(default_factory=list)
    """One sentence per hook that failed without deciding anything."""


class HookRunner:
    """The configured hooks, run on the agent's events."""

    def __init__(
        self,
        config: HooksConfig,
        *,
        cwd: Path,
        session_id: str = "",
        env: dict[str, str] | None = None,
        transcript: Callable[[], list[Step]] | None = None,
        transcript_dir: Path | None = None,
    ) -> None:
        self.config = config
        self.cwd = cwd
        self.session_id = session_id
        self.env = env
        self.transcript = transcript
        """The conversation so far, written where ``transcript_path`` points before each
        hook runs (as Claude Code gives its hooks the session's transcript)."""
        self.transcript_dir = transcript_dir
        self.stop_hook_active = False
        """A Stop hook sent the agent on and it has not stopped since (Claude Code's flag)."""

    def wants(self, event: str, tool: str | None = None) -> list[HookCommand]:
        """The commands ``event`` runs (for ``tool``, when it is a tool event)."""
        out: list[HookCommand] = []
        for group in self.config.get(event, []):
            if tool is not None and not _matches(group.matcher, tool):
                continue
            out.extend(group.hooks)
        return out

    async def on_prompt(self, prompt: str, *, first: bool, warn: Warn) -> str:
        """SessionStart (``first``: the session's first prompt) and UserPromptSubmit: the
        prompt with the context they give; a block raises :class:`StoppedByHook` before the
        model sees it."""
        context: list[str] = []
        if first:
            context += (await self.run("SessionStart", {"source": "startup"}, warn=warn)).context
        verdict = await self.run("UserPromptSubmit", {"prompt": prompt}, warn=warn)
        if verdict.decision == "block" or verdict.stop is not None:
            reason = verdict.reason or verdict.stop or "no reason given"
            raise StoppedByHook(f"a UserPromptSubmit hook blocked the prompt: {reason}")
        return "\n\n".join([prompt, *context, *verdict.context])

    async def on_stop(self, *, warn: Warn) -> str | None:
        """Stop hooks, when the agent would finish: the reason to go on when one blocks
        (once: a second stop in a row ends the run); ``continue: false`` raises
        :class:`StoppedByHook`."""
        verdict = await self.run("Stop", {"stop_hook_active": self.stop_hook_active}, warn=warn)
        if verdict.stop is not None:
            raise StoppedByHook(f"a Stop hook ended the run: {verdict.stop}")
        if verdict.decision != "block" or self.stop_hook_active:
            self.stop_hook_active = False
            return None
        self.stop_hook_active = True
        return verdict.reason or "the work is not done yet"

    async def run(
        self,
        event: HookEvent,
        payload: dict[str, Any],
        tool: str | None = None,
        *,
        warn: Warn | None = None,
    ) -> HookVerdict:
        """Run ``event``'s commands one after another; their verdict together (a deny or a
        block wins over an allow). Each hook that failed is handed to ``warn``."""
        verdict = HookVerdict()
        commands = self.wants(event, tool)
        if not commands:
            return verdict
        body = {
            "session_id": self.session_id,
            "transcript_path": await asyncio.to_thread(self._write_transcript),
            "cwd": str(self.cwd),
            "hook_event_name": event,
            **payload,
        }
        if tool is not None:
            body["tool_name"] = CLAUDE_NAMES.get(tool, tool)
        data = json.dumps(body).encode()
        for command in commands:
            await self._one(event, command, data, verdict)
            if verdict.decision in ("deny", "block") or verdict.stop is not None:
                break
        if warn is not None:
            for problem in verdict.problems:
                warn(problem)
        return verdict

    def _write_transcript(self) -> str:
        """The conversation so far as a JSONL transcript (one message a line, as Claude
        Code's transcripts hold them); its path, or "" when there is none to write."""
        if self.transcript is None or self.transcript_dir is None:
            return ""
        path = self.transcript_dir / f"{self.session_id or 'run'}.jsonl"
        lines = []
        for step in self.transcript():
            message: dict[str, Any] = {"role": step.role.value, "content": step.content}
            if step.tool_calls:
                message["tool_calls"] = [
                    {"id": c.id, "name": c.name, "input": c.arguments} for c in step.tool_calls
                ]
            if step.tool_results:
                message["tool_results"] = [
                    {"tool_use_id": r.call_id, "content": r.content, "is_error": r.is_error}
                    for r in step.tool_results
                ]
            stamp = step.timestamp.isoformat() if step.timestamp else None
            lines.append(
                json.dumps(
                    {
                        "type": step.role.value,
                        "session_id": self.session_id,
                        "cwd": str(self.cwd),
                        "timestamp": stamp,
                        "message": message,
                    }
                )
            )
        try:
            self.transcript_dir.mkdir(parents=True, exist_ok=True)
            path.write_text("\n".join(lines) + "\n")
        except OSError:
            return ""
        return str(path)

    async def _one(
        self, event: HookEvent, command: HookCommand, data: bytes, verdict: HookVerdict
    ) -> None:
        limit = command.timeout or DEFAULT_TIMEOUT_SEC
        env = {
            **(os.environ if self.env is None else self.env),
            "IFLOW_PROJECT_DIR": str(self.cwd),
            "CLAUDE_PROJECT_DIR": str(self.cwd),
        }
        try:
            process = await asyncio.create_subprocess_exec(
                "bash",
                "-c",
                command.command,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                cwd=self.cwd,
                env=env,
                start_new_session=True,
            )
        except OSError as exc:
            verdict.problems.append(
                f"the {event} hook `{command.command}` could not start ({exc})."
            )
            return
        try:
            out, err = await asyncio.wait_for(process.communicate(data), limit)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            await process.wait()
            verdict.problems.append(
                f"the {event} hook `{command.command}` ran past its timeout of {limit:g} s and "
                "was stopped; it decided nothing."
            )
            return
        stdout = out.decode(errors="replace")[:_OUTPUT_LIMIT].strip()
        stderr = err.decode(errors="replace")[:_OUTPUT_LIMIT].strip()
        code = process.returncode
        if code == 2:  # a blocking error: stderr is the reason
            verdict.decision = "deny" if event == "PreToolUse" else "block"
            verdict.reason = stderr or f"the {event} hook `{command.command}` blocked it"
            return
        if code != 0:
            said = f": {stderr.splitlines()[-1]}" if stderr else ""
            verdict.problems.append(
                f"the {event} hook `{command.command}` failed (exit {code}{said}); it decided "
                "nothing."
            )
            return
        _read_output(event, command, stdout, verdict)


def _read_output(event: HookEvent, command: HookCommand, stdout: str, verdict: HookVerdict) -> None:
    """A successful hook's stdout: JSON that decides, or plain text (context where the event
    takes context)."""
    if not stdout:
        return
    if not stdout.startswith("{"):
        if event in ("UserPromptSubmit", "SessionStart"):
            verdict.context.append(stdout)
        return
    try:
        answer = json.loads(stdout)
    except json.JSONDecodeError as exc:
        verdict.problems.append(
            f"the {event} hook `{command.command}` printed output that looks like JSON but is "
            f"not ({exc.msg} at column {exc.colno}); it decided nothing."
        )
        return
    if not isinstance(answer, dict):
        return
    if answer.get("continue") is False:
        verdict.stop = str(answer.get("stopReason") or f"the {event} hook stopped the run")
    specific = answer.get("hookSpecificOutput") or {}
    if isinstance(specific, dict):
        decision = specific.get("permissionDecision")
        if (
            event == "PreToolUse"
            and decision in ("allow", "deny", "ask")
            and (verdict.decision != "deny")
        ):
            verdict.decision = decision
            verdict.reason = str(specific.get("permissionDecisionReason") or "")
        if specific.get("additionalContext"):
            verdict.context.append(str(specific["additionalContext"]))
    legacy = answer.get("decision")
    if legacy in ("block", "deny") and event != "PreToolUse":
        verdict.decision = "block"
        verdict.reason = str(answer.get("reason") or "")
    elif legacy in ("block", "deny"):
        verdict.decision = "deny"
        verdict.reason = str(answer.get("reason") or "")
    elif legacy in ("approve", "allow") and event == "PreToolUse" and verdict.decision is None:
        verdict.decision = "allow"


def _matches(matcher: str, tool: str) -> bool:
    if matcher in ("", "*"):
        return True
    names = (tool, CLAUDE_NAMES.get(tool, tool))
    try:
        return any(re.fullmatch(matcher, name) for name in names)
    except re.error:
        return matcher in names


_FILE_TOOLS = ("write_file", "replace", "read_file")


def tool_input(tool: str, arguments: dict[str, Any], cwd: Path) -> dict[str, Any]:
    """A tool call's arguments as a hook sees them: iflow's, plus Claude Code's names for
    the same values (``file_path``, absolute as Claude Code sends it, for ``path``), so
    hooks written for either read them."""
    out = dict(arguments)
    if isinstance(out.get("path"), str) and tool in _FILE_TOOLS:
        out.setdefault("file_path", str((cwd / out["path"]).resolve()))
    return out


def tool_response(
    tool: str, arguments: dict[str, Any], content: str, is_error: bool, cwd: Path
) -> dict[str, Any]:
    """A tool's result as a PostToolUse hook sees it: the tool's own result shape as Claude
    Code sends it (a shell's ``stdout``; a file tool's ``filePath`` and ``success``), with
    iflow's ``content`` and ``is_error`` beside it."""
    out: dict[str, Any] = {"content": content, "is_error": is_error}
    if tool == "run_shell_command":
        out |= {"stdout": content, "stderr": "", "interrupted": False, "isImage": False}
    elif tool in _FILE_TOOLS and isinstance(arguments.get("path"), str):
        path = str((cwd / arguments["path"]).resolve())
        out |= {"filePath": path, "success": not is_error}
        if tool == "read_file":
            out["file"] = {"filePath": path, "content": content}
    return out
