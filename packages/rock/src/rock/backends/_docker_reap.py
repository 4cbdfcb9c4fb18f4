"""Ending a command's processes in a container, from the daemon's side.

The bash that does it lives in `rock.backends._reap`; here it is set going: a reaper
started by exec as the command's user, tried again while a fork bomb leaves no pid free,
and the keeper (the container's first process, which needs no new pid) told through its
stdin to freeze the sandbox and reap when no reaper can start.
"""

from __future__ import annotations

import contextlib
import time

import docker
from docker.errors import APIError, DockerException, NotFound

from rock.backends._docker_io import await_line, frame_reader, raw_socket, read_frames
from rock.backends._reap import KILL_TREE

_REAP_WAIT = 50.0
"""How long the ending of one command may take, the keeper's freeze and the reaper's tries
together, before it is given up (the sandbox's own limits and its deletion remain). With the
rest of a timed-out command's answer (its output's last frames, its exit status: 20 s at
most) this stays below the client's slack past the command's timeout (``rock.api``); when
the freeze had 45 s and the reaper 30 s more, a loaded CI run's client gave up first."""
_REAP_TRIES = 12
"""Tries to start the in-sandbox reaper by exec (each a moment apart) while no pid is free."""
_FREEZE_WAIT = 45.0
"""How long the daemon waits for the keeper to finish a freeze (its ``rock-frozen`` line)
before it answers the command: a command sent while a freeze runs is stopped with the rest,
and under load its own timeout then asked for another freeze (seen in CI, a sandbox frozen
for minutes after a fork bomb). Part of :data:`_REAP_WAIT`."""
_REAP_ALONE = 5.0
"""Seconds the reaper has before the keeper is told to freeze and reap: one that has not
finished by then could not start (no pid free; under gVisor a failed exec takes 7-10 s to
say so) or is racing a fork bomb for the CPU."""


class Reaper:
    """Ends commands in one container (``runtime`` is its runtime: runc or runsc)."""

    def __init__(
        self, api: docker.APIClient, container: docker.models.containers.Container, runtime: str
    ) -> None:
        self._api = api
        self._container = container
        self._runtime = runtime

    def kill_tree(self, pid: int, keep_root: bool, mark: str | None, *, user: str = "") -> None:
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
        gvisor = self._runtime == "runsc"
        deadline = time.monotonic() + _REAP_WAIT
        told = mark is not None and gvisor and self._tell_keeper(mark, pid, keep_root, deadline)
        argv = ["bash", "-c", KILL_TREE, "kill-tree", str(pid), keep, mark or "-"]
        delay = 0.05
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
                told = self._tell_keeper(mark, pid, keep_root, deadline)
            time.sleep(delay)
            delay = min(delay * 2, 1.0)

    def _run_bounded(self, argv: list[str], user: str, wait: float) -> int | None:
        """Run ``argv`` in the sandbox and return its exit status, or None when it has not
        finished within ``wait`` seconds (a sandbox out of pids may never start it)."""
        exec_id = self._api.exec_create(self._container.id, argv, user=user)["Id"]
        raw = self._api.exec_start(exec_id, socket=True)
        sock = raw_socket(raw)
        sock.settimeout(wait)
        try:
            with contextlib.suppress(OSError):  # a timeout is one
                read_frames(frame_reader(raw), lambda _stream, _data: None)
        finally:
            with contextlib.suppress(OSError):
                sock.close()
        info = self._api.exec_inspect(exec_id)
        return None if info.get("Running") or info.get("ExitCode") is None else info["ExitCode"]

    def _tell_keeper(self, mark: str, root: int, keep_root: bool, deadline: float) -> bool:
        """Have the keeper freeze the sandbox and reap the processes marked ``mark`` and
        the tree under ``root`` (but ``root`` itself, and its process group, with
        ``keep_root``: a session's shell) through its stdin, and wait for it to say it is done
        (:data:`_FREEZE_WAIT` at most, and not past ``deadline``, of time.monotonic); False
        when it cannot be told (containers made before it had none)."""
        if not (self._container.attrs.get("Config") or {}).get("OpenStdin"):
            return False
        params = {"stdin": 1, "stdout": 1, "stream": 1}
        try:
            raw = self._api.attach_socket(self._container.id, params=params)
        except DockerException:
            return False
        sock = raw_socket(raw)
        try:
            sock.sendall(f"freeze {mark} {root} {1 if keep_root else 0}\n".encode())
            left = min(_FREEZE_WAIT, deadline - time.monotonic())
            await_line(raw, f"rock-frozen {mark}".encode(), max(left, 0.0))
            return True
        except OSError:
            return False
        finally:
            with contextlib.suppress(OSError):
                sock.close()
