"""Episodes of generated tasks on rock sandboxes: the :class:`ale.episode.EpisodeRunner`
that the synthesis stages and roll's RL rollouts are given.

Generated tasks build ``FROM`` the local base image with only ``COPY``, ``RUN`` and
``WORKDIR`` on top, so instead of building an image per task the runner takes a started
sandbox of the base image (from a warm pool of the daemon, or started for the occasion)
and applies those instructions to it: the files are copied in with their modes, the RUN
lines run as root in order. What the agent and the tests see is what ``docker build``
would have made; ``rock bench`` over the written tasks builds them for real.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shlex
import shutil
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Protocol, TypeVar

from ale.agents import BenchAgent
from ale.task import Task, TaskVerifier
from ale.trajectory import FailureMode
from rock.backends._owner import process_started
from rock.backends.base import Backend, PoolNotFound, Sandbox, SandboxError, pack_upload
from rock.client import Client
from rock.episode import Episode, run_episode, verifier_result
from rock.errors import DaemonUnreachable, PoolExhausted, RockError, ShuttingDown
from rock.models import SandboxSpec
from rock.task_phases import Services
from rock.verifier import toolchain
from rock.verifier.run import AGENT_LOGS, TESTS_DIR, VERIFIER_LOGS, stage

T = TypeVar("T")

SYNTH_IMAGE = "rock/bench-base:bookworm"
"""The base image generated tasks build on (their Dockerfiles say FROM it)."""

DAEMON_LOST = "the rock daemon could not be reached during the episode"
"""How the error of an episode begins when its sandbox's daemon went away under it (a
command of the agent or of the verifier failed, or may have been lost): the outcome says
nothing of the agent."""

FILE_MTIME = 1767225600
"""2026-01-01 00:00 UTC: the modification time of every file a task's COPY places, so an
expert that lists files with their times sees the same listing in every run."""


class MaterializeError(RockError):
    """The task's Dockerfile asks for something a started sandbox cannot be given."""


def sandbox_spec(*, image: str | None = None, labels: dict[str, str] | None = None) -> SandboxSpec:
    """The sandboxes generated tasks run in: the pool image (:mod:`rock.pool_image`), no
    network, 1 CPU, 1 GiB, 512 pids, /app."""
    from rock.pool_image import pool_image_tag

    return SandboxSpec(
        image=image or pool_image_tag(),
        cpus=1.0,
        memory_mb=1024,
        pids_limit=512,
        network="none",
        workdir="/app",
        labels=dict(labels or {}),
    )


def dockerfile_steps(task: Task) -> list[tuple[str, str]]:
    """``(INSTRUCTION, argument)`` pairs of the task's Dockerfile, continuation lines joined."""
    if task.environment.dockerfile is None:
        raise MaterializeError(f"task {task.id} has no Dockerfile; a synth runner needs one")
    steps: list[tuple[str, str]] = []
    pending = ""
    for raw in task.environment.dockerfile.read_text().splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        line, pending = pending + line, ""
        word, _, rest = line.partition(" ")
        steps.append((word.upper(), rest.strip()))
    return steps


def materialize(task: Task, sandbox: Sandbox, *, image: str = SYNTH_IMAGE) -> str:
    """Apply the task's Dockerfile to ``sandbox`` (started from ``image``); return the
    working directory it ends in."""
    workdir = "/"
    context = task.environment.build_context or task.path / "environment"
    steps = dockerfile_steps(task)
    made = _early_workdirs(steps)  # made with the log folders, one exec fewer each
    sandbox.exec(["mkdir", "-p", AGENT_LOGS, VERIFIER_LOGS, *made], timeout=30)
    for i, (word, arg) in enumerate(steps):
        if word == "FROM":
            if i != 0 or arg.split()[0] != image:
                raise MaterializeError(
                    f"task {task.id} builds FROM {arg}, but this runner's sandboxes run "
                    f"{image}; build it with `rock bench` instead"
                )
        elif word == "COPY":
            parts = shlex.split(arg)
            if len(parts) != 2 or parts[0].startswith("--"):
                raise MaterializeError(
                    f"task {task.id}: COPY {arg} is not the plain `COPY SRC DEST` this runner "
                    "applies"
                )
            source = (context / parts[0]).resolve()
            if not source.is_relative_to(context.resolve()) or not source.exists():
                raise MaterializeError(
                    f"task {task.id}: COPY source {parts[0]} is not in its context"
                )
            dest = _workdir(workdir, parts[1])
            data, target = pack_upload(source, dest, mtime=FILE_MTIME)
            sandbox.put_archive(target, data)
        elif word == "RUN":
            result = sandbox.exec(arg, timeout=300, cwd=workdir)
            if result.exit_code != 0:
                raise MaterializeError(
                    f"task {task.id}: RUN {arg[:80]} exited {result.exit_code}: "
                    f"{(result.stderr_text or result.stdout_text).strip()[-300:]}"
                )
        elif word == "WORKDIR":
            workdir = _workdir(workdir, arg)
            if workdir not in made:
                sandbox.exec(["mkdir", "-p", workdir], timeout=30)
        else:
            raise MaterializeError(
                f"task {task.id}: the Dockerfile instruction {word} cannot be applied to a "
                "started sandbox; use only FROM, COPY, RUN and WORKDIR, or run it with "
                "`rock bench`"
            )
    return workdir


def _workdir(current: str, arg: str) -> str:
    """Where ``arg`` (a WORKDIR's or a COPY's destination) is, from ``current``."""
    return arg if arg.startswith("/") else f"{current.rstrip('/')}/{arg}"


def _early_workdirs(steps: list[tuple[str, str]]) -> list[str]:
    """The folders of the WORKDIRs before the first RUN: no command can see that they were
    made before their turn (a COPY makes the folders it writes into anyway)."""
    made: list[str] = []
    workdir = "/"
    for word, arg in steps:
        if word == "RUN":
            break
        if word == "WORKDIR":
            workdir = _workdir(workdir, arg)
            made.append(workdir)
    return made


class SandboxSource(Protocol):
    """Where a runner's sandboxes come from."""

    label: str

    def acquire(self) -> Any: ...

    def release(self, sandbox: Sandbox) -> None: ...

    def close(self) -> None: ...


EPISODE_FOLDER = "rock-episode-"
"""How the temporary folder of an episode's verifier is named, followed by the pid and start
time of the process that made it (``rock-episode-PID.START-…``): a process killed outright
cannot remove its folders, and the next process to make one removes those of processes no
longer running."""

_swept = False
_sweeping = threading.Lock()


def episode_folder() -> tempfile.TemporaryDirectory[str]:
    """A temporary folder for one episode's verifier logs, named for this process; the first
    one a process makes removes the folders that processes gone since had left."""
    global _swept
    mine = process_started(os.getpid())  # None without /proc: nothing can be judged gone
    with _sweeping:
        if not _swept and mine is not None:
            _swept = True
            for folder in Path(tempfile.gettempdir()).glob(f"{EPISODE_FOLDER}*"):
                pid, _, started = folder.name[len(EPISODE_FOLDER) :].split("-", 1)[0].partition(".")
                if pid.isdigit() and process_started(int(pid)) != started:
                    shutil.rmtree(folder, ignore_errors=True)
    return tempfile.TemporaryDirectory(prefix=f"{EPISODE_FOLDER}{os.getpid()}.{mine or 0}-")


class DaemonPool:
    """Sandboxes from a warm pool of a rock daemon (made here if it does not exist).

    A pool at its maximum is back-pressure, not a failure: :meth:`acquire` waits (up to
    ``full_timeout`` seconds) for an episode to give its sandbox back, so more episodes in
    flight than sandboxes slow down rather than fail and run again.
    It outlasts a restart of the daemon: :meth:`acquire` waits up to ``reconnect_timeout``
    seconds for a daemon that stopped answering, and declares the pool again if the daemon
    came back without it; sandboxes that could not be released while it was away are
    deleted once it answers again, and :meth:`close` deletes every sandbox still out of the
    pool (one whose hand-over the restart cut off too), so a restart leaks none.
    """

    label = "warm pool"

    def __init__(
        self,
        client: Client,
        pool: str,
        *,
        size: int,
        spec: SandboxSpec | None = None,
        reconnect_timeout: float = 60.0,
        full_timeout: float = 600.0,
    ) -> None:
        self.client = client
        self.pool = pool
        self.full_timeout = full_timeout
        self.spec = spec or sandbox_spec()
        self.size = size
        self.reconnect_timeout = reconnect_timeout
        self._unreleased: list[Any] = []
        self._lock = threading.Lock()
        self._declare()

    def _declare(self) -> None:
        self.client.set_pool(
            self.pool,
            spec=self.spec,
            min_idle=self.size,
            max_total=max(2 * self.size, self.size + 2),
        )

    def wait_ready(self, timeout: float = 300.0) -> None:
        self.client.wait_pool(self.pool, timeout=timeout)

    def acquire(self) -> Any:
        deadline = time.monotonic() + self.reconnect_timeout
        full_until = time.monotonic() + self.full_timeout
        declared = False
        while True:
            try:
                sandbox = self.client.acquire(self.pool)
                break
            except PoolExhausted:  # every sandbox is out: one comes back when an episode ends
                if time.monotonic() >= full_until:
                    raise
                time.sleep(0.25)
            except PoolNotFound:  # the daemon came back without its state: declare it again
                if declared:
                    raise
                self._declare()
                declared = True
            except (DaemonUnreachable, ShuttingDown):
                self._await_daemon(deadline)
        self._release_leftovers()
        return sandbox

    def _await_daemon(self, deadline: float) -> None:
        """Return when the daemon answers again; raise once ``deadline`` has passed."""
        while True:
            time.sleep(0.5)
            if time.monotonic() >= deadline:
                raise DaemonUnreachable(
                    f"no rock daemon took requests at {self.client.url} for "
                    f"{self.reconnect_timeout:g} s; start it again (the same home and port)."
                )
            with contextlib.suppress(DaemonUnreachable):
                self.client.health()
                return

    def release(self, sandbox: Sandbox) -> None:
        try:
            sandbox.delete()
        except DaemonUnreachable:  # delete it once the daemon answers again
            with self._lock:
                self._unreleased.append(sandbox)
        except Exception:
            pass

    def _release_leftovers(self) -> None:
        with self._lock:
            leftovers, self._unreleased = self._unreleased, []
        for sandbox in leftovers:
            self.release(sandbox)

    def close(self) -> None:
        """Delete the pool and every sandbox still out of it (none is in use any more)."""
        with contextlib.suppress(Exception):  # a daemon that is gone keeps them: nothing to do
            self._release_leftovers()
            for info in self.client.list(pool=self.pool, state=["busy"]):
                self.client.delete(info.id)
            self.client.delete_pool(self.pool)


class FreshSandboxes:
    """A sandbox started for each episode and deleted after it (no pool)."""

    label = "sandbox per episode"

    def __init__(self, backend: Backend, spec: SandboxSpec | None = None) -> None:
        self.backend = backend
        self.spec = spec or sandbox_spec()

    def acquire(self) -> Any:
        return self.backend.create(self.spec)

    def release(self, sandbox: Sandbox) -> None:
        with contextlib.suppress(Exception):
            sandbox.delete()

    def close(self) -> None:
        pass


class PoolRunner:
    """An :class:`ale.episode.EpisodeRunner` over a :class:`SandboxSource`."""

    def __init__(
        self,
        source: SandboxSource,
        *,
        image: str = SYNTH_IMAGE,
        toolchain_ready: bool = True,
    ) -> None:
        """``image``: what the tasks build FROM; ``toolchain_ready``: the sandboxes' image
        already holds the compiled verifier toolchain (the pool image does)."""
        self.source = source
        self.image = image
        self.toolchain_ready = toolchain_ready
        self.episodes = 0
        """Episodes that had a sandbox."""

    async def episode(
        self,
        task: Task,
        agent: BenchAgent,
        *,
        logs_dir: Path | None = None,
        before_verifier: Callable[[], Awaitable[None]] | None = None,
        starts: ForkedStarts | None = None,
    ) -> Episode:
        """One episode in :func:`rock.episode.run_episode`, this runner its :class:`TaskEnv`
        (``before_verifier``: see :class:`ale.episode.EpisodeRunner`), or ``starts``
        when the episode starts from a fork of a prepared sandbox."""
        started = time.monotonic()
        lost: list[str] = []

        def note_lost(sandbox: Sandbox) -> None:  # before the release: it may fail too
            why = getattr(sandbox, "daemon_lost", None)  # a RemoteSandbox's; others have none
            if why:
                lost.append(str(why))

        with episode_folder() as tmp:
            episode = await run_episode(
                task,
                agent,
                starts if starts is not None else self,
                agent_timeout_sec=task.agent_timeout_sec,
                test_timeout_sec=task.test_timeout_sec,
                verifier_dir=logs_dir / "verifier" if logs_dir is not None else Path(tmp),
                traceback_dir=logs_dir,
                on_sandbox=note_lost,
                before_verifier=before_verifier,
            )
        episode.seconds = round(time.monotonic() - started, 3)
        if lost:  # the agent or the verifier saw the daemon fail, not the task: nothing stands
            episode.failure, episode.error = (
                FailureMode.DAEMON_UNAVAILABLE,
                f"{DAEMON_LOST}: {lost[0]}",
            )
            episode.reward = episode.trajectory = None
            return episode
        trajectory = episode.trajectory
        if trajectory is not None and episode.verdict is not None:
            trajectory.task_id = trajectory.task_id or task.id
            trajectory.reward = episode.verdict.reward
            trajectory.verifier = verifier_result(episode.verdict, stdout=episode.verifier_stdout)
        return episode

    async def prepared(
        self,
        task: Task,
        prepare: Callable[[Sandbox, str], Awaitable[T]],
        count: int,
    ) -> tuple[ForkedStarts, T]:
        """A sandbox of ``task`` made ready by ``prepare`` (given it and its working
        directory: an expert's first turns replayed in it, say), and ``count`` forks of it
        to start episodes from (see :class:`ForkedStarts`); what ``prepare`` returned. The
        forks need sandboxes a rock daemon serves (a warm pool's): they are its ``fork``."""
        sandbox, workdir = await self.open(task)
        try:
            fork = getattr(sandbox, "fork", None)
            if not callable(fork):
                raise SandboxError(
                    "episodes that start from a fork need sandboxes from a rock daemon (a "
                    "warm pool); this runner's sandboxes cannot be forked."
                )
            made = await prepare(sandbox, workdir)
            forks = await asyncio.to_thread(fork, count)
        except BaseException:
            await asyncio.shield(asyncio.to_thread(self.source.release, sandbox))
            raise
        return ForkedStarts(self, sandbox, workdir, forks), made

    # -- the TaskEnv of rock.episode ----------------------------------------------------------

    async def open(self, task: Task) -> tuple[Sandbox, str]:
        """A sandbox from the source with the task's Dockerfile applied. An episode cut while
        its sandbox is being acquired (a cancelled task) gives it back once it arrives, so a
        pool at its maximum is not drained by episodes nobody waits for."""
        acquiring = asyncio.ensure_future(asyncio.to_thread(self.source.acquire))
        try:
            sandbox = await asyncio.shield(acquiring)
        except asyncio.CancelledError:
            acquiring.add_done_callback(self._give_back)
            raise
        try:
            workdir = await asyncio.to_thread(materialize, task, sandbox, image=self.image)
        except BaseException:
            await asyncio.shield(self.close(sandbox))
            raise
        return sandbox, workdir

    def _give_back(self, acquiring: asyncio.Future[Sandbox]) -> None:
        if not acquiring.cancelled() and acquiring.exception() is None:
            # a thread of its own: the loop may be closing (a run that ends cuts episodes too)
            threading.Thread(
                target=self.source.release, args=(acquiring.result(),), daemon=True
            ).start()

    async def stage_tests(self, task: Task, sandbox: Sandbox) -> None:
        await asyncio.to_thread(self._stage, task, sandbox)

    async def close(self, sandbox: Sandbox) -> None:
        try:
            await asyncio.to_thread(self.source.release, sandbox)
        finally:
            self.episodes += 1  # episodes that had a sandbox

    async def network(self, task: Task, sandbox: Sandbox, on: bool | None) -> None:
        """Synthesis and training sandboxes keep the network their source gave them."""

    def services(self, sandbox: Sandbox) -> Services:
        """Synthesis and training run a task's main container only."""
        return {}

    async def open_verifier(
        self, task: Task, verifier: TaskVerifier, network: bool | None = None
    ) -> Sandbox:
        raise SandboxError(
            f"task {task.id} asks for a separate verifier container, which synthesis and "
            "training do not provide; run it with rock bench."
        )

    def failure_of(self, exc: Exception) -> FailureMode:
        return _infrastructure(exc)

    def _stage(self, task: Task, sandbox: Sandbox) -> None:
        if not self.toolchain_ready:
            stage(task, sandbox)
            return
        sandbox.exec(f"mkdir -p {TESTS_DIR}; {toolchain.PTH_SETUP}", timeout=60)
        if task.tests_dir is not None and task.tests_dir.is_dir():
            sandbox.upload(task.tests_dir, TESTS_DIR)


class ForkedStarts:
    """The :class:`TaskEnv` of episodes that start from forks of one prepared sandbox (the
    parent): chunk-level initialised resampling, where an expert's first k turns were
    replayed in the parent and each episode continues from there. A fork holds the parent's
    files as they were at the fork (a commit of its file system, with its spec: limits,
    environment, working directory); running processes are not carried. Each episode takes
    a fork made beforehand, or a new one of the parent (an episode run again after an
    infrastructure failure); a fork is deleted when its episode ends, the parent by
    :meth:`aclose`. The rest of the episode (tests, verifier) is the runner's."""

    def __init__(self, runner: PoolRunner, parent: Sandbox, workdir: str, forks: list[Any]) -> None:
        self.runner, self.parent, self.workdir = runner, parent, workdir
        self._ready = list(forks)
        self._closed = False

    async def open(self, task: Task) -> tuple[Sandbox, str]:
        if self._ready:
            return self._ready.pop(), self.workdir
        if self._closed:
            raise SandboxError("the sandbox these episodes start from was given back.")
        fork = getattr(self.parent, "fork")  # noqa: B009  (checked by PoolRunner.prepared)
        made: list[Sandbox] = await asyncio.to_thread(fork, 1)
        return made[0], self.workdir

    async def close(self, sandbox: Sandbox) -> None:
        await asyncio.shield(asyncio.to_thread(_delete_quietly, sandbox))

    async def aclose(self) -> None:
        """Give the parent back, and delete the forks no episode took."""
        self._closed = True
        left, self._ready = self._ready, []
        for fork in left:
            await asyncio.to_thread(_delete_quietly, fork)
        await asyncio.to_thread(self.runner.source.release, self.parent)

    async def stage_tests(self, task: Task, sandbox: Sandbox) -> None:
        await self.runner.stage_tests(task, sandbox)

    async def network(self, task: Task, sandbox: Sandbox, on: bool | None) -> None:
        await self.runner.network(task, sandbox, on)

    def services(self, sandbox: Sandbox) -> Services:
        return self.runner.services(sandbox)

    async def open_verifier(
        self, task: Task, verifier: TaskVerifier, network: bool | None = None
    ) -> Sandbox:
        return await self.runner.open_verifier(task, verifier, network)

    def failure_of(self, exc: Exception) -> FailureMode:
        return self.runner.failure_of(exc)


def _delete_quietly(sandbox: Sandbox) -> None:
    with contextlib.suppress(Exception):  # gone already, or its daemon away: its own end
        sandbox.delete()


def _infrastructure(exc: BaseException) -> FailureMode:
    """The failure an exception outside the agent means: the daemon gone, or the sandbox."""
    if isinstance(exc, DaemonUnreachable | ShuttingDown):
        return FailureMode.DAEMON_UNAVAILABLE
    return FailureMode.SANDBOX_ERROR
