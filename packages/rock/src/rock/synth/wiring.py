"""What ``rock synth run`` plugs into the pipeline: agents, and a daemon with a warm pool.

The agents: rock's oracle and no-op agents for verification; the configured
``ale.agents`` entry point (iflow by default) acting as the family's expert, replaying a
recorded trajectory, or driven by a teacher model behind an OpenAI-compatible endpoint.
rock never imports iflow: it asks for the agent by name with the ``expert``/``replay``
keyword arguments of the agent contract.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ale.agents import load_agent
from ale.synth.config import SynthConfig, SynthConfigError
from ale.synth.expert import ExpertAgent, ExpertRun
from ale.task import Task
from ale.trajectory import Trajectory
from rock.bench.agents import NopAgent, OracleAgent
from rock.client import Client
from rock.errors import RockError


class SynthAgents:
    """The pipeline's :class:`ale.synth.pipeline.Agents` for a config."""

    def __init__(self, config: SynthConfig) -> None:
        self.config = config
        self.name = config.agent
        self.kwargs = dict(config.agent_kwargs)
        if self.name != "expert":
            load_agent(self.name, **self.kwargs)  # fail now on an unknown agent or bad kwargs
        elif config.filters.replay or config.teacher is not None:
            raise SynthConfigError(
                "agent: expert runs experts without an agent loop, so it can neither replay "
                "trajectories nor drive a teacher; set filters.replay: false and drop teacher:, "
                "or use agent: iflow."
            )

    def oracle(self, task: Task) -> Any:
        return OracleAgent(task)

    def nop(self) -> Any:
        return NopAgent()

    def expert(self, task: Task, run: ExpertRun) -> Any:
        if self.name == "expert":
            return ExpertAgent(run)
        return load_agent(self.name, expert=run, **self.kwargs)

    def replay(self, trajectory: Trajectory) -> Any:
        return load_agent(self.name, replay=trajectory, **self.kwargs)

    def teacher(self) -> Any | None:
        teacher = self.config.teacher
        if teacher is None:
            return None
        kwargs: dict[str, Any] = {
            **self.kwargs,
            "provider": "openai",
            "base_url": teacher.base_url,
            "model": teacher.model,
        }
        if teacher.api_key_env:
            key = os.environ.get(teacher.api_key_env)
            if not key:
                raise RockError(
                    f"the teacher's API key variable {teacher.api_key_env} is not set; "
                    "export it or drop teacher.api_key_env."
                )
            kwargs["api_key"] = key
        return load_agent(self.name, **kwargs)


_SERVE = (
    "import os, shutil, sys; from pathlib import Path; "
    "from rock.daemon.server import ServeConfig, serve; "
    "home, parent = Path(sys.argv[1]), int(sys.argv[3]); "
    "serve(ServeConfig(home=home, port=0, daemon_id=sys.argv[2], "
    "parent_pid=parent, log_level='warning', cleanup=True))\n"
    "if os.getppid() != parent:  # the run was killed outright: no one else will remove it\n"
    "    shutil.rmtree(home, ignore_errors=True)"
)
"""The private daemon's process: ``python -c _SERVE HOME DAEMON_ID PARENT_PID``. Stopped by
its run, it leaves its home to the run (:func:`private_daemon`); stopped because its run is
gone, it removes its home itself."""


def wait_for_daemon(
    home: Path, proc: subprocess.Popen[Any], *, timeout: float = 60.0
) -> dict[str, Any]:
    """The address record (``<home>/daemon.json``) of the ``rock serve`` started as ``proc``,
    once it has written it; a :class:`RockError` naming its log when the process exits or
    ``timeout`` passes first. Remove a stale daemon.json before starting the process."""
    deadline = time.monotonic() + timeout
    while True:
        with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
            info = json.loads((home / "daemon.json").read_text())
            if info["pid"] == proc.pid:
                return dict(info)
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RockError(f"the rock daemon did not start; see {home / 'daemon.log'}")
        time.sleep(0.05)


@contextlib.contextmanager
def private_daemon(
    *, start_timeout: float = 60.0, daemon_id: str | None = None
) -> Iterator[Client]:
    """A ``rock serve`` of this run's own, in its own process (loopback, token, cleanup on
    exit, and stopping by itself should this process be killed outright) and a client.
    Its containers are labelled with ``daemon_id`` (default: a fresh one); any left after
    it stops are removed. Its home (database, token, log) is removed after a clean exit;
    after a failure it is kept for its log when the daemon wrote one (it logs warnings and
    errors only) or never became ready, and removed otherwise; a run killed outright leaves
    none (the daemon removes it as it stops)."""
    home = Path(tempfile.mkdtemp(prefix="rock-synth-"))
    clean = ready = False
    daemon_id = daemon_id or f"synth-{uuid.uuid4().hex[:6]}"
    log = (home / "daemon.log").open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-c", _SERVE, str(home), daemon_id, str(os.getpid())],
        stdout=log,
        stderr=log,
        start_new_session=True,
    )
    try:
        info = wait_for_daemon(home, proc, timeout=start_timeout)
        ready = True
        token = (home / "token").read_text().strip()
        with Client(info["url"], token) as client:
            yield client
        clean = True
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(120)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()
        _sweep(daemon_id)
        if clean or (ready and _said_nothing(home / "daemon.log")):
            shutil.rmtree(home, ignore_errors=True)


def _said_nothing(log: Path) -> bool:
    """Whether the daemon's log is empty (a failed run's daemon with nothing to say)."""
    try:
        return log.stat().st_size == 0
    except OSError:
        return True


def _sweep(daemon_id: str) -> None:
    """Remove containers a stopped daemon left (it cleans up after itself; a kill does not)."""
    with contextlib.suppress(Exception):
        from rock.engine import connect

        engine = connect()
        for c in engine.containers.list(
            all=True, ignore_removed=True, filters={"label": f"dev.ale.rock.daemon={daemon_id}"}
        ):
            c.remove(force=True)
