"""rock.bench.results: pass@k, aggregates, summaries and reading runs back."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from bench_fakes import (
    trial,
)

from rock.bench.results import (
    RESULTS_FILE,
    RUN_FILE,
    BenchmarkResults,
    FailureMode,
    InvalidTask,
    RunConfig,
    TrialResults,
    collect_trials,
    pass_at_k_mean,
    read_run,
    summary,
)
from rock.bench.scores import pass_at_k


# -- results: pass@k -------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("n", "c", "k", "expected"),
    [
        (5, 2, 2, 0.7),  # 1 - C(3,2)/C(5,2) = 1 - 3/10
        (5, 2, 1, 0.4),  # pass@1 is c/n
        (10, 3, 5, 1 - 21 / 252),  # 1 - C(7,5)/C(10,5)
        (4, 0, 2, 0.0),
        (4, 0, 1, 0.0),
        (3, 1, 3, 1.0),  # n - c = 2 < k = 3: every draw of 3 holds the success
        (2, 2, 1, 1.0),
        (1, 1, 1, 1.0),
    ],
)
def test_pass_at_k_matches_hand_computed_values(n: int, c: int, k: int, expected: float) -> None:
    assert pass_at_k(n, c, k) == pytest.approx(expected)


def test_pass_at_k_agrees_with_the_combinatorial_formula() -> None:
    for n in range(1, 8):
        for c in range(n + 1):
            for k in range(1, n + 1):
                want = 1.0 if n - c < k else 1 - math.comb(n - c, k) / math.comb(n, k)
                assert pass_at_k(n, c, k) == pytest.approx(want), (n, c, k)


@pytest.mark.parametrize(("n", "c", "k"), [(3, 4, 1), (3, -1, 1), (3, 1, 0), (3, 1, 4), (0, 0, 1)])
def test_pass_at_k_rejects_impossible_arguments(n: int, c: int, k: int) -> None:
    with pytest.raises(ValueError, match=r"0 <= c <= n and 1 <= k <= n") as info:
        pass_at_k(n, c, k)
    assert f"n={n}, c={c}, k={k}" in str(info.value)


def test_pass_at_k_mean_skips_tasks_with_fewer_than_k_trials() -> None:
    results = [
        trial("a", 1, True),
        trial("a", 2, False),
        trial("b", 1, True),
        trial("c", 1, None),  # never verified counts as a failure
        trial("c", 2, False),
    ]
    # k=1: a 0.5, b 1.0, c 0.0
    assert pass_at_k_mean(results, 1) == pytest.approx(0.5)
    # k=2: b has one trial and is skipped; a: n-c=1<2 -> 1.0; c: 0.0
    assert pass_at_k_mean(results, 2) == pytest.approx(0.5)
    assert pass_at_k_mean(results, 3) is None
    assert pass_at_k_mean([], 1) is None


# -- results: aggregates ---------------------------------------------------------------------
def test_refresh_counts_ids_accuracy_and_pass_at_k() -> None:
    run = BenchmarkResults(id="r", dataset="d", agent="nop", n_attempts=2)
    run.results = [
        trial("a", 1, True, n_attempts=2),
        trial("a", 2, False, n_attempts=2),
        trial("b", 1, True, n_attempts=2),
        trial("c", 1, None, n_attempts=2),
        trial("c", 2, False, n_attempts=2),
    ]
    assert run.refresh() is run
    assert run.n_resolved == 2
    assert run.n_unresolved == 3
    assert run.resolved_ids == ["a", "b"]
    assert run.unresolved_ids == ["c"]
    assert run.accuracy == pytest.approx(2 / 5)
    assert run.pass_at_k == {"1": pytest.approx(0.5), "2": pytest.approx(0.5)}


def test_refresh_of_an_empty_run_is_all_zero() -> None:
    run = BenchmarkResults(id="r", dataset="d", agent="nop", n_attempts=1).refresh()
    assert (run.n_resolved, run.n_unresolved, run.accuracy) == (0, 0, 0.0)
    assert run.resolved_ids == [] and run.unresolved_ids == []
    assert run.pass_at_k == {"1": None}


def test_summary_groups_by_category_difficulty_and_failure_mode() -> None:
    run = BenchmarkResults(id="r1", dataset="d", agent="oracle", model="m")
    run.invalid_tasks = [InvalidTask(path="/x/bad", reason="broken")]
    run.results = [
        trial(
            "a",
            resolved=True,
            category="files",
            difficulty="easy",
            image_built=True,
            build_sec=10.0,
            agent_sec=2.0,
            total_input_tokens=100,
            total_output_tokens=7,
        ),
        trial(
            "b",
            resolved=False,
            category="files",
            difficulty="hard",
            failure_mode=FailureMode.AGENT_TIMEOUT,
            build_sec=99.0,  # not built: a cache hit does not count towards build time
            agent_sec=4.0,
            total_input_tokens=50,
        ),
        trial("c", resolved=None, failure_mode=FailureMode.BUILD_FAILED),
    ]
    run.refresh()
    got = summary(run)
    assert got["id"] == "r1"
    assert got["agent"] == "oracle" and got["model"] == "m"
    assert got["tasks"] == 3 and got["trials"] == 3
    assert got["invalid_tasks"] == 1
    assert got["accuracy"] == pytest.approx(1 / 3)
    assert got["accuracy_95"] == (0.0, 1.0)  # three tasks: anything from none to all of them
    assert got["by_category"] == {
        "-": {"trials": 1, "resolved": 0, "rate": 0.0},
        "files": {"trials": 2, "resolved": 1, "rate": 0.5},
    }
    assert got["by_difficulty"] == {
        "-": {"trials": 1, "resolved": 0, "rate": 0.0},
        "easy": {"trials": 1, "resolved": 1, "rate": 1.0},
        "hard": {"trials": 1, "resolved": 0, "rate": 0.0},
    }
    assert got["failure_modes"] == {"none": 1, "agent_timeout": 1, "build_failed": 1}
    assert got["mean_sec"]["build"] == pytest.approx(10.0)
    assert got["mean_sec"]["agent"] == pytest.approx(3.0)
    assert got["mean_sec"]["test"] is None
    assert got["tokens"] == {"input": 150, "output": 7}


def _write_trial(run_dir: Path, result: TrialResults, *, legacy: bool = False) -> Path:
    """A trial's results.json where a run writes it (``legacy``: under ``<task>/``, as runs
    before the flat layout did)."""
    base = run_dir / result.task_id if legacy else run_dir
    path = base / result.trial_name / RESULTS_FILE
    path.parent.mkdir(parents=True)
    path.write_text(result.model_dump_json())
    return path


def test_read_run_without_run_json_says_it_is_not_a_run(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError) as info:
        read_run(tmp_path)
    message = str(info.value)
    assert str(tmp_path) in message
    assert f"holds no {RUN_FILE}" in message
    assert "--output" in message


def test_read_run_rebuilds_from_trial_files_and_skips_torn_ones(tmp_path: Path) -> None:
    config = RunConfig(id="run-1", dataset="/d", task_ids=["a", "b"], agent="nop", n_attempts=2)
    (tmp_path / RUN_FILE).write_text(config.model_dump_json())
    _write_trial(tmp_path, trial("a", 1, True, n_attempts=2))
    _write_trial(tmp_path, trial("a", 2, True, n_attempts=2), legacy=True)
    _write_trial(tmp_path, trial("b", 1, False, n_attempts=2))
    torn = tmp_path / "b.2-of-2" / RESULTS_FILE
    torn.parent.mkdir(parents=True)
    torn.write_text('{"id": "b-2", "trial_na')

    trials = collect_trials(tmp_path)
    assert sorted(t.trial_name for t in trials) == ["a.1-of-2", "a.2-of-2", "b.1-of-2"]

    run = read_run(tmp_path)
    assert run.id == "run-1" and run.agent == "nop"
    assert run.n_attempts == 2
    assert run.n_resolved == 2 and run.n_unresolved == 1
    assert run.resolved_ids == ["a"] and run.unresolved_ids == ["b"]
    assert run.accuracy == pytest.approx(2 / 3)
    # pass@2 only counts a (b has one finished trial): n=2, c=2 -> 1.0
    assert run.pass_at_k == {"1": pytest.approx(0.5), "2": pytest.approx(1.0)}


def test_read_run_keeps_a_stale_results_json_header_but_recounts(tmp_path: Path) -> None:
    config = RunConfig(id="run-2", dataset="/d", task_ids=["a"], agent="nop")
    (tmp_path / RUN_FILE).write_text(config.model_dump_json())
    stale = BenchmarkResults(
        id="run-2",
        dataset="/d",
        agent="nop",
        invalid_tasks=[InvalidTask(path="/d/x", reason="bad toml")],
        n_resolved=42,
    )
    (tmp_path / RESULTS_FILE).write_text(stale.model_dump_json())
    _write_trial(tmp_path, trial("a", 1, False))
    run = read_run(tmp_path)
    assert run.n_resolved == 0 and run.n_unresolved == 1
    assert [i.reason for i in run.invalid_tasks] == ["bad toml"]


def test_collect_trials_of_an_empty_directory_is_empty(tmp_path: Path) -> None:
    assert collect_trials(tmp_path) == []
