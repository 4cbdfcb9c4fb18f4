"""The interface every backend implements: the same verbs on docker and local."""

from __future__ import annotations

import abc
import builtins
import fnmatch
import io
import posixpath
import tarfile
from collections.abc import Callable, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Protocol

from ale.sandbox import SandboxVerbs
from rock.errors import RockError
from rock.models import DEFAULT_MAX_OUTPUT, ExecRequest, ExecResult, SandboxSpec, SessionResult

LABEL_MANAGED = "dev.ale.rock.managed"
LABEL_DAEMON = "dev.ale.rock.daemon"
LABEL_SANDBOX = "dev.ale.rock.sandbox"
LABEL_ORIGIN = "dev.ale.rock.origin"
"""The host and rock home of the daemon that made a container (see `rock.backends._owner`)."""
LABEL_FORKED_FROM = "dev.ale.rock.forked-from"
"""On a fork (``rock sandbox fork``): the sandbox whose files it started from."""
FORK_REPOSITORY = "rock-fork"
"""Where a fork's image is saved (``rock-fork/<parent id>:<token>``); it goes with the fork."""


class SandboxError(RockError):
    """A sandbox operation failed."""


class SandboxNotFound(SandboxError, KeyError):
    """No such sandbox."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else "sandbox not found"


class SandboxConflict(SandboxError):
    """The sandbox exists but cannot do this now (stopped, in error, waiting in a pool)."""


class NodeLost(SandboxConflict):
    """The machine a sandbox ran on left the cluster, or its rock agent died (ray backend)."""


class PoolNotFound(SandboxError, KeyError):
    """No warm pool has this name."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "pool not found"


class ImageMissing(SandboxError):
    """The engine has no image of that name (on a cluster: this node has none)."""


class PathMissing(SandboxError, FileNotFoundError):
    """A path that is not in the sandbox."""

    def __str__(self) -> str:  # OSError would format the message as errno and strerror
        return str(self.args[0]) if self.args else "no such path in the sandbox"


class PathEscape(SandboxError, PermissionError):
    """A path points outside the sandbox root."""


class Session(Protocol):
    """A persistent shell: cwd, environment and shell state survive between commands."""

    def run(self, command: str, timeout: float | None = 60.0) -> SessionResult: ...
    def interrupt(self) -> None:
        """Stop the command running in the session now, as Ctrl-C would (the shell stays)."""
        ...

    def close(self) -> None: ...


class ExecVerb(abc.ABC):
    """``exec`` in terms of ``run``: what every sandbox, and every view of one (a recorder,
    another user's), offers its callers."""

    @abc.abstractmethod
    def run(self, request: ExecRequest) -> ExecResult:
        """Run one command as the request says."""

    def exec(
        self,
        command: str | list[str],
        *,
        timeout: float | None = 60.0,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        stdin: bytes | None = None,
        max_output_bytes: int = DEFAULT_MAX_OUTPUT,
    ) -> ExecResult:
        """Run ``command`` (a bash string or an argv list); see :class:`ExecRequest`."""
        return self.run(
            ExecRequest(
                command=command,
                timeout=timeout,
                cwd=cwd,
                env=env or {},
                stdin=stdin,
                max_output_bytes=max_output_bytes,
            )
        )


def hand_on(result: ExecResult, on_output: Callable[[int, bytes], None] | None) -> None:
    """Hand a finished command's output to ``on_output`` (1 stdout, 2 stderr), as a
    ``run_streaming`` does where the output cannot come as it is written."""
    if on_output is not None:
        if result.stdout:
            on_output(1, result.stdout)
        if result.stderr:
            on_output(2, result.stderr)


class Sandbox(ExecVerb):
    """One isolated place to run commands. Use as a context manager to delete it on exit."""

    id: str
    spec: SandboxSpec
    placement: str | None = None
    """The machine it runs on, where a backend spreads sandboxes over several (the ray
    backend's node); None on one machine."""
    origin: str | None = None
    """The host and rock home of the daemon that made it, as its labels say ('' when they
    say none); None where the backend keeps sandboxes inside the rock home (local)."""

    def run_streaming(
        self, request: ExecRequest, on_output: Callable[[int, bytes], None] | None
    ) -> ExecResult:
        """:meth:`run`, with the output also handed to ``on_output(stream, bytes)`` (1 for
        stdout, 2 for stderr) as it comes; a backend that cannot stream hands it at the end."""
        result = self.run(request)
        hand_on(result, on_output)
        return result

    @abc.abstractmethod
    def session(self, *, max_output_bytes: int = DEFAULT_MAX_OUTPUT) -> Session:
        """Open a persistent bash session."""

    @abc.abstractmethod
    def read_file(self, path: str) -> bytes: ...

    @abc.abstractmethod
    def write_file(self, path: str, data: bytes, mode: int = 0o644) -> None: ...

    @abc.abstractmethod
    def put_archive(self, directory: str, data: bytes) -> None:
        """Unpack a tar archive into ``directory`` (made if missing), keeping modes."""

    @abc.abstractmethod
    def get_archive(self, path: str) -> bytes:
        """A tar archive of ``path`` (file or tree) whose top member is its base name."""

    def upload(self, local: Path, remote: str) -> None:
        """Copy a local file or tree to ``remote`` (a tree's contents go under it), keeping modes."""
        upload(self, local, remote)

    def download(self, remote: str, local: Path) -> None:
        """Copy a file or tree from the sandbox to ``local``, keeping modes."""
        download(self, remote, local)

    def status(self) -> dict[str, Any]:
        """What the backend knows of the sandbox: ``state`` (running, exited, deleted…) and more."""
        return {"state": "running"}

    def pause(self) -> None:
        """Freeze every process of the sandbox (its memory kept) until :meth:`resume`."""
        raise SandboxError(f"sandbox {self.id}'s backend cannot pause a sandbox.")

    def resume(self) -> None:
        """Let the processes :meth:`pause` froze go on."""
        raise SandboxError(f"sandbox {self.id}'s backend cannot pause a sandbox.")

    def interrupt(self, tag: str | None = None) -> int:
        """Kill every command running now (and its children), or the one run with ``tag``;
        return how many were running."""
        return 0

    def set_network(self, on: bool) -> None:
        """Open or close the sandbox's network while it runs (a task's phases may differ:
        the agent closed, its tests open). Only a sandbox made with a network can have it
        opened again; closing leaves loopback. A :class:`SandboxError` of one sentence when
        the sandbox cannot."""
        if on != (self.spec.network != "none"):
            raise SandboxError(
                f"sandbox {self.id} cannot change its network while it runs; create it with "
                "the network it needs."
            )

    @abc.abstractmethod
    def snapshot(self, tag: str) -> str:
        """Save the sandbox's filesystem as a new image; return its id."""

    @abc.abstractmethod
    def stop(self) -> None: ...

    @abc.abstractmethod
    def delete(self) -> None: ...

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.delete()


class Backend(abc.ABC):
    """Creates and finds sandboxes."""

    name: str
    origin: str | None = None
    """The host and rock home of the daemon using this backend, written on every sandbox
    it makes; None where sandboxes live inside the rock home (local) or no daemon runs."""

    def claim(self) -> None:
        """Hold this backend's daemon id where its sandboxes live, for this process until
        :meth:`release`: a `RockError` of one sentence when a live daemon holds it. Nothing
        to hold where the sandboxes live inside the rock home (its lock covers them)."""
        return None

    def release(self) -> None:
        """Let go of what :meth:`claim` took (idempotent)."""
        return None

    @abc.abstractmethod
    def create(
        self, spec: SandboxSpec | None = None, *, sandbox_id: str | None = None
    ) -> Sandbox: ...

    @abc.abstractmethod
    def get(self, sandbox_id: str) -> Sandbox: ...

    @abc.abstractmethod
    def list(self) -> list[Sandbox]: ...

    def states(self) -> dict[str, dict[str, Any]]:
        """Every sandbox of this backend (and daemon) by id, with its `Sandbox.status`."""
        return {box.id: box.status() for box in self.list()}

    def check_spec(self, spec: SandboxSpec) -> None:
        """Raise `SandboxError` now if ``spec`` cannot start (e.g. its image is missing)."""
        return None

    def images(self) -> builtins.list[dict[str, Any]]:
        """Images sandboxes can start from: dicts with id, tags, size_mb, created."""
        return []

    def build_image(self, context: bytes, dockerfile: str, name: str) -> dict[str, Any]:
        """Build an image from a build context tar on this backend's engines (see the
        daemon's ``build_image``): the fields of ``rock.models.ImageBuild``."""
        raise SandboxConflict(
            f"the {self.name} backend does not build images; build the image on its engine, "
            "or run the daemon with the docker backend."
        )

    def remove_image(self, tag: str) -> None:
        """Remove the image ``tag`` (a snapshot); `SandboxConflict` while a sandbox uses
        it; nothing where images are not this backend's to remove."""
        return None


def upload(sandbox: SandboxVerbs, local: Path, remote: str) -> None:
    """Copy a local file or tree to ``remote`` in any sandbox (a tree's contents go under
    it), keeping modes: :meth:`Sandbox.upload` for a sandbox known only by its verbs."""
    local = Path(local)
    if not local.exists():
        raise SandboxError(f"{local} does not exist on this machine; check the path.")
    data, target = pack_upload(local, remote)
    sandbox.put_archive(target, data)


def download(sandbox: SandboxVerbs, remote: str, local: Path) -> None:
    """Copy a file or tree from any sandbox to ``local``, keeping modes."""
    unpack_download(sandbox.get_archive(remote), Path(local))


def pack_upload(local: Path, remote: str, *, mtime: int | None = None) -> tuple[bytes, str]:
    """The tar archive and target directory that put ``local`` at ``remote``; with
    ``mtime``, every member carries that modification time instead of its own (so what
    ``ls -l`` shows in the sandbox does not depend on when the files were written here)."""

    def stamp(info: tarfile.TarInfo) -> tarfile.TarInfo:
        if mtime is not None:
            info.mtime = mtime
        return info

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        if local.is_dir():
            for item in sorted(local.iterdir()):
                tar.add(item, arcname=item.name, filter=stamp)
            target = remote
        else:
            tar.add(local, arcname=posixpath.basename(remote), filter=stamp)
            target = posixpath.dirname(remote) or "/"
    return buf.getvalue(), target


def excluded(path: str, patterns: Sequence[str]) -> bool:
    """Whether ``path`` (relative, ``/``-separated) or a directory above it matches one of
    ``patterns`` as ``tar --exclude`` matches: the whole path or any trailing part of it."""
    parts = path.split("/")
    return any(
        fnmatch.fnmatchcase("/".join(parts[start:stop]), pattern)
        for pattern in patterns
        for stop in range(1, len(parts) + 1)
        for start in range(stop)
    )


def unpack_download(archive: bytes, local: Path, exclude: Sequence[str] = ()) -> None:
    """Unpack an archive from `Sandbox.get_archive` so that its top member becomes ``local``;
    members matching ``exclude`` (see :func:`excluded`) stay out."""
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        members = tar.getmembers()
        if not members:
            raise SandboxError("the sandbox sent an empty archive; check the path.")
        top = members[0].name.split("/", 1)[0]
        for member in members:
            rel = (
                member.name[len(top) :].lstrip("/") if member.name.startswith(top) else member.name
            )
            member.name = rel or "."
        if exclude:
            members = [m for m in members if m.name == "." or not excluded(m.name, exclude)]
        if len(members) == 1 and members[0].isfile():
            local.parent.mkdir(parents=True, exist_ok=True)
            members[0].name = local.name
            tar.extract(members[0], local.parent, filter="tar")
        else:
            local.mkdir(parents=True, exist_ok=True)
            tar.extractall(local, members=[m for m in members if m.name != "."], filter="tar")
