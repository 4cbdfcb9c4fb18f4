"""read_file, write_file, replace, list_directory, glob and search_file_content through a
ToolRegistry, on both workspaces."""

from __future__ import annotations

import secrets
from typing import Any

import pytest

from ale.trajectory import ToolCall, ToolResult
from iflow.plan import TodoList
from iflow.tools.base import ToolContext, ToolRegistry
from iflow.tools.files import MAX_LINE_CHARS, ReadFile, Replace, WriteFile
from iflow.tools.search import Glob, ListDirectory, SearchFileContent
from iflow.workspace import ShellSession, Workspace

IMAGE = "rock/base:bookworm"


class Agent:
    """Calls tools the way the agent loop does: through a registry, by name and JSON args."""

    def __init__(self, workspace: Workspace) -> None:
        self.workspace = workspace
        self.shell = ShellSession(workspace)
        tools = [ReadFile(), WriteFile(), Replace(), ListDirectory(), Glob(), SearchFileContent()]
        self.registry = ToolRegistry(tools)
        self.ctx = ToolContext(workspace, self.shell, TodoList())

    async def __call__(self, name: str, **arguments: Any) -> ToolResult:
        tool_call = ToolCall(id=secrets.token_hex(3), name=name, arguments=arguments)
        return await self.registry.call(tool_call, self.ctx)

    async def put(self, path: str, data: str | bytes) -> None:
        await self.workspace.write_bytes(path, data.encode() if isinstance(data, str) else data)

    async def text(self, path: str) -> str:
        return (await self.workspace.read_bytes(path)).decode()


@pytest.fixture
async def agent(workspace: Workspace) -> Any:
    helper = Agent(workspace)
    yield helper
    await helper.shell.close()


# --- read_file ---------------------------------------------------------------------------


async def test_read_file_numbers_lines_and_pages(agent: Agent) -> None:
    await agent.put("a.txt", "".join(f"line {i}\n" for i in range(1, 11)))
    whole = await agent("read_file", path="a.txt")
    assert whole.content.splitlines()[0] == "     1\tline 1" and not whole.is_error
    assert len(whole.content.splitlines()) == 10 and whole.metadata["total_lines"] == 10
    part = await agent("read_file", path="a.txt", offset=4, limit=3)
    path = f"{agent.workspace.root}/a.txt"
    assert part.content == (
        f"[Lines 4-6 of 10 in {path}; call read_file with offset=7 to read on.]\n"
        "     4\tline 4\n     5\tline 5\n     6\tline 6"
    )
    tail = await agent("read_file", path="a.txt", offset=9)
    assert tail.content.startswith(f"[Lines 9-10 of 10 in {path}.]\n     9\tline 9")
    past = await agent("read_file", path="a.txt", offset=11)
    assert past.is_error and "offset 11 is past the end" in past.content


async def test_read_file_relative_to_the_shell_directory(agent: Agent) -> None:
    await agent.put("pkg/mod.py", "x = 1\r\ny = 2")
    await agent.shell.run("cd pkg")
    result = await agent("read_file", path="mod.py")
    assert result.content == "     1\tx = 1\n     2\ty = 2"


async def test_read_file_binary_missing_empty_and_long_lines(agent: Agent) -> None:
    await agent.put("img.bin", b"\x89PNG\x00\x01" * 100)
    await agent.put("latin1.txt", "caf\xe9 au lait\n".encode("latin-1"))
    for name, size in [("img.bin", "600 bytes"), ("latin1.txt", "13 bytes")]:
        result = await agent("read_file", path=name)
        assert f"is a binary file ({size})" in result.content and not result.is_error
        assert result.metadata["binary"] is True
    missing = await agent("read_file", path="nope.txt")
    assert missing.is_error and "does not exist" in missing.content
    folder = await agent("read_file", path=".")
    assert folder.is_error and "is a directory" in folder.content
    await agent.put("empty.txt", "")
    assert (await agent("read_file", path="empty.txt")).content.endswith("empty.txt is empty.")
    await agent.put("wide.txt", "y" * (MAX_LINE_CHARS + 500) + "\n")
    wide = (await agent("read_file", path="wide.txt")).content
    assert wide.endswith("[... 500 more characters]") and len(wide) < MAX_LINE_CHARS + 100
    await agent.put("utf8.txt", "h\u00e9llo \u4e16\u754c\n" * 3000)  # multibyte across 8 KiB
    utf8 = await agent("read_file", path="utf8.txt", limit=1)
    assert (
        utf8.content.endswith("     1\th\u00e9llo \u4e16\u754c") and "binary" not in utf8.metadata
    )


async def test_read_file_stops_a_huge_page_at_a_whole_line(agent: Agent) -> None:
    await agent.put("big.txt", "".join(f"{i:05d} " + "z" * 200 + "\n" for i in range(1, 1001)))
    result = await agent("read_file", path="big.txt")
    first, last = result.content.splitlines()[0], result.content.splitlines()[-1]
    assert first.startswith("[Lines 1-") and "call read_file with offset=" in first
    end = result.metadata["end_line"]
    assert 100 < end < 1000 and last.startswith(f"{end:>6}\t{end:05d} ")


# --- write_file --------------------------------------------------------------------------


async def test_write_file_creates_dirs_then_overwrites(agent: Agent) -> None:
    created = await agent("write_file", path="new/dir/f.py", content="a\nb\n")
    path = f"{agent.workspace.root}/new/dir/f.py"
    assert created.content == f"Created {path} (2 lines)." and created.metadata["created"]
    again = await agent("write_file", path="new/dir/f.py", content="only")
    assert again.content == f"Overwrote {path} (1 line)." and not again.metadata["created"]
    assert await agent.text("new/dir/f.py") == "only"
    folder = await agent("write_file", path="new", content="x")
    assert folder.is_error and "is a directory" in folder.content


# --- replace -----------------------------------------------------------------------------


SOURCE = "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a - b\n"


async def test_replace_edits_once_and_shows_the_result(agent: Agent) -> None:
    await agent.put("m.py", SOURCE)
    result = await agent(
        "replace", path="m.py", old_string="    return a - b", new_string="    return a - b  # ok"
    )
    assert not result.is_error and result.metadata["replacements"] == 1
    assert (
        "Replaced 1 occurrence" in result.content
        and "     6\t    return a - b  # ok" in result.content
    )
    assert await agent.text("m.py") == SOURCE.replace("a - b", "a - b  # ok")


async def test_replace_refuses_missing_text_with_a_hint(agent: Agent) -> None:
    await agent.put("m.py", SOURCE)
    spaced = await agent("replace", path="m.py", old_string="return  a + b", new_string="x")
    assert spaced.is_error and "whitespace" in spaced.content
    near = await agent("replace", path="m.py", old_string="return a + c", new_string="x")
    assert near.is_error and "not found" in near.content and "line 2" in near.content
    assert await agent.text("m.py") == SOURCE


async def test_replace_counts_occurrences(agent: Agent) -> None:
    await agent.put("m.py", SOURCE)
    twice = await agent("replace", path="m.py", old_string="(a, b)", new_string="(x, y)")
    assert (
        twice.is_error
        and "found 2 times" in twice.content
        and "expected_replacements" in twice.content
    )
    both = await agent(
        "replace", path="m.py", old_string="(a, b)", new_string="(x, y)", expected_replacements=2
    )
    assert not both.is_error and (await agent.text("m.py")).count("(x, y)") == 2
    three = await agent(
        "replace", path="m.py", old_string="(x, y)", new_string="()", expected_replacements=3
    )
    assert three.is_error and "found 2 times" in three.content


async def test_replace_creates_refuses_no_ops_and_keeps_crlf(agent: Agent) -> None:
    created = await agent("replace", path="fresh/n.txt", old_string="", new_string="hi\n")
    assert not created.is_error and created.metadata["created"]
    assert await agent.text("fresh/n.txt") == "hi\n"
    exists = await agent("replace", path="fresh/n.txt", old_string="", new_string="again")
    assert exists.is_error and "already exists" in exists.content
    same = await agent("replace", path="fresh/n.txt", old_string="hi", new_string="hi")
    assert same.is_error and "same" in same.content
    missing = await agent("replace", path="none.txt", old_string="a", new_string="b")
    assert missing.is_error and "empty old_string" in missing.content
    await agent.put("win.txt", "one\r\ntwo\r\nthree\r\n")
    edit = await agent("replace", path="win.txt", old_string="one\ntwo", new_string="1\n2")
    assert not edit.is_error and await agent.text("win.txt") == "1\r\n2\r\nthree\r\n"
    await agent.put("mixed.txt", "a\r\nb\nc\n")
    await agent("replace", path="mixed.txt", old_string="b\n", new_string="B\n")
    assert await agent.text("mixed.txt") == "a\r\nB\nc\n"


async def test_replace_refuses_files_that_are_not_utf8(agent: Agent) -> None:
    data = b"ok\n" * 5000 + b"caf\xe9\n"  # the bad byte lies past the binary probe
    await agent.put("legacy.txt", data)
    result = await agent("replace", path="legacy.txt", old_string="ok", new_string="OK")
    assert result.is_error and "not valid UTF-8" in result.content
    assert await agent.workspace.read_bytes("legacy.txt") == data


# --- list_directory, glob, search ----------------------------------------------------------


async def make_project(agent: Agent) -> None:
    await agent.put(".gitignore", "build/\n*.pyc\n")
    await agent.put("src/app.py", "import os\n\ndef main():\n    print('TODO: run')\n")
    await agent.put("src/util.py", "# TODO: helpers\n")
    await agent.put("src/app.pyc", "TODO compiled")
    await agent.put("build/out.py", "# TODO generated\n")
    await agent.put("README.md", "# Demo\n")


async def test_list_directory(agent: Agent) -> None:
    await make_project(agent)
    result = await agent("list_directory")
    root = agent.workspace.root
    assert result.content == (
        f"{root} (3 entries):\nsrc/\n.gitignore  (13 B)\nREADME.md  (7 B)\n"
        "(1 entry ignored by .gitignore or the ignore patterns is not shown.)"
    )
    everything = await agent("list_directory", path=".", respect_gitignore=False, ignore=["*.md"])
    assert "build/" in everything.content and "README" not in everything.content
    file = await agent("list_directory", path="README.md")
    assert file.is_error and "use read_file" in file.content


async def test_glob_respects_gitignore_and_shows_paths_from_the_shell(agent: Agent) -> None:
    await make_project(agent)
    result = await agent("glob", pattern="**/*.py")
    lines = result.content.splitlines()
    assert lines[0] == "2 files match '**/*.py' under . (newest first):"
    assert sorted(lines[1:]) == ["src/app.py", "src/util.py"]
    await agent.shell.run("mkdir -p elsewhere && cd elsewhere")
    away = await agent("glob", pattern="*.py", path="../src")
    root = agent.workspace.root
    assert sorted(away.content.splitlines()[1:]) == [f"{root}/src/app.py", f"{root}/src/util.py"]
    none = await agent("glob", pattern="**/*.rs", path="..")
    assert not none.is_error and none.content == f"No files match '**/*.rs' under {root}."


async def test_search_file_content(agent: Agent) -> None:
    await make_project(agent)
    result = await agent("search_file_content", pattern="TODO")
    assert result.content == (
        "2 matches for 'TODO' in .:\nsrc/app.py\n  4:     print('TODO: run')\nsrc/util.py\n"
        "  1: # TODO: helpers"
    )
    narrowed = await agent("search_file_content", pattern="(?i)todo", path="src", include="app.*")
    assert narrowed.metadata["matches"] == 1
    none = await agent("search_file_content", pattern="FIXME")
    assert not none.is_error and none.content == "No matches for 'FIXME' in .."
    bad = await agent("search_file_content", pattern="print(")
    assert bad.is_error and "'print(' is invalid" in bad.content and "missing )" in bad.content


async def test_malformed_calls_become_error_observations(agent: Agent) -> None:
    cases = [
        ("read_file", {}),
        ("read_file", {"path": "a", "offset": 0}),
        ("read_file", {"path": "a", "limit": "many"}),
        ("write_file", {"path": "a"}),
        (
            "replace",
            {"path": "a", "old_string": "x", "new_string": "y", "expected_replacements": 0},
        ),
        ("glob", {"pattern": "*", "extra": 1}),
        ("search_file_content", {"path": "."}),
        ("list_directory", {"ignore": "*.md"}),
    ]
    for name, arguments in cases:
        result = await agent(name, **arguments)
        assert result.is_error and result.content.startswith(f"Invalid arguments for {name}:")
