"""What hooks cost per tool call in iflow, in one run: the same ``read_file`` call through
the agent's tool gate without hooks (the baseline), with one PreToolUse hook that is a bash
``true``, with PreToolUse and PostToolUse hooks of that kind, and with a PreToolUse hook that
reads the event with ``jq``-less bash and answers a JSON allow (as real hooks do).

Usage: python benchmarks/iflow_hooks.py [--calls 100]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path

from _rockbench import machine

from ale.trajectory import ToolCall
from iflow.approval import ApprovalPolicy, allow_all
from iflow.gate import ToolGate
from iflow.hooks import HookMatcher, HookRunner
from iflow.tools import ReadFile, TodoList, ToolContext, ToolRegistry
from iflow.workspace.local import LocalWorkspace
from iflow.workspace.shell import ShellSession

ALLOW = (
    "read -r -d '' event; case \"$event\" in *read_file*|*Read*) "
    'echo \'{"hookSpecificOutput": {"hookEventName": "PreToolUse", '
    '"permissionDecision": "allow"}}\';; esac'
)


def runner(root: Path, **events: str) -> HookRunner | None:
    if not events:
        return None
    config = {
        event: [HookMatcher.model_validate({"matcher": "Read", "hooks": [{"command": command}]})]
        for event, command in events.items()
    }
    return HookRunner(config, cwd=root)


async def main(calls: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "notes.txt").write_text("notes\n" * 20)
        setups = {
            "no hooks (baseline)": {},
            "PreToolUse `true`": {"PreToolUse": "true"},
            "PreToolUse + PostToolUse `true`": {"PreToolUse": "true", "PostToolUse": "true"},
            "PreToolUse reading the event, JSON allow": {"PreToolUse": ALLOW},
        }
        async with LocalWorkspace(root) as ws:
            ctx = ToolContext(workspace=ws, shell=ShellSession(ws), todos=TodoList())
            registry = ToolRegistry([ReadFile()])
            call = ToolCall(id="c", name="read_file", arguments={"path": "notes.txt"})
            figures: dict[str, list[float]] = {}
            for label, events in setups.items():
                gate = ToolGate(
                    ApprovalPolicy("yolo"),
                    allow_all,
                    headless=True,
                    emit=lambda event: None,
                    hooks=runner(root, **events),
                )
                for _ in range(5):
                    await gate.execute(call, registry, registry, ctx)
                times = []
                for _ in range(calls):
                    t = time.perf_counter()
                    result = await gate.execute(call, registry, registry, ctx)
                    times.append(time.perf_counter() - t)
                    assert not result.is_error, result.content
                figures[label] = times
    base = statistics.median(figures["no hooks (baseline)"])
    for label, times in figures.items():
        p50 = statistics.median(times)
        print(
            f"{label:<42} p50 {p50 * 1000:7.2f} ms   +{(p50 - base) * 1000:6.2f} ms a call"
            f"   {p50 / base:6.1f}x"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=100)
    args = parser.parse_args()
    print(machine())
    asyncio.run(main(args.calls))
