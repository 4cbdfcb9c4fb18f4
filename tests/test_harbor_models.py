"""Our ATIF exports, read by Harbor's own pydantic models (Harbor 0.26, Python 3.12, in a
virtual environment of its own that this test makes once and keeps in the user cache)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ale.atif import to_atif
from ale.samples import sample_trajectory
from ale.trajectory import AgentInfo, Role, Step, StepMark, ToolCall, ToolResult, Trajectory, Usage

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
from harbor_env import ensure_harbor

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


@pytest.fixture(scope="session")
def harbor_python() -> Path:
    return ensure_harbor()


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
        "copied-context": [
            Step(role=Role.USER, content="before", mark=StepMark.COPIED),
            Step(role=Role.ASSISTANT, content="noted", mark=StepMark.COPIED),
            user,
        ],
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


READ_RUNS = """
import json, sys
from pathlib import Path
from harbor.models.job.result import JobResult
from harbor.models.trial.config import TrialConfig
from harbor.models.trial.result import TrialResult
from harbor.models.trajectories import Trajectory
from harbor.viewer.scanner import JobScanner

jobs = Path(sys.argv[1])
scanner = JobScanner(jobs)
out = {}
for job in scanner.list_jobs():
    result = JobResult.model_validate_json((jobs / job / "result.json").read_text())
    assert scanner.get_job_config(job) is not None, job  # its config.json reads too
    trials = {}
    for name in scanner.list_trials(job):
        trial = TrialResult.model_validate_json((jobs / job / name / "result.json").read_text())
        TrialConfig.model_validate_json((jobs / job / name / "config.json").read_text())
        path = jobs / job / name / "agent" / "trajectory.json"
        steps = len(Trajectory.model_validate_json(path.read_text()).steps) if path.exists() else None
        rewards = trial.verifier_result.rewards if trial.verifier_result else None
        parts = [
            [s.step_name, s.verifier_result.rewards if s.verifier_result else None]
            for s in trial.step_results or []
        ]
        trials[name] = {
            "rewards": rewards, "steps": steps, "error": bool(trial.exception_info), "parts": parts
        }
    out[job] = {"n": result.n_total_trials, "inline": len(result.trial_results), "trials": trials}
print(json.dumps(out))
"""


@pytest.mark.docker
def test_harbor_reads_a_rock_bench_run_as_a_job(harbor_python: Path, tmp_path: Path) -> None:
    """The run directory is a Harbor job: its viewer's scanner finds the trials and Harbor's
    models read the job result, each trial's result and config, and the ATIF trajectory."""
    repo = Path(__file__).resolve().parents[1]
    rock = Path(sys.executable).parent / "rock"
    jobs = tmp_path / "jobs"
    for agent, dataset, task in (
        ("oracle", "terminal-bench-local", "csv-sales-report"),
        ("nop", "terminal-bench-local", "csv-sales-report"),
        ("oracle", "examples", "hello-steps"),  # a multi-step task: Harbor's step results
    ):
        done = subprocess.run(
            [
                rock,
                "bench",
                "run",
                "--dataset",
                repo / "datasets" / dataset,
                "--task",
                task,
                "--agent",
                agent,
                "--output",
                jobs / f"{agent}-{task}",
            ],
            capture_output=True,
            text=True,
            timeout=900,
        )
        assert done.returncode == 0, done.stderr
    read = subprocess.run(
        [harbor_python, "-c", READ_RUNS, jobs], capture_output=True, text=True, timeout=300
    )
    assert read.returncode == 0, read.stderr
    seen = json.loads(read.stdout)
    oracle = seen["oracle-csv-sales-report"]["trials"]["csv-sales-report.1-of-1"]
    assert oracle["rewards"] == {"reward": 1.0} and oracle["steps"] >= 1
    nop = seen["nop-csv-sales-report"]["trials"]["csv-sales-report.1-of-1"]
    assert nop["rewards"] == {"reward": 0.0}
    steps = seen["oracle-hello-steps"]["trials"]["hello-steps.1-of-1"]
    assert steps["rewards"] == {"reward": 1.0}
    assert steps["parts"] == [["create", {"reward": 1.0}], ["append", {"reward": 1.0}]]
    assert all(job["n"] == 1 and job["inline"] == 1 for job in seen.values())
