"""A local sandbox: a directory on this machine, its commands host processes (see
`rock.backends.local` for what is and is not confined)."""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rock.backends._confine import ConfinedRoot
from rock.backends._local_disk import (
    SNAPSHOTS,
    check_id,
    copy_tree,
    default_root,
    new_id,
    rmtree,
    write_json,
)
from rock.backends._proc import (
    Pipes,
    ProcessChannel,
    kill_processes,
    read_until_exit,
    shell_exit_code,
    spawn,
)
from rock.backends._shell import Channel, ShellSession
from rock.backends.base import Sandbox, SandboxError, SandboxNotFound
from rock.models import DEFAULT_MAX_OUTPUT, ExecRequest, ExecResult, SandboxSpec


class LocalSandbox(Sandbox):
    """A directory on this machine used as a sandbox; see the module docstring for what
    is and is not confined.

    Paths given to the file verbs and as working directories are read inside the root:
    a relative path is relative to the root and an absolute one is taken as inside it
    (``/`` is the root, ``/tmp`` is ``<root>/tmp``). Commands get a clean environment:
    the host's PATH, ``HOME`` = the root, ``LANG=C.UTF-8``, ``TERM=dumb``,
    ``ROCK_SANDBOX_ID``, ``ROCK_SANDBOX_ROOT`` and ``ROCK_EXEC_ID`` (one per command),
    then the spec's and the request's variables.
    """

    def __init__(
        self,
        sandbox_id: str,
        spec: SandboxSpec,
        root: Path,
        *,
        home: Path | None,
        snapshots: Path,
    ) -> None:
        self.id = sandbox_id
        self.spec = spec
        self.root = Path(os.path.realpath(root))
        self._files = ConfinedRoot(self.root, sandbox_id)
        self.home = home
        """The directory holding ``meta.json`` and the root; None when the root is the user's."""
        self.snapshots = snapshots
        self._state = "running"  # kept here only when there is no meta.json
        self._lock = threading.Lock()
        self._procs: dict[int, tuple[subprocess.Popen[bytes], str | None]] = {}
        self._tags: dict[str, str] = {}
        """The tag of each running command's exec id, when it has one."""
        """Live children by pid, with the ``ROCK_EXEC_ID`` of commands (None for shells)."""

    @classmethod
    def at(
        cls,
        path: Path,
        *,
        spec: SandboxSpec | None = None,
        sandbox_id: str | None = None,
        snapshots: Path | None = None,
    ) -> LocalSandbox:
        """A sandbox whose root is an existing directory of the user's. It is not listed
        by any backend, and :meth:`delete` stops its processes but leaves the directory."""
        path = Path(path).expanduser()
        if not path.is_dir():
            raise SandboxError(f"{path} is not a directory on this machine; pass one that is.")
        return cls(
            check_id(sandbox_id) if sandbox_id is not None else new_id(),
            spec or SandboxSpec(),
            path,
            home=None,
            snapshots=snapshots or default_root() / SNAPSHOTS,
        )

    @property
    def owns_root(self) -> bool:
        """True when the backend made the root (and :meth:`delete` removes it)."""
        return self.home is not None

    # --- state --------------------------------------------------------------

    def _gone(self) -> SandboxNotFound:
        return SandboxNotFound(f"sandbox {self.id} is gone (deleted); create a new one.")

    def _meta(self) -> dict[str, Any]:
        assert self.home is not None
        try:
            meta: dict[str, Any] = json.loads((self.home / "meta.json").read_text())
            return meta
        except FileNotFoundError:
            raise self._gone() from None

    def _current_state(self) -> str:
        if self.home is None:
            state = self._state
        else:
            state = str(self._meta().get("state", "running")) if self.home.exists() else "deleted"
        return state

    def _set_state(self, state: str) -> None:
        if self.home is None:
            self._state = state
        else:
            meta = self._meta()
            if meta.get("state") != state:
                write_json(self.home / "meta.json", {**meta, "state": state})

    def _check(self) -> str:
        state = self._current_state()
        if state == "deleted" or not self.root.is_dir():
            raise self._gone()
        return state

    def _wake(self) -> None:
        """Commands restart a stopped sandbox."""
        if self._check() == "stopped":
            self._set_state("running")

    def _untrack(self, proc: subprocess.Popen[bytes]) -> None:
        with self._lock:
            self._procs.pop(proc.pid, None)

    def _marker(self) -> list[str]:
        return [f"ROCK_SANDBOX_ID={self.id}", f"ROCK_SANDBOX_ROOT={self.root}"]

    def _kill_all(self) -> None:
        """Kill every process this sandbox started, tracked here or found by its marker."""
        with self._lock:
            roots = [pid for pid, (proc, _) in self._procs.items() if proc.returncode is None]
        kill_processes(roots, marker=self._marker())

    def interrupt(self, tag: str | None = None) -> int:
        """Kill every command running now (or the one run with ``tag``) and what it started
        (sessions are left alone); return how many were running. Each returns exit code 137,
        not timed out."""
        with self._lock:
            running = [
                (pid, exec_id)
                for pid, (_, exec_id) in self._procs.items()
                if exec_id and (tag is None or self._tags.get(exec_id) == tag)
            ]
        for pid, exec_id in running:
            kill_processes([pid], marker=[f"ROCK_EXEC_ID={exec_id}"])
        return len(running)

    # --- exec ---------------------------------------------------------------

    def _env(self, extra: dict[str, str], **ours: str) -> dict[str, str]:
        base = {
            "PATH": os.environ.get("PATH") or os.defpath,
            "HOME": str(self.root),
            "LANG": "C.UTF-8",
            "TERM": "dumb",
        }
        ids = {"ROCK_SANDBOX_ID": self.id, "ROCK_SANDBOX_ROOT": str(self.root), **ours}
        return {**base, **self.spec.env, **extra, **ids}

    def _spawn(
        self, argv: list[str], exec_id: str | None = None, **kwargs: Any
    ) -> subprocess.Popen[bytes]:
        # Under the lock, so stop() and interrupt() never miss a process being started.
        with self._lock:
            try:
                proc = spawn(argv, **kwargs)
            except OSError as exc:
                raise SandboxError(f"sandbox {self.id} cannot start a process: {exc}.") from None
            self._procs[proc.pid] = (proc, exec_id)
        return proc

    def run(self, request: ExecRequest) -> ExecResult:
        """Run a command as a host process (a string by ``bash -c``, a list as argv).

        At the timeout the command, its descendants, its process group and whatever
        carries its ``ROCK_EXEC_ID`` are killed (exit code 137). When the command exits
        but background children still hold its output open, it returns after a short
        grace and leaves them running (their later output is dropped).
        """
        cwd, argv = self._command(request)
        exec_id = secrets.token_hex(8)
        started = time.monotonic()
        deadline = None if request.timeout is None else started + request.timeout
        if request.tag is not None:
            with self._lock:
                self._tags[exec_id] = request.tag
        proc = self._spawn(
            argv,
            exec_id,
            cwd=cwd,
            env=self._env(request.env, ROCK_EXEC_ID=exec_id),
            stdin=subprocess.PIPE if request.stdin is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        pipes = Pipes(proc, request.stdin, request.max_output_bytes)
        try:
            timed_out = read_until_exit(
                proc,
                pipes,
                deadline,
                kill=lambda: kill_processes([proc.pid], marker=[f"ROCK_EXEC_ID={exec_id}"]),
            )
            duration = time.monotonic() - started
            exit_code = 137 if timed_out else shell_exit_code(proc.wait())
            result = _result(pipes, exit_code, duration, timed_out)
        finally:
            self._finish(proc, pipes, exec_id)
        return result

    def _command(self, request: ExecRequest) -> tuple[str, list[str]]:
        """Where the command runs and its argv, once the sandbox is up and can run it."""
        self._wake()
        if request.user is not None:
            raise SandboxError(
                f"sandbox {self.id} runs commands as this machine's own user only (a local "
                f"sandbox), not as {request.user!r}; use a Docker sandbox for that."
            )
        cwd = self._files.workdir(request.cwd if request.cwd is not None else self.spec.workdir)
        command = request.command
        argv = ["bash", "-c", command] if isinstance(command, str) else list(command)
        if not argv:
            raise SandboxError("the command is an empty list; pass a string or a non-empty argv.")
        return cwd, argv

    def _finish(self, proc: subprocess.Popen[bytes], pipes: Pipes, exec_id: str) -> None:
        """Leave nothing of an ended command behind but its background children (or, when it
        was interrupted, nothing at all), and stop tracking it."""
        if proc.poll() is None:  # interrupted (KeyboardInterrupt…): leave nothing behind
            kill_processes([proc.pid], marker=[f"ROCK_EXEC_ID={exec_id}"])
            proc.wait()
        if pipes.open:
            pipes.drain_in_background()
        else:
            pipes.close()
        self._untrack(proc)
        with self._lock:
            self._tags.pop(exec_id, None)

    # --- sessions -----------------------------------------------------------

    def session(self, *, max_output_bytes: int = DEFAULT_MAX_OUTPUT) -> ShellSession:
        """A persistent bash started in the spec's workdir (else the root); closing it
        kills the shell and everything it started."""

        def open_channel(on_data: Callable[[bytes | None], None]) -> Channel:
            self._wake()
            proc = self._spawn(
                ["bash", "--noprofile", "--norc"],
                cwd=self._files.workdir(self.spec.workdir),
                env=self._env({}),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
            )
            return ProcessChannel(proc, on_data, lambda: self._untrack(proc))

        return ShellSession(
            open_channel,
            lambda pid, keep, mark: kill_processes(
                [pid], keep_roots=keep, marker=[f"ROCK_EXEC_ID={mark}"] if mark else ()
            ),
            max_output_bytes=max_output_bytes,
        )

    # --- files --------------------------------------------------------------

    def read_file(self, path: str) -> bytes:
        self._check()
        return self._files.read_file(path)

    def write_file(self, path: str, data: bytes, mode: int = 0o644) -> None:
        """Write ``data`` to ``path`` with ``mode``, making parent directories; a final
        symlink is followed only when it stays inside the root."""
        self._check()
        self._files.write_file(path, data, mode)

    def put_archive(self, directory: str, data: bytes) -> None:
        """Unpack a tar archive into ``directory`` (made if missing), keeping modes but not
        setuid/setgid bits or owners. A member whose path or link target leads outside the
        root, or with an absolute name, is refused with :class:`PathEscape`; device files
        are refused too."""
        self._check()
        self._files.put_archive(directory, data)

    def get_archive(self, path: str) -> bytes:
        """A tar of ``path`` (a symlink to it followed) whose top member is its base name."""
        self._check()
        return self._files.get_archive(path)

    # --- lifecycle ----------------------------------------------------------

    def snapshot(self, tag: str) -> str:
        """Copy the root to ``<snapshots>/<tag, / and : made _>/`` (replacing an older one);
        return that path, which works as the ``image`` of a new local sandbox."""
        self._check()
        name = tag.replace("/", "_").replace(":", "_")
        if name in ("", ".", "..") or "\0" in name:
            raise SandboxError(f"snapshot tag {tag!r} cannot name a directory; use a name.")
        self.snapshots.mkdir(parents=True, exist_ok=True)
        target = self.snapshots / name
        fresh = self.snapshots / f".{name}.new-{secrets.token_hex(4)}"
        try:
            copy_tree(self.root, fresh, exclude=self.snapshots)
        except (OSError, shutil.Error) as exc:
            rmtree(fresh)
            raise SandboxError(f"cannot snapshot sandbox {self.id}: {exc}.") from None
        old = self.snapshots / f".{name}.old-{secrets.token_hex(4)}"
        with contextlib.suppress(FileNotFoundError):
            target.rename(old)
        fresh.rename(target)
        rmtree(old)
        return str(target)

    def status(self) -> dict[str, Any]:
        try:
            state = self._current_state()
        except SandboxNotFound:
            state = "deleted"
        return {"state": state, "root": str(self.root)}

    def stop(self) -> None:
        """Kill every process the sandbox started; the next command restarts it."""
        self._check()
        self._kill_all()
        self._set_state("stopped")

    def delete(self) -> None:
        """Stop, then remove the sandbox's directory unless the root is the user's.
        Deleting twice is fine."""
        if self.home is None:
            if self._state != "deleted":
                self._kill_all()
                self._state = "deleted"
            return
        if not self.home.exists():
            return
        self._kill_all()
        grave = self.home.with_name(f".deleted-{self.id}-{secrets.token_hex(4)}")
        try:
            self.home.rename(grave)  # gone at once for list() and get()
        except FileNotFoundError:
            return
        rmtree(grave)


def _result(pipes: Pipes, exit_code: int, duration: float, timed_out: bool) -> ExecResult:
    """A command's result from its exit code and what its pipes kept."""
    out, err = pipes.out, pipes.err
    return ExecResult(
        exit_code=exit_code,
        stdout=bytes(out.data),
        stderr=bytes(err.data),
        stdout_truncated=out.total > len(out.data),
        stderr_truncated=err.total > len(err.data),
        stdout_total=out.total,
        stderr_total=err.total,
        duration_sec=duration,
        timed_out=timed_out,
    )
