"""Read the tables of a Terminal-Bench 2.0 / Harbor task.toml, each into its model.

:mod:`ale.task.tb2` reads the task as a whole (its files, its steps, what steps take
from the task); the readers here each check one kind of table or value -- the
environment, a separate verifier, artifacts, collect hooks, healthchecks, users,
network modes, ``${VAR}`` values -- and fail with a :class:`TaskFormatError` naming
the field.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, Literal

from ale.task import _fields as f
from ale.task.errors import TaskFormatError
from ale.task.models import (
    CollectHook,
    Healthcheck,
    TaskArtifact,
    TaskEnvironment,
    TaskMcpServer,
    TaskVerifier,
)

_COMPOSE_NAMES = ("docker-compose.yaml", "docker-compose.yml")


def read_min_reward(task_file: Path, field: str, value: Any) -> float | dict[str, float] | None:
    if value is None:
        return None
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, dict) and all(
        isinstance(v, int | float) and not isinstance(v, bool) for v in value.values()
    ):
        return {str(k): float(v) for k, v in value.items()}
    raise f.wrong(task_file, field, "a number or a table of numbers", value)


def read_artifacts(task_file: Path, field: str, value: Any) -> list[TaskArtifact]:
    """Artifacts: paths, or tables with a ``source`` and optionally a ``destination``
    (relative, under the trial's ``artifacts/``), ``exclude`` patterns and a ``service``."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise f.wrong(task_file, field, "a list of paths or {source = ...} tables", value)
    out = []
    for index, entry in enumerate(value):
        table = entry if isinstance(entry, dict) else {"source": entry}
        source = table.get("source")
        if not isinstance(source, str) or not source.startswith("/") or ".." in source.split("/"):
            raise f.wrong(task_file, field, "absolute paths without '..'", entry)
        where = f"{field}[{index}]"
        destination = f.opt_str(task_file, f"{where}.destination", table.get("destination"))
        if destination is not None:
            parts = destination.split("/")
            if (
                destination.startswith("/") or "\\" in destination or ".." in parts
                or destination.strip("/") == "manifest.json"
            ):  # fmt: skip
                raise f.wrong(
                    task_file, f"{where}.destination",
                    "a relative path with forward slashes, without '..', not manifest.json",
                    destination,
                )  # fmt: skip
        out.append(
            TaskArtifact(
                source=source,
                destination=(destination or "").strip("/") or None,
                exclude=f.str_list(task_file, f"{where}.exclude", table.get("exclude")),
                service=f.opt_str(task_file, f"{where}.service", table.get("service")) or "main",
            )
        )
    return out


def read_verifier(
    task_dir: Path,
    task_file: Path,
    field: str,
    table: dict[str, Any],
    tests_dir: Path,
    inherited: TaskVerifier | None,
) -> TaskVerifier | None:
    """A ``[verifier]`` table's separate container, popping its keys: separate when
    ``environment_mode = "separate"`` or an ``environment`` table is given (a step
    without either takes the task's)."""
    mode = f.opt_str(task_file, f"{field}.environment_mode", table.pop("environment_mode", None))
    if mode not in (None, "shared", "separate"):
        raise f.wrong(task_file, f"{field}.environment_mode", '"shared" or "separate"', mode)
    env_table = table.pop("environment", None)
    if mode == "shared" and env_table is not None:
        raise TaskFormatError(
            f"{f.where(task_file)}: {field} is shared (environment_mode) but gives an "
            "environment table; drop one of them.",
            task_file,
        )
    if mode == "shared" or (mode is None and env_table is None and inherited is None):
        return None
    if mode is None and env_table is None:
        return inherited
    env = dict(f.table(task_file, f"{field}.environment", env_table))
    image = f.opt_str(task_file, f"{field}.environment.docker_image", env.get("docker_image"))
    dockerfile = next(
        (d / "Dockerfile" for d in (tests_dir, task_dir / "tests") if (d / "Dockerfile").is_file()),
        None,
    )
    environment = None
    if env_table is not None:
        environment = read_environment(task_dir, task_file, env, need_image=False)
    elif inherited is not None:
        environment = inherited.environment
    return TaskVerifier(
        image=image, dockerfile=None if image else dockerfile, environment=environment
    )


def read_environment(
    task_dir: Path, task_file: Path, table: dict[str, Any], *, need_image: bool = True
) -> TaskEnvironment:
    """Read ``[environment]`` (popping the known keys from ``table``) and the files."""

    def take(key: str) -> Any:
        return table.pop(key, None)

    image = f.opt_str(task_file, "environment.docker_image", take("docker_image"))
    memory_mb = f.positive_int(task_file, "environment.memory_mb", take("memory_mb"))
    memory = f.size_mb(task_file, "environment.memory", take("memory"))
    storage_mb = f.positive_int(task_file, "environment.storage_mb", take("storage_mb"))
    storage = f.size_mb(task_file, "environment.storage", take("storage"))
    allow_internet = f.opt_bool(task_file, "environment.allow_internet", take("allow_internet"))
    network = read_phase_network(task_file, "environment", table)
    if network is not None:  # Harbor 1.3+: network_mode replaces allow_internet
        allow_internet = network
    env_dir, dockerfile, compose = _build_files(task_dir, need_image and image is None)
    # env and workdir stay in the table too (the task's extras), so a task written again
    # keeps them as the author wrote them, ${VAR} and all
    variables = substituted(
        task_file, "environment.env", f.str_dict(task_file, "environment.env", table.get("env"))
    )
    workdir = _absolute(task_file, "environment.workdir", table.get("workdir"))
    system = _system(task_file, table.get("os"))
    gpus = _gpus(task_file, table.get("gpus"))
    tpu = f.table(task_file, "environment.tpu", table.get("tpu"))
    # mcp_servers and skills_dir stay in the table too: a task written again keeps them
    skills_dir = _absolute(task_file, "environment.skills_dir", table.get("skills_dir"))
    return TaskEnvironment(
        mcp_servers=_mcp_servers(task_file, table.get("mcp_servers")),
        skills_dir=skills_dir,
        os=system,
        gpus=gpus,
        tpu=bool(tpu),
        env=variables,
        workdir=workdir,
        healthcheck=read_healthcheck(
            task_file, "environment.healthcheck", table.get("healthcheck")
        ),
        dockerfile=dockerfile if dockerfile.is_file() else None,
        build_context=env_dir if env_dir.is_dir() else None,
        compose_file=compose,
        image=image,
        cpus=f.positive(task_file, "environment.cpus", take("cpus")),
        memory_mb=memory if memory_mb is None else memory_mb,
        storage_mb=storage if storage_mb is None else storage_mb,
        allow_internet=True if allow_internet is None else allow_internet,
        build_timeout_sec=f.positive(
            task_file, "environment.build_timeout_sec", take("build_timeout_sec")
        ),
    )


def _build_files(task_dir: Path, need_files: bool) -> tuple[Path, Path, Path | None]:
    """The build context ``environment/``, its Dockerfile and its compose file (or None);
    when ``need_files`` (no image is named) one of the two files must be there."""
    env_dir = task_dir / "environment"
    dockerfile = env_dir / "Dockerfile"
    compose = next((env_dir / name for name in _COMPOSE_NAMES if (env_dir / name).is_file()), None)
    if need_files and not dockerfile.is_file() and compose is None:
        raise TaskFormatError(
            f"{task_dir} has no environment/Dockerfile, no environment/docker-compose.yaml "
            "and no [environment] docker_image in task.toml; add one of them.",
            dockerfile,
        )
    return env_dir, dockerfile, compose


def _absolute(task_file: Path, field: str, value: Any) -> str | None:
    path = f.opt_str(task_file, field, value)
    if path is not None and not path.startswith("/"):
        raise f.wrong(task_file, field, "an absolute path", path)
    return path


def _system(task_file: Path, value: Any) -> Literal["linux", "windows"]:
    system = (f.opt_str(task_file, "environment.os", value) or "linux").lower()
    if system not in ("linux", "windows"):
        raise f.wrong(task_file, "environment.os", '"linux" or "windows"', system)
    return "windows" if system == "windows" else "linux"


def _gpus(task_file: Path, gpus: Any) -> int:
    if gpus is not None and (isinstance(gpus, bool) or not isinstance(gpus, int) or gpus < 0):
        raise f.wrong(task_file, "environment.gpus", "a whole number of GPUs", gpus)
    return gpus or 0


def _mcp_servers(task_file: Path, value: Any) -> list[TaskMcpServer]:
    """``[[environment.mcp_servers]]``: each a name and a command (stdio) or a URL."""
    field = "environment.mcp_servers"
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(t, dict) for t in value):
        raise f.wrong(task_file, field, "an array of tables ([[environment.mcp_servers]])", value)
    servers: list[TaskMcpServer] = []
    for index, entry in enumerate(value):
        where = f"{field}[{index}]"
        name = f.opt_str(task_file, f"{where}.name", entry.get("name"))
        if not name:
            raise f.wrong(task_file, f"{where}.name", "the server's name", name)
        if any(s.name == name for s in servers):
            raise f.wrong(task_file, f"{where}.name", "a name no other server has", name)
        transport = f.opt_str(task_file, f"{where}.transport", entry.get("transport")) or "sse"
        if transport not in ("stdio", "sse", "streamable-http"):
            raise f.wrong(
                task_file, f"{where}.transport", '"stdio", "sse" or "streamable-http"', transport
            )
        url = f.opt_str(task_file, f"{where}.url", entry.get("url"))
        command = f.opt_str(task_file, f"{where}.command", entry.get("command"))
        if transport == "stdio" and not command:
            raise f.wrong(task_file, f"{where}.command", "the command of a stdio server", command)
        if transport != "stdio" and not url:
            raise f.wrong(task_file, f"{where}.url", f"the URL of a {transport} server", url)
        servers.append(
            TaskMcpServer(
                name=name,
                transport=transport,  # type: ignore[arg-type]
                url=url,
                command=command,
                args=f.str_list(task_file, f"{where}.args", entry.get("args")),
                headers=f.str_dict(task_file, f"{where}.headers", entry.get("headers")),
            )
        )
    return servers


def read_healthcheck(task_file: Path, field: str, value: Any) -> Healthcheck | None:
    """A ``healthcheck`` table: its command and, each with Harbor's default, its timings."""
    if value is None:
        return None
    table = f.table(task_file, field, value)
    command = f.opt_str(task_file, f"{field}.command", table.get("command"))
    if not command or not command.strip():
        raise f.wrong(task_file, f"{field}.command", "the command to run", command)
    given: dict[str, Any] = {"command": command}
    for key in ("interval_sec", "timeout_sec", "start_interval_sec"):
        number = f.positive(task_file, f"{field}.{key}", table.get(key))
        if number is not None:
            given[key] = number
    start = table.get("start_period_sec")
    if start is not None:  # zero is allowed here
        if isinstance(start, bool) or not isinstance(start, int | float) or not 0 <= start < 1e9:
            raise f.wrong(task_file, f"{field}.start_period_sec", "a number of seconds", start)
        given["start_period_sec"] = float(start)
    retries = f.positive_int(task_file, f"{field}.retries", table.get("retries"))
    if retries is not None:
        given["retries"] = retries
    return Healthcheck(**given)


_USER = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*(:[A-Za-z0-9_.-]+)?")


def read_phase_network(task_file: Path, field: str, table: dict[str, Any]) -> bool | None:
    """A phase's ``network_mode`` (``[agent]``, ``[verifier]``, a step's): True for public,
    False for no-network or an allowlist (rock cannot open the network to some hosts only),
    None when the phase does not override the environment's."""
    mode = f.opt_str(task_file, f"{field}.network_mode", table.get("network_mode"))
    if mode is None:
        return None
    if mode not in ("public", "no-network", "allowlist"):
        raise f.wrong(
            task_file, f"{field}.network_mode", '"public", "no-network" or "allowlist"', mode
        )
    return mode == "public"


def read_user(task_file: Path, field: str, value: Any) -> str | None:
    """A ``user``: a name, or a uid as a number or a string (``"1000"``, ``"1000:1000"``)."""
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return str(value)
    if isinstance(value, str) and _USER.fullmatch(value):
        return value
    raise f.wrong(task_file, field, "a user name or uid", value)


def read_hooks(task_file: Path, field: str, value: Any) -> list[CollectHook]:
    """``[[verifier.collect]]`` tables: a command each, with a timeout and a service."""
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(t, dict) for t in value):
        raise f.wrong(task_file, field, "an array of tables ([[verifier.collect]])", value)
    hooks = []
    for index, table in enumerate(value):
        where = f"{field}[{index}]"
        command = f.opt_str(task_file, f"{where}.command", table.get("command"))
        if not command or not command.strip():
            raise f.wrong(task_file, f"{where}.command", "the command to run", command)
        timeout = f.positive(task_file, f"{where}.timeout_sec", table.get("timeout_sec"))
        service = f.opt_str(task_file, f"{where}.service", table.get("service")) or "main"
        user = read_user(task_file, f"{where}.user", table.get("user"))
        hooks.append(
            CollectHook(command=command, timeout_sec=timeout or 60.0, service=service, user=user)
        )
    return hooks


_VARIABLE = re.compile(r"^\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-(.*))?\}$", re.DOTALL)


def substituted(task_file: Path, field: str, values: dict[str, str]) -> dict[str, str]:
    """``values`` with each whole-value ``${VAR}`` or ``${VAR:-default}`` taken from this
    machine's environment, as Harbor does."""
    out = {}
    for key, value in values.items():
        found = _VARIABLE.match(value)
        if found is None:
            out[key] = value
            continue
        name, default = found.group(1), found.group(2)
        if name in os.environ:
            out[key] = os.environ[name]
        elif default is not None:
            out[key] = default
        else:
            raise TaskFormatError(
                f"{f.where(task_file)}: {field}.{key} takes ${{{name}}} from this machine's "
                f"environment, where {name} is not set; set it, or give a default as "
                f"${{{name}:-value}}.",
                task_file,
            )
    return out
