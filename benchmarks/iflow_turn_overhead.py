"""iflow's framework overhead per turn over a 200-turn session, tool execution excluded.

A scripted model drives the agent loop through 200 turns of real tool calls
(run_shell_command, read_file, todo_write...) in a local workspace, with the session
saved after every turn as `iflow` does. Each turn's wall time minus the time spent
inside the tools is the framework's overhead: prompt assembly, token accounting,
loop detection, events, trajectory recording, and (second figure) the session save.
Baseline: the same overhead at turns 1-20 of the same run; the ratio turns 181-200 /
turns 1-20 says whether the overhead stays flat as the history grows.
Goal (issue 4): p50 under 5 ms, flat.

Usage: python benchmarks/iflow_turn_overhead.py [--turns 200]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path

from _rockbench import machine

from iflow.agent import Agent
from iflow.config import AgentConfig
from iflow.models.scripted import ScriptedModel
from iflow.runner import SessionRecorder
from iflow.sessions import SessionData, SessionStore
from iflow.workspace.local import LocalWorkspace


def script(turns: int) -> list[dict]:
    calls = [
        ("run_shell_command", {"command": "echo turn $RANDOM"}),
        ("read_file", {"path": "notes.txt"}),
        ("todo_write", {"todos": [{"content": "keep going", "status": "in_progress"}]}),
        ("list_directory", {"path": "."}),
    ]
    out = []
    for i in range(turns - 1):
        name, args = calls[i % len(calls)]
        out.append(
            {
                "content": f"Step {i}: looking at things.",
                "tool_calls": [{"name": name, "arguments": args}],
            }
        )
    out.append({"tool_calls": [{"name": "finish", "arguments": {"summary": "done"}}]})
    return out


async def measure(turns: int, *, sessions: bool) -> list[float]:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "notes.txt").write_text("some notes\n" * 50)
        async with LocalWorkspace(root) as ws:
            agent = Agent(
                ScriptedModel(script(turns), context_limit=10_000_000),
                ws,
                config=AgentConfig(
                    approval_mode="yolo",
                    max_turns=turns + 1,
                    loop_threshold=1000,
                    fail_threshold=1000,
                ),
            )
            if sessions:
                store = SessionStore(root / "sessions")
                agent.after_turn = SessionRecorder(store, SessionData(id=store.new_id(), cwd=tmp))
            in_tools = 0.0
            real_call = agent.tools.call

            async def timed_call(call, ctx):
                nonlocal in_tools
                t = time.perf_counter()
                try:
                    return await real_call(call, ctx)
                finally:
                    in_tools += time.perf_counter() - t

            agent.tools.call = timed_call  # type: ignore[method-assign]
            overheads: list[float] = []
            real_step = agent.step

            async def timed_step() -> None:
                nonlocal in_tools
                in_tools = 0.0
                t = time.perf_counter()
                try:
                    await real_step()
                finally:
                    overheads.append(time.perf_counter() - t - in_tools)

            agent.step = timed_step  # type: ignore[method-assign]
            end = await agent.run("work through the script")
            assert end.failure_mode is None, end
            return overheads


def report(label: str, overheads: list[float]) -> None:
    ms = [x * 1000 for x in overheads]
    early, late = statistics.median(ms[:20]), statistics.median(ms[-20:])
    print(
        f"{label:<28} p50 {statistics.median(ms):6.2f} ms   turns 1-20 p50 {early:6.2f} ms   "
        f"turns {len(ms) - 19}-{len(ms)} p50 {late:6.2f} ms   late/early {late / early:5.2f}x"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=200)
    args = parser.parse_args()
    print(machine())
    loop = asyncio.run(measure(args.turns, sessions=False))
    saved = asyncio.run(measure(args.turns, sessions=True))
    report("agent loop", loop)
    report("agent loop + session save", saved)
    print("goal: p50 under 5 ms and flat (late/early near 1.0x)")


if __name__ == "__main__":
    main()
