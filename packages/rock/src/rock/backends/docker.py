"""The docker backend: each sandbox is a locked-down container on a real engine.

Here the containers are made, found and listed; what a sandbox does once made (exec,
sessions, files, its lifecycle) is `rock.backends.docker_sandbox`."""

from __future__ import annotations

import builtins
import contextlib
import math
import re
import secrets
import threading
from datetime import UTC, datetime
from typing import Any

import docker
from docker.errors import APIError, DockerException, ImageNotFound, NotFound
from requests.exceptions import RequestException

from rock.backends._owner import EngineClaim
from rock.backends._reap import KEEPALIVE
from rock.backends.base import (
    LABEL_DAEMON,
    LABEL_MANAGED,
    LABEL_ORIGIN,
    LABEL_SANDBOX,
    Backend,
    ImageMissing,
    Sandbox,
    SandboxConflict,
    SandboxError,
    SandboxNotFound,
)
from rock.backends.docker_sandbox import DockerSandbox
from rock.models import DOCKER_CAPABILITIES, SandboxSpec

MASKED_PATHS = [
    *("/proc/" + name for name in ("acpi", "asound", "interrupts", "kcore", "keys")),
    *("/proc/" + name for name in ("latency_stats", "sched_debug", "scsi", "timer_list")),
    *("/proc/timer_stats", "/sys/devices/virtual/powercap", "/sys/firmware"),
    *("/proc/partitions", "/proc/diskstats"),
]
"""What a sandbox cannot read: the paths Docker masks by default, and the host's disks
(``/proc/partitions``, ``/proc/diskstats``), which it leaves visible."""

_NAME = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_IMAGE_REFERENCE = re.compile(
    rf"(?:[A-Za-z0-9.-]+(?::[0-9]+)?/)?{_NAME}(?:/{_NAME})*"  # [registry/]name[/name...]
    r"(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?"  # :tag
    r"(?:@[a-z0-9]+:[0-9a-fA-F]{32,})?"  # @digest
    r"|(?:sha256:)?[0-9a-f]{12,64}"  # an image id
)
"""What the engine takes as an image (checked here: an engine asked for ``/`` answers with
its image list, and the Docker client raises a bare exception on it)."""


class DockerBackend(Backend):
    """Sandboxes as containers, labelled as ours (and as the given daemon's, made from
    ``origin``: see `rock.backends._owner`)."""

    name = "docker"

    def __init__(
        self,
        client: docker.DockerClient | None = None,
        *,
        daemon_id: str = "local",
        origin: str | None = None,
        exec_agent: bool | None = None,
    ) -> None:
        """``exec_agent``: start commands through each sandbox's exec agent
        (`rock.backends._exec_agent`); None: unless ROCK_EXEC_AGENT is 0."""
        if client is None:
            from rock.engine import connect

            client = connect()
        self.client = client
        self.daemon_id = daemon_id
        self.origin = origin
        self.exec_agent = exec_agent
        self._claim: EngineClaim | None = None
        self._cores: int | None = None
        """The engine's CPU count (asked once)."""
        self._next_core = 0
        self._cpu_lock = threading.Lock()

    def claim(self) -> None:
        """Hold the daemon id on this engine (a marker volume) until :meth:`release`."""
        if self._claim is None:
            claim = EngineClaim(self.client, self.daemon_id, self.origin or "")
            claim.take()
            self._claim = claim

    def release(self) -> None:
        claim, self._claim = self._claim, None
        if claim is not None:
            claim.release()

    def create(
        self, spec: SandboxSpec | None = None, *, sandbox_id: str | None = None
    ) -> DockerSandbox:
        spec = spec or SandboxSpec()
        sandbox_id = sandbox_id or "sb-" + secrets.token_hex(6)
        self.check_spec(spec)
        labels = {
            **spec.labels,
            LABEL_MANAGED: "1",
            LABEL_DAEMON: self.daemon_id,
            LABEL_SANDBOX: sandbox_id,
            **({LABEL_ORIGIN: self.origin} if self.origin else {}),
        }
        container = self._start(spec, sandbox_id, labels, self._host_config(spec))
        return DockerSandbox(self.client, container, spec, exec_agent=self.exec_agent)

    def _host_config(self, spec: SandboxSpec) -> dict[str, Any]:
        """The engine's settings that lock a sandbox of ``spec`` down."""
        host_config = self.client.api.create_host_config(
            init=True,
            network_mode=spec.network,
            runtime=None if spec.runtime == "runc" else spec.runtime,
            mem_limit=f"{spec.memory_mb}m",
            memswap_limit=f"{spec.memory_mb}m",
            nano_cpus=int(spec.cpus * 1e9),
            cpuset_cpus=self._cpuset(spec.cpus),
            pids_limit=_host_pids(spec),
            privileged=False,
            cap_drop=["ALL"],
            cap_add=spec.kept_capabilities() or None,
            security_opt=["no-new-privileges"],
            ulimits=self._nproc(spec),
        )
        host_config["MaskedPaths"] = MASKED_PATHS  # the engine's own list, and the host's disks
        return host_config

    def _start(
        self,
        spec: SandboxSpec,
        sandbox_id: str,
        labels: dict[str, str],
        host_config: dict[str, Any],
    ) -> docker.models.containers.Container:
        """Make and start the container; on a failure, leave nothing behind."""
        made: dict[str, Any] | None = None
        try:
            made = self.client.api.create_container(
                spec.image,
                KEEPALIVE,
                name=f"rock-{sandbox_id}",
                hostname=sandbox_id,
                detach=True,
                stdin_open=True,
                labels=labels,
                working_dir=spec.workdir,
                environment=spec.env or None,
                host_config=host_config,
            )
            self.client.api.start(made["Id"])
            container = self.client.containers.get(made["Id"])
        except BaseException as exc:
            # the engine may have made it though the answer never came (a timeout)
            refused = made is None and isinstance(exc, APIError)
            if not refused:
                self._remove_made(made["Id"] if made else None, sandbox_id)
            if isinstance(exc, APIError):
                raise SandboxError(
                    f"the engine refused to start {spec.image}: {exc.explanation or exc}"
                ) from None
            if isinstance(exc, (DockerException, RequestException)):
                raise SandboxError(
                    f"the engine did not answer while starting {spec.image} "
                    f"({type(exc).__name__}); nothing was left behind; try again"
                ) from None
            raise
        return container

    def _remove_made(self, container_id: str | None, sandbox_id: str) -> None:
        """Remove what a create that failed half-way made: by its id, or, when the engine's
        answer never came, the container of that name if it is this create's (its labels)."""
        with contextlib.suppress(Exception):
            if container_id is None:
                found = self.client.api.inspect_container(f"rock-{sandbox_id}")
                mine = found.get("Config", {}).get("Labels") or {}
                if (mine.get(LABEL_SANDBOX), mine.get(LABEL_DAEMON)) != (
                    sandbox_id,
                    self.daemon_id,
                ):
                    return
                container_id = found["Id"]
            self.client.api.remove_container(container_id, force=True)

    def _cpuset(self, cpus: float) -> str | None:
        """The cores a sandbox of ``cpus`` CPUs runs on: as many as its budget rounded up, so
        ``nproc`` inside says what it may use (``make -j$(nproc)`` does not oversubscribe),
        taken in turn so that sandboxes spread over the machine; None (all cores) when the
        budget is the whole machine's or more. The CPU quota still holds a fractional one."""
        if self._cores is None:
            try:
                self._cores = int(self.client.info().get("NCPU") or 0)
            except DockerException:
                self._cores = 0
        wanted = math.ceil(cpus)
        if self._cores <= 1 or wanted >= self._cores:
            return None
        with self._cpu_lock:
            first, self._next_core = self._next_core, (self._next_core + wanted) % self._cores
        return ",".join(str((first + i) % self._cores) for i in range(wanted))

    def check_spec(self, spec: SandboxSpec) -> None:
        if spec.runtime != "runc":
            self._check_runtime(spec)
        if not _IMAGE_REFERENCE.fullmatch(spec.image):
            raise SandboxError(
                f"image {spec.image!r} is not an image reference (name[:tag], lowercase, as "
                "`docker images` lists them, or an image id); give the image to start from."
            )
        try:
            self.client.images.get(spec.image)
        except ImageNotFound:
            raise ImageMissing(
                f"image {spec.image} does not exist on the engine; build it first "
                "(rock image build-base for the base image)."
            ) from None
        except DockerException as exc:
            raise SandboxError(
                f"the engine cannot use image {spec.image!r}: {getattr(exc, 'explanation', None) or exc}"
            ) from None

    @staticmethod
    def _nproc(spec: SandboxSpec) -> list[docker.types.Ulimit] | None:
        """Under gVisor, the pids limit as each user's RLIMIT_NPROC, which gVisor counts
        inside the sandbox (see :func:`_host_pids`). Under runc it would count the host's
        processes of that uid, so runc keeps the cgroup alone."""
        if spec.runtime != "runsc":
            return None
        return [docker.types.Ulimit(name="nproc", soft=spec.pids_limit, hard=spec.pids_limit)]

    def _check_runtime(self, spec: SandboxSpec) -> None:
        """The engine must know the runtime, and give a runsc sandbox the network it asks for."""
        try:
            runtimes = self.client.info().get("Runtimes") or {}
        except DockerException as exc:
            raise SandboxError(f"the engine cannot say which runtimes it has: {exc}") from None
        if spec.runtime not in runtimes:
            raise SandboxError(
                f"the engine has no {spec.runtime} runtime (it has {', '.join(sorted(runtimes))}); "
                "run scripts/ensure-runsc.sh (make engine does) to register gVisor, or ask for "
                "runtime runc."
            )
        args = runtimes[spec.runtime].get("runtimeArgs") or []
        if spec.network != "none" and "--network=none" in args:
            raise SandboxError(
                f"the engine runs {spec.runtime} with --network=none, so a {spec.runtime} "
                "sandbox cannot have network bridge; ask for network none, or runtime runc."
            )

    def _find(self, sandbox_id: str) -> docker.models.containers.Container:
        found = self.client.containers.list(  # this daemon's only: ids are not names
            all=True,
            ignore_removed=True,  # removed between the list and its inspection: not found
            filters={
                "label": [f"{LABEL_SANDBOX}={sandbox_id}", f"{LABEL_DAEMON}={self.daemon_id}"]
            },
        )
        if not found:
            raise SandboxNotFound(f"no sandbox {sandbox_id}; list them with 'rock sandbox ls'.")
        return found[0]

    def get(self, sandbox_id: str) -> DockerSandbox:
        container = self._find(sandbox_id)
        return DockerSandbox(
            self.client, container, _spec_of(container), exec_agent=self.exec_agent
        )

    def list(self) -> list[Sandbox]:
        containers = self.client.containers.list(  # (one removed meanwhile is left out)
            all=True,
            ignore_removed=True,
            filters={"label": [f"{LABEL_MANAGED}=1", f"{LABEL_DAEMON}={self.daemon_id}"]},
        )
        return [
            DockerSandbox(self.client, c, _spec_of(c), exec_agent=self.exec_agent)
            for c in containers
        ]

    def states(self) -> dict[str, dict[str, Any]]:
        # One engine call for all of them (containers.list would inspect each one).
        rows = self.client.api.containers(
            all=True, filters={"label": [f"{LABEL_MANAGED}=1", f"{LABEL_DAEMON}={self.daemon_id}"]}
        )
        out: dict[str, dict[str, Any]] = {}
        for row in rows:
            sandbox_id = (row.get("Labels") or {}).get(LABEL_SANDBOX)
            if sandbox_id:
                out[sandbox_id] = {
                    "state": row.get("State", "unknown"),
                    "status": row.get("Status"),
                }
        return out

    def images(self) -> builtins.list[dict[str, Any]]:
        return engine_images(self.client)

    def remove_image(self, tag: str) -> None:
        try:
            self.client.images.remove(tag, noprune=False)
        except NotFound:
            pass
        except APIError as exc:
            if exc.status_code != 409:
                raise
            raise SandboxConflict(
                f"image {tag} is used by a sandbox; delete the sandboxes started from it first."
            ) from None


def engine_images(
    client: docker.DockerClient, name: str | None = None
) -> builtins.list[dict[str, Any]]:
    """The engine's images (named ``name``, a repository, if given) as dicts with id, tags,
    size_mb, created, from the engine's one list call. The Docker client's ``images.list``
    asks again for each image it listed, so an image removed in between (by another daemon,
    another test) failed the whole list."""
    found: builtins.list[dict[str, Any]] = client.api.images(name=name)
    return [
        {
            "id": str(item["Id"])[:19],  # ("sha256:" and 12 digits, as the client's short id)
            "tags": [t for t in item.get("RepoTags") or [] if t != "<none>:<none>"],
            "size_mb": round((item.get("Size") or 0) / 2**20, 1),
            "created": datetime.fromtimestamp(item.get("Created") or 0, UTC).isoformat(),
        }
        for item in found
    ]


def _host_pids(spec: SandboxSpec) -> int:
    """The host's pids cgroup limit for ``spec``. Under gVisor the cgroup counts gVisor's own
    host threads, about two for each task of the sandbox (measured: 584 for 256 tasks, 1141
    for 512): a cgroup of the sandbox's own limit lets a fork bomb starve gVisor of threads,
    and gVisor ends the whole sandbox. So the sandbox's tasks are held by RLIMIT_NPROC
    inside it, and the host's cgroup, with room for gVisor, guards the host."""
    return spec.pids_limit if spec.runtime != "runsc" else 2 * spec.pids_limit + 512


def _spec_of(container: docker.models.containers.Container) -> SandboxSpec:
    """The spec a labelled container was started with, read back from the engine."""
    host = container.attrs.get("HostConfig", {})
    config = container.attrs.get("Config", {})
    return SandboxSpec(
        image=config.get("Image") or SandboxSpec().image,
        memory_mb=max(1, (host.get("Memory") or 1 << 30) >> 20),
        cpus=(host.get("NanoCpus") or 1_000_000_000) / 1e9,
        pids_limit=next(
            (u["Soft"] for u in host.get("Ulimits") or [] if u.get("Name") == "nproc"),
            host.get("PidsLimit") or 512,
        ),
        network="bridge" if host.get("NetworkMode") == "bridge" else "none",
        runtime="runsc" if host.get("Runtime") == "runsc" else "runc",
        capabilities=[c.removeprefix("CAP_") for c in host.get("CapAdd") or []]
        if "ALL" in (host.get("CapDrop") or [])
        else list(DOCKER_CAPABILITIES),
        workdir=config.get("WorkingDir") or None,
        labels={
            k: v
            for k, v in (config.get("Labels") or {}).items()
            if not k.startswith("dev.ale.rock.")
        },
    )
