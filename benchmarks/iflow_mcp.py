"""An MCP tool call's round trip in iflow against a built-in tool's, in one run.

Each figure is the time of one tool call through the agent's tool registry (validation,
the call, the observation), the way the agent loop makes it: the built-in ``read_file`` on
a small file in a local workspace (the baseline), then an ``echo`` tool of an MCP server
written with the official SDK, over stdio (a local process) and over streamable HTTP
(uvicorn on loopback), and the third-party ``mcp-server-git``'s ``git_status`` over stdio.
The ratio says what reaching a tool through MCP costs per call.

Usage: python benchmarks/iflow_mcp.py [--calls 200]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _rockbench import machine

from ale.trajectory import ToolCall
from iflow.mcp import McpServerConfig
from iflow.mcp.hub import McpHub
from iflow.tools import ReadFile, TodoList, ToolContext, ToolRegistry
from iflow.workspace.local import LocalWorkspace
from iflow.workspace.shell import ShellSession

TESTS = Path(__file__).resolve().parents[1] / "packages" / "iflow-cli" / "tests"
sys.path.insert(0, str(TESTS))
from mcp_servers import TOKEN, http_server  # noqa: E402 - the SDK server the tests use


async def timed(registry: ToolRegistry, ctx: ToolContext, call: ToolCall, n: int) -> list[float]:
    out = []
    for _ in range(n):
        t = time.perf_counter()
        result = await registry.call(call, ctx)
        out.append(time.perf_counter() - t)
        assert not result.is_error, result.content
    return out


async def main(calls: int) -> None:
    with tempfile.TemporaryDirectory() as tmp, http_server() as url:
        root = Path(tmp)
        (root / "notes.txt").write_text("some notes\n" * 20)
        git = ["git", "-c", "user.email=b@x", "-c", "user.name=b"]
        subprocess.run([*git, "init", "-q"], cwd=root, check=True)
        servers = {
            "stdio": McpServerConfig(command=sys.executable, args=[str(TESTS / "mcp_servers.py")]),
            "http": McpServerConfig(http_url=url, headers={"Authorization": f"Bearer {TOKEN}"}),
            "git": McpServerConfig(
                command=str(Path(sys.executable).with_name("mcp-server-git")), args=["-r", tmp]
            ),
        }
        async with LocalWorkspace(root) as ws:
            ctx = ToolContext(workspace=ws, shell=ShellSession(ws), todos=TodoList())
            rows: list[tuple[str, list[float]]] = []
            builtin = ToolRegistry([ReadFile()])
            read = ToolCall(id="r", name="read_file", arguments={"path": "notes.txt"})
            await timed(builtin, ctx, read, 10)  # warm
            rows.append(("built-in read_file", await timed(builtin, ctx, read, calls)))
            for name, config in servers.items():
                hub = McpHub({name: config})
                await hub.connect()
                assert not hub.failures(), hub.failures()
                try:
                    by_name = {t.name.split("__")[-1]: t for t in hub.tools()}
                    tool, args = (
                        ("git_status", {"repo_path": tmp})
                        if name == "git"
                        else ("echo", {"text": "hi"})
                    )
                    registry = ToolRegistry([by_name[tool]])
                    call = ToolCall(id="m", name=by_name[tool].name, arguments=args)
                    await timed(registry, ctx, call, 10)
                    rows.append(
                        (
                            f"MCP {tool} over {name if name != 'git' else 'stdio (mcp-server-git)'}",
                            await timed(registry, ctx, call, calls),
                        )
                    )
                finally:
                    await hub.aclose()
    base = statistics.median(rows[0][1])
    for label, values in rows:
        p50 = statistics.median(values)
        p99 = sorted(values)[int(len(values) * 0.99) - 1]
        print(
            f"{label:<44} p50 {p50 * 1000:7.2f} ms  p99 {p99 * 1000:7.2f} ms  {p50 / base:6.1f}x built-in"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200)
    args = parser.parse_args()
    print(machine())
    asyncio.run(main(args.calls))
