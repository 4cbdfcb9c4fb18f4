"""Compose tasks with side services, run for real: the services' network, their images,
health and order, the agent's container answering to ``main``, and the cleanup."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
import requests

from rock.backends.docker import DockerBackend
from rock.backends.docker_sandbox import DockerSandbox
from rock.bench.harness import LABEL_RUN, LABEL_TRIAL, Harness
from rock.bench.images import ImageBuilder, ImageMap
from rock.bench.options import BenchOptions
from rock.bench.results import TrialResults
from rock.models import SandboxSpec

# One worker runs the module: its run fixture, run once per worker that takes one of its tests,
# ran twice at once in CI, and one run's test saw the other's containers still at work.
pytestmark = [pytest.mark.docker, pytest.mark.xdist_group("bench-services")]

TASK_TOML = """\
version = "1.0"
artifacts = [{ source = "/tmp/hook.txt", service = "db" }, { source = "/x", service = "nope" }]

[agent]
timeout_sec = 120.0

[verifier]
timeout_sec = 60.0

[environment]
allow_internet = false

[[verifier.collect]]
command = "echo hooked-in-$(hostname -s | cut -c1-0)db > /tmp/hook.txt"
service = "db"
"""
COMPOSE = """\
services:
  main:
    environment:
      - DB_URL=http://db:8000
    depends_on:
      db:
        condition: service_healthy
      seed:
        condition: service_completed_successfully
  seed:
    image: rock/base:bookworm
    command: ["sh", "-c", "echo seeded > /shared/seed.txt"]
    volumes: ["shared:/shared"]
  db:
    build: ./db
    command: ["python3", "-m", "http.server", "8000", "--directory", "/srv"]
    volumes: ["./data/secret.txt:/srv/secret.txt:ro", "shared:/srv/shared"]
    depends_on: [seed]
    healthcheck:
      test: ["CMD", "python3", "-c", "import urllib.request as u; u.urlopen('http://localhost:8000/')"]
      interval: 1s
      retries: 30
"""
FETCH = (
    'python3 -c "import os, urllib.request as u; '
    "print(u.urlopen(os.environ['DB_URL'] + '/{path}').read().decode().strip())\""
)


def _task(root: Path, name: str, compose: str) -> Path:
    task = root / name
    env = task / "environment"
    (env / "db").mkdir(parents=True)
    (env / "data").mkdir()
    (task / "tests").mkdir()
    (task / "solution").mkdir()
    (task / "task.toml").write_text(TASK_TOML)
    (task / "instruction.md").write_text("Fetch the secret from the db service.\n")
    (env / "Dockerfile").write_text("FROM rock/base:bookworm\nWORKDIR /app\n")
    (env / "db" / "Dockerfile").write_text("FROM rock/base:bookworm\n")
    (env / "data" / "secret.txt").write_text("opal\n")
    (env / "docker-compose.yaml").write_text(compose)
    (task / "solution" / "solve.sh").write_text(
        "#!/bin/bash\n"
        f"{FETCH.format(path='secret.txt')} > /app/out.txt\n"
        f"{FETCH.format(path='shared/seed.txt')} >> /app/out.txt\n"
        "(getent hosts deb.debian.org >/dev/null && echo online || echo offline) >> /app/out.txt\n"
    )
    (task / "tests" / "test.sh").write_text(
        "#!/bin/bash\nmkdir -p /logs/verifier\n"
        "[ \"$(cat /app/out.txt | tr '\\n' ' ')\" = \"opal seeded offline \" ] && r=1 || r=0\n"
        "echo $r > /logs/verifier/reward.txt\n"
    )
    return task


class _DeleteTimesOut(DockerBackend):
    """An engine too busy to answer a delete in time: the container stays behind."""

    def create(
        self, spec: SandboxSpec | None = None, *, sandbox_id: str | None = None
    ) -> DockerSandbox:
        sandbox = super().create(spec, sandbox_id=sandbox_id)

        def delete() -> None:
            raise requests.exceptions.ReadTimeout("the engine did not answer in 30 s")

        sandbox.delete = delete  # type: ignore[method-assign]
        return sandbox


class _ServedSweepUnanswered(Harness):
    """An engine too busy to answer the end-of-trial sweep of the `served` task's trial (as
    seen in CI): its containers stay until the run's final sweep."""

    async def _sweep(self, result: TrialResults) -> None:
        if result.task_id != "served":
            await super()._sweep(result)
            return
        self._unswept.add(result.id)
        self.progress("left_behind", {"trial": result.trial_name, "left": ["(not answered)"]})


@pytest.fixture(scope="module")
def run(docker_client: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("services")
    tasks = root / "tasks"
    _task(tasks, "served", COMPOSE)
    _task(tasks, "sick", COMPOSE.replace("u.urlopen('http://localhost:8000/')", "exit(1)")
          .replace("retries: 30", "retries: 2"))  # fmt: skip
    _task(tasks, "unpullable", COMPOSE.replace("image: rock/base:bookworm", "image: nosuch/db:9"))
    out = root / "run"
    events = root / "events.jsonl"

    def progress(kind: str, data: dict[str, Any]) -> None:
        if kind == "left_behind":
            with events.open("a") as f:
                f.write(json.dumps({"kind": kind, **data}, default=str) + "\n")

    harness = _ServedSweepUnanswered(
        _DeleteTimesOut(docker_client),
        ImageBuilder(docker_client, ImageMap.load(user_file=None)),
        BenchOptions(n_concurrent=3),
        progress=progress,
    )
    asyncio.run(harness.run(tasks, out, agent="oracle"))
    return out


def _trial(run: Path, task: str) -> dict[str, Any]:
    return json.loads((run / f"{task}.1-of-1" / "results.json").read_text())


def test_the_agent_reaches_its_side_services_by_name_without_the_internet(run: Path) -> None:
    trial = _trial(run, "served")
    assert trial["is_resolved"] is True, trial["error"]


def test_a_service_that_never_becomes_healthy_is_one_sentence(run: Path) -> None:
    trial = _trial(run, "sick")
    assert trial["failure_mode"] == "sandbox_error"
    assert "service 'db' is unhealthy: its healthcheck failed 2 times in a row" in trial["error"]


def test_a_service_image_that_is_not_here_is_a_build_failure(run: Path) -> None:
    trial = _trial(run, "unpullable")
    assert trial["failure_mode"] == "build_failed"
    assert "nosuch/db:9" in trial["error"] and "\n" not in trial["error"]


def test_nothing_of_a_trial_is_left_behind(run: Path, docker_client: Any) -> None:
    """Whatever a trial's delete and sweep left (the `served` trial's, all of it) is gone
    when the run ends: its trial was swept again after the others."""
    first = (run.parent / "events.jsonl").read_text().splitlines()
    assert any('"served.1-of-1"' in line for line in first)  # its own sweep did not happen
    for task in ("served", "sick", "unpullable"):  # this run's trials (not another run's)
        label = {"label": [f"{LABEL_RUN}=run", f"{LABEL_TRIAL}={_trial(run, task)['id']}"]}
        left = docker_client.containers.list(all=True, filters=label)
        seen = [(c.name, c.status, c.attrs["Created"], c.labels) for c in left]
        if left:  # which one, made when, under which trial's label; what the sweeps said
            print(json.dumps(seen, indent=1))
            events = run.parent / "events.jsonl"
            print(events.read_text() if events.exists() else "(no sweep left anything)")
        assert left == []
        assert docker_client.networks.list(filters=label) == []
        assert docker_client.volumes.list(filters=label) == []


def test_hooks_and_artifacts_of_a_side_service_come_from_its_container(run: Path) -> None:
    trial = run / "served.1-of-1"
    assert "exit 0 `echo hooked" in (trial / "collect-hooks.log").read_text()
    assert (trial / "artifacts" / "tmp" / "hook.txt").read_text() == "hooked-in-db\n"
    manifest = json.loads((trial / "artifacts" / "manifest.json").read_text())
    assert [(m["source"], m["status"]) for m in manifest[1:]] == [
        ("/tmp/hook.txt", "ok"), ("/x", "skipped"),
    ]  # fmt: skip
