"""Harbor itself (0.26.0, in its own venv) running Terminal-Bench tasks on rock through rock's
native Harbor environment: ``harbor run --environment-import-path
rock.harbor:RockEnvironment`` against a real rock daemon, offline."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from rock.client import Client
from rock.synth.wiring import wait_for_daemon

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
from harbor_env import HARBOR, ensure_rock_in_harbor

ROOT = Path(__file__).resolve().parents[1]
TASKS = ROOT / "datasets" / "terminal-bench-local"
# One worker runs the module: its daemon fixture, and the install into Harbor's venv, once.
pytestmark = [pytest.mark.docker, pytest.mark.xdist_group("harbor-on-rock")]


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A rock daemon of its own home; its home (Harbor finds it by ROCK_HOME)."""
    ensure_rock_in_harbor(ROOT)
    home = tmp_path_factory.mktemp("harbor-rock") / "home"
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    log = (home.parent / "serve.log").open("wb")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "rock.cli",
            "serve",
            "--home",
            str(home),
            "--port",
            str(port),
            "--e2b-stand-ins",
        ],
        stdout=log,
        stderr=log,
    )
    wait_for_daemon(home, proc, timeout=120)
    yield home
    proc.send_signal(signal.SIGTERM)
    proc.wait(60)


def _harbor(
    home: Path, jobs: Path, agent: str, *names: str, path: Path = TASKS, e2b: bool = False
) -> list[dict]:
    """``harbor run`` on rock (its native environment, or with ``e2b`` Harbor's E2B one
    pointed at the daemon): each trial's result.json."""
    include = [a for n in names for a in ("-i", n)]
    env = {**os.environ, "ROCK_HOME": str(home), "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    where = ["--environment-import-path", "rock.harbor:RockEnvironment"]
    if e2b:
        url = json.loads((home / "daemon.json").read_text())["url"]
        token = (home / "token").read_text().strip()
        env |= {"E2B_API_URL": url, "E2B_SANDBOX_URL": url, "E2B_API_KEY": token}
        where = ["--env", "e2b"]
    job = f"{agent}-{'e2b' if e2b else 'rock'}"
    done = subprocess.run(
        [HARBOR, "run", "--path", path, "--agent", agent, *include, *where,
         "--n-concurrent", "2", "--jobs-dir", jobs, "--job-name", job, "--yes", "--quiet"],
        env=env, capture_output=True, text=True, timeout=900, cwd=jobs.parent,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return [json.loads(p.read_text()) for p in sorted((jobs / job).glob("*/result.json"))]


def _reward(result: dict) -> float | None:
    return ((result.get("verifier_result") or {}).get("rewards") or {}).get("reward")


def test_harbor_runs_tasks_on_rock_and_leaves_nothing(daemon: Path, tmp_path: Path) -> None:
    """The oracle passes two tasks (their tests fetch pytest: rock's offline stand-ins serve
    it), doing nothing fails them, and no sandbox of either run is left."""
    names = ("csv-sales-report", "sudoku-solver")
    solved = _harbor(daemon, tmp_path / "jobs", "oracle", *names)
    assert sorted(r["task_name"] for r in solved) == sorted(names)
    assert [_reward(r) for r in solved] == [1.0, 1.0], [r.get("exception_info") for r in solved]
    idle = _harbor(daemon, tmp_path / "jobs", "nop", names[0])
    assert [_reward(r) for r in idle] == [0.0]
    with Client(home=daemon) as client:
        assert client.list(state=["pending", "starting", "ready", "busy", "paused"]) == []


def test_harbor_s_e2b_environment_runs_tasks_on_rock(daemon: Path, tmp_path: Path) -> None:
    """``harbor run --env e2b`` with E2B's settings pointed at the daemon: Harbor builds an
    E2B template from each task's Dockerfile through the SDK, starts a sandbox from it and
    runs the trial through envd; the oracle passes both (the daemon's --e2b-stand-ins serve
    the tests' pytest offline), doing nothing fails, and nothing is left running."""
    names = ("csv-sales-report", "sudoku-solver")
    solved = _harbor(daemon, tmp_path / "jobs", "oracle", *names, e2b=True)
    assert sorted(r["task_name"] for r in solved) == sorted(names)
    assert [_reward(r) for r in solved] == [1.0, 1.0], [r.get("exception_info") for r in solved]
    idle = _harbor(daemon, tmp_path / "jobs", "nop", names[0], e2b=True)
    assert [_reward(r) for r in idle] == [0.0]
    with Client(home=daemon) as client:
        assert client.list(state=["pending", "starting", "ready", "busy", "paused"]) == []


def test_a_dockerfile_that_cannot_build_is_the_trial_s_one_sentence(
    daemon: Path, tmp_path: Path
) -> None:
    """A task whose Dockerfile fails is a build failure Harbor does not retry, with the
    failing step's lines; no sandbox is made for it."""
    tasks = tmp_path / "tasks"
    shutil.copytree(TASKS / "csv-sales-report", tasks / "broken-build")
    (tasks / "broken-build" / "environment" / "Dockerfile").write_text(
        "FROM python:3.11-slim\nRUN echo cannot-build >&2; exit 3\n"
    )
    (result,) = _harbor(daemon, tmp_path / "jobs", "oracle", "broken-build", path=tasks)
    failure = result["exception_info"]
    assert failure["exception_type"] == "SandboxBuildFailedError"
    assert "docker build of rock-bench/" in failure["exception_message"]
    assert "cannot-build" in failure["exception_message"]
    with Client(home=daemon) as client:
        assert client.list(state=["pending", "starting", "ready", "busy", "paused"]) == []
