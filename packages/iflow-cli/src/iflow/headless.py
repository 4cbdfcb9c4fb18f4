"""``iflow -p "..."``: one run without a person, output as text, json or stream-json.

- ``text``: the agent's final answer on stdout; notices and the end on stderr.
- ``json``: one JSON object when the run ends (result, outcome, session id, usage...).
- ``stream-json``: every event as one JSON line as it happens, then that same object
  with ``"type": "result"``.

Calls that need approval are denied unless ``--yolo`` or ``--approval-mode auto-edit``
allows them; each denial is shown (on stderr in text mode). The exit code is 0 only when the
agent finished without a denied call: a run that ended with calls denied exits
:data:`DENIED_EXIT` (its answer may claim work the denials prevented).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any, Literal, TextIO

from ale.atif import write_atif
from ale.jsonl import write_jsonl
from ale.trajectory import Trajectory
from iflow.agent import Agent
from iflow.errors import AgentEnd
from iflow.events import Event, Notice, ToolFinished, ToolStarted
from iflow.runner import SessionRecorder

OutputFormat = Literal["text", "json", "stream-json"]
DENIED_EXIT = 3
"""The exit code of a run that finished with tool calls denied."""


class EventPrinter:
    """Writes events as the output format asks."""

    def __init__(self, fmt: OutputFormat, out: TextIO, err: TextIO) -> None:
        self.fmt, self.out, self.err = fmt, out, err
        self.denied: list[str] = []
        """The names of the tools whose calls were denied."""
        self.reasons: list[str] = []
        """Why each was: what decided (a hook and its reason, or the mode)."""

    def __call__(self, event: Event) -> None:
        if isinstance(event, ToolFinished) and event.metadata.get("denied"):
            self.denied.append(event.name)
            self.reasons.append(event.content)
        if self.fmt == "stream-json":
            self.out.write(event.model_dump_json() + "\n")
            self.out.flush()
        elif self.fmt == "text":
            if isinstance(event, ToolStarted):
                self.err.write(f"· {event.title}\n")
            elif isinstance(event, ToolFinished) and event.metadata.get("denied"):
                self.err.write(f"✗ denied: {event.content}\n")
            elif isinstance(event, ToolFinished) and event.metadata.get("rejected"):
                self.err.write(f"✗ rejected {event.name}: {event.content}\n")
            elif isinstance(event, Notice) and event.level != "info":
                self.err.write(f"! {event.text}\n")


def result_record(agent: Agent, end: AgentEnd, recorder: SessionRecorder | None) -> dict[str, Any]:
    """The summary ``json`` prints and ``stream-json`` ends with."""
    return {
        "type": "result",
        "outcome": "finished" if end.failure_mode is None else end.failure_mode.value,
        "exit_code": end.exit_code,
        "message": str(end),
        "result": agent.final_answer,
        "session_id": recorder.data.id if recorder else None,
        "trajectory_id": agent.trajectory.trajectory_id,
        "turns": agent.turn,
        "usage": {
            "prompt_tokens": agent.prompt_tokens,
            "completion_tokens": agent.completion_tokens,
            "context_used": agent.context_used(),
            "context_limit": agent.model.context_limit,
        },
        "todos": agent.todos.dump(),
    }


async def run_headless(
    agent: Agent,
    prompt: str,
    *,
    fmt: OutputFormat,
    recorder: SessionRecorder | None = None,
    out: TextIO | None = None,
    err: TextIO | None = None,
    trajectory_path: Path | None = None,
    atif_path: Path | None = None,
) -> int:
    """Run ``prompt`` to its end, print as ``fmt`` asks, return the exit code."""
    out, err = out or sys.stdout, err or sys.stderr
    printer = EventPrinter(fmt, out, err)
    agent.on_event = printer
    end = await agent.run(prompt)
    record = result_record(agent, end, recorder)
    code = end.exit_code
    if code == 0 and printer.denied:
        code = DENIED_EXIT
        tools = ", ".join(sorted(set(printer.denied)))
        record["exit_code"] = code
        record["denied"] = printer.denied
        record["message"] = (
            f"{len(printer.denied)} tool call(s) were denied ({tools}), so the work may not be "
            f"done; the first: {printer.reasons[0]}"
        )
    writers: list[tuple[Path | None, Callable[[Trajectory, Path], object]]] = [
        (trajectory_path, _jsonl),
        (atif_path, write_atif),
    ]
    for path, write in writers:
        if path is not None:
            written = save_safely(path, partial(write, agent.trajectory), home=Path.home())
            if written != path:
                err.write(
                    f"iflow: the trajectory could not be written to {path}; it was saved to "
                    f"{written} instead.\n"
                )
    if fmt == "text":
        if agent.final_answer:
            out.write(agent.final_answer.rstrip() + "\n")
            if printer.denied:  # the answer may claim what a denied call would have done
                tools = ", ".join(sorted(set(printer.denied)))
                out.write(f"[not applied: the denied call(s) to {tools} did not run]\n")
        if end.failure_mode is not None:
            err.write(f"iflow: {end}\n")
        elif code == DENIED_EXIT:
            err.write(f"iflow: {record['message']}\n")
    else:
        out.write(json.dumps(record) + "\n")
    out.flush()
    return code


def _jsonl(trajectory: Trajectory, path: Path) -> None:
    write_jsonl(path, [trajectory])


def save_safely(path: Path, write: Callable[[Path], object], *, home: Path) -> Path:
    """Write with ``write(path)``; when that fails (a directory that went away, no
    permission), write to ``<home>/.iflow/trajectories/<name>`` instead: a run's record is
    never lost. The path written."""
    try:
        write(path)
        return path
    except OSError:
        fallback = home / ".iflow" / "trajectories" / path.name
        fallback.parent.mkdir(parents=True, exist_ok=True)
        write(fallback)
        return fallback


__all__ = [
    "DENIED_EXIT",
    "EventPrinter",
    "OutputFormat",
    "result_record",
    "run_headless",
    "save_safely",
]
