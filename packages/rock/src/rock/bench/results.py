"""What a benchmark run records, with the field names Terminal-Bench users know.

Each trial writes ``results.json`` (:class:`TrialResults`); the run writes one
(:class:`BenchmarkResults`) with accuracy, pass@k and the resolved and unresolved ids,
rewritten after every trial so an interrupted run still has a true one.
"""

from __future__ import annotations

import contextlib
import re
from collections import Counter, defaultdict
from datetime import datetime
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from ale.trajectory import FailureMode
from rock.bench.scores import interval, pass_at_k, per_task

RUN_FILE = "run.json"
RESULTS_FILE = "results.json"


class _Model(BaseModel):
    model_config = ConfigDict(extra="ignore")


class StepResults(_Model):
    """One step of a multi-step task's trial: its agent, its verifier, its rewards."""

    name: str
    is_resolved: bool | None = None
    reward: float | None = None
    rewards: dict[str, float] | None = None
    failure_mode: FailureMode = FailureMode.NONE
    error: str | None = None
    parser_results: dict[str, str] | None = None
    agent_started_at: datetime | None = None
    agent_ended_at: datetime | None = None
    test_started_at: datetime | None = None
    test_ended_at: datetime | None = None
    agent_sec: float | None = None
    test_sec: float | None = None


class TrialResults(_Model):
    """One attempt of one task."""

    id: str
    """Unique id of this trial (uuid hex)."""
    trial_name: str
    """``<task_id>.<attempt>-of-<n_attempts>``; also the trial's directory name."""
    task_id: str
    attempt: int
    instruction: str
    is_resolved: bool | None = None
    """Whether the verifier passed the task; None when it never ran."""
    reward: float | None = None
    rewards: dict[str, float] | None = None
    """Every named reward the verifier wrote (``reward`` for reward.txt's one number); the
    trial's ``reward`` is the ``reward`` key, else their mean."""
    failure_mode: FailureMode = FailureMode.NONE
    error: str | None = None
    """One sentence on what went wrong, when something did."""
    parser_results: dict[str, str] | None = None
    """Each test's outcome (``passed``, ``failed``, ``error``, ``skipped``) from the
    verifier's pytest summary, when it printed one."""
    category: str | None = None
    difficulty: str | None = None
    source_format: str | None = None
    agent: str
    model: str | None = None
    image: str | None = None
    image_built: bool = False
    total_input_tokens: int | None = None
    total_output_tokens: int | None = None
    n_steps: int | None = None
    trial_started_at: datetime | None = None
    trial_ended_at: datetime | None = None
    agent_started_at: datetime | None = None
    agent_ended_at: datetime | None = None
    test_started_at: datetime | None = None
    test_ended_at: datetime | None = None
    build_sec: float | None = None
    setup_sec: float | None = None
    """Sandbox start (after the image exists) until the agent starts."""
    agent_sec: float | None = None
    test_sec: float | None = None
    """The test script's own run time."""
    total_sec: float | None = None
    overhead_sec: float | None = None
    """What the harness itself took: total minus build, agent and test time."""
    trajectory_path: str | None = None
    recording_path: str | None = None
    """The command log (commands.jsonl) of the agent phase."""
    retries: int = 0
    """Times the trial ran again after a harness fault (``--max-retries``)."""
    retried_failures: list[FailureMode] = Field(default_factory=list)
    """The harness faults that made it run again, in order."""
    steps: list[StepResults] = Field(default_factory=list)
    """A multi-step task's steps that ran, in order (the trial's rewards are made of
    theirs by the task's strategy); empty for a task of one step."""


class InvalidTask(_Model):
    path: str
    reason: str


class BenchmarkResults(_Model):
    """A whole run."""

    id: str
    dataset: str
    agent: str
    model: str | None = None
    n_attempts: int = 1
    results: list[TrialResults] = Field(default_factory=list)
    invalid_tasks: list[InvalidTask] = Field(default_factory=list)
    n_resolved: int = 0
    n_unresolved: int = 0
    resolved_ids: list[str] = Field(default_factory=list)
    unresolved_ids: list[str] = Field(default_factory=list)
    accuracy: float = 0.0
    """Resolved trials over trials run (Terminal-Bench's accuracy)."""
    n_retries: int = 0
    """Trials run again after a harness fault (never after the agent's own failure)."""
    pass_at_k: dict[str, float | None] = Field(default_factory=dict)
    """Mean over tasks of the unbiased pass@k estimate, for k = 1..n_attempts (as
    strings, as in JSON)."""
    started_at: datetime | None = None
    ended_at: datetime | None = None

    def refresh(self) -> BenchmarkResults:
        """Recompute the aggregates from ``results``."""
        done = self.results
        self.n_resolved = sum(1 for r in done if r.is_resolved)
        self.n_unresolved = len(done) - self.n_resolved
        self.resolved_ids = sorted({r.task_id for r in done if r.is_resolved})
        self.unresolved_ids = sorted({r.task_id for r in done} - set(self.resolved_ids))
        self.accuracy = self.n_resolved / len(done) if done else 0.0
        self.n_retries = sum(r.retries for r in done)
        self.pass_at_k = {str(k): pass_at_k_mean(done, k) for k in range(1, self.n_attempts + 1)}
        return self


class RunConfig(_Model):
    """run.json: what a run was asked to do, checked again on --resume."""

    id: str
    dataset: str
    task_ids: list[str]
    agent: str
    model: str | None = None
    agent_kwargs: dict[str, Any] = Field(default_factory=dict)
    n_attempts: int = 1
    n_concurrent: int = 1
    timeout_multiplier: float = 1.0
    """The factor on every task's agent and verifier time limits (``--timeout-multiplier``)."""
    started_at: datetime | None = None
    rock_version: str | None = None


def pass_at_k_mean(results: list[TrialResults], k: int) -> float | None:
    """Mean over tasks of :func:`pass_at_k`; tasks with fewer than k trials are skipped;
    None when no task has k."""
    by_task: dict[str, list[bool]] = defaultdict(list)
    for r in results:
        by_task[r.task_id].append(bool(r.is_resolved))
    values = [pass_at_k(len(v), sum(v), k) for v in by_task.values() if len(v) >= k]
    return sum(values) / len(values) if values else None


def _mean(values: list[float | None]) -> float | None:
    got = [v for v in values if v is not None]
    return sum(got) / len(got) if got else None


def summary(results: BenchmarkResults) -> dict[str, Any]:
    """What ``rock bench show`` prints: rates overall, per category and difficulty,
    failure modes, mean durations."""

    def rate(group: list[TrialResults]) -> dict[str, Any]:
        n = len(group)
        ok = sum(1 for r in group if r.is_resolved)
        return {"trials": n, "resolved": ok, "rate": ok / n if n else 0.0}

    by_category: dict[str, list[TrialResults]] = defaultdict(list)
    by_difficulty: dict[str, list[TrialResults]] = defaultdict(list)
    for r in results.results:
        by_category[r.category or "-"].append(r)
        by_difficulty[r.difficulty or "-"].append(r)
    modes = Counter(r.failure_mode.value for r in results.results)
    return {
        "id": results.id,
        "agent": results.agent,
        "model": results.model,
        "tasks": len({r.task_id for r in results.results}),
        "trials": len(results.results),
        "invalid_tasks": len(results.invalid_tasks),
        "accuracy": results.accuracy,
        "accuracy_95": interval(list(per_task(results.results).values())),
        "pass_at_k": results.pass_at_k,
        "by_category": {k: rate(v) for k, v in sorted(by_category.items())},
        "by_difficulty": {k: rate(v) for k, v in sorted(by_difficulty.items())},
        "failure_modes": dict(modes.most_common()),
        "mean_sec": {
            "build": _mean([r.build_sec for r in results.results if r.image_built]),
            "setup": _mean([r.setup_sec for r in results.results]),
            "agent": _mean([r.agent_sec for r in results.results]),
            "test": _mean([r.test_sec for r in results.results]),
            "overhead": _mean([r.overhead_sec for r in results.results]),
            "total": _mean([r.total_sec for r in results.results]),
        },
        "tokens": {
            "input": sum(r.total_input_tokens or 0 for r in results.results),
            "output": sum(r.total_output_tokens or 0 for r in results.results),
        },
    }


def read_run(run_dir: Path) -> BenchmarkResults:
    """The run's results.json, rebuilt from the trials' files when it is missing or stale."""
    run_dir = Path(run_dir)
    config_file = run_dir / RUN_FILE
    if not config_file.is_file():
        raise FileNotFoundError(
            f"{run_dir} holds no {RUN_FILE}, so it is not a rock bench run directory; "
            "pass the --output directory of 'rock bench run'."
        )
    config = RunConfig.model_validate_json(config_file.read_text())
    results_file = run_dir / RESULTS_FILE
    base = (
        BenchmarkResults.model_validate_json(results_file.read_text())
        if results_file.is_file()
        else BenchmarkResults(id=config.id, dataset=config.dataset, agent=config.agent)
    )
    base.results = collect_trials(run_dir)
    base.n_attempts = config.n_attempts
    return base.refresh()


def trial_path(run_dir: Path, trial_name: str) -> Path:
    """A trial's directory: ``<run>/<trial name>/``, as Harbor lays out a job's trials."""
    return Path(run_dir) / trial_name


def collect_trials(run_dir: Path) -> list[TrialResults]:
    """Every finished trial under ``run_dir`` (those with a results.json; runs written
    before the flat layout kept them under ``<task>/<trial>/``)."""
    out = []
    root = Path(run_dir)
    found = [*root.glob(f"*/{RESULTS_FILE}"), *root.glob(f"*/*/{RESULTS_FILE}")]
    for path in sorted(found):
        try:
            out.append(TrialResults.model_validate_json(path.read_text()))
        except ValueError:
            continue  # a torn file from a killed run: the trial is redone on --resume
    return out


_ERROR_LINES = (
    re.compile(r"^E\s+\S"),  # pytest's line for the error itself
    re.compile(r"error|exception|traceback|not found|no such file", re.IGNORECASE),
)
"""What the verifier's last error line looks like, in order of preference."""
_E_LINE = re.compile(r"^\s*E(\s|$)")


def failure_reason(result: TrialResults, trial_dir: Path) -> str:
    """Why a trial was not resolved, for a person: the harness's error when there was one,
    else the failing tests by name and the verifier's last error line (from its output in
    ``trial_dir/verifier``), else the reward."""
    if result.error:
        return result.error
    parts = [f"reward {result.reward}"]
    failed = [name for name, status in (result.parser_results or {}).items() if status != "passed"]
    if failed:
        shown = ", ".join(failed[:5]) + (f" and {len(failed) - 5} more" if len(failed) > 5 else "")
        parts.append(f"failed: {shown}")
    line = _last_error_line(trial_dir / "verifier")
    if line:
        parts.append(f"last error: {line}")
    return "; ".join(parts)


def _last_error_line(verifier_dir: Path) -> str | None:
    lines: list[str] = []
    for name in ("stdout.txt", "stderr.txt"):
        with contextlib.suppress(OSError):
            lines += (verifier_dir / name).read_text(errors="replace").splitlines()
    for pattern in _ERROR_LINES:
        hits = [i for i, line in enumerate(lines) if pattern.search(line.strip())]
        if hits:
            first = hits[-1]  # the last error; for pytest, the first line of its E block
            while pattern is _ERROR_LINES[0] and first and _E_LINE.match(lines[first - 1]):
                first -= 1
            while not pattern.search(lines[first].strip()):  # a bare "E" line
                first += 1
            return lines[first].strip()[:200]
    return None
