"""The persistent shell session and the run_shell_command tool, on both workspaces, plus
head+tail truncation."""

from __future__ import annotations

import secrets
from typing import Any

import pytest

from ale.trajectory import ToolCall, ToolResult
from iflow.errors import WorkspaceError
from iflow.models.base import INVALID_JSON_KEY
from iflow.plan import TodoList
from iflow.tools.base import ToolContext, ToolRegistry
from iflow.tools.shell import DEFAULT_OUTPUT_LIMIT, RunShellCommand
from iflow.tools.truncate import head_tail
from iflow.workspace import ShellSession, Workspace

IMAGE = "rock/base:bookworm"


@pytest.fixture
async def shell(workspace: Workspace) -> Any:
    session = ShellSession(workspace)
    yield session
    await session.close()


def call(name: str, **arguments: Any) -> ToolCall:
    return ToolCall(id=f"call-{secrets.token_hex(3)}", name=name, arguments=arguments)


async def run_tool(
    shell: ShellSession, tool: RunShellCommand | None = None, **args: Any
) -> ToolResult:
    registry = ToolRegistry([tool or RunShellCommand()])
    ctx = ToolContext(shell.workspace, shell, TodoList())
    return await registry.call(call("run_shell_command", **args), ctx)


# --- the session -------------------------------------------------------------------------


async def test_directory_exports_and_options_carry_over(shell: ShellSession) -> None:
    root = shell.workspace.root
    out = await shell.run("mkdir -p a/b && cd a && export GREETING='hi there' && set -o pipefail")
    assert (out.exit_code, out.stdout, out.stderr) == (0, "", "")
    assert shell.cwd == f"{root}/a"
    out = await shell.run('pwd; echo "$GREETING"; false | true; echo $?')
    assert out.stdout == f"{root}/a\nhi there\n1\n" and out.stderr == ""
    await shell.run("cd b; unset GREETING")
    out = await shell.run('pwd; echo "[${GREETING-unset}]"')
    assert out.stdout == f"{root}/a/b\n[unset]\n" and shell.cwd == f"{root}/a/b"


async def test_exit_still_saves_state_and_returns_its_code(shell: ShellSession) -> None:
    out = await shell.run("mkdir -p d && cd d && export N=7; exit 3")
    assert out.exit_code == 3 and out.stdout == "" and out.stderr == ""
    assert shell.cwd.endswith("/d")
    out = await shell.run("set -e; echo $N; false; echo never")
    assert (out.exit_code, out.stdout) == (1, "7\n")
    assert (await shell.run("echo $N; pwd")).stdout == f"7\n{shell.cwd}\n"


async def test_timeout_kills_children_and_keeps_the_previous_state(shell: ShellSession) -> None:
    await shell.run("mkdir -p keep && cd keep && export KEPT=yes")
    tag = f"iflow-test-{secrets.token_hex(4)}"
    out = await shell.run(
        f"cd /; export KEPT=no; echo started; (exec -a {tag} sleep 100) & "
        f"exec -a {tag} sleep 100; echo never",
        timeout=1,
    )
    assert out.timed_out and out.exit_code == 124 and out.stdout == "started\n"
    assert shell.cwd.endswith("/keep")
    out = await shell.run("pwd; echo $KEPT; ps -eo args")
    lines = out.stdout.splitlines()
    assert lines[:2] == [shell.cwd, "yes"] and not any(tag in line for line in lines)


async def test_vanished_directory_falls_back_to_the_root(shell: ShellSession) -> None:
    await shell.run("mkdir gone && cd gone")
    await shell.run("rmdir ../gone")
    out = await shell.run("pwd")
    assert out.stdout == shell.workspace.root + "\n"
    assert "no longer exists" in out.stderr and shell.cwd == shell.workspace.root
    assert (await shell.run("pwd")).stderr == ""


async def test_explicit_directory_does_not_move_the_shell(shell: ShellSession) -> None:
    await shell.run("mkdir -p x/y")
    out = await shell.run("pwd; export FROM_X=1", cwd="x/y")
    assert out.stdout == f"{shell.workspace.root}/x/y\n" and shell.cwd == shell.workspace.root
    assert (await shell.run("echo $FROM_X")).stdout == "1\n"
    with pytest.raises(WorkspaceError, match="does not exist"):
        await shell.run("pwd", cwd="nowhere")
    assert (await shell.run("pwd")).stdout == shell.workspace.root + "\n"


async def test_no_bookkeeping_leaks_and_quoting_survives(shell: ShellSession) -> None:
    text = "quotes ' \" $dollar `tick` \\ and\nnew lines"
    out = await shell.run(f"cat <<'EOF'\n{text}\nEOF\nprintf 'no newline' >&2")
    assert (out.stdout, out.stderr) == (text + "\n", "no newline")
    out = await shell.run("set -x; echo traced")
    assert out.stdout == "traced\n" and "__iflow" not in out.stderr
    assert (await shell.run("echo clean")).stderr == ""  # xtrace does not carry over
    out = await shell.run("if then fi")
    assert out.exit_code == 2 and "syntax error" in out.stderr and "__iflow" not in out.stderr
    assert (await shell.run("echo $0; echo $#")).stdout == "bash\n0\n"


async def test_env_is_given_to_every_command(workspace: Workspace) -> None:
    session = ShellSession(workspace, env={"ISSUE": "42"})
    assert (await session.run("echo $ISSUE; export ISSUE=43")).stdout == "42\n"
    assert (await session.run("echo $ISSUE")).stdout == "43\n"
    assert session.env == {"ISSUE": "42"}
    await session.close()


# --- the tool ----------------------------------------------------------------------------


async def test_tool_output_exit_code_and_metadata(shell: ShellSession) -> None:
    result = await run_tool(shell, command="echo hello")
    assert result.content == "hello\nExit code: 0" and not result.is_error
    meta = result.metadata
    assert meta["exit_code"] == 0 and meta["timed_out"] is False and meta["truncated_chars"] == 0
    assert meta["cwd"] == shell.workspace.root and meta["duration_sec"] >= 0
    result = await run_tool(shell, command="echo out; echo err >&2; exit 5", description="both")
    assert result.content == "stdout:\nout\nstderr:\nerr\nExit code: 5" and result.is_error
    assert (await run_tool(shell, command="true")).content == "(no output)\nExit code: 0"


async def test_tool_directory_parameter_and_cwd_metadata(shell: ShellSession) -> None:
    await shell.run("mkdir -p pkg/src")
    result = await run_tool(shell, command="pwd", directory="pkg")
    assert result.content.startswith(f"{shell.workspace.root}/pkg\n")
    result = await run_tool(shell, command="cd pkg/src")
    assert result.metadata["cwd"] == f"{shell.workspace.root}/pkg/src"
    result = await run_tool(shell, command="pwd", directory="missing")
    assert result.is_error and "does not exist" in result.content


async def test_tool_timeout_notice(shell: ShellSession) -> None:
    result = await run_tool(shell, command="echo partial; sleep 100; echo never", timeout=1)
    assert result.is_error and result.metadata["timed_out"] is True
    assert result.content.startswith("partial\nCommand timed out after 1 s and was killed;")
    assert (await run_tool(shell, command="echo fine")).content == "fine\nExit code: 0"


async def test_tool_truncates_long_output_in_the_middle(shell: ShellSession) -> None:
    result = await run_tool(shell, RunShellCommand(output_limit=2000), command="seq 1 5000")
    content = result.content
    assert content.startswith("1\n2\n3\n") and content.endswith("4999\n5000\nExit code: 0")
    assert "lines) cut from the middle ...]" in content
    assert 0 < result.metadata["truncated_chars"] < 30_000 and len(content) < 2200
    assert RunShellCommand().output_limit == DEFAULT_OUTPUT_LIMIT == 30_000


async def test_malformed_calls_become_error_observations(shell: ShellSession) -> None:
    ctx = ToolContext(shell.workspace, shell, TodoList())
    registry = ToolRegistry([RunShellCommand()])
    bad = [
        call("run_shell_command"),
        call("run_shell_command", command="ls", colour="red"),
        call("run_shell_command", command="ls", timeout=601),
        call("run_shell_command", command=""),
        call("run_shell_command", **{INVALID_JSON_KEY: '{"command": "ls'}),
        call("shell", command="ls"),
    ]
    for tool_call in bad:
        result = await registry.call(tool_call, ctx)
        assert result.is_error and result.call_id == tool_call.id, result
    schema = registry.schemas()[0]["function"]
    assert schema["parameters"]["required"] == ["command"]


# --- head_tail ---------------------------------------------------------------------------


def test_head_tail_keeps_short_text_whole() -> None:
    assert head_tail("abc\n", 10) == ("abc\n", 0)


def test_head_tail_cuts_whole_lines_and_counts_them() -> None:
    text = "".join(f"line {i:03d}\n" for i in range(100))  # 9 characters a line
    out, cut = head_tail(text, 90)
    head, marker, tail = out.split("\n[")[0], out.split("\n")[5], out.split("]\n")[1]
    assert head == "".join(f"line {i:03d}\n" for i in range(5)).rstrip("\n")
    assert marker == "[... 810 characters (90 lines) cut from the middle ...]"
    assert tail == "".join(f"line {i:03d}\n" for i in range(95, 100))
    assert cut == 810 == len(text) - 90


def test_head_tail_cuts_inside_a_huge_line_and_honours_the_ratio() -> None:
    out, cut = head_tail("x" * 1000, 100, head_ratio=0.8)
    assert out == "x" * 80 + "\n[... 900 characters (1 line) cut from the middle ...]\n" + "x" * 20
    assert cut == 900
    assert head_tail("abcdef", 0)[0] == "[... 6 characters (1 line) cut from the middle ...]"
    with pytest.raises(ValueError):
        head_tail("abc", -1)
