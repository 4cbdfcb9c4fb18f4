"""What a client does in a running sandbox: commands (one-off or in a persistent session),
interrupts, its network, files and trees in and out, and the log of the commands run.

A mixin of `SandboxManager` (it uses the manager's lock, store, metrics and helpers), kept in
its own file so that each file has one subject.
"""

from __future__ import annotations

import builtins
import contextlib
import secrets
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, TypeVar

from rock.backends._shell import SessionError
from rock.backends.base import Sandbox, SandboxNotFound, Session
from rock.models import (
    ExecLog,
    ExecRequest,
    ExecResult,
    SessionInfo,
    SessionResult,
    SessionRunRequest,
)
from rock.store import SandboxRecord, StateStore

T = TypeVar("T")


class VerbsMixin:
    """Exec (and the log of what ran), sessions, interrupts, network and files of a sandbox in
    use."""

    _lock: threading.RLock
    _sessions: dict[str, tuple[str, Session]]
    store: StateStore
    metrics: Any

    if TYPE_CHECKING:

        def _box(self, sandbox_id: str, *, allow_stopped: bool = False) -> Sandbox: ...
        def _tracked(self) -> contextlib.AbstractContextManager[None]: ...
        def _after_command(self, exit_code: int, timed_out: bool) -> None: ...
        def _use(self, sandbox_id: str, action: Callable[[], T]) -> T: ...
        def _record(self, sandbox_id: str) -> SandboxRecord: ...

    def logs(self, sandbox_id: str, limit: int = 100) -> builtins.list[ExecLog]:
        self._record(sandbox_id)
        return [
            ExecLog.model_validate(r.model_dump(exclude={"id", "sandbox_id"}))
            for r in self.store.execs(sandbox_id, limit)
        ]

    def exec(
        self,
        sandbox_id: str,
        request: ExecRequest,
        on_output: Callable[[int, bytes], None] | None = None,
    ) -> ExecResult:
        """Run one command; with ``on_output`` its output is also handed over as it comes
        (``stream``: 1 stdout, 2 stderr)."""
        box = self._box(sandbox_id)
        started_at = datetime.now(UTC)
        with self._tracked():
            result = (
                box.run(request) if on_output is None else box.run_streaming(request, on_output)
            )
        self.store.record_exec(
            sandbox_id,
            command=request.command
            if isinstance(request.command, str)
            else " ".join(request.command),
            exit_code=result.exit_code,
            timed_out=result.timed_out,
            started_at=started_at,
            duration_sec=result.duration_sec,
            stdout=result.stdout,
            stderr=result.stderr,
        )
        self._after_command(result.exit_code, result.timed_out)
        if self.metrics is not None:
            self.metrics.exec_seconds.labels(kind="exec").observe(result.duration_sec)
        return result

    def open_session(self, sandbox_id: str) -> SessionInfo:
        box = self._box(sandbox_id)
        session = box.session()
        session_id = "ss-" + secrets.token_hex(6)
        with self._lock:
            self._sessions[session_id] = (sandbox_id, session)
        self.store.touch(sandbox_id)
        return SessionInfo(id=session_id, sandbox_id=sandbox_id)

    def run_in_session(
        self, sandbox_id: str, session_id: str, request: SessionRunRequest
    ) -> SessionResult:
        session = self._session(sandbox_id, session_id)
        started_at = datetime.now(UTC)
        try:
            with self._tracked():
                result = session.run(request.command, timeout=request.timeout)
        except SessionError:
            with self._lock:
                self._sessions.pop(session_id, None)
            raise
        self.store.record_exec(
            sandbox_id,
            command=request.command,
            exit_code=result.exit_code,
            timed_out=result.timed_out,
            started_at=started_at,
            duration_sec=result.duration_sec,
            stdout=result.output,
            stderr=b"",
            session_id=session_id,
        )
        self._after_command(result.exit_code, result.timed_out)
        if self.metrics is not None:
            self.metrics.exec_seconds.labels(kind="session").observe(result.duration_sec)
        return result

    def set_network(self, sandbox_id: str, on: bool) -> None:
        """Open or close a running sandbox's network (one made with a network only)."""
        box = self._box(sandbox_id)
        self._use(sandbox_id, lambda: box.set_network(on))

    def interrupt(self, sandbox_id: str, tag: str | None = None) -> int:
        """Stop the commands running in the sandbox (the one run with ``tag``); how many."""
        return self._box(sandbox_id).interrupt(tag)

    def interrupt_session(self, sandbox_id: str, session_id: str) -> None:
        """Stop the command running in the session; the session stays."""
        self._session(sandbox_id, session_id).interrupt()

    def close_session(self, sandbox_id: str, session_id: str) -> None:
        session = self._session(sandbox_id, session_id)
        with self._lock:
            self._sessions.pop(session_id, None)
        session.close()

    def read_file(self, sandbox_id: str, path: str) -> bytes:
        box = self._box(sandbox_id, allow_stopped=True)
        return self._use(sandbox_id, lambda: box.read_file(path))

    def write_file(self, sandbox_id: str, path: str, data: bytes, mode: int) -> None:
        box = self._box(sandbox_id)
        self._use(sandbox_id, lambda: box.write_file(path, data, mode))

    def get_archive(self, sandbox_id: str, path: str) -> bytes:
        box = self._box(sandbox_id, allow_stopped=True)
        return self._use(sandbox_id, lambda: box.get_archive(path))

    def put_archive(self, sandbox_id: str, directory: str, data: bytes) -> None:
        box = self._box(sandbox_id)
        self._use(sandbox_id, lambda: box.put_archive(directory, data))

    def _session(self, sandbox_id: str, session_id: str) -> Session:
        with self._lock:
            entry = self._sessions.get(session_id)
        if entry is None or entry[0] != sandbox_id:
            self._box(sandbox_id)
            raise SandboxNotFound(
                f"no session {session_id} in sandbox {sandbox_id}; open one with POST "
                f"/v1/sandboxes/{sandbox_id}/sessions."
            )
        return entry[1]
