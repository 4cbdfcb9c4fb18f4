"""A compose task's docker-compose file, read into what rock runs of it.

Harbor runs a task's ``environment/docker-compose.yaml`` with ``docker compose``; rock bench
reads the file itself (:func:`read_compose`: ``${VAR}`` and ``${VAR:-default}`` from this
machine's environment, as compose does) into a :class:`Compose`, the agent's ``main``
service and the side services that :mod:`rock.bench.services` starts beside it.

What is read of a side service: ``image``, ``build`` (context, dockerfile), ``environment``,
``command``, ``entrypoint``, ``working_dir``, ``user``, ``healthcheck``, ``depends_on`` and
``volumes`` (a relative host path is the task's own file; a named volume is the trial's own).
``ports`` are not needed on the trial's network and are left out, as is anything else.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from ale.task import Task
from rock.backends.base import SandboxError

MAIN_SERVICES = ("main", "client")
"""Names of the service a task's compose file runs the agent in (Harbor, Terminal-Bench 1.0)."""
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
