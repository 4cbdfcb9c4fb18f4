"""The local workspace: the user's own machine.

Commands run as ``bash -c`` subprocesses of iflow, each in its own session (process
group) so a timeout can kill everything it started. This workspace does NOT confine
paths: absolute paths and ``..`` reach anywhere the user can, exactly as the user's own
shell would. Use :class:`iflow.workspace.sandbox.SandboxWorkspace` for isolation.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import stat
import time
from pathlib import Path
from typing import Any, cast

from ale.capped import CappedOutput
from iflow.errors import WorkspaceError
from iflow.workspace import _fsops
from iflow.workspace.base import ExecOutput, Workspace

MAX_OUTPUT_BYTES = 1 << 20
"""Bytes of stdout and of stderr kept per command; the rest is counted and dropped."""
KILL_GRACE_SEC = 1.0
"""After SIGTERM at a timeout, how long the process group gets before SIGKILL."""
PIPE_GRACE_SEC = 0.5
"""After the command exits, how long background children holding its output open may
keep writing before the output is returned without them (they keep running)."""
TIMEOUT_EXIT = 124


def dropped_note(kept: int, total: int) -> str:
    """The line appended to a stream whose output was capped."""
    return f"\n[iflow: output past {kept:,} bytes was dropped ({total:,} bytes in all)]\n"


def _text(stream: CappedOutput) -> str:
    """A stream's text, with a note of what was dropped past its cap."""
    out = stream.data.decode("utf-8", errors="replace")
    if stream.dropped:
        out += dropped_note(len(stream.data), stream.total)
    return out


class _Collector(asyncio.SubprocessProtocol):
    """Collects a process's output and tells when it exited and when its pipes closed
    (separately: background children may hold the pipes after the shell exits)."""

    def __init__(self, cap: int) -> None:
        self.out, self.err = CappedOutput(cap), CappedOutput(cap)
        self.exited = asyncio.Event()
        self.closed = asyncio.Event()

    def pipe_data_received(self, fd: int, data: bytes) -> None:
        (self.err if fd == 2 else self.out).add(data)

    def process_exited(self) -> None:
        self.exited.set()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed.set()


def _killpg(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


def _exit_code(code: int | None, timed_out: bool) -> int:
    """The exit status to report: 124 for a timeout, 128 + N for a kill by signal N (as
    shells report it), -1 when unknown."""
    if timed_out:
        return TIMEOUT_EXIT
    if code is None:
        return -1
    if code < 0:
        return 128 - code  # killed by a signal: report it as shells do
    return code


class LocalWorkspace(Workspace):
    """Commands and files on this machine, starting in ``root``."""

    kind = "local"

    def __init__(self, root: str | Path, *, max_output_bytes: int = MAX_OUTPUT_BYTES) -> None:
        path = Path(root).expanduser().resolve()
        if not path.is_dir():
            raise WorkspaceError(f"The workspace root {path} is not a directory; create it first.")
        self.root = str(path)
        self.max_output_bytes = max_output_bytes

    async def exec(
        self,
        command: str,
        *,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        timeout: float | None = 120.0,
        stdin: bytes | None = None,
    ) -> ExecOutput:
        """Run ``command`` with ``bash -c``; at ``timeout`` SIGTERM then SIGKILL its process
        group and return exit 124 with what it printed so far."""
        workdir = self.resolve(cwd) if cwd else self.root
        if not os.path.isdir(workdir):
            raise WorkspaceError(
                f"The directory {workdir} does not exist; create it or run the command elsewhere."
            )
        started = time.monotonic()
        transport, proto = await self._spawn(command, workdir, env, stdin is not None)
        timed_out = await self._wait(transport, proto, stdin, timeout)
        return ExecOutput(
            exit_code=_exit_code(transport.get_returncode(), timed_out),
            stdout=_text(proto.out),
            stderr=_text(proto.err),
            timed_out=timed_out,
            duration_sec=time.monotonic() - started,
        )

    async def _spawn(
        self, command: str, workdir: str, env: dict[str, str] | None, stdin: bool
    ) -> tuple[asyncio.SubprocessTransport, _Collector]:
        """Start ``bash -c command`` in a session of its own, its output collected."""
        loop = asyncio.get_running_loop()
        return await loop.subprocess_exec(
            lambda: _Collector(self.max_output_bytes),
            "bash",
            "-c",
            command,
            cwd=workdir,
            env={**os.environ, **env} if env else None,
            stdin=asyncio.subprocess.PIPE if stdin else asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            start_new_session=True,
        )

    async def _wait(
        self,
        transport: asyncio.SubprocessTransport,
        proto: _Collector,
        stdin: bytes | None,
        timeout: float | None,
    ) -> bool:
        """Feed ``stdin``, wait for the exit (killing the process group at ``timeout``, or
        when cancelled) and briefly for the pipes to close; whether it timed out."""
        pid = transport.get_pid()
        timed_out = False
        try:
            if stdin is not None:
                pipe = cast(asyncio.WriteTransport | None, transport.get_pipe_transport(0))
                if pipe is not None:
                    pipe.write(stdin)
                    pipe.write_eof()
            try:
                await asyncio.wait_for(proto.exited.wait(), timeout)
            except TimeoutError:
                timed_out = True
                await self._kill(pid, proto)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(proto.closed.wait(), PIPE_GRACE_SEC)
        except asyncio.CancelledError:
            _killpg(pid, signal.SIGKILL)
            raise
        finally:
            transport.close()
        return timed_out

    @staticmethod
    async def _kill(pid: int, proto: _Collector) -> None:
        _killpg(pid, signal.SIGTERM)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(proto.exited.wait(), KILL_GRACE_SEC)
        _killpg(pid, signal.SIGKILL)  # children that outlived or ignored SIGTERM
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(proto.exited.wait(), KILL_GRACE_SEC)

    async def read_bytes(self, path: str) -> bytes:
        target = self.resolve(path)
        return await asyncio.to_thread(_read, target)

    async def write_bytes(self, path: str, data: bytes) -> None:
        target = self.resolve(path)
        await asyncio.to_thread(_write, target, data)

    async def fsop(self, op: str, args: dict[str, Any]) -> dict[str, Any]:
        args = {"root": self.root, **args, "path": self.resolve(str(args.get("path") or "."))}
        return await asyncio.to_thread(_fsops.run, op, args)


def _read(path: str) -> bytes:
    try:
        if not stat.S_ISREG(os.stat(path).st_mode) and not os.path.isdir(path):
            raise WorkspaceError(
                f"{path} is not a regular file (a device, pipe or socket); read it with "
                "run_shell_command instead."
            )
        with open(path, "rb") as fh:
            return fh.read()
    except WorkspaceError:
        raise
    except FileNotFoundError:
        raise WorkspaceError(f"{path} does not exist; check the path.") from None
    except IsADirectoryError:
        raise WorkspaceError(
            f"{path} is a directory, not a file; use list_directory to see what it holds."
        ) from None
    except PermissionError:
        raise WorkspaceError(
            f"{path} cannot be read (permission denied); pick a file you may read."
        ) from None
    except OSError as exc:
        raise WorkspaceError(f"{path} cannot be read: {exc.strerror or exc}.") from None


def _write(path: str, data: bytes) -> None:
    try:
        os.makedirs(os.path.dirname(path) or "/", exist_ok=True)
        with open(path, "wb") as fh:
            fh.write(data)
    except IsADirectoryError:
        raise WorkspaceError(f"{path} is a directory; give a file path to write.") from None
    except FileExistsError:
        raise WorkspaceError(
            f"A parent of {path} is a file, not a directory; pick another path."
        ) from None
    except NotADirectoryError:
        raise WorkspaceError(
            f"A parent of {path} is a file, not a directory; pick another path."
        ) from None
    except PermissionError:
        raise WorkspaceError(
            f"{path} cannot be written (permission denied); pick a path you may write."
        ) from None
    except OSError as exc:
        raise WorkspaceError(f"{path} cannot be written: {exc.strerror or exc}.") from None
