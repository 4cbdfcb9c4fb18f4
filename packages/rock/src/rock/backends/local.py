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
import io
import json
import os
import posixpath
import re
import secrets
import selectors
import shutil
import signal
import stat
import subprocess
import sys
import tarfile
import threading
import time
from collections.abc import Callable, Collection, Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

from rock.backends._shell import Channel, SessionError, ShellSession
from rock.backends.base import Backend, PathEscape, Sandbox, SandboxError, SandboxNotFound
from rock.models import DEFAULT_MAX_OUTPUT, ExecRequest, ExecResult, SandboxSpec

_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
_SNAPSHOTS = "snapshots"
# Every command starts through this: no core files, then the command itself (same pid).
_CORE_OFF = 'ulimit -c 0 2>/dev/null; exec "$@"'
_STRAGGLER_GRACE_SEC = 0.5
"""After a command exits, how long to wait for pipes its background children hold open."""
_KILL_GRACE_SEC = 1.0
"""After a command is killed, how long to keep reading what it left in its pipes."""
_CHUNK = 1 << 16
_RESTORED = (signal.SIGINT, signal.SIGQUIT)


def _restore_signals() -> None:
    for sig in _RESTORED:
        signal.signal(sig, signal.SIG_DFL)


def default_root() -> Path:
    """Where sandboxes live unless told: ``$ROCK_HOME/sandboxes``, else ``~/.rock/sandboxes``."""
    return Path(os.environ.get("ROCK_HOME") or Path.home() / ".rock") / "sandboxes"


# --- killing process trees ---------------------------------------------------


def _process_table() -> dict[int, tuple[int, int]]:
    """``pid -> (ppid, pgid)`` of every live process (zombies left out)."""
    table: dict[int, tuple[int, int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as fh:
                line = fh.read()
        except OSError:
            continue
        fields = line.rsplit(b")", 1)[-1].split()  # the command name may hold anything
        if len(fields) >= 3 and fields[0] not in (b"Z", b"X"):
            table[int(entry.name)] = (int(fields[1]), int(fields[2]))
    return table


def _environ_holds(pid: int, entries: frozenset[bytes]) -> bool:
    try:
        with open(f"/proc/{pid}/environ", "rb") as fh:
            return entries <= set(fh.read().split(b"\0"))
    except OSError:
        return False


def _await_delivery(pids: Collection[int], sig: int, *, within: float) -> None:
    """Wait until no process of ``pids`` has ``sig`` pending (or ``within`` seconds pass)."""
    bit, end = 1 << (sig - 1), time.monotonic() + within
    waiting = set(pids)
    while waiting and time.monotonic() < end:
        for pid in list(waiting):
            try:
                with open(f"/proc/{pid}/status", "rb") as fh:
                    masks = [
                        int(line.split()[1], 16)
                        for line in fh
                        if line.startswith((b"SigPnd:", b"ShdPnd:"))
                    ]
            except (OSError, ValueError, IndexError):
                masks = []
            if not any(mask & bit for mask in masks):
                waiting.discard(pid)
        if waiting:
            time.sleep(0.002)


def kill_processes(
    roots: Collection[int], *, keep_roots: bool = False, marker: Iterable[str] = ()
) -> None:
    """Kill ``roots``, their descendants, their process groups and every process whose
    environment holds all the ``NAME=value`` entries of ``marker`` (with its descendants).

    The marker finds what escaped the tree (double forks, ``setsid``). Each pass stops
    every victim before killing any, so a fork bomb cannot outrun the scan; three passes
    catch late forks. With ``keep_roots`` the roots get SIGINT instead and survive, their
    groups too (a session's shell). This process and its ancestors are always spared.
    """
    wanted = frozenset(entry.encode() for entry in marker)
    if keep_roots:
        for pid in roots:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGINT)
        # A shell acts on SIGINT after its child dies only if it took the signal first.
        _await_delivery(roots, signal.SIGINT, within=1.0)
    for _ in range(3):
        table = _process_table()
        spared: set[int] = set()
        pid = os.getpid()
        while pid in table and pid not in spared:
            spared.add(pid)
            pid = table[pid][0]
        children: dict[int, list[int]] = {}
        for pid, (ppid, _) in table.items():
            children.setdefault(ppid, []).append(pid)
        todo = [*roots]
        if not keep_roots:
            todo += [pid for pid, (_, pgid) in table.items() if pgid in roots]
        if wanted:
            todo += [pid for pid in table if pid not in spared and _environ_holds(pid, wanted)]
        victims: set[int] = set()
        while todo:
            pid = todo.pop()
            if pid not in victims:
                victims.add(pid)
                todo += children.get(pid, [])
        victims = (victims & table.keys()) - spared
        if keep_roots:
            victims -= set(roots)
        if not victims:
            break
        for sig in (signal.SIGSTOP, signal.SIGKILL):
            for pid in victims:
                with contextlib.suppress(OSError):
                    os.kill(pid, sig)
    if not keep_roots:
        for pid in roots:
            with contextlib.suppress(OSError):
                os.killpg(pid, signal.SIGKILL)


# --- pipes -------------------------------------------------------------------


class _Capped:
    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.data = bytearray()
        self.total = 0

    def add(self, chunk: bytes) -> None:
        self.total += len(chunk)
        room = self.cap - len(self.data)
        if room > 0:
            self.data.extend(chunk[:room])


class _Pipes:
    """Feeds a child's stdin and reads its stdout and stderr (capped) in one thread."""

    def __init__(self, proc: subprocess.Popen[bytes], stdin: bytes | None, cap: int) -> None:
        self.out, self.err = _Capped(cap), _Capped(cap)
        self._sel = selectors.DefaultSelector()
        assert proc.stdout is not None and proc.stderr is not None
        self._sel.register(proc.stdout, selectors.EVENT_READ, self.out)
        self._sel.register(proc.stderr, selectors.EVENT_READ, self.err)
        self._input = memoryview(stdin or b"")
        if proc.stdin is not None:
            if self._input:
                os.set_blocking(proc.stdin.fileno(), False)
                self._sel.register(proc.stdin, selectors.EVENT_WRITE, None)
            else:
                proc.stdin.close()

    @property
    def open(self) -> bool:
        return bool(self._sel.get_map())

    def pump(self, timeout: float) -> None:
        """Move bytes for at most ``timeout`` seconds; return as soon as some moved."""
        for key, _ in self._sel.select(max(timeout, 0.0)):
            fileobj: IO[bytes] = key.fileobj  # type: ignore[assignment]
            if key.data is None:
                try:
                    written = os.write(key.fd, self._input[:_CHUNK])
                except BlockingIOError:
                    continue
                except OSError:  # the command closed its stdin: drop the rest
                    written = len(self._input)
                self._input = self._input[written:]
                if not self._input:
                    self._close(fileobj)
            else:
                chunk = os.read(key.fd, _CHUNK)
                if chunk:
                    key.data.add(chunk)
                else:
                    self._close(fileobj)

    def _close(self, fileobj: IO[bytes]) -> None:
        self._sel.unregister(fileobj)
        with contextlib.suppress(OSError):
            fileobj.close()

    def close(self) -> None:
        for key in list(self._sel.get_map().values()):
            self._close(key.fileobj)  # type: ignore[arg-type]
        self._sel.close()

    def drain_in_background(self) -> None:
        """Leave the pipes to a thread that discards what comes until they close, so
        background processes holding them are not killed by SIGPIPE."""
        for capped in (self.out, self.err):  # the result has its copy
            capped.cap = 0
            capped.data.clear()

        def drain() -> None:
            with contextlib.suppress(OSError, ValueError):
                while self.open:
                    self.pump(5.0)
            self.close()

        threading.Thread(target=drain, name="rock-local-drain", daemon=True).start()


class _ProcessChannel:
    """A session's bash as a child process; its stdout (stderr merged) goes to ``on_data``."""

    def __init__(
        self,
        proc: subprocess.Popen[bytes],
        on_data: Callable[[bytes | None], None],
        on_close: Callable[[], None],
    ) -> None:
        self._proc = proc
        self._on_close = on_close
        threading.Thread(
            target=self._pump, args=(on_data,), name="rock-local-session", daemon=True
        ).start()

    def _pump(self, on_data: Callable[[bytes | None], None]) -> None:
        stdout = self._proc.stdout
        assert stdout is not None
        try:  # the thread owns stdout: closing it elsewhere while read() blocks is unsafe
            while chunk := os.read(stdout.fileno(), _CHUNK):
                on_data(chunk)
        except OSError:
            pass
        finally:
            stdout.close()
            on_data(None)

    def send(self, data: bytes) -> None:
        assert self._proc.stdin is not None
        view = memoryview(data)
        try:
            while view:
                view = view[os.write(self._proc.stdin.fileno(), view) :]
        except (OSError, ValueError):
            raise SessionError("the session's shell exited; open a new session.") from None

    def close(self) -> None:
        assert self._proc.stdin is not None
        with contextlib.suppress(OSError):
            self._proc.stdin.close()
        if self._proc.returncode is None:
            with contextlib.suppress(OSError):
                os.killpg(self._proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self._proc.wait(5.0)
        self._on_close()


# --- files -------------------------------------------------------------------


def _inside(real: str, root: str) -> bool:
    return real == root or real.startswith(root.rstrip("/") + "/")


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
        self.home = home
        """The directory holding ``meta.json`` and the root; None when the root is the user's."""
        self.snapshots = snapshots
        self._state = "running"  # kept here only when there is no meta.json
        self._lock = threading.Lock()
        self._procs: dict[int, tuple[subprocess.Popen[bytes], str | None]] = {}
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
            return json.loads((self.home / "meta.json").read_text())  # type: ignore[no-any-return]
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

    def interrupt(self) -> int:
        """Kill every command running now and what it started (sessions are left alone);
        return how many were running. Each returns exit code 137, not timed out."""
        with self._lock:
            running = [(pid, exec_id) for pid, (_, exec_id) in self._procs.items() if exec_id]
        for pid, exec_id in running:
            kill_processes([pid], marker=[f"ROCK_EXEC_ID={exec_id}"])
        return len(running)

    # --- paths --------------------------------------------------------------

    def _relative(self, path: str) -> str:
        if "\0" in path:
            raise SandboxError(f"{path!r} holds a NUL byte; pass a plain path.")
        rel = posixpath.normpath(path.lstrip("/") or ".")
        if rel == ".." or rel.startswith("../"):
            raise self._escape(path)
        return rel

    def _escape(self, path: str) -> PathEscape:
        return PathEscape(
            f"{path} resolves outside the sandbox root {self.root}; use a path inside it."
        )

    def _resolve(self, path: str) -> str:
        """The real host path of ``path`` inside the root, symlinks followed and checked."""
        real = os.path.realpath(os.path.join(self.root, self._relative(path)))
        if not _inside(real, str(self.root)):
            raise self._escape(path)
        return real

    def _workdir(self, cwd: str | None) -> str:
        if cwd is None:
            return str(self.root)
        real = self._resolve(cwd)
        if not os.path.isdir(real):
            raise SandboxError(
                f"working directory {cwd} does not exist in sandbox {self.id}; create it first."
            )
        return real

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
        # SIGINT ignored here (a parent started with `&` from a script) would be inherited
        # and could not be trapped, so sessions could not interrupt: reset it in the child.
        # Only then: a preexec_fn costs the fast spawn path and is unsafe with threads.
        ignored = any(signal.getsignal(sig) == signal.SIG_IGN for sig in _RESTORED)
        # Under the lock, so stop() and interrupt() never miss a process being started.
        with self._lock:
            try:
                proc = subprocess.Popen(
                    ["/bin/sh", "-c", _CORE_OFF, "sh", *argv],
                    start_new_session=True,
                    bufsize=0,
                    preexec_fn=_restore_signals if ignored else None,
                    **kwargs,
                )
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
        cwd = self._workdir(request.cwd if request.cwd is not None else self.spec.workdir)
        command = request.command
        argv = ["bash", "-c", command] if isinstance(command, str) else list(command)
        if not argv:
            raise SandboxError("the command is an empty list; pass a string or a non-empty argv.")
        exec_id = secrets.token_hex(8)
        started = time.monotonic()
        deadline = None if request.timeout is None else started + request.timeout
        proc = self._spawn(
            argv,
            exec_id,
            cwd=cwd,
            env=self._env(request.env, ROCK_EXEC_ID=exec_id),
            stdin=subprocess.PIPE if request.stdin is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        pipes = _Pipes(proc, request.stdin, request.max_output_bytes)
        timed_out = False
        try:
            exited_at: float | None = None
            while pipes.open:
                now = time.monotonic()
                if proc.poll() is not None:
                    exited_at = now if exited_at is None else exited_at
                    if now - exited_at >= _STRAGGLER_GRACE_SEC:
                        break
                elif deadline is not None and now >= deadline:
                    timed_out = True
                    break
                pipes.pump(0.25 if deadline is None else min(0.25, deadline - now))
            if not timed_out:
                try:
                    proc.wait(None if deadline is None else max(0.0, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    timed_out = True
            if timed_out:
                kill_processes([proc.pid], marker=[f"ROCK_EXEC_ID={exec_id}"])
                proc.wait()
                grace_end = time.monotonic() + _KILL_GRACE_SEC
                while pipes.open and (left := grace_end - time.monotonic()) > 0:
                    pipes.pump(left)
            duration = time.monotonic() - started
            out, err = pipes.out, pipes.err
            result = ExecResult(
                exit_code=137 if timed_out else _exit_code(proc.wait()),
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
        return result

    # --- sessions -----------------------------------------------------------

    def session(self, *, max_output_bytes: int = DEFAULT_MAX_OUTPUT) -> ShellSession:
        """A persistent bash started in the spec's workdir (else the root); closing it
        kills the shell and everything it started."""

        def open_channel(on_data: Callable[[bytes | None], None]) -> Channel:
            self._wake()
            proc = self._spawn(
                ["bash", "--noprofile", "--norc"],
                cwd=self._workdir(self.spec.workdir),
                env=self._env({}),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
            )
            return _ProcessChannel(proc, on_data, lambda: self._untrack(proc))

        return ShellSession(
            open_channel,
            lambda pid, keep: kill_processes([pid], keep_roots=keep),
            max_output_bytes=max_output_bytes,
        )

    # --- files --------------------------------------------------------------

    def read_file(self, path: str) -> bytes:
        self._check()
        real = self._resolve(path)
        try:  # O_NONBLOCK: a fifo must not hang the open
            fd = os.open(real, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except FileNotFoundError:
            raise SandboxError(f"{path} does not exist in sandbox {self.id}.") from None
        except OSError as exc:
            raise SandboxError(
                f"cannot read {path} in sandbox {self.id}: {exc.strerror}."
            ) from None
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise SandboxError(
                    f"{path} in sandbox {self.id} is not a regular file; use download for trees."
                )
            os.set_blocking(fd, True)
            chunks = []
            while chunk := os.read(fd, 1 << 20):
                chunks.append(chunk)
            return b"".join(chunks)
        finally:
            os.close(fd)

    def write_file(self, path: str, data: bytes, mode: int = 0o644) -> None:
        """Write ``data`` to ``path`` with ``mode``, making parent directories; a final
        symlink is followed only when it stays inside the root."""
        self._check()
        real = self._resolve(path)
        try:
            os.makedirs(os.path.dirname(real), exist_ok=True)
            fd = os.open(
                real, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600
            )
        except IsADirectoryError:
            raise SandboxError(
                f"{path} in sandbox {self.id} is a directory; write to a file path."
            ) from None
        except OSError as exc:
            raise SandboxError(
                f"cannot write {path} in sandbox {self.id}: {exc.strerror}."
            ) from None
        with open(fd, "wb", closefd=True) as fh:
            fh.write(data)
            os.fchmod(fh.fileno(), mode)

    def put_archive(self, directory: str, data: bytes) -> None:
        """Unpack a tar archive into ``directory`` (made if missing), keeping modes but not
        setuid/setgid bits or owners. A member whose path or link target leads outside the
        root, or with an absolute name, is refused with :class:`PathEscape`; device files
        are refused too."""
        self._check()
        dest = self._resolve(directory)
        try:
            os.makedirs(dest, exist_ok=True)
            with tarfile.open(fileobj=io.BytesIO(data)) as tar:
                tar.extractall(dest, filter=self._member_filter)
        except SandboxError:
            raise
        except tarfile.TarError as exc:
            raise SandboxError(
                f"the archive for {directory} is not a valid tar stream ({exc}); send a tar archive."
            ) from None
        except OSError as exc:
            raise SandboxError(
                f"cannot write into {directory} in sandbox {self.id}: {exc.strerror or exc}."
            ) from None

    def _member_filter(self, member: tarfile.TarInfo, dest: str) -> tarfile.TarInfo:
        """Called by tarfile just before each member is extracted, so the checks see the
        links that earlier members made."""
        name, root = member.name, str(self.root)
        if name.startswith("/"):
            raise PathEscape(
                f"archive member {name} has an absolute name; use names relative to the target directory."
            )
        rel = posixpath.normpath(name)
        target = os.path.join(dest, rel)
        if rel == ".." or rel.startswith("../") or not _inside(os.path.realpath(target), root):
            raise PathEscape(
                f"archive member {name} resolves outside the sandbox root {root}; use paths inside it."
            )
        if member.issym() or member.islnk():
            base = os.path.dirname(target) if member.issym() else dest
            link = os.path.realpath(os.path.join(base, member.linkname))
            if not _inside(link, root):
                raise PathEscape(
                    f"archive member {name} links to {member.linkname}, outside the sandbox root {root}; use links that stay inside it."
                )
        if member.ischr() or member.isblk():
            raise SandboxError(
                f"archive member {name} is a device file; the local backend does not make devices."
            )
        mode = None if member.mode is None else member.mode & 0o1777
        return member.replace(mode=mode, uid=None, gid=None, uname=None, gname=None, deep=False)

    def get_archive(self, path: str) -> bytes:
        """A tar of ``path`` (a symlink to it followed) whose top member is its base name."""
        self._check()
        real = self._resolve(path)
        if not os.path.exists(real):
            raise SandboxError(f"{path} does not exist in sandbox {self.id}.")
        rel = self._relative(path)
        name = posixpath.basename(rel) if rel != "." else self.root.name or "root"
        buf = io.BytesIO()
        try:
            with tarfile.open(fileobj=buf, mode="w") as tar:
                tar.add(real, arcname=name)
        except OSError as exc:
            raise SandboxError(f"cannot read {path} in sandbox {self.id}: {exc}.") from None
        return buf.getvalue()

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


def _exit_code(returncode: int) -> int:
    """A signal death as a shell reports it (SIGKILL: 137)."""
    return 128 - returncode if returncode < 0 else returncode


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
                os.makedirs(sandbox._resolve(spec.workdir), exist_ok=True)
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
