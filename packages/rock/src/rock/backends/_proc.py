"""Host processes for the local backend: starting them, feeding and reading their pipes,
and killing whole process trees (found through ``/proc``), escaped ones included.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Collection, Iterable
from typing import IO, Any

from ale.capped import CappedOutput
from rock.backends._shell import SessionError

# Every command starts through this: no core files, then the command itself (same pid).
_CORE_OFF = 'ulimit -c 0 2>/dev/null; exec "$@"'
_CHUNK = 1 << 16
_RESTORED = (signal.SIGINT, signal.SIGQUIT)
_STRAGGLER_GRACE_SEC = 0.5
"""After a command exits, how long to wait for pipes its background children hold open."""
_KILL_GRACE_SEC = 1.0
"""After a command is killed, how long to keep reading what it left in its pipes."""


def _restore_signals() -> None:
    for sig in _RESTORED:
        signal.signal(sig, signal.SIG_DFL)


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
        victims = _victims(_process_table(), roots, keep_roots, wanted)
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


class Pipes:
    """Feeds a child's stdin and reads its stdout and stderr (capped) in one thread."""

    def __init__(self, proc: subprocess.Popen[bytes], stdin: bytes | None, cap: int) -> None:
        self.out, self.err = CappedOutput(cap), CappedOutput(cap)
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


class ProcessChannel:
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


def read_until_exit(
    proc: subprocess.Popen[bytes],
    pipes: Pipes,
    deadline: float | None,
    *,
    kill: Callable[[], None],
) -> bool:
    """Read ``pipes`` until ``proc`` exits and they close, or until ``deadline`` (a
    ``time.monotonic()`` value) passes; return whether it timed out.

    When the command exits but background children still hold its pipes open, return
    after a short grace. At the deadline call ``kill``, reap ``proc`` and keep reading
    what it left in its pipes for a short grace.
    """
    timed_out = False
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
        kill()
        proc.wait()
        grace_end = time.monotonic() + _KILL_GRACE_SEC
        while pipes.open and (left := grace_end - time.monotonic()) > 0:
            pipes.pump(left)
    return timed_out


# --- starting ----------------------------------------------------------------


def spawn(argv: list[str], **kwargs: Any) -> subprocess.Popen[bytes]:
    """Start ``argv`` unbuffered in a new session, through ``sh`` with core files off."""
    # SIGINT ignored here (a parent started with `&` from a script) would be inherited
    # and could not be trapped, so sessions could not interrupt: reset it in the child.
    # Only then: a preexec_fn costs the fast spawn path and is unsafe with threads.
    ignored = any(signal.getsignal(sig) == signal.SIG_IGN for sig in _RESTORED)
    return subprocess.Popen(
        ["/bin/sh", "-c", _CORE_OFF, "sh", *argv],
        start_new_session=True,
        bufsize=0,
        preexec_fn=_restore_signals if ignored else None,
        **kwargs,
    )


def shell_exit_code(returncode: int) -> int:
    """A signal death as a shell reports it (SIGKILL: 137)."""
    return 128 - returncode if returncode < 0 else returncode


def _victims(
    table: dict[int, tuple[int, int]],
    roots: Collection[int],
    keep_roots: bool,
    wanted: frozenset[bytes],
) -> set[int]:
    """Who one pass of :func:`kill_processes` stops and kills in ``table`` (pid -> (ppid,
    pgid)): the roots' trees, their groups' and the marked processes' (theirs too), never
    this process or its ancestors."""
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
    return victims
