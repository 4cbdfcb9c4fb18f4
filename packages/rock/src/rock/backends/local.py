"""The local backend: each sandbox is a directory on this machine, its commands host processes.

It is for machines without a container engine and for an agent working on the user's
own files. It confines *paths*: every path given to the file verbs, and every working
directory, is resolved inside the sandbox root, and one that leads out (by ``..`` or a
symlink) is refused with :class:`PathEscape`. It does NOT isolate *processes*: commands
run as the calling user with the host's network, memory, CPU and process table, and an
absolute path inside a command means the host's path (``$ROCK_SANDBOX_ROOT`` names the
root). The spec's network, memory, cpus and pids limits are recorded but not enforced.
Use the docker backend where isolation matters.

On disk, a sandbox made by the backend is ``<root>/<daemon_id>/<sandbox_id>/`` holding
``meta.json`` (id, spec, creation time, state) and ``root/``, the sandbox's filesystem.
Snapshots are copies of that filesystem under ``<root>/snapshots/``.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import shutil
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rock.backends._confine import ConfinedRoot
from rock.backends._proc import (
    Pipes,
    ProcessChannel,
    kill_processes,
    read_until_exit,
    shell_exit_code,
    spawn,
)
from rock.backends._shell import Channel, ShellSession
from rock.backends.base import Backend, Sandbox, SandboxError, SandboxNotFound
from rock.models import DEFAULT_MAX_OUTPUT, ExecRequest, ExecResult, SandboxSpec

__all__ = ["LocalBackend", "LocalSandbox", "default_root", "kill_processes"]

_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
_SNAPSHOTS = "snapshots"


def default_root() -> Path:
    """Where sandboxes live unless told: ``$ROCK_HOME/sandboxes``, else ``~/.rock/sandboxes``."""
    return Path(os.environ.get("ROCK_HOME") or Path.home() / ".rock") / "sandboxes"


# --- files -------------------------------------------------------------------


def _skip_uncopyable(exclude: str | None) -> Callable[[str, list[str]], set[str]]:
    """A copytree ``ignore`` that drops sockets, fifos and devices, and ``exclude``."""

    def ignore(directory: str, names: list[str]) -> set[str]:
        skipped = set()
        for name in names:
            full = os.path.join(directory, name)
            try:
                mode = os.lstat(full).st_mode
            except OSError:
                skipped.add(name)
                continue
            if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode) or stat.S_ISLNK(mode)) or (
                stat.S_ISDIR(mode) and os.path.realpath(full) == exclude
            ):
                skipped.add(name)
        return skipped

    return ignore


def _copy_tree(source: Path, target: Path, *, exclude: Path | None = None) -> None:
    """Copy ``source`` to ``target`` with modes, symlinks as symlinks, special files left out."""
    real_exclude = os.path.realpath(exclude) if exclude is not None else None
    shutil.copytree(source, target, symlinks=True, ignore=_skip_uncopyable(real_exclude))


def _rmtree(path: Path) -> None:
    """Remove a tree, read-only directories included; a missing tree is fine."""

    def retry(func: Callable[..., Any], failed: str, _exc: Any) -> None:
        with contextlib.suppress(OSError):
            os.chmod(os.path.dirname(failed), 0o700)
            if os.path.isdir(failed) and not os.path.islink(failed):
                os.chmod(failed, 0o700)
        func(failed)

    if not os.path.lexists(path):
        return
    if sys.version_info >= (3, 12):
        shutil.rmtree(path, onexc=retry)
    else:
        shutil.rmtree(path, onerror=retry)


def _tree_size(path: Path) -> int:
    """Bytes under ``path`` (symlinks counted as links, not followed)."""
    total = 0
    for top, dirs, files in os.walk(path):
        for name in dirs + files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(top, name)).st_size
    return total


def _write_json(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}")
    tmp.write_text(json.dumps(data, indent=2) + "\n")
    os.replace(tmp, path)


def _image_dir(image: str) -> Path | None:
    """The directory an image names, or None for an image name (an empty root)."""
    if not (image in (".", "~") or image.startswith(("/", "./", "../", "~/"))):
        return None
    path = Path(image).expanduser()
    if not path.is_dir():
        raise SandboxError(
            f"image {image} looks like a path but is not a directory on this machine; "
            "pass an existing directory, or an image name for an empty root."
        )
    return path


def _new_id() -> str:
    return "sb-" + secrets.token_hex(6)


def _check_id(sandbox_id: str) -> str:
    if not _ID.fullmatch(sandbox_id) or ".." in sandbox_id:
        raise SandboxError(
            f"sandbox id {sandbox_id!r} is not valid; use letters, digits, '.', '_' and '-' "
            "(no path separators or '..')."
        )
    return sandbox_id


# --- the sandbox -------------------------------------------------------------


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
            _check_id(sandbox_id) if sandbox_id is not None else _new_id(),
            spec or SandboxSpec(),
            path,
            home=None,
            snapshots=snapshots or default_root() / _SNAPSHOTS,
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
                _write_json(self.home / "meta.json", {**meta, "state": state})

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
            out, err = pipes.out, pipes.err
            result = ExecResult(
                exit_code=137 if timed_out else shell_exit_code(proc.wait()),
                stdout=bytes(out.data),
                stderr=bytes(err.data),
                stdout_truncated=out.total > len(out.data),
                stderr_truncated=err.total > len(err.data),
                stdout_total=out.total,
                stderr_total=err.total,
                duration_sec=duration,
                timed_out=timed_out,
            )
        finally:
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
        return result

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
            _copy_tree(self.root, fresh, exclude=self.snapshots)
        except (OSError, shutil.Error) as exc:
            _rmtree(fresh)
            raise SandboxError(f"cannot snapshot sandbox {self.id}: {exc}.") from None
        old = self.snapshots / f".{name}.old-{secrets.token_hex(4)}"
        with contextlib.suppress(FileNotFoundError):
            target.rename(old)
        fresh.rename(target)
        _rmtree(old)
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
        _rmtree(grave)


# --- the backend -------------------------------------------------------------


class LocalBackend(Backend):
    """Sandboxes as directories under ``root`` (default :func:`default_root`), one folder
    per ``daemon_id``.

    ``spec.image`` names a directory to copy as the initial root when it looks like a
    path (``/…``, ``./…``, ``../…``, ``~/…``; it must exist) — a snapshot's path, for
    instance. Any other string (such as the default docker image name) starts an empty root.
    """

    name = "local"

    def __init__(self, root: Path | None = None, *, daemon_id: str = "local") -> None:
        if daemon_id == _SNAPSHOTS:
            raise SandboxError(f"daemon id {daemon_id!r} is reserved; pick another.")
        self.daemon_id = _check_id(daemon_id)
        self.root = Path(root) if root is not None else default_root()
        self.snapshots = self.root / _SNAPSHOTS

    @property
    def directory(self) -> Path:
        """Where this daemon's sandboxes live."""
        return self.root / self.daemon_id

    def create(
        self, spec: SandboxSpec | None = None, *, sandbox_id: str | None = None
    ) -> LocalSandbox:
        spec = spec or SandboxSpec()
        if spec.runtime != "runc":
            raise SandboxError(
                f"a local sandbox runs on this machine's own kernel, not under {spec.runtime}; "
                "use the Docker backend for runtime runsc."
            )
        if spec.capabilities is not None:
            raise SandboxError(
                "a local sandbox runs as this machine's user, whose capabilities rock cannot "
                "choose; use the Docker backend to set capabilities."
            )
        sandbox_id = _check_id(sandbox_id) if sandbox_id is not None else _new_id()
        source = _image_dir(spec.image)
        home = self.directory / sandbox_id
        self.directory.mkdir(parents=True, exist_ok=True)
        try:
            home.mkdir()
        except FileExistsError:
            raise SandboxError(
                f"sandbox {sandbox_id} already exists; pick another id or delete it first."
            ) from None
        try:
            if source is None:
                (home / "root").mkdir()
            else:
                _copy_tree(source, home / "root")
            sandbox = LocalSandbox(
                sandbox_id, spec, home / "root", home=home, snapshots=self.snapshots
            )
            if spec.workdir is not None:
                os.makedirs(sandbox._files.resolve(spec.workdir), exist_ok=True)
            meta = {
                "id": sandbox_id,
                "backend": self.name,
                "daemon_id": self.daemon_id,
                "created": datetime.now(UTC).isoformat(),
                "state": "running",
                "spec": spec.model_dump(mode="json"),
            }
            _write_json(home / "meta.json", meta)
        except BaseException as exc:
            _rmtree(home)
            if isinstance(exc, (OSError, shutil.Error)) and not isinstance(exc, SandboxError):
                raise SandboxError(f"cannot create sandbox {sandbox_id}: {exc}.") from None
            raise
        return sandbox

    def check_spec(self, spec: SandboxSpec) -> None:
        _image_dir(spec.image)

    def images(self) -> list[dict[str, Any]]:
        """The snapshots: their paths are what ``spec.image`` takes."""
        try:
            found = sorted(p for p in self.snapshots.iterdir() if not p.name.startswith("."))
        except FileNotFoundError:
            return []
        out = []
        for path in found:
            size = _tree_size(path)
            created = datetime.fromtimestamp(path.stat().st_mtime, UTC).isoformat()
            out.append(
                {
                    "id": str(path),
                    "tags": [path.name],
                    "size_mb": round(size / 2**20, 1),
                    "created": created,
                }
            )
        return out

    def _load(self, home: Path) -> LocalSandbox | None:
        try:
            meta = json.loads((home / "meta.json").read_text())
            spec = SandboxSpec.model_validate(meta["spec"])
        except (OSError, ValueError, KeyError, TypeError):
            return None
        return LocalSandbox(home.name, spec, home / "root", home=home, snapshots=self.snapshots)

    def get(self, sandbox_id: str) -> LocalSandbox:
        valid = _ID.fullmatch(sandbox_id) is not None and ".." not in sandbox_id
        found = self._load(self.directory / sandbox_id) if valid else None
        if found is None:
            raise SandboxNotFound(f"no sandbox {sandbox_id}; list them with 'rock sandbox ls'.")
        return found

    def list(self) -> list[Sandbox]:
        try:
            homes = sorted(self.directory.iterdir())
        except FileNotFoundError:
            return []
        found = [self._load(home) for home in homes if _ID.fullmatch(home.name)]
        return [sandbox for sandbox in found if sandbox is not None]
