"""The sandbox verbs an agent or a harness may use, as a protocol.

rock's ``Sandbox`` (in-process, Docker, or the daemon's ``RemoteSandbox``) is the one
implementation, but ale-core and the agents may not import rock (the dependency direction):
they type their sandbox parameters with :class:`SandboxVerbs`, and the type checker holds rock's
classes to it wherever one is passed in.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable


class CommandOutcome(Protocol):
    """What a command did (rock's ``ExecResult``)."""

    @property
    def exit_code(self) -> int: ...

    @property
    def stdout(self) -> bytes: ...

    @property
    def stderr(self) -> bytes: ...

    @property
    def stdout_text(self) -> str: ...

    @property
    def stderr_text(self) -> str: ...

    @property
    def stdout_truncated(self) -> bool: ...

    @property
    def stdout_total(self) -> int: ...

    @property
    def stderr_total(self) -> int: ...

    @property
    def duration_sec(self) -> float: ...

    @property
    def timed_out(self) -> bool: ...

    @property
    def oom_killed(self) -> bool:
        """The sandbox's memory limit killed the command."""
        ...

    @property
    def ok(self) -> bool:
        """It exited 0 within its time."""
        ...


class SandboxVerbs(Protocol):
    """One isolated place to run commands and move files (rock's ``Sandbox``)."""

    @property
    def id(self) -> str: ...

    def exec(
        self,
        command: str | list[str],
        *,
        timeout: float | None = ...,
        cwd: str | None = ...,
        env: dict[str, str] | None = ...,
        stdin: bytes | None = ...,
        max_output_bytes: int = ...,
    ) -> CommandOutcome: ...

    def read_file(self, path: str) -> bytes: ...

    def write_file(self, path: str, data: bytes, mode: int = ...) -> None: ...

    def put_archive(self, directory: str, data: bytes) -> None: ...

    def get_archive(self, path: str) -> bytes: ...

    def delete(self) -> None:
        """Only for whoever made the sandbox; an agent is lent one and leaves it."""
        ...


@runtime_checkable
class Attachable(Protocol):
    """A sandbox that can run a program with its standard streams attached to a process on
    this machine (rock's Docker sandboxes can): for programs that talk over stdin and
    stdout, an MCP server among them."""

    def attach_argv(self, argv: list[str], *, user: str | None = None) -> list[str]:
        """The command line that, run here, runs ``argv`` in the sandbox (its working
        directory and environment; as ``user`` when given) with stdin, stdout and stderr
        connected to it. Raises an error of one sentence when it cannot."""
        ...
