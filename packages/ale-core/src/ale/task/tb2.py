"""Read a Terminal-Bench 2.0 / Harbor task directory as it is.

The 2.0 layout::

    instruction.md       what the agent must do
    task.toml            version, [metadata], [agent], [verifier], [environment]
    environment/         the build context: Dockerfile (or docker-compose.yaml)
    tests/test.sh        the verifier: writes the reward to /logs/verifier/reward.txt
    solution/solve.sh    the oracle (solution/solution.yaml when carried over from 1.0)

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

from pathlib import Path
from typing import Any

from ale.task import _fields as f
from ale.task.errors import TaskFormatError
from ale.task.models import (
    TB2_AGENT_TIMEOUT_SEC,
    TB2_EXTRA_KEY,
    TB2_VERIFIER_TIMEOUT_SEC,
    Task,
    TaskEnvironment,
    TaskMetadata,
)

TASK_FILE = "task.toml"
INSTRUCTION_FILE = "instruction.md"
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
    if data.get("steps"):
        raise TaskFormatError(
            f"{f.where(task_file)} is a multi-step task ([[steps]], Harbor 1.4), which rock "
            "does not run yet; give its steps as separate tasks for now.",
            task_file,
        )
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
    env_table = dict(sections["environment"])
    environment = _environment(task_dir, task_file, env_table)

    for name, rest in (("agent", agent), ("verifier", verifier), ("environment", env_table)):
        if rest:
            unknown[name] = rest
    if unknown:
        metadata.extra[TB2_EXTRA_KEY] = unknown

    test_script = task_dir / "tests" / "test.sh"
    if not test_script.is_file():
        raise TaskFormatError(
            f"{task_dir} has no tests/test.sh; add the script that runs the tests "
            "and writes the reward to /logs/verifier/reward.txt.",
            test_script,
        )
    return Task(
        id=task_dir.name,
        source_format="tb2",
        path=task_dir,
        instruction=_instruction(task_dir / INSTRUCTION_FILE),
        environment=environment,
        tests_dir=test_script.parent,
        test_script=test_script,
        solution=_solution(task_dir / "solution"),
        agent_timeout_sec=TB2_AGENT_TIMEOUT_SEC if agent_timeout is None else agent_timeout,
        test_timeout_sec=(
            TB2_VERIFIER_TIMEOUT_SEC if verifier_timeout is None else verifier_timeout
        ),
        verifier_env=verifier_env,
        metadata=metadata,
    )


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


def _environment(task_dir: Path, task_file: Path, table: dict[str, Any]) -> TaskEnvironment:
    """Read ``[environment]`` (popping the known keys from ``table``) and the files."""

    def take(key: str) -> Any:
        return table.pop(key, None)

    image = f.opt_str(task_file, "environment.docker_image", take("docker_image"))
    memory_mb = f.positive_int(task_file, "environment.memory_mb", take("memory_mb"))
    memory = f.size_mb(task_file, "environment.memory", take("memory"))
    storage_mb = f.positive_int(task_file, "environment.storage_mb", take("storage_mb"))
    storage = f.size_mb(task_file, "environment.storage", take("storage"))
    allow_internet = f.opt_bool(task_file, "environment.allow_internet", take("allow_internet"))

    env_dir = task_dir / "environment"
    dockerfile = env_dir / "Dockerfile"
    compose = next((env_dir / name for name in _COMPOSE_NAMES if (env_dir / name).is_file()), None)
    if not dockerfile.is_file() and compose is None and image is None:
        raise TaskFormatError(
            f"{task_dir} has no environment/Dockerfile, no environment/docker-compose.yaml "
            "and no [environment] docker_image in task.toml; add one of them.",
            dockerfile,
        )
    return TaskEnvironment(
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


def _solution(solution_dir: Path) -> Path | None:
    for name in ("solve.sh", "solution.yaml"):
        if (solution_dir / name).is_file():
            return solution_dir / name
    return None
