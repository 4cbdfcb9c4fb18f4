"""The seam between an episode and where its task lives: a :class:`TaskEnv` says how a
task's sandbox is had, how its tests go in, how the sandbox is given back, and which of those
steps' exceptions are the infrastructure's. ``rock bench`` (a trial's fresh sandbox) and the
synthesis runner (a pooled one) each give one to :func:`rock.episode.run_episode`."""

from __future__ import annotations

from typing import Protocol

from ale.task import Task, TaskVerifier
from ale.trajectory import FailureMode
from rock.backends.base import Sandbox
from rock.task_phases import Services


class TaskEnv(Protocol):
    """Where an episode's task lives: how its sandbox is had with the task in place, how the
    tests go in after the agent, how the sandbox is given back, and which exceptions of
    those steps are the infrastructure's (a failure of the episode, not of the caller)."""

    async def open(self, task: Task) -> tuple[Sandbox, str]:
        """A sandbox holding ``task``, and the directory the agent starts in."""
        ...

    async def stage_tests(self, task: Task, sandbox: Sandbox) -> None:
        """Put the task's tests (and the verifier's tools) into ``sandbox``."""
        ...

    async def close(self, sandbox: Sandbox) -> None:
        """Give ``sandbox`` back (delete it, return it to its pool, or keep it)."""
        ...

    async def open_verifier(
        self, task: Task, verifier: TaskVerifier, network: bool | None = None
    ) -> Sandbox:
        """A fresh sandbox for a separate verifier (its image, limits and network, or
        ``network`` when the verifier's phase sets it), given back with :meth:`close`."""
        ...

    async def network(self, task: Task, sandbox: Sandbox, on: bool | None) -> None:
        """Give ``sandbox`` the network a phase of ``task`` asks for (its agent's, its
        tests'): ``on``, or the environment's when None."""
        ...

    def services(self, sandbox: Sandbox) -> Services:
        """The side services running beside ``sandbox`` (a compose task's), by name."""
        ...

    def failure_of(self, exc: Exception) -> FailureMode | None:
        """The failure ``exc`` (raised while opening, staging or verifying) means; None for a
        fault of the caller's own, which propagates."""
        ...
