"""The local backend: each sandbox is a directory on this machine, its commands host processes.

It is for machines without a container engine and for an agent working on the user's
own files. It confines *paths*: every path given to the file verbs, and every working
directory, is resolved inside the sandbox root, and one that leads out (by ``..`` or a
symlink) is refused with :class:`PathEscape`. It does NOT isolate *processes*: commands
run as the calling user with the host's network, memory, CPU and process table, and an
absolute path inside a command means the host's path (``$ROCK_SANDBOX_ROOT`` names the
root). The spec's network, memory, cpus and pids limits are recorded but not enforced.
Use the docker backend where isolation matters.

On disk, a sandbox made by the backend is ``<root>/<daemon_id>/<sandbox_id>/`` holding
``meta.json`` (id, spec, creation time, state) and ``root/``, the sandbox's filesystem.
Snapshots are copies of that filesystem under ``<root>/snapshots/``.

This module makes, finds and lists them; a sandbox itself is
`rock.backends.local_sandbox.LocalSandbox`.
"""

from __future__ import annotations

import json
import os
import shutil
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rock.backends._local_disk import (
    ID,
    SNAPSHOTS,
    check_id,
    copy_tree,
    default_root,
    image_dir,
    new_id,
    rmtree,
    tree_size,
    write_json,
)
from rock.backends._proc import kill_processes
from rock.backends.base import Backend, Sandbox, SandboxError, SandboxNotFound
from rock.backends.local_sandbox import LocalSandbox
from rock.models import SandboxSpec

__all__ = ["LocalBackend", "LocalSandbox", "default_root", "kill_processes"]


class LocalBackend(Backend):
    """Sandboxes as directories under ``root`` (default :func:`default_root`), one folder
    per ``daemon_id``.

    ``spec.image`` names a directory to copy as the initial root when it looks like a
    path (``/…``, ``./…``, ``../…``, ``~/…``; it must exist) — a snapshot's path, for
    instance. Any other string (such as the default docker image name) starts an empty root.
    """

    name = "local"

    def __init__(self, root: Path | None = None, *, daemon_id: str = "local") -> None:
        if daemon_id == SNAPSHOTS:
            raise SandboxError(f"daemon id {daemon_id!r} is reserved; pick another.")
        self.daemon_id = check_id(daemon_id)
        self.root = Path(root) if root is not None else default_root()
        self.snapshots = self.root / SNAPSHOTS

    @property
    def directory(self) -> Path:
        """Where this daemon's sandboxes live."""
        return self.root / self.daemon_id

    def create(
        self, spec: SandboxSpec | None = None, *, sandbox_id: str | None = None
    ) -> LocalSandbox:
        spec = spec or SandboxSpec()
        if spec.runtime != "runc":
            raise SandboxError(
                f"a local sandbox runs on this machine's own kernel, not under {spec.runtime}; "
                "use the Docker backend for runtime runsc."
            )
        if spec.capabilities is not None:
            raise SandboxError(
                "a local sandbox runs as this machine's user, whose capabilities rock cannot "
                "choose; use the Docker backend to set capabilities."
            )
        sandbox_id = check_id(sandbox_id) if sandbox_id is not None else new_id()
        source = image_dir(spec.image)
        home = self.directory / sandbox_id
        self.directory.mkdir(parents=True, exist_ok=True)
        try:
            home.mkdir()
        except FileExistsError:
            raise SandboxError(
                f"sandbox {sandbox_id} already exists; pick another id or delete it first."
            ) from None
        try:
            if source is None:
                (home / "root").mkdir()
            else:
                copy_tree(source, home / "root")
            sandbox = LocalSandbox(
                sandbox_id, spec, home / "root", home=home, snapshots=self.snapshots
            )
            if spec.workdir is not None:
                os.makedirs(sandbox._files.resolve(spec.workdir), exist_ok=True)
            meta = {
                "id": sandbox_id,
                "backend": self.name,
                "daemon_id": self.daemon_id,
                "created": datetime.now(UTC).isoformat(),
                "state": "running",
                "spec": spec.model_dump(mode="json"),
            }
            write_json(home / "meta.json", meta)
        except BaseException as exc:
            rmtree(home)
            if isinstance(exc, (OSError, shutil.Error)) and not isinstance(exc, SandboxError):
                raise SandboxError(f"cannot create sandbox {sandbox_id}: {exc}.") from None
            raise
        return sandbox

    def check_spec(self, spec: SandboxSpec) -> None:
        image_dir(spec.image)

    def images(self) -> list[dict[str, Any]]:
        """The snapshots: their paths are what ``spec.image`` takes."""
        try:
            found = sorted(p for p in self.snapshots.iterdir() if not p.name.startswith("."))
        except FileNotFoundError:
            return []
        out = []
        for path in found:
            size = tree_size(path)
            created = datetime.fromtimestamp(path.stat().st_mtime, UTC).isoformat()
            out.append(
                {
                    "id": str(path),
                    "tags": [path.name],
                    "size_mb": round(size / 2**20, 1),
                    "created": created,
                }
            )
        return out

    def _load(self, home: Path) -> LocalSandbox | None:
        try:
            meta = json.loads((home / "meta.json").read_text())
            spec = SandboxSpec.model_validate(meta["spec"])
        except (OSError, ValueError, KeyError, TypeError):
            return None
        return LocalSandbox(home.name, spec, home / "root", home=home, snapshots=self.snapshots)

    def get(self, sandbox_id: str) -> LocalSandbox:
        valid = ID.fullmatch(sandbox_id) is not None and ".." not in sandbox_id
        found = self._load(self.directory / sandbox_id) if valid else None
        if found is None:
            raise SandboxNotFound(f"no sandbox {sandbox_id}; list them with 'rock sandbox ls'.")
        return found

    def list(self) -> list[Sandbox]:
        try:
            homes = sorted(self.directory.iterdir())
        except FileNotFoundError:
            return []
        found = [self._load(home) for home in homes if ID.fullmatch(home.name)]
        return [sandbox for sandbox in found if sandbox is not None]
