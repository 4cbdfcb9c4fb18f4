"""Where the agent's tools act: the local machine or a rock sandbox, behind one interface.

A :class:`Workspace` offers a handful of primitives (run a bash command, read and
write bytes, and the file-system queries of :mod:`iflow.workspace._fsops`). The
tools are written once against these primitives, so they behave the same on both.
Every method is async; blocking work runs in a thread or a subprocess.
"""

from __future__ import annotations

import abc
import posixpath
from dataclasses import dataclass
from typing import Any


@dataclass
class ExecOutput:
    """What one command did."""

    exit_code: int
    """The exit status (``-1`` when it never ran; 124 when killed at its timeout)."""
    stdout: str = ""
    stderr: str = ""
    timed_out: bool = False
    duration_sec: float = 0.0


class Workspace(abc.ABC):
    """A place where commands run and files live."""

    kind: str = "workspace"
    """``local`` or ``sandbox``: shown in the status bar and recorded in trajectories."""

    root: str
    """The absolute directory the agent starts in; relative paths resolve against it."""

    def resolve(self, path: str, cwd: str | None = None) -> str:
        """``path`` made absolute: relative paths resolve against ``cwd`` or the root."""
        base = cwd or self.root
        return posixpath.normpath(posixpath.join(base, path))

    @abc.abstractmethod
    async def exec(
        self,
        command: str,
        *,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        timeout: float | None = 120.0,
        stdin: bytes | None = None,
    ) -> ExecOutput:
        """Run ``command`` with ``bash -c``; on timeout kill its whole process tree."""

    @abc.abstractmethod
    async def read_bytes(self, path: str) -> bytes:
        """The file's bytes; :class:`~iflow.errors.WorkspaceError` when it is missing or a directory."""

    @abc.abstractmethod
    async def write_bytes(self, path: str, data: bytes) -> None:
        """Write a file, making parent directories."""

    @abc.abstractmethod
    async def fsop(self, op: str, args: dict[str, Any]) -> dict[str, Any]:
        """Run one of :mod:`iflow.workspace._fsops`'s operations (``list``, ``glob``,
        ``search``, ``stat``) where the files are; errors come back as ``{"error": ...}``."""

    async def close(self) -> None:  # noqa: B027 - optional: most workspaces hold nothing
        """Release what the workspace holds (the sandbox workspace may delete its sandbox)."""

    async def __aenter__(self) -> Workspace:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
