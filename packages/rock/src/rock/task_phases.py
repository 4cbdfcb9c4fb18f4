"""What a Harbor task asks of the container around its agent, for the episode room
(:mod:`rock.episode`) to call: a healthcheck before the agent, collect hooks after it, the
artifacts copied out (with Harbor's manifest), and a sandbox seen as the task's user. A hook
or an artifact of another compose service goes to that service's container
(:class:`ServicePort`)."""

from __future__ import annotations

import io
import json
import posixpath
import tarfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Protocol

from ale.sandbox import SandboxVerbs
from ale.task import CollectHook, Healthcheck, TaskArtifact
from rock.backends.base import ExecVerb, Sandbox, SandboxError, unpack_download
from rock.models import ExecRequest, ExecResult


class EpisodeSandbox(SandboxVerbs, Protocol):
    """The sandbox an episode lends its agent, and can interrupt at the agent's timeout."""

    def interrupt(self) -> int:
        """Stop the commands running in the sandbox; how many were."""
        ...

    def run(self, request: ExecRequest) -> ExecResult:
        """Run one command as ``request`` says (as another user, say)."""
        ...


class ServicePort(Protocol):
    """Another service of a compose task (a database beside the agent's container), as the
    episode reaches it: commands, files out, and its address from this machine."""

    def run(self, request: ExecRequest) -> ExecResult: ...

    def get_archive(self, path: str) -> bytes: ...

    def address(self) -> str | None:
        """Its IP address on the trial's network (None when it has none)."""
        ...


Services = Mapping[str, ServicePort]
"""A compose task's side services by name (empty for a task without them)."""


class AsUser(ExecVerb):
    """A sandbox seen as one user (Harbor's ``[agent] user`` and ``[verifier] user``): every
    command runs as ``user``, and a file written through it becomes the user's; reading and
    archives go on as before."""

    def __init__(self, inner: EpisodeSandbox, user: str) -> None:
        self.inner, self.user = inner, user

    @property
    def id(self) -> str:
        return self.inner.id

    def run(self, request: ExecRequest) -> ExecResult:
        return self.inner.run(request.model_copy(update={"user": request.user or self.user}))

    def read_file(self, path: str) -> bytes:
        return self.inner.read_file(path)

    def write_file(self, path: str, data: bytes, mode: int = 0o644) -> None:
        self.inner.write_file(path, data, mode)
        self.inner.run(ExecRequest(command=["chown", self.user, path], timeout=60))

    def put_archive(self, directory: str, data: bytes) -> None:
        self.inner.put_archive(directory, data)
        with tarfile.open(fileobj=io.BytesIO(data)) as tar:
            tops = sorted({m.name.split("/", 1)[0] for m in tar.getmembers()} - {"", "."})
        if tops:
            paths = [posixpath.join(directory, top) for top in tops]
            self.inner.run(ExecRequest(command=["chown", "-R", self.user, *paths], timeout=60))

    def get_archive(self, path: str) -> bytes:
        return self.inner.get_archive(path)

    def interrupt(self) -> int:
        return self.inner.interrupt()

    def attach_argv(self, argv: list[str], *, user: str | None = None) -> list[str]:
        attach = getattr(self.inner, "attach_argv", None)
        if attach is None:
            raise SandboxError("this sandbox cannot attach a program's standard streams.")
        argv_here: list[str] = attach(argv, user=user or self.user)
        return argv_here

    def delete(self) -> None:
        self.inner.delete()


COLLECT_LOG = "collect-hooks.log"
"""Where, beside the verifier's directory, what each collect hook did is written."""


def wait_healthy(
    sandbox: Sandbox,
    check: Healthcheck,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> str | None:
    """Run ``check`` until it exits 0 (None), as Harbor does: failures within its start
    period do not count; ``retries`` in a row after it give up (why, for people)."""
    began = clock()
    failures = 0
    while True:
        done = sandbox.exec(check.command, timeout=check.timeout_sec)
        if done.ok:
            return None
        starting = clock() - began < check.start_period_sec
        if not starting:
            failures += 1
            if failures >= check.retries:
                said = (done.stderr_text.strip() or done.stdout_text.strip())[-200:]
                times = f"{failures} time{'s' if failures > 1 else ''}"
                why = f"exit {done.exit_code}{': ' + said if said else ''}"
                return f"`{check.command}` failed {times} in a row ({why})"
        sleep(check.start_interval_sec if starting else check.interval_sec)


def run_hooks(
    sandbox: Sandbox, hooks: list[CollectHook], log: Path, services: Services | None = None
) -> None:
    """Run the collect hooks in the agent's sandbox, or in the side service each names, best
    effort (as Harbor: a hook that fails never fails the trial); what each did goes to
    ``log``."""
    if not hooks:
        return
    lines = []
    for hook in hooks:
        target = sandbox if hook.service == "main" else (services or {}).get(hook.service)
        if target is None:
            lines.append(
                f"skipped `{hook.command}`: it names service {hook.service!r}, which this "
                "task does not run"
            )
            continue
        try:
            done = target.run(
                ExecRequest(command=hook.command, timeout=hook.timeout_sec, user=hook.user)
            )
        except SandboxError as exc:
            lines.append(f"failed `{hook.command}`: {exc}")
            continue
        said = (done.stdout_text + done.stderr_text).strip()[-500:]
        lines.append(f"exit {done.exit_code} `{hook.command}`" + (f"\n{said}" if said else ""))
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text("\n".join(lines) + "\n", encoding="utf-8")


ARTIFACTS_DIR = "/logs/artifacts"
"""What an agent's container always hands a separate verifier (Harbor's convention)."""


MANIFEST = "manifest.json"
"""What the collection pass writes beside the artifacts: each one's source, destination,
type and status (ok, empty, failed, skipped), as Harbor's manifest."""


def collect_artifacts(
    sandbox: Sandbox,
    artifacts: list[TaskArtifact],
    out: Path,
    services: Services | None = None,
) -> list[tuple[str, Path]]:
    """Harbor's collection pass: ``/logs/artifacts`` (unless an entry names it) and each
    artifact copied out of ``sandbox`` (or out of the side service it names) under ``out``
    (at its destination, else its own path), without what its ``exclude`` names, and
    ``manifest.json``; an artifact that is not there is recorded, never an error. The
    (source, copy) of each one copied."""
    entries = list(artifacts)
    if not any(a.source.rstrip("/") == ARTIFACTS_DIR for a in entries):
        entries.insert(0, TaskArtifact(source=ARTIFACTS_DIR))
    manifest: list[dict[str, Any]] = []
    copied: list[tuple[str, Path]] = []
    for artifact in entries:
        destination = artifact.destination or artifact.source.strip("/")
        record: dict[str, Any] = {
            "source": artifact.source, "destination": destination, "type": None,
            "status": "skipped", "service": artifact.service, "exclude": artifact.exclude,
        }  # fmt: skip
        manifest.append(record)
        claimed = any(r["destination"] == destination for r in manifest[:-1])
        source: Sandbox | ServicePort | None = (
            sandbox if artifact.service == "main" else (services or {}).get(artifact.service)
        )
        if source is None or claimed:
            continue  # a service the task does not run, or a place taken: the first one wins
        target = out / destination
        try:
            archive = source.get_archive(artifact.source)
            unpack_download(archive, target, artifact.exclude)
        except (SandboxError, tarfile.TarError, OSError):
            record["status"] = "failed"  # not there (or unreadable): nothing to hand over
            continue
        record["type"] = "directory" if target.is_dir() else "file"
        empty = target.is_dir() and not any(target.iterdir())
        record["status"] = "empty" if empty else "ok"
        copied.append((artifact.source, target))
    out.mkdir(parents=True, exist_ok=True)
    (out / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    return copied


__all__ = [
    "ARTIFACTS_DIR",
    "COLLECT_LOG",
    "MANIFEST",
    "AsUser",
    "EpisodeSandbox",
    "ServicePort",
    "Services",
    "collect_artifacts",
    "run_hooks",
    "wait_healthy",
]
