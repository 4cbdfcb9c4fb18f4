"""Memory files: ``IFLOW.md``, ``AGENTS.md``, and the ``CLAUDE.md`` and ``GEMINI.md`` that
Claude Code and Gemini CLI users already keep, read hierarchically into the system prompt.

The order, most general first:

1. ``<home>/.iflow/IFLOW.md``, ``<home>/.iflow/AGENTS.md``, ``<home>/.claude/CLAUDE.md``
   and ``<home>/.gemini/GEMINI.md`` (scope ``global``);
2. the repository root (the nearest ancestor of the working directory holding
   ``.git``; the working directory itself when there is none): its ``IFLOW.md``,
   ``AGENTS.md``, ``CLAUDE.md``, ``GEMINI.md`` and ``.github/copilot-instructions.md``
   (scope ``project``);
3. each directory below the root down to the working directory, the same four names
   in the same order (scope ``directory``).

Later files are more specific and win where they disagree, so when the texts pass
the character budget the later files are kept whole and the earlier ones are cut
(their head kept) with a marker saying how much was cut. A file that cannot be read
or is not UTF-8 is skipped with a logged warning (``iflow.context.memory``); empty
files are left out.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

log = logging.getLogger(__name__)

Scope = Literal["global", "project", "directory"]
MEMORY_FILE_NAMES = ("IFLOW.md", "AGENTS.md", "CLAUDE.md", "GEMINI.md")
"""The names looked for in every directory, in the order they are read."""
GLOBAL_FILES = (".iflow/IFLOW.md", ".iflow/AGENTS.md", ".claude/CLAUDE.md", ".gemini/GEMINI.md")
"""The files read from the home directory, in order (each tool's own place)."""
ROOT_ONLY_FILES = (".github/copilot-instructions.md",)
"""Read at the repository root only, after its memory files."""
DEFAULT_MAX_CHARS = 40000


class MemoryFile(BaseModel):
    """One memory file as it goes into the prompt."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    path: Path
    """Where the file is."""
    scope: Scope
    """global (under ``~/.iflow``), project (the repository root) or directory (below it)."""
    text: str
    """The file's text, or its head when it was cut to fit the budget."""
    cut: int = Field(default=0, ge=0)
    """Characters cut from the end of the file to fit the budget."""


def find_repo_root(start: Path) -> Path | None:
    """The nearest directory at or above ``start`` that holds ``.git`` (a directory, or a
    file as in worktrees), or None."""
    for directory in (start, *start.parents):
        if (directory / ".git").exists():
            return directory
    return None


def memory_paths(cwd: Path, home: Path | None = None) -> list[tuple[Path, Scope]]:
    """Every place a memory file may be, in reading order, with its scope (existing or not)."""
    cwd = cwd.expanduser().resolve()
    home = (Path.home() if home is None else home).expanduser().resolve()
    root = find_repo_root(cwd) or cwd
    places: list[tuple[Path, Scope]] = [(home / name, "global") for name in GLOBAL_FILES]
    chain = [cwd, *cwd.parents]
    directories = list(reversed(chain[: chain.index(root) + 1]))
    for directory in directories:
        scope: Scope = "project" if directory == root else "directory"
        places.extend((directory / name, scope) for name in MEMORY_FILE_NAMES)
        if directory == root:
            places.extend((directory / name, scope) for name in ROOT_ONLY_FILES)
    seen: set[Path] = set()
    unique: list[tuple[Path, Scope]] = []
    for path, scope in places:
        if path not in seen:
            seen.add(path)
            unique.append((path, scope))
    return unique


def load_memory(
    cwd: Path, home: Path | None = None, *, max_chars: int = DEFAULT_MAX_CHARS
) -> list[MemoryFile]:
    """The memory files for a run in ``cwd``, in reading order, fitted to ``max_chars``
    characters of text in all (see :func:`fit_memory`)."""
    files: list[MemoryFile] = []
    for path, scope in memory_paths(cwd, home):
        if not path.is_file():
            continue
        text = _read(path)
        if text is not None and text.strip():
            files.append(MemoryFile(path=path, scope=scope, text=text))
    return fit_memory(files, max_chars)


def fit_memory(files: Sequence[MemoryFile], max_chars: int) -> list[MemoryFile]:
    """``files`` with at most ``max_chars`` characters of text in all: walking from the
    last (most specific) file back, each is kept whole while it fits; the first that
    does not is cut to what is left, and any before it are cut to nothing."""
    left = max(max_chars, 0)
    fitted: list[MemoryFile] = []
    for memory in reversed(files):
        if len(memory.text) <= left:
            fitted.append(memory)
            left -= len(memory.text)
            continue
        cut = len(memory.text) - left
        fitted.append(
            memory.model_copy(update={"text": memory.text[:left], "cut": memory.cut + cut})
        )
        left = 0
    fitted.reverse()
    return fitted


def render_memory(files: Sequence[MemoryFile]) -> str:
    """The memory section of the system prompt ("" when there are no files): each file
    headed by its path, with a marker where text was cut."""
    if not files:
        return ""
    parts = [
        "# Memory\n\nInstructions from the user's memory files, most general first; "
        "where they disagree, the later (more specific) file wins."
    ]
    for memory in files:
        body = memory.text.rstrip()
        if memory.cut:
            marker = (
                f"[... {memory.cut} characters cut from the end of this file "
                "to fit the memory budget ...]"
            )
            body = f"{body}\n{marker}" if body else marker
        parts.append(f"## {memory.path} ({memory.scope})\n\n{body}")
    return "\n\n".join(parts) + "\n"


def _read(path: Path) -> str | None:
    try:
        return path.read_bytes().decode("utf-8-sig")
    except UnicodeDecodeError:
        log.warning("memory file %s is not UTF-8 text and was skipped; save it as UTF-8.", path)
    except OSError as exc:
        log.warning(
            "memory file %s could not be read (%s) and was skipped; check its permissions.",
            path,
            exc.strerror or exc,
        )
    return None
