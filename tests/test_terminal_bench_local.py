"""The project's smoke set, datasets/terminal-bench-local, through `rock bench`:
the Terminal-Bench gate (every task passes with oracle and fails with nop), and the iflow
agent reached through the ``ale.agents`` entry point with --model and --agent-kwarg."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from ale.task import load_tasks

ROOT = Path(__file__).resolve().parents[1]
DATASET = ROOT / "datasets" / "terminal-bench-local"
ROCK = [sys.executable, "-m", "rock.cli"]
CATEGORIES = {
    "data-processing",
    "debugging",
    "system-administration",
    "software-engineering",
    "scientific-computing",
    "security",
    "games",
}

pytestmark = pytest.mark.docker


def test_the_smoke_set_covers_the_categories_in_the_2_0_form() -> None:
    tasks = load_tasks(DATASET)
    assert len(tasks) >= 15
    assert all(t.source_format == "tb2" and t.solution is not None for t in tasks)
    assert {t.metadata.category for t in tasks} >= CATEGORIES
    assert all(not t.environment.allow_internet for t in tasks)
    difficulties = Counter(t.metadata.difficulty for t in tasks)
    assert set(difficulties) == {"easy", "medium", "hard"}


@pytest.mark.slow
def test_every_task_passes_with_oracle_and_fails_with_nop(tmp_path: Path) -> None:
    done = subprocess.run(
        [
            *ROCK,
            "bench",
            "check",
            str(DATASET),
            "--n-concurrent",
            "2",
            "--output",
            str(tmp_path),
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=1500,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    report = json.loads(done.stdout)
    assert report["offenders"] == [] and report["tasks"] >= 15
    oracle = json.loads((tmp_path / "oracle" / "results.json").read_text())
    nop = json.loads((tmp_path / "nop" / "results.json").read_text())
    assert oracle["accuracy"] == 1.0 and nop["accuracy"] == 0.0
    assert {r["failure_mode"] for r in oracle["results"]} == {"none"}


def test_iflow_runs_through_rock_bench_with_model_and_agent_kwargs(tmp_path: Path) -> None:
    task = DATASET / "csv-sales-report"
    solve = (task / "solution" / "solve.sh").read_text()
    script = tmp_path / "script.json"
    script.write_text(
        json.dumps(
            [
                {"tool_calls": [{"name": "run_shell_command", "arguments": {"command": solve}}]},
                {"tool_calls": [{"name": "finish", "arguments": {"summary": "report written"}}]},
            ]
        )
    )
    out = tmp_path / "run"
    done = subprocess.run(
        [
            *ROCK,
            "bench",
            "run",
            "--dataset",
            str(DATASET),
            "--task",
            "csv-sales-report",
            "--agent",
            "iflow",
            "--model",
            "scripted-expert",
            "--agent-kwarg",
            "provider=scripted",
            "--agent-kwarg",
            f"script={script}",
            "--agent-kwarg",
            "max_turns=5",
            "--output",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    trial = out / "csv-sales-report.1-of-1"
    result = json.loads((trial / "results.json").read_text())
    assert result["agent"] == "iflow" and result["is_resolved"] is True, result
    assert result["model"] == "scripted-expert"
    trajectory = json.loads((trial / "agent" / "trajectory.jsonl").read_text())
    assert trajectory["agent"]["name"] == "iflow" and trajectory["reward"] == 1.0
    commands = [json.loads(line) for line in (trial / "commands.jsonl").read_text().splitlines()]
    assert any("report.csv" in str(c["command"]) for c in commands)
    assert "accuracy 100.0%" in done.stdout
