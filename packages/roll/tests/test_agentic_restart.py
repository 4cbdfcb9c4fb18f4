"""The rock daemon restarted mid-rollout: a real ``rock serve`` on a fixed loopback port is
killed (SIGKILL) while episodes run commands in its sandboxes, then started again on the same
port and home. The episodes it broke are run again (infrastructure, never scored), training
goes on, and every episode started is accounted for."""

from __future__ import annotations

import contextlib
import json
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker
import pytest
from transformers import AutoTokenizer

from iflow.models.tiny import build_tiny_model
from rock.backends.base import LABEL_DAEMON
from rock.pool_image import ensure_pool_image
from rock.synth.wiring import wait_for_daemon
from roll.agentic.collector import TaskRollouts
from roll.config import TasksConfig
from roll.errors import ConfigError, TrainingAborted
from roll.generation.base import Generation, SamplingParams

pytestmark = pytest.mark.docker

REPO = Path(__file__).resolve().parents[3]
TASK = sorted((REPO / "datasets" / "synth-mini" / "tasks").iterdir())[0]
PROBE = "sleep 4"
"""The first command of every episode: long enough to kill the daemon under it."""


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_model(tmp_path_factory.mktemp("tiny"), hidden_size=32, layers=1, heads=2)


class SolvingBackend:
    """A generation backend at its seam that solves the task: the first turn runs the
    task's solution (after ``PROBE``), the next one finishes."""

    name = "solving"

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        command = f"{PROBE}; {(TASK / 'solution' / 'solve.sh').read_text()}"
        run = {"name": "run_shell_command", "arguments": {"command": command}}
        done = {"name": "finish", "arguments": {"summary": "report written"}}
        self.run = self._ids(f"<tool_call>\n{json.dumps(run)}\n</tool_call>")
        self.done = self._ids(f"<tool_call>\n{json.dumps(done)}\n</tool_call>")
        self.policy_version = 1

    def _ids(self, text: str) -> list[int]:
        return [*self.tokenizer.encode(text, add_special_tokens=False), self.tokenizer.eos_token_id]

    def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[Generation]:
        out = []
        for prompt in prompts:
            ids = self.done if PROBE in self.tokenizer.decode(prompt) else self.run
            out.append(
                Generation(token_ids=list(ids), logprobs=[-1.0] * len(ids), finish_reason="stop")
            )
        return out

    def sync_weights(self, model: Any, version: int) -> None:
        self.policy_version = version

    def close(self) -> None:
        pass


class Serve:
    """``rock serve`` in a subprocess on one loopback port and home, killed and started again."""

    def __init__(self, home: Path) -> None:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            self.port = int(sock.getsockname()[1])
        self.home = home
        self.url = f"http://127.0.0.1:{self.port}"
        self.daemon_id = f"roll-restart-{uuid.uuid4().hex[:6]}"
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    def start(self) -> None:
        self.home.mkdir(parents=True, exist_ok=True)
        (self.home / "daemon.json").unlink(missing_ok=True)  # a killed daemon leaves it
        argv = [sys.executable, "-m", "rock.cli", "serve", "--home", str(self.home)]
        argv += ["--port", str(self.port), "--daemon-id", self.daemon_id, "--cleanup"]
        argv += ["--log-level", "warning"]
        with (self.home / "daemon.log").open("ab") as log:
            self.proc = subprocess.Popen(argv, stdout=log, stderr=log)
        wait_for_daemon(self.home, self.proc)
        self.starts += 1

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        engine = docker.from_env()  # what a killed daemon left
        for container in engine.containers.list(
            all=True, filters={"label": f"{LABEL_DAEMON}={self.daemon_id}"}
        ):
            with contextlib.suppress(docker.errors.APIError):
                container.remove(force=True)


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Serve]:
    ensure_pool_image(docker.from_env())
    daemon = Serve(tmp_path / "rock-home")
    daemon.start()
    yield daemon
    daemon.stop()


def kill_under_probe(serve: Serve, *, restart_after: float | None) -> threading.Thread:
    """Kill the daemon once a sandbox runs ``PROBE`` (a request is in flight), and start it
    again ``restart_after`` seconds later (never with None)."""
    engine = docker.from_env()

    def running_probe() -> bool:
        for container in engine.containers.list(
            filters={"label": f"{LABEL_DAEMON}={serve.daemon_id}"}
        ):
            with contextlib.suppress(docker.errors.APIError):
                if any(PROBE in " ".join(p) for p in container.top()["Processes"] or []):
                    return True
        return False

    def watch() -> None:
        deadline = time.monotonic() + 120
        while not running_probe():
            if time.monotonic() > deadline:
                return
            time.sleep(0.1)
        serve.kill()
        if restart_after is not None:
            time.sleep(restart_after)
            serve.start()

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    return thread


def _rollouts(tmp_path: Path, tiny: Path, serve: Serve, **config: Any) -> TaskRollouts:
    dataset = tmp_path / "data"
    shutil.copytree(TASK, dataset / "tasks" / TASK.name)
    tokenizer = AutoTokenizer.from_pretrained(tiny)
    settings = {"pool_size": 2, "max_turns": 3, "context_limit": 8192, **config}
    return TaskRollouts(
        TasksConfig(dataset=str(dataset), url=serve.url, home=str(serve.home), **settings),
        tokenizer,
        seed=0,
        backend=SolvingBackend(tokenizer),
        params=SamplingParams(max_new_tokens=2048),
        group_size=2,
        groups_per_step=1,
    )


def _accounted(metrics: dict[str, float]) -> None:
    started = metrics["episodes/started"]
    assert started == (
        metrics["episodes/scored"]
        + metrics["episodes/infra_retried"]
        + metrics["episodes/infra_abandoned"]
    )
    reasons = sum(v for k, v in metrics.items() if k.startswith("episodes/infra/"))
    assert reasons == metrics["episodes/infra_retried"] + metrics["episodes/infra_abandoned"]


def test_a_daemon_restarted_mid_rollout_costs_retries_not_scores(
    tmp_path: Path, tiny: Path, serve: Serve
) -> None:
    with _rollouts(tmp_path, tiny, serve, daemon_wait=60) as rollouts:
        watcher = kill_under_probe(serve, restart_after=1.0)
        first = rollouts.take(0)
        watcher.join(60)
        assert serve.starts == 2  # it was killed under the episodes and came back
        after_restart = rollouts.metrics()
        second = rollouts.take(1)  # training goes on against the restarted daemon
        metrics = rollouts.metrics()

    assert len(first) == 2 and len(second) == 2
    for trajectory in first + second:
        assert trajectory.reward == 1.0  # the policy solves it: no zero from the restart
        assert "rock daemon" not in trajectory.model_dump_json()  # never saw the outage
    assert after_restart["episodes/infra/daemon_unavailable"] >= 1
    assert after_restart["episodes/infra_retried"] >= 1
    assert after_restart["episodes/infra_abandoned"] == 0
    assert after_restart["episodes/scored"] == 2
    _accounted(after_restart)
    assert metrics["episodes/scored"] == 4
    assert metrics["episodes/infra_retried"] == after_restart["episodes/infra_retried"]
    _accounted(metrics)


def test_a_daemon_that_does_not_come_back_abandons_episodes_in_one_sentence(
    tmp_path: Path, tiny: Path, serve: Serve
) -> None:
    rollouts = _rollouts(tmp_path, tiny, serve, daemon_wait=2, max_attempts=2)
    with rollouts:
        watcher = kill_under_probe(serve, restart_after=None)
        with pytest.raises(TrainingAborted) as caught:
            rollouts.take(0)
        watcher.join(10)
        metrics = rollouts.metrics()
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith("no episode of this step could be run: 2 were abandoned")
    assert f"no rock daemon took requests at {serve.url}" in message
    assert metrics["episodes/scored"] == 0  # abandoned, never scored as zero
    assert metrics["episodes/infra_abandoned"] == 2
    assert metrics["episodes/infra/daemon_unavailable"] == metrics["episodes/started"] == 4
    _accounted(metrics)


def test_no_daemon_at_tasks_url_is_one_sentence(tmp_path: Path, tiny: Path, serve: Serve) -> None:
    serve.kill()
    with pytest.raises(ConfigError) as caught:
        _rollouts(tmp_path, tiny, serve).__enter__()
    assert str(caught.value) == (
        f"the rock daemon at {serve.url} does not answer; start it with `rock serve`, fix "
        "tasks.url or tasks.home, or leave both unset for a private daemon"
    )
