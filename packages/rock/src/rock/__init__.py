"""rock: the Docker sandbox manager of the Agentic Learning Ecosystem."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

if TYPE_CHECKING:
    from rock.client import AsyncClient, Client
    from rock.models import ExecResult, SandboxSpec, SessionResult

_LAZY = {
    "Client": "rock.client",
    "AsyncClient": "rock.client",
    "SandboxSpec": "rock.models",
    "ExecResult": "rock.models",
    "SessionResult": "rock.models",
}


def __getattr__(name: str) -> Any:  # imported on first use: `import rock` stays light
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'rock' has no attribute {name!r}")


__all__ = ["AsyncClient", "Client", "ExecResult", "SandboxSpec", "SessionResult", "__version__"]
