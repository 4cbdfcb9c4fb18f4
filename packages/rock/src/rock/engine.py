"""The Docker engine: connect, and report on it truthfully."""

from __future__ import annotations

import os
from typing import Any

import docker
from docker.errors import DockerException
from pydantic import BaseModel

from rock.errors import EngineUnavailable

START_HINT = "start one with scripts/ensure-docker.sh (make test does this) or point DOCKER_HOST at a running engine"


def engine_host() -> str:
    """The engine the environment names (DOCKER_HOST), as the docker command line reads it."""
    return os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")


MAX_CONNECTIONS = 256
"""Connections to the engine kept for reuse (a running exec holds one of its own)."""


def connect(timeout: float = 30) -> docker.DockerClient:
    """A client for the engine named by the environment (DOCKER_HOST), checked with a ping."""
    try:
        client = docker.from_env(timeout=int(timeout), max_pool_size=MAX_CONNECTIONS)
        _one_pool(client)
        client.ping()
    except DockerException as exc:
        raise EngineUnavailable(
            f"No Docker engine answers at {engine_host()} ({_short(exc)}); {START_HINT}."
        ) from None
    return client


def _one_pool(client: docker.DockerClient) -> None:
    """Share one connection pool for the engine's unix socket.

    docker-py keys its pools by full URL (every exec id makes a new one) and keeps
    only 25, closing the least recently used even while another thread is using it;
    under concurrent execs that fails requests ('NoneType' object has no attribute
    'qsize'). The socket is one host, so one pool is right.
    """
    adapter = getattr(client.api, "_custom_adapter", None)
    if adapter is None or not hasattr(adapter, "socket_path"):
        return  # TCP/TLS/ssh transports pool per host already
    original = adapter.get_connection

    def get_connection(url: str, proxies: Any = None) -> Any:
        return original("http+docker://localhost", proxies)

    adapter.get_connection = get_connection


def _short(exc: Exception) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return text if len(text) < 160 else text[:157] + "..."


class EngineReport(BaseModel):
    """What `rock doctor` found about the engine."""

    host: str
    reachable: bool
    server_version: str | None = None
    api_version: str | None = None
    os: str | None = None
    storage_driver: str | None = None
    cgroup_version: str | None = None
    error: str | None = None


def probe(timeout: float = 5) -> tuple[EngineReport, docker.DockerClient | None]:
    """Ask the engine for its version; never raises."""
    try:
        client = connect(timeout)
        version: dict[str, Any] = client.version()
        info: dict[str, Any] = client.info()
    except (EngineUnavailable, DockerException) as exc:
        return EngineReport(host=engine_host(), reachable=False, error=str(exc)), None
    return (
        EngineReport(
            host=engine_host(),
            reachable=True,
            server_version=version.get("Version"),
            api_version=version.get("ApiVersion"),
            os=info.get("OperatingSystem"),
            storage_driver=info.get("Driver"),
            cgroup_version=str(info.get("CgroupVersion")) if info.get("CgroupVersion") else None,
        ),
        client,
    )
