"""rock's commands with a broken agent or task-family package installed beside the good ones:
one sentence naming the package, never a traceback (a real distribution on PYTHONPATH)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def install_broken(root: Path, group: str, name: str) -> dict[str, str]:
    info = root / "broken_plugin-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: broken-plugin\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[{group}]\n{name} = broken_plugin_mod\n")
    (root / "broken_plugin_mod.py").write_text("import not_a_module_here\n")
    return {**os.environ, "PYTHONPATH": str(root)}


def rock(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rock.cli", *args],
        capture_output=True, text=True, cwd=ROOT, env=env, timeout=120, check=False,
    )  # fmt: skip


def test_synth_families_names_the_broken_package_and_lists_the_rest(tmp_path: Path) -> None:
    result = rock(
        "synth", "families", "--json", env=install_broken(tmp_path, "ale.task_families", "x")
    )
    assert result.returncode == 0, result.stderr
    assert "rock: the task-family package 'broken-plugin' is installed but failed" in result.stderr
    assert "Traceback" not in result.stderr
    assert "text-find" in {row["name"] for row in json.loads(result.stdout)}


def test_bench_run_with_a_broken_agent_package_is_one_sentence(tmp_path: Path) -> None:
    env = install_broken(tmp_path / "site", "ale.agents", "brokenagent")
    dataset = ROOT / "datasets" / "terminal-bench-local"
    result = rock(
        "bench", "run", "--dataset", str(dataset), "--agent", "brokenagent",
        "--output", str(tmp_path / "out"), env=env,
    )  # fmt: skip
    assert result.returncode == 2, result.stderr
    assert "the agent package 'broken-plugin' is installed but failed to load" in result.stderr
    assert "pip uninstall broken-plugin" in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "out").exists()  # nothing half-written
