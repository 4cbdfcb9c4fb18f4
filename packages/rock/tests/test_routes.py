"""The daemon's routes and the client's calls come from one description (rock.api.Routes):
every route described is served with its method, every route of the daemon's own API is
described, and every call the client makes is one of them."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

from rock.api import Api, Call, Routes
from rock.backends.local import LocalBackend
from rock.daemon.app import create_app
from rock.daemon.manager import SandboxManager
from rock.models import ExecRequest
from rock.store import StateStore


def _served(tmp_path: Path) -> set[tuple[str, str]]:
    """(method, path) of every route the daemon serves, as its OpenAPI description lists
    them (the E2B routes are left out of it)."""
    store = StateStore(home=tmp_path / "home")
    manager = SandboxManager(LocalBackend(tmp_path / "root"), store)
    app = create_app(manager, token="t")  # built, not started: nothing runs
    paths = app.openapi()["paths"]
    store.close()
    return {(method.upper(), path) for path, methods in paths.items() for method in methods}


def test_every_route_described_is_served_and_every_own_route_is_described(
    tmp_path: Path,
) -> None:
    described = {(r.method, r.path) for r in Routes.every()}
    served = _served(tmp_path)
    assert described <= served
    own = {
        (method, path)
        for method, path in served
        if (path.startswith("/v1/") or path in ("/health", "/metrics")) and "/ports/" not in path
    }
    assert own == described


def test_every_call_the_client_makes_is_a_described_route() -> None:
    templates = [
        (r.method, re.compile(re.sub(r"\{\w+\}", "[^/]+", r.path) + "$")) for r in Routes.every()
    ]
    made: list[Call[object]] = []
    for name, function in inspect.getmembers(Api, inspect.isfunction):
        parameters = inspect.signature(function).parameters
        arguments = {p: _example(p, name) for p in parameters if p != "self"}
        made.append(function(**arguments))
    assert len(made) == len(Routes.every())
    for call in made:
        assert any(m == call.method and t.match(call.path) for m, t in templates), call.path


def _example(parameter: str, call: str) -> object:
    if parameter == "tag" and call == "snapshot":
        return "v1"
    return {
        "spec": None, "pool": None, "use_pools": True, "fields": {}, "state": None,
        "labels": None, "deleted": False, "limit": 5, "min_idle": 0, "max_total": 1,
        "context": b"", "dockerfile": "Dockerfile", "data": b"", "mode": 0o644, "count": 1,
        "on": True, "timeout": 1.0, "command": "true", "tag": None,
        "request": ExecRequest(command="true"),
    }.get(parameter, "x")  # fmt: skip
