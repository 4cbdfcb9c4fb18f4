"""Checkpoints and rewind: the workspace's files and the conversation as they were before a
turn, kept so that a turn can be undone (``/rewind`` in the TUI, ``--rewind N`` with
``--resume`` headless).

Every turn (one prompt and the run it starts) is recorded with where the conversation
stood before it. Before the first tool call of a turn that may change files (an edit or a
command), the workspace is checkpointed: its files (``.gitignore`` respected, ``.git``
left out, as the agent's tools see them) are listed with their sizes and modification
times, and only those that changed since the last checkpoint are read and stored, content-
addressed, so a checkpoint costs a listing plus the turn's own changes. This works where
the tools act: on this machine or inside a rock sandbox. Rewinding to turn ``N`` writes
back the files of the first checkpoint at or after it (the files as they were when turn N
began: the turns between changed nothing), removes the files made since, and cuts the
conversation back to before turn N's prompt.

Kept beside the session (``<sessions>/<id>.checkpoints/``): ``turns.json``, one manifest per
checkpoint and the blobs. A file that cannot be read when checkpointing is named in the
checkpoint's ``skipped`` list and left alone by a rewind.
"""

from __future__ import annotations

import hashlib
import json
import posixpath
import shlex
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from iflow.errors import IflowError
from iflow.workspace.base import Workspace

MAX_FILE_BYTES = 20 * 1024 * 1024
"""A larger file is not checkpointed (named in ``skipped``)."""


class RewindError(IflowError):
    """A rewind that cannot be done as asked (one sentence)."""


@dataclass
class Turn:
    """One prompt and what stood before it."""

    number: int
    prompt: str
    history_len: int
    trajectory_len: int
    checkpoint: bool = False
    """Whether the files were checkpointed before this turn changed them."""
    skipped: list[str] = field(default_factory=list)


@dataclass
class RewindReport:
    turn: int
    written: list[str]
    removed: list[str]
    skipped: list[str]


class Checkpoints:
    """The turns of one session and the file checkpoints taken before them."""

    def __init__(self, workspace: Workspace, directory: Path) -> None:
        self.workspace = workspace
        self.directory = directory
        self.turns: list[Turn] = []
        self._last: dict[str, list[Any]] = {}
        """The newest manifest: path -> [sha, size, mtime_ns, mode]."""
        self._load()

    # -- recording -------------------------------------------------------------------------

    def begin(self, prompt: str, history_len: int, trajectory_len: int) -> Turn:
        """A turn starts: remember where the conversation stands."""
        turn = Turn(len(self.turns) + 1, prompt[:200], history_len, trajectory_len)
        self.turns.append(turn)
        self._save_turns()
        return turn

    async def before_change(self) -> None:
        """The current turn may change files: checkpoint them, once per turn."""
        if not self.turns or self.turns[-1].checkpoint:
            return
        turn = self.turns[-1]
        manifest, skipped = await self._snapshot()
        (self.directory / f"{turn.number}.json").write_text(json.dumps(manifest))
        turn.checkpoint, turn.skipped = True, skipped
        self._last = manifest
        self._save_turns()

    async def _snapshot(self) -> tuple[dict[str, list[Any]], list[str]]:
        listing = await self.workspace.fsop("tree", {"path": self.workspace.root})
        if "error" in listing:
            raise RewindError(f"the workspace cannot be checkpointed: {listing['error']}")
        manifest: dict[str, list[Any]] = {}
        skipped: list[str] = []
        blobs = self.directory / "blobs"
        for rel, size, mtime, mode in listing["files"]:
            known = self._last.get(rel)
            if known is not None and known[1] == size and known[2] == mtime:
                manifest[rel] = [known[0], size, mtime, mode]
                continue
            if size > MAX_FILE_BYTES:
                skipped.append(rel)
                continue
            try:
                data = await self.workspace.read_bytes(posixpath.join(self.workspace.root, rel))
            except (IflowError, OSError):
                skipped.append(rel)  # unreadable now: a rewind leaves it as it finds it
                continue
            sha = hashlib.sha256(data).hexdigest()
            blob = blobs / sha[:2] / sha
            if not blob.exists():
                blob.parent.mkdir(parents=True, exist_ok=True)
                blob.write_bytes(data)
            manifest[rel] = [sha, size, mtime, mode]
        return manifest, skipped

    # -- rewinding -------------------------------------------------------------------------

    async def rewind(self, number: int) -> tuple[Turn, RewindReport]:
        """Put the files back as they were before turn ``number`` (the conversation is the
        caller's, from the returned turn's lengths) and forget that turn and the later ones."""
        if not self.turns:
            raise RewindError("there is no turn to rewind to yet; the session has no prompt.")
        if not 1 <= number <= len(self.turns):
            raise RewindError(
                f"there is no turn {number} to rewind to; this session has turns 1 to "
                f"{len(self.turns)} (/rewind lists them)."
            )
        turn = self.turns[number - 1]
        source = next((t for t in self.turns[number - 1 :] if t.checkpoint), None)
        report = RewindReport(number, [], [], [])
        if source is not None:
            report = await self._restore(source, report)
        for later in self.turns[number - 1 :]:
            (self.directory / f"{later.number}.json").unlink(missing_ok=True)
        self.turns = self.turns[: number - 1]
        self._last = (
            self._manifest(self.turns[-1]) if self.turns and self.turns[-1].checkpoint else {}
        )
        if not self._last:
            self._last = self._newest_manifest()
        self._save_turns()
        return turn, report

    async def _restore(self, turn: Turn, report: RewindReport) -> RewindReport:
        wanted = self._manifest(turn)
        listing = await self.workspace.fsop("tree", {"path": self.workspace.root})
        current = {rel: (size, mtime) for rel, size, mtime, _ in listing.get("files", [])}
        gone = sorted(set(current) - set(wanted) - set(turn.skipped))
        if gone:
            paths = " ".join(shlex.quote(posixpath.join(self.workspace.root, r)) for r in gone)
            await self.workspace.exec(f"rm -f -- {paths}", timeout=120)
            report.removed = gone
        for rel, (sha, size, mtime, mode) in sorted(wanted.items()):
            if current.get(rel) == (size, mtime):
                continue
            data = (self.directory / "blobs" / sha[:2] / sha).read_bytes()
            full = posixpath.join(self.workspace.root, rel)
            await self.workspace.write_bytes(full, data)
            await self.workspace.exec(f"chmod {mode:o} {shlex.quote(full)}", timeout=30)
            report.written.append(rel)
        report.skipped = list(turn.skipped)
        return report

    # -- storage ---------------------------------------------------------------------------

    def _manifest(self, turn: Turn) -> dict[str, list[Any]]:
        path = self.directory / f"{turn.number}.json"
        loaded: dict[str, list[Any]] = json.loads(path.read_text()) if path.is_file() else {}
        return loaded

    def _newest_manifest(self) -> dict[str, list[Any]]:
        for turn in reversed(self.turns):
            if turn.checkpoint:
                return self._manifest(turn)
        return {}

    def _load(self) -> None:
        path = self.directory / "turns.json"
        if not path.is_file():
            return
        try:
            self.turns = [Turn(**t) for t in json.loads(path.read_text())]
        except (ValueError, TypeError):
            self.turns = []  # a damaged record: start over rather than rewind wrongly
        self._last = self._newest_manifest()

    def _save_turns(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        tmp = self.directory / f"turns.json.{time.monotonic_ns()}"
        tmp.write_text(json.dumps([asdict(t) for t in self.turns]))
        tmp.replace(self.directory / "turns.json")
