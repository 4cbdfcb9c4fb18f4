"""Where the state store lives and how it is opened: the rock home, database URLs, and the
SQLAlchemy engine (pooled PostgreSQL through psycopg 3, or an SQLite file in WAL mode that
waits for its write lock).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import make_url

from rock.store.models import StoreError

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


def open_engine(url: str) -> Engine:
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


def first_line(error: object) -> str:
    text_ = str(error).strip()
    return text_.splitlines()[0] if text_ else type(error).__name__
