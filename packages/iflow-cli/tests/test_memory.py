"""Memory files: hierarchy order, scopes, the budget and files that cannot be read."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from iflow.context.memory import MemoryFile, fit_memory, load_memory, render_memory


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def test_hierarchy_order_and_scopes(home: Path, repo: Path) -> None:
    cwd = repo / "pkg" / "mod"
    cwd.mkdir(parents=True)
    write(repo.parent / "IFLOW.md", "above the repository: never read")
    expected = [
        (write(home / ".iflow" / "IFLOW.md", "global iflow"), "global"),
        (write(home / ".iflow" / "AGENTS.md", "global agents"), "global"),
        (write(repo / "IFLOW.md", "root iflow"), "project"),
        (write(repo / "AGENTS.md", "root agents"), "project"),
        (write(repo / "pkg" / "AGENTS.md", "pkg agents"), "directory"),
        (write(cwd / "IFLOW.md", "mod iflow"), "directory"),
        (write(cwd / "AGENTS.md", "mod agents"), "directory"),
    ]
    files = load_memory(cwd, home)
    assert [(f.path, f.scope) for f in files] == expected
    assert [f.text for f in files] == [
        "global iflow",
        "global agents",
        "root iflow",
        "root agents",
        "pkg agents",
        "mod iflow",
        "mod agents",
    ]
    assert all(f.cut == 0 for f in files)


def test_without_a_repository_only_cwd_is_read(home: Path, tmp_path: Path) -> None:
    write(tmp_path / "IFLOW.md", "parent")
    cwd = tmp_path / "plain"
    write(cwd / "IFLOW.md", "here")
    files = load_memory(cwd, home)
    assert [(f.text, f.scope) for f in files] == [("here", "project")]


def test_render_heads_each_file_with_its_path(home: Path, repo: Path) -> None:
    global_file = write(home / ".iflow" / "IFLOW.md", "Use British spelling.\n")
    project_file = write(repo / "AGENTS.md", "Run `make test`.\n")
    text = render_memory(load_memory(repo, home))
    assert text.index(f"## {global_file} (global)") < text.index(f"## {project_file} (project)")
    assert "Use British spelling." in text
    assert "Run `make test`." in text
    assert render_memory([]) == ""


def test_budget_keeps_later_files_whole_and_marks_the_cut(home: Path, repo: Path) -> None:
    write(home / ".iflow" / "IFLOW.md", "G" * 100)
    write(repo / "IFLOW.md", "P" * 50)
    write(repo / "AGENTS.md", "A" * 30)
    files = load_memory(repo, home, max_chars=100)
    assert [f.text for f in files] == ["G" * 20, "P" * 50, "A" * 30]
    assert [f.cut for f in files] == [80, 0, 0]
    assert sum(len(f.text) for f in files) == 100

    text = render_memory(files)
    assert "[... 80 characters cut from the end of this file to fit the memory budget ...]" in text
    assert "P" * 50 in text
    assert "A" * 30 in text


def test_budget_smaller_than_the_last_file(tmp_path: Path) -> None:
    files = [
        MemoryFile(path=tmp_path / "a", scope="global", text="aaaa"),
        MemoryFile(path=tmp_path / "b", scope="project", text="bbbbbbbbbb"),
    ]
    fitted = fit_memory(files, 6)
    assert [(f.text, f.cut) for f in fitted] == [("", 4), ("bbbbbb", 4)]
    assert "[... 4 characters cut" in render_memory(fitted)


def test_non_utf8_file_is_skipped_with_a_warning(
    home: Path, repo: Path, caplog: pytest.LogCaptureFixture
) -> None:
    bad = repo / "IFLOW.md"
    bad.write_bytes(b"caf\xe9 latin-1\n")
    write(repo / "AGENTS.md", "fine")
    with caplog.at_level(logging.WARNING, logger="iflow.context.memory"):
        files = load_memory(repo, home)
    assert [f.text for f in files] == ["fine"]
    assert any(str(bad) in r.getMessage() and "not UTF-8" in r.getMessage() for r in caplog.records)


def test_empty_files_and_directories_named_like_memory_are_left_out(home: Path, repo: Path) -> None:
    write(repo / "IFLOW.md", "  \n")
    (repo / "AGENTS.md").mkdir()
    assert load_memory(repo, home) == []


def test_home_inside_the_repository_is_not_read_twice(tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / ".git").mkdir(parents=True)
    cwd = home / ".iflow"
    write(cwd / "IFLOW.md", "once")
    files = load_memory(cwd, home)
    assert [(f.text, f.scope) for f in files] == [("once", "global")]


def test_claude_code_s_and_gemini_cli_s_files_are_read_in_their_layers(
    home: Path, repo: Path
) -> None:
    """A Claude Code or Gemini CLI user's files: ~/.claude/CLAUDE.md and ~/.gemini/GEMINI.md
    (global), CLAUDE.md and GEMINI.md at the root and below, and the root's
    .github/copilot-instructions.md, each after iflow's own names at the same layer."""
    cwd = repo / "svc"
    expected = [
        (write(home / ".iflow" / "AGENTS.md", "g agents"), "global"),
        (write(home / ".claude" / "CLAUDE.md", "g claude"), "global"),
        (write(home / ".gemini" / "GEMINI.md", "g gemini"), "global"),
        (write(repo / "AGENTS.md", "r agents"), "project"),
        (write(repo / "CLAUDE.md", "r claude"), "project"),
        (write(repo / "GEMINI.md", "r gemini"), "project"),
        (write(repo / ".github" / "copilot-instructions.md", "r copilot"), "project"),
        (write(cwd / "CLAUDE.md", "svc claude"), "directory"),
    ]
    write(cwd / ".github" / "copilot-instructions.md", "below the root: not read")
    files = load_memory(cwd, home)
    assert [(f.path, f.scope) for f in files] == expected
