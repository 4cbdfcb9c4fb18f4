"""``run_shell_command``: one command in the agent's persistent shell (``ctx.shell``)."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from iflow.tools.base import Params, Tool, ToolContext, ToolOutput
from iflow.tools.truncate import head_tail

DEFAULT_OUTPUT_LIMIT = 30_000
"""Characters of command output the model reads; the middle of longer output is cut."""
DEFAULT_TIMEOUT_SEC = 120.0
MAX_TIMEOUT_SEC = 600.0


class RunShellCommandParams(Params):
    command: str = Field(min_length=1, description="The bash command to run.")
    description: str | None = Field(
        default=None, description="A few words saying what the command does, shown to people."
    )
    timeout: float = Field(
        default=DEFAULT_TIMEOUT_SEC,
        gt=0,
        le=MAX_TIMEOUT_SEC,
        description="Seconds before the command and everything it started are killed (max 600).",
    )
    directory: str | None = Field(
        default=None,
        description="Run this one command in this directory (relative to the shell's current "
        "directory) without moving the shell.",
    )


class RunShellCommand(Tool):
    name = "run_shell_command"
    description = (
        "Run a bash command in a persistent shell: the current directory and exported "
        "variables carry over to the next command. stdin is empty, so interactive programs "
        "cannot be answered: pass flags such as -y instead. Start long-running servers in the "
        "background (cmd > log 2>&1 &). Long output is cut in the middle; prefer quiet flags "
        "or pipe through head/tail/grep."
    )
    params = RunShellCommandParams
    kind = "execute"

    def __init__(self, output_limit: int = DEFAULT_OUTPUT_LIMIT) -> None:
        self.output_limit = output_limit

    async def run(self, params: RunShellCommandParams, ctx: ToolContext) -> ToolOutput:
        out = await ctx.shell.run(params.command, timeout=params.timeout, cwd=params.directory)
        stdout, stderr = out.stdout.rstrip("\n"), out.stderr.rstrip("\n")
        both = stdout and stderr
        body = f"stdout:\n{stdout}\nstderr:\n{stderr}" if both else stdout or stderr
        body, cut = head_tail(body, self.output_limit)
        lines = [body] if body else ["(no output)"]
        if out.timed_out:
            lines.append(
                f"Command timed out after {params.timeout:g} s and was killed; the output above "
                "is what it printed before. Run long jobs in the background (cmd > log 2>&1 &) "
                f"or raise timeout (at most {MAX_TIMEOUT_SEC:g} s)."
            )
        else:
            lines.append(f"Exit code: {out.exit_code}")
        metadata: dict[str, Any] = {
            "exit_code": out.exit_code,
            "duration_sec": round(out.duration_sec, 3),
            "timed_out": out.timed_out,
            "truncated_chars": cut,
            "cwd": ctx.shell.cwd,
        }
        return ToolOutput(
            "\n".join(lines), is_error=out.exit_code != 0 or out.timed_out, metadata=metadata
        )

    def describe(self, arguments: dict[str, Any]) -> str:
        command = " ".join(str(arguments.get("command") or "").split())
        where = f"  (in {arguments['directory']})" if arguments.get("directory") else ""
        return f"$ {command[:120]}{'…' if len(command) > 120 else ''}{where}"
