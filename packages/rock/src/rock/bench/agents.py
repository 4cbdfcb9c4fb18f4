"""The agents a benchmark runs: ``oracle``, ``nop``, and any ``ale.agents`` entry point.

Every agent is built fresh for each trial by :func:`agent_factory` (an agent may keep
state between calls), and sees the sandbox through :class:`RecordingSandbox`, which
writes every command it runs, with its exit code, duration and output, to the
trial's command log whatever the agent is.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from ale.agents import AGENT_CHECK, BenchAgent, load_agent
from ale.sandbox import SandboxVerbs
from ale.task import Task
from ale.trajectory import AgentInfo, FailureMode, Role, Step, ToolCall, ToolResult, Trajectory
from rock.backends.base import ExecVerb, upload
from rock.models import ExecRequest, ExecResult, SessionResult

BUILTIN_AGENTS = ("oracle", "nop")
SOLUTION_DIR = "/solution"
ORACLE_DIR = "/oracle"
LOG_OUTPUT_CAP = 16384
"""Bytes of each stream kept per command in the command log."""


class NopAgent:
    """Does nothing: the baseline every task must fail."""

    name = "nop"

    async def run(
        self,
        instruction: str,
        sandbox: SandboxVerbs,
        *,
        logs_dir: Path | None = None,
        timeout_sec: float | None = None,
    ) -> Trajectory:
        return Trajectory(
            agent=AgentInfo(name=self.name),
            steps=[Step(role=Role.USER, content=instruction)],
        )


class OracleAgent:
    """Runs the task's reference solution: every task must pass with it."""

    name = "oracle"

    def __init__(self, task: Task) -> None:
        self.task = task
        self._env = {"DEBIAN_FRONTEND": "noninteractive", **task.solution_env}
        """What the solution runs with, as Harbor's oracle: its ``[solution] env``."""
        self._calls = 0
        """Runs so far: a multi-step task's n-th is its n-th step."""

    async def run(
        self,
        instruction: str,
        sandbox: SandboxVerbs,
        *,
        logs_dir: Path | None = None,
        timeout_sec: float | None = None,
    ) -> Trajectory:
        trajectory = Trajectory(
            agent=AgentInfo(name=self.name),
            task_id=self.task.id,
            steps=[Step(role=Role.USER, content=instruction)],
        )
        # a multi-step task's steps come in order, each to the trial's one oracle: the n-th
        # call runs the n-th step's solution (the instructions may be word for word the same)
        steps = self.task.steps
        step = steps[self._calls] if self._calls < len(steps) else None
        self._calls += 1
        solution = step.solution if step is not None else self.task.solution
        if solution is None:
            trajectory.failure_mode = FailureMode.UNKNOWN
            trajectory.notes = f"task {self.task.id} has no solution for the oracle to run"
            return trajectory
        deadline = None if timeout_sec is None else time.monotonic() + timeout_sec
        for command in await asyncio.to_thread(self._stage, sandbox, solution):
            left = None if deadline is None else max(1.0, deadline - time.monotonic())
            result = await asyncio.to_thread(sandbox.exec, command, timeout=left, env=self._env)
            call = ToolCall(
                id=f"call_{len(trajectory.steps)}",
                name="run_shell_command",
                arguments={"command": command},
            )
            trajectory.steps.append(Step(role=Role.ASSISTANT, tool_calls=[call]))
            output = result.stdout_text + result.stderr_text
            trajectory.steps.append(
                Step(
                    role=Role.TOOL,
                    tool_results=[
                        ToolResult(
                            call_id=call.id,
                            content=output[-LOG_OUTPUT_CAP:],
                            is_error=not result.ok,
                            metadata={"exit_code": result.exit_code},
                        )
                    ],
                )
            )
            if result.timed_out:
                trajectory.failure_mode = FailureMode.AGENT_TIMEOUT
                break
        return trajectory

    def _stage(self, sandbox: SandboxVerbs, solution: Path) -> list[str]:
        """Upload the solution; return the commands that run it."""
        if solution.name == "solution.yaml":
            steps = yaml.safe_load(solution.read_text()) or []
            return [str(s["command"]) for s in steps if isinstance(s, dict) and s.get("command")]
        if self.task.source_format == "tb2":
            upload(sandbox, solution.parent, SOLUTION_DIR)
            return [f"bash {SOLUTION_DIR}/{solution.name}"]
        upload(sandbox, solution, f"{ORACLE_DIR}/{solution.name}")
        return [f"bash {ORACLE_DIR}/{solution.name}"]


def agent_factory(
    name: str, model: str | None = None, kwargs: dict[str, Any] | None = None
) -> Callable[[Task], BenchAgent]:
    """A function making the agent for a task. Raises ale's AgentNotFound for an unknown
    name (checked now, before any trial starts)."""
    kwargs = dict(kwargs or {})
    if name == "nop":
        return lambda task: NopAgent()
    if name == "oracle":
        return lambda task: OracleAgent(task)
    if model is not None:
        kwargs["model"] = model
    agent = load_agent(name, **kwargs)  # fail fast on a bad name or bad kwargs
    check = getattr(agent, AGENT_CHECK, None)
    if callable(check):  # and on an agent that cannot start (ale.agents.BenchAgent.check)
        check()
    return lambda task: load_agent(name, **kwargs)


class RecordingSandbox(ExecVerb):
    """A sandbox that logs every command to ``log_path`` (JSON lines) and a readable
    ``terminal.log`` beside it; everything else passes through."""

    def __init__(self, inner: Any, log_path: Path) -> None:
        self._inner = inner
        self._log_path = log_path
        self._terminal = log_path.with_name("terminal.log")
        self._lock = threading.Lock()
        log_path.parent.mkdir(parents=True, exist_ok=True)
        self.commands = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def _write(self, kind: str, command: Any, started: float, **fields: Any) -> None:
        entry = {
            "at": datetime.now(UTC).isoformat(),
            "kind": kind,
            "command": command,
            "duration_sec": round(time.monotonic() - started, 4),
            **fields,
        }
        shown = command if isinstance(command, str) else " ".join(map(str, command))
        output = "".join(str(fields.get(k) or "") for k in ("stdout", "stderr", "output"))
        with self._lock:
            self.commands += 1
            with self._log_path.open("a") as fh:
                fh.write(json.dumps(entry, default=str) + "\n")
            with self._terminal.open("a") as fh:
                fh.write(f"$ {shown}\n{output}")
                if output and not output.endswith("\n"):
                    fh.write("\n")
                fh.write(f"[exit {fields.get('exit_code')}]\n")

    def run(self, request: ExecRequest) -> ExecResult:
        started = time.monotonic()
        result: ExecResult = self._inner.run(request)
        self._write(
            "exec",
            request.command,
            started,
            cwd=request.cwd,
            exit_code=result.exit_code,
            timed_out=result.timed_out,
            stdout=result.stdout[:LOG_OUTPUT_CAP].decode("utf-8", "replace"),
            stderr=result.stderr[:LOG_OUTPUT_CAP].decode("utf-8", "replace"),
        )
        return result

    def session(self, **kwargs: Any) -> Any:
        return _RecordingSession(self._inner.session(**kwargs), self)

    def write_file(self, path: str, data: bytes, mode: int = 0o644) -> None:
        started = time.monotonic()
        self._inner.write_file(path, data, mode)
        self._write("write_file", path, started, exit_code=0, bytes=len(data))


class _RecordingSession:
    def __init__(self, inner: Any, owner: RecordingSandbox) -> None:
        self._inner = inner
        self._owner = owner

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def run(self, command: str, timeout: float | None = 60.0) -> SessionResult:
        started = time.monotonic()
        result: SessionResult = self._inner.run(command, timeout=timeout)
        self._owner._write(
            "session",
            command,
            started,
            exit_code=result.exit_code,
            timed_out=result.timed_out,
            output=result.output[:LOG_OUTPUT_CAP].decode("utf-8", "replace"),
        )
        return result
