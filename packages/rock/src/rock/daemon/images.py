"""Images on the daemon's engine: a sandbox saved as one (snapshot) or forked from one,
images built from a client's context or a folder, asked for, named and removed.

A mixin of `SandboxManager` (it uses the manager's lock, backend and helpers), kept in its own
file so that each file has one subject.
"""

from __future__ import annotations

import builtins
import contextlib
import secrets
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from rock.backends.base import FORK_REPOSITORY, LABEL_FORKED_FROM, Backend, Sandbox, SandboxConflict
from rock.errors import ImageBuildError, InvalidRequest
from rock.models import (
    CreateSandboxRequest,
    ImageBuild,
    ImageInfo,
    SandboxInfo,
    SandboxSpec,
    SnapshotInfo,
)
from rock.store import SandboxRecord

if TYPE_CHECKING:
    from rock.backends.docker import DockerBackend
    from rock.bench.images import ImageBuilder

T = TypeVar("T")


class ImagesMixin:
    """Snapshots and forks, image builds (through rock bench's builder), look-ups, tags and
    removal."""

    _lock: threading.RLock
    _builder: ImageBuilder | None
    backend: Backend

    if TYPE_CHECKING:

        def _check_open(self) -> None: ...
        def _record(self, sandbox_id: str) -> SandboxRecord: ...
        def _box(self, sandbox_id: str, *, allow_stopped: bool = False) -> Sandbox: ...
        def _use(self, sandbox_id: str, action: Callable[[], T]) -> T: ...
        def create(self, request: CreateSandboxRequest) -> SandboxInfo: ...
        def delete(self, sandbox_id: str, reason: str = ...) -> SandboxInfo: ...

    def snapshot(self, sandbox_id: str, tag: str) -> SnapshotInfo:
        box = self._box(sandbox_id, allow_stopped=True)
        image = self._use(sandbox_id, lambda: box.snapshot(tag))
        return SnapshotInfo(image=image, tag=tag)

    def fork(self, sandbox_id: str, count: int = 1) -> builtins.list[SandboxInfo]:
        """``count`` new sandboxes that start from this one's files as they are now (one
        snapshot for all of them, as E2B's fork): its file system saved as an image
        (``rock-fork/<id>:<token>``), each started with the same spec (limits, runtime,
        environment, working directory) and leased to the caller. Running processes, a
        session's working directory and exported variables are not carried; the image goes
        with the last of them. When one cannot start, those started are removed."""
        self._check_open()
        record = self._record(sandbox_id)
        box = self._box(sandbox_id)
        tag = f"{FORK_REPOSITORY}/{sandbox_id}:{secrets.token_hex(4)}"
        self._use(sandbox_id, lambda: box.snapshot(tag))
        spec = SandboxSpec.model_validate(record.spec_json)
        labels = {**spec.labels, LABEL_FORKED_FROM: sandbox_id}
        forked = spec.model_copy(update={"image": tag, "labels": labels})
        made: builtins.list[SandboxInfo] = []
        try:
            for _ in range(count):
                made.append(self.create(CreateSandboxRequest(spec=forked, use_pools=False)))
        except BaseException:
            for info in made:
                with contextlib.suppress(Exception):
                    self.delete(info.id, "its fork group could not all start")
            if not made:  # no container took the snapshot, so no delete will remove it
                with contextlib.suppress(Exception):
                    self.backend.remove_image(tag)
            raise
        return made

    def build_image(self, context: bytes, dockerfile: str, name: str) -> ImageBuild:
        """Build an image from a build context (a tar, gzipped or not, with the Dockerfile at
        ``dockerfile``), base images mapped to local ones as for a task (offline), cached by
        digest: on the daemon's engine, or on the node of a Ray cluster with the most room
        (its sandboxes are placed where their image is)."""
        from rock.backends.docker import DockerBackend
        from rock.bench.images import ImageBuilder, TaskImageError, build_context_tar

        if not isinstance(self.backend, DockerBackend):  # (a cluster's node builds it)
            built = self.backend.build_image(context, dockerfile, name)
            return ImageBuild.model_validate({k: built[k] for k in ImageBuild.model_fields})
        with self._lock:
            builder = self._builder = self._builder or ImageBuilder(self._docker().client)
        try:
            done = build_context_tar(builder, context, dockerfile, name)
        except ValueError as exc:
            raise InvalidRequest(str(exc)) from None
        except TaskImageError as exc:
            raise ImageBuildError(_build_failure(exc)) from None
        return ImageBuild.model_validate(done.model_dump(include=set(ImageBuild.model_fields)))

    def build_folder(self, context: Path, dockerfile: Path, name: str) -> ImageBuild:
        """:meth:`build_image` of a folder on this machine."""
        from rock.bench.images import ImageBuilder, TaskImageError

        with self._lock:
            builder = self._builder = self._builder or ImageBuilder(self._docker().client)
        try:
            done = builder.build_dockerfile(context, dockerfile, name)
        except TaskImageError as exc:
            raise ImageBuildError(_build_failure(exc)) from None
        return ImageBuild.model_validate(done.model_dump(include=set(ImageBuild.model_fields)))

    def has_image(self, ref: str) -> bool:
        """Whether the daemon's engine holds the image ``ref`` (the Docker backend's; the
        images the backend lists otherwise)."""
        from rock.backends.docker import DockerBackend

        if isinstance(self.backend, DockerBackend):
            try:
                self.backend.client.images.get(ref)
            except Exception:  # (NotFound, or a name the engine refuses)
                return False
            return True
        return any(ref in image.tags for image in self.images())

    def tags_of(self, repository: str) -> dict[str, str]:
        """``tag: image id`` of the images named ``repository:…`` on the daemon's engine."""
        from rock.backends.docker import DockerBackend, engine_images

        prefix = f"{repository}:"
        if isinstance(self.backend, DockerBackend):
            found = [
                ImageInfo.model_validate(i) for i in engine_images(self.backend.client, repository)
            ]
        else:
            found = self.images()
        pairs = [(t, image.id) for image in found for t in image.tags]
        return {t[len(prefix) :]: i for t, i in pairs if t.startswith(prefix)}

    def tag_image(self, image: str, tag: str) -> None:
        """Give ``image`` a second name, ``repository:tag`` (the Docker backend's engine)."""
        repository, _, version = tag.rpartition(":")
        self._docker().client.images.get(image).tag(repository, version)

    def _docker(self) -> DockerBackend:
        from rock.backends.docker import DockerBackend

        if not isinstance(self.backend, DockerBackend):
            raise SandboxConflict(
                f"the {self.backend.name} backend does not build images; build the image on "
                "its nodes' engines, or run the daemon with the docker backend."
            )
        return self.backend

    def remove_image(self, tag: str) -> None:
        """Remove an image (a snapshot) from the engine, or every node's engine."""
        self.backend.remove_image(tag)

    def images(self) -> builtins.list[ImageInfo]:
        return [ImageInfo.model_validate(item) for item in self.backend.images()]


def _build_failure(exc: Exception) -> str:
    """A failed build in one sentence, with the last lines it printed."""
    tail = " | ".join(str(getattr(exc, "log", "")).strip().splitlines()[-3:])
    return f"{exc}" + (f" (last lines: {tail})" if tail else "")
