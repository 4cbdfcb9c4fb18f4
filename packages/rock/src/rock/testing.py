"""Helpers for the tests of rock and of what runs on it (roll, iflow): finding the private
``rock serve`` a run started, and removing what it left should the run have been killed.

They live in the package, not in one test folder, because the tests of more than one
package need them and a package's tests import only installed code and their own folder.
"""

from __future__ import annotations

import contextlib
import os
import signal
from pathlib import Path
from types import TracebackType

import docker

from rock.backends.base import LABEL_DAEMON


def private_daemon_of(parent: int) -> tuple[int, str] | None:
    """The pid and daemon id of the private ``rock serve`` that process ``parent`` started
    (:func:`rock.synth.wiring.private_daemon`: ``python -c ... HOME DAEMON_ID PARENT``)."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if ppid == parent and any(b"rock.daemon.server" in a for a in argv) and len(argv) > 3:
            return int(entry.name), argv[-3].decode()
    return None


class PrivateDaemons:
    """The private daemons a test's run started (:meth:`add`); on exit each still running is
    killed and its containers removed, should the run have left them."""

    def __init__(self) -> None:
        self.found: list[tuple[int, str]] = []

    def add(self, daemon: tuple[int, str]) -> None:
        self.found.append(daemon)

    def __enter__(self) -> PrivateDaemons:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        client = docker.from_env()
        try:
            for pid, daemon_id in self.found:
                if _runs_daemon(pid, daemon_id):  # not a later process given its pid again
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
                for container in client.containers.list(
                    all=True, ignore_removed=True, filters={"label": f"{LABEL_DAEMON}={daemon_id}"}
                ):
                    with contextlib.suppress(docker.errors.NotFound):
                        container.remove(force=True)
        finally:
            client.close()


def _runs_daemon(pid: int, daemon_id: str) -> bool:
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return daemon_id.encode() in argv and any(b"rock.daemon.server" in a for a in argv)
