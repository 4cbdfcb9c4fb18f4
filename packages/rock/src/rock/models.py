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
    env: dict[str, str] = Field(default_factory=dict)
    stdin: bytes | None = None
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
    stderr: bytes = b""
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    stdout_total: int = 0
    """Bytes the command wrote to stdout, kept or not."""
    stderr_total: int = 0
    duration_sec: float = 0.0
    timed_out: bool = False
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
    output: bytes = b""
    output_truncated: bool = False
    duration_sec: float = 0.0
    timed_out: bool = False
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
    pool: str | None = Field(default=None, pattern=POOL_NAME)
    use_pools: bool = True
    """False always starts a new sandbox."""


class TransitionInfo(_Model):
    from_state: SandboxStateName | None
    to_state: SandboxStateName
    reason: str | None
    at: datetime


class SandboxInfo(_Model):
    """A sandbox as the daemon knows it."""

    id: str
    state: SandboxStateName
    state_reason: str | None = None
    backend: str
    image: str
    spec: SandboxSpec
    pool: str | None = None
    container_id: str | None = None
    created_at: datetime
    updated_at: datetime
    last_used_at: datetime
    expires_at: datetime | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    history: list[TransitionInfo] = Field(default_factory=list)
    """The state history; filled by GET /v1/sandboxes/{id}, empty in listings."""


class PoolSettings(_Model):
    """A warm pool: ``min_idle`` started sandboxes kept waiting, at most ``max_total`` alive."""

    spec: SandboxSpec = Field(default_factory=SandboxSpec)
    min_idle: int = Field(default=1, ge=0, le=1000)
    max_total: int = Field(default=8, ge=1, le=10000)


class PoolInfo(_Model):
    name: str
    spec: SandboxSpec
    min_idle: int
    max_total: int
    idle: int
    """Started sandboxes waiting to be acquired."""
    in_use: int
    """Sandboxes handed out and not yet released."""
    starting: int
    error: str | None = None
    """Why the last attempt to start a sandbox for the pool failed, if it did."""


class SessionInfo(_Model):
    id: str
    sandbox_id: str


class SessionRunRequest(_Model):
    command: str
    timeout: float | None = Field(default=60.0, gt=0, le=MAX_SECONDS)


class InterruptRequest(_Model):
    tag: str | None = Field(default=None, min_length=1, max_length=64)
    """Only the command run with this tag; None: every command running in the sandbox."""


class Interrupted(_Model):
    interrupted: int
    """How many commands were running, and were stopped."""


class SnapshotRequest(_Model):
    tag: str = Field(min_length=1, max_length=256)


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


class ExecLog(_Model):
    """One recorded command (outputs cut to the daemon's bound)."""

    command: str
    exit_code: int | None
    timed_out: bool
    started_at: datetime
    duration_sec: float
    stdout_bytes: int
    stderr_bytes: int
    stdout_head: str
    stderr_head: str
    session_id: str | None = None


class ImageInfo(_Model):
    id: str
    tags: list[str]
    size_mb: float
    created: str


class ImageBuild(_Model):
    """An image the daemon built from a build context (``POST /v1/images/build``)."""

    tag: str
    """The local image to start sandboxes from (``rock-bench/<name>:<digest>``)."""
    built: bool
    """False when an image of the same digest was there already (nothing was built)."""
    duration_sec: float = 0.0
    bases: dict[str, str] = Field(default_factory=dict)
    """Each FROM reference of the Dockerfile and the local image used for it."""
    log: str = ""
    """What the build printed (empty when nothing was built)."""


class Health(_Model):
    status: Literal["ok", "shutting-down"]
    version: str
    daemon_id: str
    backend: str


class ErrorDetail(_Model):
    type: str
    """The exception's class name, e.g. SandboxNotFound, PathEscape, Unauthorized."""
    message: str
    fields: list[str] = Field(default_factory=list)
    """For invalid requests: where each problem is, e.g. body.spec.memory_mb."""


class ErrorResponse(_Model):
    error: ErrorDetail
