"""One long-lived process in a docker sandbox that starts its commands (as E2B's envd).

A ``docker exec`` costs the machine about 54 CPU-ms (runc, dockerd, containerd, the shim:
`benchmarks/rock_exec_cpu.py`), about 40 times what the command ``/bin/true`` itself costs,
and the demo runs some 12,500 of them. So a docker sandbox starts one agent by exec, the
first time it runs a command, and sends it each command over that exec's stdin; the agent
starts the command exactly as the exec would have (under the same wrapper, with the same
environment and mark, in a new session, with stdin from the request or /dev/null) and sends
back its output and exit status. Everything that ends a command (the wrapper's reap of what
it left on its output, a timeout's or an interrupt's reaper, the keeper's freeze) works on
the command's processes as before: the agent is only how they start.

The agent is python3 from the image (any 3.6 or later). An image without it, a gVisor
sandbox, a command run as another user or with more than 1 MiB of input, and a command the
agent could not start (no such directory, no pid free) go through ``docker exec`` as before. The agent's protocol: a request is a 4-byte
length and a JSON object (``id``, ``argv``, ``env``, ``cwd``, ``stdin`` in base64 or null);
each answer is a 9-byte header (kind, command id, size) and its payload, kind 1 and 2 the
command's stdout and stderr, 3 its exit status (128 + the signal when killed), 4 a start
that failed (the reason), 0 the agent ready. When its stdin closes (the daemon went away),
the agent kills the commands it started and exits.
"""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import socket
import struct
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from rock.backends._docker_io import frame_reader, read_frames, stream_socket

log = logging.getLogger(__name__)

AGENT_NAME = "rock-exec-agent"
"""The agent's first word in its command line (process lists, and `pkill -f` patterns)."""

AGENT_SOURCE = (
    f"NAME = {AGENT_NAME.encode()!r}\n"
    + r"""
import base64, json, os, signal, struct, subprocess, sys, threading
try:
    import ctypes
    ctypes.CDLL(None).prctl(15, NAME, 0, 0, 0)  # (PR_SET_NAME: what ps and acct show)
except Exception:
    pass
out = sys.stdout.buffer
inp = sys.stdin.buffer
lock = threading.Lock()
procs = {}


def send(kind, cid, data=b""):
    with lock:
        out.write(struct.pack(">BII", kind, cid, len(data)) + data)
        out.flush()


def pump(cid, kind, pipe):
    fd = pipe.fileno()
    while True:
        try:
            chunk = os.read(fd, 65536)
        except OSError:
            break
        if not chunk:
            break
        send(kind, cid, chunk)
    pipe.close()


def feed(pipe, data):
    try:
        pipe.write(data)
    except OSError:
        pass
    try:
        pipe.close()
    except OSError:
        pass


def run(cid, req):
    env = dict(os.environ)
    env.update(req["env"])
    stdin = req.get("stdin")
    try:
        proc = subprocess.Popen(
            req["argv"], env=env, cwd=req.get("cwd") or None,
            stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            start_new_session=True, close_fds=True,
        )
    except Exception as exc:
        send(4, cid, str(exc).encode("utf-8", "replace"))
        return
    procs[cid] = proc
    threads = [
        threading.Thread(target=pump, args=(cid, 1, proc.stdout)),
        threading.Thread(target=pump, args=(cid, 2, proc.stderr)),
    ]
    if stdin is not None:
        threads.append(threading.Thread(target=feed, args=(proc.stdin, base64.b64decode(stdin))))
    for t in threads:
        t.daemon = True
        t.start()
    code = proc.wait()
    for t in threads:
        t.join()
    procs.pop(cid, None)
    send(3, cid, str(128 - code if code < 0 else code).encode())


def exact(n):
    buf = b""
    while len(buf) < n:
        chunk = inp.read(n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return buf


send(0, 0, b"ready")
while True:
    head = exact(4)
    body = exact(struct.unpack(">I", head)[0]) if head else None
    if body is None:
        break
    req = json.loads(body.decode("utf-8"))
    t = threading.Thread(target=run, args=(req["id"], req))
    t.daemon = True
    t.start()
for proc in list(procs.values()):
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except OSError:
        pass
os._exit(0)
"""
)

AGENT_ARGV = [
    "sh",
    "-c",
    "command -v python3 >/dev/null 2>&1 || exit 97; "
    f"exec python3 -c '# {AGENT_NAME}\nimport os; exec(os.environ.pop(\"ROCK_AGENT\"))'",
]
"""How the agent starts: its source comes in the environment (and leaves it at once)."""

READY_WAIT = 20.0
"""Seconds a starting agent may take to say it is ready (python's start on a busy machine)."""

_STDOUT, _STDERR, _EXIT, _REFUSED, _READY = 1, 2, 3, 4, 0
_HEADER = struct.Struct(">BII")


class AgentRefused(Exception):
    """The agent could not start the command (or is gone): run it by exec instead.
    ``lasting``: the agent cannot run in this sandbox at all (no python3 in the image)."""

    def __init__(self, message: str, *, lasting: bool = False) -> None:
        super().__init__(message)
        self.lasting = lasting


@dataclass
class AgentCommand:
    """A command the agent runs: its output goes to ``on_frame`` as it comes; ``done`` is
    set when it ended (``code`` its status) or the agent was lost (``code`` None)."""

    on_frame: Callable[[int, bytes], None] | None
    done: threading.Event = field(default_factory=threading.Event)
    code: int | None = None
    refused: str | None = None

    def detach(self) -> None:
        """Take no more of its output (it was given up on)."""
        self.on_frame = None


class ExecAgent:
    """The daemon's side of one sandbox's agent, over the exec that runs it.

    ``open_exec`` starts the agent's exec and returns its stream (stdin attached)."""

    def __init__(self, open_exec: Callable[[], object]) -> None:
        self._raw = open_exec()
        self._sock = stream_socket(self._raw)
        self._lock = threading.Lock()
        self._send_lock = threading.Lock()
        self._commands: dict[int, AgentCommand] = {}
        self._next_id = 1
        self._ready = threading.Event()
        self.alive = True
        self._buffer = bytearray()
        self._errors = bytearray()
        self._reader = threading.Thread(
            target=self._read, args=(frame_reader(self._raw),), name="rock-exec-agent", daemon=True
        )
        self._reader.start()
        if not self._ready.wait(READY_WAIT) or not self.alive:
            ended = not self.alive  # (rather than slow: a busy machine's python may be)
            self.close()
            said = bytes(self._errors[-300:]).decode(errors="replace").strip()
            raise AgentRefused(
                f"the sandbox's exec agent did not start ({said or 'no word'})", lasting=ended
            )

    def run(
        self,
        argv: list[str],
        env: dict[str, str],
        cwd: str | None,
        stdin: bytes | None,
        on_frame: Callable[[int, bytes], None],
    ) -> AgentCommand:
        """Send one command; raises AgentRefused when the agent is gone."""
        command = AgentCommand(on_frame)
        with self._lock:
            if not self.alive:
                raise AgentRefused("the sandbox's exec agent is gone")
            cid = self._next_id
            self._next_id += 1
            self._commands[cid] = command
        body = json.dumps(
            {
                "id": cid,
                "argv": argv,
                "env": env,
                "cwd": cwd,
                "stdin": None if stdin is None else base64.b64encode(stdin).decode(),
            }
        ).encode()
        try:
            with self._send_lock:
                self._sock.sendall(struct.pack(">I", len(body)) + body)
        except OSError:
            with self._lock:
                self._commands.pop(cid, None)
            self._lost()
            raise AgentRefused("the sandbox's exec agent is gone") from None
        return command

    def _read(self, read: Callable[[int], bytes]) -> None:
        try:
            with contextlib.suppress(OSError):
                read_frames(read, self._on_frame)
        finally:
            self._lost()

    def _on_frame(self, stream: int, data: bytes) -> None:
        if stream == 2:  # the agent's own complaints (python's traceback when it broke)
            self._errors += data
            del self._errors[:-4096]
            return
        buffer = self._buffer
        buffer += data
        while len(buffer) >= _HEADER.size:
            kind, cid, size = _HEADER.unpack_from(buffer)
            if len(buffer) < _HEADER.size + size:
                return
            payload = bytes(buffer[_HEADER.size : _HEADER.size + size])
            del buffer[: _HEADER.size + size]
            self._dispatch(kind, cid, payload)

    def _dispatch(self, kind: int, cid: int, payload: bytes) -> None:
        if kind == _READY:
            self._ready.set()
            return
        with self._lock:
            command = self._commands.get(cid)
            if command is not None and kind in (_EXIT, _REFUSED):
                del self._commands[cid]
        if command is None:
            return
        if kind in (_STDOUT, _STDERR):
            on_frame = command.on_frame
            if on_frame is not None:
                on_frame(kind, payload)
        elif kind == _EXIT:
            command.code = int(payload)
            command.done.set()
        elif kind == _REFUSED:
            command.refused = payload.decode(errors="replace")
            command.done.set()

    def _lost(self) -> None:
        """The agent's exec ended: every command it ran ends unknown (``code`` None)."""
        with self._lock:
            was_alive, self.alive = self.alive, False
            orphans = list(self._commands.values())
            self._commands.clear()
        self._ready.set()
        for command in orphans:
            command.done.set()
        if was_alive and orphans:
            log.warning("a sandbox's exec agent ended with %d commands running", len(orphans))

    def close(self) -> None:
        """End the agent (it kills what it started when its stdin closes)."""
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)
        with contextlib.suppress(OSError):
            self._sock.close()
        self._lost()
