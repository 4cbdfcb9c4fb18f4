"""MCP servers in iflow: the real ``mcp-server-git`` from PyPI over stdio, a server written
here over streamable HTTP, and the faults (a server that cannot start, hangs, or dies)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from mcp_servers import TOKEN, http_server

from iflow.agent import Agent
from iflow.config import AgentConfig
from iflow.errors import ConfigError, Finished
from iflow.mcp import McpServerConfig
from iflow.mcp.hub import McpHub, ServerState
from iflow.models.scripted import ScriptedModel
from iflow.settings import Settings, load_settings
from iflow.workspace import LocalWorkspace

HERE = Path(__file__).parent
GIT_SERVER = str(Path(sys.executable).with_name("mcp-server-git"))
STDIO_SERVER = [sys.executable, str(HERE / "mcp_servers.py")]


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    repo.mkdir()
    git = ["git", "-c", "user.email=t@example.com", "-c", "user.name=t"]
    subprocess.run([*git, "init", "-q"], cwd=repo, check=True)
    (repo / "a.txt").write_text("one\n")
    subprocess.run([*git, "add", "a.txt"], cwd=repo, check=True)
    subprocess.run([*git, "commit", "-qm", "first"], cwd=repo, check=True)
    (repo / "a.txt").write_text("two\n")
    return repo


def git_server(repo: Path, **extra: object) -> McpServerConfig:
    return McpServerConfig.model_validate(
        {"command": GIT_SERVER, "args": ["-r", str(repo)], **extra}
    )


async def started(servers: dict[str, McpServerConfig], **options: Any) -> McpHub:
    hub = McpHub(servers, **options)
    await hub.connect()
    return hub


# -- settings ---------------------------------------------------------------------------------


def test_settings_read_mcp_servers_as_gemini_cli_writes_them(tmp_path: Path) -> None:
    home, work = tmp_path / "home", tmp_path / "work"
    (home / ".iflow").mkdir(parents=True)
    (work / ".iflow").mkdir(parents=True)
    (home / ".iflow" / "settings.json").write_text(
        json.dumps(
            {
                "mcpServers": {
                    "git": {"command": "mcp-server-git", "args": ["-r", "."], "timeout": 5000},
                    "web": {"httpUrl": "http://127.0.0.1:1/mcp", "headers": {"X-A": "1"}},
                }
            }
        )
    )
    (work / ".iflow" / "settings.json").write_text(
        json.dumps(
            {"mcpServers": {"web": {"url": "http://127.0.0.1:2/sse", "excludeTools": ["x"]}}}
        )
    )
    settings = load_settings(cwd=work, home=home, env={})
    servers = settings.mcp_servers
    assert set(servers) == {"git", "web"}  # merged by name: the project's web replaces home's
    assert servers["git"].transport == "stdio" and servers["git"].call_timeout_sec == 5
    assert servers["web"].transport == "sse" and servers["web"].exclude_tools == ["x"]
    env = {"IFLOW_MCP_SERVERS": json.dumps({"h": {"url": "http://x/mcp", "type": "http"}})}
    assert load_settings(cwd=work, home=home, env=env).mcp_servers["h"].transport == "http"


@pytest.mark.parametrize(
    ("entry", "words"),
    [
        ({"command": "a", "url": "http://x"}, "give exactly one of command"),
        ({"args": ["x"]}, "give exactly one of command"),
        ({"command": "a", "includeTool": ["x"]}, "at s.includeTool: extra inputs"),
        ({"command": "a", "timeout": -1}, "at s.timeout: input should be greater than 0"),
    ],
)
def test_a_bad_mcp_entry_is_one_sentence_naming_the_file(
    tmp_path: Path, entry: dict, words: str
) -> None:
    (tmp_path / ".iflow").mkdir()
    path = tmp_path / ".iflow" / "settings.json"
    path.write_text(json.dumps({"mcpServers": {"s": entry}}))
    with pytest.raises(ConfigError) as err:
        load_settings(cwd=tmp_path, home=tmp_path / "home", env={})
    text = str(err.value)
    assert str(path) in text and words in text and "\n" not in text


def test_mcp_servers_in_a_variable_must_be_json(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="IFLOW_MCP_SERVERS is not valid JSON"):
        load_settings(cwd=tmp_path, home=tmp_path, env={"IFLOW_MCP_SERVERS": "{git: 1}"})


# -- a real third-party server over stdio -----------------------------------------------------


async def test_mcp_server_git_tools_appear_and_answer(repo: Path, tmp_path: Path) -> None:
    hub = await started({"git": git_server(repo)}, log_dir=tmp_path / "logs")
    try:
        assert hub.failures() == []
        tools = {t.name: t for t in hub.tools()}
        assert {"git_status", "git_diff_unstaged", "git_commit", "git_log"} <= set(tools)
        assert tools["git_status"].kind == "read"  # readOnlyHint
        assert tools["git_commit"].kind == "mcp"  # asks outside yolo
        out = await hub.call("git", "git_diff_unstaged", {"repo_path": str(repo)})
        assert "-one" in out.content and "+two" in out.content and not out.is_error
        bad = await hub.call("git", "git_status", {})
        assert bad.is_error and "repo_path" in bad.content
    finally:
        await hub.aclose()


async def test_include_and_exclude_choose_tools(repo: Path) -> None:
    config = git_server(repo, includeTools=["git_status", "git_log"], excludeTools=["git_log"])
    hub = await started({"git": config})
    try:
        assert [t.name for t in hub.tools()] == ["git_status"]
    finally:
        await hub.aclose()


async def test_the_agent_calls_an_mcp_tool_like_a_built_in_one(repo: Path) -> None:
    hub = await started({"git": git_server(repo)})
    model = ScriptedModel(
        [
            {"tool_calls": [{"name": "git_status", "arguments": {"repo_path": str(repo)}}]},
            {
                "tool_calls": [
                    {"name": "git_add", "arguments": {"repo_path": str(repo), "files": ["a.txt"]}}
                ]
            },
            "Done.",
        ]
    )
    async with LocalWorkspace(repo) as ws:
        agent = Agent(model, ws, config=AgentConfig(headless=True), mcp=hub)
        try:
            assert "git_status" in agent.tools and "read_file" in agent.tools
            await agent.run("what changed?")
            results = [r for s in agent.trajectory.steps for r in s.tool_results]
            assert "modified:" in results[0].content or "a.txt" in results[0].content
            # git_add changes the repository: headless default mode denies it, with the way out
            assert results[1].is_error and "needs approval" in results[1].content
            assert "--yolo" in results[1].content
        finally:
            await agent.aclose()
    assert hub.servers["git"].client is None  # the agent stopped the server


async def test_a_trusted_server_runs_without_asking(repo: Path) -> None:
    hub = await started({"git": git_server(repo, trust=True)})
    model = ScriptedModel(
        [
            {
                "tool_calls": [
                    {"name": "git_add", "arguments": {"repo_path": str(repo), "files": ["a.txt"]}}
                ]
            },
            "Done.",
        ]
    )
    async with LocalWorkspace(repo) as ws:
        agent = Agent(model, ws, config=AgentConfig(headless=True), mcp=hub)
        try:
            await agent.run("stage it")
        finally:
            await agent.aclose()
    staged = subprocess.run(
        ["git", "diff", "--cached", "--name-only"], cwd=repo, capture_output=True, text=True
    )
    assert staged.stdout.strip() == "a.txt"


# -- a server written here, over streamable HTTP ----------------------------------------------


async def test_streamable_http_with_headers_and_a_name_clash() -> None:
    with http_server() as url:
        config = McpServerConfig.model_validate(
            {"httpUrl": url, "headers": {"Authorization": "Bearer ${MCP_TOKEN}"}, "timeout": 1500}
        )
        hub = await started({"remote": config}, env={"MCP_TOKEN": TOKEN})
        try:
            assert hub.failures() == []
            names = [t.name for t in hub.tools(taken={"read_file"})]
            assert "echo" in names and "remote__read_file" in names and "read_file" not in names
            assert (await hub.call("remote", "echo", {"text": "hi"})).content == "echo: hi"
            # a call that hangs past the server's timeout is abandoned in one sentence ...
            with pytest.raises(Exception, match=r"did not answer slow within 1\.5 s"):
                await hub.call("remote", "slow", {"seconds": 30})
            # ... and the server goes on answering
            assert (await hub.call("remote", "echo", {"text": "again"})).content == "echo: again"
        finally:
            await hub.aclose()


async def test_a_refused_http_server_is_one_sentence_and_others_go_on(repo: Path) -> None:
    with http_server() as url:
        servers = {
            "remote": McpServerConfig.model_validate({"httpUrl": url}),  # no token: 401
            "git": git_server(repo),
        }
        hub = await started(servers, start_timeout=20)
        try:
            [failure] = hub.failures()
            assert failure.startswith("MCP server 'remote' failed to start (")
            assert hub.servers["git"].state is ServerState.READY
            assert "git_status" in [t.name for t in hub.tools()]
        finally:
            await hub.aclose()


# -- faults -----------------------------------------------------------------------------------


async def test_a_server_that_cannot_start_says_why(tmp_path: Path) -> None:
    servers = {
        "missing": McpServerConfig(command="no-such-mcp-server"),
        "broken": McpServerConfig(command=STDIO_SERVER[0], args=[STDIO_SERVER[1], "--fail"]),
    }
    hub = await started(servers, log_dir=tmp_path / "logs", start_timeout=20)
    try:
        missing, broken = hub.failures()
        assert "'no-such-mcp-server' was not found" in missing
        assert broken.startswith("MCP server 'broken' failed to start")
        assert "cannot open the database /nonexistent/db.sqlite" in broken  # its stderr
        assert hub.tools() == []
    finally:
        await hub.aclose()


async def test_a_server_that_hangs_at_start_times_out(tmp_path: Path) -> None:
    hub = await started({"mute": McpServerConfig(command="sleep", args=["60"])}, start_timeout=1)
    try:
        [failure] = hub.failures()
        assert failure.startswith("MCP server 'mute' did not start within 1 s (sleep 60)")
    finally:
        await hub.aclose()


async def test_a_server_that_dies_mid_session_is_one_sentence(tmp_path: Path) -> None:
    config = McpServerConfig(command=STDIO_SERVER[0], args=[STDIO_SERVER[1]], timeout=10_000)
    hub = await started({"fragile": config})
    model = ScriptedModel(
        [
            {"tool_calls": [{"name": "echo", "arguments": {"text": "1"}}]},
            {"tool_calls": [{"name": "die", "arguments": {}}]},
            {"tool_calls": [{"name": "echo", "arguments": {"text": "2"}}]},
            "Done.",
        ]
    )
    async with LocalWorkspace(tmp_path) as ws:
        agent = Agent(model, ws, config=AgentConfig(approval_mode="yolo", headless=True), mcp=hub)
        try:
            end = await agent.run("go")
            results = [r for s in agent.trajectory.steps for r in s.tool_results]
            assert results[0].content == "echo: 1"
            assert results[1].is_error and "MCP server 'fragile' stopped" in results[1].content
            assert results[2].is_error and "MCP server 'fragile' stopped" in results[2].content
            assert hub.servers["fragile"].state is ServerState.STOPPED
            assert isinstance(end, Finished) and agent.final_answer == "Done."
        finally:
            await agent.aclose()


# -- the surfaces -----------------------------------------------------------------------------


def test_headless_run_uses_mcp_tools_and_reports_a_failed_server(
    repo: Path, tmp_path: Path
) -> None:
    home = tmp_path / "home"
    (home / ".iflow").mkdir(parents=True)
    (home / ".iflow" / "settings.json").write_text(
        json.dumps(
            {
                "mcpServers": {
                    "git": {"command": GIT_SERVER, "args": ["-r", str(repo)]},
                    "gone": {"command": "no-such-mcp-server"},
                }
            }
        )
    )
    script = tmp_path / "s.json"
    script.write_text(
        json.dumps(
            [
                {
                    "tool_calls": [
                        {"name": "git_diff_unstaged", "arguments": {"repo_path": str(repo)}}
                    ]
                },
                "Looked.",
            ]
        )
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("IFLOW_", "OPENAI_"))}
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "iflow.cli",
            "-p",
            "diff?",
            "--provider",
            "scripted",
            "--script",
            str(script),
            "--output-format",
            "json",
        ],
        env={**env, "HOME": str(home)},
        cwd=repo,
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,  # (iflow reads a piped stdin)
    )
    assert r.returncode == 0, r.stderr
    assert "iflow: MCP server 'gone' cannot start" in r.stderr and "Traceback" not in r.stderr
    record = json.loads(r.stdout)
    assert record["result"] == "Looked."
    session = next((home / ".iflow" / "sessions").rglob("*.json"), None)
    assert session is not None and "+two" in session.read_text()


async def test_tui_lists_servers_with_mcp_and_shows_a_failed_one(
    repo: Path, tmp_path: Path
) -> None:
    from test_tui import blocks, notices, run_prompt, wait_for

    from iflow.tui.app import IflowApp

    script = tmp_path / "s.json"
    script.write_text(
        json.dumps(
            [
                {"tool_calls": [{"name": "git_status", "arguments": {"repo_path": str(repo)}}]},
                "Clean enough.",
            ]
        )
    )
    settings = Settings(
        provider="scripted",
        script=str(script),
        mcp_servers={
            "git": git_server(repo, includeTools=["git_status", "git_log"]),
            "gone": McpServerConfig(command="no-such-mcp-server"),
        },
    )
    async with LocalWorkspace(repo) as workspace:
        app = IflowApp(settings=settings, workspace=workspace, cwd=repo, home=tmp_path)
        async with app.run_test(size=(120, 40)) as pilot:
            await wait_for(pilot, lambda: app.agent is not None)
            assert any("MCP server 'gone' cannot start" in n for n in notices(app))
            await run_prompt(pilot, "status?")
            assert app.agent is not None
            steps = app.agent.trajectory.steps
            assert "a.txt" in next(r for s in steps for r in s.tool_results).content
            app.prompt_input.value = "/mcp"
            await pilot.press("enter")
            await wait_for(pilot, lambda: blocks(app, "mcp"))
            text = blocks(app, "mcp")[-1]
            assert "git  ready" in text and "tools: git_status, git_log" in text
            assert "gone  failed" in text and "'no-such-mcp-server' was not found" in text
        assert app.agent is not None
        await app.agent.aclose()
