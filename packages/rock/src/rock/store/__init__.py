"""The daemon's state store: sandboxes, their state history and exec records (SQLAlchemy 2)."""

from rock.store.engine import default_home, normalise_url
from rock.store.models import (
    ALLOWED_TRANSITIONS,
    LIVE_STATES,
    REAPABLE_STATES,
    ExecRecordOut,
    IllegalTransition,
    PoolRecord,
    SandboxExists,
    SandboxRecord,
    SandboxState,
    StoreError,
    StoreUnavailable,
    TransitionRecord,
    UnknownSandbox,
)
from rock.store.store import StateStore

__all__ = [
    "ALLOWED_TRANSITIONS",
    "LIVE_STATES",
    "REAPABLE_STATES",
    "ExecRecordOut",
    "IllegalTransition",
    "PoolRecord",
    "SandboxExists",
    "SandboxRecord",
    "SandboxState",
    "StateStore",
    "StoreError",
    "StoreUnavailable",
    "TransitionRecord",
    "UnknownSandbox",
    "default_home",
    "normalise_url",
]
