"""``iflow -p "..."``: one run without a person, output as text, json or stream-json.

- ``text``: the agent's final answer on stdout; notices and the end on stderr.
- ``json``: one JSON object when the run ends (result, outcome, session id, usage...).
- ``stream-json``: every event as one JSON line as it happens, then that same object
  with ``"type": "result"``.

Calls that need approval are denied unless ``--yolo`` or ``--approval-mode auto-edit``
allows them. The exit code is 0 only when the agent finished.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Literal, TextIO

from ale.atif import write_atif
from ale.jsonl import write_jsonl
from iflow.agent import Agent
from iflow.errors import AgentEnd
from iflow.events import Event, Notice, ToolStarted
from iflow.runner import SessionRecorder

OutputFormat = Literal["text", "json", "stream-json"]


class EventPrinter:
    """Writes events as the output format asks."""

    def __init__(self, fmt: OutputFormat, out: TextIO, err: TextIO) -> None:
        self.fmt, self.out, self.err = fmt, out, err

    def __call__(self, event: Event) -> None:
        if self.fmt == "stream-json":
            self.out.write(event.model_dump_json() + "\n")
            self.out.flush()
        elif self.fmt == "text":
            if isinstance(event, ToolStarted):
                self.err.write(f"· {event.title}\n")
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
    if trajectory_path is not None:
        write_jsonl(trajectory_path, [agent.trajectory])
    if atif_path is not None:
        write_atif(agent.trajectory, atif_path)
    if fmt == "text":
        if agent.final_answer:
            out.write(agent.final_answer.rstrip() + "\n")
        if end.failure_mode is not None:
            err.write(f"iflow: {end}\n")
    else:
        out.write(json.dumps(record) + "\n")
    out.flush()
    return end.exit_code


__all__ = ["EventPrinter", "OutputFormat", "result_record", "run_headless"]
