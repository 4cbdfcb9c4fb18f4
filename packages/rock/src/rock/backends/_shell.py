"""Persistent shell sessions, which every backend shares: cwd, environment and shell state
survive between commands. How a session's command is killed is the backend's (see
`rock.backends._reap` for the docker one).
"""

from __future__ import annotations

import queue
import secrets
import threading
import time
from collections.abc import Callable
from typing import Protocol

from rock.errors import RockError
from rock.models import SessionResult


class Channel(Protocol):
    """A bidirectional byte stream to a shell; received bytes go to ``on_data``."""

    def send(self, data: bytes) -> None: ...
    def close(self) -> None: ...


class SessionError(RockError, RuntimeError):
    """A session's shell died or would not start."""


class ShellSession:
    """A persistent bash: cwd, environment and shell state survive between commands.

    Each command is read by the shell with the builtin ``read`` from a here-document
    (so any text is safe), evaluated with stdin from /dev/null, and followed by a
    marker line carrying its exit status. stderr is merged into stdout.
    """

    def __init__(
        self,
        open_channel: Callable[[Callable[[bytes | None], None]], Channel],
        kill_tree: Callable[[int, bool, str | None], None],
        *,
        max_output_bytes: int = 1 << 20,
        start_timeout: float = 30.0,
    ) -> None:
        self._open_channel = open_channel
        self._kill_tree = kill_tree
        self.max_output_bytes = max_output_bytes
        self._start_timeout = start_timeout
        self._lock = threading.Lock()
        self._mark: str | None = None
        """The ROCK_EXEC_ID of the command running now: what it started carries it."""
        self._chunks: queue.Queue[bytes | None] = queue.Queue()
        self._channel: Channel | None = None
        self.shell_pid = 0
        self._start()

    def _start(self) -> None:
        self._chunks = queue.Queue()
        chunks = self._chunks
        self._channel = self._open_channel(chunks.put)
        token = secrets.token_hex(8)
        self._channel.send(
            # SIGINT interrupts a command (see run); between commands it does nothing, so
            # one that lands late (the command was already killed) cannot end the shell
            f"exec 2>&1; unset PROMPT_COMMAND; PS1=''; PS2=''; trap : INT; "
            f"echo __ROCK_READY_{token} $$\n".encode()
        )
        out = self._read_until(
            f"__ROCK_READY_{token} ".encode(), time.monotonic() + self._start_timeout
        )
        if out is None:
            raise SessionError(
                "the session's shell did not start; check that the sandbox has bash."
            )
        _, rest = out
        self.shell_pid = int(rest.split(b"\n", 1)[0])

    def _read_until(
        self, marker: bytes, deadline: float, buf: bytearray | None = None
    ) -> tuple[bytes, bytes] | None:
        """Read until ``marker`` followed by a newline; return (before, after-marker) or None at the deadline."""
        buf = buf if buf is not None else bytearray()
        while True:
            index = buf.find(marker)
            if index >= 0 and b"\n" in buf[index + len(marker) :]:
                return bytes(buf[:index]), bytes(buf[index + len(marker) :])
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            try:
                chunk = self._chunks.get(timeout=min(remaining, 0.5))
            except queue.Empty:
                continue
            if chunk is None:
                raise SessionError("the session's shell exited; open a new session.")
            buf.extend(chunk)

    def run(self, command: str, timeout: float | None = 60.0) -> SessionResult:
        """Run ``command`` in the session; interrupt it (not the session) at ``timeout``."""
        with self._lock:
            if self._channel is None:
                raise SessionError("the session is closed; open a new session.")
            token = secrets.token_hex(8)
            marker = f"__ROCK_DONE_{token} ".encode()
            delim = f"__ROCK_CMD_{token}"
            # The command runs in a function of the session's shell (so cd, exports and
            # definitions persist); SIGINT makes the function return, aborting the rest
            # of the command line as Ctrl-C would.
            script = (
                f"IFS= read -r -d '' __rock_cmd <<'{delim}'\n{command}\n{delim}\n"
                f"__rock_run() {{ local -x ROCK_EXEC_ID={token}; trap 'trap : INT; return 130' INT; "
                'eval "$__rock_cmd" </dev/null; }\n'
                f'__rock_run; __rock_rc=$?; trap : INT; printf "\\n__ROCK_DONE_{token} %d\\n" $__rock_rc\n'
            )
            started = time.monotonic()
            self._mark = token
            self._channel.send(script.encode())
            buf = bytearray()
            deadline = started + timeout if timeout is not None else float("inf")
            result = self._read_until(marker, deadline, buf)
            timed_out = result is None
            restarted = False
            if result is None:
                self._kill_tree(self.shell_pid, True, token)
                result = self._read_until(marker, time.monotonic() + 5.0, buf)
                if result is None:  # a builtin loop in the shell itself: only a restart ends it
                    self._restart()
                    restarted = True
            self._mark = None
            duration = time.monotonic() - started
            if result is None:
                output, code = bytes(buf), 137
            else:
                output, rest = result
                code = int(rest.split(b"\n", 1)[0])
                if output.endswith(b"\n"):
                    output = output[:-1]
            if timed_out:
                code = 137 if code == 0 else code
            return SessionResult(
                exit_code=code,
                output=output[: self.max_output_bytes],
                output_truncated=len(output) > self.max_output_bytes,
                duration_sec=duration,
                timed_out=timed_out,
                session_restarted=restarted,
            )

    def interrupt(self) -> None:
        """Stop the running command and what it started, as Ctrl-C would: the shell, its
        cwd and variables stay (callable while :meth:`run` waits, from another thread)."""
        if self._channel is not None and self.shell_pid:
            self._kill_tree(self.shell_pid, True, self._mark)

    def _restart(self) -> None:
        self._kill_tree(self.shell_pid, False, self._mark)
        if self._channel is not None:
            self._channel.close()
        self._start()

    def close(self) -> None:
        with self._lock:
            if self._channel is None:
                return
            try:
                self._kill_tree(self.shell_pid, False, self._mark)
            finally:
                self._channel.close()
                self._channel = None

    def __enter__(self) -> ShellSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
