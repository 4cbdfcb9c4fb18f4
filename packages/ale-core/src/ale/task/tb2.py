"""Read a Terminal-Bench 2.0 / Harbor task directory as it is.

The 2.0 layout::

    instruction.md       what the agent must do
    task.toml            version, [metadata], [agent], [verifier], [environment]
    environment/         the build context: Dockerfile (or docker-compose.yaml)
    tests/test.sh        the verifier: writes the reward to /logs/verifier/reward.txt
    solution/solve.sh    the oracle (solution/solution.yaml when carried over from 1.0)
    trajectory.json      optional: an ATIF conversation the agent starts from

A Harbor 1.4 multi-step task lists ``[[steps]]`` in task.toml, each step's files under
``steps/<name>/`` (instruction.md; tests/, solution/ and workdir/ optional, the task's
tests/ and solution/ standing in); a ``[verifier]`` (or a step's) with
``environment_mode = "separate"`` or an ``environment`` table runs its tests in a container
of its own (:class:`~ale.task.models.TaskVerifier`).

Known keys are checked: a known key with a value of the wrong type is an error
naming the field. Unknown keys never are, so real tasks read even when they use
keys ale does not model: unknown ``[metadata]`` keys go to ``metadata.extra``;
unknown top-level keys and tables, and unknown keys of ``[agent]``,
``[verifier]`` and ``[environment]``, go to ``metadata.extra["task_toml"]``
nested as in the file.

Harbor's older size strings (``memory = "2G"``, ``storage = "10G"``) are read into
``memory_mb`` / ``storage_mb``; when both forms are given the ``_mb`` one wins.
"""

from __future__ import annotations

import os
import re
import unicodedata
from pathlib import Path
from typing import Any

from ale.atif import AtifError, read_atif
from ale.task import _fields as f
from ale.task.errors import TaskFormatError
from ale.task.models import (
    TB2_AGENT_TIMEOUT_SEC,
    TB2_EXTRA_KEY,
    TB2_VERIFIER_TIMEOUT_SEC,
    CollectHook,
    Healthcheck,
    Task,
    TaskArtifact,
    TaskEnvironment,
    TaskMcpServer,
    TaskMetadata,
    TaskStep,
    TaskVerifier,
)

TASK_FILE = "task.toml"
INSTRUCTION_FILE = "instruction.md"
PRIOR_TRAJECTORY_FILE = "trajectory.json"
"""An ATIF trajectory beside an instruction: the conversation the agent starts from."""
_COMPOSE_NAMES = ("docker-compose.yaml", "docker-compose.yml")
_SECTIONS = ("metadata", "agent", "verifier", "environment")
KNOWN_VERSIONS = ("1.0", "1.1", "1.2", "1.3", "1.4")
"""task.toml schema versions read: Terminal-Bench 2.0's 1.0 up to Harbor's 1.4."""


def load_tb2(path: str | Path) -> Task:
    """Read the Terminal-Bench 2.0 / Harbor task in directory ``path``.

    Raises :class:`TaskFormatError` naming the file and field when task.toml is
    missing or malformed, a known key has the wrong type, instruction.md is
    missing or empty, tests/test.sh is missing, or the task declares no
    environment (no Dockerfile, compose file or ``docker_image``).
    """
    task_dir = Path(path).resolve()
    task_file = task_dir / TASK_FILE
    if not task_file.is_file():
        raise TaskFormatError(
            f"{task_dir} has no {TASK_FILE}, so it is not a Terminal-Bench 2.0 task; "
            "add task.toml or pass the task's directory.",
            task_file,
        )
    data = f.parse_toml(task_file)
    version = f.opt_str(task_file, "version", data.pop("version", None))
    version = f.opt_str(task_file, "schema_version", data.pop("schema_version", None)) or version
    if version is not None and version not in KNOWN_VERSIONS:
        raise TaskFormatError(
            f"{f.where(task_file)} declares schema version {version!r}, which this loader does "
            f"not know (it reads {', '.join(KNOWN_VERSIONS)}); upgrade ale-core, or write the "
            "task in one of those versions.",
            task_file,
        )
    steps_data = data.pop("steps", None) or []
    if not isinstance(steps_data, list) or not all(isinstance(t, dict) for t in steps_data):
        raise f.wrong(task_file, "steps", "an array of tables ([[steps]])", steps_data)
    strategy = f.opt_str(
        task_file, "multi_step_reward_strategy", data.pop("multi_step_reward_strategy", None)
    )
    if strategy not in (None, "mean", "final"):
        raise f.wrong(task_file, "multi_step_reward_strategy", '"mean" or "final"', strategy)
    artifacts = _artifacts(task_file, "artifacts", data.pop("artifacts", None))
    sections = {name: f.table(task_file, name, data.pop(name, None)) for name in _SECTIONS}
    unknown: dict[str, Any] = data  # what is left of the top level

    metadata = _metadata(task_file, dict(sections["metadata"]))
    agent = dict(sections["agent"])
    agent_timeout = f.positive(task_file, "agent.timeout_sec", agent.pop("timeout_sec", None))
    verifier = dict(sections["verifier"])
    verifier_timeout = f.positive(
        task_file, "verifier.timeout_sec", verifier.pop("timeout_sec", None)
    )
    verifier_env = f.str_dict(task_file, "verifier.env", verifier.pop("env", None))
    separate = _verifier(task_dir, task_file, "verifier", verifier, task_dir / "tests", None)
    # the hooks, users and [solution] stay in the task's extras, so a task written again
    # keeps them as they were
    collect = _hooks(task_file, "verifier.collect", verifier.get("collect"))
    agent_user = _user(task_file, "agent.user", agent.get("user"))
    verifier_user = _user(task_file, "verifier.user", verifier.get("user"))
    agent_network = _phase_network(task_file, "agent", agent)
    verifier_network = _phase_network(task_file, "verifier", verifier)
    solution = f.table(task_file, "solution", data.get("solution"))
    solution_env = _substituted(
        task_file, "solution.env", f.str_dict(task_file, "solution.env", solution.get("env"))
    )
    env_table = dict(sections["environment"])
    environment = _environment(task_dir, task_file, env_table)

    for name, rest in (("agent", agent), ("verifier", verifier), ("environment", env_table)):
        if rest:
            unknown[name] = rest
    if unknown:
        metadata.extra[TB2_EXTRA_KEY] = unknown

    agent_timeout = TB2_AGENT_TIMEOUT_SEC if agent_timeout is None else agent_timeout
    test_script = task_dir / "tests" / "test.sh"
    if environment.os == "windows":  # Harbor's Windows tasks test with test.bat
        test_script = test_script.with_suffix(".bat")
    _check_names(task_file, steps_data)
    steps = [
        _step(
            task_dir,
            task_file,
            i,
            table,
            agent_timeout,
            verifier_env,
            separate,
            collect,
            artifacts,
            (agent_user, verifier_user),
            (agent_network, verifier_network),
        )
        for i, table in enumerate(steps_data)
    ]
    if steps:
        instruction = "\n\n".join(f"## Step {s.name}\n\n{s.instruction.strip()}" for s in steps)
        test_script = next((s.test_script for s in steps if s.test_script), test_script)
    else:
        instruction = _instruction(task_dir / INSTRUCTION_FILE)
        if not test_script.is_file() and not (separate and separate.bundled):
            raise TaskFormatError(
                f"{task_dir} has no tests/{test_script.name}; add the script that runs the "
                "tests and writes the reward to /logs/verifier/reward.txt.",
                test_script,
            )
    return Task(
        id=task_dir.name,
        source_format="tb2",
        path=task_dir,
        instruction=instruction,
        environment=environment,
        tests_dir=task_dir / "tests" if (task_dir / "tests").is_dir() else None,
        test_script=test_script,
        solution=_solution(task_dir / "solution"),
        agent_timeout_sec=agent_timeout,
        test_timeout_sec=(
            TB2_VERIFIER_TIMEOUT_SEC if verifier_timeout is None else verifier_timeout
        ),
        verifier_env=verifier_env,
        metadata=metadata,
        steps=steps,
        reward_strategy="final" if strategy == "final" else "mean",
        verifier=separate,
        artifacts=artifacts,
        collect=collect,
        solution_env=solution_env,
        agent_user=agent_user,
        verifier_user=verifier_user,
        prior_trajectory=_prior_trajectory(task_dir, steps[0].name if steps else None),
        agent_network=agent_network,
        verifier_network=verifier_network,
    )


def _step(
    task_dir: Path,
    task_file: Path,
    index: int,
    table: dict[str, Any],
    agent_timeout: float,
    verifier_env: dict[str, str],
    task_verifier: TaskVerifier | None,
    task_collect: list[CollectHook],
    task_artifacts: list[TaskArtifact],
    task_users: tuple[str | None, str | None],
    task_networks: tuple[bool | None, bool | None],
) -> TaskStep:
    """One ``[[steps]]`` table and its directory ``steps/<name>/``."""
    field = f"steps[{index}]"
    name = str(table["name"])  # checked by _check_names
    step_dir = task_dir / "steps" / name
    agent = f.table(task_file, f"{field}.agent", table.get("agent"))
    verifier = dict(f.table(task_file, f"{field}.verifier", table.get("verifier")))
    own_agent = f.positive(task_file, f"{field}.agent.timeout_sec", agent.get("timeout_sec"))
    own_test = f.positive(
        task_file, f"{field}.verifier.timeout_sec", verifier.pop("timeout_sec", None)
    )
    env = {
        **verifier_env,
        **f.str_dict(task_file, f"{field}.verifier.env", verifier.pop("env", None)),
    }
    step_tests = step_dir / "tests"
    separate = _verifier(
        task_dir, task_file, f"{field}.verifier", verifier, step_tests, task_verifier
    )
    script = next(
        (p for p in (step_tests / "test.sh", task_dir / "tests" / "test.sh") if p.is_file()), None
    )
    if script is None and not (separate and separate.bundled):
        raise TaskFormatError(
            f"{task_dir} has no steps/{name}/tests/test.sh and no tests/test.sh for step "
            f"{name!r}; add the script that checks the step and writes its reward.",
            step_tests / "test.sh",
        )
    solution = _solution(step_dir / "solution") or _solution(task_dir / "solution")
    return TaskStep(
        name=name,
        instruction=_instruction(step_dir / INSTRUCTION_FILE),
        tests_dir=step_tests if step_tests.is_dir() else None,
        test_script=script,
        solution=solution,
        workdir=step_dir / "workdir" if (step_dir / "workdir").is_dir() else None,
        agent_timeout_sec=agent_timeout if own_agent is None else own_agent,
        test_timeout_sec=TB2_VERIFIER_TIMEOUT_SEC if own_test is None else own_test,
        verifier_env=env,
        min_reward=_min_reward(task_file, f"{field}.min_reward", table.get("min_reward")),
        verifier=separate,
        healthcheck=_healthcheck(task_file, f"{field}.healthcheck", table.get("healthcheck")),
        collect=[
            *task_collect,
            *_hooks(task_file, f"{field}.verifier.collect", verifier.pop("collect", None)),
        ],
        artifacts=[
            *task_artifacts,
            *_artifacts(task_file, f"{field}.artifacts", table.get("artifacts")),
        ],
        agent_user=_user(task_file, f"{field}.agent.user", agent.get("user")) or task_users[0],
        verifier_user=(
            _user(task_file, f"{field}.verifier.user", verifier.pop("user", None)) or task_users[1]
        ),
        agent_network=_either(_phase_network(task_file, f"{field}.agent", agent), task_networks[0]),
        verifier_network=_either(
            _phase_network(task_file, f"{field}.verifier", verifier), task_networks[1]
        ),
    )


def _either(own: bool | None, inherited: bool | None) -> bool | None:
    return inherited if own is None else own


_RESERVED = re.compile(r"^(con|prn|aux|nul|conin\$|conout\$|com[1-9¹²³]|lpt[1-9¹²³])$")
_BAD_CHARS = re.compile(r'[<>:"/\\|?*\x00-\x1f\x7f]')


def _step_name_problem(name: str) -> str | None:
    """What makes ``name`` unusable as a step's directory on some system, or None."""
    if not name.strip():
        return "is blank"
    if name in (".", ".."):
        return "is a path, not a name"
    if name[-1] in ". ":
        return "ends with a dot or a space"
    if _BAD_CHARS.search(name):
        return 'holds one of < > : " / \\ | ? * or a control character'
    if _RESERVED.match(name.split(".")[0].lower()):
        return "is a device name on Windows"
    if len(name.encode()) > 255:
        return "is longer than 255 bytes"
    return None


def _check_names(task_file: Path, tables: list[dict[str, Any]]) -> None:
    """Every step named, each name usable as a directory on every system, and no two the
    same (letter case and Unicode normalisation aside), before any step's files are read."""
    seen: dict[str, str] = {}
    for index, table in enumerate(tables):
        name = f.opt_str(task_file, f"steps[{index}].name", table.get("name"))
        if name is None:
            raise f.wrong(task_file, f"steps[{index}].name", "the step's name", None)
        problem = _step_name_problem(name)
        if problem:
            raise TaskFormatError(
                f"{f.where(task_file)}: step name {name!r} {problem}; name the step as a "
                "directory under steps/ can be named on every system.",
                task_file,
            )
        key = unicodedata.normalize("NFC", name).casefold()
        if key in seen:
            raise TaskFormatError(
                f"{f.where(task_file)}: steps {seen[key]!r} and {name!r} have the same name "
                "(letter case aside); give every step its own name.",
                task_file,
            )
        seen[key] = name


def _min_reward(task_file: Path, field: str, value: Any) -> float | dict[str, float] | None:
    if value is None:
        return None
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, dict) and all(
        isinstance(v, int | float) and not isinstance(v, bool) for v in value.values()
    ):
        return {str(k): float(v) for k, v in value.items()}
    raise f.wrong(task_file, field, "a number or a table of numbers", value)


def _artifacts(task_file: Path, field: str, value: Any) -> list[TaskArtifact]:
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


def _verifier(
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
        environment = _environment(task_dir, task_file, env, need_image=False)
    elif inherited is not None:
        environment = inherited.environment
    return TaskVerifier(
        image=image, dockerfile=None if image else dockerfile, environment=environment
    )


def agent_instruction(text: str) -> str:
    """An instruction as Harbor hands it to an agent: leading comment lines that carry a
    canary (``<!-- ... canary ... -->`` or ``# ... canary ...``), and the blank lines after
    them, left out (the task keeps them as written)."""
    lines = text.splitlines(keepends=True)
    start, canary = 0, False
    for line in lines:
        bare = line.strip()
        comment = bare.startswith("#") or (bare.startswith("<!--") and bare.endswith("-->"))
        if comment and "canary" in bare.lower():
            canary = True
        elif not (canary and not bare):
            break
        start += 1
    return "".join(lines[start:]) if canary else text


def _instruction(file: Path) -> str:
    if not file.is_file():
        raise TaskFormatError(
            f"{file.parent} has no {file.name}; write what the agent must do in it.", file
        )
    text = f.read_text(file)
    if not text.strip():
        raise TaskFormatError(
            f"{f.where(file)} is empty; write what the agent must do in it.", file
        )
    return text


def _metadata(task_file: Path, table: dict[str, Any]) -> TaskMetadata:
    def take(key: str) -> Any:
        return table.pop(key, None)

    return TaskMetadata(
        difficulty=f.opt_str(task_file, "metadata.difficulty", take("difficulty")),
        category=f.opt_str(task_file, "metadata.category", take("category")),
        tags=f.str_list(task_file, "metadata.tags", take("tags")),
        author_name=f.opt_str(task_file, "metadata.author_name", take("author_name")),
        author_email=f.opt_str(task_file, "metadata.author_email", take("author_email")),
        extra=table,
    )


def _environment(
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
    mode = f.opt_str(task_file, "environment.network_mode", table.get("network_mode"))
    if mode is not None:  # Harbor 1.3+: it replaces allow_internet
        if mode not in ("public", "no-network", "allowlist"):
            raise f.wrong(
                task_file, "environment.network_mode", '"public", "no-network" or "allowlist"', mode
            )
        # rock cannot open the network to some hosts only: an allowlist runs closed
        allow_internet = mode == "public"

    env_dir = task_dir / "environment"
    dockerfile = env_dir / "Dockerfile"
    compose = next((env_dir / name for name in _COMPOSE_NAMES if (env_dir / name).is_file()), None)
    if need_image and not dockerfile.is_file() and compose is None and image is None:
        raise TaskFormatError(
            f"{task_dir} has no environment/Dockerfile, no environment/docker-compose.yaml "
            "and no [environment] docker_image in task.toml; add one of them.",
            dockerfile,
        )
    # env and workdir stay in the table too (the task's extras), so a task written again
    # keeps them as the author wrote them, ${VAR} and all
    variables = _substituted(
        task_file, "environment.env", f.str_dict(task_file, "environment.env", table.get("env"))
    )
    workdir = f.opt_str(task_file, "environment.workdir", table.get("workdir"))
    if workdir is not None and not workdir.startswith("/"):
        raise f.wrong(task_file, "environment.workdir", "an absolute path", workdir)
    system = (f.opt_str(task_file, "environment.os", table.get("os")) or "linux").lower()
    if system not in ("linux", "windows"):
        raise f.wrong(task_file, "environment.os", '"linux" or "windows"', system)
    gpus = table.get("gpus")
    if gpus is not None and (isinstance(gpus, bool) or not isinstance(gpus, int) or gpus < 0):
        raise f.wrong(task_file, "environment.gpus", "a whole number of GPUs", gpus)
    tpu = f.table(task_file, "environment.tpu", table.get("tpu"))
    # mcp_servers and skills_dir stay in the table too: a task written again keeps them
    skills_dir = f.opt_str(task_file, "environment.skills_dir", table.get("skills_dir"))
    if skills_dir is not None and not skills_dir.startswith("/"):
        raise f.wrong(task_file, "environment.skills_dir", "an absolute path", skills_dir)
    return TaskEnvironment(
        mcp_servers=_mcp_servers(task_file, table.get("mcp_servers")),
        skills_dir=skills_dir,
        os="windows" if system == "windows" else "linux",
        gpus=gpus or 0,
        tpu=bool(tpu),
        env=variables,
        workdir=workdir,
        healthcheck=_healthcheck(task_file, "environment.healthcheck", table.get("healthcheck")),
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


def _prior_trajectory(task_dir: Path, first_step: str | None) -> Path | None:
    """The task's ``trajectory.json`` (its first step's, for a multi-step task), checked to
    be an ATIF document."""
    base = task_dir / "steps" / first_step if first_step else task_dir
    path = base / PRIOR_TRAJECTORY_FILE
    if not path.is_file():
        return None
    try:
        read_atif(path)
    except AtifError as exc:
        reason = str(exc).split("; fix")[0].rstrip(".")
        raise TaskFormatError(
            f"{reason} (the task's prior context for its agent); fix it or remove it.", path
        ) from None
    return path


def _healthcheck(task_file: Path, field: str, value: Any) -> Healthcheck | None:
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


def _phase_network(task_file: Path, field: str, table: dict[str, Any]) -> bool | None:
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


def _user(task_file: Path, field: str, value: Any) -> str | None:
    """A ``user``: a name, or a uid as a number or a string (``"1000"``, ``"1000:1000"``)."""
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return str(value)
    if isinstance(value, str) and _USER.fullmatch(value):
        return value
    raise f.wrong(task_file, field, "a user name or uid", value)


def _hooks(task_file: Path, field: str, value: Any) -> list[CollectHook]:
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
        user = _user(task_file, f"{where}.user", table.get("user"))
        hooks.append(
            CollectHook(command=command, timeout_sec=timeout or 60.0, service=service, user=user)
        )
    return hooks


_VARIABLE = re.compile(r"^\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-(.*))?\}$", re.DOTALL)


def _substituted(task_file: Path, field: str, values: dict[str, str]) -> dict[str, str]:
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


def _solution(solution_dir: Path) -> Path | None:
    for name in ("solve.sh", "solution.yaml"):
        if (solution_dir / name).is_file():
            return solution_dir / name
    return None
