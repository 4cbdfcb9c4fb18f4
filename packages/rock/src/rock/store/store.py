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
import contextlib
import fcntl
import os
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import TracebackType
from typing import Any, Self, cast

from sqlalchemy import (
    CursorResult,
    Engine,
    create_engine,
    event,
    func,
    or_,
    select,
    text,
    update,
)
from sqlalchemy.engine import make_url
from sqlalchemy.exc import IntegrityError, OperationalError
from sqlalchemy.orm import Session, sessionmaker

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
    UnknownSandbox,
    check_transition,
)

DB_FILENAME = "rock.db"
SQLITE_BUSY_TIMEOUT_SEC = 30.0


def default_home() -> Path:
    """The rock home directory: $ROCK_HOME, else ~/.rock."""
    return Path(os.environ.get("ROCK_HOME") or Path.home() / ".rock")


def normalise_url(url: str) -> str:
    """Map plain PostgreSQL URLs onto the psycopg 3 driver; leave other URLs as given."""
    for prefix in ("postgresql://", "postgres://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix) :]
    return url


def _now() -> datetime:
    return datetime.now(UTC)


def _aware(value: datetime, what: str) -> datetime:
    if value.tzinfo is None:
        raise StoreError(
            f"{what} is a naive datetime ({value.isoformat()}); pass a timezone-aware one."
        )
    return value.astimezone(UTC)


def _text(value: str) -> str:
    """PostgreSQL text cannot hold NUL; store U+FFFD instead, the same on every backend."""
    return value.replace("\x00", "\ufffd")


def _head(data: bytes, limit: int) -> str:
    """The first `limit` characters of `data` decoded as UTF-8 (invalid bytes replaced).

    Only the first 4*limit bytes are decoded: a character takes at most 4 bytes.
    """
    return _text(data[: limit * 4].decode("utf-8", errors="replace")[:limit])


def _unknown(sandbox_id: str) -> UnknownSandbox:
    return UnknownSandbox(f"No sandbox with id {sandbox_id!r} is recorded in the state store.")


class StateStore:
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
        self._engine = _create_engine(normalise_url(url))
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

    def claim(self, daemon_id: str) -> None:
        """Take ``daemon_id`` on this database for this process, until :meth:`close` (or the
        process ends): daemons sharing a database must each have their own, or one would
        adopt, reap and delete the other's sandboxes. A PostgreSQL session-level advisory lock,
        or, for SQLite, an exclusive lock on a file beside the database."""
        taken = False
        if self.dialect == "postgresql":
            connection = self._engine.connect()
            key = text("SELECT pg_try_advisory_lock(hashtextextended(:id, 0))")
            taken = bool(connection.execute(key, {"id": f"rock-daemon:{daemon_id}"}).scalar())
            if taken:
                self._claim, self._claimed = connection, daemon_id
            else:
                connection.close()
        else:
            database = Path(self._engine.url.database or "rock.db")
            handle = database.with_name(f"{database.name}.daemon-{daemon_id}.lock").open("a+")
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                self._claim, taken = handle, True
            except OSError:
                handle.close()
        if not taken:
            raise StoreError(
                f"another rock daemon uses the daemon id {daemon_id!r} on the database {self.url}; "
                "stop it, or give this one its own --daemon-id"
            )

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
                f"the state store at {self.url} cannot be reached ({_first_line(exc.orig)}); "
                "the daemon goes on when it answers again."
            ) from None

    def keep_claim(self, daemon_id: str) -> bool:
        """Hold the daemon id again when the database lost it (a PostgreSQL restart ends the
        session that held the lock); False when another daemon took it meanwhile."""
        if self.dialect != "postgresql" or self._claimed is None:
            return True
        if self._claim is not None:
            try:
                self._claim.execute(text("SELECT 1"))
                return True
            except OperationalError:
                with contextlib.suppress(Exception):
                    self._claim.close()
                self._claim = None
        try:
            self.claim(daemon_id)
        except StoreError:
            return False
        except OperationalError:
            return True  # still down: the next pass tries again
        return True

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
        initial = _state(state)
        now = _now()
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
                session.add(_transition_row(sandbox_id, None, initial, reason, now))
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
        target = _state(to_state)
        with self._transaction() as session:
            current = _current_state(session, sandbox_id)
            while True:
                check_transition(sandbox_id, current, target)
                now = _now()
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
                current = _current_state(session, sandbox_id)
            session.add(_transition_row(sandbox_id, current, target, reason, now))
            return _get(session, sandbox_id)

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
        now = _now()
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
                check_transition(sandbox_id, _current_state(session, sandbox_id), SandboxState.BUSY)
                raise StoreError(f"Sandbox {sandbox_id} could not be leased; try another.")
            session.add(
                _transition_row(sandbox_id, SandboxState.READY, SandboxState.BUSY, reason, now)
            )
            return _get(session, sandbox_id)

    def set_expiry(self, sandbox_id: str, ttl_sec: float | None) -> SandboxRecord:
        """The sandbox expires ``ttl_sec`` from now (None: never)."""
        expires = _now() + timedelta(seconds=ttl_sec) if ttl_sec is not None else None
        with self._transaction() as session:
            stmt = (
                update(Sandbox)
                .where(Sandbox.id == sandbox_id)
                .values(expires_at=expires)
                .execution_options(synchronize_session=False)
            )
            if cast(CursorResult[Any], session.execute(stmt)).rowcount != 1:
                raise _unknown(sandbox_id)
            return _get(session, sandbox_id)

    def touch(self, sandbox_id: str) -> None:
        """Mark the sandbox used now (the idle timeout counts from here)."""
        with self._transaction() as session:
            stmt = (
                update(Sandbox)
                .where(Sandbox.id == sandbox_id)
                .values(last_used_at=_now())
                .execution_options(synchronize_session=False)
            )
            if cast(CursorResult[Any], session.execute(stmt)).rowcount != 1:
                raise _unknown(sandbox_id)

    def get(self, sandbox_id: str) -> SandboxRecord:
        """The sandbox with this id; `UnknownSandbox` if there is none."""
        with self._transaction() as session:
            return _get(session, sandbox_id)

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
            stmt = stmt.where(Sandbox.state.in_([_state(s).value for s in states]))
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
        now = _now() if now is None else _aware(now, "now")
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
        return [row for row in rows if _is_due(row, now)]

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
            _current_state(session, sandbox_id)  # unknown id -> UnknownSandbox
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
            command=_text(command[:MAX_COMMAND_CHARS]),
            exit_code=exit_code,
            timed_out=timed_out,
            started_at=_aware(started_at, "started_at"),
            duration_sec=duration_sec,
            stdout_bytes=len(stdout),
            stderr_bytes=len(stderr),
            stdout_head=_head(stdout, self.max_output_chars),
            stderr_head=_head(stderr, self.max_output_chars),
            session_id=session_id,
        )
        with self._transaction() as session:
            used = (
                update(Sandbox)
                .where(Sandbox.id == sandbox_id)
                .values(last_used_at=_now())
                .execution_options(synchronize_session=False)
            )
            if cast(CursorResult[Any], session.execute(used)).rowcount != 1:
                raise _unknown(sandbox_id)
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
            _current_state(session, sandbox_id)  # unknown id -> UnknownSandbox
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
            row.updated_at = _now()
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


# --- helpers that run inside a transaction ---------------------------------------------


def _state(value: SandboxState | str) -> SandboxState:
    try:
        return SandboxState(value)
    except ValueError:
        names = ", ".join(s.value for s in SandboxState)
        raise StoreError(f"{value!r} is not a sandbox state; use one of: {names}.") from None


def _current_state(session: Session, sandbox_id: str) -> SandboxState:
    state = session.scalar(select(Sandbox.state).where(Sandbox.id == sandbox_id))
    if state is None:
        raise _unknown(sandbox_id)
    return SandboxState(state)


def _get(session: Session, sandbox_id: str) -> SandboxRecord:
    row = session.get(Sandbox, sandbox_id, populate_existing=True)
    if row is None:
        raise _unknown(sandbox_id)
    return SandboxRecord.model_validate(row)


def _transition_row(
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


def _is_due(row: SandboxRecord, now: datetime) -> bool:
    if row.expires_at is not None and row.expires_at <= now:
        return True
    if row.idle_timeout_sec is None:
        return False
    return row.last_used_at + timedelta(seconds=row.idle_timeout_sec) <= now


# --- engines -------------------------------------------------------------------------


def _create_engine(url: str) -> Engine:
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite":
        return create_engine(url, pool_size=8, max_overflow=24, pool_pre_ping=True)
    if parsed.database in (None, "", ":memory:"):
        raise StoreError(
            f"The state store needs a SQLite file, not an in-memory database ({url}); "
            "pass url=None and a home directory, or a sqlite:////path/to/file URL."
        )
    engine = create_engine(
        url,
        connect_args={"timeout": SQLITE_BUSY_TIMEOUT_SEC, "check_same_thread": False},
        pool_size=8,
        max_overflow=24,
    )
    event.listen(engine, "connect", _sqlite_pragmas)
    return engine


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    """WAL (readers never block the writer), foreign keys, and waiting for the write lock."""
    cursor = dbapi_connection.cursor()
    try:
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute(f"PRAGMA busy_timeout={int(SQLITE_BUSY_TIMEOUT_SEC * 1000)}")
    finally:
        cursor.close()


def _first_line(error: object) -> str:
    text_ = str(error).strip()
    return text_.splitlines()[0] if text_ else type(error).__name__
