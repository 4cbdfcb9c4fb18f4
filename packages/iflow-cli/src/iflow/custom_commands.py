"""Custom slash commands: Markdown prompts in ``.iflow/commands/`` (the project's, found from
the working directory up to the repository root) and ``~/.iflow/commands/`` (the user's).

``review.md`` is ``/review``; ``git/commit.md`` is ``/git:commit``; a project command wins
over a user one of the same name. The file's text (after an optional front matter of
``description:`` and ``argument-hint:`` lines between ``---``) is the prompt sent, with
``$ARGUMENTS`` replaced by everything typed after the name and ``$1`` ... ``$9`` by its
words, as Claude Code does. The TUI and ``iflow -p "/review app.py"`` both expand them.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

from iflow.skills import front_matter

_POSITIONAL = re.compile(r"\$([1-9])")


@dataclass(frozen=True)
class CustomCommand:
    name: str
    path: Path
    description: str
    argument_hint: str
    template: str

    def expand(self, arguments: str) -> str:
        """The prompt for ``/name arguments``."""
        try:
            words = shlex.split(arguments)
        except ValueError:
            words = arguments.split()
        text = self.template.replace("$ARGUMENTS", arguments)
        text = _POSITIONAL.sub(
            lambda m: words[int(m.group(1)) - 1] if int(m.group(1)) <= len(words) else "", text
        )
        if (
            "$ARGUMENTS" not in self.template
            and not _POSITIONAL.search(self.template)
            and arguments
        ):
            text = f"{text.rstrip()}\n\n{arguments}"
        return text.strip()


def command_dirs(cwd: Path, home: Path) -> list[Path]:
    """Where commands are looked for, the first winning: the project's, then the user's."""
    dirs: list[Path] = []
    for directory in (cwd, *cwd.parents):
        if directory == home:
            break
        candidate = directory / ".iflow" / "commands"
        if candidate.is_dir():
            dirs.append(candidate)
            break
        if (directory / ".git").exists():
            break
    user = home / ".iflow" / "commands"
    if user.is_dir() and user not in dirs:
        dirs.append(user)
    return dirs


def load_commands(cwd: Path, home: Path) -> dict[str, CustomCommand]:
    """Every custom command by name; a file that cannot be read is left out."""
    found: dict[str, CustomCommand] = {}
    for directory in command_dirs(cwd, home):
        for path in sorted(directory.rglob("*.md")):
            name = ":".join(path.relative_to(directory).with_suffix("").parts)
            if name in found or not name:
                continue
            try:
                text = path.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError):
                continue
            meta = front_matter(text)
            body = _body(text) if meta else text
            found[name] = CustomCommand(
                name=name,
                path=path,
                description=meta.get("description", "") or _first_line(body),
                argument_hint=meta.get("argument-hint", ""),
                template=body,
            )
    return found


def expand_line(line: str, cwd: Path, home: Path) -> str | None:
    """``/name args`` as its command's prompt; None when ``line`` names no custom command."""
    if not line.startswith("/"):
        return None
    name, _, arguments = line[1:].partition(" ")
    command = load_commands(cwd, home).get(name)
    return command.expand(arguments.strip()) if command is not None else None


def _body(text: str) -> str:
    lines = text.lstrip("\ufeff").splitlines()
    for index, line in enumerate(lines[1:], start=1):
        if line.strip() == "---":
            return "\n".join(lines[index + 1 :]).strip() + "\n"
    return text


def _first_line(body: str) -> str:
    return next((line.strip() for line in body.splitlines() if line.strip()), "")[:80]
