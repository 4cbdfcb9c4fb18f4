"""rock.bench.harness and agents: datasets, run directories, oracle/nop, the recorder."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from bench_fakes import (
    TASK_TOML,
    FakeSandbox,
    make_task,
    tb2_task,
)

from ale.agents import AgentNotFound
from ale.task import load_task
from ale.trajectory import FailureMode as TrajectoryFailure
from ale.trajectory import Role
from rock.bench.agents import NopAgent, OracleAgent, RecordingSandbox, agent_factory
from rock.bench.dataset import scan_dataset
from rock.bench.harness import (
    _open_run_dir,
    trial_name,
)
from rock.bench.options import BenchError
from rock.bench.results import (
    RUN_FILE,
    RunConfig,
)
from rock.models import ExecResult


# -- harness ---------------------------------------------------------------------------------
def _dataset(tmp_path: Path) -> Path:
    root = tmp_path / "dataset"
    root.mkdir()
    make_task(root, "alpha")
    make_task(root, "beta")
    make_task(root, "broken", test_sh=None)
    make_task(root, "badtoml", toml="version = [\n")
    orphan = root / "orphan"
    orphan.mkdir()
    (orphan / "instruction.md").write_text("do it\n")
    (root / "empty").mkdir()
    make_task(root, ".hidden")
    make_task(root, "_private")
    (root / "README.md").write_text("not a task\n")
    return root


def test_scan_dataset_loads_valid_tasks_and_reports_invalid_ones(tmp_path: Path) -> None:
    root = _dataset(tmp_path)
    scan = scan_dataset(root)
    assert [t.id for t in scan.tasks] == ["alpha", "beta"]
    reasons = {Path(i.path).name: i.reason for i in scan.invalid}
    assert set(reasons) == {"badtoml", "broken", "orphan"}
    assert "has no tests/test.sh" in reasons["broken"]
    assert "is not valid TOML" in reasons["badtoml"]
    assert reasons["orphan"] == "it has neither task.toml nor task.yaml"
    alpha = scan.tasks[0]
    assert alpha.metadata.category == "files"
    assert alpha.agent_timeout_sec == 120.0 and alpha.test_timeout_sec == 60.0


def test_a_windows_task_loads_and_is_refused_in_one_sentence(tmp_path: Path) -> None:
    root = tmp_path / "dataset"
    root.mkdir()
    make_task(root, "linux")
    windows = make_task(
        root, "windows", toml=TASK_TOML + '\n[environment]\nos = "windows"\n', test_sh=None
    )
    (windows / "tests").mkdir()
    (windows / "tests" / "test.bat").write_text("echo 1 > C:\\logs\\verifier\\reward.txt\r\n")
    assert load_task(windows).test_script.name == "test.bat"
    scan = scan_dataset(root)
    assert [t.id for t in scan.tasks] == ["linux"]
    assert [i.reason for i in scan.invalid] == [
        'it is a Windows task ([environment] os = "windows"), and rock runs Linux containers only'
    ]
    make_task(root, "mac", toml=TASK_TOML + '\n[environment]\nos = "macos"\n')
    make_task(root, "gpu", toml=TASK_TOML + "\n[environment]\ngpus = 2\n")
    make_task(root, "tpu", toml=TASK_TOML + '\n[environment.tpu]\ntype = "v5e"\n')
    reasons = {Path(i.path).name: i.reason for i in scan_dataset(root).invalid}
    assert '"linux" or "windows"' in reasons["mac"]
    assert (
        reasons["gpu"]
        == "it asks for 2 GPU(s) ([environment] gpus), and rock's sandboxes have none"
    )
    assert reasons["tpu"] == "it asks for a TPU ([environment] tpu), and rock's sandboxes have none"


def test_scan_dataset_selects_tasks_by_id(tmp_path: Path) -> None:
    root = _dataset(tmp_path)
    scan = scan_dataset(root, ["beta"])
    assert [t.id for t in scan.tasks] == ["beta"] and scan.invalid == []
    scan = scan_dataset(root, ["broken", "alpha"])
    assert [t.id for t in scan.tasks] == ["alpha"]
    assert [Path(i.path).name for i in scan.invalid] == ["broken"]


def test_scan_dataset_refuses_an_unknown_task_id_naming_the_known_ones(tmp_path: Path) -> None:
    root = _dataset(tmp_path)
    with pytest.raises(BenchError) as info:
        scan_dataset(root, ["alpha", "gamma"])
    message = str(info.value)
    assert "no task named gamma in" in message
    assert "(it has alpha, beta)" in message
    assert "--task" in message


def test_scan_dataset_of_a_single_task_directory(tmp_path: Path) -> None:
    task_dir = make_task(tmp_path, "solo")
    scan = scan_dataset(task_dir)
    assert [t.id for t in scan.tasks] == ["solo"] and scan.invalid == []


def test_scan_dataset_refuses_a_missing_or_empty_dataset(tmp_path: Path) -> None:
    with pytest.raises(BenchError, match="is not a directory"):
        scan_dataset(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "sub").mkdir()
    with pytest.raises(BenchError, match="holds no tasks"):
        scan_dataset(tmp_path / "empty")


def _config(agent: str = "nop", task_ids: list[str] | None = None, **kw: Any) -> RunConfig:
    return RunConfig(id="run", dataset="/d", task_ids=task_ids or ["a"], agent=agent, **kw)


def test_open_run_dir_creates_run_json(tmp_path: Path) -> None:
    out = tmp_path / "run"
    config = _open_run_dir(out, _config(), resume=False)
    assert config.agent == "nop"
    saved = RunConfig.model_validate_json((out / RUN_FILE).read_text())
    assert saved.task_ids == ["a"] and saved.agent == "nop"
    assert [p.name for p in out.iterdir()] == [RUN_FILE]  # no temporary file left behind


def test_open_run_dir_refuses_an_existing_run_without_resume(tmp_path: Path) -> None:
    out = tmp_path / "run"
    _open_run_dir(out, _config(), resume=False)
    with pytest.raises(BenchError) as info:
        _open_run_dir(out, _config(), resume=False)
    assert "already holds a run" in str(info.value)
    assert "--resume" in str(info.value)


def test_open_run_dir_refuses_resume_with_another_agent(tmp_path: Path) -> None:
    out = tmp_path / "run"
    _open_run_dir(out, _config("nop"), resume=False)
    with pytest.raises(BenchError) as info:
        _open_run_dir(out, _config("oracle"), resume=True)
    assert "was run with agent='nop', not 'oracle'" in str(info.value)


def test_open_run_dir_refuses_resume_with_other_attempts(tmp_path: Path) -> None:
    out = tmp_path / "run"
    _open_run_dir(out, _config(n_attempts=2), resume=False)
    with pytest.raises(BenchError, match="n_attempts=2, not 3"):
        _open_run_dir(out, _config(n_attempts=3), resume=True)


def test_open_run_dir_refuses_resume_with_another_timeout_multiplier(tmp_path: Path) -> None:
    """A run's time limits are part of what it measures: trials under other limits would mix
    two runs' outcomes in one."""
    out = tmp_path / "run"
    _open_run_dir(out, _config(timeout_multiplier=4.0), resume=False)
    saved = RunConfig.model_validate_json((out / RUN_FILE).read_text())
    assert saved.timeout_multiplier == 4.0
    with pytest.raises(BenchError, match=r"timeout_multiplier=4\.0, not 1\.0"):
        _open_run_dir(out, _config(), resume=True)


def test_open_run_dir_resume_merges_task_ids(tmp_path: Path) -> None:
    out = tmp_path / "run"
    first = _open_run_dir(out, _config(task_ids=["b", "a"]), resume=False)
    again = _open_run_dir(out, _config(task_ids=["c"]), resume=True)
    assert again.task_ids == ["a", "b", "c"]
    assert again.started_at == first.started_at
    saved = RunConfig.model_validate_json((out / RUN_FILE).read_text())
    assert saved.task_ids == ["a", "b", "c"]


def test_open_run_dir_refuses_a_non_empty_directory_that_is_no_run(tmp_path: Path) -> None:
    out = tmp_path / "busy"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    with pytest.raises(BenchError, match="is not empty and holds no run"):
        _open_run_dir(out, _config(), resume=False)
    assert not (out / RUN_FILE).exists()


def test_trial_name() -> None:
    assert trial_name("hello-world", 2, 3) == "hello-world.2-of-3"
    assert trial_name("t", 1, 1) == "t.1-of-1"


# -- agents ----------------------------------------------------------------------------------
async def test_agent_factory_nop(tmp_path: Path) -> None:
    task = tb2_task(tmp_path)
    make = agent_factory("nop")
    agent = make(task)
    assert isinstance(agent, NopAgent) and agent.name == "nop"
    assert make(task) is not agent  # a fresh agent per trial
    trajectory = await agent.run(task.instruction, sandbox=None)
    assert [s.role for s in trajectory.steps] == [Role.USER]
    assert trajectory.steps[0].content == task.instruction
    assert trajectory.failure_mode is None


async def test_agent_factory_oracle_without_a_solution(tmp_path: Path) -> None:
    task = tb2_task(tmp_path)
    agent = agent_factory("oracle")(task)
    assert isinstance(agent, OracleAgent) and agent.task is task
    trajectory = await agent.run(task.instruction, sandbox=None)
    assert trajectory.failure_mode == TrajectoryFailure.UNKNOWN
    assert trajectory.notes == "task hello has no solution for the oracle to run"


async def test_oracle_runs_the_solution_script(tmp_path: Path) -> None:
    task = load_task(make_task(tmp_path, "solved", solution="#!/bin/bash\necho done\n"))
    sandbox = FakeSandbox(ExecResult(exit_code=0, stdout=b"done\n"))
    trajectory = await agent_factory("oracle")(task).run(task.instruction, sandbox, timeout_sec=100)
    (archive,) = sandbox.archives  # the solution folder put at /solution
    assert archive[0] == "/solution" and "solve.sh" in archive[1]
    assert [c for c, _ in sandbox.commands] == ["bash /solution/solve.sh"]
    assert [s.role for s in trajectory.steps] == [Role.USER, Role.ASSISTANT, Role.TOOL]
    result = trajectory.steps[2].tool_results[0]
    assert result.content == "done\n" and result.is_error is False
    assert trajectory.failure_mode is None


def test_agent_factory_refuses_an_unknown_agent() -> None:
    with pytest.raises(AgentNotFound) as info:
        agent_factory("no-such-agent-xyz")
    assert "no agent named 'no-such-agent-xyz'" in str(info.value)
    assert isinstance(info.value, LookupError)


def test_recording_sandbox_logs_every_command(tmp_path: Path) -> None:
    inner = FakeSandbox(ExecResult(exit_code=2, stdout=b"out", stderr=b"err\n"))
    log = tmp_path / "trial" / "commands.jsonl"
    recorder = RecordingSandbox(inner, log)
    result = recorder.exec("ls /nope", cwd="/app")
    assert result.exit_code == 2
    assert recorder.commands == 1
    entry = json.loads(log.read_text())
    assert entry["kind"] == "exec" and entry["command"] == "ls /nope"
    assert entry["cwd"] == "/app" and entry["exit_code"] == 2
    assert entry["stdout"] == "out" and entry["stderr"] == "err\n"
    assert (tmp_path / "trial" / "terminal.log").read_text() == "$ ls /nope\nouterr\n[exit 2]\n"
    assert recorder.files is inner.files  # everything else passes through


def test_resume_refuses_a_directory_that_is_not_a_run(tmp_path: Path) -> None:
    (tmp_path / "stray.txt").write_text("x")
    config = RunConfig(id="r", dataset="d", task_ids=[], agent="nop")
    with pytest.raises(BenchError, match="holds no run"):
        _open_run_dir(tmp_path, config, resume=True)
