"""Saved sessions: one journal file per session, written after every turn, resumable.

Files live under ``<home>/.iflow/sessions/<id>.json`` (or ``sessions_dir``). An id is
the UTC time the session started plus a random suffix, ``20261121-153012-ab12cd``, so
ids sort by age and a short prefix names one.

A file is a journal of JSON lines, so that saving a turn costs the same at turn 200 as
at turn 2: a ``snapshot`` line holding a whole :class:`SessionData`, then, per turn, a
``steps`` line with the steps appended since (to both the history and the trajectory)
and a ``state`` line with the small fields that changed (todos, counters, the
trajectory's end). When the history is rewritten (compression, ``/mode``, a resume) the
file is replaced by a fresh snapshot. Snapshots are atomic (a temporary file in the
same directory replaces the session file); appends are single writes, so a crash can at
worst leave a torn last line, which reading ignores. A file holding one plain
``SessionData`` object (the first format) still reads. Files are ``0600`` and a
directory the store creates is ``0700``: sessions hold prompts, file contents and
command output.

A file that cannot be read (corrupt, not UTF-8, not a session) is never changed or
removed by the store. Loading it by id raises a :class:`SessionError` naming it;
:meth:`SessionStore.list` and :meth:`SessionStore.latest` skip it and return one
warning sentence per such file, for the CLI to print, so the other sessions stay
usable and nothing older is resumed silently.
"""

from __future__ import annotations

import builtins
import json
import os
import re
import secrets
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ale.trajectory import AgentInfo, Step, Trajectory
from iflow import __version__
from iflow.errors import SessionError

_ID_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]*$")
_LIST_HINT = "see `iflow --list-sessions` for the saved sessions"


def _same_dir(recorded: str, cwd: Path) -> bool:
    """Whether a session recorded in ``recorded`` belongs to the directory ``cwd``."""
    return Path(recorded).expanduser().resolve() == cwd.expanduser().resolve()


def _now() -> datetime:
    return datetime.now(UTC)


def _new_trajectory() -> Trajectory:
    return Trajectory(agent=AgentInfo(name="iflow", version=__version__))


def sessions_root(settings: Any, home: Path) -> Path:
    """Where sessions are saved: the ``sessions_dir`` setting, else ``<home>/.iflow/sessions``."""
    return Path(settings.sessions_dir) if settings.sessions_dir else home / ".iflow" / "sessions"


def clip_title(prompt: str, limit: int = 80) -> str:
    """A session title from its first prompt: whitespace collapsed, at most ``limit``
    characters, clipped with an ellipsis."""
    text = " ".join(prompt.split())
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)


class SessionData(_Model):
    """Everything needed to resume a session."""

    version: int = 1
    """Version of this file format."""
    id: str
    """The session's id, also its file name without ``.json``."""
    created_at: datetime = Field(default_factory=_now)
    """When the session started (UTC)."""
    updated_at: datetime = Field(default_factory=_now)
    """When the session was last saved (UTC); :meth:`SessionStore.save` sets it."""
    cwd: str
    """The working directory the session ran in."""
    title: str = ""
    """The first user prompt, clipped (see :func:`clip_title`)."""
    model: str | None = None
    """The model's name."""
    provider: str | None = None
    """The model layer (openai, local, scripted)."""
    approval_mode: str = "default"
    """The approval mode when last saved."""
    history: list[Step] = Field(default_factory=list)
    """The messages the model currently sees (after any compression)."""
    trajectory: Trajectory = Field(default_factory=_new_trajectory)
    """The full record of the session, every step as it happened."""
    todos: list[dict[str, str]] = Field(default_factory=list)
    """The todo list, as :meth:`iflow.plan.TodoList.dump` gives it."""
    turns: int = Field(default=0, ge=0)
    """Model calls made so far."""
    tokens_used: int = Field(default=0, ge=0)
    """Tokens (prompt and completion) spent so far."""
    extra: dict[str, Any] = Field(default_factory=dict)
    """Anything else a surface wants kept, as it is."""


class SessionSummary(_Model):
    """One line of ``iflow --list-sessions``."""

    id: str
    """The session's id."""
    title: str
    """The first user prompt, clipped."""
    updated_at: datetime
    """When the session was last saved."""
    turns: int
    """Model calls made."""
    cwd: str
    """The working directory it ran in."""


class SessionStore:
    """The sessions saved in one directory."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root).expanduser()

    @staticmethod
    def new_id() -> str:
        """A fresh id: the UTC time now and six random hex digits."""
        return f"{_now():%Y%m%d-%H%M%S}-{secrets.token_hex(3)}"

    def path(self, session_id: str) -> Path:
        """Where the session ``session_id`` is (or would be) saved."""
        _check_id(session_id)
        return self.root / f"{session_id}.json"

    def save(self, data: SessionData) -> Path:
        """Write ``data`` atomically, setting its ``updated_at`` to now; returns the file."""
        target = self.path(data.id)
        self._make_root()
        data.updated_at = _now()
        text = '{"kind":"snapshot","data":' + data.model_dump_json(exclude_none=True) + "}\n"
        fd, tmp_name = tempfile.mkstemp(prefix=f".{data.id}.", suffix=".tmp", dir=self.root)
        tmp = Path(tmp_name)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write(text)
                fh.flush()
                os.fsync(fh.fileno())
            os.chmod(tmp, 0o600)
            os.replace(tmp, target)
        except BaseException as exc:
            tmp.unlink(missing_ok=True)
            if isinstance(exc, OSError):
                raise SessionError(
                    f"session {data.id} could not be saved to {target} ({exc.strerror or exc}); "
                    "check that the directory is writable and the disk is not full."
                ) from exc
            raise
        return target

    def append(self, session_id: str, records: builtins.list[dict[str, Any]]) -> None:
        """Add journal records (``steps``/``state``) to a saved session, one write."""
        path = self.path(session_id)
        text = "".join(json.dumps(r, separators=(",", ":"), default=str) + "\n" for r in records)
        try:
            with path.open("a", encoding="utf-8") as fh:
                fh.write(text)
        except OSError as exc:
            raise SessionError(
                f"session {session_id} could not be saved to {path} ({exc.strerror or exc}); "
                "check that the directory is writable and the disk is not full."
            ) from exc

    def load(self, id_or_prefix: str) -> SessionData:
        """The session whose id is ``id_or_prefix`` or starts with it (uniquely)."""
        session_id = self.resolve(id_or_prefix)
        data, problem = self._read(self.path(session_id))
        if data is None:
            raise SessionError(f"{problem}; move or delete it, or resume another session.")
        return data

    def resolve(self, id_or_prefix: str) -> str:
        """The full id that ``id_or_prefix`` names: an exact id, or a unique prefix."""
        if not id_or_prefix or not _ID_PATTERN.match(id_or_prefix):
            raise SessionError(f"{id_or_prefix!r} is not a session id; {_LIST_HINT}.")
        ids = self._ids()
        if id_or_prefix in ids:
            return id_or_prefix
        matches = [i for i in ids if i.startswith(id_or_prefix)]
        if not matches:
            raise SessionError(f"no saved session matches {id_or_prefix!r}; {_LIST_HINT}.")
        if len(matches) > 1:
            shown = ", ".join(matches[:10]) + (", ..." if len(matches) > 10 else "")
            raise SessionError(
                f"{id_or_prefix!r} matches {len(matches)} sessions ({shown}); give more of the id."
            )
        return matches[0]

    def latest(self, cwd: Path | None = None) -> tuple[SessionData, builtins.list[str]]:
        """The most recently saved readable session (of the directory ``cwd``, when given:
        a session belongs to the project it started in), and one warning per newer file
        that could not be read (skipped, never touched)."""
        paths = sorted(self._files(), key=lambda p: (_mtime(p), p.name), reverse=True)
        warnings: builtins.list[str] = []
        elsewhere: SessionData | None = None
        for path in paths:
            data, problem = self._read(path)
            if data is not None and cwd is not None and not _same_dir(data.cwd, cwd):
                elsewhere = elsewhere or data
                continue
            if data is not None:
                if warnings:
                    warnings.append(f"resuming the older session {data.id} instead.")
                return data, warnings
            warnings.append(f"{problem}; move or delete it to silence this warning.")
        if elsewhere is not None:
            raise SessionError(
                f"there is no saved session of {cwd}; the latest one ({elsewhere.id}) is of "
                f"{elsewhere.cwd}: resume it by its id (iflow --resume {elsewhere.id}), or see "
                "them all with `iflow --list-sessions --all`."
            )
        if warnings:
            raise SessionError(
                f"no saved session in {self.root} can be read ({len(warnings)} unreadable); "
                f"{_LIST_HINT}."
            )
        raise SessionError(f"there are no saved sessions in {self.root}; start one with `iflow`.")

    def list(
        self, cwd: Path | None = None
    ) -> tuple[builtins.list[SessionSummary], builtins.list[str]]:
        """Summaries of the readable sessions (of the directory ``cwd``, when given), newest
        first, and one warning sentence per file that could not be read."""
        summaries: builtins.list[SessionSummary] = []
        warnings: builtins.list[str] = []
        for path in sorted(self._files()):
            data, problem = self._read(path)
            if data is None:
                warnings.append(f"{problem}; move or delete it to silence this warning.")
                continue
            if cwd is not None and not _same_dir(data.cwd, cwd):
                continue
            summaries.append(
                SessionSummary(
                    id=data.id,
                    title=data.title,
                    updated_at=data.updated_at,
                    turns=data.turns,
                    cwd=data.cwd,
                )
            )
        summaries.sort(key=lambda s: (s.updated_at, s.id), reverse=True)
        return summaries, warnings

    def delete(self, session_id: str) -> None:
        """Remove the session with exactly this id (a prefix is not enough here)."""
        path = self.path(session_id)
        try:
            path.unlink()
        except FileNotFoundError:
            raise SessionError(f"there is no saved session {session_id!r}; {_LIST_HINT}.") from None
        except OSError as exc:
            raise SessionError(
                f"session file {path} could not be deleted ({exc.strerror or exc}); "
                "check its permissions."
            ) from None

    # -- private --------------------------------------------------------------------------------

    def _make_root(self) -> None:
        if self.root.is_dir():
            return
        try:
            self.root.parent.mkdir(parents=True, exist_ok=True)
            self.root.mkdir(mode=0o700, exist_ok=True)
            os.chmod(self.root, 0o700)
        except OSError as exc:
            raise SessionError(
                f"the sessions directory {self.root} could not be created "
                f"({exc.strerror or exc}); check the permissions of its parent."
            ) from None

    def _files(self) -> builtins.list[Path]:
        if not self.root.is_dir():
            return []
        return [
            p
            for p in self.root.iterdir()
            if p.suffix == ".json" and not p.name.startswith(".") and _ID_PATTERN.match(p.stem)
        ]

    def _ids(self) -> builtins.list[str]:
        return sorted(p.stem for p in self._files())

    def _read(self, path: Path) -> tuple[SessionData | None, str]:
        """The session in ``path``, or None and a clause saying what is wrong with it."""
        try:
            raw = path.read_bytes()
        except OSError as exc:
            return None, f"session file {path} cannot be read ({exc.strerror or exc})"
        try:
            data = _replay(raw)
        except ValidationError as exc:
            return None, f"session file {path} is not a valid session ({_describe(exc)})"
        except _JournalError as exc:
            return None, f"session file {path} is not a valid session ({exc})"
        if data.id != path.stem:
            return None, (
                f"session file {path} holds session {data.id!r}, which does not match its name"
            )
        return data, ""


class _JournalError(ValueError):
    pass


def _replay(raw: bytes) -> SessionData:
    """A session from its file: a journal of lines, or one plain ``SessionData`` object."""
    if not raw.startswith(b'{"kind":'):
        return SessionData.model_validate_json(raw)
    lines = raw.split(b"\n")
    torn = lines[-1] != b""  # a last line without its newline: a write cut short
    data: SessionData | None = None
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            if torn and number == len(lines):
                break
            raise _JournalError(f"line {number} is not JSON: {exc}") from None
        kind = record.get("kind") if isinstance(record, dict) else None
        if kind == "snapshot":
            data = SessionData.model_validate(record.get("data"))
        elif data is None:
            raise _JournalError("it does not start with a snapshot line")
        elif kind == "steps":
            steps = [Step.model_validate(s) for s in record.get("steps", [])]
            data.history.extend(steps)
            data.trajectory.steps.extend(steps)
        elif kind == "state":
            _apply_state(data, record)
        else:
            raise _JournalError(f"line {number} has an unknown kind {kind!r}")
    if data is None:
        raise _JournalError("it holds no snapshot")
    return data


def _apply_state(data: SessionData, record: dict[str, Any]) -> None:
    fields = record.get("session", {})
    for name in fields:
        if name not in (
            "todos",
            "turns",
            "tokens_used",
            "extra",
            "title",
            "model",
            "approval_mode",
            "updated_at",
        ):
            raise _JournalError(f"a state line sets {name!r}, which it may not")
    merged = data.model_dump(exclude={"history", "trajectory"})
    merged.update(fields)
    fresh = SessionData.model_validate({**merged, "history": [], "trajectory": data.trajectory})
    for name in fields:
        setattr(data, name, getattr(fresh, name))
    ends = record.get("trajectory")
    if ends:
        t = data.trajectory.model_dump(exclude={"steps"})
        t.update(ends)
        updated = Trajectory.model_validate({**t, "steps": []})
        for name in ends:
            setattr(data.trajectory, name, getattr(updated, name))


def _check_id(session_id: str) -> None:
    if not _ID_PATTERN.match(session_id):
        raise SessionError(f"{session_id!r} is not a session id; {_LIST_HINT}.")


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


def _describe(exc: ValidationError) -> str:
    first = exc.errors(include_url=False)[0]
    msg = str(first["msg"])
    if first["type"] == "json_invalid":
        return msg[:1].lower() + msg[1:]
    loc = ".".join(str(p) for p in first["loc"])
    more = exc.error_count() - 1
    suffix = f", and {more} more problem{'s' if more > 1 else ''}" if more else ""
    return (f"{loc}: {msg}" if loc else msg) + suffix
