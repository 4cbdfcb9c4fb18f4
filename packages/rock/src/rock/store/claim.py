"""One daemon per daemon id on a database: the lock a `StateStore` takes for its process (a
PostgreSQL advisory lock, or a file lock beside an SQLite database) and takes again after a
database restart.

A mixin of `StateStore` (it uses the store's engine), kept in its own file so that each file
has one subject.
"""

from __future__ import annotations

import contextlib
import fcntl
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy import Engine, text
from sqlalchemy.exc import OperationalError

from rock.store.models import StoreError


class ClaimMixin:
    """`claim` a daemon id on the database, and `keep_claim` it."""

    _engine: Engine
    _claim: Any
    _claimed: str | None

    if TYPE_CHECKING:

        @property
        def url(self) -> str: ...
        @property
        def dialect(self) -> str: ...

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
