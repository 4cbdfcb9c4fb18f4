"""A compose task's services: what its docker-compose file starts beside the agent's container.

Harbor runs a task's ``environment/docker-compose.yaml`` with ``docker compose``: the agent
works in the ``main`` service, and the other services (a database, a proxy, an MCP server)
run beside it, each reachable by its service name. rock bench does the same without compose:
:func:`read_compose` reads the file (``${VAR}`` and ``${VAR:-default}`` from this machine's
environment, as compose does), and a :class:`ServiceGroup` gives each trial a network of its
own (internal, so without the internet, unless the task allows it), builds or finds each side
service's image (through the task image builder and its base-image map, pulled when a
registry is in reach),
starts the services in the order their ``depends_on`` gives, waits for the conditions the
services and ``main`` name (``service_started``, ``service_healthy`` by the service's own
healthcheck, ``service_completed_successfully``), and removes it all when the trial ends.

What is read of a side service: ``image``, ``build`` (context, dockerfile), ``environment``,
``command``, ``entrypoint``, ``working_dir``, ``user``, ``healthcheck``, ``depends_on`` and
``volumes`` (a relative host path is the task's own file; a named volume is the trial's own).
``ports`` are not needed on the trial's network and are left out, as is anything else.
"""

from __future__ import annotations

import itertools
import os
import re
import secrets
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import docker
import yaml
from docker.errors import APIError, DockerException, NotFound

from ale.task import Task
from rock.backends.base import ExecVerb, SandboxError
from rock.models import ExecRequest, ExecResult

MAIN_SERVICES = ("main", "client")
"""Names of the service a task's compose file runs the agent in (Harbor, Terminal-Bench 1.0)."""
LABEL_TRIAL_SERVICE = "dev.ale.rock.bench.service"
LABEL_GROUP = "dev.ale.rock.bench.group"
"""Each side service's container, network and volume carries its group's key under this label."""
WAIT_SEC = 180.0
"""Longest wait for one service's condition (healthy, started, completed)."""
_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::?-([^}]*))?\}|\$([A-Za-z_][A-Za-z0-9_]*)")


class ComposeError(SandboxError):
    """A compose file that cannot be run, or a service that would not come up."""


@dataclass
class Service:
    """One service of a compose file, as rock runs it."""

    name: str
    image: str | None = None
    build_context: Path | None = None
    dockerfile: Path | None = None
    environment: dict[str, str] = field(default_factory=dict)
    command: list[str] | str | None = None
    entrypoint: list[str] | str | None = None
    working_dir: str | None = None
    user: str | None = None
    healthcheck: dict[str, Any] | None = None
    """In the engine's form (test, interval, timeout, retries, start_period in ns)."""
    depends_on: dict[str, str] = field(default_factory=dict)
    """Service name to the condition it must reach first."""
    volumes: list[str] = field(default_factory=list)
    """``source:target[:mode]``, a host path absolute, a named volume by its name."""


@dataclass
class Compose:
    """A task's compose file: the agent's service and the others."""

    main: Service
    side: list[Service]

    def order(self) -> list[Service]:
        """The side services, each after those it depends on."""
        by_name = {s.name: s for s in self.side}
        done: list[Service] = []
        seen: set[str] = set()

        def visit(service: Service, path: tuple[str, ...]) -> None:
            if service.name in seen:
                return
            if service.name in path:
                raise ComposeError(
                    f"the services' depends_on go round in a circle ({' -> '.join(path)} -> "
                    f"{service.name}); break the cycle."
                )
            for name in service.depends_on:
                if name in by_name:
                    visit(by_name[name], (*path, service.name))
            seen.add(service.name)
            done.append(service)

        for service in self.side:
            visit(service, ())
        return done


def read_compose(task: Task, env: dict[str, str] | None = None) -> Compose | None:
    """The task's compose file (None when it has none); a :class:`ComposeError` of one
    sentence for one rock cannot run."""
    path = task.environment.compose_file
    if path is None:
        return None
    values = dict(os.environ if env is None else env)
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as exc:
        raise ComposeError(f"{path} is not valid YAML ({exc}); fix it.") from None
    services = data.get("services") if isinstance(data, dict) else None
    if not isinstance(services, dict) or not services:
        raise ComposeError(f"{path} has no services; give it a 'main' service.")
    main = next((n for n in MAIN_SERVICES if n in services), None)
    if main is None and len(services) == 1:
        main = next(iter(services))
    if main is None:
        raise ComposeError(
            f"{path} has services {sorted(services)} but none named "
            f"{' or '.join(MAIN_SERVICES)}; name the service the agent works in 'main'."
        )
    parsed = {
        str(name): _service(
            path, str(name), _interpolate(spec or {}, values), values, side=name != main
        )
        for name, spec in services.items()
    }
    for service in parsed.values():
        unknown = sorted(set(service.depends_on) - set(parsed))
        if unknown:
            raise ComposeError(
                f"service {service.name!r} of {path} depends on {', '.join(unknown)}, which "
                "the file does not define; define it or remove the dependency."
            )
    return Compose(main=parsed[str(main)], side=[s for n, s in parsed.items() if n != main])


def _interpolate(value: Any, env: dict[str, str]) -> Any:
    if isinstance(value, str):
        return _VAR.sub(
            lambda m: (
                env.get(m.group(1) or m.group(3), "")
                if (m.group(1) or m.group(3)) in env or m.group(2) is None
                else m.group(2)
            ),
            value.replace("$$", "\0"),
        ).replace("\0", "$")
    if isinstance(value, list):
        return [_interpolate(v, env) for v in value]
    if isinstance(value, dict):
        return {k: _interpolate(v, env) for k, v in value.items()}
    return value


def _service(
    path: Path, name: str, spec: dict[str, Any], env: dict[str, str], *, side: bool
) -> Service:
    """One service; of the agent's own (not ``side``) rock takes its build, environment and
    depends_on only (its volumes and ports are Harbor's and Terminal-Bench's plumbing)."""
    where = f"service {name!r} of {path}"
    if not isinstance(spec, dict):
        raise ComposeError(f"{where} is not a mapping; write its keys under it.")
    build = spec.get("build")
    if isinstance(build, str):
        build = {"context": build}
    context = dockerfile = None
    if isinstance(build, dict):
        context = (path.parent / str(build.get("context", "."))).resolve()
        dockerfile = (context / str(build.get("dockerfile", "Dockerfile"))).resolve()
        if not dockerfile.is_file():
            raise ComposeError(f"{where} builds from {dockerfile}, which does not exist.")
    environment = spec.get("environment") or {}
    if isinstance(environment, list):  # NAME=value, or NAME alone: this machine's value
        environment = {
            k: (v if sep else None) for k, sep, v in (str(i).partition("=") for i in environment)
        }
    environment = {
        str(k): str(env.get(str(k))) if v is None else ("" if v is None else v)
        for k, v in environment.items()
        if v is not None or str(k) in env
    }
    depends = spec.get("depends_on") or {}
    if isinstance(depends, list):
        depends = {str(n): None for n in depends}
    if not isinstance(depends, dict) or not all(
        isinstance(c, dict) or c is None for c in depends.values()
    ):
        raise ComposeError(f"{where} has a depends_on rock cannot read; give a list or a mapping.")
    conditions = {
        str(n): str((c or {}).get("condition", "service_started")) for n, c in depends.items()
    }
    for dep, condition in conditions.items():
        if condition not in (
            "service_started", "service_healthy", "service_completed_successfully"
        ):  # fmt: skip
            raise ComposeError(
                f"{where} waits for {dep} to reach {condition!r}, which compose does not "
                "define; use service_started, service_healthy or "
                "service_completed_successfully."
            )
    return Service(
        name=name,
        image=str(spec["image"]) if spec.get("image") else None,
        build_context=context,
        dockerfile=dockerfile,
        environment={k: str(v) for k, v in environment.items()},
        command=spec.get("command"),
        entrypoint=spec.get("entrypoint"),
        working_dir=spec.get("working_dir"),
        user=str(spec["user"]) if spec.get("user") is not None else None,
        healthcheck=_healthcheck(where, spec.get("healthcheck")) if side else None,
        depends_on=conditions,
        volumes=[_volume(path, where, v) for v in spec.get("volumes") or []] if side else [],
    )


_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ns|us|ms|s|m|h)")
_UNIT_NS = {"ns": 1, "us": 1_000, "ms": 1_000_000, "s": 10**9, "m": 60 * 10**9, "h": 3600 * 10**9}


def _ns(where: str, value: Any) -> int:
    if isinstance(value, int | float):
        return int(value * 10**9)
    text = str(value).strip()
    parts = _DURATION.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise ComposeError(
            f"{where}: {value!r} is not a duration; write it as 10s, 1m30s or 500ms."
        )
    return int(sum(float(n) * _UNIT_NS[u] for n, u in parts))


def _healthcheck(where: str, spec: Any) -> dict[str, Any] | None:
    if not isinstance(spec, dict) or spec.get("disable"):
        return None
    test = spec.get("test")
    if isinstance(test, str):
        test = ["CMD-SHELL", test]
    if not isinstance(test, list) or not test:
        raise ComposeError(f"{where} has a healthcheck without a test; give it one.")
    check: dict[str, Any] = {"test": [str(t) for t in test]}
    for key in ("interval", "timeout", "start_period", "start_interval"):
        if spec.get(key) is not None:
            check[key] = _ns(f"{where} healthcheck.{key}", spec[key])
    if spec.get("retries") is not None:
        check["retries"] = int(spec["retries"])
    return check


def _volume(path: Path, where: str, value: Any) -> str:
    if isinstance(value, dict):
        source, target = value.get("source"), value.get("target")
        mode = "ro" if value.get("read_only") else "rw"
    else:
        source, _, rest = str(value).partition(":")
        target, _, mode = rest.partition(":")
        if not target:  # an anonymous volume: just a path
            source, target, mode = None, source, "rw"
    if not target:
        raise ComposeError(f"{where} has a volume without a target path: {value!r}.")
    if source is None:
        return f"::{target}:{mode or 'rw'}"  # anonymous: made per trial
    if str(source).startswith((".", "/", "~")):
        host = (path.parent / os.path.expanduser(str(source))).resolve()
        if not host.exists():
            raise ComposeError(f"{where} mounts {host}, which does not exist.")
        return f"{host}:{target}:{mode or 'rw'}"
    return f"{source}:{target}:{mode or 'rw'}"


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
