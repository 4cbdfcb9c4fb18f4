"""`roll train` on tasks in rock sandboxes, stopped by SIGTERM or SIGHUP as by Ctrl+C: a real
signal to a real process, then no container of the run is left and its finished steps are
kept (metrics and checkpoints, for --resume)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest
import yaml

from iflow.models.tiny import build_tiny_model
from rock.backends.base import LABEL_DAEMON
from rock.pool_image import ensure_pool_image
from rock.testing import PrivateDaemons, private_daemon_of
from roll.metrics import read_metrics

pytestmark = pytest.mark.docker

TASKS = Path(__file__).resolve().parents[3] / "datasets" / "synth-mini" / "tasks"


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_model(tmp_path_factory.mktemp("tiny"), hidden_size=32, layers=1, heads=2)


@pytest.fixture
def daemons() -> Iterator[PrivateDaemons]:
    """Private daemons a test's run started: killed and their containers removed after it."""
    with PrivateDaemons() as found:
        yield found


@pytest.fixture
def ray_address(request: pytest.FixtureRequest) -> Iterator[str | None]:
    """A Ray cluster of its own for the case that runs on Ray, else None."""
    if not request.node.callspec.params.get("on_ray"):
        yield None
        return
    pytest.importorskip("ray", reason="ray is not installed (pip install 'roll[ray]')")
    from ray_cluster import local_ray_cluster

    with local_ray_cluster() as address:
        yield address


@pytest.mark.parametrize(
    ("sig", "sigint", "on_ray"),
    # two cases (each costs a training run): the harder path, SIGINT ignored as in the
    # background; and SIGTERM on Ray, whose ray.init puts a handler of its own on SIGTERM
    # (it exited at once); rock's test_interrupt.py takes the other signals and SIGINT states
    [
        pytest.param(signal.SIGHUP, signal.SIG_IGN, False, id="sighup-in-the-background"),
        pytest.param(
            signal.SIGTERM,
            signal.SIG_DFL,
            True,
            id="sigterm-on-ray",
            marks=pytest.mark.xdist_group("ray"),
        ),
    ],
)
def test_roll_train_stopped_by_a_signal_removes_its_sandboxes_and_keeps_finished_steps(
    tmp_path: Path,
    tiny: Path,
    daemons: PrivateDaemons,
    ray_address: str | None,
    sig: signal.Signals,
    sigint: signal.Handlers,
    on_ray: bool,
) -> None:
    client = docker.from_env()
    ensure_pool_image(client)
    dataset = tmp_path / "data" / "tasks"
    for source in sorted(TASKS.iterdir())[:2]:
        shutil.copytree(source, dataset / source.name)
    run = tmp_path / "run"
    config = tmp_path / "train.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "run_dir": str(run),
                "model": {"path": str(tiny)},
                "tasks": {"dataset": str(tmp_path / "data"), "pool_size": 2, "max_turns": 2},
                "rollout": {"groups_per_step": 1, "group_size": 2, "max_new_tokens": 16},
                "algorithm": {"name": "ipa"},
                "run": {
                    "steps": 1000,
                    "checkpoint_every": 1,
                    "progress": False,
                    "tensorboard": False,
                },
                **(
                    {
                        "ray": {
                            "address": ray_address,
                            "rollout_workers": 1,
                            "worker_cpus": 0.5,
                            "generation_cpus": 0.5,
                        }
                    }
                    if ray_address
                    else {}
                ),
            }
        )
    )

    def dispositions() -> None:  # SIGINT as asked, SIGTERM and SIGHUP the system's default
        signal.signal(signal.SIGINT, sigint)
        for each in (signal.SIGTERM, signal.SIGHUP):
            signal.signal(each, signal.SIG_DFL)

    env = {k: v for k, v in os.environ.items() if k not in ("ROCK_URL", "ROCK_TOKEN", "ROCK_HOME")}
    env["RAY_AUTH_MODE"] = "disabled"  # (the test's cluster has no token)
    proc = subprocess.Popen(
        [sys.executable, "-m", "roll.cli", "train", str(config)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        preexec_fn=dispositions,
    )
    try:
        deadline = time.monotonic() + 600
        latest = run / "checkpoints" / "latest"  # a step finished: logged, then saved
        while (daemon := private_daemon_of(proc.pid)) is None or not latest.is_file():
            if proc.poll() is not None:
                pytest.fail(f"the run ended early: {proc.communicate()[1].decode()[-3000:]}")
            assert time.monotonic() < deadline, "no finished step within 600 s"
            time.sleep(0.2)
        daemons.add(daemon)
        label = f"{LABEL_DAEMON}={daemon[1]}"
        assert client.containers.list(filters={"label": label})  # the run's warm pool
        proc.send_signal(sig)
        try:
            _, err = proc.communicate(timeout=300)
        except subprocess.TimeoutExpired:
            proc.kill()
            pytest.fail(f"roll train did not end after {sig.name}")
        assert client.containers.list(all=True, filters={"label": label}) == []
        assert proc.returncode == 128 + sig, err.decode()[-3000:]
        assert "interrupted; continue with the same command and --resume" in err.decode()
        with pytest.raises(ProcessLookupError):
            os.kill(daemon[0], 0)  # the private daemon is gone too
        steps = [r["step"] for r in read_metrics(run)]
        assert steps == list(range(1, len(steps) + 1)) and steps
        assert (run / "checkpoints" / latest.read_text().strip()).is_dir()  # for --resume
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        client.close()
