"""`SandboxManager`: the daemon's brain, with no HTTP in it.

It owns one backend and one state store and keeps them in agreement:

* every sandbox is a row before it is a container, and every move of its life is a
  compare-and-set transition (pending -> starting -> ready -> busy -> deleted, or error);
* warm pools keep ``min_idle`` started sandboxes waiting (state ready) and hand one
  over with a single transition (ready -> busy); a released sandbox is deleted and
  replaced, never reused;
* a maintenance thread reaps sandboxes past their TTL or idle timeout, marks
  sandboxes whose container died as error (with the engine's reason) and refills pools;
* `start()` reconciles the engine with the database after a crash: containers
  labelled as this daemon's are adopted or removed (only those its database records or its
  own rock home made: another home's are left alone), rows without a container are closed;
* `close()` stops taking work, lets in-flight commands finish for a grace period,
  kills the rest, and keeps only sandboxes with TTL left (unless told to clean up).
"""

from __future__ import annotations

import builtins
import contextlib
import logging
import secrets
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from rock.backends._shell import SessionError
from rock.backends.base import (
    FORK_REPOSITORY,
    LABEL_FORKED_FROM,
    Backend,
    PoolNotFound,
    Sandbox,
    SandboxConflict,
    SandboxNotFound,
    Session,
)
from rock.daemon.pools import PoolsMixin, _Pool
from rock.daemon.upkeep import UpkeepMixin
from rock.errors import ImageBuildError, InvalidRequest, ShuttingDown
from rock.models import (
    CreateSandboxRequest,
    ExecLog,
    ExecRequest,
    ExecResult,
    ImageBuild,
    ImageInfo,
    PoolSettings,
    SandboxInfo,
    SandboxSpec,
    SessionInfo,
    SessionResult,
    SessionRunRequest,
    SnapshotInfo,
    TransitionInfo,
)
from rock.store import (
    IllegalTransition,
    SandboxRecord,
    SandboxState,
    StateStore,
    StoreError,
    UnknownSandbox,
)

if TYPE_CHECKING:
    from rock.backends.docker import DockerBackend
    from rock.bench.images import ImageBuilder

log = logging.getLogger("rock.daemon")

S = SandboxState
T = TypeVar("T")

_RUNNING = frozenset({S.READY, S.BUSY})


class SandboxManager(PoolsMixin, UpkeepMixin):
    """Sandboxes, pools and sessions of one daemon; thread-safe."""

    def __init__(
        self,
        backend: Backend,
        store: StateStore,
        *,
        daemon_id: str = "default",
        maintenance_interval: float = 0.25,
        refill_delay: float = 0.2,
        liveness_interval: float = 2.0,
        fill_workers: int = 4,
        metrics: Any = None,
    ) -> None:
        self.backend = backend
        self.store = store
        self.daemon_id = daemon_id
        self.maintenance_interval = maintenance_interval
        self.refill_delay = refill_delay
        self.liveness_interval = liveness_interval
        self.metrics = metrics
        self._lock = threading.RLock()
        self._boxes: dict[str, Sandbox] = {}
        self._stopped: set[str] = set()
        self._builder: ImageBuilder | None = None
        """Builds the images clients send contexts for (made at the first build)."""
        self._paused: set[str] = set()
        """Sandboxes paused by their clients: refused every call until resumed."""
        self._pools: dict[str, _Pool] = {}
        self._sessions: dict[str, tuple[str, Session]] = {}
        self._inflight = 0
        self._inflight_done = threading.Condition(self._lock)
        self._closing = False
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._fill = ThreadPoolExecutor(fill_workers, thread_name_prefix="rock-pool")
        self._last_liveness = 0.0
        self.reconciled: dict[str, int] = {}

    # --- life of the daemon -----------------------------------------------------------

    def start(self, pools: dict[str, PoolSettings] | None = None) -> None:
        """Reconcile, load pools (``pools`` override stored ones), start maintenance."""
        for record in self.store.pools(self.daemon_id):
            self._pools[record.name] = _Pool(
                record.name,
                PoolSettings(
                    spec=SandboxSpec.model_validate(record.spec_json),
                    min_idle=record.min_idle,
                    max_total=record.max_total,
                ),
            )
        for name, settings in (pools or {}).items():
            self._put_pool(name, settings)
        self.reconciled = self.reconcile()
        self._thread = threading.Thread(target=self._maintain, name="rock-maintain", daemon=True)
        self._thread.start()
        self._wake.set()

    @property
    def closing(self) -> bool:
        return self._closing

    def begin_shutdown(self) -> None:
        """Refuse new work from now on (in-flight commands go on)."""
        self._closing = True
        self._wake.set()

    def interrupt_inflight(self) -> int:
        """Kill every command running in any sandbox; return how many were killed."""
        with self._lock:
            boxes = list(self._boxes.values())
        return sum(box.interrupt() for box in boxes)

    def close(self, *, grace_sec: float = 10.0, cleanup: bool = False) -> None:
        """Stop: wait ``grace_sec`` for in-flight commands, kill the rest, then delete
        every sandbox without TTL left (all of them with ``cleanup``)."""
        self.begin_shutdown()
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)
        self._fill.shutdown(wait=True, cancel_futures=True)
        deadline = time.monotonic() + grace_sec
        with self._lock:
            while self._inflight and time.monotonic() < deadline:
                self._inflight_done.wait(deadline - time.monotonic())
        if self._inflight:
            self.interrupt_inflight()
            with self._lock:
                self._inflight_done.wait_for(lambda: self._inflight == 0, 10)
        with self._lock:
            sessions = list(self._sessions.values())
            self._sessions.clear()
        for _, session in sessions:
            with contextlib.suppress(Exception):
                session.close()
        now = datetime.now(UTC)
        for row in self.store.live(self.daemon_id):
            keep = (
                not cleanup
                and row.state in (S.BUSY, S.STOPPED)
                and row.expires_at is not None
                and row.expires_at > now
            )
            if not keep and row.state != S.ERROR:
                self._destroy(row.id, "the daemon shut down")

    # --- sandboxes ------------------------------------------------------------------

    def create(self, request: CreateSandboxRequest) -> SandboxInfo:
        """A sandbox for a client: from a pool when one fits, else newly started."""
        self._check_open()
        started = time.perf_counter()
        pool_name = request.pool
        if pool_name is not None and pool_name not in self._pools:
            raise PoolNotFound(f"no pool named {pool_name}; list them with 'rock pool ls'.")
        if pool_name is None and request.use_pools:
            pool_name = self._matching_pool(request.spec)
        if pool_name is not None:
            info = self._acquire(pool_name, request.spec)
            if info is not None:
                self._observe_acquire("pool", started)
                return info
            if request.pool is None:
                pool_name = None  # the matching pool is empty: start one outside it
        spec = request.spec
        if pool_name is not None:
            spec = self._pool_spec(pool_name, request.spec)
            self._reserve(pool_name)
        try:
            box = self._start(spec, pool_name)
        finally:
            if pool_name is not None:
                with self._lock:
                    self._pools[pool_name].starting -= 1
        try:
            record = self.store.lease(
                box.id,
                spec=spec.model_dump(mode="json"),
                labels=spec.labels,
                ttl_sec=spec.ttl_sec,
                idle_timeout_sec=spec.idle_timeout_sec,
                reason="started for a client",
            )
        except StoreError:
            self._destroy(box.id, "could not be handed over")
            raise
        self._observe_acquire("cold", started)
        return self._info(record)

    def _start(self, spec: SandboxSpec, pool_name: str | None) -> Sandbox:
        """Record, start and mark ready a new sandbox; errors leave the row in error."""
        sandbox_id = "sb-" + secrets.token_hex(6)
        self.store.add_sandbox(
            sandbox_id,
            daemon_id=self.daemon_id,
            backend=self.backend.name,
            image=spec.image,
            spec=spec.model_dump(mode="json"),
            labels=spec.labels,
            pool_key=pool_name,
        )
        self.store.transition(sandbox_id, S.STARTING)
        try:
            box = self.backend.create(spec, sandbox_id=sandbox_id)
        except Exception as exc:
            self._move(sandbox_id, S.ERROR, f"it could not start: {exc}")
            if self.metrics is not None:
                self.metrics.error("start")
            raise
        container = getattr(box, "container_id", None) or getattr(
            getattr(box, "container", None), "id", None
        )
        with self._lock:
            self._boxes[sandbox_id] = box
            if pool_name is not None and pool_name in self._pools:
                self._pools[pool_name].members.add(sandbox_id)
        self.store.transition(
            sandbox_id,
            S.READY,
            f"started on node {box.placement}" if box.placement else None,
            container_id=container,
        )
        return box

    def get(self, sandbox_id: str) -> SandboxInfo:
        record = self._record(sandbox_id)
        info = self._info(record)
        info.history = [
            TransitionInfo(
                from_state=h.from_state.value if h.from_state is not None else None,
                to_state=h.to_state.value,
                reason=h.reason,
                at=h.at,
            )
            for h in self.store.history(sandbox_id)
        ]
        return info

    def list(
        self,
        *,
        states: list[str] | None = None,
        labels: dict[str, str] | None = None,
        pool: str | None = None,
        include_deleted: bool = False,
    ) -> list[SandboxInfo]:
        if states is None and not include_deleted:
            states = [s.value for s in S if s != S.DELETED]
        rows = self.store.list(states=states, daemon_id=self.daemon_id, pool_key=pool, label=labels)
        return [self._info(row) for row in rows]

    def delete(self, sandbox_id: str, reason: str = "deleted by its client") -> SandboxInfo:
        """Release a sandbox: its container is removed (a pool starts a fresh one)."""
        record = self._record(sandbox_id)
        if record.state == S.DELETED:
            return self._info(record)
        return self._info(self._destroy(sandbox_id, reason))

    def set_timeout(self, sandbox_id: str, ttl_sec: float | None) -> SandboxInfo:
        """The sandbox is deleted ``ttl_sec`` from now (None: kept until deleted)."""
        self._box(sandbox_id)
        return self._info(self.store.set_expiry(sandbox_id, ttl_sec))

    def pause(self, sandbox_id: str) -> SandboxInfo:
        """Freeze a sandbox in use (its processes and memory kept) until :meth:`resume`;
        it does not expire while paused."""
        record = self._record(sandbox_id)
        if record.state != S.BUSY:
            raise SandboxConflict(
                f"sandbox {sandbox_id} is {record.state}; only a sandbox in use (busy) can be "
                "paused."
            )
        box = self._box(sandbox_id)
        with self._lock:
            self._paused.add(sandbox_id)
        try:
            box.pause()
        except BaseException:
            with self._lock:
                self._paused.discard(sandbox_id)
            raise
        return self._info(self.store.transition(sandbox_id, S.PAUSED, "paused by its client"))

    def resume(self, sandbox_id: str, ttl_sec: float | None = None) -> SandboxInfo:
        """Let a paused sandbox go on, its timeout started again (``ttl_sec``, or its
        spec's)."""
        record = self._record(sandbox_id)
        with self._lock:
            box = self._boxes.get(sandbox_id) if sandbox_id in self._paused else None
        if record.state != S.PAUSED or box is None:
            raise SandboxConflict(f"sandbox {sandbox_id} is {record.state}, not paused.")
        box.resume()
        self.store.transition(sandbox_id, S.BUSY, "resumed by its client")
        with self._lock:
            self._paused.discard(sandbox_id)
        ttl = (
            ttl_sec if ttl_sec is not None else SandboxSpec.model_validate(record.spec_json).ttl_sec
        )
        return self._info(self.store.set_expiry(sandbox_id, ttl))

    def stop(self, sandbox_id: str) -> SandboxInfo:
        box = self._box(sandbox_id, allow_stopped=True)
        self._close_sessions(sandbox_id)
        with self._lock:  # before the container exits: the liveness check leaves it alone
            self._stopped.add(sandbox_id)
        try:
            box.stop()
        except BaseException:
            with self._lock:
                self._stopped.discard(sandbox_id)
            raise
        return self._info(self.store.transition(sandbox_id, S.STOPPED, "stopped by its client"))

    def snapshot(self, sandbox_id: str, tag: str) -> SnapshotInfo:
        box = self._box(sandbox_id, allow_stopped=True)
        image = self._use(sandbox_id, lambda: box.snapshot(tag))
        return SnapshotInfo(image=image, tag=tag)

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
        from rock.backends.docker import DockerBackend

        prefix = f"{repository}:"
        if isinstance(self.backend, DockerBackend):
            found = self.backend.client.images.list(name=repository)
            pairs = [(t, str(image.id)) for image in found for t in image.tags]
        else:
            pairs = [(t, image.id) for image in self.images() for t in image.tags]
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

    def logs(self, sandbox_id: str, limit: int = 100) -> builtins.list[ExecLog]:
        self._record(sandbox_id)
        return [
            ExecLog.model_validate(r.model_dump(exclude={"id", "sandbox_id"}))
            for r in self.store.execs(sandbox_id, limit)
        ]

    # --- verbs --------------------------------------------------------------------

    def exec(
        self,
        sandbox_id: str,
        request: ExecRequest,
        on_output: Callable[[int, bytes], None] | None = None,
    ) -> ExecResult:
        """Run one command; with ``on_output`` its output is also handed over as it comes
        (``stream``: 1 stdout, 2 stderr)."""
        box = self._box(sandbox_id)
        started_at = datetime.now(UTC)
        with self._tracked():
            result = (
                box.run(request) if on_output is None else box.run_streaming(request, on_output)
            )
        self.store.record_exec(
            sandbox_id,
            command=request.command
            if isinstance(request.command, str)
            else " ".join(request.command),
            exit_code=result.exit_code,
            timed_out=result.timed_out,
            started_at=started_at,
            duration_sec=result.duration_sec,
            stdout=result.stdout,
            stderr=result.stderr,
        )
        self._after_command(result.exit_code, result.timed_out)
        if self.metrics is not None:
            self.metrics.exec_seconds.labels(kind="exec").observe(result.duration_sec)
        return result

    def open_session(self, sandbox_id: str) -> SessionInfo:
        box = self._box(sandbox_id)
        session = box.session()
        session_id = "ss-" + secrets.token_hex(6)
        with self._lock:
            self._sessions[session_id] = (sandbox_id, session)
        self.store.touch(sandbox_id)
        return SessionInfo(id=session_id, sandbox_id=sandbox_id)

    def run_in_session(
        self, sandbox_id: str, session_id: str, request: SessionRunRequest
    ) -> SessionResult:
        session = self._session(sandbox_id, session_id)
        started_at = datetime.now(UTC)
        try:
            with self._tracked():
                result = session.run(request.command, timeout=request.timeout)
        except SessionError:
            with self._lock:
                self._sessions.pop(session_id, None)
            raise
        self.store.record_exec(
            sandbox_id,
            command=request.command,
            exit_code=result.exit_code,
            timed_out=result.timed_out,
            started_at=started_at,
            duration_sec=result.duration_sec,
            stdout=result.output,
            stderr=b"",
            session_id=session_id,
        )
        self._after_command(result.exit_code, result.timed_out)
        if self.metrics is not None:
            self.metrics.exec_seconds.labels(kind="session").observe(result.duration_sec)
        return result

    def set_network(self, sandbox_id: str, on: bool) -> None:
        """Open or close a running sandbox's network (one made with a network only)."""
        box = self._box(sandbox_id)
        self._use(sandbox_id, lambda: box.set_network(on))

    def interrupt(self, sandbox_id: str, tag: str | None = None) -> int:
        """Stop the commands running in the sandbox (the one run with ``tag``); how many."""
        return self._box(sandbox_id).interrupt(tag)

    def interrupt_session(self, sandbox_id: str, session_id: str) -> None:
        """Stop the command running in the session; the session stays."""
        self._session(sandbox_id, session_id).interrupt()

    def close_session(self, sandbox_id: str, session_id: str) -> None:
        session = self._session(sandbox_id, session_id)
        with self._lock:
            self._sessions.pop(session_id, None)
        session.close()

    def read_file(self, sandbox_id: str, path: str) -> bytes:
        box = self._box(sandbox_id, allow_stopped=True)
        return self._use(sandbox_id, lambda: box.read_file(path))

    def write_file(self, sandbox_id: str, path: str, data: bytes, mode: int) -> None:
        box = self._box(sandbox_id)
        self._use(sandbox_id, lambda: box.write_file(path, data, mode))

    def get_archive(self, sandbox_id: str, path: str) -> bytes:
        box = self._box(sandbox_id, allow_stopped=True)
        return self._use(sandbox_id, lambda: box.get_archive(path))

    def put_archive(self, sandbox_id: str, directory: str, data: bytes) -> None:
        box = self._box(sandbox_id)
        self._use(sandbox_id, lambda: box.put_archive(directory, data))

    def images(self) -> builtins.list[ImageInfo]:
        return [ImageInfo.model_validate(item) for item in self.backend.images()]

    # --- helpers ------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closing:
            raise ShuttingDown("the rock daemon is shutting down; retry against a new one.")

    @contextlib.contextmanager
    def _tracked(self) -> Iterator[None]:
        self._check_open()
        with self._lock:
            self._inflight += 1
        try:
            yield
        finally:
            with self._lock:
                self._inflight -= 1
                self._inflight_done.notify_all()

    def _after_command(self, exit_code: int, timed_out: bool) -> None:
        """A command killed by the shutdown (not by its own timeout) is an error, not a result."""
        if self._closing and not timed_out and exit_code in (137, 130, -1):
            raise ShuttingDown(
                "the rock daemon shut down while this command ran, so it was killed; "
                "run it again against a new daemon."
            )

    def _use(self, sandbox_id: str, action: Callable[[], T]) -> T:
        with self._tracked():
            result = action()
        self.store.touch(sandbox_id)
        return result

    def _record(self, sandbox_id: str) -> SandboxRecord:
        try:
            record = self.store.get(sandbox_id)
        except UnknownSandbox:
            raise SandboxNotFound(
                f"no sandbox {sandbox_id}; list them with 'rock sandbox ls'."
            ) from None
        if record.daemon_id != self.daemon_id:
            raise SandboxNotFound(
                f"no sandbox {sandbox_id} in this daemon; list them with 'rock sandbox ls'."
            )
        return record

    def _box(self, sandbox_id: str, *, allow_stopped: bool = False) -> Sandbox:
        with self._lock:
            box = self._boxes.get(sandbox_id)
            waiting = any(sandbox_id in pool.idle for pool in self._pools.values())
            stopped = sandbox_id in self._stopped
            paused = sandbox_id in self._paused
        if box is not None and not waiting and not paused and (allow_stopped or not stopped):
            return box
        record = self._record(sandbox_id)
        if paused:
            raise SandboxConflict(
                f"sandbox {sandbox_id} is paused; resume it first ('rock sandbox resume "
                f"{sandbox_id}', or E2B's connect)."
            )
        if waiting:
            raise SandboxConflict(
                f"sandbox {sandbox_id} is waiting in pool {record.pool_key}; "
                "acquire one with 'rock sandbox create --pool'."
            )
        reason = f" ({record.state_reason})" if record.state_reason else ""
        raise (SandboxNotFound if record.state == S.DELETED else SandboxConflict)(
            f"sandbox {sandbox_id} is {record.state}{reason}; create a new one."
        )

    def _session(self, sandbox_id: str, session_id: str) -> Session:
        with self._lock:
            entry = self._sessions.get(session_id)
        if entry is None or entry[0] != sandbox_id:
            self._box(sandbox_id)
            raise SandboxNotFound(
                f"no session {session_id} in sandbox {sandbox_id}; open one with POST "
                f"/v1/sandboxes/{sandbox_id}/sessions."
            )
        return entry[1]

    def _close_sessions(self, sandbox_id: str) -> None:
        with self._lock:
            mine = [sid for sid, (sb, _) in self._sessions.items() if sb == sandbox_id]
            sessions = [self._sessions.pop(sid)[1] for sid in mine]
        for session in sessions:
            with contextlib.suppress(Exception):
                session.close()

    def _forget(self, sandbox_id: str) -> Sandbox | None:
        with self._lock:
            box = self._boxes.pop(sandbox_id, None)
            self._stopped.discard(sandbox_id)
            self._paused.discard(sandbox_id)
            for pool in self._pools.values():
                pool.members.discard(sandbox_id)
                with contextlib.suppress(ValueError):
                    pool.idle.remove(sandbox_id)
        self._wake.set()
        return box

    def _destroy(self, sandbox_id: str, reason: str) -> SandboxRecord:
        """Remove the container and close the row as deleted (idempotent)."""
        self._close_sessions(sandbox_id)
        box = self._forget(sandbox_id)
        if box is None:
            with contextlib.suppress(SandboxNotFound):
                box = self.backend.get(sandbox_id)
        if box is not None:
            box.delete()
        return self._move(sandbox_id, S.DELETED, reason)

    def _fail(self, sandbox_id: str, reason: str) -> None:
        self._close_sessions(sandbox_id)
        box = self._forget(sandbox_id)
        if box is not None:
            self._quiet_delete(box)
        self._move(sandbox_id, S.ERROR, reason)
        if self.metrics is not None:
            self.metrics.error("sandbox-died")

    def _move(self, sandbox_id: str, state: SandboxState, reason: str) -> SandboxRecord:
        try:
            return self.store.transition(sandbox_id, state, reason)
        except IllegalTransition:
            return self.store.get(sandbox_id)  # already there, or final: nothing to do

    @staticmethod
    def _quiet_delete(box: Sandbox) -> None:
        try:
            box.delete()
        except Exception as exc:
            log.warning("could not remove sandbox %s: %s", box.id, exc)

    def _observe_acquire(self, source: str, started: float) -> None:
        if self.metrics is not None:
            self.metrics.acquire_seconds.labels(source=source).observe(
                time.perf_counter() - started
            )

    def _info(self, record: SandboxRecord) -> SandboxInfo:
        return SandboxInfo(
            id=record.id,
            state=record.state.value,
            state_reason=record.state_reason,
            backend=record.backend,
            image=record.image,
            spec=SandboxSpec.model_validate(record.spec_json),
            pool=record.pool_key,
            container_id=record.container_id,
            created_at=record.created_at,
            updated_at=record.updated_at,
            last_used_at=record.last_used_at,
            expires_at=record.expires_at,
            labels=record.labels,
        )


def _build_failure(exc: Exception) -> str:
    """A failed build in one sentence, with the last lines it printed."""
    tail = " | ".join(str(getattr(exc, "log", "")).strip().splitlines()[-3:])
    return f"{exc}" + (f" (last lines: {tail})" if tail else "")
