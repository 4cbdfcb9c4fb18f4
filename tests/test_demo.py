"""`make demo`'s script end to end, quick: every stage for real (a rock daemon, synthesis
of held-out and training tasks, a tiny model (``--tiny``; the real model's import and
loading are tested in roll's test_model_import), SFT, IPA on tasks in Docker sandboxes,
rock bench of three models greedy and sampled, the table and the curves) on a few tasks and
steps."""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from ale.task import load_tasks
from rock.bench.results import BenchmarkResults, TrialResults

ROOT = Path(__file__).resolve().parents[1]


def _demo() -> ModuleType:
    spec = importlib.util.spec_from_file_location("demo", ROOT / "scripts" / "demo.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _run(outcomes: dict[str, list[bool]]) -> BenchmarkResults:
    trials = [
        TrialResults(
            id=f"{t}{i}",
            trial_name=f"{t}.{i}",
            task_id=t,
            attempt=i + 1,
            is_resolved=ok,
            instruction="do it",
            agent="roll-policy",
        )
        for t, oks in outcomes.items()
        for i, ok in enumerate(oks)
    ]
    return BenchmarkResults(id="r", dataset="d", agent="roll-policy", results=trials)


def test_the_demo_table_has_every_figure_with_its_interval_and_rl_s_gain() -> None:
    """Untrained, SFT and SFT + RL with greedy, sampled and pass@4, each with its 95 %
    interval over tasks; RL's gain over SFT paired by task (here every task gains)."""
    demo = _demo()
    tasks = [f"t{i}" for i in range(20)]
    sft_greedy = {t: [i < 6] for i, t in enumerate(tasks)}
    rl_greedy = {t: [i < 14] for i, t in enumerate(tasks)}
    sft_sampled = {t: [i < 10, False, False, False] for i, t in enumerate(tasks)}
    rl_sampled = {t: [i < 16, i < 8, False, False] for i, t in enumerate(tasks)}
    results = {
        "untrained": {"greedy": demo.figures(_run({t: [False] for t in tasks}), 1)},
        "SFT": {
            "greedy": demo.figures(_run(sft_greedy), 1),
            "sampled": demo.figures(_run(sft_sampled), 4),
        },
        demo.RL_LABEL: {
            "greedy": demo.figures(_run(rl_greedy), 1),
            "sampled": demo.figures(_run(rl_sampled), 4),
        },
    }
    assert results["SFT"]["sampled"]["pass_at_k"] == pytest.approx(0.5)
    text = demo.table(results)
    rows = {line.split(" | ")[0].strip("| "): line for line in text.splitlines()}
    assert rows["untrained"].startswith("| untrained | 0.0% [0%, 0%] (0/20) | — | — |")
    assert "| 30.0% [" in rows["SFT"] and "(6/20)" in rows["SFT"]
    assert rows["SFT + RL (IPA)"].count("[") == 3  # greedy, sampled and pass@4 each
    low = float(rows["RL's gain over SFT"].split("[")[1].split(",")[0])
    assert "+40.0 points" in rows["RL's gain over SFT"] and low > 0  # paired: surely above
    assert "percentile bootstrap over the held-out tasks" in text


@pytest.mark.docker
@pytest.mark.timeout(1500)  # (its own limits come first; 600 s was short under load)
def test_demo_runs_end_to_end_quick(tmp_path: Path) -> None:
    """The demo on roll's HF engine, run again (every stage reused), then with ``--engine
    vllm`` for the one evaluation removed: that model is served by a vLLM server of its own,
    which goes with the run (RL sampling from a server ``roll train`` launches is
    test_vllm_engine's; four servers here took 10 of the demo's 14 minutes in CI)."""
    out = tmp_path / "demo"
    demo = [sys.executable, str(ROOT / "scripts" / "demo.py"), "--out", str(out), "--quick"]
    done = subprocess.run([*demo, "--tiny", "--json"], capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    for number in range(1, 7):
        assert f"=== [{number}/6]" in done.stdout  # progress at every stage
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    results = summary["results"]
    assert list(results) == ["untrained", "SFT", "SFT + RL (IPA)"]
    heldout = load_tasks(out / "datasets" / "heldout" / "tasks")
    train = load_tasks(out / "datasets" / "train" / "tasks")
    assert len(heldout) == 4 and len(train) == 8
    assert not {t.instruction for t in heldout} & {t.instruction for t in train}
    for r in results.values():
        for mode in ("greedy", "sampled"):
            assert r[mode]["trials"] == 4 and 0 <= r[mode]["accuracy"] <= 1
    assert results["untrained"]["greedy"]["accuracy"] == 0.0  # random weights solve nothing
    rows = [json.loads(x) for x in (out / "rl" / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == 2 and rows[-1]["episodes/scored"] >= 4
    assert (out / "curves.png").stat().st_size > 10_000
    for r in results.values():
        low, high = r["greedy"]["interval"]
        assert 0 <= low <= r["greedy"]["accuracy"] <= high <= 1
    run = json.loads((out / "bench" / "sft-sampled" / "run.json").read_text())
    assert (
        run["timeout_multiplier"] == _demo().TIMEOUT_MULTIPLIER
    )  # turns end a trial, not the clock
    table = (out / "results.md").read_text()
    assert "| SFT |" in table and "| RL's gain over SFT |" in table
    # a second run reuses every finished stage
    again = subprocess.run([*demo, "--tiny"], capture_output=True, text=True, timeout=600)
    assert again.returncode == 0 and again.stdout.count("there from an earlier run") == 4
    # the RL model evaluated again, served by vLLM
    for name in ("rl", "rl-sampled"):
        shutil.rmtree(out / "bench" / name)
    served = subprocess.run(
        [*demo, "--tiny", "--json", "--engine", "vllm"], capture_output=True, text=True,
        timeout=900,
    )  # fmt: skip
    assert served.returncode == 0, served.stdout[-4000:] + served.stderr[-4000:]
    assert served.stdout.count("there from an earlier run") == 4
    assert "engine: vllm (--engine)" in served.stdout
    rl = json.loads(served.stdout.strip().splitlines()[-1])["results"]["SFT + RL (IPA)"]
    assert rl["greedy"]["trials"] == 4 and rl["sampled"]["trials"] == 4
    log = (out / "bench" / "rl-vllm.log").read_text()
    assert "Application startup complete" in log
    agent = json.loads((out / "bench" / "rl" / "config.json").read_text())["agents"][0]
    assert agent["kwargs"]["server_url"].startswith("http://127.0.0.1:")  # the trials' model
    assert not (out / "bench" / "model-vllm.log").exists()  # the others' results were kept
    real = subprocess.run([*demo], capture_output=True, text=True, timeout=600)
    assert real.returncode == 1 and "holds a run with the tiny model; add --fresh" in real.stderr


def test_demo_file_names_are_not_words_of_the_agents_prompt() -> None:
    """A file name's word must be nowhere else in the agent's prompt, or a tiny model cannot
    tell from the prompt which name the request asked for: ``result.txt`` was an output name
    while the compact prompt says "Its result comes back..."."""
    import re

    from task_families.text_tools import OUTPUTS, SOURCES

    from iflow.models.parsing import render_tools_prompt
    from iflow.prompts import system_prompt
    from roll.demonstrations import iflow_tool_schemas

    prompt = system_prompt(workspace="sandbox", cwd="/app", mode="yolo", profile="compact")
    prompt += render_tools_prompt(iflow_tool_schemas(compact=True), brief=True)
    words = set(re.findall(r"[a-z]+", prompt.lower()))
    stems = {name.split(".")[0] for name in [*SOURCES, *OUTPUTS]}
    assert not stems & words, f"{sorted(stems & words)} are words of the agent's prompt"
