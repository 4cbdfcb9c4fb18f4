"""The persistent shell the model sees, built on :meth:`Workspace.exec` alone so it behaves
the same on every workspace.

Each command is a fresh ``bash -c``: a short prologue restores the state the previous
command left (current directory, exported variables, ``set -o`` and ``shopt`` options),
an ``EXIT`` trap saves it again (so ``exit 3`` still saves and returns 3), and the saved
directory comes back on stderr behind a random marker that is stripped before anyone sees
it. The state lives in ``/tmp/iflow-shell-<random>/`` inside the workspace, in two slots:
a command writes the slot the last good one is not, so a command that times out (its tree
killed, its trap perhaps never run) leaves the state as before.

What does not carry over: plain (unexported) shell variables, functions, aliases, traps,
and ``xtrace``/``verbose`` (they would trace the bookkeeping). A command that replaces the
shell (``exec prog``) or sets its own ``EXIT`` trap keeps the previous directory.
"""

from __future__ import annotations

import asyncio
import secrets
import shlex

from iflow.errors import WorkspaceError
from iflow.workspace.base import ExecOutput, Workspace

_NO_CWD_EXIT = 125


class ShellSession:
    """A shell whose directory and exported variables survive between commands.

    ``cwd`` is the shell's current directory (tools resolve relative paths against it);
    ``env`` holds variables given to every command (the shell's own exports win over them).
    """

    def __init__(self, workspace: Workspace, *, env: dict[str, str] | None = None) -> None:
        self.workspace = workspace
        self.env: dict[str, str] = dict(env or {})
        self.cwd: str = workspace.root
        token = secrets.token_hex(8)
        self.state_dir = f"/tmp/iflow-shell-{token}"
        self._marker = f"\x1e__iflow_{token}__\x1e"
        self._no_cwd = f"__iflow_{token}_no_such_directory__"
        self._slot: int | None = None
        """The slot holding the last good state; None before the first command."""
        self._lock = asyncio.Lock()

    async def run(
        self, command: str, timeout: float | None = 120.0, cwd: str | None = None
    ) -> ExecOutput:
        """Run ``command`` in the shell. ``cwd`` (relative to the shell's directory) runs this
        one command elsewhere without moving the shell; a missing one is a WorkspaceError."""
        async with self._lock:
            target = self.workspace.resolve(cwd, self.cwd) if cwd else None
            slot = 1 if self._slot == 0 else 0
            script = self._script(command, slot, target)
            out = await self.workspace.exec(script, cwd="/", env=self.env or None, timeout=timeout)
            if target and out.exit_code == _NO_CWD_EXIT and out.stderr == self._no_cwd:
                raise WorkspaceError(
                    f"The directory {target} does not exist; create it or pick an existing one."
                )
            out.stderr, pwd = self._take_marker(out.stderr)
            if out.timed_out:
                return out
            if pwd is None:
                pwd = await self._saved_pwd(slot)
            if pwd is not None:
                self._slot = slot
                if target is None and pwd:
                    self.cwd = pwd
            return out

    async def close(self) -> None:
        """Remove the state directory."""
        await self.workspace.exec(f"rm -rf -- {shlex.quote(self.state_dir)}", cwd="/", timeout=30)

    def _script(self, command: str, slot: int, target: str | None) -> str:
        q = shlex.quote
        d = self.state_dir
        state, pwd_file = f"{d}/s{slot}", f"{d}/p{slot}"
        if target is not None:
            enter = (
                f"cd -- {q(target)} 2>/dev/null || "
                f"{{ printf %s {q(self._no_cwd)} >&2; exit {_NO_CWD_EXIT}; }}"
            )
        else:
            note = (
                f"note: the shell's directory {self.cwd} no longer exists, "
                f"so this command runs in {self.workspace.root}\n"
            )
            enter = (
                f"cd -- {q(self.cwd)} 2>/dev/null || {{ printf %s {q(note)} >&2; "
                f"cd -- {q(self.workspace.root)} 2>/dev/null || cd /; }}"
            )
        parts = [f"[ -d {q(d)} ] || mkdir -p -m 700 {q(d)} 2>/dev/null"]
        parts.append(f": >| {q(state)} 2>/dev/null; : >| {q(pwd_file)} 2>/dev/null")
        if self._slot is not None:
            previous = q(f"{d}/s{self._slot}")
            keep = "|".join(q(k) for k in self.env) or "''"
            parts.append(
                f"if [ -s {previous} ]; then for __iflow_v in $(compgen -e); do "
                f'case $__iflow_v in {keep}) ;; *) unset -v "$__iflow_v" ;; esac; '
                "done 2>/dev/null; "
                f". {previous} 2>/dev/null; fi; {{ set +xv; }} 2>/dev/null"
            )
        parts.append(enter)
        save = (
            "{ { export -p; set +o; shopt -p; } >| "
            f'{q(state)}; set +euvxC; printf %s "$PWD" >| {q(pwd_file)}; '
            f'printf %s%s%s {q(self._marker)} "$PWD" {q(self._marker)} >&3; '
            "} 3>&2 2>/dev/null"
        )
        parts.append(f"trap {q(save)} EXIT")
        parts.append(f"__iflow_c={q(command)}")
        parts.append('eval "$__iflow_c"')
        return "; ".join(parts) + "\n"

    def _take_marker(self, stderr: str) -> tuple[str, str | None]:
        """stderr without the state marker, and the directory the marker carried."""
        end = stderr.rfind(self._marker)
        if end == -1:
            return stderr, None
        start = stderr.rfind(self._marker, 0, end)
        if start == -1:
            return stderr[:end] + stderr[end + len(self._marker) :], None
        pwd = stderr[start + len(self._marker) : end]
        return stderr[:start] + stderr[end + len(self._marker) :], pwd

    async def _saved_pwd(self, slot: int) -> str | None:
        """The directory the trap saved in ``slot`` when its marker got lost (stderr capped
        or closed); None when the trap never ran."""
        try:
            data = await self.workspace.read_bytes(f"{self.state_dir}/p{slot}")
        except WorkspaceError:
            return None
        return data.decode("utf-8", errors="replace") or None
