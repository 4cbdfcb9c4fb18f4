"""Task environment images: base-image mapping, a digest cache, and the build itself.

A task's Dockerfile names base images (``python:3.13-slim``, the Terminal-Bench bases)
that cannot be pulled here. :class:`ImageMap` maps them to local images through a
declared table (``base_images.toml`` beside this file, extended by
``~/.rock/bench-images.toml``, ``--image-map FILE`` and ``--map-image PATTERN=IMAGE``).
The Dockerfile is rewritten with the local names and built; the image is tagged with a
digest of everything that goes into it (the rewritten Dockerfile, every file of the
build context with its mode, and the ids of the base images), so an unchanged task is
never rebuilt and a changed one always is.

Which image a FROM line gets: a mapping from the command line or a user table first;
otherwise the named image when it exists locally, or when the engine can pull it (a machine
with a registry in reach; offline the engine refuses within milliseconds); otherwise the
default table; otherwise the build fails with a sentence saying how to map it.
"""

from __future__ import annotations

import fnmatch
import hashlib
import io
import os
import re
import tarfile
import tempfile
import threading
import time
import tomllib
from collections.abc import Callable, Iterable
from pathlib import Path

import docker
from docker.errors import APIError, DockerException, ImageNotFound
from pydantic import BaseModel, Field

from ale.task import Task, TaskEnvironment
from rock.bench.compose import ComposeError, Service, read_compose
from rock.errors import RockError
from rock.images.base import BASE_IMAGE

BENCH_BASE = "rock/bench-base:bookworm"
"""The local stand-in for python:3.X-slim and the Terminal-Bench bases."""
BENCH_BASE_DOCKERFILE = Path(__file__).with_name("bench_base.Dockerfile")
DEFAULT_TABLE = Path(__file__).with_name("base_images.toml")
USER_TABLE = Path("~/.rock/bench-images.toml")
IMAGE_REPO = "rock-bench"
"""Repository of task images: ``rock-bench/<task>:<digest>``."""
LABEL_DIGEST = "dev.ale.rock.bench.digest"
LABEL_TASK = "dev.ale.rock.bench.task"


class TaskImageError(RockError):
    """The task's image could not be made; ``log`` holds what the build printed."""

    def __init__(self, message: str, log: str = "") -> None:
        super().__init__(message)
        self.log = log


class ImageMap:
    """An ordered table of (pattern, local image, source); the first match wins."""

    def __init__(self, entries: Iterable[tuple[str, str, str]] = ()) -> None:
        self.entries: list[tuple[str, str, str]] = list(entries)

    @classmethod
    def load(
        cls,
        *,
        files: Iterable[str | Path] = (),
        pairs: Iterable[str] = (),
        user_file: Path | None = USER_TABLE,
        default: bool = True,
    ) -> ImageMap:
        """The table: ``pairs`` (``PATTERN=IMAGE``), then ``files``, then the user's
        table when it exists, then the default one."""
        entries: list[tuple[str, str, str]] = []
        for pair in pairs:
            pattern, sep, image = pair.partition("=")
            if not sep or not pattern.strip() or not image.strip():
                raise ValueError(
                    f"--map-image {pair!r} is not PATTERN=IMAGE; write it like "
                    "'python:3.12*=rock/bench-base:bookworm'."
                )
            entries.append((pattern.strip(), image.strip(), "command line"))
        for file in files:
            entries += _read_table(Path(file).expanduser(), str(file))
        if user_file is not None and user_file.expanduser().is_file():
            entries += _read_table(user_file.expanduser(), str(user_file))
        if default:
            entries += _read_table(DEFAULT_TABLE, "default table")
        return cls(entries)

    def lookup(self, reference: str) -> tuple[str, str] | None:
        """(local image, source) of the first pattern matching ``reference``."""
        for pattern, image, source in self.entries:
            if fnmatch.fnmatchcase(reference, pattern):
                return image, source
        return None


def _read_table(path: Path, source: str) -> list[tuple[str, str, str]]:
    if not path.is_file():
        raise ValueError(f"image map {path} does not exist; check the path.")
    try:
        data = tomllib.loads(path.read_text())
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"image map {path} is not valid TOML ({exc}); fix the file.") from None
    table = data.get("images")
    if not isinstance(table, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in table.items()
    ):
        raise ValueError(
            f'image map {path} needs an [images] table of "pattern" = "image" strings; '
            "see rock/bench/base_images.toml for the form."
        )
    return [(k, v, source) for k, v in table.items()]


class BuildResult(BaseModel):
    """The image a task runs in."""

    tag: str
    digest: str
    built: bool
    """False when the image was already there (the cache hit)."""
    duration_sec: float = 0.0
    bases: dict[str, str] = Field(default_factory=dict)
    """Each FROM reference of the Dockerfile and the image used for it."""
    log: str = ""


class BuildPlan(BaseModel):
    """What to build: the context, the Dockerfile's path in it and its rewritten text."""

    context: Path
    dockerfile: str
    text: str


_FROM = re.compile(r"^(\s*FROM\s+)((?:--\S+\s+)*)(\S+)(.*)$", re.I)
_ARG = re.compile(r"^\s*ARG\s+([A-Za-z_][A-Za-z0-9_]*)(?:=(\S*))?\s*$", re.I)


def rewrite_dockerfile(text: str, resolve: Callable[[str], str]) -> tuple[str, dict[str, str]]:
    """``text`` with every FROM reference replaced by ``resolve(reference)``; stage names
    and ``scratch`` are kept, ``ARG`` defaults before the first FROM are expanded."""
    args: dict[str, str] = {}
    stages: set[str] = set()
    bases: dict[str, str] = {}
    out: list[str] = []
    seen_from = False
    for line in text.splitlines():
        arg = _ARG.match(line)
        if arg and not seen_from:
            args[arg.group(1)] = _expand((arg.group(2) or "").strip("\"'"), args)
        match = _FROM.match(line)
        if not match:
            out.append(line)
            continue
        seen_from = True
        head, flags, ref, rest = match.groups()
        expanded = _expand(ref, args)
        stage = re.match(r"\s+AS\s+(\S+)", rest, re.I)
        if expanded.lower() == "scratch" or expanded.lower() in stages:
            out.append(line)
        else:
            local = resolve(expanded)
            bases[expanded] = local
            out.append(f"{head}{flags}{local}{rest}")
        if stage:
            stages.add(stage.group(1).lower())  # stage names are case-insensitive
    return "\n".join(out) + "\n", bases


def _expand(text: str, args: dict[str, str]) -> str:
    return re.sub(
        r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}|\$([A-Za-z_][A-Za-z0-9_]*)",
        lambda m: args.get(m.group(1) or m.group(2), m.group(0)),
        text,
    )


def plan_build(task: Task) -> BuildPlan:
    """Where the task's image comes from: its compose file's main service when that builds
    (a 2.0 task's compose file first), else its Dockerfile (as Harbor builds ``main``)."""
    env = task.environment
    if env.compose_file is not None and (env.dockerfile is None or _compose_first(task)):
        try:
            compose = read_compose(task)
        except ComposeError as exc:
            raise TaskImageError(str(exc)) from None
        main = compose.main if compose is not None else None
        if main is not None and main.dockerfile is not None and main.build_context is not None:
            return _plan(main.build_context, main.dockerfile)
        if env.dockerfile is None:
            raise TaskImageError(
                f"service {main.name if main else 'main'!r} of {env.compose_file} has no build "
                "section and the task has no environment/Dockerfile; give it "
                "'build: {context: ., dockerfile: Dockerfile}'."
            )
    if env.dockerfile is None:
        raise TaskImageError(
            f"task {task.id} declares no Dockerfile to build; give it environment/Dockerfile."
        )
    return _plan(env.build_context or env.dockerfile.parent, env.dockerfile)


def _plan(context: Path, dockerfile: Path) -> BuildPlan:
    try:
        rel = dockerfile.relative_to(context).as_posix()
    except ValueError:
        rel = ".rock.Dockerfile"
    return BuildPlan(context=context, dockerfile=rel, text=dockerfile.read_text())


def _compose_first(task: Task) -> bool:
    """A 2.0 task whose environment has docker-compose.yaml builds through it."""
    return task.source_format == "tb2" and task.environment.compose_file is not None


def _context_files(context: Path) -> list[Path]:
    files = [p for p in context.rglob("*") if p.is_file() or p.is_symlink()]
    return sorted(files, key=lambda p: p.relative_to(context).as_posix())


def build_digest(plan: BuildPlan, text: str, base_ids: dict[str, str]) -> str:
    """sha256 over the rewritten Dockerfile, the context's files and modes, and base ids."""
    h = hashlib.sha256()
    h.update(b"dockerfile\0" + plan.dockerfile.encode() + b"\0" + text.encode() + b"\0")
    for ref, image_id in sorted(base_ids.items()):
        h.update(f"base\0{ref}\0{image_id}\0".encode())
    for path in _context_files(plan.context):
        rel = path.relative_to(plan.context).as_posix()
        if rel == plan.dockerfile:
            continue
        mode = os.lstat(path).st_mode & 0o777
        data = os.readlink(path).encode() if path.is_symlink() else path.read_bytes()
        h.update(f"file\0{rel}\0{mode:o}\0{len(data)}\0".encode())
        h.update(data)
    return h.hexdigest()


def _context_tar(plan: BuildPlan, text: str) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for path in _context_files(plan.context):
            rel = path.relative_to(plan.context).as_posix()
            if rel != plan.dockerfile:
                tar.add(path, arcname=rel, recursive=False)
        data = text.encode()
        info = tarfile.TarInfo(plan.dockerfile)
        info.size, info.mode, info.mtime = len(data), 0o644, 0
        tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def build_context_tar(
    builder: ImageBuilder, context: bytes, dockerfile: str, name: str
) -> BuildResult:
    """:meth:`ImageBuilder.build_dockerfile` of a build context sent as a tar (gzipped or
    not), its Dockerfile at ``dockerfile`` in it; ValueError for a body that is no tar or a
    Dockerfile outside it, TaskImageError for a build that fails."""
    with tempfile.TemporaryDirectory(prefix="rock-build-") as tmp:
        root = Path(tmp).resolve()
        try:
            with tarfile.open(fileobj=io.BytesIO(context)) as tar:
                tar.extractall(root, filter="data")
        except (tarfile.TarError, OSError) as exc:
            raise ValueError(
                f"the build context is not a tar archive ({exc}); send the context folder as "
                "a tar, gzipped or not."
            ) from None
        target = (root / dockerfile).resolve()
        if not target.is_relative_to(root):
            raise ValueError(f"dockerfile {dockerfile!r} is outside the context.")
        return builder.build_dockerfile(root, target, name)


def image_tag(task_id: str, digest: str) -> str:
    safe = re.sub(r"[^a-z0-9_.-]+", "-", task_id.lower()).strip(".-") or "task"
    return f"{IMAGE_REPO}/{safe[:100]}:{digest[:16]}"


class ImageBuilder:
    """Builds task images once per digest; safe to call from many threads."""

    def __init__(self, client: docker.DockerClient, image_map: ImageMap | None = None) -> None:
        self.client = client
        self.image_map = image_map or ImageMap.load()
        self._locks: dict[str, threading.Lock] = {}
        self._guard = threading.Lock()
        self._failed: dict[str, TaskImageError] = {}
        self._pulls: dict[str, bool] = {}
        """What pulling each reference gave (see :meth:`_pulled`)."""

    # -- bases --------------------------------------------------------------------------
    def _image_id(self, ref: str) -> str | None:
        try:
            return str(self.client.images.get(ref).id)
        except ImageNotFound:
            return None
        except (APIError, DockerException):
            return None

    def resolve(self, reference: str) -> str:
        """The local image to use for FROM ``reference`` (see the module doc)."""
        found = self.image_map.lookup(reference)
        if found is not None and found[1] != "default table":
            return found[0]
        if self._image_id(reference) is not None or self._pulled(reference):
            return reference
        if found is not None:
            return found[0]
        raise TaskImageError(
            f"base image {reference} is not on this machine and no image map entry matches "
            f"it; build or load it locally, or map it with --map-image '{reference}=IMAGE' "
            f"(or in {USER_TABLE})."
        )

    def _pulled(self, reference: str) -> bool:
        """Whether ``reference`` could be pulled now (a machine with a registry in reach);
        offline the engine says no within milliseconds. Tried once per reference."""
        with self._guard:
            if reference in self._pulls:
                return self._pulls[reference]
        try:
            self.client.images.pull(reference)
            ok = self._image_id(reference) is not None
        except (APIError, DockerException):
            ok = False
        with self._guard:
            self._pulls[reference] = ok
        return ok

    def ensure_base(self, image: str) -> str:
        """The id of local base ``image``, building rock/bench-base when it is missing."""
        image_id = self._image_id(image)
        if image_id is not None:
            return image_id
        if image == BENCH_BASE:
            return self._build_bench_base()
        raise TaskImageError(
            f"the image map sends a base to {image}, which is not on this machine; "
            "build or load it, or change the mapping."
        )

    def _build_bench_base(self) -> str:
        with self._lock(BENCH_BASE):
            image_id = self._image_id(BENCH_BASE)
            if image_id is not None:
                return image_id
            if self._image_id(BASE_IMAGE) is None:
                raise TaskImageError(
                    f"{BENCH_BASE} is built on {BASE_IMAGE}, which is missing; build it with "
                    "'rock image build-base' (make base-image)."
                )
            plan = BuildPlan(
                context=BENCH_BASE_DOCKERFILE.parent,
                dockerfile="Dockerfile",
                text=BENCH_BASE_DOCKERFILE.read_text(),
            )
            buf = io.BytesIO()
            with tarfile.open(fileobj=buf, mode="w") as tar:
                data = plan.text.encode()
                info = tarfile.TarInfo("Dockerfile")
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
            log = self._docker_build(buf.getvalue(), "Dockerfile", BENCH_BASE, {}, 600)
            image_id = self._image_id(BENCH_BASE)
            if image_id is None:
                raise TaskImageError(f"building {BENCH_BASE} left no image; see the log.", log)
            return image_id

    # -- task images --------------------------------------------------------------------
    def _lock(self, key: str) -> threading.Lock:
        with self._guard:
            return self._locks.setdefault(key, threading.Lock())

    def prepare(self, task: Task) -> tuple[BuildPlan, str, str, dict[str, str]]:
        """(plan, rewritten Dockerfile, tag, bases) of ``task``; raises TaskImageError."""
        return self._prepare(plan_build(task), task.id)

    def _prepare(self, plan: BuildPlan, name: str) -> tuple[BuildPlan, str, str, dict[str, str]]:
        text, bases = rewrite_dockerfile(plan.text, self.resolve)
        base_ids = {ref: self.ensure_base(image) for ref, image in bases.items()}
        digest = build_digest(plan, text, base_ids)
        return plan, text, image_tag(name, digest), bases

    def build(self, task: Task, *, force: bool = False) -> BuildResult:
        """The task's image, built unless an image with its digest exists."""
        if task.environment.image and task.environment.dockerfile is None:
            return self._prebuilt(task, task.environment.image)
        timeout = task.environment.build_timeout_sec or 1800
        return self._build(plan_build(task), task.id, timeout, force)

    def build_dockerfile(
        self, context: Path, dockerfile: Path, name: str, timeout: float = 1800
    ) -> BuildResult:
        """An image from a plain build context and its Dockerfile (what the daemon builds
        for its clients: a Harbor environment, an E2B template), named after ``name`` and
        cached by digest as a task's is."""
        if not dockerfile.is_file():
            raise TaskImageError(f"there is no Dockerfile at {dockerfile.name}; send one.")
        return self._build(_plan(context, dockerfile), name, timeout, False)

    def _build(self, plan: BuildPlan, name: str, timeout: float, force: bool) -> BuildResult:
        plan, text, tag, bases = self._prepare(plan, name)
        digest = tag.rsplit(":", 1)[1]
        with self._lock(tag):
            if tag in self._failed and not force:
                raise self._failed[tag]
            if not force and self._image_id(tag) is not None:
                return BuildResult(tag=tag, digest=digest, built=False, bases=bases)
            started = time.monotonic()
            labels = {LABEL_DIGEST: digest, LABEL_TASK: name}
            try:
                log = self._docker_build(
                    _context_tar(plan, text), plan.dockerfile, tag, labels, timeout
                )
            except TaskImageError as exc:
                self._failed[tag] = exc
                raise
            return BuildResult(
                tag=tag,
                digest=digest,
                built=True,
                duration_sec=round(time.monotonic() - started, 3),
                bases=bases,
                log=log,
            )

    def service_image(self, task: Task, service: Service) -> str:
        """The image of one of ``task``'s side services: built from its ``build`` like a
        task's (cached by digest), or its ``image`` as :meth:`resolve` finds it."""
        if service.dockerfile is not None:
            own = TaskEnvironment(
                dockerfile=service.dockerfile,
                build_context=service.build_context,
                build_timeout_sec=task.environment.build_timeout_sec,
            )
        elif service.image:
            own = TaskEnvironment(image=service.image)
        else:
            raise TaskImageError(
                f"service {service.name!r} of task {task.id} has neither image nor build; "
                "give it one."
            )
        part = task.model_copy(update={"id": f"{task.id}-{service.name}", "environment": own})
        return self.build(part).tag

    def _prebuilt(self, task: Task, image: str) -> BuildResult:
        local = self.resolve(image)
        image_id = self.ensure_base(local) if local != image else self._image_id(image)
        if image_id is None:
            raise TaskImageError(f"task {task.id} names image {image}, which is not here.")
        return BuildResult(tag=local, digest=image_id, built=False, bases={image: local})

    def _docker_build(
        self, context: bytes, dockerfile: str, tag: str, labels: dict[str, str], timeout: float
    ) -> str:
        lines: list[str] = []
        engine = docker.from_env(timeout=int(timeout))  # a build may print nothing for minutes
        api = engine.api
        try:
            stream = api.build(
                fileobj=io.BytesIO(context),
                custom_context=True,
                dockerfile=dockerfile,
                tag=tag,
                rm=True,
                forcerm=True,
                pull=False,
                decode=True,
                labels=labels,
            )
            error: str | None = None
            for chunk in stream:
                if "stream" in chunk:
                    lines.append(str(chunk["stream"]))
                elif "status" in chunk:
                    lines.append(f"{chunk['status']}\n")
                if "error" in chunk:
                    error = str(chunk["error"]).strip()
                    lines.append(f"ERROR: {error}\n")
        except (APIError, DockerException) as exc:
            error = getattr(exc, "explanation", None) or str(exc)
            lines.append(f"ERROR: {error}\n")
        except Exception as exc:  # a read timeout surfaces as requests' exceptions
            error = f"{type(exc).__name__}: {exc}"
            lines.append(f"ERROR: {error}\n")
        finally:
            engine.close()
        log = "".join(lines)
        if error is not None:
            raise TaskImageError(f"docker build of {tag} failed: {error}", log)
        return log
