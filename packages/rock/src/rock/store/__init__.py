"""The daemon's state store: sandboxes, their state history and exec records (SQLAlchemy 2)."""

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
from rock.store.store import StateStore, default_home, normalise_url

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
