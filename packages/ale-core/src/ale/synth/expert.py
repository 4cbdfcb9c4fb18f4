"""Experts: small programs that solve a generated task by acting and reading the results.

An expert is a generator. It yields :class:`Action` values (a shell command, or a file to
write), is sent an :class:`Observation` of what each one showed, and returns its final
message. Experts that must inspect before acting read the observation: the value they
parse is not known to them when they start (a port in a config file, the failing test's
message...), so the trajectory they leave has the shape of real problem solving.

:class:`ExpertRun` drives one expert for an agent loop (iflow's expert model turns its
actions into tool calls, so the trajectory is recorded by the same scaffold a trained
policy runs in) and can insert one *recoverable mistake*: a wrong command whose error is
seen and followed by the intended one. :class:`ExpertAgent` runs an expert straight on a
sandbox (no agent loop), for checking families and for machines without iflow.
"""

from __future__ import annotations

import asyncio
import random
import re
from collections.abc import Generator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from ale.sandbox import SandboxVerbs
from ale.trajectory import AgentInfo, FailureMode, Role, Step, ToolCall, ToolResult, Trajectory

_EXIT_LINE = re.compile(r"\n?Exit code: (-?\d+)\s*$")


@dataclass(frozen=True)
class Action:
    """One thing the expert does."""

    kind: Literal["shell", "write"]
    command: str = ""
    """For ``shell``: the bash command (run from /app; do not rely on ``cd`` carrying over)."""
    path: str = ""
    """For ``write``: the file (absolute, or relative to /app)."""
    content: str = ""
    """For ``write``: the whole new content."""
    thought: str = ""
    """What the expert says before acting (the assistant text of the turn)."""


def shell(command: str, thought: str = "") -> Action:
    """Run ``command`` in bash."""
    return Action("shell", command=command, thought=thought)


def write(path: str, content: str, thought: str = "") -> Action:
    """Write ``content`` to ``path``."""
    return Action("write", path=path, content=content, thought=thought)


@dataclass(frozen=True)
class Observation:
    """What an action showed, as the agent sees it."""

    text: str
    """The tool result as shown: for a shell command its output (stdout, or both streams
    labelled ``stdout:``/``stderr:`` when both have text) and a last ``Exit code: N`` line."""
    exit_code: int | None = None

    @property
    def output(self) -> str:
        """``text`` without the exit-code line and without ``(no output)``."""
        body = _EXIT_LINE.sub("", self.text)
        return "" if body.strip() == "(no output)" else body

    @property
    def ok(self) -> bool:
        return self.exit_code in (0, None)


def format_shell(stdout: str, stderr: str, exit_code: int) -> str:
    """A shell result in the form the iflow shell tool shows it."""
    stdout, stderr = stdout.rstrip("\n"), stderr.rstrip("\n")
    body = f"stdout:\n{stdout}\nstderr:\n{stderr}" if stdout and stderr else stdout or stderr
    return f"{body or '(no output)'}\nExit code: {exit_code}"


@dataclass(frozen=True)
class Final:
    """The expert is done; ``message`` is its report."""

    message: str


_WORD = re.compile(r"^(\s*)([A-Za-z][A-Za-z0-9_.+-]*)")


def typo(command: str) -> tuple[str, str] | None:
    """A mistyped version of ``command``'s program name (``cat`` -> ``catt``) and the
    name, or None when the command does not start with a plain program name."""
    match = _WORD.match(command)
    if match is None:
        return None
    word = match.group(2)
    wrong = word + word[-1]
    return match.group(1) + wrong + command[match.end() :], word


@dataclass
class ExpertRun:
    """Drives one expert program; optionally inserts one recoverable mistake.

    ``mistake`` (when true) puts a wrong command before the first shell action at or after
    action number ``mistake_after`` (counted from 0): a family mistake from ``mistakes``
    when there is one, else the intended command with its program name mistyped. The
    mistake's observation is not sent to the expert; the turn after it runs the intended
    action, saying why. :attr:`marks` tells which turns were mistakes and recoveries.
    """

    program: Generator[Action, Observation, str]
    mistake: bool = False
    mistake_after: int = 0
    mistakes: list[Action] = field(default_factory=list)
    rng: random.Random = field(default_factory=random.Random)
    actions: int = 0
    mistakes_made: int = 0
    marks: list[str] = field(default_factory=list)
    """One entry per turn returned: ``""``, ``"mistake"`` or ``"recovery"``."""
    _pending: Action | None = None
    _typo: tuple[str, str] | None = None
    _started: bool = False
    _done: Final | None = None

    def next(self, observation: Observation | None) -> Action | Final:
        """The next action given what the last one showed (None for the first)."""
        if self._done is not None:
            return self._done
        if self._pending is not None:
            action, self._pending = self._pending, None
            why = _recovery_thought(observation, self._typo)
            self.marks.append("recovery")
            return Action(
                action.kind,
                command=action.command,
                path=action.path,
                content=action.content,
                thought=f"{why} {action.thought}".strip(),
            )
        try:
            if not self._started:
                self._started = True
                action = next(self.program)
            else:
                action = self.program.send(observation or Observation("", None))
        except StopIteration as stop:
            self._done = Final(str(stop.value or "Done."))
            self.marks.append("")
            return self._done
        index = self.actions
        self.actions += 1
        if self.mistake and not self.mistakes_made and index >= self.mistake_after:
            wrong = self._wrong(action)
            if wrong is not None:
                self.mistakes_made += 1
                self._pending = action
                self.marks.append("mistake")
                return wrong
        self.marks.append("")
        return action

    def _wrong(self, action: Action) -> Action | None:
        if action.kind != "shell":
            return None
        if self.mistakes:
            return self.rng.choice(self.mistakes)
        mistyped = typo(action.command)
        if mistyped is None:
            return None
        word = mistyped[1]
        self._typo = (word + word[-1], word)
        return Action("shell", command=mistyped[0], thought=action.thought)


def _recovery_thought(observation: Observation | None, typo: tuple[str, str] | None) -> str:
    if typo is not None:
        return f"`{typo[0]}` is not a command: a typo for `{typo[1]}`. Running it again correctly."
    if observation is None:
        return "That did not work; doing it the right way."
    last = observation.output.strip().splitlines()
    said = last[-1][:160] if last else f"exit code {observation.exit_code}"
    return f"That failed ({said}); I got the command wrong, so I run the intended one."


class ExpertAgent:
    """Runs an expert straight on a sandbox (rock ``Sandbox`` verbs), without an agent loop.

    Shell actions run as ``bash -c`` from ``root``; write actions write the file. The
    trajectory records each action as a tool call (``run_shell_command`` / ``write_file``).
    """

    name = "expert"

    def __init__(self, run: ExpertRun, *, root: str = "/app") -> None:
        self.expert = run
        self.root = root

    async def run(
        self,
        instruction: str,
        sandbox: SandboxVerbs,
        *,
        logs_dir: Path | None = None,
        timeout_sec: float | None = None,
    ) -> Trajectory:
        trajectory = Trajectory(
            agent=AgentInfo(name=self.name), steps=[Step(role=Role.USER, content=instruction)]
        )
        observation: Observation | None = None
        for turn in range(200):
            step = self.expert.next(observation)
            if isinstance(step, Final):
                trajectory.steps.append(Step(role=Role.ASSISTANT, content=step.message))
                return trajectory
            call = ToolCall(id=f"call_{turn}", name=_TOOL[step.kind], arguments=_args(step))
            trajectory.steps.append(
                Step(role=Role.ASSISTANT, content=step.thought, tool_calls=[call])
            )
            observation = await asyncio.to_thread(self._act, sandbox, step)
            trajectory.steps.append(
                Step(
                    role=Role.TOOL,
                    tool_results=[
                        ToolResult(
                            call_id=call.id,
                            content=observation.text,
                            is_error=not observation.ok,
                            metadata={"exit_code": observation.exit_code},
                        )
                    ],
                )
            )
        trajectory.failure_mode = FailureMode.AGENT_TIMEOUT
        trajectory.notes = "the expert did not finish in 200 actions"
        return trajectory

    def _act(self, sandbox: SandboxVerbs, action: Action) -> Observation:
        if action.kind == "write":
            path = action.path if action.path.startswith("/") else f"{self.root}/{action.path}"
            parent = path.rsplit("/", 1)[0] or "/"
            sandbox.exec(f"mkdir -p '{parent}'", timeout=30)
            sandbox.write_file(path, action.content.encode())
            return Observation(f"Wrote {len(action.content.encode())} bytes to {path}.", 0)
        result = sandbox.exec(action.command, timeout=120, cwd=self.root)
        text = format_shell(result.stdout_text, result.stderr_text, result.exit_code)
        return Observation(text, result.exit_code)


_TOOL = {"shell": "run_shell_command", "write": "write_file"}


def _args(action: Action) -> dict[str, Any]:
    if action.kind == "write":
        return {"path": action.path, "content": action.content}
    return {"command": action.command}
