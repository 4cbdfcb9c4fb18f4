"""Checked copies into and out of a container, as tar streams through exec.

Docker's archive API works on the container's root file system as the engine sees it, which
is not always what the sandbox sees: under gVisor (runsc) the sandbox keeps its own overlay
and a /tmp of its own, and under either runtime a mount such as /dev/shm hides what the API
writes beneath it; such a copy "succeeds" and never appears. So copies go through ``tar`` in
the sandbox (fed and read over exec), land in a staging folder, are checked there against
the digests computed here (``sha256sum -c``, else python3, else read back), and only then
move into place: a copy that fails or does not match leaves nothing half-written. A copy
is one exec each way where it can be (each exec costs the engine about 50 ms of CPU, and an
episode copies several times): the digests travel in the copy-in's environment, and a
copy-out's own digests follow its tar on stderr. This module holds the shell run in the
sandbox, the host's side of the check, and :class:`Copier`, which the docker backend's file
verbs are.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import posixpath
import re
import secrets
import tarfile
import time
from dataclasses import dataclass
from typing import Protocol

from docker.errors import APIError, NotFound
from docker.models.containers import Container

from rock.backends.base import PathEscape, PathMissing, SandboxError
from rock.models import ExecRequest, ExecResult, SandboxSpec


class CopyTarget(Protocol):
    """What a copy uses of a Docker sandbox (:class:`rock.backends.docker_sandbox.DockerSandbox`):
    its id, spec and container, and running a command in it."""

    id: str
    spec: SandboxSpec
    container: Container

    def run(self, request: ExecRequest) -> ExecResult: ...


STAGE_PREFIX = ".rock-cp-"
"""Name prefix of the staging folder a copy lands in before it moves into place."""
COPY_TIMEOUT = 900.0
"""Seconds one step of a copy may take in the sandbox."""

NO_TAR = 27
"""Exit status of the scripts when the sandbox's image has no tar."""
NOT_A_DIRECTORY = 21
MISSING = 44
MISMATCH = 31
UNCHECKED = 40
"""The sandbox has neither sha256sum nor python3: the host reads the copy back instead."""

_MAKE_STAGE = r"""new= p=$dir
while [ ! -e "$p" ] && [ ! -L "$p" ]; do new=$p; p=$(dirname -- "$p"); done
[ -d "$p" ] || { printf '%s\n' "$p" >&2; exit 21; }
mkdir -p -- "$stage" || exit 22
"""
"""Shell shared by the copy-in scripts: NEW, the first folder of DIR that does not exist
(exit 21 when what is there is no folder), and the staging folder STAGE made."""

_ABORT = r"""abort() { cd / && rm -rf -- "$stage" ${new:+"$new"}; exit "$1"; }
"""
"""Shell: remove STAGE and NEW, then exit with the status given."""

_MERGE = r"""for e in "$stage"/* "$stage"/.[!.]* "$stage"/..?*; do
  [ -e "$e" ] || [ -L "$e" ] || continue
  cp -alf -- "$e" "$dir"/ 2>/dev/null || cp -af -- "$e" "$dir"/ || abort 32
done
"""
"""Shell: move what STAGE holds into DIR (hard links, so no second copy of the data)."""

PREPARE = (
    "\ndir=$1 stage=$2 unpack=$3\n"
    + _MAKE_STAGE
    + r"""printf '%s' "$new"
command -v tar >/dev/null 2>&1 || exit 27
[ "$unpack" = 1 ] || exit 0
tar -x --no-same-owner -f - -C "$stage"
"""
)
"""``sh -c PREPARE rock-cp DIR STAGE UNPACK``: make the staging folder STAGE for a copy into
DIR (printing the first folder of DIR that did not exist, removed if the copy fails) and,
with UNPACK=1, unpack the tar on stdin there."""

CHECK_PY = r"""
import hashlib, re, sys
bad = []
for line in sys.stdin.buffer.read().split(b"\n"):
    if not line:
        continue
    escaped = line.startswith(b"\\")
    line = line[1:] if escaped else line
    digest, name = line[:64].decode(), line[66:]
    if escaped:
        name = re.sub(rb"\\(.)", lambda m: b"\n" if m.group(1) == b"n" else m.group(1), name)
    h = hashlib.sha256()
    try:
        with open(name, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                h.update(block)
    except OSError:
        bad.append(name)
        continue
    if h.hexdigest() != digest:
        bad.append(name)
for name in bad:
    sys.stdout.buffer.write(name + b": FAILED\n")
sys.exit(1 if bad else 0)
"""

FINISH = (
    "\ndir=$1 stage=$2 new=$3 mode=$4\n"
    + _ABORT
    + r"""[ "$mode" = abort ] && abort 0
if [ "$mode" != merge ]; then
  if [ "$mode" = check ]; then cd -- "$dir" || exit 30; else cd -- "$stage" || abort 30; fi
  if command -v sha256sum >/dev/null 2>&1; then
    sha256sum -c --quiet - || { [ "$mode" = check ] && exit 31; abort 31; }
  elif command -v python3 >/dev/null 2>&1; then
    python3 -c "$CHECK_PY" || { [ "$mode" = check ] && exit 31; abort 31; }
  else
    cat >/dev/null; exit 40
  fi
  [ "$mode" = check ] && exit 0
fi
"""
    + _MERGE
    + 'rm -rf -- "$stage"\n'
)
"""``sh -c FINISH rock-cp DIR STAGE NEW MODE`` with the digests (``sha256sum -c`` lines) on
stdin. MODE ``check-merge``: check the copy in STAGE, then move it into DIR (hard links,
so no second copy of the data), or remove it and NEW when it does not match; ``check``:
only check, in DIR (a download's source); ``merge``: move without checking; ``abort``:
remove STAGE and NEW."""

PUT = (
    "\ndir=$1 stage=$2\n"
    + _MAKE_STAGE
    + r"""printf '%s\0' "$new"
command -v tar >/dev/null 2>&1 || exit 27
"""
    + _ABORT
    + r"""tar -x --no-same-owner -f - -C "$stage" || abort "$?"
cd -- "$stage" || abort 30
if [ -n "$ROCK_SUMS" ]; then
  if command -v sha256sum >/dev/null 2>&1; then
    printf '%s' "$ROCK_SUMS" | sha256sum -c --quiet - || abort 31
  elif command -v python3 >/dev/null 2>&1; then
    printf '%s' "$ROCK_SUMS" | python3 -c "$CHECK_PY" || abort 31
  else
    exit 40
  fi
fi
"""
    + _MERGE
    + 'cd / && rm -rf -- "$stage"\n'
)
"""``sh -c PUT rock-cp DIR STAGE`` with the tar on stdin and its digests (``sha256sum -c``
lines) in ``ROCK_SUMS``: PREPARE and FINISH's ``check-merge`` in one exec. It prints NEW
and a NUL first; it exits as they do (40 with the copy left in STAGE, unchecked; 27 with
STAGE made and nothing unpacked), and removes STAGE and NEW itself when the copy fails."""

SUMS_MAX = 64 * 1024
"""The most bytes of digests a copy-in carries in its environment (one string of the
environment may hold 128 KiB); a copy of more files sends them on stdin, in a second exec."""

SUMS_MARK = b"\n__ROCK_SUMS__\n"
"""What a copy-out prints on stderr between tar's messages and the files' digests."""

SUMS_PY = r"""
import hashlib, os, sys
out, base = sys.stdout.buffer, sys.argv[1]
paths = [base] if os.path.isfile(base) else (
    os.path.join(top, name) for top, dirs, files in os.walk(base) for name in files
)
for path in paths:
    if os.path.islink(path) or not os.path.isfile(path):
        continue
    h = hashlib.sha256()
    try:
        with open(path, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                h.update(block)
    except OSError:
        continue
    raw, lead = os.fsencode(path), b""
    if b"\\" in raw or b"\n" in raw:  # sha256sum's escaped form
        raw, lead = raw.replace(b"\\", b"\\\\").replace(b"\n", b"\\n"), b"\\"
    out.write(lead + h.hexdigest().encode() + b"  " + raw + b"\n")
"""

GET = r"""
parent=$1 base=$2
cd -- "$parent" 2>/dev/null && { [ -e "$base" ] || [ -L "$base" ]; } || exit 44
command -v tar >/dev/null 2>&1 || exit 27
tar -c -f - -- "$base"
st=$?
printf '\n__ROCK_SUMS__\n' >&2
if command -v sha256sum >/dev/null 2>&1 && command -v find >/dev/null 2>&1; then
  find "./$base" -type f -exec sha256sum -- {} + >&2
elif command -v python3 >/dev/null 2>&1; then
  python3 -c "$SUMS_PY" "./$base" >&2
else
  printf 'unchecked\n' >&2
fi
exit "$st"
"""
"""``sh -c GET rock-cp PARENT BASE``: PACK, then (on stderr, after :data:`SUMS_MARK`) the
digest of every regular file under PARENT/BASE as the sandbox sees it once tar is done, in
``sha256sum``'s form, or ``unchecked`` where it has neither sha256sum nor python3."""

PACK = r"""
parent=$1 base=$2
cd -- "$parent" 2>/dev/null && { [ -e "$base" ] || [ -L "$base" ]; } || exit 44
command -v tar >/dev/null 2>&1 || exit 27
tar -c -f - -- "$base"
"""
"""``sh -c PACK rock-cp PARENT BASE``: a tar of PARENT/BASE on stdout, its top member BASE."""


@dataclass(frozen=True)
class Manifest:
    """The regular files of an archive (name -> sha256) and how many bytes they hold."""

    digests: dict[str, str]
    size: int

    def check_lines(self, prefix: str = "") -> bytes:
        """``sha256sum -c`` input for these files, each name under ``prefix``."""
        out = bytearray()
        for name, digest in self.digests.items():
            path = posixpath.join(prefix, name) if prefix else name
            if "\\" in path or "\n" in path:  # coreutils' escaped form
                path = path.replace("\\", "\\\\").replace("\n", "\\n")
                out += b"\\"
            out += f"{digest}  {path}\n".encode("utf-8", "surrogateescape")
        return bytes(out)


def manifest(archive: bytes, what: str) -> Manifest:
    """The manifest of a tar archive; ``what`` names it in the error when it is not one."""
    digests: dict[str, str] = {}
    size = 0
    try:
        with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
            for member in tar:
                if not member.isfile():
                    continue
                fh = tar.extractfile(member)
                assert fh is not None
                h = hashlib.sha256()
                while block := fh.read(1 << 20):
                    h.update(block)
                digests[member_name(member.name)] = h.hexdigest()
                size += member.size
    except (tarfile.TarError, EOFError) as exc:
        raise SandboxError(f"{what} is not a whole tar archive ({exc}); send it again.") from None
    return Manifest(digests, size)


def member_name(name: str) -> str:
    """A member's name as tar extracts it: no leading ``./`` or ``/``."""
    while name.startswith("./"):
        name = name[2:]
    return name.lstrip("/")


def first_failed(output: bytes) -> str | None:
    """The first name ``sha256sum -c`` (or its python3 stand-in) says did not match."""
    for line in output.decode("utf-8", "replace").splitlines():
        name, sep, _ = line.partition(": FAILED")
        if sep:
            return name.removeprefix("\\")
    return None


def listed_sums(listed: bytes) -> dict[str, str]:
    """The digests a copy-out printed after :data:`SUMS_MARK` (``sha256sum``'s lines, a
    name with a backslash or newline escaped), by member name; other lines are left out."""
    sums: dict[str, str] = {}
    for line in listed.split(b"\n"):
        escaped = line.startswith(b"\\")
        line = line[1:] if escaped else line
        digest, gap, raw = line[:64], line[64:66], line[66:]
        if gap != b"  " or not re.fullmatch(rb"[0-9a-f]{64}", digest):
            continue  # (a message of sha256sum's: a file it could not read)
        if escaped:
            raw = re.sub(rb"\\(.)", lambda m: b"\n" if m.group(1) == b"n" else m.group(1), raw)
        name = member_name(raw.decode("utf-8", "surrogateescape"))
        sums[name] = digest.decode()
    return sums


def _env_text(sums: bytes) -> str | None:
    """``sums`` as the value of an environment variable, or None when it does not fit
    (:data:`SUMS_MAX`) or is no UTF-8 (a file name that is not)."""
    if len(sums) > SUMS_MAX:
        return None
    try:
        return sums.decode("utf-8")
    except UnicodeDecodeError:
        return None


def sandbox_path(path: str, sandbox_id: str) -> str:
    """``path`` normalised, refused with :class:`PathEscape` when it is not absolute or
    climbs above the sandbox's root (``/../etc``)."""
    if not path.startswith("/"):
        raise PathEscape(
            f"{path} is not an absolute path in sandbox {sandbox_id}; give one under /."
        )
    depth = 0
    for part in path.split("/"):
        if part == "..":
            depth -= 1
            if depth < 0:
                raise PathEscape(
                    f"{path} climbs above the root of sandbox {sandbox_id}; give a path under /."
                )
        elif part not in ("", "."):
            depth += 1
    return posixpath.normpath(path).replace("//", "/")


def mb(size: int) -> str:
    return f"{size / 2**20:.1f} MB"


def no_room(stderr: str) -> bool:
    """Whether a failed step's stderr says the disk is full (GNU tar reports a short write)."""
    return bool(
        re.search(
            r"no space left on device|disk quota exceeded|wrote only \d+ of \d+ bytes", stderr, re.I
        )
    )


def reason(stderr: str) -> str | None:
    """The line of a failed step's stderr that says why (not tar's closing summary)."""
    lines = [line for line in stderr.strip().splitlines() if "Exiting with failure" not in line]
    return lines[0] if lines else None


class Copier:
    """The file verbs of one docker sandbox, as checked tar streams through its exec."""

    def __init__(self, box: CopyTarget) -> None:
        self.box = box

    def read_file(self, path: str) -> bytes:
        archive = self.get_archive(path)
        with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
            member = tar.next()
            if member is None or not member.isfile():
                raise SandboxError(
                    f"{path} in sandbox {self.box.id} is not a regular file; use download for trees."
                )
            fh = tar.extractfile(member)
            assert fh is not None
            return fh.read()

    def write_file(self, path: str, data: bytes, mode: int = 0o644) -> None:
        directory, name = posixpath.split(sandbox_path(path, self.box.id))
        if not name:
            raise SandboxError(
                f"{path} is the root of sandbox {self.box.id}, not a file; name one."
            )
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tar:
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), mode, int(time.time())
            tar.addfile(info, io.BytesIO(data))
        self.put_archive(directory or "/", buf.getvalue())

    def put_archive(self, directory: str, data: bytes) -> None:
        """Unpack ``data`` in a staging folder in ``directory``, check every file against
        its digest there, then move it into place; on any failure nothing is left. One
        exec when the digests fit in its environment (:data:`SUMS_MAX`), else two."""
        directory = sandbox_path(directory, self.box.id)
        expected = manifest(data, f"the archive sent for {directory}")
        stage = posixpath.join(directory, STAGE_PREFIX + secrets.token_hex(4))
        into = f"while copying {mb(expected.size)} into {directory}"
        sums = expected.check_lines()
        one = _env_text(sums)
        if one is not None:
            prepared = self._step(PUT, directory, stage, stdin=data, env={"ROCK_SUMS": one})
            printed, _, after = prepared.stdout.partition(b"\0")
        else:
            prepared = self._step(PREPARE, directory, stage, "1", stdin=data)
            printed, after = prepared.stdout, b""
        new = printed.decode("utf-8", "surrogateescape")
        try:
            if prepared.exit_code == NOT_A_DIRECTORY:
                blocker = prepared.stderr_text.strip().splitlines()[-1]
                raise SandboxError(
                    f"{blocker} in sandbox {self.box.id} is not a folder, so nothing can be copied "
                    f"into {directory}."
                )
            if prepared.exit_code == NO_TAR:
                self._put_without_tar(stage, data, directory)
                finished = self._finish(directory, stage, new, expected)
            elif one is not None:  # the one exec checked and merged too
                finished = prepared.model_copy(update={"stdout": after})
            elif prepared.exit_code != 0:
                raise self._copy_failed(prepared, into, directory, expected.size)
            else:
                finished = self._finish(directory, stage, new, expected)
            if finished.exit_code == UNCHECKED:  # no sha256sum, no python3 there
                self._read_back(stage, expected, directory)
                finished = self._step(FINISH, directory, stage, new, "merge")
            if finished.exit_code == MISMATCH:
                name = first_failed(finished.stdout) or "a file"
                raise SandboxError(
                    f"{posixpath.join(directory, name)} did not arrive whole in sandbox "
                    f"{self.box.id} (its checksum differs from the one sent); nothing was written, "
                    "copy it again."
                )
            if finished.exit_code != 0:
                raise self._copy_failed(finished, into, directory, expected.size)
        except BaseException:
            with contextlib.suppress(SandboxError):
                self._step(FINISH, directory, stage, new, "abort")
            raise

    def _finish(self, directory: str, stage: str, new: str, expected: Manifest) -> ExecResult:
        """FINISH's check-merge of a copy unpacked in ``stage`` (a plain merge when it holds
        no regular file: ``sha256sum -c`` refuses an empty list)."""
        if not expected.digests:
            return self._step(FINISH, directory, stage, new, "merge")
        return self._step(
            FINISH, directory, stage, new, "check-merge", stdin=expected.check_lines()
        )

    def get_archive(self, path: str) -> bytes:
        """A tar of ``path`` read by tar in the sandbox, checked against the sandbox's own
        digests of its files once tar is done, in the same exec (read once more when a file
        changed while it was read)."""
        path = sandbox_path(path, self.box.id)
        if path == "/":
            raise SandboxError(
                f"the whole root of sandbox {self.box.id} cannot be copied out; name a folder in it."
            )
        parent, base = posixpath.split(path)
        failed = "a file"
        for _ in range(2):
            packed = self._step(GET, parent, base, max_output=1 << 62)
            if packed.exit_code == MISSING:
                raise PathMissing(f"{path} does not exist in sandbox {self.box.id}.")
            if packed.exit_code == NO_TAR:
                return self._get_checked_without_tar(path)
            told, mark, listed = packed.stderr.partition(SUMS_MARK)
            if not mark or (
                packed.exit_code != 0 and not (packed.exit_code == 1 and packed.stdout)
            ):
                told = told if mark else packed.stderr  # (tar's 1: a file changed as it was read)
                raise self._copy_failed(
                    packed.model_copy(update={"stderr": told}), f"while copying {path} out", path, 0
                )
            got = manifest(packed.stdout, f"the archive of {path} that sandbox {self.box.id} sent")
            if listed.strip() == b"unchecked":  # neither sha256sum nor python3 there
                return packed.stdout
            theirs = listed_sums(listed)
            changed = [name for name, digest in got.digests.items() if theirs.get(name) != digest]
            if not changed:
                return packed.stdout
            failed = changed[0]
        raise SandboxError(
            f"{posixpath.join(parent, failed)} in sandbox {self.box.id} changed while it was copied "
            "out (twice); copy it again when nothing writes to it."
        )

    def _get_checked_without_tar(self, path: str) -> bytes:
        """Docker's archive API for an image without tar, checked by FINISH in the sandbox."""
        archive = self._get_without_tar(path)
        got = manifest(archive, f"the archive of {path} that sandbox {self.box.id} sent")
        if not got.digests:
            return archive
        parent = posixpath.dirname(path)
        checked = self._step(FINISH, parent, "", "", "check", stdin=got.check_lines())
        if checked.exit_code in (0, UNCHECKED):
            return archive
        if checked.exit_code != MISMATCH:
            raise self._copy_failed(checked, f"while checking {path}", path, got.size)
        failed = first_failed(checked.stdout) or "a file"
        raise SandboxError(
            f"{posixpath.join(parent, failed)} in sandbox {self.box.id} changed while it was copied "
            "out; copy it again when nothing writes to it."
        )

    def _step(
        self,
        script: str,
        *args: str,
        stdin: bytes | None = None,
        max_output: int = 1 << 20,
        env: dict[str, str] | None = None,
    ) -> ExecResult:
        """Run one of this module's scripts in the sandbox, as root."""
        return self.box.run(
            ExecRequest(
                command=["sh", "-c", script, "rock-cp", *args],
                stdin=stdin,
                user="0",
                cwd="/",
                env={"CHECK_PY": CHECK_PY, "SUMS_PY": SUMS_PY, **(env or {})},
                timeout=COPY_TIMEOUT,
                max_output_bytes=max_output,
            )
        )

    def _pack(self, path: str) -> bytes:
        parent, base = posixpath.split(path)
        packed = self._step(PACK, parent, base, max_output=1 << 62)
        if packed.exit_code == MISSING:
            raise PathMissing(f"{path} does not exist in sandbox {self.box.id}.")
        if packed.exit_code == NO_TAR:
            return self._get_without_tar(path)
        if packed.exit_code != 0 and not (packed.exit_code == 1 and packed.stdout):
            raise self._copy_failed(packed, f"while copying {path} out", path, 0)
        return packed.stdout  # (tar's 1: a file changed as it was read; the check says which)

    def _no_tar(self) -> SandboxError:
        return SandboxError(
            f"the image of sandbox {self.box.id} has no tar, which copies under runsc need; "
            "install tar in the image, or use runtime runc."
        )

    def _put_without_tar(self, stage: str, data: bytes, directory: str) -> None:
        """Docker's archive API (runc only: under gVisor it writes beside the sandbox's view)."""
        if self.box.spec.runtime == "runsc":
            raise self._no_tar()
        try:
            self.box.container.put_archive(stage, data)
        except (NotFound, APIError) as exc:
            raise SandboxError(
                f"the engine could not copy into {directory} in sandbox {self.box.id}: "
                f"{getattr(exc, 'explanation', None) or exc}"
            ) from None

    def _get_without_tar(self, path: str) -> bytes:
        if self.box.spec.runtime == "runsc":
            raise self._no_tar()
        try:
            stream, _ = self.box.container.get_archive(path)
        except NotFound:
            raise PathMissing(f"{path} does not exist in sandbox {self.box.id}.") from None
        return b"".join(stream)

    def _read_back(self, stage: str, expected: Manifest, directory: str) -> None:
        """Check a copy where the sandbox cannot: read it back and compare here."""
        base = posixpath.basename(stage)
        got = manifest(self._pack(stage), f"the copy in {directory}").digests
        for name, digest in expected.digests.items():
            if got.get(posixpath.join(base, name)) != digest:
                raise SandboxError(
                    f"{posixpath.join(directory, name)} did not arrive whole in sandbox "
                    f"{self.box.id} (read back, it differs from what was sent); nothing was "
                    "written, copy it again."
                )

    def _copy_failed(self, result: ExecResult, doing: str, where: str, size: int) -> SandboxError:
        """One sentence for a copy's step that failed in the sandbox."""
        err = result.stderr_text.strip()
        if result.oom_killed:
            return SandboxError(
                f"sandbox {self.box.id} ran out of memory {doing} (under runsc the files a sandbox "
                "writes are held in its memory); give it more memory or copy less."
            )
        if result.timed_out:
            return SandboxError(
                f"sandbox {self.box.id} did not finish {doing.removeprefix('while ')} within "
                f"{COPY_TIMEOUT:g} s; nothing was written."
            )
        if no_room(err):
            return SandboxError(
                f"{where} in sandbox {self.box.id} has no room for {mb(size)}; nothing was "
                "written: free space there or copy less."
            )
        why = reason(err) or f"exit status {result.exit_code}"
        return SandboxError(f"sandbox {self.box.id} failed {doing} ({why}); nothing was written.")
