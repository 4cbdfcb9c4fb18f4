"""The episode room: a task's sandbox readied, any agent run under its timeout, the tests
put in, the verifier run, and how it ended as one value.

``rock bench`` (a trial: built image, fresh sandbox, recorded commands) and rock's synthesis
runner (a materialised task in a pooled sandbox; what roll trains on, and the synthesis
stages) differ only in how a task gets its sandbox, how the tests go in and how the sandbox
is given back: each says so in a :class:`TaskEnv`, and both run :func:`run_episode`.
Failures come back as the one :class:`ale.trajectory.FailureMode` (what callers decide by,
roll's "resample or score" included), with a sentence for people beside it. A multi-step
task runs its steps here too, one after the other in the same sandbox, and a separate
verifier gets a sandbox of its own from the :class:`TaskEnv`.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import inspect
import math
import time
import traceback
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from pydantic import Field

from ale.agents import BenchAgent, TaskContext, accepts_context
from ale.episode import EpisodeResult
from ale.task import Task, TaskMcpServer, TaskStep, agent_instruction
from ale.trajectory import FailureMode
from rock.backends.base import Sandbox, SandboxError, upload
from rock.episode_verifier import verifier_result, verify
from rock.task_env import TaskEnv
from rock.task_phases import (
    COLLECT_LOG,
    AsUser,
    EpisodeSandbox,
    Services,
    collect_artifacts,
    run_hooks,
    wait_healthy,
)
from rock.verifier.run import TESTS_DIR, VERIFIER_LOGS, VerifierOutcome, verdict_of

AGENT_GRACE_SEC = 5.0
"""How long past its timeout an agent may take to return its trajectory before it is
cancelled."""
AGENT_TRACEBACK = "agent-error.txt"
"""Where, in the traceback directory, the traceback of an agent that raised is written."""


def episode_threads(episodes: int) -> ThreadPoolExecutor:
    """Threads for the blocking sandbox calls of ``episodes`` concurrent episodes, to make
    an event loop's default executor: each episode may hold one at a time for a command, a
    container start or removal, or a verifier run of seconds, and asyncio's own default has
    ``cpu_count + 4`` — six on a 2-core machine, behind which the others' calls would wait."""
    return ThreadPoolExecutor(max(8, 2 * episodes + 4), thread_name_prefix="rock-episode")


async def run_agent(
    agent: BenchAgent,
    instruction: str,
    sandbox: EpisodeSandbox,
    *,
    timeout_sec: float,
    traceback_dir: Path | None = None,
    into: Episode | None = None,
    **options: Any,
) -> Episode:
    """Run ``agent`` on ``instruction`` in ``sandbox``, its part of an episode filled in
    (``into``'s, or a new one's: the trajectory, its time, and ``AGENT_TIMEOUT`` or
    ``AGENT_ERROR`` when it returned none):
    cancelled (and the sandbox's running command interrupted) :data:`AGENT_GRACE_SEC` past
    its timeout; an agent that raises has its traceback in ``traceback_dir``. A
    :class:`SandboxError` is not the agent's: it propagates. ``options`` go to ``agent.run``
    as they are."""
    ran = into if into is not None else Episode()
    ran.agent_started_at = datetime.now(UTC)
    started = time.monotonic()
    try:
        ran.trajectory = await asyncio.wait_for(
            agent.run(instruction, sandbox, timeout_sec=timeout_sec, **options),
            timeout_sec + AGENT_GRACE_SEC,
        )
    except TimeoutError:
        with contextlib.suppress(Exception):
            await asyncio.to_thread(sandbox.interrupt)
        why = f"the agent ran past its timeout of {timeout_sec:g} s and was stopped"
        ran.failed(FailureMode.AGENT_TIMEOUT, why)
    except SandboxError:
        raise
    except Exception as exc:
        if traceback_dir is not None:
            traceback_dir.mkdir(parents=True, exist_ok=True)
            (traceback_dir / AGENT_TRACEBACK).write_text(traceback.format_exc())
        ran.failed(FailureMode.AGENT_ERROR, f"the agent raised {type(exc).__name__}: {exc}")
    ran.agent_sec = round(time.monotonic() - started, 3)
    ran.agent_ended_at = datetime.now(UTC)
    return ran


def with_context(
    agent: BenchAgent,
    task: Task,
    options: dict[str, Any],
    services: Services,
    *,
    first: bool = True,
) -> dict[str, Any]:
    """``options`` plus the task's :class:`~ale.agents.TaskContext` for an agent that takes
    one (MCP servers, skills, the prior conversation for the first step), when there is any;
    an MCP server's URL naming a side service is sent to that service's address."""
    out = dict(options)
    if "context" not in out and accepts_context(agent):
        context = TaskContext.of(task, first=first)
        if context:
            servers = [_reachable(s, services) for s in context.mcp_servers]
            out["context"] = dataclasses.replace(context, mcp_servers=servers)
    return out


def _reachable(server: TaskMcpServer, services: Services) -> TaskMcpServer:
    """``server`` with its URL's host, when it names a side service, made that service's
    address (the agent runs on this machine, outside the trial's network)."""
    if not server.url:
        return server
    parts = urlsplit(server.url)
    port = services.get(parts.hostname or "")
    address = port.address() if port is not None else None
    if address is None:
        return server
    netloc = address + (f":{parts.port}" if parts.port else "")
    return server.model_copy(update={"url": urlunsplit(parts._replace(netloc=netloc))})


class Episode(EpisodeResult):
    """How one episode went — the agent's part, the verifier's, and the first failure — or
    one step of a multi-step task, as each of its :attr:`steps` is. It is the
    :class:`ale.episode.EpisodeResult` every caller gets (a trainer, the synthesis stages),
    with what a benchmark's record reads besides: one type from the sandbox to the
    trainer."""

    name: str = ""
    """The step's name (a whole episode's: its task's id)."""
    verdict: VerifierOutcome | None = None
    """What the verifier decided (its rewards; :attr:`reward` is its main one)."""
    verifier_stdout: str = ""
    opened: bool = False
    """Whether a sandbox was had (a failure before it: nothing ran)."""
    setup_sec: float = 0.0
    agent_sec: float = 0.0
    agent_started_at: datetime | None = None
    agent_ended_at: datetime | None = None
    test_started_at: datetime | None = None
    steps: list[Episode] = Field(default_factory=list)
    """A multi-step task's steps that ran, in order (then :attr:`verdict` holds the rewards
    the task's strategy makes of theirs, and :attr:`trajectory` all their turns)."""

    def verified(self, verdict: VerifierOutcome) -> None:
        """Take the verifier's ``verdict`` (and its reward as :attr:`reward`)."""
        self.verdict, self.reward = verdict, verdict.reward

    def failed(self, failure: FailureMode, error: str) -> None:
        """Note ``failure`` unless an earlier one was noted (the first one stands): the
        environment's (:attr:`~ale.trajectory.FailureMode.is_environment`: no sandbox, a
        broken one), the agent's (a timeout, an error) or the verifier's; a trajectory's own
        end (a turn limit, say) is not one."""
        if self.failure is None:
            self.failure, self.error = failure, error


@dataclass
class _Run:
    """What every part of one episode shares: the task, the agent and the sandbox it got."""

    task: Task
    agent: BenchAgent
    env: TaskEnv
    sandbox: Sandbox
    lent: EpisodeSandbox
    """What the agent gets: the sandbox, or a recorder around it."""
    workdir: str
    options: dict[str, Any]
    """The agent's options (its logs directory, where it starts)."""
    keep_artifacts: bool
    before_verifier: Callable[[], Awaitable[None]] | None


async def run_episode(
    task: Task,
    agent: BenchAgent,
    env: TaskEnv,
    *,
    agent_timeout_sec: float,
    test_timeout_sec: float,
    verifier_dir: Path,
    logs_dir: Path | None = None,
    traceback_dir: Path | None = None,
    agent_sandbox: Callable[[Sandbox], EpisodeSandbox] | None = None,
    on_sandbox: Callable[[Sandbox], None] | None = None,
    keep_artifacts: bool = False,
    before_verifier: Callable[[], Awaitable[None]] | None = None,
) -> Episode:
    """One episode of ``task`` with ``agent`` in ``env``: open, run the agent under its
    timeout (through ``agent_sandbox``, a recorder say, when given), stage the tests, run the
    verifier into ``verifier_dir`` (also after an agent timeout or error), and give the
    sandbox back. Infrastructure failures (``env.failure_of``) end the episode as values
    (one raised under the episode is its failure, whatever failed before);
    ``on_sandbox`` sees the sandbox before it is given back. With ``keep_artifacts`` the
    task's artifacts are copied out beside ``verifier_dir`` (as Harbor keeps them with a
    trial); a separate verifier gets them either way. ``before_verifier`` is awaited after
    the agent, before the collect hooks and the verifier (of each step, in a multi-step
    task): a caller holds the episode there until it knows it wants the reward."""
    episode = Episode(name=task.id)
    started = time.monotonic()
    try:
        sandbox, workdir = await env.open(task)
    except Exception as exc:
        episode.failure = _infrastructure(env, exc)
        episode.error = f"no sandbox could be had: {exc}"
        return episode
    episode.opened = True
    episode.setup_sec = round(time.monotonic() - started, 3)
    options = _agent_options(agent, workdir, logs_dir)
    lent = agent_sandbox(sandbox) if agent_sandbox is not None else sandbox
    run = _Run(task, agent, env, sandbox, lent, workdir, options, keep_artifacts, before_verifier)
    try:
        await _run_task(
            run, episode, agent_timeout_sec, test_timeout_sec, verifier_dir, traceback_dir
        )
    except Exception as exc:
        episode.failure = _infrastructure(env, exc)
        episode.error = str(exc) if isinstance(exc, SandboxError) else (
            f"the episode failed: {type(exc).__name__}: {exc}"
        )  # fmt: skip
    finally:
        if on_sandbox is not None:
            on_sandbox(sandbox)
        await asyncio.shield(env.close(sandbox))
    return episode


def _agent_options(agent: BenchAgent, workdir: str, logs_dir: Path | None) -> dict[str, Any]:
    """The options every part of the episode gives the agent: its logs directory, and the
    task's WORKDIR to start in, for an agent that can start elsewhere than /app."""
    options: dict[str, Any] = {}
    if logs_dir is not None:
        options["logs_dir"] = logs_dir
    if workdir != "/app" and "root" in inspect.signature(agent.run).parameters:
        options["root"] = workdir  # agents that can start elsewhere start in the task's WORKDIR
    return options


async def _run_task(
    run: _Run,
    episode: Episode,
    agent_timeout_sec: float,
    test_timeout_sec: float,
    verifier_dir: Path,
    traceback_dir: Path | None,
) -> None:
    """In the open sandbox, once the environment is healthy: the task's steps, or the task as
    one part (its own instruction, tests and phases)."""
    task, sandbox = run.task, run.sandbox
    sick = None
    if task.environment.healthcheck is not None:
        sick = await asyncio.to_thread(wait_healthy, sandbox, task.environment.healthcheck)
    if sick is not None:
        episode.failed(FailureMode.SANDBOX_ERROR, f"the environment never became healthy: {sick}")
    elif task.steps:
        await _steps(run, episode, agent_timeout_sec, test_timeout_sec, verifier_dir,
                     traceback_dir)  # fmt: skip
    else:  # a task of one step: the task's own instruction, tests and phases
        await _part(
            run, None, episode, agent_timeout_sec, test_timeout_sec, verifier_dir,
            verifier_dir.parent, traceback_dir,
        )  # fmt: skip


async def _part(
    run: _Run,
    step: TaskStep | None,
    part: Episode,
    agent_timeout_sec: float,
    test_timeout_sec: float,
    verifier_out: Path,
    kept: Path,
    traceback_dir: Path | None,
) -> None:
    """The agent on ``step``'s instruction (the task's own, for a task of one step), then the
    collect hooks, the artifacts (copied into ``kept``, beside the collect log), and the
    tests, their output in ``verifier_out``: how it went, into ``part`` as it goes (what ran
    stays there when the sandbox fails)."""
    task, env, sandbox = run.task, run.env, run.sandbox
    phases: Task | TaskStep = step if step is not None else task
    await env.network(task, sandbox, phases.agent_network)
    first = step is None or step is task.steps[0]  # the prior conversation goes to the first
    options = with_context(run.agent, task, run.options, env.services(sandbox), first=first)
    if step is not None and "logs_dir" in options:
        options["logs_dir"] = kept / "agent"
    await run_agent(
        run.agent,
        agent_instruction(phases.instruction),
        AsUser(run.lent, phases.agent_user) if phases.agent_user else run.lent,
        timeout_sec=agent_timeout_sec,
        traceback_dir=traceback_dir,
        into=part,
        **options,
    )
    if run.before_verifier is not None:
        await run.before_verifier()
    services = env.services(sandbox)
    await asyncio.to_thread(run_hooks, sandbox, phases.collect, kept / COLLECT_LOG, services)
    handed: list[tuple[str, Path]] = []
    if run.keep_artifacts or phases.verifier is not None:
        handed = await asyncio.to_thread(
            collect_artifacts, sandbox, phases.artifacts, kept / "artifacts", services
        )
    part.test_started_at = datetime.now(UTC)
    verdict = await verify(task, env, sandbox, step, test_timeout_sec, verifier_out, handed)
    part.verified(verdict)
    stdout = verifier_out / "stdout.txt"
    part.verifier_stdout = stdout.read_text(errors="replace") if stdout.is_file() else ""
    if verdict.failure_mode != FailureMode.NONE:
        why = verdict.error or f"the verifier failed ({verdict.failure_mode})"
        part.failed(verdict.failure_mode, why)


async def _steps(
    run: _Run,
    episode: Episode,
    agent_timeout_sec: float,
    test_timeout_sec: float,
    verifier_dir: Path,
    traceback_dir: Path | None,
) -> None:
    """A multi-step task's steps in the one sandbox, in order, as Harbor runs them: each
    step's files and setup, the agent on its instruction, its tests (in the sandbox, or in
    a separate verifier's), and its reward; a step whose verifier gave no reward, or whose
    reward is below its ``min_reward``, ends the task. The timeouts given scale each step's
    own as they scale the task's."""
    task, env, sandbox = run.task, run.env, run.sandbox
    agent_scale = agent_timeout_sec / task.agent_timeout_sec
    test_scale = test_timeout_sec / task.test_timeout_sec
    for step in task.steps:
        step_dir = verifier_dir.parent / "steps" / step.name
        await env.network(task, sandbox, None)  # a step's set-up: the environment's network
        try:
            await asyncio.to_thread(_prepare_step, sandbox, step, run.workdir)
        except _SetupFailed as exc:
            episode.steps.append(
                Episode(name=step.name, failure=FailureMode.BUILD_FAILED, error=str(exc))
            )
            break
        if step.healthcheck is not None:
            sick = await asyncio.to_thread(wait_healthy, sandbox, step.healthcheck)
            if sick is not None:
                why = f"the environment was not healthy before the step: {sick}"
                episode.steps.append(
                    Episode(name=step.name, failure=FailureMode.SANDBOX_ERROR, error=why)
                )
                break
        part = Episode(name=step.name)
        episode.steps.append(part)
        await _part(
            run, step, part, step.agent_timeout_sec * agent_scale,
            step.test_timeout_sec * test_scale, step_dir / "verifier", step_dir,
            step_dir / "agent" if traceback_dir is not None else None,
        )  # fmt: skip
        rewards = part.verdict.rewards if part.verdict is not None else None
        if rewards is None or not _reaches(rewards, step.min_reward):
            break
    _sum_up(episode, task)


def _prepare_step(sandbox: Sandbox, step: TaskStep, workdir: str) -> None:
    """Before a step's agent: no tests or verifier logs of the step before in sight, the
    step's files in the working directory, and its ``setup.sh`` run there."""
    sandbox.exec(f"rm -rf {TESTS_DIR} {VERIFIER_LOGS}; mkdir -p {VERIFIER_LOGS}", timeout=60)
    if step.workdir is not None:
        upload(sandbox, step.workdir, workdir)
        if (step.workdir / "setup.sh").is_file():
            done = sandbox.exec(f"cd {workdir} && bash ./setup.sh", timeout=600)
            if not done.ok:
                raise _SetupFailed(
                    f"step {step.name}'s setup.sh exited {done.exit_code}: "
                    f"{done.stderr_text.strip()[-200:] or done.stdout_text.strip()[-200:]}"
                )


class _SetupFailed(Exception):
    """A step's ``setup.sh`` failed: the step cannot run, and the task ends there."""


def _reaches(rewards: dict[str, float], minimum: float | dict[str, float] | None) -> bool:
    """Whether ``rewards`` meet a step's ``min_reward`` (a missing reward does not)."""
    if minimum is None:
        return True
    wanted = {"reward": minimum} if isinstance(minimum, float) else minimum
    return all(rewards.get(key, -math.inf) >= value for key, value in wanted.items())


def _sum_up(episode: Episode, task: Task) -> None:
    """The episode's trajectory, verdict and failure from its steps': every step's turns in
    one trajectory; the rewards by the task's strategy (each named reward's mean over the
    verified steps, a missing one 0; or the last step's); the first failure."""
    ran = [s.trajectory for s in episode.steps if s.trajectory is not None]
    if ran:
        whole = ran[0].model_copy(deep=True)
        for later in ran[1:]:
            whole.steps.extend(later.steps)
            whole.failure_mode, whole.notes = later.failure_mode, later.notes
        whole.usage = None  # the sum of the steps' usage
        episode.trajectory = whole
    first, last = episode.steps[0], episode.steps[-1]
    episode.agent_started_at, episode.agent_ended_at = first.agent_started_at, last.agent_ended_at
    episode.test_started_at = first.test_started_at
    episode.agent_sec = round(sum(s.agent_sec for s in episode.steps), 3)
    failed = next((s for s in episode.steps if s.failure is not None), None)
    if failed is not None and failed.failure is not None:
        episode.failed(failed.failure, f"step {failed.name}: {failed.error}")
    verified = [s.verdict for s in episode.steps if s.verdict and s.verdict.rewards is not None]
    if task.reward_strategy == "final":
        rewards = last.verdict.rewards if last.verdict is not None else None
    else:
        keys = sorted({k for v in verified for k in v.rewards or {}})
        rewards = {
            k: sum((v.rewards or {}).get(k, 0.0) for v in verified) / len(verified) for k in keys
        } or None
    verdict = VerifierOutcome(
        started_at=first.test_started_at,
        ended_at=last.verdict.ended_at if last.verdict is not None else None,
        duration_sec=round(
            sum(s.verdict.duration_sec or 0.0 for s in episode.steps if s.verdict), 3
        ),
        exit_code=last.verdict.exit_code if last.verdict is not None else None,
        parser_results={
            f"{s.name}::{name}": status
            for s in episode.steps
            if s.verdict is not None
            for name, status in (s.verdict.parser_results or {}).items()
        }
        or None,
    )
    if rewards:
        verdict.rewards = rewards
        verdict.reward, verdict.is_resolved = verdict_of(rewards)
    else:
        verdict.failure_mode = last.verdict.failure_mode if last.verdict else FailureMode.UNKNOWN
        verdict.error = last.verdict.error if last.verdict else "no step was verified"
    episode.verified(verdict)
    episode.verifier_stdout = "\n".join(
        f"== step {s.name} ==\n{s.verifier_stdout}" for s in episode.steps if s.verdict
    )


def _infrastructure(env: TaskEnv, exc: Exception) -> FailureMode:
    failure = env.failure_of(exc)
    if failure is None:
        raise exc
    return failure


__all__ = [
    "AGENT_GRACE_SEC",
    "Episode",
    "EpisodeSandbox",
    "TaskEnv",
    "episode_threads",
    "run_agent",
    "run_episode",
    "verifier_result",
]
