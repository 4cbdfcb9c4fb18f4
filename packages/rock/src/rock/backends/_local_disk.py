"""The local backend's sandboxes on disk: their ids, where they live, ``meta.json``, and
the copying and removal of the trees that are their roots and snapshots.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import shutil
import stat
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rock.backends.base import SandboxError

ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
"""What a sandbox id (and a daemon id) may be."""
SNAPSHOTS = "snapshots"
"""The folder of snapshots under the backend's root (so no daemon id)."""


def default_root() -> Path:
    """Where sandboxes live unless told: ``$ROCK_HOME/sandboxes``, else ``~/.rock/sandboxes``."""
    return Path(os.environ.get("ROCK_HOME") or Path.home() / ".rock") / "sandboxes"


def _skip_uncopyable(exclude: str | None) -> Callable[[str, list[str]], set[str]]:
    """A copytree ``ignore`` that drops sockets, fifos and devices, and ``exclude``."""

    def ignore(directory: str, names: list[str]) -> set[str]:
        skipped = set()
        for name in names:
            full = os.path.join(directory, name)
            try:
                mode = os.lstat(full).st_mode
            except OSError:
                skipped.add(name)
                continue
            if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode) or stat.S_ISLNK(mode)) or (
                stat.S_ISDIR(mode) and os.path.realpath(full) == exclude
            ):
                skipped.add(name)
        return skipped

    return ignore


def copy_tree(source: Path, target: Path, *, exclude: Path | None = None) -> None:
    """Copy ``source`` to ``target`` with modes, symlinks as symlinks, special files left out."""
    real_exclude = os.path.realpath(exclude) if exclude is not None else None
    shutil.copytree(source, target, symlinks=True, ignore=_skip_uncopyable(real_exclude))


def rmtree(path: Path) -> None:
    """Remove a tree, read-only directories included; a missing tree is fine."""

    def retry(func: Callable[..., Any], failed: str, _exc: Any) -> None:
        with contextlib.suppress(OSError):
            os.chmod(os.path.dirname(failed), 0o700)
            if os.path.isdir(failed) and not os.path.islink(failed):
                os.chmod(failed, 0o700)
        func(failed)

    if not os.path.lexists(path):
        return
    if sys.version_info >= (3, 12):
        shutil.rmtree(path, onexc=retry)
    else:
        shutil.rmtree(path, onerror=retry)


def tree_size(path: Path) -> int:
    """Bytes under ``path`` (symlinks counted as links, not followed)."""
    total = 0
    for top, dirs, files in os.walk(path):
        for name in dirs + files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(top, name)).st_size
    return total


def write_json(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}")
    tmp.write_text(json.dumps(data, indent=2) + "\n")
    os.replace(tmp, path)


def image_dir(image: str) -> Path | None:
    """The directory an image names, or None for an image name (an empty root)."""
    if not (image in (".", "~") or image.startswith(("/", "./", "../", "~/"))):
        return None
    path = Path(image).expanduser()
    if not path.is_dir():
        raise SandboxError(
            f"image {image} looks like a path but is not a directory on this machine; "
            "pass an existing directory, or an image name for an empty root."
        )
    return path


def new_id() -> str:
    return "sb-" + secrets.token_hex(6)


def check_id(sandbox_id: str) -> str:
    if not ID.fullmatch(sandbox_id) or ".." in sandbox_id:
        raise SandboxError(
            f"sandbox id {sandbox_id!r} is not valid; use letters, digits, '.', '_' and '-' "
            "(no path separators or '..')."
        )
    return sandbox_id
