"""What a Harbor task gives its agent besides the instruction, through rock bench to iflow:
an MCP server that runs inside the task's container over stdio, a skills directory, and a
prior conversation (``trajectory.json``). Real Docker, a scripted model."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from ale.atif import read_atif
from ale.jsonl import read_jsonl
from ale.trajectory import Role, StepMark, Trajectory

pytestmark = pytest.mark.docker

HERE = Path(__file__).parent
PRIOR = {
    "schema_version": "ATIF-v1.7",
    "agent": {"name": "earlier-agent", "version": "1"},
    "steps": [
        {"step_id": 1, "source": "user", "message": "Remember: answers go in /app/answer.txt."},
        {"step_id": 2, "source": "agent", "message": "Noted: /app/answer.txt."},
    ],
}
TASK_TOML = """\
version = "1.4"

[agent]
timeout_sec = 120.0

[verifier]
timeout_sec = 60.0

[environment]
allow_internet = false
skills_dir = "/opt/skills"

[[environment.mcp_servers]]
name = "vault"
transport = "stdio"
command = "python3"
args = ["/opt/mcp/server.py"]
"""
SKILL = """\
---
name: secret-keeping
description: >
  How to store a secret word:
  one line, lower case.
---
Write the word alone on one line.
"""


def _task(root: Path, name: str, *, server: str = "/opt/mcp/server.py") -> Path:
    task = root / name
    (task / "environment").mkdir(parents=True)
    (task / "tests").mkdir()
    (task / "solution").mkdir()
    (task / "task.toml").write_text(TASK_TOML.replace("/opt/mcp/server.py", server))
    (task / "instruction.md").write_text("Put the vault's secret word into /app/answer.txt.\n")
    shutil.copy(HERE / "data" / "mini_mcp.py", task / "environment" / "server.py")
    (task / "environment" / "skills" / "secret-keeping").mkdir(parents=True)
    (task / "environment" / "skills" / "secret-keeping" / "SKILL.md").write_text(SKILL)
    (task / "environment" / "Dockerfile").write_text(
        "FROM rock/base:bookworm\nWORKDIR /app\n"
        "COPY server.py /opt/mcp/server.py\nCOPY skills /opt/skills\n"
    )
    (task / "tests" / "test.sh").write_text(
        "#!/bin/bash\nmkdir -p /logs/verifier\n"
        '[ "$(cat /app/answer.txt)" = opal ] && r=1 || r=0\necho $r > /logs/verifier/reward.txt\n'
    )
    (task / "solution" / "solve.sh").write_text("#!/bin/bash\necho opal > /app/answer.txt\n")
    (task / "trajectory.json").write_text(json.dumps(PRIOR))
    return task


COMPOSE = """\
services:
  main:
    depends_on:
      vault:
        condition: service_healthy
  vault:
    build: ./vault
    command: ["python3", "/srv/mini_mcp_http.py", "8000"]
    healthcheck:
      test: ["CMD", "python3", "-c", "import socket; socket.create_connection(('localhost', 8000))"]
      interval: 1s
      retries: 30
"""


def _http_task(root: Path, name: str) -> Path:
    """The vault's MCP server in a side service of the task's compose file, over HTTP."""
    task = _task(root, name)
    toml = (task / "task.toml").read_text()
    stdio = 'transport = "stdio"\ncommand = "python3"\nargs = ["/opt/mcp/server.py"]\n'
    assert stdio in toml
    http = 'transport = "streamable-http"\nurl = "http://vault:8000/mcp"\n'
    (task / "task.toml").write_text(toml.replace(stdio, http))
    vault = task / "environment" / "vault"
    vault.mkdir()
    for script in ("mini_mcp.py", "mini_mcp_http.py"):
        shutil.copy(HERE / "data" / script, vault / script)
    (vault / "Dockerfile").write_text("FROM rock/base:bookworm\nCOPY *.py /srv/\n")
    (task / "environment" / "docker-compose.yaml").write_text(COMPOSE)
    return task


def _script(path: Path) -> Path:
    path.write_text(
        json.dumps(
            [
                {"tool_calls": [{"name": "get_secret", "arguments": {}}]},
                {
                    "tool_calls": [
                        {
                            "name": "run_shell_command",
                            "arguments": {"command": "echo opal > /app/answer.txt"},
                        }
                    ]
                },
                {"tool_calls": [{"name": "finish", "arguments": {"summary": "stored"}}]},
            ]
        )
    )
    return path


@pytest.fixture(scope="module")
def run(docker_client: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:
    from rock.backends.docker import DockerBackend
    from rock.bench.harness import Harness
    from rock.bench.images import ImageBuilder, ImageMap
    from rock.bench.options import BenchOptions

    root = tmp_path_factory.mktemp("context")
    tasks = root / "tasks"
    _task(tasks, "vault")
    _task(tasks, "absent", server="/opt/mcp/missing.py")  # the server dies at once
    _http_task(tasks, "vault-http")
    out = root / "run"
    harness = Harness(
        DockerBackend(docker_client),
        ImageBuilder(docker_client, ImageMap.load(user_file=None)),
        BenchOptions(n_concurrent=2),
    )
    script = _script(root / "script.json")
    kwargs = {"provider": "scripted", "script": str(script)}
    asyncio.run(harness.run(tasks, out, agent="iflow", agent_kwargs=kwargs))
    return out


def _trajectory(run: Path, task: str) -> Trajectory:
    [trajectory] = read_jsonl(run / f"{task}.1-of-1" / "agent" / "trajectory.jsonl", Trajectory)
    return trajectory


def test_the_task_s_mcp_server_runs_in_its_container_and_answers(run: Path) -> None:
    trial = json.loads((run / "vault.1-of-1" / "results.json").read_text())
    assert trial["is_resolved"] is True, trial["error"]
    trajectory = _trajectory(run, "vault")
    results = [r for s in trajectory.steps for r in s.tool_results]
    assert results[0].content == "the secret is opal" and not results[0].is_error
    assert "mcp_failures" not in trajectory.extra


def test_the_skills_are_in_the_system_prompt(run: Path) -> None:
    system = _trajectory(run, "vault").steps[0]
    assert system.role is Role.SYSTEM
    assert (
        "- secret-keeping (/opt/skills/secret-keeping/SKILL.md): How to store a secret word: one line, lower case."
        in system.content
    )


def test_the_prior_conversation_comes_first_marked_as_copied(run: Path) -> None:
    steps = _trajectory(run, "vault").steps
    assert [s.role for s in steps[1:4]] == [Role.USER, Role.ASSISTANT, Role.USER]
    assert steps[1].content == "Remember: answers go in /app/answer.txt."
    assert steps[1].mark is steps[2].mark is StepMark.COPIED
    assert steps[3].mark is None  # the task's own instruction
    doc = json.loads((run / "vault.1-of-1" / "agent" / "trajectory.atif.json").read_text())
    assert [s.get("is_copied_context", False) for s in doc["steps"][1:4]] == [True, True, False]
    imported = read_atif(run / "vault.1-of-1" / "agent" / "trajectory.atif.json")
    assert imported.steps[1].mark is StepMark.COPIED


def test_a_server_that_cannot_start_is_one_sentence_and_the_agent_goes_on(run: Path) -> None:
    trajectory = _trajectory(run, "absent")
    [failure] = trajectory.extra["mcp_failures"]
    assert failure.startswith("MCP server 'vault' failed to start (")
    assert "/opt/mcp/missing.py" in failure and "\n" not in failure
    results = [r for s in trajectory.steps for r in s.tool_results]
    assert results[0].is_error and "Unknown tool 'get_secret'" in results[0].content
    trial = json.loads((run / "absent.1-of-1" / "results.json").read_text())
    assert trial["is_resolved"] is True  # the rest of the script still did the work


def test_an_mcp_server_in_a_side_service_is_reached_over_http(run: Path) -> None:
    trial = json.loads((run / "vault-http.1-of-1" / "results.json").read_text())
    assert trial["is_resolved"] is True, trial["error"]
    trajectory = _trajectory(run, "vault-http")
    assert "mcp_failures" not in trajectory.extra, trajectory.extra
    results = [r for s in trajectory.steps for r in s.tool_results]
    assert results[0].content == "the secret is opal"
