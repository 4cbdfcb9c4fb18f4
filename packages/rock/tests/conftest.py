from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest

from rock.engine import connect
from rock.errors import EngineUnavailable

sys.path.insert(0, str(Path(__file__).parent))  # helper modules such as rock_daemons


@pytest.fixture(scope="session")
def docker_client() -> Iterator[docker.DockerClient]:
    """The real engine. `make test` starts one; a missing engine fails the test
    rather than skipping it, unless ROCK_SKIP_DOCKER=1 says so explicitly."""
    try:
        client = connect()
    except EngineUnavailable as exc:
        if os.environ.get("ROCK_SKIP_DOCKER") == "1":
            pytest.skip(f"ROCK_SKIP_DOCKER=1 and {exc}")
        pytest.fail(str(exc))
    yield client
    client.close()
