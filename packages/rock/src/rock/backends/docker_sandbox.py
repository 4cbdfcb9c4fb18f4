"""A Docker sandbox: one locked-down container, its commands run by exec.

Each command runs under the wrapper of `rock.backends._reap` (which reports its pid and
whether the image has bash); its output is read off the engine's socket, and how it ended
(its exit status, a timeout, memory running out) is read back from the engine.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import re
import secrets
import shutil
import socket
import threading
import time
from collections.abc import Callable
from typing import Any, cast

import docker
from docker.errors import APIError, DockerException, NotFound
from requests.exceptions import RequestException

from rock.backends import _copy
from rock.backends._docker_io import (
    ExecChannel,
    ExecOutput,
    frame_reader,
    read_frames,
    stream_socket,
)
from rock.backends._docker_reap import Reaper
from rock.backends._exec_agent import AGENT_ARGV, AGENT_SOURCE, AgentRefused, ExecAgent
from rock.backends._reap import WRAP_BASH, WRAP_SH
from rock.backends._shell import Channel, ShellSession
from rock.backends.base import (
    FORK_REPOSITORY,
    LABEL_FORKED_FROM,
    LABEL_ORIGIN,
    LABEL_SANDBOX,
    Sandbox,
    SandboxError,
    SandboxNotFound,
)
from rock.engine import engine_host
from rock.models import DEFAULT_MAX_OUTPUT, ExecRequest, ExecResult, SandboxSpec

log = logging.getLogger(__name__)

_AGENT_RETRY = 30.0
"""Seconds after a failed start of the exec agent (not for want of python3) before it is
tried again; the commands in between go by exec."""

_AGENT_STDIN_MAX = 1 << 20
"""A command with more input than this starts by exec, which streams it: the agent gets a
command's input whole, in its request (a big archive copied in would be held in the
sandbox's memory two and three times over)."""

_GVISOR_LOST = re.compile(
    rb'^waiting on pid \d+: [^\n]*urpc method "containerManager\.WaitPID" failed: [^\n]*\n?',
    re.MULTILINE,
)
"""The line runsc writes to a command's stderr when its sandbox died under it."""

_OUTPUT_AFTER_REAP = 5.0
"""Seconds the last of a reaped command's output may take (then its stream is closed)."""
_READ_AFTER_CLOSE = 1.0
"""Seconds the reader may take to finish once a reaped command's stream is closed."""
_GVISOR_END_WAIT = 3.0
"""Seconds a gVisor sandbox whose kernel died under a command may take to be seen stopped."""
_EXIT_CODE_WAIT = 10.0
"""Seconds the engine may take to record an exec's exit status after its stream closed."""
ANSWER_AFTER_REAP = _OUTPUT_AFTER_REAP + _READ_AFTER_CLOSE + _GVISOR_END_WAIT + _EXIT_CODE_WAIT
"""The longest a timed-out command's answer may take once its reaping ended (the client's
slack past the timeout, ``rock.api._SLACK``, covers it and the reaping)."""


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
        *,
        exec_agent: bool | None = None,
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
        self._reaper = Reaper(self._api, container, spec.runtime)
        if exec_agent is None:
            exec_agent = os.environ.get("ROCK_EXEC_AGENT", "1") != "0"
        self._agent_wanted = exec_agent and spec.runtime != "runsc"
        """Whether commands start through the sandbox's exec agent (`rock.backends._exec_agent`):
        not under gVisor, whose sandbox ending under a command the exec path watches for."""
        self._agent: ExecAgent | None = None
        self._agent_worked = False
        self._agent_retry_at = 0.0
        self._agent_lock = threading.Lock()

    # --- exec ---------------------------------------------------------------

    def run(self, request: ExecRequest) -> ExecResult:
        return self.run_streaming(request, None)

    def run_streaming(
        self, request: ExecRequest, on_output: Callable[[int, bytes], None] | None
    ) -> ExecResult:
        mark = secrets.token_hex(8)
        running = _Running(request.tag, request.user or "")
        with self._running_lock:
            self._running[mark] = running
        started = time.monotonic()
        output = ExecOutput(
            request.max_output_bytes,
            on_output,
            lambda pid, bash: self._pid_known(mark, running, pid, bash),
        )
        by_agent = self._run_by_agent(request, mark, running, output)
        if by_agent is not None:
            timed_out, code = by_agent
            self._forget(mark)
            result = output.result(time.monotonic() - started, timed_out)
            self._ending(result, code)
            return result
        exec_id, raw = self._start(request, mark)
        sock = stream_socket(raw)
        timed_out = self._feed_and_wait(request, raw, sock, output, mark, running)
        duration = time.monotonic() - started
        self._forget(mark)
        result = output.result(duration, timed_out)
        self._ending(result, self._exit_code(exec_id))
        sock.close()
        return result

    def _wrapped(self, request: ExecRequest) -> list[str]:
        """The command's argv under the wrapper (`rock.backends._reap`)."""
        argv = (
            ["bash", "-c", request.command]
            if isinstance(request.command, str)
            else list(request.command)
        )
        return (  # straight into bash once the sandbox is known to have it
            ["bash", "-c", 'eval "$ROCK_WRAP"', "rock-exec", *argv]
            if self._bash
            else ["sh", "-c", WRAP_SH, "sh", *argv]
        )

    def _run_by_agent(
        self, request: ExecRequest, mark: str, running: _Running, output: ExecOutput
    ) -> tuple[bool, int | None] | None:
        """Run the command through the sandbox's exec agent; return whether it timed out
        and its exit status (None when the agent was lost under it), or None when the agent
        cannot run it (then it runs by exec)."""
        agent = self._agent_for(request)
        if agent is None:
            return None
        env = {**request.env, "ROCK_EXEC_ID": mark, "ROCK_WRAP": WRAP_BASH}
        try:
            command = agent.run(
                self._wrapped(request), env, request.cwd, request.stdin, output.on_frame
            )
        except AgentRefused:
            return None
        finished = command.done.wait(request.timeout)
        if command.refused is not None:  # nothing ran (no such directory, no pid free)
            return None
        timed_out = not finished
        if timed_out:
            self._reap(mark, running)
            if not command.done.wait(_OUTPUT_AFTER_REAP + _READ_AFTER_CLOSE):
                command.detach()
        elif command.code is None:  # the agent went (a command killed it): end what this began
            self._reap(mark, running)
        return timed_out, command.code

    def _agent_for(self, request: ExecRequest) -> ExecAgent | None:
        """The sandbox's exec agent, started the first time; None for a command it does not
        run (another user's, one with a big input) or when it cannot run (no python3 in the
        image; another failed start is tried again after a while)."""
        if not self._agent_wanted or request.user:
            return None
        if request.stdin is not None and len(request.stdin) > _AGENT_STDIN_MAX:
            return None
        with self._agent_lock:
            agent = self._agent
            if agent is not None and agent.alive:
                return agent
            if time.monotonic() < self._agent_retry_at:
                return None
            try:
                agent = ExecAgent(self._open_agent)
            except (AgentRefused, DockerException, RequestException) as exc:
                log.info("sandbox %s runs its commands by exec: %s", self.id, exc)
                if isinstance(exc, AgentRefused) and exc.lasting and not self._agent_worked:
                    self._agent_wanted = False  # (no python3 in the image)
                else:  # (slow to start, the engine busy, the container stopped for now)
                    self._agent_retry_at = time.monotonic() + _AGENT_RETRY
                self._agent = None
                return None
            self._agent, self._agent_worked = agent, True
            return agent

    def _open_agent(self) -> object:
        exec_id = self._api.exec_create(
            self.container.id,
            AGENT_ARGV,
            stdin=True,
            workdir=self.spec.workdir,
            environment={**self.spec.env, "ROCK_AGENT": AGENT_SOURCE},
        )["Id"]
        return self._api.exec_start(exec_id, socket=True)

    def _close_agent(self) -> None:
        with self._agent_lock:
            agent, self._agent = self._agent, None
        if agent is not None:
            agent.close()

    def _start(self, request: ExecRequest, mark: str) -> tuple[str, object]:
        """Start the command by exec, under the wrapper; return the exec's id and stream."""
        wrapped = self._wrapped(request)
        env = {**self.spec.env, **request.env, "ROCK_EXEC_ID": mark, "ROCK_WRAP": WRAP_BASH}
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
        return exec_id, raw

    def _pid_known(self, mark: str, running: _Running, pid: int, bash: bool | None) -> None:
        """The wrapper said the command's pid (-1 when it could not) and whether the image
        has bash (None when it said nothing)."""
        if bash is not None:
            self._bash = bash
        if pid > 0:
            with self._running_lock:
                running.pid = pid
                late = running.ended
            if late:  # interrupted while the engine was still creating it
                threading.Thread(target=self._reap, args=(mark, running), daemon=True).start()

    def _feed_and_wait(
        self,
        request: ExecRequest,
        raw: object,
        sock: socket.socket,
        output: ExecOutput,
        mark: str,
        running: _Running,
    ) -> bool:
        """Send the command its stdin and read its output until it ends or its timeout
        comes (then reap it); return whether it timed out."""
        reader = threading.Thread(
            target=self._drain, args=(frame_reader(raw), output.on_frame), daemon=True
        )
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
            reader.join(_OUTPUT_AFTER_REAP)
            if reader.is_alive():
                sock.close()
                reader.join(_READ_AFTER_CLOSE)
        return timed_out

    def _ending(self, result: ExecResult, code: int | None) -> None:
        """Fill in how the command ended: its exit status (``code``, None when unknown; 137
        when killed at its timeout), and whether memory ran out, the whole sandbox going with
        it (as it does under gVisor, whose kernel lives in the sandbox's cgroup)."""
        ended = None
        if code is None or (code >= 128 and self.spec.runtime == "runsc"):
            ended = self._ended(wait=_GVISOR_END_WAIT if self.spec.runtime == "runsc" else 0.0)
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

    def _exit_code(self, exec_id: str, wait: float = _EXIT_CODE_WAIT) -> int | None:
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
                read_frames(read, on_frame)
            return
        finished = threading.Event()

        def pump() -> None:
            try:
                with contextlib.suppress(OSError):
                    read_frames(read, on_frame)
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
        self._reaper.kill_tree(pid, False, mark, user=running.user)

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
            return ExecChannel(self._api.exec_start(exec_id, socket=True), on_data)

        return ShellSession(
            open_channel,
            lambda pid, keep, mark: self._reaper.kill_tree(pid, keep, mark),
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
        self._close_agent()
        try:
            self.container.stop(timeout=2)
        except NotFound:
            raise SandboxNotFound(f"sandbox {self.id} is gone.") from None

    def delete(self) -> None:
        """Remove the container (and a fork's image with it); idempotent, and safe against a
        removal already under way and an engine too busy to answer in time (a gVisor sandbox
        with hundreds of processes took more than the client's 30 s to go, under load in
        CI): asked again until it is gone, for up to 2 minutes."""
        self._close_agent()
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
