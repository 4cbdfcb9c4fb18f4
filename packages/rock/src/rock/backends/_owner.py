"""Which daemon a container belongs to, and whether that daemon still runs.

Daemons of several rock homes (two users, two checkouts) may share one Docker engine; a
daemon takes only containers labelled with its own daemon id. Two things keep that safe:

* every container also carries its **origin**, the host and rock home of the daemon that
  made it, so that a daemon taking over an id (``--daemon-id`` given again from another
  home) still leaves alone the containers another home made and its database never knew;
* a daemon **claims** its id on the engine while it runs: a small marker volume labelled
  with the id and the claiming process. A second daemon claiming the same id is refused
  while that process lives; the marker of a daemon that died (``kill -9``) is stale and
  taken over. A process on this machine is judged by its pid and start time; one on
  another machine cannot be judged, so its marker holds until that daemon removes it
  (at shutdown) or a person does.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import socket
from dataclasses import dataclass
from pathlib import Path

import docker
from docker.errors import DockerException

from rock.backends.base import LABEL_ORIGIN
from rock.errors import RockError

LABEL_CLAIM = "dev.ale.rock.claim"
_LABEL_HOST = "dev.ale.rock.claim.host"
_LABEL_BOOT = "dev.ale.rock.claim.boot"
_LABEL_PID = "dev.ale.rock.claim.pid"
_LABEL_STARTED = "dev.ale.rock.claim.started"


def origin_of(home: Path) -> str:
    """The origin label of a daemon running from ``home`` on this machine."""
    return f"{socket.gethostname()}:{Path(home).resolve()}"


def _boot_id() -> str:
    with contextlib.suppress(OSError):
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    return ""


def process_started(pid: int) -> str | None:
    """When process ``pid`` started (clock ticks since boot), or None when there is none."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]  # field 22; the name before ')' may hold spaces


def _pid_exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's
        return True
    return pid > 0


@dataclass(frozen=True)
class Holder:
    """The process that claimed a daemon id."""

    origin: str
    host: str
    boot: str
    pid: int
    started: str

    @classmethod
    def this_process(cls, origin: str) -> Holder:
        pid = os.getpid()
        return cls(origin, socket.gethostname(), _boot_id(), pid, process_started(pid) or "")

    @classmethod
    def from_labels(cls, labels: dict[str, str]) -> Holder:
        pid = labels.get(_LABEL_PID, "0")
        return cls(
            labels.get(LABEL_ORIGIN, "?"),
            labels.get(_LABEL_HOST, "?"),
            labels.get(_LABEL_BOOT, ""),
            int(pid) if pid.isdigit() else 0,
            labels.get(_LABEL_STARTED, ""),
        )

    def labels(self) -> dict[str, str]:
        return {
            LABEL_ORIGIN: self.origin,
            _LABEL_HOST: self.host,
            _LABEL_BOOT: self.boot,
            _LABEL_PID: str(self.pid),
            _LABEL_STARTED: self.started,
        }

    def alive(self) -> bool:
        """False only when it surely ended: it ran on this machine since its last boot and
        its pid is gone or is another process now. A process elsewhere counts as alive."""
        if self.host != socket.gethostname() or self.boot != _boot_id():
            return True
        if not self.boot:  # no /proc on this machine: only whether the pid exists
            return _pid_exists(self.pid)
        started = process_started(self.pid)
        return started is not None and (not self.started or started == self.started)

    def describe(self) -> str:
        home = self.origin.split(":", 1)[-1]
        return f"pid {self.pid} on {self.host}, rock home {home}"


class EngineClaim:
    """A daemon id held on one Docker engine by this process, until :meth:`release`."""

    def __init__(self, client: docker.DockerClient, daemon_id: str, origin: str) -> None:
        self.client = client
        self.daemon_id = daemon_id
        self.origin = origin
        self._marker: str | None = None

    def take(self) -> None:
        """Post this process's marker, then look at the others: a live holder refuses this
        one (one sentence), a dead one's marker is removed. Of two daemons taking the same id
        at the same moment, each sees the other and both are refused, never both let in."""
        me = Holder.this_process(self.origin)
        name = f"rock-daemon-{self.daemon_id}-{secrets.token_hex(4)}"
        try:
            self.client.volumes.create(
                name=name, labels={LABEL_CLAIM: self.daemon_id, **me.labels()}
            )
            self._marker = name
            markers = self.client.volumes.list(filters={"label": f"{LABEL_CLAIM}={self.daemon_id}"})
        except DockerException as exc:
            self.release()
            raise RockError(
                f"the engine would not record this daemon's id {self.daemon_id!r} "
                f"({getattr(exc, 'explanation', None) or exc}); check the engine and start again."
            ) from None
        for marker in markers:
            if marker.name == name:
                continue
            holder = Holder.from_labels(marker.attrs.get("Labels") or {})
            if holder.alive():
                self.release()
                hint = (
                    ""
                    if holder.host == me.host
                    else f"; if it is gone, remove its marker with 'docker volume rm {marker.name}'"
                )
                raise RockError(
                    f"another rock daemon holds the daemon id {self.daemon_id!r} on this engine "
                    f"({holder.describe()}); stop it, or give this daemon another id{hint}."
                )
            with contextlib.suppress(DockerException):  # a daemon that died without removing it
                marker.remove(force=True)
        self._sweep()

    def _sweep(self) -> None:
        """Remove the markers of other ids whose daemons surely died (``kill -9`` on this
        machine), so that dead daemons' markers do not pile up on the engine."""
        with contextlib.suppress(DockerException):
            for marker in self.client.volumes.list(filters={"label": LABEL_CLAIM}):
                labels = marker.attrs.get("Labels") or {}
                if labels.get(LABEL_CLAIM) == self.daemon_id:
                    continue
                if not Holder.from_labels(labels).alive():
                    with contextlib.suppress(DockerException):
                        marker.remove(force=True)

    def release(self) -> None:
        """Remove this process's marker (idempotent)."""
        name, self._marker = self._marker, None
        if name is not None:
            with contextlib.suppress(DockerException):
                self.client.volumes.get(name).remove(force=True)
