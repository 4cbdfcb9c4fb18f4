"""`StateStore`: the daemon's durable memory of sandboxes, their history and their execs.

One Engine and one sessionmaker per store; every method is one short transaction in
its own session, so worker threads can share a store. Methods return frozen pydantic
records, never ORM objects.

State changes are compare-and-set: `UPDATE sandboxes SET state = :to WHERE id = :id
AND state = :from`. Of two racing moves from the same state only one can match; the
loser re-reads the state the winner left and is judged again against the transition
table. On PostgreSQL the row lock taken by the first UPDATE makes the second wait and
then re-check its WHERE clause; on SQLite the database write lock (with a busy
timeout) serialises writers the same way.
"""

from __future__ import annotations

import builtins
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from datetime import datetime, timedelta
from pathlib import Path
from types import TracebackType
from typing import Any, Self, cast

from sqlalchemy import CursorResult, func, or_, select, update
from sqlalchemy.exc import IntegrityError, OperationalError
from sqlalchemy.orm import Session, sessionmaker

from rock.store.claim import ClaimMixin
from rock.store.engine import DB_FILENAME, default_home, first_line, normalise_url, open_engine
from rock.store.models import (
    LIVE_STATES,
    MAX_COMMAND_CHARS,
    REAPABLE_STATES,
    Base,
    ExecRecord,
    ExecRecordOut,
    Pool,
    PoolRecord,
    Sandbox,
    SandboxExists,
    SandboxRecord,
    SandboxState,
    SandboxTransition,
    StoreError,
    StoreUnavailable,
    TransitionRecord,
    check_transition,
)
from rock.store.rows import (
    aware,
    clean_text,
    current_state,
    get_record,
    head_of,
    is_due,
    state_of,
    transition_row,
    unknown,
    utc_now,
)


class StateStore(ClaimMixin):
    """Sandboxes, their state transitions and their exec records, in SQLite or PostgreSQL.

    `url=None` opens (creating it if needed) the SQLite file `<home>/rock.db`, home
    being `$ROCK_HOME` or `~/.rock` unless given. A `postgresql://` URL is used with
    psycopg 3. Tables are created on open. Use as a context manager or call `close()`.
    """

    def __init__(
        self,
        url: str | None = None,
        *,
        home: Path | None = None,
        max_output_chars: int = 8192,
    ) -> None:
        if max_output_chars < 0:
            raise ValueError(f"max_output_chars must be 0 or more, not {max_output_chars}.")
        self.max_output_chars = max_output_chars
        if url is None:
            home = home if home is not None else default_home()
            home.mkdir(mode=0o700, parents=True, exist_ok=True)
            url = f"sqlite:///{home / DB_FILENAME}"
        self._engine = open_engine(normalise_url(url))
        self._sessions = sessionmaker(self._engine, expire_on_commit=False)
        self._closed = False
        self._claim: Any = None
        """What holds this process's daemon id (:meth:`claim`), until close."""
        self._claimed: str | None = None
        """The daemon id this process claimed (kept through a database restart)."""
        Base.metadata.create_all(self._engine)

    # --- lifecycle -------------------------------------------------------------------

    @property
    def url(self) -> str:
        """The database URL, password hidden."""
        return self._engine.url.render_as_string(hide_password=True)

    @property
    def dialect(self) -> str:
        """`sqlite` or `postgresql`."""
        return self._engine.dialect.name

    def close(self) -> None:
        """Release every pooled connection; the store cannot be used afterwards."""
        if not self._closed:
            self._closed = True
            if self._claim is not None:
                self._claim.close()
            self._engine.dispose()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    @contextmanager
    def _transaction(self) -> Iterator[Session]:
        if self._closed:
            raise StoreError(f"The state store at {self.url} is closed; open a new StateStore.")
        try:
            with self._sessions() as session, session.begin():
                yield session
        except OperationalError as exc:
            raise StoreUnavailable(
                f"the state store at {self.url} cannot be reached ({first_line(exc.orig)}); "
                "the daemon goes on when it answers again."
            ) from None

    # --- sandboxes -------------------------------------------------------------------

    def add_sandbox(
        self,
        sandbox_id: str,
        *,
        daemon_id: str,
        backend: str,
        image: str,
        spec: Mapping[str, Any],
        labels: Mapping[str, str],
        pool_key: str | None = None,
        ttl_sec: float | None = None,
        idle_timeout_sec: float | None = None,
        state: SandboxState | str = SandboxState.PENDING,
        reason: str | None = None,
    ) -> SandboxRecord:
        """Record a new sandbox and its first transition (None -> `state`)."""
        initial = state_of(state)
        now = utc_now()
        row = Sandbox(
            id=sandbox_id,
            daemon_id=daemon_id,
            backend=backend,
            container_id=None,
            image=image,
            spec_json=dict(spec),
            state=initial.value,
            state_reason=reason,
            created_at=now,
            updated_at=now,
            last_used_at=now,
            expires_at=now + timedelta(seconds=ttl_sec) if ttl_sec is not None else None,
            idle_timeout_sec=idle_timeout_sec,
            pool_key=pool_key,
            labels=dict(labels),
        )
        exists = SandboxExists(
            f"A sandbox with id {sandbox_id!r} is already recorded; pick a new id."
        )
        try:
            with self._transaction() as session:
                if session.get(Sandbox, sandbox_id) is not None:
                    raise exists
                session.add(row)
                session.flush()
                session.add(transition_row(sandbox_id, None, initial, reason, now))
                return SandboxRecord.model_validate(row)
        except IntegrityError:  # lost a race with another add of the same id
            raise exists from None

    def transition(
        self,
        sandbox_id: str,
        to_state: SandboxState | str,
        reason: str | None = None,
        *,
        container_id: str | None = None,
    ) -> SandboxRecord:
        """Move a sandbox to `to_state`, recording why; `container_id` is stored if given.

        Raises `UnknownSandbox` for an unknown id and `IllegalTransition` when the
        table does not allow the move from the state the sandbox is in.
        """
        target = state_of(to_state)
        with self._transaction() as session:
            current = current_state(session, sandbox_id)
            while True:
                check_transition(sandbox_id, current, target)
                now = utc_now()
                values: dict[str, Any] = {
                    "state": target.value,
                    "state_reason": reason,
                    "updated_at": now,
                }
                if container_id is not None:
                    values["container_id"] = container_id
                swap = (
                    update(Sandbox)
                    .where(Sandbox.id == sandbox_id, Sandbox.state == current.value)
                    .values(**values)
                    .execution_options(synchronize_session=False)
                )
                if cast(CursorResult[Any], session.execute(swap)).rowcount == 1:
                    break
                # Another writer moved it first: judge the move again from its state.
                current = current_state(session, sandbox_id)
            session.add(transition_row(sandbox_id, current, target, reason, now))
            return get_record(session, sandbox_id)

    def lease(
        self,
        sandbox_id: str,
        *,
        spec: Mapping[str, Any],
        labels: Mapping[str, str],
        ttl_sec: float | None = None,
        idle_timeout_sec: float | None = None,
        reason: str | None = None,
    ) -> SandboxRecord:
        """Hand a ready sandbox to a client: ready -> busy with its new spec, labels and timers.

        Compare-and-set like `transition`: of two clients leasing the same sandbox only
        one wins; the other gets `IllegalTransition` (busy -> busy is not a move).
        """
        now = utc_now()
        values: dict[str, Any] = {
            "state": SandboxState.BUSY.value,
            "state_reason": reason,
            "updated_at": now,
            "last_used_at": now,
            "spec_json": dict(spec),
            "labels": dict(labels),
            "expires_at": now + timedelta(seconds=ttl_sec) if ttl_sec is not None else None,
            "idle_timeout_sec": idle_timeout_sec,
        }
        with self._transaction() as session:
            swap = (
                update(Sandbox)
                .where(Sandbox.id == sandbox_id, Sandbox.state == SandboxState.READY.value)
                .values(**values)
                .execution_options(synchronize_session=False)
            )
            if cast(CursorResult[Any], session.execute(swap)).rowcount != 1:
                check_transition(sandbox_id, current_state(session, sandbox_id), SandboxState.BUSY)
                raise StoreError(f"Sandbox {sandbox_id} could not be leased; try another.")
            session.add(
                transition_row(sandbox_id, SandboxState.READY, SandboxState.BUSY, reason, now)
            )
            return get_record(session, sandbox_id)

    def set_expiry(self, sandbox_id: str, ttl_sec: float | None) -> SandboxRecord:
        """The sandbox expires ``ttl_sec`` from now (None: never)."""
        expires = utc_now() + timedelta(seconds=ttl_sec) if ttl_sec is not None else None
        with self._transaction() as session:
            stmt = (
                update(Sandbox)
                .where(Sandbox.id == sandbox_id)
                .values(expires_at=expires)
                .execution_options(synchronize_session=False)
            )
            if cast(CursorResult[Any], session.execute(stmt)).rowcount != 1:
                raise unknown(sandbox_id)
            return get_record(session, sandbox_id)

    def touch(self, sandbox_id: str) -> None:
        """Mark the sandbox used now (the idle timeout counts from here)."""
        with self._transaction() as session:
            stmt = (
                update(Sandbox)
                .where(Sandbox.id == sandbox_id)
                .values(last_used_at=utc_now())
                .execution_options(synchronize_session=False)
            )
            if cast(CursorResult[Any], session.execute(stmt)).rowcount != 1:
                raise unknown(sandbox_id)

    def get(self, sandbox_id: str) -> SandboxRecord:
        """The sandbox with this id; `UnknownSandbox` if there is none."""
        with self._transaction() as session:
            return get_record(session, sandbox_id)

    def list(
        self,
        *,
        states: Iterable[SandboxState | str] | None = None,
        daemon_id: str | None = None,
        pool_key: str | None = None,
        label: Mapping[str, str] | None = None,
    ) -> builtins.list[SandboxRecord]:
        """Sandboxes matching every filter given, oldest first.

        `label` matches sandboxes whose labels contain all of its key/value pairs.
        """
        stmt = select(Sandbox).order_by(Sandbox.created_at, Sandbox.id)
        if states is not None:
            stmt = stmt.where(Sandbox.state.in_([state_of(s).value for s in states]))
        if daemon_id is not None:
            stmt = stmt.where(Sandbox.daemon_id == daemon_id)
        if pool_key is not None:
            stmt = stmt.where(Sandbox.pool_key == pool_key)
        for key, value in (label or {}).items():
            stmt = stmt.where(Sandbox.labels[key].as_string() == value)
        with self._transaction() as session:
            return [SandboxRecord.model_validate(row) for row in session.scalars(stmt)]

    def live(self, daemon_id: str) -> builtins.list[SandboxRecord]:
        """This daemon's sandboxes that are not deleted (what reconciliation checks)."""
        return self.list(states=sorted(LIVE_STATES), daemon_id=daemon_id)

    def expired(
        self, now: datetime | None = None, *, daemon_id: str | None = None
    ) -> builtins.list[SandboxRecord]:
        """Ready, busy or stopped sandboxes due for reaping at `now` (default: now).

        Due means past `expires_at` (the TTL), or unused for longer than
        `idle_timeout_sec` since `last_used_at` (commands and file operations count as
        use, see `record_exec` and `touch`).
        """
        now = utc_now() if now is None else aware(now, "now")
        stmt = (
            select(Sandbox)
            .where(Sandbox.state.in_([s.value for s in REAPABLE_STATES]))
            .where(or_(Sandbox.expires_at <= now, Sandbox.idle_timeout_sec.is_not(None)))
            .order_by(Sandbox.created_at, Sandbox.id)
        )
        if daemon_id is not None:
            stmt = stmt.where(Sandbox.daemon_id == daemon_id)
        with self._transaction() as session:
            rows = [SandboxRecord.model_validate(row) for row in session.scalars(stmt)]
        return [row for row in rows if is_due(row, now)]

    def counts_by_state(self, daemon_id: str | None = None) -> dict[str, int]:
        """How many sandboxes are in each state (every state present, zeros included)."""
        stmt = select(Sandbox.state, func.count()).group_by(Sandbox.state)
        if daemon_id is not None:
            stmt = stmt.where(Sandbox.daemon_id == daemon_id)
        counts = {state.value: 0 for state in SandboxState}
        with self._transaction() as session:
            for state, count in session.execute(stmt):
                counts[state] = count
        return counts

    def history(self, sandbox_id: str) -> builtins.list[TransitionRecord]:
        """Every state change of the sandbox, in the order they happened."""
        stmt = (
            select(SandboxTransition)
            .where(SandboxTransition.sandbox_id == sandbox_id)
            .order_by(SandboxTransition.id)
        )
        with self._transaction() as session:
            current_state(session, sandbox_id)  # unknown id -> UnknownSandbox
            return [TransitionRecord.model_validate(row) for row in session.scalars(stmt)]

    # --- exec records ------------------------------------------------------------------

    def record_exec(
        self,
        sandbox_id: str,
        *,
        command: str,
        exit_code: int | None,
        timed_out: bool,
        started_at: datetime,
        duration_sec: float,
        stdout: bytes,
        stderr: bytes,
        session_id: str | None = None,
    ) -> ExecRecordOut:
        """Record one command: its full output sizes and the first `max_output_chars`
        characters of each output, decoded as UTF-8 with invalid bytes replaced."""
        row = ExecRecord(
            sandbox_id=sandbox_id,
            command=clean_text(command[:MAX_COMMAND_CHARS]),
            exit_code=exit_code,
            timed_out=timed_out,
            started_at=aware(started_at, "started_at"),
            duration_sec=duration_sec,
            stdout_bytes=len(stdout),
            stderr_bytes=len(stderr),
            stdout_head=head_of(stdout, self.max_output_chars),
            stderr_head=head_of(stderr, self.max_output_chars),
            session_id=session_id,
        )
        with self._transaction() as session:
            used = (
                update(Sandbox)
                .where(Sandbox.id == sandbox_id)
                .values(last_used_at=utc_now())
                .execution_options(synchronize_session=False)
            )
            if cast(CursorResult[Any], session.execute(used)).rowcount != 1:
                raise unknown(sandbox_id)
            session.add(row)
            session.flush()
            return ExecRecordOut.model_validate(row)

    def execs(self, sandbox_id: str, limit: int = 100) -> builtins.list[ExecRecordOut]:
        """The sandbox's most recent exec records, newest first."""
        stmt = (
            select(ExecRecord)
            .where(ExecRecord.sandbox_id == sandbox_id)
            .order_by(ExecRecord.id.desc())
            .limit(limit)
        )
        with self._transaction() as session:
            current_state(session, sandbox_id)  # unknown id -> UnknownSandbox
            return [ExecRecordOut.model_validate(row) for row in session.scalars(stmt)]

    # --- pools -------------------------------------------------------------------------

    def put_pool(
        self,
        daemon_id: str,
        name: str,
        *,
        spec: Mapping[str, Any],
        min_idle: int,
        max_total: int,
    ) -> PoolRecord:
        """Create or replace a warm pool's settings."""
        if not 0 <= min_idle <= max_total:
            raise StoreError(
                f"Pool {name}: min_idle ({min_idle}) must be between 0 and max_total ({max_total})."
            )
        with self._transaction() as session:
            row = session.get(Pool, (daemon_id, name))
            if row is None:
                row = Pool(daemon_id=daemon_id, name=name)
                session.add(row)
            row.spec_json = dict(spec)
            row.min_idle = min_idle
            row.max_total = max_total
            row.updated_at = utc_now()
            session.flush()
            return PoolRecord.model_validate(row)

    def pools(self, daemon_id: str) -> builtins.list[PoolRecord]:
        """This daemon's pools, by name."""
        stmt = select(Pool).where(Pool.daemon_id == daemon_id).order_by(Pool.name)
        with self._transaction() as session:
            return [PoolRecord.model_validate(row) for row in session.scalars(stmt)]

    def delete_pool(self, daemon_id: str, name: str) -> bool:
        """Forget a pool; True if it existed."""
        with self._transaction() as session:
            row = session.get(Pool, (daemon_id, name))
            if row is None:
                return False
            session.delete(row)
            return True
