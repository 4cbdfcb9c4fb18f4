"""The sandbox workspace: the agent's tools act inside a rock sandbox.

``sandbox`` is anything with rock's sandbox verbs (:class:`ale.sandbox.SandboxVerbs`); only
``exec`` (and ``delete`` when the workspace owns the sandbox) is used, so an in-process
docker sandbox and the daemon's :class:`rock.client.RemoteSandbox` both work. rock is
imported lazily: iflow needs it only through the optional extra ``iflow-cli[sandbox]``.

Everything goes through ``bash`` in the sandbox (files are read with ``cat`` and written
with ``cat >``, so modes, owners and symlinks behave as in the sandbox's own shell), and
the file-system queries run :mod:`iflow.workspace._fsops` with the sandbox's ``python3``.
Paths are the sandbox's own, so the sandbox's commands and files must see the same paths
(true of docker sandboxes; rock's local backend maps file paths but not commands).
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from iflow.errors import WorkspaceError
from iflow.workspace.base import ExecOutput, Workspace
from iflow.workspace.local import MAX_OUTPUT_BYTES, TIMEOUT_EXIT, dropped_note

if TYPE_CHECKING:
    from ale.sandbox import CommandOutcome, SandboxVerbs

MAX_READ_BYTES = 256 << 20
"""Largest file ``read_bytes`` returns."""
FSOP_TIMEOUT_SEC = 120.0
"""How long one list/glob/search may run in the sandbox."""
FSOP_OUTPUT_BYTES = 64 << 20

_NO_CWD = "__iflow_no_such_directory__"
_CD_THEN_RUN = 'cd -- "$1" 2>/dev/null || { printf %s "$2" >&2; exit 125; }; exec bash -c "$3"'
_READ = (
    'if [ -d "$1" ]; then exit 21; elif [ ! -e "$1" ]; then exit 22; '
    'elif [ ! -f "$1" ]; then exit 24; elif [ ! -r "$1" ]; then exit 23; fi; exec cat -- "$1"'
)
_WRITE = (
    'mkdir -p -- "$(dirname -- "$1")" 2>/dev/null; if [ -d "$1" ]; then exit 21; fi; '
    'exec cat > "$1"'
)
_FSOP = 'command -v python3 >/dev/null 2>&1 || exit 127; exec python3 -I -S -c "$1"'
_BOOT = (
    "import sys;d=sys.stdin.buffer.read();i=d.index(b'\\0');g={'__name__':'iflow_fsops'};"
    "exec(compile(d[:i],'_fsops.py','exec'),g);g['main'](d[i+1:])"
)
NO_PYTHON = (
    "list_directory, glob and search_file_content need python3 in the sandbox, which it "
    "lacks; use run_shell_command with ls, find or grep instead."
)


def _rock_errors() -> tuple[type[BaseException], ...]:
    try:
        from rock.errors import RockError
    except ImportError:  # rock is optional; a duck-typed sandbox raises its own errors
        return ()
    return (RockError,)


class SandboxWorkspace(Workspace):
    """Commands and files inside ``sandbox``, starting in ``root``; ``close()`` deletes the
    sandbox only when ``owns`` is true."""

    kind = "sandbox"

    def __init__(self, sandbox: SandboxVerbs, root: str = "/", *, owns: bool = False) -> None:
        if not root.startswith("/"):
            raise WorkspaceError(f"The sandbox root {root!r} must be an absolute path.")
        self.sandbox = sandbox
        self.root = root
        self.owns = owns
        self._fsops_source: bytes | None = None

    async def _call(self, argv: list[str], **kwargs: Any) -> CommandOutcome:
        try:
            return await asyncio.to_thread(self.sandbox.exec, argv, **kwargs)
        except _rock_errors() as exc:
            raise WorkspaceError(f"The sandbox failed: {exc}") from None

    async def exec(
        self,
        command: str,
        *,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        timeout: float | None = 120.0,
        stdin: bytes | None = None,
    ) -> ExecOutput:
        """Run ``command`` with ``bash -c`` in the sandbox; rock kills its process tree at
        ``timeout`` (reported as exit 124, like the local workspace)."""
        workdir = self.resolve(cwd) if cwd else self.root
        argv = ["bash", "-c", _CD_THEN_RUN, "iflow", workdir, _NO_CWD, command]
        result = await self._call(
            argv,
            timeout=timeout,
            env=env or {},
            stdin=stdin,
            max_output_bytes=MAX_OUTPUT_BYTES,
        )
        stderr = _text(result.stderr, result.stderr_total)
        if result.exit_code == 125 and stderr == _NO_CWD and not result.timed_out:
            raise WorkspaceError(
                f"The directory {workdir} does not exist; create it or run the command elsewhere."
            )
        return ExecOutput(
            exit_code=TIMEOUT_EXIT if result.timed_out else result.exit_code,
            stdout=_text(result.stdout, result.stdout_total),
            stderr=stderr,
            timed_out=result.timed_out,
            duration_sec=result.duration_sec,
        )

    async def read_bytes(self, path: str) -> bytes:
        target = self.resolve(path)
        result = await self._call(
            ["bash", "-c", _READ, "iflow", target], timeout=None, max_output_bytes=MAX_READ_BYTES
        )
        if result.exit_code == 21:
            raise WorkspaceError(
                f"{target} is a directory, not a file; use list_directory to see what it holds."
            )
        if result.exit_code == 22:
            raise WorkspaceError(f"{target} does not exist; check the path.")
        if result.exit_code == 23:
            raise WorkspaceError(
                f"{target} cannot be read (permission denied); pick a file you may read."
            )
        if result.exit_code == 24:
            raise WorkspaceError(
                f"{target} is not a regular file (a device, pipe or socket); read it with "
                "run_shell_command instead."
            )
        if result.exit_code != 0:
            raise WorkspaceError(f"{target} cannot be read: {_last_line(result.stderr)}.")
        if result.stdout_truncated:
            raise WorkspaceError(
                f"{target} is larger than {MAX_READ_BYTES:,} bytes; read parts of it with "
                "run_shell_command (head, tail, sed -n)."
            )
        return result.stdout

    async def write_bytes(self, path: str, data: bytes) -> None:
        target = self.resolve(path)
        result = await self._call(["bash", "-c", _WRITE, "iflow", target], timeout=None, stdin=data)
        if result.exit_code == 21:
            raise WorkspaceError(f"{target} is a directory; give a file path to write.")
        if result.exit_code != 0:
            raise WorkspaceError(f"{target} cannot be written: {_last_line(result.stderr)}.")

    async def fsop(self, op: str, args: dict[str, Any]) -> dict[str, Any]:
        if self._fsops_source is None:
            source = Path(__file__).with_name("_fsops.py")
            self._fsops_source = await asyncio.to_thread(source.read_bytes)
        args = {"root": self.root, **args, "path": self.resolve(str(args.get("path") or "."))}
        request = json.dumps({"op": op, "args": args}).encode()
        try:
            result = await self._call(
                ["bash", "-c", _FSOP, "iflow", _BOOT],
                timeout=FSOP_TIMEOUT_SEC,
                stdin=self._fsops_source + b"\0" + request,
                max_output_bytes=FSOP_OUTPUT_BYTES,
            )
        except WorkspaceError as exc:
            return {"error": str(exc)}
        if result.timed_out:
            return {
                "error": f"{op} took longer than {FSOP_TIMEOUT_SEC:g} s in the sandbox; "
                "narrow the path or the pattern."
            }
        if result.exit_code == 127:
            return {"error": NO_PYTHON}
        try:
            answer = json.loads(result.stdout)
        except ValueError:
            return {
                "error": f"The file-system helper failed in the sandbox "
                f"(exit {result.exit_code}: {_last_line(result.stderr)}); "
                "use run_shell_command with ls, find or grep instead."
            }
        if not isinstance(answer, dict):
            return {"error": "The file-system helper answered something other than an object."}
        return answer

    async def close(self) -> None:
        if self.owns:
            try:
                await asyncio.to_thread(self.sandbox.delete)
            except _rock_errors() as exc:
                raise WorkspaceError(f"The sandbox could not be deleted: {exc}") from None


def _text(data: bytes, total: int) -> str:
    text = data.decode("utf-8", errors="replace")
    return text + dropped_note(len(data), total) if total > len(data) else text


def _last_line(stderr: bytes) -> str:
    lines = stderr.decode("utf-8", errors="replace").strip().splitlines()
    return lines[-1].rstrip(".") if lines else "no error message"
