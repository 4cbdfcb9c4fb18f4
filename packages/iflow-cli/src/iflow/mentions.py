"""``@path`` in a prompt, as Claude Code and Gemini CLI users write it: ``explain @app.py``,
``review @src/``. The prompt goes to the model as written, followed by the content of each
file it names (a folder: its files, ``.gitignore`` honoured), so the model reads them without
a tool call.

Only a path that exists under the working directory counts (``@mentions`` of people and
``user@host`` stay text). Caps keep one reference from filling the context: a file is cut
to :data:`MAX_FILE_CHARS`, a folder gives at most :data:`MAX_FILES` files, all references
together at most :data:`MAX_TOTAL_CHARS`; binary files are left out; each cut or skip is
one note for the user.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from iflow.workspace._fsops import Ignorer

MAX_FILE_CHARS = 100_000
MAX_FILES = 50
MAX_TOTAL_CHARS = 400_000
_MENTION = re.compile(r"(?<![\w@])@([\w.~/+-]+)")
_TRAILING = ".,;:!?)"


def mentioned(prompt: str, cwd: Path) -> list[tuple[str, Path]]:
    """The ``@path`` references of ``prompt`` that name something under ``cwd``, as written
    and resolved, in order, each once."""
    found: list[tuple[str, Path]] = []
    root = cwd.resolve()
    for match in _MENTION.finditer(prompt):
        raw = match.group(1).rstrip(_TRAILING)
        path = (root / Path(raw).expanduser()).resolve()
        fresh = all(path != seen for _, seen in found)
        if raw and fresh and path.exists() and path.is_relative_to(root):
            found.append((raw, path))
    return found


def expand_mentions(prompt: str, cwd: Path) -> tuple[str, list[str]]:
    """``prompt`` with the files it references appended, and one note per file cut or
    left out (nothing referenced: the prompt as it was, no notes)."""
    refs = mentioned(prompt, cwd)
    if not refs:
        return prompt, []
    root = cwd.resolve()
    blocks: list[str] = []
    notes: list[str] = []
    total = 0
    for raw, path in refs:
        files = [path] if path.is_file() else _files(path, notes, raw)
        for file in files:
            rel = file.relative_to(root).as_posix()
            text = _read(file)
            if text is None:
                notes.append(f"@{rel} is not text; it was left out.")
                continue
            if len(text) > MAX_FILE_CHARS:
                notes.append(f"@{rel} was cut to its first {MAX_FILE_CHARS} characters.")
                text = text[:MAX_FILE_CHARS]
            if total + len(text) > MAX_TOTAL_CHARS:
                notes.append(
                    f"@{rel} and what follows were left out: the references passed "
                    f"{MAX_TOTAL_CHARS} characters."
                )
                return _joined(prompt, blocks), notes
            total += len(text)
            blocks.append(f'<file path="{rel}">\n{text}\n</file>')
    return _joined(prompt, blocks), notes


ATTACHED = "\n\nThe files this prompt references with @:\n"
"""Where a prompt's own text ends and the referenced files begin."""


def as_typed(prompt: str) -> str:
    """The prompt as the user typed it, without the files :func:`expand_mentions` added."""
    return prompt.split(ATTACHED, 1)[0]


def _joined(prompt: str, blocks: list[str]) -> str:
    if not blocks:
        return prompt
    return prompt + ATTACHED + "\n".join(blocks)


def _files(folder: Path, notes: list[str], raw: str) -> list[Path]:
    """A folder's files, sorted, ``.gitignore`` honoured, at most :data:`MAX_FILES`."""
    ignorer = Ignorer(str(folder))
    found: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(folder):
        dirnames[:] = sorted(
            d for d in dirnames if not ignorer.ignored(os.path.join(dirpath, d), True)
        )
        for name in sorted(filenames):
            full = os.path.join(dirpath, name)
            if ignorer.ignored(full, False) or os.path.islink(full):
                continue
            if len(found) == MAX_FILES:
                notes.append(f"@{raw} holds more than {MAX_FILES} files; the first were kept.")
                return found
            found.append(Path(full))
    return found


def _read(path: Path) -> str | None:
    """The file's text, or None when it is binary or cannot be read."""
    try:
        data = path.read_bytes()[: MAX_FILE_CHARS * 4 + 1]
    except OSError:
        return None
    if b"\0" in data[:8192]:
        return None
    return data.decode("utf-8", errors="replace")
