"""``list_directory``, ``glob`` and ``search_file_content``: the workspace's
:mod:`~iflow.workspace._fsops` queries, answered as compact text.

Paths in answers are relative to the shell's current directory when they lie under it,
absolute otherwise, so they can be passed straight back to the other tools.
"""

from __future__ import annotations

import posixpath
from typing import Any

from pydantic import Field

from iflow.tools.base import Params, Tool, ToolContext, ToolFailed, ToolOutput


async def _fsop(ctx: ToolContext, op: str, args: dict[str, Any]) -> dict[str, Any]:
    result = await ctx.workspace.fsop(op, args)
    if "error" in result:
        raise ToolFailed(str(result["error"]))
    return result


def shown(path: str, cwd: str) -> str:
    """``path`` relative to ``cwd`` when under it, else as given (absolute)."""
    if path == cwd:
        return "."
    prefix = cwd.rstrip("/") + "/"
    return path[len(prefix) :] if path.startswith(prefix) else path


def human_size(size: int) -> str:
    if size < 1024:
        return f"{size} B"
    scaled = float(size)
    for unit in ("KB", "MB", "GB"):
        scaled /= 1024
        if scaled < 1024 or unit == "GB":
            return f"{scaled:.1f} {unit}"
    raise AssertionError("unreachable")


class ListDirectoryParams(Params):
    path: str = Field(default=".", description="The directory, relative to the shell's directory.")
    ignore: list[str] | None = Field(
        default=None, description="Glob patterns of entry names to leave out, e.g. ['*.log']."
    )
    respect_gitignore: bool = Field(
        default=True,
        description="Leave out what .gitignore files ignore (.git is always left out).",
    )


class ListDirectory(Tool):
    name = "list_directory"
    description = (
        "List a directory's entries (directories first, marked with a trailing /; files with "
        "their sizes). Entries ignored by .gitignore are left out unless respect_gitignore "
        "is false."
    )
    params = ListDirectoryParams
    kind = "read"

    async def run(self, params: ListDirectoryParams, ctx: ToolContext) -> ToolOutput:
        path = ctx.workspace.resolve(params.path, ctx.shell.cwd)
        args = {
            "path": path,
            "ignore": params.ignore,
            "respect_gitignore": params.respect_gitignore,
        }
        result = await _fsop(ctx, "list", args)
        entries = result["entries"]
        lines = []
        for entry in entries:
            name, kind = entry["name"], entry["type"]
            if kind == "dir":
                lines.append(f"{name}/")
            elif kind == "file":
                lines.append(f"{name}  ({human_size(entry['size'] or 0)})")
            elif kind == "symlink":
                lines.append(f"{name}@  (symlink)")
            else:
                lines.append(f"{name}  (special file)")
        count = len(entries) + result.get("truncated", 0)
        header = f"{path} ({count:,} entr{'y' if count == 1 else 'ies'}):"
        if not count:
            header = f"{path} is empty."
        notes = []
        if result.get("truncated"):
            notes.append(f"({result['truncated']:,} more entries not shown; use glob to narrow.)")
        if result.get("ignored"):
            ignored = result["ignored"]
            notes.append(
                f"({ignored:,} entr{'y' if ignored == 1 else 'ies'} ignored by .gitignore or the "
                f"ignore patterns {'is' if ignored == 1 else 'are'} not shown.)"
            )
        text = "\n".join([header, *lines, *notes])
        return ToolOutput(
            text,
            metadata={"path": path, "entries": len(entries), "ignored": result.get("ignored", 0)},
        )


class GlobParams(Params):
    pattern: str = Field(
        min_length=1,
        description="A glob such as **/*.py or src/**/*.{ts,tsx}; * stays within one directory, "
        "** spans directories.",
    )
    path: str = Field(
        default=".", description="The directory to search from, relative to the shell's directory."
    )


class Glob(Tool):
    name = "glob"
    description = (
        "Find files whose paths match a glob pattern (relative to path), newest first. "
        "Use **/ to search subdirectories: *.py matches only in path itself. Files ignored by "
        ".gitignore are left out."
    )
    params = GlobParams
    kind = "read"

    async def run(self, params: GlobParams, ctx: ToolContext) -> ToolOutput:
        cwd = ctx.shell.cwd
        path = ctx.workspace.resolve(params.path, cwd)
        result = await _fsop(ctx, "glob", {"pattern": params.pattern, "path": path})
        base, files, total = result["base"], result["files"], result["total"]
        where = shown(base, cwd)
        if not files:
            text = f"No files match {params.pattern!r} under {where}."
        else:
            listed = [shown(posixpath.join(base, rel), cwd) for rel in files]
            noun = "file matches" if total == 1 else "files match"
            text = f"{total:,} {noun} {params.pattern!r} under {where} (newest first):\n"
            text += "\n".join(listed)
            if total > len(files):
                text += f"\n(showing {len(files):,} of {total:,}; narrow the pattern.)"
        if result.get("incomplete"):
            text += "\n(The search stopped early in a very large tree; narrow the path.)"
        return ToolOutput(text, metadata={"base": base, "total": total, "shown": len(files)})


class SearchFileContentParams(Params):
    pattern: str = Field(
        min_length=1,
        description="A Python regular expression, matched line by line; case-sensitive "
        "unless it starts with (?i).",
    )
    path: str = Field(
        default=".", description="A directory or file to search, relative to the shell's directory."
    )
    include: str | None = Field(
        default=None,
        description="Only files matching this glob, e.g. *.py (file names) or src/**/*.ts (paths).",
    )


class SearchFileContent(Tool):
    name = "search_file_content"
    description = (
        "Search file contents for a regular expression (Python syntax, case-sensitive; prefix "
        "(?i) to ignore case) and list matching lines with their numbers. Skips binary files, "
        "very large files and what .gitignore ignores."
    )
    params = SearchFileContentParams
    kind = "read"

    async def run(self, params: SearchFileContentParams, ctx: ToolContext) -> ToolOutput:
        cwd = ctx.shell.cwd
        path = ctx.workspace.resolve(params.path, cwd)
        args = {"pattern": params.pattern, "path": path, "include": params.include}
        result = await _fsop(ctx, "search", args)
        base, matches = result["base"], result["matches"]
        scope = shown(path, cwd) + (
            f" (files matching {params.include!r})" if params.include else ""
        )
        if not matches:
            text = f"No matches for {params.pattern!r} in {scope}."
        else:
            noun = "match" if len(matches) == 1 else "matches"
            more = "+" if result.get("truncated") else ""
            lines = [f"{len(matches):,}{more} {noun} for {params.pattern!r} in {scope}:"]
            current = None
            for match in matches:
                if match["file"] != current:
                    current = match["file"]
                    lines.append(shown(posixpath.join(base, current), cwd))
                lines.append(f"  {match['line']}: {match['text']}")
            if result.get("truncated"):
                stop = f"(Stopped after {len(matches):,} matches; "
                lines.append(stop + "narrow the pattern, path or include.)")
            text = "\n".join(lines)
        if result.get("skipped_large"):
            text += f"\n({result['skipped_large']:,} files over 5 MiB were not searched.)"
        if result.get("incomplete"):
            text += "\n(The search stopped early in a very large tree; narrow the path.)"
        metadata = {
            "path": path,
            "matches": len(matches),
            "truncated": bool(result.get("truncated")),
            "files_searched": result.get("files_searched", 0),
        }
        return ToolOutput(text, metadata=metadata)
