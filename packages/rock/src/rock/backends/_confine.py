"""Path confinement for the local backend: every path a sandbox's file verbs and working
directories take is resolved inside the sandbox root, and one that leads out (by ``..`` or
a symlink) is refused with :class:`PathEscape`; tar members are checked the same way, each
just before it is extracted.
"""

from __future__ import annotations

import io
import os
import posixpath
import stat
import tarfile
from pathlib import Path

from rock.backends.base import PathEscape, PathMissing, SandboxError


def _inside(real: str, root: str) -> bool:
    return real == root or real.startswith(root.rstrip("/") + "/")


class ConfinedRoot:
    """The root directory of sandbox ``sandbox_id`` and the file operations kept inside it.

    A relative path is relative to the root and an absolute one is taken as inside it
    (``/`` is the root, ``/tmp`` is ``<root>/tmp``).
    """

    def __init__(self, root: Path, sandbox_id: str) -> None:
        self.root = root
        self.id = sandbox_id

    def relative(self, path: str) -> str:
        if "\0" in path:
            raise SandboxError(f"{path!r} holds a NUL byte; pass a plain path.")
        rel = posixpath.normpath(path.lstrip("/") or ".")
        if rel == ".." or rel.startswith("../"):
            raise self._escape(path)
        return rel

    def _escape(self, path: str) -> PathEscape:
        return PathEscape(
            f"{path} resolves outside the sandbox root {self.root}; use a path inside it."
        )

    def resolve(self, path: str) -> str:
        """The real host path of ``path`` inside the root, symlinks followed and checked."""
        real = os.path.realpath(os.path.join(self.root, self.relative(path)))
        if not _inside(real, str(self.root)):
            raise self._escape(path)
        return real

    def workdir(self, cwd: str | None) -> str:
        if cwd is None:
            return str(self.root)
        real = self.resolve(cwd)
        if not os.path.isdir(real):
            raise SandboxError(
                f"working directory {cwd} does not exist in sandbox {self.id}; create it first."
            )
        return real

    def read_file(self, path: str) -> bytes:
        real = self.resolve(path)
        try:  # O_NONBLOCK: a fifo must not hang the open
            fd = os.open(real, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except FileNotFoundError:
            raise PathMissing(f"{path} does not exist in sandbox {self.id}.") from None
        except OSError as exc:
            raise SandboxError(
                f"cannot read {path} in sandbox {self.id}: {exc.strerror}."
            ) from None
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise SandboxError(
                    f"{path} in sandbox {self.id} is not a regular file; use download for trees."
                )
            os.set_blocking(fd, True)
            chunks = []
            while chunk := os.read(fd, 1 << 20):
                chunks.append(chunk)
            return b"".join(chunks)
        finally:
            os.close(fd)

    def write_file(self, path: str, data: bytes, mode: int = 0o644) -> None:
        """Write ``data`` to ``path`` with ``mode``, making parent directories; a final
        symlink is followed only when it stays inside the root."""
        real = self.resolve(path)
        try:
            os.makedirs(os.path.dirname(real), exist_ok=True)
            fd = os.open(
                real, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600
            )
        except IsADirectoryError:
            raise SandboxError(
                f"{path} in sandbox {self.id} is a directory; write to a file path."
            ) from None
        except OSError as exc:
            raise SandboxError(
                f"cannot write {path} in sandbox {self.id}: {exc.strerror}."
            ) from None
        with open(fd, "wb", closefd=True) as fh:
            fh.write(data)
            os.fchmod(fh.fileno(), mode)

    def put_archive(self, directory: str, data: bytes) -> None:
        """Unpack a tar archive into ``directory`` (made if missing), keeping modes but not
        setuid/setgid bits or owners. A member whose path or link target leads outside the
        root, or with an absolute name, is refused with :class:`PathEscape`; device files
        are refused too."""
        dest = self.resolve(directory)
        try:
            os.makedirs(dest, exist_ok=True)
            with tarfile.open(fileobj=io.BytesIO(data)) as tar:
                tar.extractall(dest, filter=self._member_filter)
        except SandboxError:
            raise
        except tarfile.TarError as exc:
            raise SandboxError(
                f"the archive for {directory} is not a valid tar stream ({exc}); send a tar archive."
            ) from None
        except OSError as exc:
            raise SandboxError(
                f"cannot write into {directory} in sandbox {self.id}: {exc.strerror or exc}."
            ) from None

    def _member_filter(self, member: tarfile.TarInfo, dest: str) -> tarfile.TarInfo:
        """Called by tarfile just before each member is extracted, so the checks see the
        links that earlier members made."""
        name, root = member.name, str(self.root)
        if name.startswith("/"):
            raise PathEscape(
                f"archive member {name} has an absolute name; use names relative to the target directory."
            )
        rel = posixpath.normpath(name)
        target = os.path.join(dest, rel)
        if rel == ".." or rel.startswith("../") or not _inside(os.path.realpath(target), root):
            raise PathEscape(
                f"archive member {name} resolves outside the sandbox root {root}; use paths inside it."
            )
        if member.issym() or member.islnk():
            base = os.path.dirname(target) if member.issym() else dest
            link = os.path.realpath(os.path.join(base, member.linkname))
            if not _inside(link, root):
                raise PathEscape(
                    f"archive member {name} links to {member.linkname}, outside the sandbox root {root}; use links that stay inside it."
                )
        if member.ischr() or member.isblk():
            raise SandboxError(
                f"archive member {name} is a device file; the local backend does not make devices."
            )
        mode = None if member.mode is None else member.mode & 0o1777
        # None: keep the extracting user's ids (tarfile's filters document it; typeshed says int)
        return member.replace(mode=mode, uid=None, gid=None, uname=None, gname=None, deep=False)  # type: ignore[arg-type]

    def get_archive(self, path: str) -> bytes:
        """A tar of ``path`` (a symlink to it followed) whose top member is its base name."""
        real = self.resolve(path)
        if not os.path.exists(real):
            raise PathMissing(f"{path} does not exist in sandbox {self.id}.")
        rel = self.relative(path)
        name = posixpath.basename(rel) if rel != "." else self.root.name or "root"
        buf = io.BytesIO()
        try:
            with tarfile.open(fileobj=buf, mode="w") as tar:
                tar.add(real, arcname=name)
        except OSError as exc:
            raise SandboxError(f"cannot read {path} in sandbox {self.id}: {exc}.") from None
        return buf.getvalue()
