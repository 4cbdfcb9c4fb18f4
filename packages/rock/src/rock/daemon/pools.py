"""Warm pools: started sandboxes kept waiting, handed over in one lease, refilled.

A mixin of `SandboxManager` (it uses the manager's lock, store, backend and helpers),
kept in its own file so that each file has one subject.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

from rock.backends.base import Backend, PoolNotFound, Sandbox, SandboxError
from rock.errors import PoolExhausted
from rock.models import PoolInfo, PoolSettings, SandboxInfo, SandboxSpec
from rock.store import IllegalTransition, SandboxRecord, StateStore, StoreError, UnknownSandbox

log = logging.getLogger("rock.daemon")


def _shape(spec: SandboxSpec) -> tuple[object, ...]:
    """What a pool's sandboxes share with a request for them: image and limits."""
    return (
        spec.image, spec.memory_mb, spec.cpus, spec.pids_limit, spec.network, spec.runtime,
        tuple(spec.kept_capabilities()),
    )  # fmt: skip


class _Pool:
    def __init__(self, name: str, settings: PoolSettings) -> None:
        self.name = name
        self.settings = settings
        self.idle: deque[str] = deque()
        self.members: set[str] = set()  # every live sandbox that came from this pool
        self.starting = 0
        self.error: str | None = None
        self.quiet_until = 0.0

    @property
    def in_use(self) -> int:
        return len(self.members) - len(self.idle)


class PoolsMixin:
    """Pool settings, acquiring from a pool, and refilling pools."""

    _lock: threading.RLock
    _pools: dict[str, _Pool]
    _boxes: dict[str, Sandbox]
    _closing: bool
    _fill: ThreadPoolExecutor
    _wake: threading.Event
    store: StateStore
    backend: Backend
    daemon_id: str
    refill_delay: float

    if TYPE_CHECKING:

        def _info(self, record: SandboxRecord) -> SandboxInfo: ...
        def _start(self, spec: SandboxSpec, pool_name: str | None) -> Sandbox: ...
        def _destroy(self, sandbox_id: str, reason: str) -> SandboxRecord: ...
        def _check_open(self) -> None: ...

    def _matching_pool(self, spec: SandboxSpec) -> str | None:
        shape = _shape(spec)
        with self._lock:
            for pool in self._pools.values():
                if _shape(pool.settings.spec) == shape and pool.idle:
                    return pool.name
        return None

    def _pool_spec(self, pool_name: str, wanted: SandboxSpec) -> SandboxSpec:
        base = self._pools[pool_name].settings.spec
        fields = wanted.model_fields_set & {
            "env",
            "workdir",
            "labels",
            "ttl_sec",
            "idle_timeout_sec",
        }
        return base.model_copy(update={name: getattr(wanted, name) for name in fields})

    def _reserve(self, pool_name: str) -> None:
        with self._lock:
            pool = self._pools[pool_name]
            if len(pool.members) + pool.starting >= pool.settings.max_total:
                raise PoolExhausted(
                    f"pool {pool_name} has no idle sandbox and is at its maximum of "
                    f"{pool.settings.max_total}; release one or raise max_total with 'rock pool set'."
                )
            pool.starting += 1

    def _acquire(self, pool_name: str, wanted: SandboxSpec) -> SandboxInfo | None:
        while True:
            with self._lock:
                pool = self._pools.get(pool_name)
                if pool is None or not pool.idle:
                    return None
                sandbox_id = pool.idle.popleft()
                box = self._boxes.get(sandbox_id)
                # Refill once acquiring pauses: starting a container takes the engine
                # hundreds of ms of CPU, which would slow the rest of a burst.
                pool.quiet_until = time.monotonic() + self.refill_delay
                dry = not pool.idle
            if dry:
                self._wake.set()
            if box is None:
                continue
            spec = self._pool_spec(pool_name, wanted)
            try:
                record = self.store.lease(
                    sandbox_id,
                    spec=spec.model_dump(mode="json"),
                    labels=spec.labels,
                    ttl_sec=spec.ttl_sec,
                    idle_timeout_sec=spec.idle_timeout_sec,
                    reason=f"acquired from pool {pool_name}",
                )
            except (IllegalTransition, UnknownSandbox, StoreError):
                continue  # reaped or failed meanwhile: take the next one
            box.spec = spec
            return self._info(record)

    def set_pool(self, name: str, settings: PoolSettings) -> PoolInfo:
        self._check_open()
        self._put_pool(name, settings)
        self._wake.set()
        return self.pool(name)

    def _put_pool(self, name: str, settings: PoolSettings) -> None:
        self.backend.check_spec(settings.spec)
        if settings.min_idle > settings.max_total:
            raise SandboxError(
                f"pool {name}: min_idle ({settings.min_idle}) cannot exceed max_total "
                f"({settings.max_total}); lower min_idle or raise max_total."
            )
        self.store.put_pool(
            self.daemon_id,
            name,
            spec=settings.spec.model_dump(mode="json"),
            min_idle=settings.min_idle,
            max_total=settings.max_total,
        )
        stale: list[str] = []
        with self._lock:
            pool = self._pools.get(name)
            if pool is None:
                self._pools[name] = _Pool(name, settings)
            else:
                if _shape(pool.settings.spec) != _shape(settings.spec) or (
                    pool.settings.spec != settings.spec
                ):
                    stale = list(pool.idle)  # started with the old spec: replace them
                    pool.idle.clear()
                pool.settings = settings
        for sandbox_id in stale:
            self._destroy(sandbox_id, f"pool {name} was given a new spec")

    def pools(self) -> list[PoolInfo]:
        with self._lock:
            names = sorted(self._pools)
        return [self.pool(name) for name in names]

    def pool(self, name: str) -> PoolInfo:
        with self._lock:
            pool = self._pools.get(name)
            if pool is None:
                raise PoolNotFound(f"no pool named {name}; list them with 'rock pool ls'.")
            return PoolInfo(
                name=name,
                spec=pool.settings.spec,
                min_idle=pool.settings.min_idle,
                max_total=pool.settings.max_total,
                idle=len(pool.idle),
                in_use=pool.in_use,
                starting=pool.starting,
                error=pool.error,
            )

    def delete_pool(self, name: str) -> None:
        with self._lock:
            pool = self._pools.pop(name, None)
        if pool is None:
            raise PoolNotFound(f"no pool named {name}; list them with 'rock pool ls'.")
        self.store.delete_pool(self.daemon_id, name)
        for sandbox_id in list(pool.idle):
            self._destroy(sandbox_id, f"pool {name} was deleted")

    def _fill_pools(self) -> None:
        if self._closing:
            return
        with self._lock:
            plans: list[tuple[str, int]] = []
            trims: list[str] = []
            now = time.monotonic()
            for pool in self._pools.values():
                if pool.idle and now < pool.quiet_until:
                    continue  # acquiring is under way; refill when it pauses
                want = pool.settings.min_idle - len(pool.idle) - pool.starting
                room = pool.settings.max_total - len(pool.members) - pool.starting
                if want > 0 and room > 0:
                    n = min(want, room)
                    pool.starting += n
                    plans.append((pool.name, n))
                extra = len(pool.idle) - pool.settings.min_idle
                for _ in range(max(0, extra)):
                    trims.append(pool.idle.pop())
        for sandbox_id in trims:
            self._destroy(sandbox_id, "its pool shrank")
        for name, n in plans:
            for _ in range(n):
                self._fill.submit(self._fill_one, name)

    def _fill_one(self, name: str) -> None:
        try:
            with self._lock:
                pool = self._pools.get(name)
                spec = pool.settings.spec if pool is not None else None
            if spec is None or self._closing:
                return
            box = self._start(spec, name)
            with self._lock:
                pool = self._pools.get(name)
                if pool is not None and _shape(pool.settings.spec) == _shape(box.spec):
                    pool.idle.append(box.id)
                    pool.error = None
                    return
            self._destroy(box.id, f"pool {name} changed while it started")
        except Exception as exc:
            log.warning("could not start a sandbox for pool %s: %s", name, exc)
            with self._lock:
                pool = self._pools.get(name)
                if pool is not None:
                    pool.error = str(exc)
            time.sleep(1.0)  # do not spin on a broken image
        finally:
            with self._lock:
                pool = self._pools.get(name)
                if pool is not None:
                    pool.starting -= 1
            self._wake.set()
