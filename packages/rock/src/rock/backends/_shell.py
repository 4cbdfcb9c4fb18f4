"""Shell pieces every backend shares: killing a process tree, and persistent sessions.

Both need nothing in the sandbox but bash and /proc, so they work in any image.
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

# Stop and kill the processes of one command, with builtins only (so it still runs when a
# fork bomb holds every pid the sandbox may use): every process whose environment carries
# the command's mark ROCK_EXEC_ID=<id> (which it keeps when it leaves the command's process
# group or session, double-forks or closes its stdio), every descendant of a root pid, and
# every process still writing to the output files named (the command's pipes). Each round
# stops what it finds that is not stopped yet; stopped processes cannot fork, so the rounds
# end (with a fork bomb too: it cannot outrun them), and then all of them are killed.
# Processes found on the output get a moment to leave it first (`cmd > log &` run last, on
# a busy machine): while one of them is still running, up to 3 s.
# Arguments: the mark ("-" for none), the root pid (0 for none), 1 to keep the root itself
# alive (a session's shell), then optionally the command's stdout and stderr as paths.
REAP_FUNCTION = r"""
rock_reap() {
  local mark=$1 root=$2 keep=${3:-0} out=${4:-} err=${5:-} round f p s e hit busy settle=0
  local me=$BASHPID
  local -a fresh todo ev
  local -A kids seen
  [ "$keep" = 1 ] && [ "$root" -gt 0 ] && kill -INT "$root" 2>/dev/null
  for ((round = 0; round < 200; round++)); do
    kids=(); fresh=(); busy=0
    for f in /proc/[0-9]*; do
      p=${f#/proc/}
      [ "$p" = "$me" ] && continue
      if [ "$root" -gt 0 ] && read -r s 2>/dev/null <"$f/stat"; then
        s=${s##*) }; s=${s#* }; kids[${s%% *}]+=" $p"
      fi
      [ -n "${seen[$p]}" ] && continue
      hit=0
      if [ -n "$out" ] && { [ "$f/fd/1" -ef "$out" ] || [ "$f/fd/2" -ef "$err" ]; }; then
        hit=1
        read -r s 2>/dev/null <"$f/stat" && s=${s##*) } && [ "${s%% *}" = R ] && busy=1
      elif [ "$mark" != - ]; then
        ev=(); mapfile -d '' -t ev 2>/dev/null <"$f/environ"
        for e in "${ev[@]}"; do
          [ "$e" = "ROCK_EXEC_ID=$mark" ] && { hit=1; break; }
        done
      fi
      ((hit)) && fresh+=("$p")
    done
    if [ "$root" -gt 0 ] && [ -d "/proc/$root" ]; then
      todo=("$root")
      while ((${#todo[@]})); do
        p=${todo[0]}; todo=("${todo[@]:1}")
        { [ "$keep" = 1 ] && [ "$p" = "$root" ]; } || [ -n "${seen[$p]}" ] || fresh+=("$p")
        todo+=(${kids[$p]})
      done
    fi
    ((${#fresh[@]})) || break
    if [ -n "$out" ] && ((${#seen[@]} == 0 && settle < 30 && (settle == 0 || busy))); then
      ((settle++))  # a job put in the background just now may still be leaving the output
      read -r -t 0.1 _ 0<>/dev/ptmx 2>/dev/null  # (a pause that needs no new process)
      continue  # so wait while one of them is still running, up to 3 s
    fi
    kill -STOP "${fresh[@]}" 2>/dev/null
    for p in "${fresh[@]}"; do seen[$p]=1; done
  done
  ((${#seen[@]})) && kill -KILL "${!seen[@]}" 2>/dev/null
  [ "$keep" = 1 ] || [ "$root" -le 0 ] || kill -KILL -- "-$root" 2>/dev/null
  return 0
}
"""
KILL_TREE = REAP_FUNCTION + 'rock_reap "${3:--}" "$1" "${2:-0}"\n'
"""A bash script: ``kill-tree ROOT_PID KEEP_ROOT [MARK]`` (see :data:`REAP_FUNCTION`)."""


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
