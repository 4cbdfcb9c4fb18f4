"""``read_file``, ``write_file`` and ``replace``: files in the workspace, with paths relative
to the shell's current directory."""

from __future__ import annotations

import codecs
import difflib
import re

from pydantic import Field

from iflow.errors import WorkspaceError
from iflow.tools.base import Params, Tool, ToolContext, ToolFailed, ToolOutput

DEFAULT_READ_LINES = 2000
"""Lines ``read_file`` shows when no limit is given."""
MAX_READ_CHARS = 60_000
"""Characters of numbered lines ``read_file`` returns at most; it stops at a whole line."""
MAX_LINE_CHARS = 2000
"""Longer lines are clipped in ``read_file``'s output."""
BINARY_PROBE = 8192
SNIPPET_CONTEXT = 3
"""Lines shown around an edit in ``replace``'s answer."""


def is_binary(data: bytes) -> bool:
    """A NUL byte, or bytes that are not UTF-8, in the first 8 KiB."""
    head = data[:BINARY_PROBE]
    if b"\0" in head:
        return True
    try:
        codecs.getincrementaldecoder("utf-8")().decode(head, final=len(data) <= BINARY_PROBE)
    except UnicodeDecodeError:
        return True
    return False


def split_lines(text: str) -> list[str]:
    """Lines as ``sed -n`` and ``grep -n`` count them (a final newline ends the last line)."""
    if not text:
        return []
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    return [line.removesuffix("\r") for line in lines]


def count_lines(text: str) -> int:
    return len(split_lines(text))


def numbered(lines: list[str], first: int) -> str:
    """``lines`` prefixed with their numbers (``   12\\tline``), long lines clipped."""
    out = []
    for number, line in enumerate(lines, first):
        if len(line) > MAX_LINE_CHARS:
            line = f"{line[:MAX_LINE_CHARS]} [... {len(line) - MAX_LINE_CHARS:,} more characters]"
        out.append(f"{number:>6}\t{line}")
    return "\n".join(out)


def _path(ctx: ToolContext, path: str) -> str:
    return ctx.workspace.resolve(path, ctx.shell.cwd)


async def _exists(ctx: ToolContext, path: str) -> dict:
    info = await ctx.workspace.fsop("stat", {"path": path})
    if "error" in info:
        raise ToolFailed(info["error"])
    return info


class ReadFileParams(Params):
    path: str = Field(min_length=1, description="The file, relative to the shell's directory.")
    offset: int | None = Field(
        default=None, ge=1, description="The first line to show (1-based); default 1."
    )
    limit: int | None = Field(
        default=None, ge=1, description=f"How many lines to show; default {DEFAULT_READ_LINES}."
    )


class ReadFile(Tool):
    name = "read_file"
    description = (
        "Read a text file with line numbers. For large files pass offset (first line, 1-based) "
        "and limit (number of lines) to read a part; the answer says when more lines follow."
    )
    params = ReadFileParams
    kind = "read"

    async def run(self, params: ReadFileParams, ctx: ToolContext) -> ToolOutput:
        path = _path(ctx, params.path)
        data = await ctx.workspace.read_bytes(path)
        if is_binary(data):
            return ToolOutput(
                f"{path} is a binary file ({len(data):,} bytes); its contents are not shown. "
                "Inspect it with run_shell_command (for example file, xxd | head, or strings).",
                metadata={"path": path, "binary": True, "size": len(data)},
            )
        lines = split_lines(data.decode("utf-8", errors="replace"))
        total = len(lines)
        if total == 0:
            return ToolOutput(f"{path} is empty.", metadata={"path": path, "total_lines": 0})
        start = params.offset or 1
        if start > total:
            raise ToolFailed(
                f"offset {start} is past the end of {path}, which has {total:,} lines; "
                "pass a smaller offset."
            )
        end = min(total, start - 1 + (params.limit or DEFAULT_READ_LINES))
        chunk = lines[start - 1 : end]
        size = 0
        for i, line in enumerate(chunk):
            size += min(len(line), MAX_LINE_CHARS + 40) + 8
            if size > MAX_READ_CHARS and i > 0:
                chunk = chunk[:i]
                end = start + i - 1
                break
        body = numbered(chunk, start)
        partial = start > 1 or end < total
        if partial:
            more = f"; call read_file with offset={end + 1} to read on" if end < total else ""
            body = f"[Lines {start}-{end} of {total:,} in {path}{more}.]\n{body}"
        metadata = {
            "path": path,
            "total_lines": total,
            "start_line": start,
            "end_line": end,
            "partial": partial,
        }
        return ToolOutput(body, metadata=metadata)


class WriteFileParams(Params):
    path: str = Field(min_length=1, description="The file, relative to the shell's directory.")
    content: str = Field(description="The whole new content of the file.")


class WriteFile(Tool):
    name = "write_file"
    description = (
        "Write a whole file, creating it (and its parent directories) or replacing what it held. "
        "To change part of an existing file, use replace instead."
    )
    params = WriteFileParams
    kind = "edit"

    async def run(self, params: WriteFileParams, ctx: ToolContext) -> ToolOutput:
        path = _path(ctx, params.path)
        info = await _exists(ctx, path)
        if info.get("type") == "dir":
            raise ToolFailed(f"{path} is a directory; give the path of a file to write.")
        created = not info.get("exists")
        await ctx.workspace.write_bytes(path, params.content.encode("utf-8"))
        lines = count_lines(params.content)
        verb = "Created" if created else "Overwrote"
        return ToolOutput(
            f"{verb} {path} ({lines:,} line{'' if lines == 1 else 's'}).",
            metadata={"path": path, "created": created, "lines": lines},
        )


class ReplaceParams(Params):
    path: str = Field(min_length=1, description="The file, relative to the shell's directory.")
    old_string: str = Field(
        description="The exact text to replace, including whitespace and indentation, with "
        "enough surrounding lines to be unique. Empty to create a new file."
    )
    new_string: str = Field(description="The text to put in its place.")
    expected_replacements: int = Field(
        default=1, ge=1, description="How many occurrences to replace; all must be found."
    )


class Replace(Tool):
    name = "replace"
    description = (
        "Edit a file by replacing exact text: old_string must match the file character for "
        "character (read the file first) and occur exactly expected_replacements times "
        "(default 1). With an empty old_string, creates a new file holding new_string."
    )
    params = ReplaceParams
    kind = "edit"

    async def run(self, params: ReplaceParams, ctx: ToolContext) -> ToolOutput:
        path = _path(ctx, params.path)
        old, new = params.old_string, params.new_string
        if old == new:
            raise ToolFailed("old_string and new_string are the same, so nothing would change.")
        if old == "":
            return await self._create(path, new, ctx)
        try:
            data = await ctx.workspace.read_bytes(path)
        except WorkspaceError:
            if (await _exists(ctx, path)).get("exists"):
                raise
            raise ToolFailed(
                f"{path} does not exist; to create it, call replace with an empty old_string "
                "or use write_file."
            ) from None
        if is_binary(data):
            raise ToolFailed(f"{path} is a binary file; replace edits text files only.")
        try:
            content = data.decode("utf-8")
        except UnicodeDecodeError:
            raise ToolFailed(
                f"{path} is not valid UTF-8 text, so replace could damage it; edit it with "
                "run_shell_command (for example sed) instead."
            ) from None
        line_ends = content.count("\n")
        crlf = line_ends > 0 and content.count("\r\n") == line_ends and "\r" not in old
        if crlf:  # the model writes \n; match and write back the file's own line endings
            content = content.replace("\r\n", "\n")
            new = new.replace("\r\n", "\n")
        found = content.count(old)
        if found == 0:
            raise ToolFailed(f"old_string was not found in {path}; {_hint(content, old)}")
        if found != params.expected_replacements:
            raise ToolFailed(
                f"old_string was found {found} times in {path}, but expected_replacements is "
                f"{params.expected_replacements}; add more surrounding lines to make it unique, "
                f"or set expected_replacements to {found} to replace every occurrence."
            )
        first = content.index(old)
        updated = content.replace(old, new)
        await ctx.workspace.write_bytes(
            path, (updated.replace("\n", "\r\n") if crlf else updated).encode("utf-8")
        )
        snippet = _snippet(updated, first, new)
        noun = "occurrence" if found == 1 else "occurrences"
        return ToolOutput(
            f"Replaced {found} {noun} in {path}. The first edit now reads:\n{snippet}",
            metadata={"path": path, "replacements": found, "created": False},
        )

    async def _create(self, path: str, content: str, ctx: ToolContext) -> ToolOutput:
        info = await _exists(ctx, path)
        if info.get("exists"):
            raise ToolFailed(
                f"old_string is empty but {path} already exists; give the exact text to "
                "replace, or use write_file to replace the whole file."
            )
        await ctx.workspace.write_bytes(path, content.encode("utf-8"))
        lines = count_lines(content)
        return ToolOutput(
            f"Created {path} ({lines:,} line{'' if lines == 1 else 's'}).",
            metadata={"path": path, "replacements": 0, "created": True, "lines": lines},
        )


def _snippet(text: str, offset: int, new: str) -> str:
    """The numbered lines around the edit that starts at ``offset``."""
    lines = split_lines(text)
    first = text.count("\n", 0, offset)
    last = first + new.count("\n")
    lo = max(0, first - SNIPPET_CONTEXT)
    hi = min(len(lines), last + SNIPPET_CONTEXT + 1)
    return numbered(lines[lo:hi], lo + 1) if hi > lo else "(the file is now empty)"


def _hint(content: str, old: str) -> str:
    """Why ``old`` may have missed, as advice to the model."""
    squash = re.compile(r"\s+")
    if squash.sub(" ", old).strip() in squash.sub(" ", content):
        return (
            "it matches only if whitespace is ignored, so the indentation or line breaks "
            "differ: copy the exact text from read_file's output (without the line numbers)."
        )
    wanted = next((line.strip() for line in old.split("\n") if line.strip()), "")
    lines = split_lines(content)[:20_000]
    stripped = [line.strip() for line in lines]
    close = difflib.get_close_matches(wanted, stripped, n=1, cutoff=0.6) if wanted else []
    if close:
        number = stripped.index(close[0]) + 1
        return (
            f"the closest line is line {number}: {lines[number - 1].strip()[:200]!r}; read the "
            "file around it and copy the exact text."
        )
    return "read the file again and copy the exact text to replace."
