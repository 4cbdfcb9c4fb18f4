"""The store's rows as its transactions read and write them: a sandbox's record and current
state, a transition's row, whether a sandbox is due for reaping, and the values that go in
(times in UTC, text without NUL, output heads). :mod:`rock.store.store` calls them inside
its transactions.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from sqlalchemy import select
from sqlalchemy.orm import Session

from rock.store.models import (
    Sandbox,
    SandboxRecord,
    SandboxState,
    SandboxTransition,
    StoreError,
    UnknownSandbox,
)


def utc_now() -> datetime:
    return datetime.now(UTC)


def aware(value: datetime, what: str) -> datetime:
    if value.tzinfo is None:
        raise StoreError(
            f"{what} is a naive datetime ({value.isoformat()}); pass a timezone-aware one."
        )
    return value.astimezone(UTC)


def clean_text(value: str) -> str:
    """PostgreSQL text cannot hold NUL; store U+FFFD instead, the same on every backend."""
    return value.replace("\x00", "\ufffd")


def head_of(data: bytes, limit: int) -> str:
    """The first `limit` characters of `data` decoded as UTF-8 (invalid bytes replaced).

    Only the first 4*limit bytes are decoded: a character takes at most 4 bytes.
    """
    return clean_text(data[: limit * 4].decode("utf-8", errors="replace")[:limit])


def unknown(sandbox_id: str) -> UnknownSandbox:
    return UnknownSandbox(f"No sandbox with id {sandbox_id!r} is recorded in the state store.")


def state_of(value: SandboxState | str) -> SandboxState:
    try:
        return SandboxState(value)
    except ValueError:
        names = ", ".join(s.value for s in SandboxState)
        raise StoreError(f"{value!r} is not a sandbox state; use one of: {names}.") from None


def current_state(session: Session, sandbox_id: str) -> SandboxState:
    state = session.scalar(select(Sandbox.state).where(Sandbox.id == sandbox_id))
    if state is None:
        raise unknown(sandbox_id)
    return SandboxState(state)


def get_record(session: Session, sandbox_id: str) -> SandboxRecord:
    row = session.get(Sandbox, sandbox_id, populate_existing=True)
    if row is None:
        raise unknown(sandbox_id)
    return SandboxRecord.model_validate(row)


def transition_row(
    sandbox_id: str,
    from_state: SandboxState | None,
    to_state: SandboxState,
    reason: str | None,
    at: datetime,
) -> SandboxTransition:
    return SandboxTransition(
        sandbox_id=sandbox_id,
        from_state=from_state.value if from_state is not None else None,
        to_state=to_state.value,
        reason=reason,
        at=at,
    )


def is_due(row: SandboxRecord, now: datetime) -> bool:
    if row.expires_at is not None and row.expires_at <= now:
        return True
    if row.idle_timeout_sec is None:
        return False
    return row.last_used_at + timedelta(seconds=row.idle_timeout_sec) <= now
