"""A rock bench run as Harbor lays out a job, so Harbor's viewer and result models read it.

Beside rock's own records, a run directory gets what Harbor writes: ``result.json`` for the
job (its stats per agent and dataset, every trial's result inline), and in each trial's
directory (``<run>/<task>.<attempt>-of-<n>/``) ``config.json`` and ``result.json`` with
Harbor's fields — ids, the task's path and checksum, agent and model, the verifier's
rewards, the exception with its traceback, the phases' times — plus the trajectory where
Harbor looks for it (``agent/trajectory.json``, ATIF) and the tests' output as
``verifier/test-stdout.txt``. The documents are plain JSON; a test reads them with Harbor's
own pydantic models and its viewer's scanner.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import uuid
from collections import defaultdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ale.task import Task
from rock.bench.results import BenchmarkResults, FailureMode, RunConfig, StepResults, TrialResults

HARBOR_RESULT = "result.json"
HARBOR_CONFIG = "config.json"


def _uuid(value: str) -> str:
    """``value`` as a UUID string (rock's hex ids are; anything else is hashed into one)."""
    try:
        return str(uuid.UUID(value))
    except ValueError:
        return str(uuid.uuid5(uuid.NAMESPACE_URL, f"rock:{value}"))


def task_checksum(task_dir: Path) -> str:
    """sha256 over the task directory's files (names and bytes), in name order."""
    digest = hashlib.sha256()
    for path in sorted(p for p in Path(task_dir).rglob("*") if p.is_file()):
        digest.update(path.relative_to(task_dir).as_posix().encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


def _timing(start: datetime | None, end: datetime | None) -> dict[str, Any] | None:
    if start is None and end is None:
        return None
    return {"started_at": _iso(start), "finished_at": _iso(end)}


def _iso(moment: datetime | None) -> str | None:
    return moment.isoformat() if moment is not None else None


def trial_config(result: TrialResults, task: Task, run: RunConfig, run_dir: Path) -> dict[str, Any]:
    return {
        "task": {"path": str(task.path)},
        "trial_name": result.trial_name,
        "trials_dir": str(run_dir),
        "agent": {
            "name": result.agent or run.agent,
            "model_name": run.model,
            "kwargs": run.agent_kwargs,
        },
        "job_id": _uuid(run.id),
    }


def trial_result(
    result: TrialResults, task: Task, run: RunConfig, trial_dir: Path, checksum: str | None = None
) -> dict[str, Any]:
    """The trial as Harbor's ``TrialResult`` (``checksum``: the task's, if known already)."""
    rewards = result.rewards or ({"reward": result.reward} if result.reward is not None else None)
    error = None
    if result.error or result.failure_mode not in (FailureMode.NONE,):
        traceback = ""
        for name in ("error.txt", "agent/traceback.txt"):
            if (trial_dir / name).is_file():
                traceback = (trial_dir / name).read_text(errors="replace")
                break
        error = {
            "exception_type": result.failure_mode.value,
            "exception_message": result.error or result.failure_mode.value,
            "exception_traceback": traceback,
            "occurred_at": _iso(result.trial_ended_at or datetime.now(UTC)),
        }
    model = {"name": run.model} if run.model else None
    tokens = {
        "n_input_tokens": result.total_input_tokens,
        "n_output_tokens": result.total_output_tokens,
    }
    return {
        "id": _uuid(result.id),
        "task_name": result.task_id,
        "trial_name": result.trial_name,
        "trial_uri": trial_dir.resolve().as_uri(),
        "task_id": {"path": str(task.path)},
        "source": run.dataset,
        "task_checksum": checksum or task_checksum(task.path),
        "config": trial_config(result, task, run, trial_dir.parent),
        "agent_info": {
            "name": result.agent or run.agent,
            "version": run.rock_version or "unknown",
            "model_info": model,
        },
        "agent_result": tokens if any(v is not None for v in tokens.values()) else None,
        "verifier_result": {"rewards": rewards} if rewards is not None else None,
        "exception_info": error,
        "started_at": _iso(result.trial_started_at),
        "finished_at": _iso(result.trial_ended_at),
        "agent_execution": _timing(result.agent_started_at, result.agent_ended_at),
        "verifier": _timing(result.test_started_at, result.test_ended_at),
        **({"step_results": [_step(step) for step in result.steps]} if result.steps else {}),
    }


def _step(step: StepResults) -> dict[str, Any]:
    """One step as Harbor's ``StepResult``."""
    error = None
    if step.failure_mode is not FailureMode.NONE:
        error = {
            "exception_type": step.failure_mode.value,
            "exception_message": step.error or step.failure_mode.value,
            "exception_traceback": "",
            "occurred_at": _iso(step.test_ended_at or step.agent_ended_at or datetime.now(UTC)),
        }
    return {
        "step_name": step.name,
        "verifier_result": {"rewards": step.rewards} if step.rewards is not None else None,
        "exception_info": error,
        "agent_execution": _timing(step.agent_started_at, step.agent_ended_at),
        "verifier": _timing(step.test_started_at, step.test_ended_at),
    }


def write_trial(
    result: TrialResults,
    task: Task,
    run: RunConfig,
    trial_dir: Path,
    write: Any,
    checksum: str | None = None,
) -> None:
    """Harbor's files of one trial (``write(path, text)`` writes atomically)."""
    write(
        trial_dir / HARBOR_CONFIG,
        json.dumps(trial_config(result, task, run, trial_dir.parent), indent=2),
    )
    document = trial_result(result, task, run, trial_dir, checksum)
    write(trial_dir / HARBOR_RESULT, json.dumps(document, indent=2))
    for ours, theirs in (
        ("agent/trajectory.atif.json", "agent/trajectory.json"),
        ("verifier/stdout.txt", "verifier/test-stdout.txt"),
    ):
        if (trial_dir / ours).is_file():
            shutil.copyfile(trial_dir / ours, trial_dir / theirs)


def job_config(run: RunConfig, run_dir: Path) -> dict[str, Any]:
    """The run's request as Harbor's ``JobConfig``."""
    return {
        "job_name": run_dir.name,
        "jobs_dir": str(run_dir.parent),
        "n_attempts": run.n_attempts,
        "n_concurrent_trials": run.n_concurrent,
        "agents": [{"name": run.agent, "model_name": run.model, "kwargs": run.agent_kwargs}],
        "datasets": [{"path": run.dataset, "task_names": run.task_ids}],
    }


def job_result(
    results: BenchmarkResults,
    run: RunConfig,
    run_dir: Path,
    read: dict[str, dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """The run as Harbor's ``JobResult``, each trial's ``result.json`` inline (``read``: the
    trials' documents read by an earlier call, filled in here, so each file is read once)."""
    read = {} if read is None else read
    trials = []
    for r in results.results:
        if r.trial_name not in read:
            path = run_dir / r.trial_name / HARBOR_RESULT
            if not path.is_file():
                continue
            read[r.trial_name] = json.loads(path.read_text())
        trials.append(read[r.trial_name])
    dataset = Path(run.dataset).name
    key = f"{run.agent}__{run.model}__{dataset}" if run.model else f"{run.agent}__{dataset}"
    rewards: dict[str, dict[float, list[str]]] = defaultdict(lambda: defaultdict(list))
    errors: dict[str, list[str]] = defaultdict(list)
    for r in results.results:
        for name, value in (
            r.rewards or ({"reward": r.reward} if r.reward is not None else {})
        ).items():
            rewards[name][value].append(r.trial_name)
        if r.failure_mode is not FailureMode.NONE:
            errors[r.failure_mode.value].append(r.trial_name)
    n_errors = sum(len(v) for v in errors.values())
    evals = {
        key: {
            "n_trials": len(results.results),
            "n_errors": n_errors,
            "metrics": [{"mean": results.accuracy}],
            "pass_at_k": {k: v for k, v in results.pass_at_k.items() if v is not None},
            "reward_stats": {k: dict(v) for k, v in rewards.items()},
            "exception_stats": dict(errors),
        }
    }
    n_total = len(run.task_ids) * run.n_attempts
    started = results.started_at or run.started_at or datetime.now(UTC)
    return {
        "id": _uuid(run.id),
        "started_at": _iso(started),
        "updated_at": _iso(datetime.now(UTC)),
        "finished_at": _iso(results.ended_at),
        "n_total_trials": n_total,
        "stats": {
            "n_completed_trials": len(results.results),
            "n_errored_trials": n_errors,
            "n_pending_trials": max(n_total - len(results.results), 0),
            "n_retries": results.n_retries,
            "evals": evals,
            "n_input_tokens": _total(r.total_input_tokens for r in results.results),
            "n_output_tokens": _total(r.total_output_tokens for r in results.results),
        },
        "trial_results": trials,
    }


def _total(values: Any) -> int | None:
    found = [v for v in values if v is not None]
    return sum(found) if found else None
