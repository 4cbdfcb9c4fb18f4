"""Where the agent's tools act. :class:`SandboxWorkspace` lives in
:mod:`iflow.workspace.sandbox` (it needs the optional rock extra)."""

from iflow.workspace.base import ExecOutput, Workspace
from iflow.workspace.local import LocalWorkspace
from iflow.workspace.shell import ShellSession

__all__ = ["ExecOutput", "LocalWorkspace", "ShellSession", "Workspace"]
