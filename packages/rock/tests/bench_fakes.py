"""Fakes and task builders shared by the rock bench unit tests."""

from __future__ import annotations

import importlib.util
import io
import tarfile
from pathlib import Path
from types import ModuleType
from typing import Any

from docker.errors import APIError, ImageNotFound

import rock.verifier.toolchain as toolchain
from ale.task import Task, load_task
from rock.bench.harness import (
    trial_name,
)
from rock.bench.results import (
    TrialResults,
)
from rock.models import ExecResult

SHIM_PATH = Path(toolchain.__file__).with_name("shim.py")

TASK_TOML = """\
version = "1.0"

[metadata]
difficulty = "easy"
category = "files"

[agent]
timeout_sec = 120.0

[verifier]
timeout_sec = 60.0
"""


# -- helpers ---------------------------------------------------------------------------------
def make_task(
    root: Path,
    name: str,
    *,
    toml: str = TASK_TOML,
    instruction: str = "Write hello to /app/out.txt.\n",
    dockerfile: str | None = "FROM python:3.12-slim\nWORKDIR /app\n",
    compose: str | None = None,
    test_sh: str | None = "#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n",
    solution: str | None = None,
    files: dict[str, str] | None = None,
) -> Path:
    """A Terminal-Bench 2.0 task directory ``root/name``; ``None`` leaves a file out."""
    task_dir = root / name
    (task_dir / "environment").mkdir(parents=True)
    (task_dir / "task.toml").write_text(toml)
    if instruction is not None:
        (task_dir / "instruction.md").write_text(instruction)
    if dockerfile is not None:
        (task_dir / "environment" / "Dockerfile").write_text(dockerfile)
    if compose is not None:
        (task_dir / "environment" / "docker-compose.yaml").write_text(compose)
    for rel, text in (files or {}).items():
        path = task_dir / "environment" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    if test_sh is not None:
        (task_dir / "tests").mkdir()
        (task_dir / "tests" / "test.sh").write_text(test_sh)
    if solution is not None:
        (task_dir / "solution").mkdir()
        (task_dir / "solution" / "solve.sh").write_text(solution)
    return task_dir


def trial(
    task_id: str,
    attempt: int = 1,
    resolved: bool | None = True,
    *,
    n_attempts: int = 1,
    **fields: Any,
) -> TrialResults:
    return TrialResults(
        id=f"{task_id}-{attempt}",
        trial_name=trial_name(task_id, attempt, n_attempts),
        task_id=task_id,
        attempt=attempt,
        instruction="do it",
        is_resolved=resolved,
        agent="nop",
        **fields,
    )


def load_shim() -> ModuleType:
    spec = importlib.util.spec_from_file_location("rock_bench_verifier_shim", SHIM_PATH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class FakeImages:
    """Local images, and a registry some can be pulled from (empty: offline)."""

    def __init__(self, present: dict[str, str], registry: dict[str, str] | None = None) -> None:
        self.present = present
        self.registry = registry or {}
        self.pulls: list[str] = []

    def get(self, ref: str) -> Any:
        if ref not in self.present:
            raise ImageNotFound(f"no such image: {ref}")
        return type("Image", (), {"id": self.present[ref]})()

    def pull(self, ref: str) -> Any:
        self.pulls.append(ref)
        if ref not in self.registry:
            raise APIError(f"Get https://registry-1.docker.io/v2/: lookup: no such host ({ref})")
        self.present[ref] = self.registry[ref]
        return self.get(ref)


class FakeClient:
    def __init__(
        self, present: dict[str, str] | None = None, registry: dict[str, str] | None = None
    ) -> None:
        self.images = FakeImages(present or {}, registry)


class FakeSandbox:
    """Answers exec with a fixed result and read_file from ``files``."""

    def __init__(self, result: ExecResult, files: dict[str, bytes] | None = None) -> None:
        self.result = result
        self.files = files or {}
        self.commands: list[tuple[Any, dict[str, Any]]] = []
        self.archives: list[tuple[str, list[str]]] = []
        """Each ``put_archive``: the directory and the archive's member names."""

    def exec(self, command: Any, **kwargs: Any) -> ExecResult:
        self.commands.append((command, kwargs))
        return self.result

    def run(self, request: Any) -> ExecResult:
        self.commands.append((request.command, {"cwd": request.cwd}))
        return self.result

    def read_file(self, path: str) -> bytes:
        if path not in self.files:
            raise FileNotFoundError(path)
        return self.files[path]

    def put_archive(self, directory: str, data: bytes) -> None:
        with tarfile.open(fileobj=io.BytesIO(data)) as tar:
            self.archives.append((directory, sorted(tar.getnames())))

    def get_archive(self, path: str) -> bytes:
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w"):
            pass  # nothing there: an empty archive
        return buf.getvalue()


def tb2_task(tmp_path: Path) -> Task:
    """A loaded 2.0 task named hello."""
    return load_task(make_task(tmp_path, "hello"))


class KillsItsFirstSandbox:
    """An agent (``bench_fakes:KillsItsFirstSandbox``) whose first trial loses its sandbox
    (the container is killed under it: a harness fault) and whose later trials do the work."""

    name = "kills-first"
    runs = 0

    def __init__(self, **_: Any) -> None:
        pass

    async def run(self, instruction: str, sandbox: Any, **_: Any) -> Any:
        import docker

        from ale.trajectory import AgentInfo, Trajectory

        KillsItsFirstSandbox.runs += 1
        if KillsItsFirstSandbox.runs == 1:
            engine = docker.from_env()
            mine = {"label": f"dev.ale.rock.sandbox={sandbox.id}"}  # its own (not a test's beside)
            for container in engine.containers.list(filters=mine):
                container.kill()
        sandbox.exec("echo hello > /app/out.txt", timeout=30)
        return Trajectory(agent=AgentInfo(name=self.name))
