"""SIGTERM and SIGHUP end a run as Ctrl+C does (:mod:`rock.interrupt`): a real signal to a real
process, then its clean-up has run; for `rock bench run` and `rock synth run`, no container of
the run is left and what finished is kept."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import docker
import pytest

from rock.backends.base import LABEL_DAEMON
from rock.bench.harness import LABEL_RUN
from rock.testing import PrivateDaemons, private_daemon_of

_CLEAN_ENV = ("ROCK_URL", "ROCK_TOKEN", "ROCK_HOME")
ROOT = Path(__file__).resolve().parents[3]


pytestmark = pytest.mark.xdist_group("ray")
"""Kept off the Ray tests' time: run beside test_ray_backend.py (pytest -n 2), a node agent
of its cluster died ("The actor died unexpectedly") in 4 runs of 4, from before this
session's changes too; the cause is not found yet. Serial with them, both pass."""


def _start(argv: list[str], *, sigint: signal.Handlers, cwd: Path) -> subprocess.Popen[bytes]:
    """``argv`` as a process of its own with SIGINT as asked (SIG_DFL: started from a
    terminal; SIG_IGN: a job started in the background) and SIGTERM and SIGHUP as the
    system's default, whatever this test run inherited."""

    def dispositions() -> None:
        signal.signal(signal.SIGINT, sigint)
        for sig in (signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, signal.SIG_DFL)

    env = {k: v for k, v in os.environ.items() if k not in _CLEAN_ENV}
    return subprocess.Popen(
        argv,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        cwd=cwd,
        preexec_fn=dispositions,
    )


def _wait_for(what: str, ready: Callable[[], bool], proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 600
    while not ready():
        if proc.poll() is not None:
            _, err = proc.communicate()
            pytest.fail(f"the run ended before {what}: {err.decode()[-3000:]}")
        assert time.monotonic() < deadline, f"no {what} within 600 s"
        time.sleep(0.2)


def _stop(proc: subprocess.Popen[bytes], sig: signal.Signals) -> tuple[int, str]:
    proc.send_signal(sig)
    return _ended(proc)


def _ended(proc: subprocess.Popen[bytes]) -> tuple[int, str]:
    """The exit status and stderr of ``proc``, which must end within 300 s."""
    try:
        _, err = proc.communicate(timeout=300)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
        pytest.fail(f"the process did not end once signalled: {err.decode()[-3000:]}")
    return proc.returncode, err.decode()


def _containers(client: docker.DockerClient, label: str, *, running: bool = False) -> list[str]:
    """Names of the containers with ``label`` (one engine call: a container removed while
    the list is made cannot fail it, as containers.list's inspection of each would)."""
    rows = client.api.containers(all=not running, filters={"label": label})
    return [name.lstrip("/") for row in rows for name in row.get("Names", [])[:1]]


def _sleeping(client: docker.DockerClient, label: str) -> bool:
    """Whether a running container with ``label`` runs the slow task's ``sleep 900``."""
    for name in _containers(client, label, running=True):
        with contextlib.suppress(docker.errors.APIError):  # gone meanwhile
            if any("sleep 900" in row[-1] for row in client.api.top(name)["Processes"]):
                return True
    return False


def _remove(client: docker.DockerClient, label: str) -> None:
    for name in _containers(client, label):
        with contextlib.suppress(docker.errors.NotFound):
            client.api.remove_container(name, force=True)


# the cases: the signal, and SIGINT as the process found it
FROM_A_TERMINAL = [
    pytest.param(signal.SIGTERM, signal.SIG_DFL, id="sigterm-from-a-terminal"),
    pytest.param(signal.SIGHUP, signal.SIG_DFL, id="sighup-from-a-terminal"),
]
IN_THE_BACKGROUND = [
    pytest.param(signal.SIGTERM, signal.SIG_IGN, id="sigterm-in-the-background"),
    pytest.param(signal.SIGHUP, signal.SIG_IGN, id="sighup-in-the-background"),
]


# --- the helper, in a process of its own -----------------------------------------------------

_PROGRAM = """
import asyncio, sys, time
from pathlib import Path
from rock.interrupt import Interruptible

marks, mode = Path(sys.argv[1]), sys.argv[2]

def mark(text):
    with marks.open("a") as f:
        f.write(text + "\\n")

def clean_up():
    mark("cleaning")
    while not (marks.parent / "go").exists():  # the test may signal again meanwhile
        time.sleep(0.05)
    mark("cleaned")

async def work():
    try:
        mark("started")
        await asyncio.sleep(600)
    finally:
        await asyncio.to_thread(clean_up)

def blocking():
    try:
        mark("started")
        time.sleep(600)
    finally:
        clean_up()

interrupts = Interruptible()
try:
    with interrupts:
        asyncio.run(work()) if mode == "async" else blocking()
except KeyboardInterrupt:
    mark("interrupted")
    sys.exit(interrupts.exit_status)
"""


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.is_file() else []


@pytest.mark.parametrize("mode", ["async", "blocking"])
@pytest.mark.parametrize(("sig", "sigint"), [*FROM_A_TERMINAL, *IN_THE_BACKGROUND])
def test_a_termination_signal_runs_the_clean_up_once_and_exits_as_the_shell_says(
    tmp_path: Path, mode: str, sig: signal.Signals, sigint: signal.Handlers
) -> None:
    marks = tmp_path / "marks"
    proc = _start([sys.executable, "-c", _PROGRAM, str(marks), mode], sigint=sigint, cwd=tmp_path)
    _wait_for("the work", lambda: _lines(marks) == ["started"], proc)
    proc.send_signal(sig)
    _wait_for("the clean-up", lambda: "cleaning" in _lines(marks), proc)
    proc.send_signal(sig)  # a closed terminal hangs up more than once: the clean-up goes on
    (tmp_path / "go").touch()
    status, err = _ended(proc)
    assert status == 128 + sig, err
    assert _lines(marks) == ["started", "cleaning", "cleaned", "interrupted"]


def test_a_signal_ignored_on_entry_stays_ignored(tmp_path: Path) -> None:
    """SIGHUP under nohup: the run goes on; SIGTERM still ends it."""
    marks = tmp_path / "marks"

    def nohup() -> None:
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)

    proc = subprocess.Popen(
        [sys.executable, "-c", _PROGRAM, str(marks), "async"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        preexec_fn=nohup,
    )
    _wait_for("the work", lambda: _lines(marks) == ["started"], proc)
    (tmp_path / "go").touch()
    proc.send_signal(signal.SIGHUP)  # had it been acted on, the status would say SIGHUP
    status, err = _stop(proc, signal.SIGTERM)
    assert status == 128 + signal.SIGTERM, err
    assert _lines(marks) == ["started", "cleaning", "cleaned", "interrupted"]


# --- rock bench run ---------------------------------------------------------------------------


def _task(root: Path, name: str, solve: str) -> None:
    task = root / name
    for sub in ("environment", "tests", "solution"):
        (task / sub).mkdir(parents=True)
    (task / "instruction.md").write_text("Write hello into /app/out.txt.\n")
    (task / "task.toml").write_text(
        textwrap.dedent(
            """\
            version = "1.0"
            [agent]
            timeout_sec = 900
            [verifier]
            timeout_sec = 60
            [environment]
            cpus = 1
            memory_mb = 512
            """
        )
    )
    (task / "environment" / "Dockerfile").write_text("FROM python:3.11-slim\nWORKDIR /app\n")
    (task / "tests" / "test.sh").write_text(
        "#!/bin/bash\ngrep -qx hello /app/out.txt && echo 1 > /logs/verifier/reward.txt "
        "|| echo 0 > /logs/verifier/reward.txt\n"
    )
    (task / "solution" / "solve.sh").write_text(solve)


@pytest.fixture(scope="module")
def bench_dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A task the oracle finishes at once, and one whose oracle sleeps until it is stopped."""
    root = tmp_path_factory.mktemp("signals-dataset")
    _task(root, "quick", "echo hello > /app/out.txt\n")
    _task(root, "slow", "sleep 900\necho hello > /app/out.txt\n")
    return root


@pytest.mark.docker
@pytest.mark.parametrize(
    ("sig", "sigint"),
    # each signal once, and SIGINT as from a terminal (SIGTERM goes down Ctrl+C's own path)
    # and as in the background (the helper raises it itself); the helper's tests take the rest
    [FROM_A_TERMINAL[0], IN_THE_BACKGROUND[1]],
)
def test_bench_run_stopped_by_a_signal_removes_its_sandboxes_and_keeps_finished_trials(
    bench_dataset: Path,
    docker_client: docker.DockerClient,
    tmp_path: Path,
    sig: signal.Signals,
    sigint: signal.Handlers,
) -> None:
    out = tmp_path / f"signals-{uuid.uuid4().hex[:8]}"
    label = f"{LABEL_RUN}={out.name}"  # the run's id is its directory's name
    argv = [sys.executable, "-m", "rock.cli", "bench", "run", "--dataset", str(bench_dataset)]
    argv += ["--agent", "oracle", "--n-concurrent", "2", "--output", str(out)]
    proc = _start(argv, sigint=sigint, cwd=tmp_path)
    try:
        _wait_for(
            "a finished trial and a running one",
            lambda: (
                (out / "quick.1-of-1" / "results.json").is_file()
                and _sleeping(docker_client, label)
            ),
            proc,
        )
        status, err = _stop(proc, sig)
        assert _containers(docker_client, label) == []
        assert status == 128 + sig, err[-3000:]
        assert "interrupted; finished trials are kept" in err
        results = json.loads((out / "results.json").read_text())
        assert [(r["trial_name"], r["is_resolved"]) for r in results["results"]] == [
            ("quick.1-of-1", True)
        ]
        assert not (out / "slow.1-of-1" / "results.json").exists()  # cut short: not a result
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        _remove(docker_client, label)


# --- rock synth run ---------------------------------------------------------------------------


@pytest.fixture
def daemons() -> Iterator[PrivateDaemons]:
    """Private daemons a test's run started: killed and their containers removed after it."""
    with PrivateDaemons() as found:
        yield found


@pytest.mark.docker
@pytest.mark.parametrize(("sig", "sigint"), [FROM_A_TERMINAL[0]])  # (bench run takes SIGHUP)
def test_synth_run_stopped_by_a_signal_removes_its_sandboxes_and_keeps_its_journal(
    docker_client: docker.DockerClient,
    tmp_path: Path,
    daemons: PrivateDaemons,
    sig: signal.Signals,
    sigint: signal.Handlers,
) -> None:
    from rock.pool_image import ensure_pool_image

    ensure_pool_image(docker_client)
    config = tmp_path / "signals.yaml"
    config.write_text(
        "name: signals\nseed: 11\ntarget: 12\noversample: 1.0\nconcurrency: 2\n"
        "families: [csv-aggregate]\n"
    )
    journal = tmp_path / "work" / "journal.jsonl"
    proc = _synth_run(config, tmp_path, sigint)
    try:
        daemon, label = _its_daemon(proc, daemons)

        def verified() -> list[str]:
            lines = journal.read_text().splitlines() if journal.is_file() else []
            return [line for line in lines if '"stage": "verify"' in line]

        _wait_for(
            "a verified task with sandboxes running",
            lambda: bool(verified()) and bool(_containers(docker_client, label, running=True)),
            proc,
        )
        kept = verified()
        status, err = _stop(proc, sig)
        assert _containers(docker_client, label) == []
        assert status == 128 + sig, err[-3000:]
        assert "interrupted; what was decided is kept" in err
        with pytest.raises(ProcessLookupError):
            os.kill(daemon[0], 0)  # the private daemon is gone too
        assert verified()[: len(kept)] == kept
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.mark.docker
def test_a_run_killed_outright_leaves_no_private_daemon_and_no_sandbox(
    docker_client: docker.DockerClient, tmp_path: Path, daemons: PrivateDaemons
) -> None:
    """SIGKILL (or a test's timeout) gives a run no chance to stop its private daemon: the
    daemon watches the process that started it, and stops, removing its sandboxes and its
    home (which the run would have removed after a clean exit)."""
    from rock.pool_image import ensure_pool_image

    ensure_pool_image(docker_client)
    config = tmp_path / "killed.yaml"
    config.write_text(
        "name: killed\nseed: 12\ntarget: 12\noversample: 1.0\nconcurrency: 2\n"
        "families: [csv-aggregate]\n"
    )
    proc = _synth_run(config, tmp_path, signal.SIG_DFL)
    try:
        daemon, label = _its_daemon(proc, daemons)
        home = Path(Path(f"/proc/{daemon[0]}/cmdline").read_bytes().split(b"\0")[-4].decode())
        assert (home / "daemon.log").is_file()
        _wait_for("its sandboxes", lambda: bool(_containers(docker_client, label)), proc)
        proc.kill()
        proc.wait()
        for _ in range(240):  # its shutdown deletes each sandbox
            if not _alive(daemon[0]) and not _containers(docker_client, label):
                break
            time.sleep(0.25)
        assert not _alive(daemon[0]), "the private daemon outlived its run"
        assert _containers(docker_client, label) == []
        assert not home.exists(), "the private daemon left its home"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie no longer does)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _synth_run(config: Path, tmp_path: Path, sigint: signal.Handlers) -> subprocess.Popen[bytes]:
    """``rock synth run CONFIG`` into ``tmp_path``'s out/ and work/, from the repository (the
    default held-out sets are relative to it)."""
    argv = [sys.executable, "-m", "rock.cli", "synth", "run", str(config)]
    argv += ["--output", str(tmp_path / "out"), "--work", str(tmp_path / "work")]
    return _start(argv, sigint=sigint, cwd=ROOT)


def _its_daemon(
    proc: subprocess.Popen[bytes], daemons: PrivateDaemons
) -> tuple[tuple[int, str], str]:
    """The private daemon ``proc`` started (once it runs), and its containers' label."""
    _wait_for("the run's private daemon", lambda: private_daemon_of(proc.pid) is not None, proc)
    daemon = private_daemon_of(proc.pid)
    assert daemon is not None
    daemons.add(daemon)
    return daemon, f"{LABEL_DAEMON}={daemon[1]}"
