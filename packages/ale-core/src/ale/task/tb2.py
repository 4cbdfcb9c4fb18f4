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

import re
import unicodedata
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ale.atif import AtifError, read_atif
from ale.task import _fields as f
from ale.task._tb2_tables import (
    read_artifacts,
    read_environment,
    read_healthcheck,
    read_hooks,
    read_min_reward,
    read_phase_network,
    read_user,
    read_verifier,
    substituted,
)
from ale.task.errors import TaskFormatError
from ale.task.models import (
    TB2_AGENT_TIMEOUT_SEC,
    TB2_EXTRA_KEY,
    TB2_VERIFIER_TIMEOUT_SEC,
    CollectHook,
    Task,
    TaskArtifact,
    TaskEnvironment,
    TaskMetadata,
    TaskStep,
    TaskVerifier,
)

TASK_FILE = "task.toml"
INSTRUCTION_FILE = "instruction.md"
PRIOR_TRAJECTORY_FILE = "trajectory.json"
"""An ATIF trajectory beside an instruction: the conversation the agent starts from."""
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
    data = _read_task_toml(task_dir, task_file)
    steps_data = data.pop("steps", None) or []
    if not isinstance(steps_data, list) or not all(isinstance(t, dict) for t in steps_data):
        raise f.wrong(task_file, "steps", "an array of tables ([[steps]])", steps_data)
    strategy = f.opt_str(
        task_file, "multi_step_reward_strategy", data.pop("multi_step_reward_strategy", None)
    )
    if strategy not in (None, "mean", "final"):
        raise f.wrong(task_file, "multi_step_reward_strategy", '"mean" or "final"', strategy)
    wide = _task_wide(task_dir, task_file, data)
    _check_names(task_file, steps_data)
    steps = [_step(task_dir, task_file, i, table, wide) for i, table in enumerate(steps_data)]
    instruction, test_script = _instruction_and_test_script(task_dir, wide, steps)
    return Task(
        id=task_dir.name,
        source_format="tb2",
        path=task_dir,
        instruction=instruction,
        environment=wide.environment,
        tests_dir=task_dir / "tests" if (task_dir / "tests").is_dir() else None,
        test_script=test_script,
        solution=_solution(task_dir / "solution"),
        agent_timeout_sec=wide.agent_timeout,
        test_timeout_sec=(
            TB2_VERIFIER_TIMEOUT_SEC if wide.verifier_timeout is None else wide.verifier_timeout
        ),
        verifier_env=wide.verifier_env,
        metadata=wide.metadata,
        steps=steps,
        reward_strategy="final" if strategy == "final" else "mean",
        verifier=wide.verifier,
        artifacts=wide.artifacts,
        collect=wide.collect,
        solution_env=wide.solution_env,
        agent_user=wide.agent_user,
        verifier_user=wide.verifier_user,
        prior_trajectory=_prior_trajectory(task_dir, steps[0].name if steps else None),
        agent_network=wide.agent_network,
        verifier_network=wide.verifier_network,
    )


def _read_task_toml(task_dir: Path, task_file: Path) -> dict[str, Any]:
    """task.toml's tables, less its version, checked to be one this loader knows."""
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
    return data


@dataclass
class _TaskWide:
    """What task.toml sets for the whole task; a step of a multi-step task takes the
    agent timeout, verifier, hooks, artifacts, users and networks from here unless it
    sets its own."""

    metadata: TaskMetadata
    agent_timeout: float
    verifier_timeout: float | None
    verifier_env: dict[str, str]
    verifier: TaskVerifier | None
    collect: list[CollectHook]
    agent_user: str | None
    verifier_user: str | None
    agent_network: bool | None
    verifier_network: bool | None
    solution_env: dict[str, str]
    environment: TaskEnvironment
    artifacts: list[TaskArtifact]


def _task_wide(task_dir: Path, task_file: Path, data: dict[str, Any]) -> _TaskWide:
    """Read the task-level tables, popping them from ``data``; what ale does not model
    (``data``'s other keys, the sections' unknown keys) goes to ``metadata.extra``."""
    artifacts = read_artifacts(task_file, "artifacts", data.pop("artifacts", None))
    sections = {name: f.table(task_file, name, data.pop(name, None)) for name in _SECTIONS}
    unknown: dict[str, Any] = data  # what is left of the top level
    agent, verifier = dict(sections["agent"]), dict(sections["verifier"])
    env_table = dict(sections["environment"])
    # the hooks, users and [solution] stay in the task's extras, so a task written again
    # keeps them as they were
    wide = _TaskWide(
        metadata=_metadata(task_file, dict(sections["metadata"])),
        agent_timeout=(
            f.positive(task_file, "agent.timeout_sec", agent.pop("timeout_sec", None))
            or TB2_AGENT_TIMEOUT_SEC
        ),
        verifier_timeout=f.positive(
            task_file, "verifier.timeout_sec", verifier.pop("timeout_sec", None)
        ),
        verifier_env=f.str_dict(task_file, "verifier.env", verifier.pop("env", None)),
        verifier=read_verifier(task_dir, task_file, "verifier", verifier, task_dir / "tests", None),
        collect=read_hooks(task_file, "verifier.collect", verifier.get("collect")),
        agent_user=read_user(task_file, "agent.user", agent.get("user")),
        verifier_user=read_user(task_file, "verifier.user", verifier.get("user")),
        agent_network=read_phase_network(task_file, "agent", agent),
        verifier_network=read_phase_network(task_file, "verifier", verifier),
        solution_env=substituted(
            task_file,
            "solution.env",
            f.str_dict(
                task_file,
                "solution.env",
                f.table(task_file, "solution", data.get("solution")).get("env"),
            ),
        ),
        environment=read_environment(task_dir, task_file, env_table),
        artifacts=artifacts,
    )
    for name, rest in (("agent", agent), ("verifier", verifier), ("environment", env_table)):
        if rest:
            unknown[name] = rest
    if unknown:
        wide.metadata.extra[TB2_EXTRA_KEY] = unknown
    return wide


def _instruction_and_test_script(
    task_dir: Path, wide: _TaskWide, steps: list[TaskStep]
) -> tuple[str, Path]:
    """The task's instruction and verifier script: its steps' joined when it has steps,
    else instruction.md and tests/test.sh (test.bat for a Windows task)."""
    test_script = task_dir / "tests" / "test.sh"
    if wide.environment.os == "windows":  # Harbor's Windows tasks test with test.bat
        test_script = test_script.with_suffix(".bat")
    if steps:
        instruction = "\n\n".join(f"## Step {s.name}\n\n{s.instruction.strip()}" for s in steps)
        return instruction, next((s.test_script for s in steps if s.test_script), test_script)
    instruction = _instruction(task_dir / INSTRUCTION_FILE)
    if not test_script.is_file() and not (wide.verifier and wide.verifier.bundled):
        raise TaskFormatError(
            f"{task_dir} has no tests/{test_script.name}; add the script that runs the "
            "tests and writes the reward to /logs/verifier/reward.txt.",
            test_script,
        )
    return instruction, test_script


def _step(
    task_dir: Path, task_file: Path, index: int, table: dict[str, Any], wide: _TaskWide
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
        **wide.verifier_env,
        **f.str_dict(task_file, f"{field}.verifier.env", verifier.pop("env", None)),
    }
    step_tests = step_dir / "tests"
    separate = read_verifier(
        task_dir, task_file, f"{field}.verifier", verifier, step_tests, wide.verifier
    )
    script = _step_test_script(task_dir, name, step_tests, separate)
    solution = _solution(step_dir / "solution") or _solution(task_dir / "solution")
    return TaskStep(
        name=name,
        instruction=_instruction(step_dir / INSTRUCTION_FILE),
        tests_dir=step_tests if step_tests.is_dir() else None,
        test_script=script,
        solution=solution,
        workdir=step_dir / "workdir" if (step_dir / "workdir").is_dir() else None,
        agent_timeout_sec=wide.agent_timeout if own_agent is None else own_agent,
        test_timeout_sec=TB2_VERIFIER_TIMEOUT_SEC if own_test is None else own_test,
        verifier_env=env,
        min_reward=read_min_reward(task_file, f"{field}.min_reward", table.get("min_reward")),
        verifier=separate,
        healthcheck=read_healthcheck(task_file, f"{field}.healthcheck", table.get("healthcheck")),
        collect=[
            *wide.collect,
            *read_hooks(task_file, f"{field}.verifier.collect", verifier.pop("collect", None)),
        ],
        artifacts=[
            *wide.artifacts,
            *read_artifacts(task_file, f"{field}.artifacts", table.get("artifacts")),
        ],
        agent_user=(
            read_user(task_file, f"{field}.agent.user", agent.get("user")) or wide.agent_user
        ),
        verifier_user=(
            read_user(task_file, f"{field}.verifier.user", verifier.pop("user", None))
            or wide.verifier_user
        ),
        agent_network=_either(
            read_phase_network(task_file, f"{field}.agent", agent), wide.agent_network
        ),
        verifier_network=_either(
            read_phase_network(task_file, f"{field}.verifier", verifier),
            wide.verifier_network,
        ),
    )


def _step_test_script(
    task_dir: Path, name: str, step_tests: Path, separate: TaskVerifier | None
) -> Path | None:
    """The step's tests/test.sh, else the task's; one of them unless a separate verifier
    brings its own tests."""
    script = next(
        (p for p in (step_tests / "test.sh", task_dir / "tests" / "test.sh") if p.is_file()), None
    )
    if script is None and not (separate and separate.bundled):
        raise TaskFormatError(
            f"{task_dir} has no steps/{name}/tests/test.sh and no tests/test.sh for step "
            f"{name!r}; add the script that checks the step and writes its reward.",
            step_tests / "test.sh",
        )
    return script


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


def _solution(solution_dir: Path) -> Path | None:
    for name in ("solve.sh", "solution.yaml"):
        if (solution_dir / name).is_file():
            return solution_dir / name
    return None
