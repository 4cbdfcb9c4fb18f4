"""Our ATIF exports, read by Harbor's own pydantic models (Harbor 0.26, Python 3.12, in a
virtual environment of its own that this test makes once and keeps in the user cache)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from ale.atif import to_atif
from ale.samples import sample_trajectory
from ale.trajectory import AgentInfo, Role, Step, ToolCall, ToolResult, Trajectory, Usage

HARBOR = "harbor==0.26.0"
VENV = (
    Path(os.environ.get("XDG_CACHE_HOME", "~/.cache")).expanduser() / "ale-tests" / "harbor-0.26.0"
)

CHECK = """
import json, sys
from harbor.models.trajectories import Trajectory
bad = {}
for path in sys.argv[1:]:
    try:
        Trajectory.model_validate(json.load(open(path)))
    except Exception as exc:
        bad[path] = str(exc).splitlines()[:3]
print(json.dumps(bad))
"""


def _python312() -> Path:
    found = sorted(Path("~/.pyenv/versions").expanduser().glob("3.12*/bin/python"))
    if found:
        return found[-1]
    for name in ("python3.12", "python3.13"):
        done = subprocess.run(["which", name], capture_output=True, text=True)
        if done.returncode == 0:
            return Path(done.stdout.strip())
    raise RuntimeError("Harbor needs Python 3.12 or newer; install one (pyenv install 3.12)")


@pytest.fixture(scope="session")
def harbor_python() -> Path:
    python = VENV / "bin" / "python"
    ready = VENV / ".installed"
    if not ready.is_file():
        subprocess.run([_python312(), "-m", "venv", "--clear", VENV], check=True)
        subprocess.run([python, "-m", "pip", "install", "-q", HARBOR], check=True, timeout=900)
        ready.write_text(HARBOR)
    return python


def _edge_cases() -> dict[str, Trajectory]:
    agent = AgentInfo(name="a", version="1")
    call = ToolCall(id="c1", name="sh", arguments={"cmd": "ls"})
    user = Step(role=Role.USER, content="hi")
    asks = Step(role=Role.ASSISTANT, content="", tool_calls=[call])

    def result(call_id: str, text: str) -> Step:
        return Step(role=Role.TOOL, tool_results=[ToolResult(call_id=call_id, content=text)])

    cases = {
        "two-tool-steps-after-one-call": [user, asks, result("c1", "x"), result("c1", "y")],
        "a-tool-step-first": [result("c1", "x"), user],
        "an-unmatched-call-id": [user, asks, result("zz", "x")],
        "model-on-a-user-step": [Step(role=Role.USER, content="hi", model="m")],
        "usage-on-a-system-step": [
            Step(role=Role.SYSTEM, content="s", usage=Usage(prompt_tokens=3))
        ],
        "no-steps": [],
    }
    return {name: Trajectory(agent=agent, steps=steps) for name, steps in cases.items()}


def test_harbor_reads_every_export_edge_cases_included(harbor_python: Path, tmp_path: Path) -> None:
    from ale.atif import from_atif

    trajectories = _edge_cases() | {f"sample-{n}": sample_trajectory(n, steps=8) for n in range(5)}
    paths = []
    for name, trajectory in trajectories.items():
        doc = to_atif(trajectory)
        assert from_atif(json.loads(json.dumps(doc))) == trajectory  # and back, losslessly
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps(doc))
        paths.append(str(path))
    done = subprocess.run(
        [harbor_python, "-c", CHECK, *paths], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {}, done.stdout
