"""Talking to a command in a container over the engine's socket.

An exec's or an attach's output comes multiplexed on one socket (each frame an 8-byte
header: the stream, three zeros, the size); these helpers read it without losing what the
HTTP parser buffered, wait for a line, keep a command's output (the wrapper's first line
read off it), and carry a session's bash over an exec.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
import time
from collections.abc import Callable
from typing import cast

from ale.capped import CappedOutput
from rock.models import ExecResult

_PID_PREFIX = b"__ROCK_PID "
"""How the wrapper (`rock.backends._reap`) starts its first line on stderr."""


def raw_socket(obj: object) -> socket.socket:
    """The socket under an exec's or an attach's stream (the Docker client wraps it)."""
    return cast(socket.socket, getattr(obj, "_sock", obj))


def stream_socket(obj: object) -> socket.socket:
    """The socket of an exec's or an attach's stream, made to wait as long as the command
    runs: it comes with the engine client's timeout (for API calls, 30 s), under which a
    command silent that long looked ended (exit -1, its output lost) while it ran on."""
    sock = raw_socket(obj)
    sock.settimeout(None)
    return sock


def frame_reader(raw: object) -> Callable[[int], bytes]:
    """Read n bytes (fewer only at EOF) of an exec's stream.

    The HTTP parser may already have buffered the first frames together with the
    response headers (a fast command's whole output, under load), so read through
    its buffered reader, not the bare socket, or those bytes are lost.
    """
    buffered = getattr(
        getattr(getattr(getattr(raw, "_response", None), "raw", None), "_fp", None), "fp", None
    )
    if buffered is not None and hasattr(buffered, "read"):

        def read(n: int) -> bytes:
            return buffered.read(n) or b""

        return read
    sock = raw_socket(raw)

    def read_sock(n: int) -> bytes:
        out = bytearray()
        while len(out) < n:
            chunk = sock.recv(n - len(out))
            if not chunk:
                break
            out.extend(chunk)
        return bytes(out)

    return read_sock


def read_frames(read: Callable[[int], bytes], on_frame: Callable[[int, bytes], None]) -> None:
    """Read docker's multiplexed stream (8-byte header: stream, 0, 0, 0, size) until EOF."""
    while True:
        header = read(8)
        if len(header) < 8:
            return
        stream, size = header[0], struct.unpack(">I", header[4:])[0]
        payload = read(size)
        if payload:
            on_frame(stream, payload)


def await_line(raw: object, wanted: bytes, wait: float) -> bool:
    """Read an attached container's multiplexed output until a line holding ``wanted``
    comes (True) or ``wait`` seconds pass (False)."""
    sock, read = raw_socket(raw), frame_reader(raw)
    deadline = time.monotonic() + wait
    seen = bytearray()
    while (left := deadline - time.monotonic()) > 0:
        sock.settimeout(left)
        try:
            header = read(8)
            if len(header) < 8:
                return False
            seen += read(struct.unpack(">I", header[4:])[0])
        except OSError:  # a timeout is one
            return False
        if wanted in seen:
            return True
        del seen[: max(0, len(seen) - len(wanted))]  # keep only what a split line needs
    return False


class ExecChannel:
    """A session's bash over a docker exec socket."""

    def __init__(self, raw: object, on_data: Callable[[bytes | None], None]) -> None:
        self._raw = raw
        self._sock = stream_socket(raw)
        self._read = frame_reader(raw)
        self._thread = threading.Thread(target=self._pump, args=(on_data,), daemon=True)
        self._thread.start()

    def _pump(self, on_data: Callable[[bytes | None], None]) -> None:
        try:
            read_frames(self._read, lambda _stream, data: on_data(data))
        except OSError:
            pass
        finally:
            on_data(None)

    def send(self, data: bytes) -> None:
        self._sock.sendall(data)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)
        self._sock.close()


class ExecOutput:
    """A command's output as it comes off the exec's stream: the wrapper's first line on
    stderr (``__ROCK_PID <pid> <shell>``) is read off and told to ``on_pid``, the rest is
    kept up to the cap and passed on to ``on_output``."""

    def __init__(
        self,
        cap: int,
        on_output: Callable[[int, bytes], None] | None,
        on_pid: Callable[[int, bool | None], None],
    ) -> None:
        self.out, self.err = CappedOutput(cap), CappedOutput(cap)
        self._on_output = on_output
        self._on_pid = on_pid
        self._pid_seen = False
        self._err_head = bytearray()

    def on_frame(self, stream: int, data: bytes) -> None:
        if stream == 2 and not self._pid_seen:
            self._err_head.extend(data)
            if b"\n" not in self._err_head:
                return
            line, rest = bytes(self._err_head).split(b"\n", 1)
            words = line[len(_PID_PREFIX) :].split() if line.startswith(_PID_PREFIX) else []
            self._pid_seen = True
            self._on_pid(int(words[0]) if words else -1, words[1:] == [b"bash"] if words else None)
            if rest:
                self._add(2, rest)
            return
        self._add(2 if stream == 2 else 1, data)

    def _add(self, stream: int, data: bytes) -> None:
        (self.err if stream == 2 else self.out).add(data)
        if self._on_output is not None:
            self._on_output(stream, data)

    def result(self, duration: float, timed_out: bool) -> ExecResult:
        """The command's result as far as its output tells (its exit status comes after)."""
        out, err = self.out, self.err
        return ExecResult(
            exit_code=0,
            stdout=bytes(out.data),
            stderr=bytes(err.data),
            stdout_truncated=out.total > len(out.data),
            stderr_truncated=err.total > len(err.data),
            stdout_total=out.total,
            stderr_total=err.total,
            duration_sec=duration,
            timed_out=timed_out,
        )
