from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import NoReturn

import docker
import psycopg
import pytest
from psycopg import sql
from sqlalchemy.engine import make_url

from rock.engine import connect
from rock.errors import EngineUnavailable

sys.path.insert(0, str(Path(__file__).parent))  # helper modules such as rock_daemons

from rock_daemons import Running, start_daemon, stop_daemon

from rock.client import Client


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


# --- PostgreSQL (state store and daemon tests) ----------------------------------------

ENSURE_POSTGRES = Path(__file__).resolve().parents[3] / "scripts" / "ensure-postgres.sh"


def _postgres_unavailable(reason: str) -> NoReturn:
    if os.environ.get("ROCK_SKIP_POSTGRES") == "1":
        pytest.skip(f"ROCK_SKIP_POSTGRES=1 and {reason}")
    pytest.fail(reason, pytrace=False)


def _start_postgres() -> str:
    """Run scripts/ensure-postgres.sh; its last stdout line is the URL, its last stderr
    line the reason it failed."""
    try:
        proc = subprocess.run(
            ["bash", str(ENSURE_POSTGRES)], capture_output=True, text=True, timeout=900, check=False
        )
    except subprocess.TimeoutExpired:
        _postgres_unavailable(f"{ENSURE_POSTGRES} did not finish within 900 s.")
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        errors = proc.stderr.strip().splitlines()
        _postgres_unavailable(
            errors[-1] if errors else f"{ENSURE_POSTGRES} exited with {proc.returncode}."
        )
    return lines[-1]


@pytest.fixture(scope="session")
def pg_server_url() -> str:
    """A PostgreSQL server whose role may create databases: $ROCK_TEST_PG_URL, or the
    one scripts/ensure-postgres.sh starts. ROCK_SKIP_POSTGRES=1 alone skips at once."""
    url = os.environ.get("ROCK_TEST_PG_URL")
    if not url:
        if os.environ.get("ROCK_SKIP_POSTGRES") == "1":
            pytest.skip("ROCK_SKIP_POSTGRES=1: the PostgreSQL state-store tests are skipped")
        url = _start_postgres()
    refused = ""
    try:
        psycopg.connect(url, connect_timeout=10).close()
    except psycopg.Error as exc:
        refused = f"PostgreSQL at {make_url(url)!r} refused a connection: {exc}"
    if refused:
        _postgres_unavailable(refused)
    return url


@pytest.fixture
def pg_url(pg_server_url: str) -> Iterator[str]:
    """A fresh, empty database on the server, dropped after the test."""
    name = f"rock_test_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(pg_server_url, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    yield make_url(pg_server_url).set(database=name).render_as_string(hide_password=False)
    with psycopg.connect(pg_server_url, autocommit=True) as conn:
        conn.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )


@pytest.fixture(scope="module")
def daemon(
    tmp_path_factory: pytest.TempPathFactory, docker_client: docker.DockerClient
) -> Iterator[Running]:
    """A daemon in this process for the test module (loopback, a token, deleting its
    sandboxes when it stops); a module may define its own instead."""
    running = start_daemon(tmp_path_factory.mktemp("rock-home"), cleanup=True)
    yield running
    stop_daemon(running, docker_client)


@pytest.fixture(scope="module")
def client(daemon: Running) -> Iterator[Client]:
    """The module's daemon's client."""
    with daemon.client() as c:
        yield c
