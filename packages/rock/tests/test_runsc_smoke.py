"""The gVisor runtime that `make engine` installs, checked on what sandboxes do every day:
list and stat files, find, python3, pip from the verifier toolchain's wheelhouse, and one
task of datasets/terminal-bench-local solved by its oracle, all under runsc. Debian
bookworm's runsc (0.0~20221219) failed the first of these ("Invalid argument" from statx)."""

from __future__ import annotations

import asyncio
import json
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker
import pytest

from rock.backends.docker import DockerBackend
from rock.backends.docker_sandbox import DockerSandbox
from rock.bench.harness import Harness
from rock.bench.images import ImageBuilder, ImageMap
from rock.bench.options import BenchOptions
from rock.models import SandboxSpec
from rock.verifier import toolchain

pytestmark = pytest.mark.docker

DATASET = Path(__file__).resolve().parents[3] / "datasets" / "terminal-bench-local"
ORACLE_TASK = "csv-sales-report"


@pytest.fixture(scope="module")
def backend(docker_client: docker.DockerClient) -> DockerBackend:
    return DockerBackend(docker_client, daemon_id="pytest")


@pytest.fixture(scope="module")
def gvisor(backend: DockerBackend) -> Iterator[DockerSandbox]:
    with backend.create(SandboxSpec(runtime="runsc", memory_mb=512)) as sb:
        yield sb


@pytest.mark.parametrize(
    "command",
    [
        "ls -la /",
        "ls -la /tmp /root /etc >/dev/null",
        "stat / /etc/passwd",
        "find /etc -maxdepth 2 -name passwd | grep -qx /etc/passwd",
        'python3 -c \'import os, pathlib; print(sorted(os.listdir("/"))[:3]); '
        'print(len(list(pathlib.Path("/usr/lib/python3.11").rglob("*.py"))))\'',
    ],
)
def test_runsc_lists_stats_and_runs_python(gvisor: DockerSandbox, command: str) -> None:
    result = gvisor.exec(command, timeout=60)
    assert result.exit_code == 0, (result.stdout_text, result.stderr_text)


def _wheel(directory: Path, name: str = "rocksmoke", version: str = "1.0") -> Path:
    """A pure-Python wheel built here, holding one module."""
    dist = f"{name}-{version}.dist-info"
    path = directory / f"{name}-{version}-py3-none-any.whl"
    directory.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr(f"{name}.py", "GREETING = 'installed under gVisor'\n")
        zf.writestr(
            f"{dist}/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
        )
        zf.writestr(
            f"{dist}/WHEEL",
            "Wheel-Version: 1.0\nGenerator: rock-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        )
        zf.writestr(
            f"{dist}/RECORD", f"{name}.py,,\n{dist}/METADATA,,\n{dist}/WHEEL,,\n{dist}/RECORD,,\n"
        )
    return path


def test_pip_installs_from_the_toolchain_s_wheelhouse_under_runsc(
    backend: DockerBackend, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(toolchain, "wheelhouse", lambda: tmp_path / "wheelhouse")
    toolchain.add_wheels(_wheel(tmp_path / "wheels").parent)
    with backend.create(SandboxSpec(runtime="runsc", memory_mb=512)) as sb:
        toolchain.install(sb)
        result = sb.exec(
            f"export PATH={toolchain.TOOLCHAIN_DIR}/bin:$PATH PIP_BREAK_SYSTEM_PACKAGES=1; "
            "pip install rocksmoke && python3 -c 'import rocksmoke; print(rocksmoke.GREETING)'",
            timeout=120,
        )
    assert result.exit_code == 0, (result.stdout_text, result.stderr_text)
    assert result.stdout_text.splitlines()[-1] == "installed under gVisor"


class _RunscBackend(DockerBackend):
    """The docker backend with every sandbox on gVisor (the harness asks for runc's)."""

    def create(
        self, spec: SandboxSpec | None = None, *, sandbox_id: str | None = None
    ) -> DockerSandbox:
        spec = (spec or SandboxSpec()).model_copy(update={"runtime": "runsc"})
        return super().create(spec, sandbox_id=sandbox_id)


def test_a_local_task_s_oracle_passes_under_runsc(
    docker_client: docker.DockerClient, tmp_path: Path
) -> None:
    harness = Harness(
        _RunscBackend(docker_client, daemon_id="pytest"),
        ImageBuilder(docker_client, ImageMap.load(user_file=None)),
        BenchOptions(allow_internet=False),
    )
    out = tmp_path / "run"
    asyncio.run(harness.run(DATASET, out, agent="oracle", task_ids=[ORACLE_TASK]))
    trial: dict[str, Any] = json.loads((out / f"{ORACLE_TASK}.1-of-1" / "results.json").read_text())
    assert trial["is_resolved"] is True, json.dumps(trial, indent=1)[:3000]
