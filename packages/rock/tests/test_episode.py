"""The episode room's own rules, over the TaskEnv seam (the sandboxes are real local ones):
every opened sandbox is given back once, a failure of the infrastructure is a value, a fault
of the caller's own propagates, and the agent's failure is kept apart from the sandbox's.
rock bench's and the synthesis runner's episodes are tested end to end in their own files."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ale.sandbox import SandboxVerbs
from ale.task import Task, load_task
from ale.trajectory import AgentInfo, FailureMode, Trajectory
from rock.backends.base import Sandbox, SandboxError
from rock.backends.local import LocalBackend
from rock.episode import run_episode
from rock.models import SandboxSpec

TASK = (
    Path(__file__).resolve().parents[3] / "datasets" / "terminal-bench-local" / "csv-sales-report"
)


class Env:
    """Local sandboxes; ``break_at`` names the step that raises ``error``."""

    def __init__(self, root: Path, *, break_at: str = "", error: Exception | None = None) -> None:
        self.backend = LocalBackend(root)
        self.break_at, self.error = break_at, error or SandboxError("the engine went away")
        self.closed: list[str] = []

    async def open(self, task: Task) -> tuple[Sandbox, str]:
        if self.break_at == "open":
            raise self.error
        return self.backend.create(SandboxSpec()), "/app"

    async def stage_tests(self, task: Task, sandbox: Sandbox) -> None:
        if self.break_at == "stage":
            raise self.error

    async def close(self, sandbox: Sandbox) -> None:
        self.closed.append(sandbox.id)
        sandbox.delete()

    async def network(self, task: Task, sandbox: Sandbox, on: bool | None) -> None:
        pass

    def services(self, sandbox: Sandbox) -> dict[str, Any]:
        return {}

    def failure_of(self, exc: Exception) -> FailureMode | None:
        return FailureMode.SANDBOX_ERROR if isinstance(exc, SandboxError) else None


class Echo:
    name = "echo"

    async def run(self, instruction: str, sandbox: SandboxVerbs, **_: Any) -> Trajectory:
        sandbox.exec("echo hi > note.txt", timeout=10)
        return Trajectory(agent=AgentInfo(name="echo"), model="none")


class Raises:
    name = "raises"

    async def run(self, instruction: str, sandbox: SandboxVerbs, **_: Any) -> Trajectory:
        raise RuntimeError("the agent's own bug")


async def _episode(env: Env, agent: Any, tmp_path: Path) -> Any:
    return await run_episode(
        load_task(TASK), agent, env, agent_timeout_sec=30, test_timeout_sec=30,
        verifier_dir=tmp_path / "verifier", traceback_dir=tmp_path / "agent",
    )  # fmt: skip


async def test_a_sandbox_that_cannot_be_had_is_a_value_and_nothing_ran(tmp_path: Path) -> None:
    env = Env(tmp_path / "root", break_at="open")
    episode = await _episode(env, Echo(), tmp_path)
    assert episode.failure == FailureMode.SANDBOX_ERROR and episode.failure.is_environment
    assert episode.error == "no sandbox could be had: the engine went away"
    assert not episode.opened and episode.trajectory is None and env.closed == []


async def test_a_sandbox_failing_after_the_agent_keeps_its_trajectory_and_is_given_back(
    tmp_path: Path,
) -> None:
    env = Env(tmp_path / "root", break_at="stage")
    seen: list[Sandbox] = []
    episode = await run_episode(
        load_task(TASK), Echo(), env, agent_timeout_sec=30, test_timeout_sec=30,
        verifier_dir=tmp_path / "verifier", on_sandbox=seen.append,
    )  # fmt: skip
    assert episode.failure == FailureMode.SANDBOX_ERROR
    assert episode.trajectory is not None and episode.verdict is None
    assert env.closed == [seen[0].id]  # given back once, after on_sandbox saw it


async def test_an_agent_that_raises_leaves_its_traceback_and_a_sandbox_failing_after_decides(
    tmp_path: Path,
) -> None:
    env = Env(tmp_path / "root", break_at="stage")
    episode = await _episode(env, Raises(), tmp_path)
    # the agent's error is in its traceback; the sandbox failing under the episode after it
    # is the episode's failure (what decides a retry)
    assert episode.failure == FailureMode.SANDBOX_ERROR and episode.trajectory is None
    assert "the agent's own bug" in (tmp_path / "agent" / "agent-error.txt").read_text()
    assert len(env.closed) == 1


async def test_a_fault_of_the_callers_own_propagates_and_the_sandbox_is_still_given_back(
    tmp_path: Path,
) -> None:
    env = Env(tmp_path / "root", break_at="stage", error=KeyError("a harness bug"))
    with pytest.raises(KeyError, match="a harness bug"):
        await _episode(env, Echo(), tmp_path)
    assert len(env.closed) == 1


def test_a_healthcheck_counts_failures_only_after_its_start_period(tmp_path: Path) -> None:
    """Harbor's rule, on a fake clock: the tries within the start period come every
    ``start_interval_sec`` and do not count; after it ``retries`` failures in a row give up."""
    from ale.task import Healthcheck
    from rock.task_phases import wait_healthy

    sandbox = LocalBackend(tmp_path / "root").create(SandboxSpec())
    fifth = "n=$(cat tries 2>/dev/null || echo 0); echo $((n+1)) > tries; [ $n -ge 4 ]"
    check = Healthcheck(
        command=fifth, start_period_sec=1.0, start_interval_sec=0.4, interval_sec=1.0, retries=2
    )
    now = [0.0]
    slept: list[float] = []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        now[0] += seconds

    assert wait_healthy(sandbox, check, clock=lambda: now[0], sleep=sleep) is None
    assert slept == [0.4, 0.4, 0.4, 1.0]  # three tries in the start period, one counted after
    sandbox.exec("rm tries")
    now[0], slept[:] = 0.0, []
    once = check.model_copy(update={"retries": 1})
    said = wait_healthy(sandbox, once, clock=lambda: now[0], sleep=sleep)
    assert said == f"`{fifth}` failed 1 time in a row (exit 1)"
    sandbox.delete()


def test_a_sandbox_seen_as_a_user_runs_as_it_and_hands_it_what_it_writes(
    tmp_path: Path,
) -> None:
    """``AsUser`` over a recording stand-in: commands carry the user (an explicit one
    stays), and a written file or archive is chowned to the user afterwards, as root."""
    import io
    import tarfile

    from rock.models import ExecRequest, ExecResult
    from rock.task_phases import AsUser

    class Recorder:
        id = "r"

        def __init__(self) -> None:
            self.requests: list[ExecRequest] = []

        def run(self, request: ExecRequest) -> ExecResult:
            self.requests.append(request)
            return ExecResult(exit_code=0)

        def write_file(self, path: str, data: bytes, mode: int = 0o644) -> None:
            pass

        def put_archive(self, directory: str, data: bytes) -> None:
            pass

    inner = Recorder()
    seen = AsUser(inner, "1000")  # type: ignore[arg-type]
    seen.exec("whoami", cwd="/app")
    seen.run(ExecRequest(command="id", user="0"))
    seen.write_file("/app/a.txt", b"x")
    packed = io.BytesIO()
    with tarfile.open(fileobj=packed, mode="w") as tar:
        for name in ("dir/one", "dir/two", "top.txt"):
            info = tarfile.TarInfo(name)
            tar.addfile(info, io.BytesIO(b""))
    seen.put_archive("/srv", packed.getvalue())
    assert [(r.command, r.user) for r in inner.requests] == [
        ("whoami", "1000"),
        ("id", "0"),
        (["chown", "1000", "/app/a.txt"], None),
        (["chown", "-R", "1000", "/srv/dir", "/srv/top.txt"], None),
    ]
