"""scripts/ensure-docker.sh: a no-op when an engine answers, and one sentence
naming what to do when it cannot make one answer."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "ensure-docker.sh"
TOOLS = ["bash", "id", "seq", "sleep", "dirname", "mkdir", "cat"]


@pytest.fixture
def bare_path() -> Iterator[Path]:
    """A PATH directory holding only the basic tools the script needs (no docker)."""
    bindir = Path(tempfile.mkdtemp(prefix="ale-bare-path-"))
    bindir.chmod(0o755)
    for tool in TOOLS:
        found = shutil.which(tool)
        assert found, tool
        (bindir / tool).symlink_to(found)
    yield bindir
    shutil.rmtree(bindir)


def _as_nobody(script_env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    setpriv, bash = shutil.which("setpriv"), shutil.which("bash")
    if os.geteuid() != 0 or setpriv is None or bash is None:
        pytest.fail("these tests drop to an unprivileged user with setpriv, which needs root")
    return subprocess.run(
        [setpriv, "--reuid=65534", "--regid=65534", "--clear-groups", bash, str(SCRIPT)],
        env=script_env,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.docker
def test_no_op_when_an_engine_answers() -> None:
    done = subprocess.run(["bash", str(SCRIPT)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "starting dockerd" not in done.stderr and "installing" not in done.stderr


def test_no_engine_and_nothing_installed_names_what_to_install(bare_path: Path) -> None:
    done = _as_nobody({"PATH": str(bare_path), "DOCKER_HOST": "unix:///nonexistent.sock"})
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [
        "No Docker engine answers and this is not Debian as root: install Docker Engine "
        "(https://docs.docker.com/engine/install/) and start it, then run this again."
    ]


def test_engine_installed_but_not_startable_says_start_the_service(bare_path: Path) -> None:
    dockerd = shutil.which("dockerd") or "/usr/sbin/dockerd"
    docker = shutil.which("docker")
    assert docker and Path(dockerd).exists(), "make test installs docker.io first"
    (bare_path / "dockerd").symlink_to(dockerd)
    (bare_path / "docker").symlink_to(docker)
    done = _as_nobody({"PATH": str(bare_path), "DOCKER_HOST": "unix:///nonexistent.sock"})
    assert done.returncode == 1
    assert (
        "no engine answers and this user cannot start it: start the Docker service" in done.stderr
    )
    assert len(done.stderr.strip().splitlines()) == 1


def test_another_engine_running_does_not_stand_for_the_default_one(tmp_path: Path) -> None:
    """The second engine's dockerd (the Ray tests') once kept this script from starting
    the default engine: it asked only whether any dockerd ran, then waited 60 s for an
    engine that nobody had started. Here a process named dockerd runs, the default
    engine's pid file names another program (left by an engine that did not stop), and the
    script must start its own dockerd, the stale pid file gone (dockerd refuses to start
    beside a pid file whose process lives)."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for tool in [*TOOLS, "nohup", "rm"]:
        found = shutil.which(tool)
        assert found, tool
        (bindir / tool).symlink_to(found)
    started = tmp_path / "started"
    # docker answers once "dockerd" has been started; that dockerd only says it was
    (bindir / "docker").write_text(f'#!/bin/bash\n[ -f "{started}" ]\n')
    (bindir / "dockerd").write_text(f'#!/bin/bash\n: > "{started}"\n')
    for fake in ("docker", "dockerd"):
        (bindir / fake).chmod(0o755)
    other = tmp_path / "other"
    other.mkdir()
    sleep = shutil.which("sleep")
    assert sleep
    shutil.copy(sleep, other / "dockerd")  # a process whose name is dockerd, as engine 2's
    another = subprocess.Popen([str(other / "dockerd"), "60"])
    pidfile = tmp_path / "docker.pid"
    pidfile.write_text(f"{os.getpid()}\n")  # this test's python, not a dockerd
    try:
        done = subprocess.run(
            ["bash", str(SCRIPT)],
            env={
                "PATH": str(bindir),
                "ALE_DOCKERD_LOG": str(tmp_path / "dockerd.log"),
                "ALE_DOCKERD_PIDFILE": str(pidfile),
            },
            capture_output=True,
            text=True,
            timeout=90,
        )
    finally:
        another.kill()
        another.wait()
    assert done.returncode == 0, done.stderr
    assert started.exists() and "starting dockerd" in done.stderr
    assert not pidfile.exists()
