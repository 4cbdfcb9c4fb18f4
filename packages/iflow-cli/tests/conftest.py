from __future__ import annotations

import os
import secrets
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # helper modules such as openai_server

from iflow.workspace import LocalWorkspace, Workspace

IMAGE = "rock/base:bookworm"


@pytest.fixture(scope="module")
def docker_client() -> Iterator[Any]:
    """The real engine, once per test module. A missing engine fails the test unless
    ROCK_SKIP_DOCKER=1 says to skip, as in rock's own tests."""
    from rock.engine import connect
    from rock.errors import EngineUnavailable

    try:
        client = connect()
    except EngineUnavailable as exc:
        if os.environ.get("ROCK_SKIP_DOCKER") == "1":
            pytest.skip(f"ROCK_SKIP_DOCKER=1 and {exc}")
        pytest.fail(str(exc))
    yield client
    client.close()


@pytest.fixture(scope="module")
def docker_sandbox(docker_client: Any) -> Iterator[Any]:
    """One real docker sandbox per test module."""
    from rock.backends.docker import DockerBackend
    from rock.models import SandboxSpec

    backend = DockerBackend(docker_client, daemon_id="pytest-iflow")
    sandbox = backend.create(SandboxSpec(image=IMAGE, memory_mb=512, pids_limit=256))
    try:
        yield sandbox
    finally:
        sandbox.delete()


@pytest.fixture(params=["local", pytest.param("docker", marks=pytest.mark.docker)])
def workspace(request: pytest.FixtureRequest, tmp_path: Path) -> Workspace:
    """The same tests on both workspaces: a LocalWorkspace in tmp_path, and a
    SandboxWorkspace in a fresh directory of the module's docker sandbox."""
    if request.param == "local":
        return LocalWorkspace(tmp_path)
    from iflow.workspace.sandbox import SandboxWorkspace

    sandbox = request.getfixturevalue("docker_sandbox")
    root = f"/work/t-{secrets.token_hex(4)}"
    sandbox.exec(["mkdir", "-p", root])
    return SandboxWorkspace(sandbox, root)


@pytest.fixture
def home(tmp_path: Path) -> Path:
    """A home directory of its own (for ~/.iflow)."""
    path = tmp_path / "home"
    path.mkdir()
    return path


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A git repository root (a directory with .git) outside that home."""
    path = tmp_path / "work" / "repo"
    (path / ".git").mkdir(parents=True)
    return path
