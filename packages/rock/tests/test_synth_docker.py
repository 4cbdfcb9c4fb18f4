"""rock's synthesis runner and `rock synth` on a real Docker engine."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import docker
import pytest

from ale.agents import load_agent
from ale.synth.expert import ExpertRun
from ale.synth.family import CATEGORIES, draft_for, get_family
from ale.synth.render import render_task
from ale.task import load_task
from ale.trajectory import FailureMode, StepMark
from rock.backends.docker import DockerBackend
from rock.bench.agents import NopAgent, OracleAgent
from rock.episode_runner import FreshSandboxes, MaterializeError, PoolRunner, materialize
from rock.errors import DaemonUnreachable
from rock.pool_image import ensure_pool_image
from rock.synth.wiring import private_daemon
from rock.verifier.run import AGENT_LOGS, VERIFIER_LOGS

pytestmark = pytest.mark.docker
ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def pool_image(docker_client: docker.DockerClient) -> str:
    return ensure_pool_image(docker_client)


@pytest.fixture
def fresh(pool_image: str) -> FreshSandboxes:
    return FreshSandboxes(DockerBackend())


def _task(tmp_path: Path, family: str = "csv-aggregate", seed: int = 5, level: str = "medium"):
    draft = draft_for(family, seed, level)
    path = render_task(
        draft,
        tmp_path / f"{family}-{seed}",
        family=family,
        category=get_family(family).category,
        difficulty=level,
        seed=seed,
    )
    return load_task(path), draft


def test_materialize_applies_copy_run_and_workdir(tmp_path: Path, fresh: FreshSandboxes) -> None:
    task, _ = _task(tmp_path)
    env = task.path / "environment"
    (env / "rootfs" / "opt").mkdir()
    (env / "rootfs" / "opt" / "tool.sh").write_text("echo tool\n")
    os.chmod(env / "rootfs" / "opt" / "tool.sh", 0o750)
    text = (
        (env / "Dockerfile")
        .read_text()
        .replace("WORKDIR /app", "RUN echo built > /opt/marker\nWORKDIR /app/sub")
    )
    (env / "Dockerfile").write_text(text)
    box = fresh.acquire()
    try:
        assert materialize(task, box) == "/app/sub"
        assert box.exec("stat -c %a /opt/tool.sh && cat /opt/marker").stdout_text == "750\nbuilt\n"
        assert box.exec("ls /app").stdout_text.split() == sorted(
            [p.name for p in (env / "rootfs" / "app").iterdir()] + ["sub"]
        )
    finally:
        fresh.release(box)


def test_materialize_makes_the_workdirs_before_any_run_with_the_log_folders(
    tmp_path: Path, fresh: FreshSandboxes
) -> None:
    """One exec fewer per episode: a WORKDIR before the first RUN is made with the log
    folders; one after a RUN is made in its turn, so that RUN does not see it early."""
    task, _ = _task(tmp_path)
    dockerfile = task.path / "environment" / "Dockerfile"
    dockerfile.write_text(
        dockerfile.read_text() + "RUN test ! -e /late && test -d /app\nWORKDIR /late\n"
    )
    box = fresh.acquire()
    commands: list[object] = []
    real = box.exec
    box.exec = lambda command, **kw: commands.append(command) or real(command, **kw)  # type: ignore[method-assign]
    try:
        assert materialize(task, box) == "/late"
    finally:
        fresh.release(box)
    assert commands[0] == ["mkdir", "-p", AGENT_LOGS, VERIFIER_LOGS, "/app"]
    assert commands[1:] == ["test ! -e /late && test -d /app", ["mkdir", "-p", "/late"]]


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("ENV A=1", "ENV cannot be applied"),
        ("COPY --chown=1 a b", "plain `COPY SRC DEST`"),
        ("COPY ../../etc /x", "not in its context"),
    ],
)
def test_materialize_refuses_what_it_cannot_apply(
    tmp_path: Path, fresh: FreshSandboxes, line: str, message: str
) -> None:
    task, _ = _task(tmp_path)
    dockerfile = task.path / "environment" / "Dockerfile"
    dockerfile.write_text(dockerfile.read_text() + line + "\n")
    box = fresh.acquire()
    try:
        with pytest.raises(MaterializeError, match=message):
            materialize(task, box)
        other = task.path / "environment" / "Dockerfile"
        other.write_text("FROM python:3.12\n")
        with pytest.raises(MaterializeError, match=r"builds FROM python:3\.12"):
            materialize(task, box)
    finally:
        fresh.release(box)


async def test_episodes_oracle_nop_expert_and_replay(tmp_path: Path, fresh: FreshSandboxes) -> None:
    task, draft = _task(tmp_path)
    runner = PoolRunner(fresh)
    oracle = await runner.episode(task, OracleAgent(task))
    nop = await runner.episode(task, NopAgent())
    assert oracle.passed and not nop.passed and nop.reward == 0.0 and nop.error is None
    expert = load_agent("iflow", expert=ExpertRun(draft.expert(), mistake=True))
    solved = await runner.episode(task, expert, logs_dir=tmp_path / "logs")
    assert solved.passed, solved.error
    t = solved.trajectory
    assert t.reward == 1.0 and t.verifier.passed and t.verifier.tests
    # csv-aggregate's checks are plain: python3 ran them through the task's run_checks.py,
    # whose summary names each check as pytest's would
    assert (task.path / "tests" / "run_checks.py").is_file()
    assert "(run_checks)" in (t.verifier.stdout or "")
    assert {x.status for x in t.verifier.tests} == {"passed"}
    assert {x.name.split("::")[-1] for x in t.verifier.tests} == set(
        re.findall(r"^def (test\w*)", draft.tests, re.M)
    )
    assert any(s.mark is StepMark.MISTAKE for s in t.steps)
    assert (tmp_path / "logs" / "verifier" / "stdout.txt").exists()
    replay = await runner.episode(task, load_agent("iflow", replay=t))
    assert replay.reward == 1.0
    assert runner.episodes == 4


def _rock(*args: str, cwd: Path = ROOT, timeout: int = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rock.cli", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=timeout,
        check=False,
    )


def test_cli_run_on_a_warm_pool_then_stats_and_resume(tmp_path: Path, pool_image: str) -> None:
    config = tmp_path / "tiny.yaml"
    config.write_text(
        "name: tiny\nseed: 7\ntarget: 3\noversample: 1.0\nconcurrency: 2\nmistake_rate: 0.5\n"
        "families: [csv-aggregate]\n"
        "mix:\n  difficulty: {easy: 0.34, medium: 0.33, hard: 0.33}\n"
    )
    out, work = tmp_path / "tiny", tmp_path / "work"
    run = _rock(
        "synth", "run", str(config), "--output", str(out), "--work", str(work), "--keep-work"
    )
    assert run.returncode == 0, run.stderr[-3000:]
    for stage in ("[1/9] generate", "[4/9] verify", "[5/9] trajectory", "[7/9] replay"):
        assert stage in run.stderr
    assert "tiny: 3 tasks written" in run.stdout
    manifest = json.loads((out / "manifest.json").read_text())
    assert len(manifest["tasks"]) == 3 and manifest["counts"]["verify"]["kept"] == 3
    assert (out / "config.yaml").read_text() == config.read_text()
    stats = _rock("synth", "stats", str(out), "--json")
    assert stats.returncode == 0, stats.stderr
    assert json.loads(stats.stdout)["digests_ok"] is True
    again = _rock("synth", "run", str(config), "--output", str(out), "--work", str(work))
    assert again.returncode == 0, again.stderr[-3000:]
    assert "(3 already done)" in again.stderr and "0 sandbox episodes" in again.stdout
    assert json.loads((out / "manifest.json").read_text())["digests"] == manifest["digests"]
    assert not work.exists()  # removed after success without --keep-work


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("name: b\nseed: 1\ntarget: 3\nfamilies: [csv-agregate]\n", "did you mean 'csv-aggregate'"),
        (
            "name: b\nseed: 1\ntarget: 3\nfamilies: [csv-aggregate]\nmix:\n  difficulty: {easy: 0.7}\n",
            "sum to 0.7, not 1",
        ),
        (
            "name: b\nseed: 1\ntarget: 3\nfamilies: [csv-aggregate]\nagent: nobody\n",
            "no agent named 'nobody'",
        ),
        (
            "name: b\nseed: 1\ntarget: 3\nfamilies: [csv-aggregate]\nagent: expert\n",
            "agent: expert runs experts without an agent loop",
        ),
    ],
)
def test_cli_refuses_bad_configs_before_starting(tmp_path: Path, body: str, message: str) -> None:
    config = tmp_path / "bad.yaml"
    config.write_text(body)
    result = _rock("synth", "run", str(config), "--output", str(tmp_path / "never"))
    assert result.returncode == 2 and message in result.stderr
    assert result.stderr.count("\n") == 1 and not (tmp_path / "never").exists()


def test_cli_stats_of_a_directory_that_is_not_a_dataset(tmp_path: Path) -> None:
    result = _rock("synth", "stats", str(tmp_path))
    assert result.returncode == 2 and "has no manifest.json" in result.stderr


def test_cli_families_lists_at_least_twelve() -> None:
    result = _rock("synth", "families", "--json")
    rows: list[dict[str, Any]] = json.loads(result.stdout)
    assert len(rows) >= 12
    assert {r["category"] for r in rows} == set(CATEGORIES)
    assert sum(r["multi_turn"] for r in rows) >= 4


class _Raises:
    async def run(self, instruction: str, sandbox: Any, **kwargs: Any) -> Any:
        raise RuntimeError("the agent's own bug")


class _Sleeps:
    async def run(self, instruction: str, sandbox: Any, **kwargs: Any) -> Any:
        await asyncio.sleep(3600)


class _NoSandbox:
    """A sandbox source at its seam: acquiring fails with ``error``."""

    label = "none"

    def __init__(self, error: Exception) -> None:
        self.error = error

    def acquire(self) -> Any:
        raise self.error

    def release(self, sandbox: Any) -> None:
        pass

    def close(self) -> None:
        pass


async def test_episode_failures_are_values(tmp_path: Path, fresh: FreshSandboxes) -> None:
    """Every way an episode can fail says so as a FailureMode (what roll decides by), with
    its sentence beside it for a person."""
    task, _ = _task(tmp_path)
    runner = PoolRunner(fresh)
    raised = await runner.episode(task, _Raises())
    assert raised.failure == FailureMode.AGENT_ERROR and "own bug" in (raised.error or "")
    quick = task.model_copy(update={"agent_timeout_sec": 0.5})
    slept = await runner.episode(quick, _Sleeps())
    assert slept.failure == FailureMode.AGENT_TIMEOUT and slept.trajectory is None
    nop = await runner.episode(task, NopAgent())
    assert nop.failure is None and nop.reward == 0.0
    gone = await PoolRunner(_NoSandbox(DaemonUnreachable("no daemon at 127.0.0.1:1"))).episode(
        task, NopAgent()
    )
    assert gone.failure == FailureMode.DAEMON_UNAVAILABLE
    broken = await PoolRunner(_NoSandbox(RuntimeError("disk full"))).episode(task, NopAgent())
    assert broken.failure == FailureMode.SANDBOX_ERROR and "disk full" in (broken.error or "")


def test_a_private_daemon_s_home_goes_after_a_clean_exit_and_stays_after_a_failure_it_logged(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # its home lands here
    with private_daemon() as client:
        assert client.list() == []
    assert list(tmp_path.glob("rock-synth-*")) == []  # nothing left in the temp folder
    with pytest.raises(RuntimeError), private_daemon():
        raise RuntimeError("the run failed")  # the daemon had nothing to say
    assert list(tmp_path.glob("rock-synth-*")) == []
    with pytest.raises(RuntimeError), private_daemon():
        (home,) = tmp_path.glob("rock-synth-*")
        with (home / "daemon.log").open("a") as log:  # as the daemon's warnings are
            log.write("WARNING the engine did not answer\n")
        raise RuntimeError("the run failed")
    (kept,) = tmp_path.glob("rock-synth-*")  # kept for its log
    assert "did not answer" in (kept / "daemon.log").read_text()
