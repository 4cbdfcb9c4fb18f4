"""A compose task's services: what its docker-compose file starts beside the agent's container.

Harbor runs a task's ``environment/docker-compose.yaml`` with ``docker compose``: the agent
works in the ``main`` service, and the other services (a database, a proxy, an MCP server)
run beside it, each reachable by its service name. rock bench does the same without compose:
:mod:`rock.bench.compose` reads the file, and a :class:`ServiceGroup` gives each trial a
network of its own (internal, so without the internet, unless the task allows it), runs each
side service from the image the caller built or found for it (through the task image builder
and its base-image map, pulled when a registry is in reach),
starts the services in the order their ``depends_on`` gives, waits for the conditions the
services and ``main`` name (``service_started``, ``service_healthy`` by the service's own
healthcheck, ``service_completed_successfully``), and removes it all when the trial ends.
"""

from __future__ import annotations

import itertools
import secrets
import time
from typing import Any

import docker
from docker.errors import APIError, DockerException, NotFound

from rock.backends.base import ExecVerb, SandboxError
from rock.bench.compose import Compose, ComposeError, Service
from rock.models import ExecRequest, ExecResult

LABEL_TRIAL_SERVICE = "dev.ale.rock.bench.service"
LABEL_GROUP = "dev.ale.rock.bench.group"
"""Each side service's container, network and volume carries its group's key under this label."""
WAIT_SEC = 180.0
"""Longest wait for one service's condition (healthy, started, completed)."""


class ServiceGroup:
    """One trial's side services: its network, their containers and named volumes."""

    def __init__(
        self,
        client: docker.DockerClient,
        compose: Compose,
        images: dict[str, str],
        *,
        internet: bool,
        labels: dict[str, str],
    ) -> None:
        """``images``: each side service's image (built or found by the caller)."""
        self.client = client
        self.compose = compose
        self.images = images
        self.internet = internet
        self.labels = labels
        self.key = "rock-trial-" + secrets.token_hex(5)
        self.network: Any = None
        self.containers: dict[str, Any] = {}
        self.volumes: list[str] = []

    def start(self) -> None:
        """The network, then each side service in order, each after what it waits for."""
        try:
            self.labels = {**self.labels, LABEL_GROUP: self.key}
            self.network = self.client.networks.create(
                self.key, driver="bridge", internal=not self.internet, labels=self.labels
            )
            for service in self.compose.order():
                self._wait(service.depends_on)
                self._run(service)
        except (APIError, DockerException) as exc:
            self.stop()
            raise ComposeError(
                f"the task's services could not be started ({_short(exc)})."
            ) from None
        except BaseException:
            self.stop()
            raise

    def ready_for_main(self) -> None:
        """Wait for what ``main`` depends on (the caller stops the group if this fails)."""
        self._wait(self.compose.main.depends_on)

    def attach(self, container_id: str) -> None:
        """Put the agent's container on the trial's network, answering to ``main``."""
        assert self.network is not None
        self.network.connect(container_id, aliases=[self.compose.main.name])

    def ports(self) -> dict[str, ServiceShell]:
        """Each running side service, as hooks, artifacts and the agent's MCP reach it."""
        return {name: ServiceShell(c, self.key) for name, c in self.containers.items()}

    def _run(self, service: Service) -> None:
        mounts = []
        for spec in service.volumes:
            source, target, mode = spec.rsplit(":", 2) if not spec.startswith("::") else (
                "", spec[2:].rsplit(":", 1)[0], spec.rsplit(":", 1)[1]
            )  # fmt: skip
            if not source.startswith("/"):  # a named or anonymous volume: the trial's own
                name = f"{self.key}-{source or secrets.token_hex(3)}"
                if name not in self.volumes:
                    self.client.volumes.create(name, labels=self.labels)
                    self.volumes.append(name)
                source = name
            mounts.append(f"{source}:{target}:{mode}")
        options: dict[str, Any] = {
            "name": f"{self.key}-{service.name}",
            "detach": True,
            "labels": {**self.labels, LABEL_TRIAL_SERVICE: service.name},
            "network": self.key,
            "networking_config": {
                self.key: self.client.api.create_endpoint_config(aliases=[service.name])
            },
            "environment": service.environment,
            "volumes": mounts,
            "pids_limit": 4096,
            "security_opt": ["no-new-privileges"],
        }
        if service.command is not None:
            options["command"] = service.command
        if service.entrypoint is not None:
            options["entrypoint"] = service.entrypoint
        if service.working_dir:
            options["working_dir"] = service.working_dir
        if service.user:
            options["user"] = service.user
        if service.healthcheck:
            options["healthcheck"] = service.healthcheck
        container = self.client.containers.create(self.images[service.name], **options)
        self.containers[service.name] = container
        container.start()

    def _wait(self, conditions: dict[str, str]) -> None:
        for name, condition in conditions.items():
            container = self.containers[name]
            deadline = time.monotonic() + WAIT_SEC
            while True:
                container.reload()
                state = container.attrs["State"]
                health = (state.get("Health") or {}).get("Status")
                if condition == "service_started" and state["Status"] in ("running", "exited"):
                    break
                if condition == "service_completed_successfully" and state["Status"] == "exited":
                    if state.get("ExitCode") == 0:
                        break
                    raise ComposeError(
                        f"service {name!r} exited with {state.get('ExitCode')}, and the "
                        f"services after it need it to succeed ({_logs(container)})."
                    )
                if condition == "service_healthy":
                    if health == "healthy":
                        break
                    if health == "unhealthy":
                        raise ComposeError(
                            f"service {name!r} is unhealthy: its healthcheck failed "
                            f"{_failing_streak(container)} times in a row ({_logs(container)})."
                        )
                    if health is None and state["Status"] == "running":
                        raise ComposeError(
                            f"the task waits for service {name!r} to be healthy, but it has no "
                            "healthcheck; give it one in the compose file."
                        )
                if state["Status"] in ("exited", "dead") and condition != (
                    "service_completed_successfully"
                ):
                    raise ComposeError(
                        f"service {name!r} stopped (exit {state.get('ExitCode')}) before it "
                        f"was {condition.removeprefix('service_')} ({_logs(container)})."
                    )
                if time.monotonic() > deadline:
                    raise ComposeError(
                        f"service {name!r} was not {condition.removeprefix('service_')} after "
                        f"{WAIT_SEC:g} s (health: {health or 'none'}; {_logs(container)})."
                    )
                time.sleep(0.2)

    def stop(self) -> None:
        """Remove the containers, the network and the named volumes: what the group knows it
        made, and what the engine holds under its label (made by a call that timed out here)."""
        self.containers.clear()
        self.volumes.clear()
        self.network = None
        remove_labelled(self.client, f"{LABEL_GROUP}={self.key}")


def remove_labelled(client: docker.DockerClient, label: str, patience: float = 60.0) -> list[str]:
    """Remove every container, network and volume under ``label`` (``key=value``), trying
    again (for up to ``patience`` seconds) when a loaded engine is slow to answer or still
    removing; what could not be removed, as names."""
    left: list[str] = []
    deadline = time.monotonic() + patience
    for attempt in itertools.count():
        if attempt:
            time.sleep(min(2.0**attempt / 2, 8.0, max(deadline - time.monotonic(), 0.0)))
        left = []
        try:
            for container in client.containers.list(all=True, filters={"label": label}):
                try:
                    container.remove(force=True, v=True)
                except NotFound:
                    pass
                except Exception:  # a timeout, a removal in progress: again
                    left.append(f"container {container.name}")
            for network in client.networks.list(filters={"label": label}):
                try:
                    network.reload()
                    for attached in network.containers:  # the agent's, if still there
                        network.disconnect(attached, force=True)
                    network.remove()
                except NotFound:
                    pass
                except Exception:
                    left.append(f"network {network.name}")
            for volume in client.volumes.list(filters={"label": label}):
                try:
                    volume.remove(force=True)
                except NotFound:
                    pass
                except Exception:
                    left.append(f"volume {volume.name}")
        except Exception as exc:  # the engine did not answer the listing
            left = [f"(the engine did not list them: {_short(exc)})"]
        if not left or time.monotonic() >= deadline:
            return left
    return left


class ServiceShell(ExecVerb):
    """One side service's container: commands (``docker exec``, under ``timeout`` from the
    image), files out, and its address on the trial's network (:class:`ServicePort`)."""

    def __init__(self, container: Any, network: str) -> None:
        self.container = container
        self.network = network

    def run(self, request: ExecRequest) -> ExecResult:
        argv = (
            ["sh", "-c", request.command] if isinstance(request.command, str) else request.command
        )
        if request.timeout is not None:
            argv = ["timeout", "-s", "KILL", f"{request.timeout:g}", *argv]
        started = time.monotonic()
        try:
            done = self.container.exec_run(
                argv,
                user=request.user or "",
                workdir=request.cwd,
                environment=request.env or None,
                demux=True,
            )
        except (APIError, DockerException) as exc:
            raise SandboxError(
                f"the service's container would not run it ({_short(exc)})."
            ) from None
        out, err = done.output if isinstance(done.output, tuple) else (done.output, b"")
        code = int(done.exit_code if done.exit_code is not None else -1)
        return ExecResult(
            exit_code=code,
            stdout=out or b"",
            stderr=err or b"",
            duration_sec=round(time.monotonic() - started, 3),
            timed_out=request.timeout is not None and code == 137,
        )

    def get_archive(self, path: str) -> bytes:
        try:
            stream, _ = self.container.get_archive(path)
        except (NotFound, APIError, DockerException) as exc:
            raise SandboxError(f"{path} cannot be read from the service ({_short(exc)}).") from None
        return b"".join(stream)

    def address(self) -> str | None:
        try:
            self.container.reload()
        except (NotFound, APIError, DockerException):
            return None
        networks = self.container.attrs["NetworkSettings"].get("Networks") or {}
        ip = (networks.get(self.network) or {}).get("IPAddress")
        return str(ip) if ip else None


def _failing_streak(container: Any) -> int:
    return int((container.attrs["State"].get("Health") or {}).get("FailingStreak") or 0)


def _logs(container: Any) -> str:
    try:
        text = container.logs(tail=3).decode(errors="replace").strip()
    except (APIError, DockerException):
        return "no logs"
    last = text.splitlines()[-1] if text else ""
    return f"it said: {last[:200]}" if last else "it printed nothing"


def _short(exc: BaseException) -> str:
    return str(getattr(exc, "explanation", None) or exc).splitlines()[0][:300]
