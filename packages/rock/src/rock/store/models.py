"""The daemon's tables, the sandbox state machine, and the plain records the store returns.

Three tables: `sandboxes` (one row per sandbox, never physically deleted: a deleted
sandbox is a row in state `deleted`), `sandbox_transitions` (the state history) and
`exec_records` (one row per command, outputs kept only up to a bounded head).
"""

from __future__ import annotations

from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict
from sqlalchemy import (
    JSON,
    Boolean,
    CheckConstraint,
    DateTime,
    Dialect,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    TypeDecorator,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from rock.errors import RockError

MAX_COMMAND_CHARS = 4096
"""Commands longer than this are stored cut to this many characters."""


class SandboxState(StrEnum):
    """Where a sandbox is in its life."""

    PENDING = "pending"
    STARTING = "starting"
    READY = "ready"
    BUSY = "busy"
    PAUSED = "paused"
    STOPPED = "stopped"
    DELETED = "deleted"
    ERROR = "error"


_S = SandboxState

ALLOWED_TRANSITIONS: dict[SandboxState, frozenset[SandboxState]] = {
    _S.PENDING: frozenset({_S.STARTING, _S.ERROR, _S.DELETED}),
    _S.STARTING: frozenset({_S.READY, _S.ERROR, _S.DELETED}),
    _S.READY: frozenset({_S.BUSY, _S.STOPPED, _S.DELETED, _S.ERROR}),
    _S.BUSY: frozenset({_S.READY, _S.PAUSED, _S.STOPPED, _S.DELETED, _S.ERROR}),
    _S.PAUSED: frozenset({_S.BUSY, _S.DELETED, _S.ERROR}),
    _S.STOPPED: frozenset({_S.READY, _S.DELETED, _S.ERROR}),
    _S.ERROR: frozenset({_S.DELETED}),
    _S.DELETED: frozenset(),
}
"""The only moves a sandbox may make; anything else is an `IllegalTransition`."""

LIVE_STATES = frozenset(ALLOWED_TRANSITIONS) - {_S.DELETED}
"""States whose sandbox may still own a container (what reconciliation looks at)."""

REAPABLE_STATES = frozenset({_S.READY, _S.BUSY, _S.STOPPED})
"""States in which a sandbox can expire by TTL or, when it has one, by idle timeout.

Ready means started and not handed out (a warm pool's idle member); busy means handed
to a client (leased). Every command or file operation counts as use. A paused sandbox
(its processes frozen by its client) is kept until it is resumed or deleted, as E2B keeps
one; resuming starts its timeout again.
"""


# --- errors -------------------------------------------------------------------------


class StoreError(RockError):
    """Root of the state store's errors."""


class StoreUnavailable(StoreError):
    """The database cannot be reached now (down, restarting); the daemon goes on when it
    answers again."""


class UnknownSandbox(StoreError, KeyError):
    """No sandbox has this id."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class SandboxExists(StoreError, ValueError):
    """A sandbox with this id is already recorded."""


class IllegalTransition(StoreError, ValueError):
    """The state machine does not allow this move."""


def check_transition(sandbox_id: str, from_state: SandboxState, to_state: SandboxState) -> None:
    """Raise `IllegalTransition` unless `from_state -> to_state` is in the table."""
    allowed = ALLOWED_TRANSITIONS[from_state]
    if to_state not in allowed:
        names = ", ".join(sorted(allowed)) if allowed else "nothing, it is final"
        raise IllegalTransition(
            f"Sandbox {sandbox_id} cannot go from {from_state} to {to_state}; "
            f"from {from_state} it can go to: {names}."
        )


# --- column types ---------------------------------------------------------------------


class UTCDateTime(TypeDecorator[datetime]):
    """A timezone-aware UTC datetime on every backend.

    PostgreSQL keeps `timestamptz`; SQLite has no time zones, so the value is stored
    as naive UTC and made aware again on the way out. Naive input is refused rather
    than guessed.
    """

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError(f"naive datetime {value.isoformat()} given; pass an aware one")
        value = value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value.astimezone(UTC)


def _state_check(column: str, *, nullable: bool = False) -> CheckConstraint:
    values = ", ".join(f"'{s.value}'" for s in SandboxState)
    clause = f"{column} IN ({values})"
    if nullable:
        clause = f"{column} IS NULL OR {clause}"
    return CheckConstraint(clause, name=f"ck_{column}_valid")


# --- tables -----------------------------------------------------------------------


class Base(DeclarativeBase):
    type_annotation_map = {datetime: UTCDateTime(), dict[str, Any]: JSON()}  # noqa: RUF012


class Sandbox(Base):
    __tablename__ = "sandboxes"
    __table_args__ = (
        _state_check("state"),
        Index("ix_sandboxes_daemon_state", "daemon_id", "state"),
    )

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    daemon_id: Mapped[str] = mapped_column(String(128))
    backend: Mapped[str] = mapped_column(String(16))
    container_id: Mapped[str | None] = mapped_column(String(128))
    image: Mapped[str] = mapped_column(String(512))
    spec_json: Mapped[dict[str, Any]]
    state: Mapped[str] = mapped_column(String(16))
    state_reason: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime]
    updated_at: Mapped[datetime]
    last_used_at: Mapped[datetime]
    expires_at: Mapped[datetime | None] = mapped_column(index=True)
    idle_timeout_sec: Mapped[float | None] = mapped_column(Float)
    pool_key: Mapped[str | None] = mapped_column(String(256), index=True)
    labels: Mapped[dict[str, Any]]


class Pool(Base):
    __tablename__ = "pools"

    daemon_id: Mapped[str] = mapped_column(String(128), primary_key=True)
    name: Mapped[str] = mapped_column(String(128), primary_key=True)
    spec_json: Mapped[dict[str, Any]]
    min_idle: Mapped[int] = mapped_column(Integer)
    max_total: Mapped[int] = mapped_column(Integer)
    updated_at: Mapped[datetime]


class SandboxTransition(Base):
    __tablename__ = "sandbox_transitions"
    __table_args__ = (_state_check("to_state"), _state_check("from_state", nullable=True))

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    sandbox_id: Mapped[str] = mapped_column(
        ForeignKey("sandboxes.id", ondelete="CASCADE"), index=True
    )
    from_state: Mapped[str | None] = mapped_column(String(16))
    to_state: Mapped[str] = mapped_column(String(16))
    reason: Mapped[str | None] = mapped_column(Text)
    at: Mapped[datetime]


class ExecRecord(Base):
    __tablename__ = "exec_records"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    sandbox_id: Mapped[str] = mapped_column(
        ForeignKey("sandboxes.id", ondelete="CASCADE"), index=True
    )
    command: Mapped[str] = mapped_column(Text)
    exit_code: Mapped[int | None] = mapped_column(Integer)
    timed_out: Mapped[bool] = mapped_column(Boolean)
    started_at: Mapped[datetime]
    duration_sec: Mapped[float] = mapped_column(Float)
    stdout_bytes: Mapped[int] = mapped_column(Integer)
    stderr_bytes: Mapped[int] = mapped_column(Integer)
    stdout_head: Mapped[str] = mapped_column(Text)
    stderr_head: Mapped[str] = mapped_column(Text)
    session_id: Mapped[str | None] = mapped_column(String(128))


# --- what the store hands out ----------------------------------------------------------


class _Record(BaseModel):
    model_config = ConfigDict(from_attributes=True, frozen=True, extra="forbid")


class SandboxRecord(_Record):
    """One sandbox as recorded: a snapshot, detached from the database."""

    id: str
    daemon_id: str
    backend: str
    container_id: str | None
    image: str
    spec_json: dict[str, Any]
    state: SandboxState
    state_reason: str | None
    created_at: datetime
    updated_at: datetime
    last_used_at: datetime
    expires_at: datetime | None
    idle_timeout_sec: float | None
    pool_key: str | None
    labels: dict[str, str]


class PoolRecord(_Record):
    """A warm pool's settings as recorded."""

    daemon_id: str
    name: str
    spec_json: dict[str, Any]
    min_idle: int
    max_total: int
    updated_at: datetime


class TransitionRecord(_Record):
    """One step of a sandbox's state history (`from_state` is None for the first)."""

    id: int
    sandbox_id: str
    from_state: SandboxState | None
    to_state: SandboxState
    reason: str | None
    at: datetime


class ExecRecordOut(_Record):
    """One command run in a sandbox: true output sizes, and only the heads of the outputs."""

    id: int
    sandbox_id: str
    command: str
    exit_code: int | None
    timed_out: bool
    started_at: datetime
    duration_sec: float
    stdout_bytes: int
    stderr_bytes: int
    stdout_head: str
    stderr_head: str
    session_id: str | None
