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

import contextlib
import logging
import secrets
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, TypeVar

from rock.backends.base import (
    Backend,
    PoolNotFound,
    Sandbox,
    SandboxConflict,
    SandboxNotFound,
    Session,
)
from rock.daemon.images import ImagesMixin
from rock.daemon.pools import PoolsMixin, _Pool
from rock.daemon.upkeep import UpkeepMixin
from rock.daemon.verbs import VerbsMixin
from rock.errors import ShuttingDown
from rock.models import (
    CreateSandboxRequest,
    PoolSettings,
    SandboxInfo,
    SandboxSpec,
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
    from rock.bench.images import ImageBuilder

log = logging.getLogger("rock.daemon")

S = SandboxState
T = TypeVar("T")


class SandboxManager(PoolsMixin, UpkeepMixin, ImagesMixin, VerbsMixin):
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
        ttl = (
            ttl_sec if ttl_sec is not None else SandboxSpec.model_validate(record.spec_json).ttl_sec
        )
        # its new TTL and last use before it is busy (reapable) again: a maintenance pass in
        # between would find it past the old TTL (or idle for the pause) and delete it
        self.store.set_expiry(sandbox_id, ttl)
        self.store.touch(sandbox_id)
        done = self.store.transition(sandbox_id, S.BUSY, "resumed by its client")
        with self._lock:
            self._paused.discard(sandbox_id)
        return self._info(done)

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
