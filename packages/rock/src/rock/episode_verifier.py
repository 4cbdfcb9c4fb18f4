"""An episode's tests: run after its agent in the agent's sandbox, or in a separate verifier's
sandbox that gets only the artifacts the agent left, and the verdict as a trajectory records
it. :mod:`rock.episode` calls :func:`verify` for each part of an episode (the task, or each
of its steps)."""

from __future__ import annotations

import asyncio
import shlex
from pathlib import Path
from typing import Literal

from ale.sandbox import SandboxVerbs
from ale.task import Task, TaskStep
from ale.trajectory import FailureMode, VerifierResult, VerifierTest
from rock.backends.base import Sandbox, upload
from rock.task_env import TaskEnv
from rock.task_phases import AsUser, wait_healthy
from rock.verifier.run import TESTS_DIR, VERIFIER_LOGS, VerifierOutcome, run_verifier


async def verify(
    task: Task,
    env: TaskEnv,
    sandbox: Sandbox,
    step: TaskStep | None,
    timeout_sec: float,
    out_dir: Path,
    handed: list[tuple[str, Path]],
) -> VerifierOutcome:
    """Run the tests (the task's, a step's over them) in the agent's sandbox, or in a
    separate verifier's sandbox that gets only the artifacts copied out of the agent's
    (``handed``: each one's path in the container and its copy here), with the network the
    verifier's phase asks for (None: the environment's)."""
    phases: Task | TaskStep = step if step is not None else task
    verifier, user, variables = phases.verifier, phases.verifier_user, phases.verifier_env
    if verifier is None:
        await env.network(task, sandbox, phases.verifier_network)
        await env.stage_tests(task, sandbox)
        if step is not None and step.tests_dir is not None:
            await asyncio.to_thread(upload, sandbox, step.tests_dir, TESTS_DIR)
        return await asyncio.to_thread(
            _run_tests, task, sandbox, user, out_dir, timeout_sec, variables
        )
    checker = await env.open_verifier(task, verifier, phases.verifier_network)
    try:
        check = verifier.environment.healthcheck if verifier.environment else None
        sick = None if check is None else await asyncio.to_thread(wait_healthy, checker, check)
        if sick is not None:
            return VerifierOutcome(
                failure_mode=FailureMode.VERIFIER_ERROR,
                error=f"the verifier's container never became healthy: {sick}",
            )
        for source, copy in handed:
            await asyncio.to_thread(upload, checker, copy, source)
        if verifier.bundled:
            await asyncio.to_thread(checker.exec, f"mkdir -p {VERIFIER_LOGS}", timeout=60)
        else:
            await env.stage_tests(task, checker)
            if step is not None and step.tests_dir is not None:
                await asyncio.to_thread(upload, checker, step.tests_dir, TESTS_DIR)
        return await asyncio.to_thread(
            _run_tests, task, checker, user, out_dir, timeout_sec, variables
        )
    finally:
        await asyncio.shield(env.close(checker))


def _run_tests(
    task: Task,
    sandbox: Sandbox,
    user: str | None,
    out_dir: Path,
    timeout_sec: float,
    variables: dict[str, str],
) -> VerifierOutcome:
    """The verifier, as the image's user or as ``user`` (who then owns the verifier's log
    directory, to write the reward into)."""
    tester: SandboxVerbs = sandbox
    if user is not None:
        sandbox.exec(f"mkdir -p {VERIFIER_LOGS} && chown -R {shlex.quote(user)} {VERIFIER_LOGS}")
        tester = AsUser(sandbox, user)
    return run_verifier(task, tester, out_dir, timeout_sec=timeout_sec, env=variables)


def verifier_result(
    verdict: VerifierOutcome, *, stdout: str | None = None, failure: FailureMode | None = None
) -> VerifierResult:
    """The verifier's verdict as a trajectory records it (``failure``: how the episode
    failed, when it did)."""
    return VerifierResult(
        reward=verdict.reward,
        passed=verdict.is_resolved,
        exit_code=verdict.exit_code,
        tests=[
            VerifierTest(name=name, status=_status(status))
            for name, status in (verdict.parser_results or {}).items()
        ],
        stdout=stdout[-4000:] if stdout else None,
        detail={
            **({"failure_mode": failure.value} if failure is not None else {}),
            **({"rewards": verdict.rewards} if set(verdict.rewards or {}) - {"reward"} else {}),
        },
    )


TestStatus = Literal["passed", "failed", "error", "skipped"]
_STATUSES: dict[str, TestStatus] = {s: s for s in ("passed", "failed", "error", "skipped")}


def _status(value: str) -> TestStatus:
    return _STATUSES.get(value.lower(), "error")
