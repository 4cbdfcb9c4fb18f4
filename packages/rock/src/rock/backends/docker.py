"""The docker backend: each sandbox is a locked-down container on a real engine."""

from __future__ import annotations

import builtins
import contextlib
import dataclasses
import math
import re
import secrets
import shutil
import socket
import struct
import threading
import time
from collections.abc import Callable
from typing import Any, cast

import docker
from docker.errors import APIError, DockerException, ImageNotFound, NotFound
from requests.exceptions import RequestException

from ale.capped import CappedOutput
from rock.backends import _copy
from rock.backends._owner import EngineClaim
from rock.backends._reap import KEEPALIVE, KILL_TREE, WRAP_BASH, WRAP_SH
from rock.backends._shell import Channel, ShellSession
from rock.backends.base import (
    FORK_REPOSITORY,
    LABEL_DAEMON,
    LABEL_FORKED_FROM,
    LABEL_MANAGED,
    LABEL_ORIGIN,
    LABEL_SANDBOX,
    Backend,
    ImageMissing,
    Sandbox,
    SandboxConflict,
    SandboxError,
    SandboxNotFound,
)
from rock.engine import engine_host
from rock.models import (
    DEFAULT_MAX_OUTPUT,
    DOCKER_CAPABILITIES,
    ExecRequest,
    ExecResult,
    SandboxSpec,
)

_PID_PREFIX = b"__ROCK_PID "
_GVISOR_LOST = re.compile(
    rb'^waiting on pid \d+: [^\n]*urpc method "containerManager\.WaitPID" failed: [^\n]*\n?',
    re.MULTILINE,
)
"""The line runsc writes to a command's stderr when its sandbox died under it."""
MASKED_PATHS = [
    *("/proc/" + name for name in ("acpi", "asound", "interrupts", "kcore", "keys")),
    *("/proc/" + name for name in ("latency_stats", "sched_debug", "scsi", "timer_list")),
    *("/proc/timer_stats", "/sys/devices/virtual/powercap", "/sys/firmware"),
    *("/proc/partitions", "/proc/diskstats"),
]
"""What a sandbox cannot read: the paths Docker masks by default, and the host's disks
(``/proc/partitions``, ``/proc/diskstats``), which it leaves visible."""
_REAP_WAIT = 30.0
"""How long the reaping of one command may take, all tries together, before it is given up."""
_REAP_TRIES = 12
"""Tries to start the in-sandbox reaper by exec (each a moment apart) while no pid is free."""
_FREEZE_WAIT = 45.0
"""How long the daemon waits for the keeper to finish a freeze (its ``rock-frozen`` line)
before it answers the command: a command sent while a freeze runs is stopped with the rest,
and under load its own timeout then asked for another freeze (seen in CI, a sandbox frozen
for minutes after a fork bomb). Below the client's slack past a command's timeout."""
_REAP_ALONE = 5.0
"""Seconds the reaper has before the keeper is told to freeze and reap: one that has not
finished by then could not start (no pid free; under gVisor a failed exec takes 7-10 s to
say so) or is racing a fork bomb for the CPU."""


def _sock(obj: object) -> socket.socket:
    return cast(socket.socket, getattr(obj, "_sock", obj))


def _stream(obj: object) -> socket.socket:
    """The socket of an exec's or an attach's stream, made to wait as long as the command
    runs: it comes with the engine client's timeout (for API calls, 30 s), under which a
    command silent that long looked ended (exit -1, its output lost) while it ran on."""
    sock = _sock(obj)
    sock.settimeout(None)
    return sock


def _reader(raw: object) -> Callable[[int], bytes]:
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
    sock = _sock(raw)

    def read_sock(n: int) -> bytes:
        out = bytearray()
        while len(out) < n:
            chunk = sock.recv(n - len(out))
            if not chunk:
                break
            out.extend(chunk)
        return bytes(out)

    return read_sock


def _frames(read: Callable[[int], bytes], on_frame: Callable[[int, bytes], None]) -> None:
    """Read docker's multiplexed stream (8-byte header: stream, 0, 0, 0, size) until EOF."""
    while True:
        header = read(8)
        if len(header) < 8:
            return
        stream, size = header[0], struct.unpack(">I", header[4:])[0]
        payload = read(size)
        if payload:
            on_frame(stream, payload)


def _await_line(raw: object, wanted: bytes, wait: float) -> bool:
    """Read an attached container's multiplexed output until a line holding ``wanted``
    comes (True) or ``wait`` seconds pass (False)."""
    sock, read = _sock(raw), _reader(raw)
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


class _ExecChannel:
    """A session's bash over a docker exec socket."""

    def __init__(self, raw: object, on_data: Callable[[bytes | None], None]) -> None:
        self._raw = raw
        self._sock = _stream(raw)
        self._read = _reader(raw)
        self._thread = threading.Thread(target=self._pump, args=(on_data,), daemon=True)
        self._thread.start()

    def _pump(self, on_data: Callable[[bytes | None], None]) -> None:
        try:
            _frames(self._read, lambda _stream, data: on_data(data))
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


@dataclasses.dataclass
class _Running:
    """A command running now: its tag, the user it runs as, its pid once known, and whether
    it was told to end (an interrupt that lands before its pid is known is carried out again
    when the pid comes: the command did not exist yet when it was first reaped)."""

    tag: str | None
    user: str
    pid: int | None = None
    ended: bool = False


class DockerSandbox(Sandbox):
    def __init__(
        self,
        client: docker.DockerClient,
        container: docker.models.containers.Container,
        spec: SandboxSpec,
    ) -> None:
        self._client = client
        self._api = client.api
        self.container = container
        self.id = container.labels.get(LABEL_SANDBOX, container.name)
        self.spec = spec
        self.origin = container.labels.get(LABEL_ORIGIN, "")
        self._oom_seen: int | None = None
        self._bash: bool | None = None
        """Whether the image has bash (the first command tells)."""
        self._running: dict[str, _Running] = {}
        """Each command running now, by its mark (ROCK_EXEC_ID)."""
        self._running_lock = threading.Lock()

    # --- exec ---------------------------------------------------------------

    def run(self, request: ExecRequest) -> ExecResult:
        return self.run_streaming(request, None)

    def run_streaming(
        self, request: ExecRequest, on_output: Callable[[int, bytes], None] | None
    ) -> ExecResult:
        argv = (
            ["bash", "-c", request.command]
            if isinstance(request.command, str)
            else list(request.command)
        )
        wrapped = (  # straight into bash once the sandbox is known to have it
            ["bash", "-c", 'eval "$ROCK_WRAP"', "rock-exec", *argv]
            if self._bash
            else ["sh", "-c", WRAP_SH, "sh", *argv]
        )
        mark = secrets.token_hex(8)
        env = {**self.spec.env, **request.env, "ROCK_EXEC_ID": mark, "ROCK_WRAP": WRAP_BASH}
        running = _Running(request.tag, request.user or "")
        with self._running_lock:
            self._running[mark] = running
        started = time.monotonic()
        try:
            exec_id = self._api.exec_create(
                self.container.id,
                wrapped,
                stdin=request.stdin is not None,
                workdir=request.cwd or self.spec.workdir,
                environment=env or None,
                user=request.user or "",
            )["Id"]
            raw = self._api.exec_start(exec_id, socket=True)
        except NotFound:
            self._forget(mark)
            raise SandboxNotFound(
                f"sandbox {self.id} is gone (its container no longer exists)."
            ) from None
        except APIError as exc:
            self._forget(mark)
            raise SandboxError(
                f"sandbox {self.id} cannot run commands: {exc.explanation or exc}"
            ) from None
        sock = _stream(raw)
        out, err = CappedOutput(request.max_output_bytes), CappedOutput(request.max_output_bytes)
        pid_box: list[int] = []
        err_head = bytearray()

        def on_frame(stream: int, data: bytes) -> None:
            if stream == 2 and not pid_box:
                err_head.extend(data)
                if b"\n" not in err_head:
                    return
                line, rest = bytes(err_head).split(b"\n", 1)
                words = line[len(_PID_PREFIX) :].split() if line.startswith(_PID_PREFIX) else []
                pid_box.append(int(words[0]) if words else -1)
                if words:
                    self._bash = words[1:] == [b"bash"]
                if pid_box[0] > 0:
                    with self._running_lock:
                        running.pid = pid_box[0]
                        late = running.ended
                    if late:  # interrupted while the engine was still creating it
                        threading.Thread(
                            target=self._reap, args=(mark, running), daemon=True
                        ).start()
                if rest:
                    err.add(rest)
                    if on_output is not None:
                        on_output(2, rest)
                return
            (err if stream == 2 else out).add(data)
            if on_output is not None:
                on_output(2 if stream == 2 else 1, data)

        reader = threading.Thread(target=self._drain, args=(_reader(raw), on_frame), daemon=True)
        reader.start()
        if request.stdin is not None:
            with contextlib.suppress(OSError):
                sock.sendall(request.stdin)
        with contextlib.suppress(OSError):  # no (more) input: commands reading stdin see EOF
            sock.shutdown(socket.SHUT_WR)
        reader.join(request.timeout)
        timed_out = reader.is_alive()
        if timed_out:
            self._reap(mark, running)
            reader.join(5.0)
            if reader.is_alive():
                sock.close()
                reader.join(1.0)
        duration = time.monotonic() - started
        self._forget(mark)
        result = ExecResult(
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
        self._ending(result, exec_id)
        sock.close()
        return result

    def _ending(self, result: ExecResult, exec_id: str) -> None:
        """Fill in how the command ended: its exit status (137 when killed at its timeout),
        and whether memory ran out, the whole sandbox going with it (as it does under gVisor,
        whose kernel lives in the sandbox's cgroup)."""
        code = self._exit_code(exec_id)
        ended = None
        if code is None or (code >= 128 and self.spec.runtime == "runsc"):
            ended = self._ended(wait=3.0 if self.spec.runtime == "runsc" else 0.0)
        if code is None:
            code = 137 if result.timed_out or ended is not None else -1
        result.exit_code = 137 if result.timed_out or ended is not None else code
        if ended is not None:
            result.oom_killed = bool(ended.get("OOMKilled"))
            lost = _GVISOR_LOST.search(result.stderr)  # gVisor's word on it, not the command's
            if lost is not None:
                result.stderr = result.stderr[: lost.start()] + result.stderr[lost.end() :]
                result.stderr_total -= lost.end() - lost.start()
        elif result.exit_code == 137 and not result.timed_out:
            result.oom_killed = self._oom_since_last()

    def _ended(self, wait: float = 0.0) -> dict[str, Any] | None:
        """The container's state when it is no longer running (killed under a command), else
        None; ``wait`` gives one that is going down (gVisor's, whose kernel died) that long."""
        deadline = time.monotonic() + wait
        while True:
            try:
                self.container.reload()
            except DockerException:
                return None
            state: dict[str, Any] = self.container.attrs.get("State") or {}
            if not state.get("Running"):
                return state
            if time.monotonic() >= deadline:
                return None
            time.sleep(0.1)

    def _exit_code(self, exec_id: str, wait: float = 10.0) -> int | None:
        """The exec's exit status. The engine closes the output stream a moment before
        it records the status (longer under load), so ask again until it is there."""
        deadline = time.monotonic() + wait
        delay = 0.002
        while True:
            try:
                info = self._api.exec_inspect(exec_id)
            except APIError:
                return None
            if info.get("ExitCode") is not None and not info.get("Running"):
                return int(info["ExitCode"])
            if time.monotonic() > deadline or (delay >= 0.05 and self._ended() is not None):
                return None  # out of time, or the container itself is gone
            time.sleep(delay)
            delay = min(delay * 2, 0.05)

    def _drain(self, read: Callable[[int], bytes], on_frame: Callable[[int, bytes], None]) -> None:
        """Read a command's output until its stream ends, or, under gVisor, until the sandbox
        itself has ended: the engine then keeps the stream open about 30 s more, which a
        shorter timeout would report as a timeout instead of the sandbox's end (its memory)."""
        if self.spec.runtime != "runsc":
            with contextlib.suppress(OSError):
                _frames(read, on_frame)
            return
        finished = threading.Event()

        def pump() -> None:
            try:
                with contextlib.suppress(OSError):
                    _frames(read, on_frame)
            finally:
                finished.set()

        reader = threading.Thread(target=pump, daemon=True)
        reader.start()
        stop_watching = self._on_end(finished.set)
        try:
            finished.wait()
        finally:
            stop_watching()
        reader.join(0.5)  # what the command wrote just before the end is already on its way

    def _on_end(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Call ``callback`` when the container stops (at once if it has); return what stops
        watching."""
        try:
            events = self._client.events(
                filters={"container": self.container.id, "event": "die"}, decode=True
            )
        except DockerException:
            return lambda: None

        def watch() -> None:
            with contextlib.suppress(Exception):  # closed under it: the command ended first
                for _ in events:
                    callback()
                    return

        threading.Thread(target=watch, daemon=True).start()
        if self._ended() is not None:  # it died before the engine was listening
            callback()
        return cast(Callable[[], None], events.close)

    def interrupt(self, tag: str | None = None) -> int:
        with self._running_lock:
            chosen = [(m, r) for m, r in self._running.items() if tag is None or r.tag == tag]
        for mark, running in chosen:
            self._reap(mark, running)
        return len(chosen)

    def _forget(self, mark: str) -> None:
        with self._running_lock:
            self._running.pop(mark, None)

    def _reap(self, mark: str, running: _Running) -> None:
        """End the command ``mark`` and every process it started, wherever they went."""
        with self._running_lock:
            running.ended = True
            pid = running.pid or 0
        self._kill_tree(pid, False, mark, user=running.user)

    def _kill_tree(self, pid: int, keep_root: bool, mark: str | None, *, user: str = "") -> None:
        """Kill the processes marked ``mark`` and the tree under ``pid`` (but ``pid`` itself
        with ``keep_root``), by a reaper started as the command's user (who may read its
        processes' environments), tried again while a fork bomb leaves no pid free. When the
        reaper cannot start (the sandbox is out of pids), the keeper, which needs no new pid,
        freezes the sandbox's processes and reaps the marked ones (see ``_KEEPER``). A
        session's command (``keep_root``) sees its SIGINT from the reaper first, or the rest
        of its line would run on. Under gVisor the keeper is told first, always: a child
        forked as a stop lands there gets none, so a reaper's scan, which stops what it
        finds, can end with such children running (it did in CI: the reaper said done, and
        a fork bomb went on); the keeper stops everything before each of its scans."""
        keep = "1" if keep_root else "0"
        gvisor = self.spec.runtime == "runsc"
        told = mark is not None and gvisor and self._tell_keeper(mark, pid, keep_root, wait=True)
        argv = ["bash", "-c", KILL_TREE, "kill-tree", str(pid), keep, mark or "-"]
        delay = 0.05
        deadline = time.monotonic() + _REAP_WAIT
        for _ in range(_REAP_TRIES):
            left = deadline - time.monotonic()
            if left <= 0:
                return  # given up: the sandbox's own limits and its deletion remain
            try:
                code = self._run_bounded(argv, user, left if told else min(left, _REAP_ALONE))
            except NotFound:
                return  # the container is gone, and its processes with it
            except APIError:
                code = None
            if code == 0:
                return
            if mark is not None and not told:
                told = self._tell_keeper(mark, pid, keep_root, wait=True)
            time.sleep(delay)
            delay = min(delay * 2, 1.0)

    def _run_bounded(self, argv: list[str], user: str, wait: float) -> int | None:
        """Run ``argv`` in the sandbox and return its exit status, or None when it has not
        finished within ``wait`` seconds (a sandbox out of pids may never start it)."""
        exec_id = self._api.exec_create(self.container.id, argv, user=user)["Id"]
        raw = self._api.exec_start(exec_id, socket=True)
        sock = _sock(raw)
        sock.settimeout(wait)
        try:
            with contextlib.suppress(OSError):  # a timeout is one
                _frames(_reader(raw), lambda _stream, _data: None)
        finally:
            with contextlib.suppress(OSError):
                sock.close()
        info = self._api.exec_inspect(exec_id)
        return None if info.get("Running") or info.get("ExitCode") is None else info["ExitCode"]

    def _tell_keeper(
        self, mark: str, root: int = 0, keep_root: bool = False, *, wait: bool = False
    ) -> bool:
        """Have the keeper freeze the sandbox and reap the processes marked ``mark`` and
        the tree under ``root`` (but ``root`` itself, and its process group, with
        ``keep_root``: a session's shell) through its stdin, and with ``wait`` wait for it
        to say it is done (:data:`_FREEZE_WAIT` at most); False when it cannot be told
        (containers made before it had none)."""
        if not (self.container.attrs.get("Config") or {}).get("OpenStdin"):
            return False
        params = {"stdin": 1, "stdout": 1, "stream": 1} if wait else {"stdin": 1, "stream": 1}
        try:
            raw = self._api.attach_socket(self.container.id, params=params)
        except DockerException:
            return False
        sock = _sock(raw)
        try:
            sock.sendall(f"freeze {mark} {root} {1 if keep_root else 0}\n".encode())
            if wait:
                _await_line(raw, f"rock-frozen {mark}".encode(), _FREEZE_WAIT)
            return True
        except OSError:
            return False
        finally:
            with contextlib.suppress(OSError):
                sock.close()

    def _oom_kills(self) -> int:
        probe = "cat /sys/fs/cgroup/memory.events 2>/dev/null || cat /sys/fs/cgroup/memory/memory.oom_control"
        out = self.container.exec_run(["sh", "-c", probe]).output.decode(errors="replace")
        match = re.search(r"oom_kill (\d+)", out)
        return int(match.group(1)) if match else 0

    def _oom_since_last(self) -> bool:
        now = self._oom_kills()
        before = self._oom_seen or 0
        self._oom_seen = now
        return now > before

    # --- attached programs --------------------------------------------------

    def attach_argv(self, argv: list[str], *, user: str | None = None) -> list[str]:
        """``docker exec -i`` of ``argv`` in this container (:class:`ale.sandbox.Attachable`):
        the program's stdin, stdout and stderr are those of the ``docker`` process. Closing
        its stdin ends a well-behaved program; deleting the sandbox ends any."""
        docker_cli = shutil.which("docker")
        if docker_cli is None:
            raise SandboxError(
                "attaching a program to a sandbox needs the docker command-line client on this "
                "machine; install it (Debian: docker.io)."
            )
        cmd = [docker_cli, "-H", engine_host(), "exec", "-i"]
        if self.spec.workdir:
            cmd += ["-w", self.spec.workdir]
        for key, value in (self.spec.env or {}).items():
            cmd += ["-e", f"{key}={value}"]
        if user:
            cmd += ["-u", user]
        return [*cmd, self.container.id, *argv]

    # --- sessions -----------------------------------------------------------

    def session(self, *, max_output_bytes: int = DEFAULT_MAX_OUTPUT) -> ShellSession:
        def open_channel(on_data: Callable[[bytes | None], None]) -> Channel:
            exec_id = self._api.exec_create(
                self.container.id,
                ["bash", "--noprofile", "--norc"],
                stdin=True,
                workdir=self.spec.workdir,
                environment=self.spec.env or None,
            )["Id"]
            return _ExecChannel(self._api.exec_start(exec_id, socket=True), on_data)

        return ShellSession(
            open_channel,
            lambda pid, keep, mark: self._kill_tree(pid, keep, mark),
            max_output_bytes=max_output_bytes,
        )

    # --- files: checked tar streams through exec (see _copy) -----------------

    def read_file(self, path: str) -> bytes:
        return _copy.Copier(self).read_file(path)

    def write_file(self, path: str, data: bytes, mode: int = 0o644) -> None:
        _copy.Copier(self).write_file(path, data, mode)

    def put_archive(self, directory: str, data: bytes) -> None:
        _copy.Copier(self).put_archive(directory, data)

    def get_archive(self, path: str) -> bytes:
        return _copy.Copier(self).get_archive(path)

    # --- lifecycle ----------------------------------------------------------

    def set_network(self, on: bool) -> None:
        """Connect the container to the default bridge, or disconnect it (loopback stays)."""
        try:
            self.container.reload()
        except NotFound:
            raise SandboxNotFound(f"sandbox {self.id} is gone.") from None
        attached = set(self.container.attrs["NetworkSettings"].get("Networks") or {})
        if on == ("bridge" in attached):
            return
        if self.spec.network == "none":
            raise SandboxError(
                f"sandbox {self.id} was made without a network, so it cannot be given one; "
                "create it with network bridge (and close it until it is needed)."
            )
        bridge = self._client.networks.get("bridge")
        try:
            if on:
                bridge.connect(self.container)
            else:
                bridge.disconnect(self.container, force=True)
        except APIError as exc:
            raise SandboxError(
                f"the engine would not {'connect' if on else 'disconnect'} sandbox {self.id} "
                f"{'to' if on else 'from'} its network ({exc.explanation or exc})."
            ) from None

    def snapshot(self, tag: str) -> str:
        repository, _, version = tag.rpartition(":")
        if not repository:
            repository, version = tag, "latest"
        image = self.container.commit(
            repository=repository, tag=version, changes=["LABEL dev.ale.rock.snapshot=" + self.id]
        )
        return image.id

    def status(self) -> dict[str, Any]:
        try:
            self.container.reload()
        except NotFound:
            return {"state": "deleted"}
        state = self.container.attrs["State"]
        return {
            "state": state["Status"],
            "oom_killed": state.get("OOMKilled", False),
            "exit_code": state.get("ExitCode"),
        }

    def pause(self) -> None:
        """Docker's pause: the cgroup freezer stops every process where it is; memory, files
        and open connections stay (a checkpoint to disk, as E2B's pause makes, is not)."""
        try:
            self.container.pause()
        except NotFound:
            raise SandboxNotFound(f"sandbox {self.id} is gone.") from None

    def resume(self) -> None:
        try:
            self.container.unpause()
        except NotFound:
            raise SandboxNotFound(f"sandbox {self.id} is gone.") from None

    def stop(self) -> None:
        try:
            self.container.stop(timeout=2)
        except NotFound:
            raise SandboxNotFound(f"sandbox {self.id} is gone.") from None

    def delete(self) -> None:
        """Remove the container (and a fork's image with it); idempotent, and safe against a
        removal already under way and an engine too busy to answer in time (a gVisor sandbox
        with hundreds of processes took more than the client's 30 s to go, under load in
        CI): asked again until it is gone, for up to 2 minutes."""
        deadline = time.monotonic() + 120
        while True:
            try:
                self.container.remove(force=True)
                break
            except NotFound:
                return
            except APIError as exc:
                if exc.status_code != 409 or "in progress" not in str(exc.explanation):
                    raise  # (409 in progress: the engine is removing it; wait until it is gone)
            except RequestException:
                pass  # no answer in time: the engine may still be at it
            if time.monotonic() >= deadline:
                raise SandboxError(
                    f"sandbox {self.id} is still being removed after 120s; the engine is busy, "
                    "try again in a moment."
                ) from None
            time.sleep(0.5)
        self._remove_fork_image()

    def _remove_fork_image(self) -> None:
        """A fork's image is its own: it goes with it (kept while a fork of the fork or
        another container still uses it: the engine refuses, and nothing is forced). The
        removal runs beside the caller: a busy engine can take long to delete an image, and
        a delete request must not wait for it."""
        config = self.container.attrs.get("Config") or {}
        image = str(config.get("Image") or "")
        if LABEL_FORKED_FROM not in (config.get("Labels") or {}) or not image.startswith(
            FORK_REPOSITORY + "/"
        ):
            return

        def remove() -> None:
            with contextlib.suppress(DockerException, RequestException):
                self._client.images.remove(image, noprune=False)

        threading.Thread(target=remove, name="rock-fork-image", daemon=True).start()


_NAME = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_IMAGE_REFERENCE = re.compile(
    rf"(?:[A-Za-z0-9.-]+(?::[0-9]+)?/)?{_NAME}(?:/{_NAME})*"  # [registry/]name[/name...]
    r"(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?"  # :tag
    r"(?:@[a-z0-9]+:[0-9a-fA-F]{32,})?"  # @digest
    r"|(?:sha256:)?[0-9a-f]{12,64}"  # an image id
)
"""What the engine takes as an image (checked here: an engine asked for ``/`` answers with
its image list, and the Docker client raises a bare exception on it)."""


class DockerBackend(Backend):
    """Sandboxes as containers, labelled as ours (and as the given daemon's, made from
    ``origin``: see `rock.backends._owner`)."""

    name = "docker"

    def __init__(
        self,
        client: docker.DockerClient | None = None,
        *,
        daemon_id: str = "local",
        origin: str | None = None,
    ) -> None:
        if client is None:
            from rock.engine import connect

            client = connect()
        self.client = client
        self.daemon_id = daemon_id
        self.origin = origin
        self._claim: EngineClaim | None = None
        self._cores: int | None = None
        """The engine's CPU count (asked once)."""
        self._next_core = 0
        self._cpu_lock = threading.Lock()

    def claim(self) -> None:
        """Hold the daemon id on this engine (a marker volume) until :meth:`release`."""
        if self._claim is None:
            claim = EngineClaim(self.client, self.daemon_id, self.origin or "")
            claim.take()
            self._claim = claim

    def release(self) -> None:
        claim, self._claim = self._claim, None
        if claim is not None:
            claim.release()

    def create(
        self, spec: SandboxSpec | None = None, *, sandbox_id: str | None = None
    ) -> DockerSandbox:
        spec = spec or SandboxSpec()
        sandbox_id = sandbox_id or "sb-" + secrets.token_hex(6)
        self.check_spec(spec)
        labels = {
            **spec.labels,
            LABEL_MANAGED: "1",
            LABEL_DAEMON: self.daemon_id,
            LABEL_SANDBOX: sandbox_id,
            **({LABEL_ORIGIN: self.origin} if self.origin else {}),
        }
        host_config = self.client.api.create_host_config(
            init=True,
            network_mode=spec.network,
            runtime=None if spec.runtime == "runc" else spec.runtime,
            mem_limit=f"{spec.memory_mb}m",
            memswap_limit=f"{spec.memory_mb}m",
            nano_cpus=int(spec.cpus * 1e9),
            cpuset_cpus=self._cpuset(spec.cpus),
            pids_limit=_host_pids(spec),
            privileged=False,
            cap_drop=["ALL"],
            cap_add=spec.kept_capabilities() or None,
            security_opt=["no-new-privileges"],
            ulimits=self._nproc(spec),
        )
        host_config["MaskedPaths"] = MASKED_PATHS  # the engine's own list, and the host's disks
        made: dict[str, Any] | None = None
        try:
            made = self.client.api.create_container(
                spec.image,
                KEEPALIVE,
                name=f"rock-{sandbox_id}",
                hostname=sandbox_id,
                detach=True,
                stdin_open=True,
                labels=labels,
                working_dir=spec.workdir,
                environment=spec.env or None,
                host_config=host_config,
            )
            self.client.api.start(made["Id"])
            container = self.client.containers.get(made["Id"])
        except BaseException as exc:
            # the engine may have made it though the answer never came (a timeout)
            refused = made is None and isinstance(exc, APIError)
            if not refused:
                self._remove_made(made["Id"] if made else None, sandbox_id)
            if isinstance(exc, APIError):
                raise SandboxError(
                    f"the engine refused to start {spec.image}: {exc.explanation or exc}"
                ) from None
            if isinstance(exc, (DockerException, RequestException)):
                raise SandboxError(
                    f"the engine did not answer while starting {spec.image} "
                    f"({type(exc).__name__}); nothing was left behind; try again"
                ) from None
            raise
        return DockerSandbox(self.client, container, spec)

    def _remove_made(self, container_id: str | None, sandbox_id: str) -> None:
        """Remove what a create that failed half-way made: by its id, or, when the engine's
        answer never came, the container of that name if it is this create's (its labels)."""
        with contextlib.suppress(Exception):
            if container_id is None:
                found = self.client.api.inspect_container(f"rock-{sandbox_id}")
                mine = found.get("Config", {}).get("Labels") or {}
                if (mine.get(LABEL_SANDBOX), mine.get(LABEL_DAEMON)) != (
                    sandbox_id,
                    self.daemon_id,
                ):
                    return
                container_id = found["Id"]
            self.client.api.remove_container(container_id, force=True)

    def _cpuset(self, cpus: float) -> str | None:
        """The cores a sandbox of ``cpus`` CPUs runs on: as many as its budget rounded up, so
        ``nproc`` inside says what it may use (``make -j$(nproc)`` does not oversubscribe),
        taken in turn so that sandboxes spread over the machine; None (all cores) when the
        budget is the whole machine's or more. The CPU quota still holds a fractional one."""
        if self._cores is None:
            try:
                self._cores = int(self.client.info().get("NCPU") or 0)
            except DockerException:
                self._cores = 0
        wanted = math.ceil(cpus)
        if self._cores <= 1 or wanted >= self._cores:
            return None
        with self._cpu_lock:
            first, self._next_core = self._next_core, (self._next_core + wanted) % self._cores
        return ",".join(str((first + i) % self._cores) for i in range(wanted))

    def check_spec(self, spec: SandboxSpec) -> None:
        if spec.runtime != "runc":
            self._check_runtime(spec)
        if not _IMAGE_REFERENCE.fullmatch(spec.image):
            raise SandboxError(
                f"image {spec.image!r} is not an image reference (name[:tag], lowercase, as "
                "`docker images` lists them, or an image id); give the image to start from."
            )
        try:
            self.client.images.get(spec.image)
        except ImageNotFound:
            raise ImageMissing(
                f"image {spec.image} does not exist on the engine; build it first "
                "(rock image build-base for the base image)."
            ) from None
        except DockerException as exc:
            raise SandboxError(
                f"the engine cannot use image {spec.image!r}: {getattr(exc, 'explanation', None) or exc}"
            ) from None

    @staticmethod
    def _nproc(spec: SandboxSpec) -> list[docker.types.Ulimit] | None:
        """Under gVisor, the pids limit as each user's RLIMIT_NPROC, which gVisor counts
        inside the sandbox (see :func:`_host_pids`). Under runc it would count the host's
        processes of that uid, so runc keeps the cgroup alone."""
        if spec.runtime != "runsc":
            return None
        return [docker.types.Ulimit(name="nproc", soft=spec.pids_limit, hard=spec.pids_limit)]

    def _check_runtime(self, spec: SandboxSpec) -> None:
        """The engine must know the runtime, and give a runsc sandbox the network it asks for."""
        try:
            runtimes = self.client.info().get("Runtimes") or {}
        except DockerException as exc:
            raise SandboxError(f"the engine cannot say which runtimes it has: {exc}") from None
        if spec.runtime not in runtimes:
            raise SandboxError(
                f"the engine has no {spec.runtime} runtime (it has {', '.join(sorted(runtimes))}); "
                "run scripts/ensure-runsc.sh (make engine does) to register gVisor, or ask for "
                "runtime runc."
            )
        args = runtimes[spec.runtime].get("runtimeArgs") or []
        if spec.network != "none" and "--network=none" in args:
            raise SandboxError(
                f"the engine runs {spec.runtime} with --network=none, so a {spec.runtime} "
                "sandbox cannot have network bridge; ask for network none, or runtime runc."
            )

    def _find(self, sandbox_id: str) -> docker.models.containers.Container:
        found = self.client.containers.list(  # this daemon's only: ids are not names
            all=True,
            ignore_removed=True,  # removed between the list and its inspection: not found
            filters={
                "label": [f"{LABEL_SANDBOX}={sandbox_id}", f"{LABEL_DAEMON}={self.daemon_id}"]
            },
        )
        if not found:
            raise SandboxNotFound(f"no sandbox {sandbox_id}; list them with 'rock sandbox ls'.")
        return found[0]

    def get(self, sandbox_id: str) -> DockerSandbox:
        container = self._find(sandbox_id)
        return DockerSandbox(self.client, container, _spec_of(container))

    def list(self) -> list[Sandbox]:
        containers = self.client.containers.list(  # (one removed meanwhile is left out)
            all=True,
            ignore_removed=True,
            filters={"label": [f"{LABEL_MANAGED}=1", f"{LABEL_DAEMON}={self.daemon_id}"]},
        )
        return [DockerSandbox(self.client, c, _spec_of(c)) for c in containers]

    def states(self) -> dict[str, dict[str, Any]]:
        # One engine call for all of them (containers.list would inspect each one).
        rows = self.client.api.containers(
            all=True, filters={"label": [f"{LABEL_MANAGED}=1", f"{LABEL_DAEMON}={self.daemon_id}"]}
        )
        out: dict[str, dict[str, Any]] = {}
        for row in rows:
            sandbox_id = (row.get("Labels") or {}).get(LABEL_SANDBOX)
            if sandbox_id:
                out[sandbox_id] = {
                    "state": row.get("State", "unknown"),
                    "status": row.get("Status"),
                }
        return out

    def images(self) -> builtins.list[dict[str, Any]]:
        return [
            {
                "id": image.short_id,
                "tags": list(image.tags),
                "size_mb": round((image.attrs.get("Size") or 0) / 2**20, 1),
                "created": image.attrs.get("Created", ""),
            }
            for image in self.client.images.list()
        ]

    def remove_image(self, tag: str) -> None:
        try:
            self.client.images.remove(tag, noprune=False)
        except NotFound:
            pass
        except APIError as exc:
            if exc.status_code != 409:
                raise
            raise SandboxConflict(
                f"image {tag} is used by a sandbox; delete the sandboxes started from it first."
            ) from None


def _host_pids(spec: SandboxSpec) -> int:
    """The host's pids cgroup limit for ``spec``. Under gVisor the cgroup counts gVisor's own
    host threads, about two for each task of the sandbox (measured: 584 for 256 tasks, 1141
    for 512): a cgroup of the sandbox's own limit lets a fork bomb starve gVisor of threads,
    and gVisor ends the whole sandbox. So the sandbox's tasks are held by RLIMIT_NPROC
    inside it, and the host's cgroup, with room for gVisor, guards the host."""
    return spec.pids_limit if spec.runtime != "runsc" else 2 * spec.pids_limit + 512


def _spec_of(container: docker.models.containers.Container) -> SandboxSpec:
    """The spec a labelled container was started with, read back from the engine."""
    host = container.attrs.get("HostConfig", {})
    config = container.attrs.get("Config", {})
    return SandboxSpec(
        image=config.get("Image") or SandboxSpec().image,
        memory_mb=max(1, (host.get("Memory") or 1 << 30) >> 20),
        cpus=(host.get("NanoCpus") or 1_000_000_000) / 1e9,
        pids_limit=next(
            (u["Soft"] for u in host.get("Ulimits") or [] if u.get("Name") == "nproc"),
            host.get("PidsLimit") or 512,
        ),
        network="bridge" if host.get("NetworkMode") == "bridge" else "none",
        runtime="runsc" if host.get("Runtime") == "runsc" else "runc",
        capabilities=[c.removeprefix("CAP_") for c in host.get("CapAdd") or []]
        if "ALL" in (host.get("CapDrop") or [])
        else list(DOCKER_CAPABILITIES),
        workdir=config.get("WorkingDir") or None,
        labels={
            k: v
            for k, v in (config.get("Labels") or {}).items()
            if not k.startswith("dev.ale.rock.")
        },
    )
