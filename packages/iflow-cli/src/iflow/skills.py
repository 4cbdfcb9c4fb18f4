"""Agent Skills: folders of instructions the agent reads when a task needs them.

A skills directory holds one folder per skill with a ``SKILL.md`` whose front matter names
and describes it (``name:`` and ``description:`` between ``---`` lines). The agent is told
each skill's name, description and file in its system prompt and reads the file itself
when the skill applies, so a skill costs a line of context until it is used. Harbor gives
tasks a ``skills_dir`` this way; the folders are found where the agent's tools act (the
local machine or the sandbox).
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from iflow.workspace.base import Workspace

MAX_SKILLS = 50
"""Skills listed at most (the rest are named by count)."""
_DESCRIPTION_LIMIT = 400


@dataclass(frozen=True)
class Skill:
    name: str
    description: str
    path: str
    """Where its SKILL.md is, in the workspace."""


async def find_skills(workspace: Workspace, directory: str) -> list[Skill]:
    """The skills under ``directory`` (``<skill>/SKILL.md`` each), sorted by path; a folder
    whose SKILL.md has no name or description is left out; a missing directory has none."""
    found = await workspace.exec(
        f"find {shlex.quote(directory)} -mindepth 2 -maxdepth 2 -name SKILL.md -type f "
        "2>/dev/null | sort",
        timeout=30,
    )
    skills: list[Skill] = []
    for path in found.stdout.splitlines():
        path = path.strip()
        if not path:
            continue
        try:
            text = (await workspace.read_bytes(path)).decode("utf-8", "replace")
        except Exception:  # an unreadable file is a skill the agent cannot use
            continue
        fields = front_matter(text)
        if fields.get("name") and fields.get("description"):
            skills.append(Skill(fields["name"], fields["description"], path))
    return skills


def front_matter(text: str) -> dict[str, str]:
    """The ``key: value`` pairs between a document's opening ``---`` lines (a value may go
    on over indented lines, or be a ``>``/``|`` block); quotes around a value are dropped."""
    lines = text.lstrip("\ufeff").splitlines()
    if not lines or lines[0].strip() != "---":
        return {}
    fields: dict[str, str] = {}
    key = None
    for line in lines[1:]:
        if line.strip() == "---":
            break
        if key is not None and line[:1] in (" ", "\t") and line.strip():
            fields[key] = f"{fields[key]} {line.strip()}".strip()
            continue
        head, sep, value = line.partition(":")
        if not sep or not head.strip() or head[:1] in (" ", "\t", "#"):
            key = None
            continue
        key = head.strip()
        value = value.strip()
        if value in (">", "|", ">-", "|-"):
            value = ""
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
            value = value[1:-1]
        fields[key] = value
    return fields


def render_skills(skills: list[Skill]) -> str:
    """The system prompt's section on skills ("" for none)."""
    if not skills:
        return ""
    lines = [
        "# Skills",
        "These skills are available. When a task matches one, read its SKILL.md with "
        "read_file before you start, and follow it.",
    ]
    for skill in skills[:MAX_SKILLS]:
        description = " ".join(skill.description.split())[:_DESCRIPTION_LIMIT]
        lines.append(f"- {skill.name} ({skill.path}): {description}")
    if len(skills) > MAX_SKILLS:
        lines.append(f"- and {len(skills) - MAX_SKILLS} more under the same directory")
    return "\n".join(lines)
