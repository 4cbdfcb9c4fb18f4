"""The request/response models shared by the backends, the daemon and the clients.

Bytes (stdin, stdout, stderr, file contents) travel as base64 in JSON, so output is
binary-safe end to end.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from rock.images.base import BASE_IMAGE

DEFAULT_MAX_OUTPUT = 1 << 20

DOCKER_CAPABILITIES = (
    "AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD",
    "NET_BIND_SERVICE", "NET_RAW", "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT",
)  # fmt: skip
"""The capabilities Docker gives a container's root by default."""
DEFAULT_CAPABILITIES = ("CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "SETGID", "SETUID")
"""What a rock sandbox's root keeps: Docker's default set without raw sockets (NET_RAW),
device nodes (MKNOD), file capabilities (SETFCAP), capability bounding (SETPCAP), chroot
(SYS_CHROOT), the audit log (AUDIT_WRITE) and NET_BIND_SERVICE (a container may bind low
ports without it), none of which the bench and synthesis task sets or the probes of common
task commands use; each kept one is used by them (``benchmarks/rock_capabilities.py``)."""
LINUX_CAPABILITIES = frozenset(
    {
        *DOCKER_CAPABILITIES, "AUDIT_CONTROL", "AUDIT_READ", "BLOCK_SUSPEND", "BPF",
        "CHECKPOINT_RESTORE", "DAC_READ_SEARCH", "IPC_LOCK", "IPC_OWNER", "LEASE",
        "LINUX_IMMUTABLE", "MAC_ADMIN", "MAC_OVERRIDE", "NET_ADMIN", "NET_BROADCAST",
        "PERFMON", "SYS_ADMIN", "SYS_BOOT", "SYS_MODULE", "SYS_NICE", "SYS_PACCT",
        "SYS_PTRACE", "SYS_RAWIO", "SYS_RESOURCE", "SYS_TIME", "SYS_TTY_CONFIG", "SYSLOG",
        "WAKE_ALARM",
    }
)  # fmt: skip


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", ser_json_bytes="base64", val_json_bytes="base64")


MAX_SECONDS = 30 * 86400
"""The longest timeout or lifetime a request may ask for (a larger float overflows the
timers it feeds: thread joins, datetimes); ``None`` means no limit where one is optional."""


class SandboxSpec(_Model):
    """How to start a sandbox. Defaults are locked down: no network, bounded resources."""

    image: str = Field(default=BASE_IMAGE, min_length=1, max_length=512)
    """Image to start (docker) or directory to copy as the root (local; None = empty)."""
    memory_mb: int = Field(default=1024, gt=0, le=2**24)
    """Memory limit in MiB (swap included: no extra swap); at most 16 TiB."""
    cpus: float = Field(default=1.0, gt=0, le=1024)
    """CPU limit in cores (at most 1024: the engine takes it in nano-CPUs, a 64-bit integer)."""
    pids_limit: int = Field(default=512, gt=0, le=4194304)
    """Most processes and threads alive at once."""
    network: Literal["none", "bridge"] = "none"
    """'none' (the default) cuts the sandbox off; 'bridge' opens it."""
    runtime: Literal["runc", "runsc"] = "runc"
    """The container runtime: ``runc`` (Docker's own) or ``runsc`` (gVisor: the sandbox's
    system calls go to a kernel of gVisor's, not the host's; ``make engine`` registers it,
    with its network off). Docker sandboxes only."""
    capabilities: list[str] | None = None
    """The Linux capabilities the sandbox's root keeps (names without ``CAP_``); None:
    :data:`DEFAULT_CAPABILITIES`. Docker sandboxes only; never more than the engine allows
    an unprivileged container."""
    workdir: str | None = None
    """Working directory for commands; None keeps the image's."""
    env: dict[str, str] = Field(default_factory=dict)
    """Environment variables of every command."""
    labels: dict[str, str] = Field(default_factory=dict)
    """Extra labels (docker) recorded with the sandbox."""
    ttl_sec: float | None = Field(default=None, gt=0, le=MAX_SECONDS)
    """Delete the sandbox this long after creation."""
    idle_timeout_sec: float | None = Field(default=None, gt=0, le=MAX_SECONDS)
    """Delete the sandbox after this long without a command."""

    @field_validator("capabilities")
    @classmethod
    def _known_capabilities(cls, value: list[str] | None) -> list[str] | None:
        if value is None:
            return None
        names = [v.upper().removeprefix("CAP_") for v in value]
        unknown = sorted(set(names) - LINUX_CAPABILITIES)
        if unknown:
            raise ValueError(
                f"unknown capabilities {', '.join(unknown)}; name Linux capabilities such as "
                "CHOWN or NET_RAW"
            )
        return sorted(set(names))

    def kept_capabilities(self) -> list[str]:
        """The capabilities the sandbox's root keeps."""
        return list(DEFAULT_CAPABILITIES if self.capabilities is None else self.capabilities)


class ExecRequest(_Model):
    """Run one command."""

    command: str | list[str]
    """A shell string (run by bash -c) or an argv list."""
    timeout: float | None = Field(default=60.0, gt=0, le=MAX_SECONDS)
    """Seconds before the command and every process it started are killed; None = no limit."""
    cwd: str | None = None
    """Working directory of the command; None: the sandbox's ``workdir``."""
    env: dict[str, str] = Field(default_factory=dict)
    """Environment variables of this command, over the sandbox's ``env``."""
    stdin: bytes | None = None
    """Bytes fed to the command's standard input; None: no input (it reads EOF)."""
    max_output_bytes: int = Field(default=DEFAULT_MAX_OUTPUT, gt=0)
    """Keep at most this much of stdout and of stderr; the rest is counted and dropped."""
    user: str | None = Field(default=None, min_length=1, max_length=64)
    """Run as this user (a name, ``uid`` or ``uid:gid``); None: the sandbox's own (the
    image's ``USER``). Docker sandboxes only."""
    tag: str | None = Field(default=None, min_length=1, max_length=64)
    """A name the caller gives the command, to interrupt it alone (``interrupt(tag)``)."""


class ExecResult(_Model):
    """What a command did."""

    exit_code: int
    """The exit status; 137 (SIGKILL) when killed at its timeout."""
    stdout: bytes = b""
    """What the command wrote to stdout, at most ``max_output_bytes`` of it."""
    stderr: bytes = b""
    """What the command wrote to stderr, at most ``max_output_bytes`` of it."""
    stdout_truncated: bool = False
    """True when stdout was longer than ``max_output_bytes`` (the rest dropped)."""
    stderr_truncated: bool = False
    """True when stderr was longer than ``max_output_bytes`` (the rest dropped)."""
    stdout_total: int = 0
    """Bytes the command wrote to stdout, kept or not."""
    stderr_total: int = 0
    """Bytes the command wrote to stderr, kept or not."""
    duration_sec: float = 0.0
    """Seconds the command ran (wall clock)."""
    timed_out: bool = False
    """True when the command ran past its timeout and was killed."""
    oom_killed: bool = False
    """True when the sandbox's memory limit killed the command."""

    @property
    def stdout_text(self) -> str:
        return self.stdout.decode("utf-8", errors="replace")

    @property
    def stderr_text(self) -> str:
        return self.stderr.decode("utf-8", errors="replace")

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out


class SessionResult(_Model):
    """What a command in a persistent session did (stdout and stderr interleaved)."""

    exit_code: int
    """The exit status; 130 when interrupted (as Ctrl-C would), 137 when the shell
    had to be restarted."""
    output: bytes = b""
    """What the command printed, at most the session's bound of it (1 MiB by default)."""
    output_truncated: bool = False
    """True when the output was longer than the bound (the rest dropped)."""
    duration_sec: float = 0.0
    """Seconds the command ran (wall clock)."""
    timed_out: bool = False
    """True when the command ran past its timeout and was interrupted."""
    session_restarted: bool = False
    """True when the command could not be interrupted and the shell was restarted (state lost)."""

    @property
    def output_text(self) -> str:
        return self.output.decode("utf-8", errors="replace")


# --- the daemon's API ----------------------------------------------------------------
# Requests and responses of `rock serve`, used unchanged by `rock.Client`.

SandboxStateName = Literal[
    "pending", "starting", "ready", "busy", "paused", "stopped", "deleted", "error"
]
POOL_NAME = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"


class CreateSandboxRequest(_Model):
    """Start a sandbox, or take one from a warm pool.

    With ``pool`` the sandbox comes from that pool (its image and limits; ``spec``'s
    env, workdir, labels and timers still apply). Without it, a pool whose image and
    limits equal ``spec``'s is used when one has an idle sandbox; otherwise a new
    sandbox is started.
    """

    spec: SandboxSpec = Field(default_factory=SandboxSpec)
    """The sandbox to start (with ``pool``: only its env, workdir, labels and timers)."""
    pool: str | None = Field(default=None, pattern=POOL_NAME)
    """Take the sandbox from this warm pool; None: any pool matching ``spec`` (with
    ``use_pools``)."""
    use_pools: bool = True
    """False always starts a new sandbox."""


class TransitionInfo(_Model):
    from_state: SandboxStateName | None
    """The state before; None for the first transition."""
    to_state: SandboxStateName
    """The state after."""
    reason: str | None
    """Why, in words (e.g. ``deleted by its client``); None when none was given."""
    at: datetime
    """When the transition happened."""


class SandboxInfo(_Model):
    """A sandbox as the daemon knows it."""

    id: str
    """The sandbox's id (``sb-`` and 12 hex digits)."""
    state: SandboxStateName
    """Where the sandbox is in its life (``ready``, ``busy``, ``deleted``...)."""
    state_reason: str | None = None
    """Why it reached that state, in words; None when no reason was given."""
    backend: str
    """The backend that runs it: ``docker``, ``local`` or ``ray``."""
    image: str
    """The image (docker) or root directory (local) it started from."""
    spec: SandboxSpec
    """The spec it runs with (from a pool: the pool's, with the client's env, workdir, labels
    and timers)."""
    pool: str | None = None
    """The warm pool it was started for; None when started outside a pool."""
    container_id: str | None = None
    """The backend's container id; None until it has started, or without one."""
    created_at: datetime
    """When the daemon recorded it, before starting it."""
    updated_at: datetime
    """When its state last changed."""
    last_used_at: datetime
    """When it was last handed out or used by a command or file operation
    (``idle_timeout_sec`` counts from it)."""
    expires_at: datetime | None = None
    """When its ``ttl_sec`` runs out and it is deleted; None: never."""
    labels: dict[str, str] = Field(default_factory=dict)
    """The labels of its spec."""
    history: list[TransitionInfo] = Field(default_factory=list)
    """The state history; filled by GET /v1/sandboxes/{id}, empty in listings."""


class PoolSettings(_Model):
    """A warm pool: ``min_idle`` started sandboxes kept waiting, at most ``max_total`` alive."""

    spec: SandboxSpec = Field(default_factory=SandboxSpec)
    """The sandboxes the pool starts."""
    min_idle: int = Field(default=1, ge=0, le=1000)
    """Started sandboxes kept waiting to be acquired (0: none, it starts them on demand)."""
    max_total: int = Field(default=8, ge=1, le=10000)
    """Most sandboxes of the pool alive at once (idle, in use and starting)."""


class PoolInfo(_Model):
    name: str
    """The pool's name."""
    spec: SandboxSpec
    """The sandboxes the pool starts."""
    min_idle: int
    """Started sandboxes the pool keeps waiting."""
    max_total: int
    """Most sandboxes of the pool alive at once."""
    idle: int
    """Started sandboxes waiting to be acquired."""
    in_use: int
    """Sandboxes handed out and not yet released."""
    starting: int
    """Sandboxes being started for the pool."""
    error: str | None = None
    """Why the last attempt to start a sandbox for the pool failed, if it did."""


class SessionInfo(_Model):
    id: str
    """The session's id (``ss-`` and 12 hex digits)."""
    sandbox_id: str
    """The sandbox whose shell the session is."""


class SessionRunRequest(_Model):
    command: str
    """A shell command line, run in the session's shell (cd and exports persist)."""
    timeout: float | None = Field(default=60.0, gt=0, le=MAX_SECONDS)
    """Seconds before the command (not the session) is interrupted; None = no limit."""


class InterruptRequest(_Model):
    tag: str | None = Field(default=None, min_length=1, max_length=64)
    """Only the command run with this tag; None: every command running in the sandbox."""


class Interrupted(_Model):
    interrupted: int
    """How many commands were running, and were stopped."""


class SnapshotRequest(_Model):
    tag: str = Field(min_length=1, max_length=256)
    """The new image's name (``repo:tag``; docker) or snapshot directory name (local)."""


class ForkRequest(_Model):
    count: int = Field(default=1, ge=1, le=20)
    """How many sandboxes start from the one snapshot (1 to 20, as E2B allows)."""


class NetworkRequest(_Model):
    on: bool
    """Open (True) or close the sandbox's network; a sandbox made without one has none to
    open."""


class SnapshotInfo(_Model):
    image: str
    """The new image's id (docker) or directory (local)."""
    tag: str
    """The tag it was asked for."""


class ExecLog(_Model):
    """One recorded command (outputs cut to the daemon's bound)."""

    command: str
    """The command line (an argv list joined with spaces), cut at 4096 characters."""
    exit_code: int | None
    """Its exit status, as :class:`ExecResult` or :class:`SessionResult` gave it."""
    timed_out: bool
    """True when it ran past its timeout."""
    started_at: datetime
    """When it started."""
    duration_sec: float
    """Seconds it ran."""
    stdout_bytes: int
    """Bytes of stdout in its result (at most its ``max_output_bytes``)."""
    stderr_bytes: int
    """Bytes of stderr in its result (0 in a session: its output counts as stdout)."""
    stdout_head: str
    """The first characters of stdout (8192 by default), decoded as UTF-8."""
    stderr_head: str
    """The first characters of stderr (8192 by default), decoded as UTF-8."""
    session_id: str | None = None
    """The session it ran in; None for a plain exec."""


class ImageInfo(_Model):
    id: str
    """The image's short id (docker) or snapshot path (local)."""
    tags: list[str]
    """Its names (``repo:tag``); empty for an untagged image."""
    size_mb: float
    """Its size in MiB, rounded to 0.1."""
    created: str
    """When it was created, as the engine gives it (ISO 8601)."""


class ImageBuild(_Model):
    """An image the daemon built from a build context (``POST /v1/images/build``)."""

    tag: str
    """The local image to start sandboxes from (``rock-bench/<name>:<digest>``)."""
    built: bool
    """False when an image of the same digest was there already (nothing was built)."""
    duration_sec: float = 0.0
    """Seconds the build took; 0 when nothing was built."""
    bases: dict[str, str] = Field(default_factory=dict)
    """Each FROM reference of the Dockerfile and the local image used for it."""
    log: str = ""
    """What the build printed (empty when nothing was built)."""


class Health(_Model):
    status: Literal["ok", "shutting-down"]
    """``ok``, or ``shutting-down`` once the daemon stops taking new work."""
    version: str
    """rock's version."""
    daemon_id: str
    """The daemon's identity, kept in its home; its containers carry it as a label."""
    backend: str
    """The backend its sandboxes run on: ``docker``, ``local`` or ``ray``."""


class ErrorDetail(_Model):
    type: str
    """The exception's class name, e.g. SandboxNotFound, PathEscape, Unauthorized."""
    message: str
    """What went wrong and what to do, in a sentence or two."""
    fields: list[str] = Field(default_factory=list)
    """For invalid requests: where each problem is, e.g. body.spec.memory_mb."""


class ErrorResponse(_Model):
    error: ErrorDetail
    """The error."""
