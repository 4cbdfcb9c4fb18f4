"""The benchmark harness: tasks times attempts, each trial a fresh sandbox.

A trial mirrors the Terminal-Bench harness: build (or reuse) the task's image, start a
sandbox with the task's cpus, memory and network policy, run the agent on the
instruction under the agent timeout, and only then (also after a timeout) copy the tests
in and run the verifier under the test timeout. Everything is recorded in the trial's
directory::

    <run>/<task>.<attempt>-of-<n>/
        results.json         TrialResults
        build.log            when the image was built (or failed to build)
        commands.jsonl       every command of the agent phase; terminal.log reads the same
        agent/               trajectory.jsonl, trajectory.atif.json, the agent's own files
        verifier/            stdout.txt, stderr.txt, logs/ (the container's /logs/verifier)

Trials run concurrently up to ``n_concurrent``; the run's results.json is rewritten after
each trial. ``resume`` skips trials whose results.json exists and redoes the others.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import traceback
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ale.agents import BenchAgent
from ale.atif import write_atif
from ale.jsonl import write_jsonl
from ale.task import Task
from ale.trajectory import Trajectory, Usage
from rock import __version__
from rock.backends.base import Backend
from rock.bench import harbor
from rock.bench.agents import RecordingSandbox, agent_factory
from rock.bench.dataset import scan_dataset
from rock.bench.images import ImageBuilder, TaskImageError
from rock.bench.options import BenchError, BenchOptions
from rock.bench.results import (
    RESULTS_FILE,
    RUN_FILE,
    BenchmarkResults,
    FailureMode,
    RunConfig,
    StepResults,
    TrialResults,
    collect_trials,
    trial_path,
)
from rock.bench.services import remove_labelled
from rock.bench.trial_env import TrialEnv
from rock.episode import Episode, episode_threads, run_episode, verifier_result
from rock.verifier import toolchain
from rock.verifier.run import VerifierOutcome

LABEL_RUN = "dev.ale.rock.bench.run"
LABEL_TRIAL = "dev.ale.rock.bench.trial"
"""Every container, network and volume of one trial carries its id under this label."""

ProgressFn = Callable[[str, dict[str, Any]], None]


class Harness:
    """Runs trials on a sandbox backend (docker, in this process)."""

    def __init__(
        self,
        backend: Backend,
        builder: ImageBuilder,
        options: BenchOptions | None = None,
        *,
        progress: ProgressFn | None = None,
    ) -> None:
        self.backend = backend
        self.builder = builder
        self.options = options or BenchOptions()
        self.progress = progress or (lambda kind, data: None)
        self._checksums: dict[Path, str] = {}
        """The tasks' checksums (Harbor's trial results name them), once a run."""
        self._unswept: set[str] = set()
        """Trials whose sweep left something behind: swept again when the run ends."""

    # -- a run -------------------------------------------------------------------------------
    async def run(
        self,
        dataset: Path,
        output: Path,
        *,
        agent: str,
        model: str | None = None,
        agent_kwargs: dict[str, Any] | None = None,
        task_ids: Sequence[str] = (),
        resume: bool = False,
    ) -> BenchmarkResults:
        scan = scan_dataset(dataset, task_ids)
        make_agent = agent_factory(agent, model, agent_kwargs)
        output = Path(output).resolve()
        asked = self._run_config(output, dataset, scan.tasks, agent, model, agent_kwargs)
        config = _open_run_dir(output, asked, resume)
        await asyncio.to_thread(toolchain.archive)  # fail before any trial if it cannot build
        finished = {r.trial_name: r for r in collect_trials(output)}
        self._checksums = {}
        results = BenchmarkResults(
            id=config.id,
            dataset=config.dataset,
            agent=agent,
            model=model,
            n_attempts=self.options.n_attempts,
            invalid_tasks=scan.invalid,
            started_at=config.started_at,
        )
        for bad in scan.invalid:
            self.progress("invalid", {"path": bad.path, "reason": bad.reason})
        todo = [
            (task, attempt)
            for task in scan.tasks
            for attempt in range(1, self.options.n_attempts + 1)
            if trial_name(task.id, attempt, self.options.n_attempts) not in finished
        ]
        total = len(scan.tasks) * self.options.n_attempts
        self.progress("start", {"total": total, "skipped": total - len(todo), "run_dir": output})
        await self._run_trials(todo, make_agent, model, output, config, results, finished)
        return results

    def _run_config(
        self,
        output: Path,
        dataset: Path,
        tasks: list[Task],
        agent: str,
        model: str | None,
        agent_kwargs: dict[str, Any] | None,
    ) -> RunConfig:
        """The run as asked, before its directory says whether it continues an older one."""
        return RunConfig(
            id=output.name,
            dataset=str(Path(dataset).resolve()),
            task_ids=[t.id for t in tasks],
            agent=agent,
            model=model,
            agent_kwargs=agent_kwargs or {},
            n_attempts=self.options.n_attempts,
            n_concurrent=self.options.n_concurrent,
            timeout_multiplier=self.options.timeout_multiplier,
            started_at=datetime.now(UTC),
            rock_version=__version__,
        )

    async def _run_trials(
        self,
        todo: list[tuple[Task, int]],
        make_agent: Callable[[Task], BenchAgent],
        model: str | None,
        output: Path,
        config: RunConfig,
        results: BenchmarkResults,
        finished: dict[str, TrialResults],
    ) -> None:
        """The trials of ``todo``, ``n_concurrent`` at a time, the run's summaries rewritten
        after each one and once more when they are over (or cut short)."""
        written = _Written(finished)
        gate = asyncio.Semaphore(self.options.n_concurrent)
        asyncio.get_running_loop().set_default_executor(episode_threads(self.options.n_concurrent))
        lock = asyncio.Lock()

        async def one(task: Task, attempt: int) -> None:
            async with gate:
                result = await self.run_trial(
                    task, attempt, make_agent, output, config.id, model=model, run=config
                )
            async with lock:
                finished[result.trial_name] = result
                written.save(output, results, config)
                self.progress("trial", {"result": result})

        jobs = [asyncio.ensure_future(one(t, a)) for t, a in todo]
        try:
            await asyncio.gather(*jobs)
        finally:
            for job in jobs:
                job.cancel()
            await asyncio.shield(self._sweep_again())
            results.ended_at = datetime.now(UTC)
            written.save(output, results, config)

    async def _sweep_again(self) -> None:
        """The trials whose sweep left something (an engine too busy to answer for a minute,
        seen in CI; or a container made by a call the trial had given up on) are swept again
        once the run's trials are over; what still stays is reported as ``left_behind``."""
        client = self.builder.client
        unswept, self._unswept = sorted(self._unswept), set()
        for trial in unswept:
            left = await asyncio.to_thread(remove_labelled, client, f"{LABEL_TRIAL}={trial}", 120)
            if left:
                self.progress("left_behind", {"trial": trial, "left": left, "final": True})

    # -- a trial -----------------------------------------------------------------------------
    async def run_trial(
        self,
        task: Task,
        attempt: int,
        make_agent: Callable[[Task], BenchAgent],
        run_dir: Path,
        run_id: str = "",
        *,
        model: str | None = None,
        run: RunConfig | None = None,
    ) -> TrialResults:
        """One trial of ``task`` into ``run_dir``; with ``run`` (the run it belongs to) also
        the files Harbor writes for a trial (:mod:`rock.bench.harbor`)."""
        name = trial_name(task.id, attempt, self.options.n_attempts)
        trial_dir = trial_path(run_dir, name)
        if trial_dir.exists():
            shutil.rmtree(trial_dir)  # a trial cut short: start it again from nothing
        trial_dir.mkdir(parents=True)
        result = _new_result(task, attempt, name, model)
        clock = asyncio.get_running_loop().time
        t0 = clock()
        self.progress("trial_start", {"trial": name})
        try:
            result = await self._attempts(task, make_agent, trial_dir, result, run_id, clock)
        except asyncio.CancelledError:
            shutil.rmtree(trial_dir, ignore_errors=True)
            raise
        finally:
            result.trial_ended_at = datetime.now(UTC)
            result.total_sec = round(clock() - t0, 3)
            spent = sum(v or 0.0 for v in (result.build_sec, result.agent_sec, result.test_sec))
            result.overhead_sec = round(max(0.0, result.total_sec - spent), 3)
        _atomic_write(trial_dir / RESULTS_FILE, result.model_dump_json(indent=2))
        if run is not None:
            checksum = self._checksums.get(task.path)
            if checksum is None:
                checksum = self._checksums[task.path] = harbor.task_checksum(task.path)
            harbor.write_trial(result, task, run, trial_dir, _atomic_write, checksum)
        return result

    async def _attempts(
        self,
        task: Task,
        make_agent: Callable[[Task], BenchAgent],
        trial_dir: Path,
        result: TrialResults,
        run_id: str,
        clock: Callable[[], float],
    ) -> TrialResults:
        """The trial, and again (up to ``max_retries`` times, from an empty ``trial_dir``)
        while the harness is what failed it; the last attempt's results."""
        for retry in range(self.options.max_retries + 1):
            if retry:  # a harness fault: the trial again, from nothing it found
                failures = [*result.retried_failures, result.failure_mode]
                kept = {name: getattr(result, name) for name in _KEPT_ON_RETRY}
                result = TrialResults(**kept, retries=retry, retried_failures=failures)
                shutil.rmtree(trial_dir, ignore_errors=True)
                trial_dir.mkdir(parents=True)
                self.progress("trial_retry", {"trial": result.trial_name, "retry": retry})
            try:
                mendable = await self._trial(task, make_agent, trial_dir, result, run_id, clock)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # a harness fault fails this trial, never the run
                result.failure_mode = FailureMode.UNKNOWN
                result.error = f"the harness failed: {type(exc).__name__}: {exc}"
                (trial_dir / "error.txt").write_text(traceback.format_exc())
                mendable = True
            if not mendable:
                break
        return result

    async def _trial(
        self,
        task: Task,
        make_agent: Callable[[Task], BenchAgent],
        trial_dir: Path,
        result: TrialResults,
        run_id: str,
        clock: Callable[[], float],
    ) -> bool:
        agent = make_agent(task)
        result.agent = getattr(agent, "name", type(agent).__name__)
        t = clock()
        try:
            build = await asyncio.to_thread(self.builder.build, task)
        except TaskImageError as exc:
            result.build_sec = round(clock() - t, 3)
            (trial_dir / "build.log").write_text(exc.log or str(exc))
            result.failure_mode, result.error = FailureMode.BUILD_FAILED, str(exc)
            return False
        result.build_sec = round(clock() - t, 3)
        result.image, result.image_built = build.tag, build.built
        if build.built:
            (trial_dir / "build.log").write_text(build.log)
            self.progress("built", {"task": task.id, "tag": build.tag, "sec": build.duration_sec})

        logs = trial_dir / "agent"
        logs.mkdir()
        result.recording_path = str(trial_dir / "commands.jsonl")
        labels = {LABEL_RUN: run_id, "dev.ale.rock.bench.task": task.id, LABEL_TRIAL: result.id}
        try:
            episode = await run_episode(
                task,
                agent,
                TrialEnv(self.backend, self.builder, self.options, build.tag, labels),
                agent_timeout_sec=task.agent_timeout_sec * self.options.timeout_multiplier,
                test_timeout_sec=task.test_timeout_sec * self.options.timeout_multiplier,
                verifier_dir=trial_dir / "verifier",
                logs_dir=logs,
                traceback_dir=logs,
                agent_sandbox=lambda box: RecordingSandbox(box, trial_dir / "commands.jsonl"),
                keep_artifacts=True,  # as Harbor keeps them: <trial>/artifacts/ and its manifest
            )
        finally:
            if not self.options.keep_sandboxes:  # what a delete that timed out left behind
                await asyncio.shield(self._sweep(result))
        _record(episode, task, result, logs)
        return episode.failure is not None and episode.failure.is_environment

    async def _sweep(self, result: TrialResults) -> None:
        """Remove whatever the engine still holds under the trial's label."""
        client = self.builder.client
        left = await asyncio.to_thread(remove_labelled, client, f"{LABEL_TRIAL}={result.id}")
        if left:
            self._unswept.add(result.id)
            self.progress("left_behind", {"trial": result.trial_name, "left": left})


def _record(episode: Episode, task: Task, result: TrialResults, logs: Path) -> None:
    """The episode's figures and failure into the trial's results; its trajectory saved."""
    result.setup_sec = episode.setup_sec
    result.agent_sec = episode.agent_sec
    result.agent_started_at, result.agent_ended_at = (
        episode.agent_started_at,
        episode.agent_ended_at,
    )
    trajectory, verdict = episode.trajectory, episode.verdict
    result.failure_mode, result.error = episode.failure or FailureMode.NONE, episode.error
    if trajectory is not None:
        usage = trajectory.usage or _sum_usage(trajectory)
        result.total_input_tokens = usage.prompt_tokens
        result.total_output_tokens = usage.completion_tokens
        result.n_steps = len(trajectory.steps)
        # the agent's own end (a turn limit...) before the verifier's failure
        first = episode.failure
        if trajectory.failure_mode is not None and not (
            first in (FailureMode.AGENT_TIMEOUT, FailureMode.AGENT_ERROR)
            or (first is not None and first.is_environment)
        ):
            result.failure_mode, result.error = trajectory.failure_mode, trajectory.notes
    result.steps = [
        StepResults(
            name=step.name,
            is_resolved=step.verdict.is_resolved if step.verdict else None,
            reward=step.verdict.reward if step.verdict else None,
            rewards=step.verdict.rewards if step.verdict else None,
            failure_mode=step.failure or FailureMode.NONE,
            error=step.error,
            parser_results=step.verdict.parser_results if step.verdict else None,
            agent_started_at=step.agent_started_at,
            agent_ended_at=step.agent_ended_at,
            test_started_at=step.test_started_at,
            test_ended_at=step.verdict.ended_at if step.verdict else None,
            agent_sec=step.agent_sec,
            test_sec=step.verdict.duration_sec if step.verdict else None,
        )
        for step in episode.steps
    ]
    if verdict is None:
        return
    result.test_started_at, result.test_ended_at = episode.test_started_at, verdict.ended_at
    result.test_sec = verdict.duration_sec
    result.is_resolved = verdict.is_resolved
    result.reward = verdict.reward
    result.rewards = verdict.rewards
    result.parser_results = verdict.parser_results
    if trajectory is not None:
        _save_trajectory(trajectory, task, verdict, logs, result)


def _new_result(task: Task, attempt: int, name: str, model: str | None) -> TrialResults:
    """The results of a trial about to start: what it is, nothing it found yet."""
    return TrialResults(
        id=uuid.uuid4().hex,
        trial_name=name,
        task_id=task.id,
        attempt=attempt,
        instruction=task.instruction,
        category=task.metadata.category,
        difficulty=task.metadata.difficulty,
        source_format=task.source_format,
        agent="",
        model=model,
        trial_started_at=datetime.now(UTC),
    )


def trial_name(task_id: str, attempt: int, n_attempts: int) -> str:
    return f"{task_id}.{attempt}-of-{n_attempts}"


_KEPT_ON_RETRY = (
    "id", "trial_name", "task_id", "attempt", "instruction", "category", "difficulty",
    "source_format", "agent", "model", "trial_started_at",
)  # fmt: skip
"""What a retried trial keeps: its identity, nothing it found."""


def _sum_usage(trajectory: Trajectory) -> Usage:
    prompt = [s.usage.prompt_tokens for s in trajectory.steps if s.usage and s.usage.prompt_tokens]
    completion = [
        s.usage.completion_tokens for s in trajectory.steps if s.usage and s.usage.completion_tokens
    ]
    return Usage(
        prompt_tokens=sum(prompt) if prompt else None,
        completion_tokens=sum(completion) if completion else None,
    )


def _save_trajectory(
    trajectory: Trajectory, task: Task, outcome: VerifierOutcome, logs: Path, result: TrialResults
) -> None:
    trajectory.task_id = trajectory.task_id or task.id
    trajectory.reward = outcome.reward
    failure = result.failure_mode if result.error else None
    trajectory.verifier = verifier_result(outcome, failure=failure)
    write_jsonl(logs / "trajectory.jsonl", [trajectory])
    write_atif(trajectory, logs / "trajectory.atif.json")
    result.trajectory_path = str(logs / "trajectory.jsonl")


def _open_run_dir(output: Path, config: RunConfig, resume: bool) -> RunConfig:
    run_file = output / RUN_FILE
    if run_file.is_file():
        if not resume:
            raise BenchError(
                f"{output} already holds a run; pass --resume to continue it, or choose "
                "another --output."
            )
        old = RunConfig.model_validate_json(run_file.read_text())
        for field in ("agent", "model", "n_attempts", "agent_kwargs", "timeout_multiplier"):
            if getattr(old, field) != getattr(config, field):
                raise BenchError(
                    f"{output} was run with {field}={getattr(old, field)!r}, not "
                    f"{getattr(config, field)!r}; resume it with the same options or choose "
                    "another --output."
                )
        old.task_ids = sorted(set(old.task_ids) | set(config.task_ids))
        _atomic_write(run_file, old.model_dump_json(indent=2))
        return old
    if output.exists() and any(output.iterdir()):
        raise BenchError(
            f"{output} is not empty and holds no run; choose an empty or new --output."
        )
    output.mkdir(parents=True, exist_ok=True)
    _atomic_write(run_file, config.model_dump_json(indent=2))
    return config


@dataclass
class _Written:
    """A run's summaries, rewritten after every trial from what the run holds in memory (its
    finished trials, the Harbor documents read once), not by reading every trial again."""

    finished: dict[str, TrialResults]
    harbor_read: dict[str, dict[str, Any]] = field(default_factory=dict)

    def save(self, output: Path, results: BenchmarkResults, run: RunConfig) -> None:
        results.results = [self.finished[name] for name in sorted(self.finished)]
        results.refresh()
        _atomic_write(output / RESULTS_FILE, results.model_dump_json(indent=2))
        job = harbor.job_result(results, run, output, self.harbor_read)
        _atomic_write(output / harbor.HARBOR_RESULT, json.dumps(job, indent=2))
        _atomic_write(
            output / harbor.HARBOR_CONFIG, json.dumps(harbor.job_config(run, output), indent=2)
        )


def _atomic_write(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)
